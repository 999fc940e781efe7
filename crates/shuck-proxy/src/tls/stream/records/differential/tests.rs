//! The differential harness over its seed corpus, and over seeded mutations of it: the
//! `records` fuzz target's checks, run by `cargo test` on stable. Every seed is named for the
//! rule it drives; the corpus files in `crates/shuck-proxy/fuzz/seeds/records/` are these
//! seeds (kept current by a test) and any input a fuzzing run found worth keeping.

use super::rules::agree;
use super::script::build::input;
use super::*;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Suites by the input's first byte.
const AES128: u8 = 0;
const AES256: u8 = 1;
const CHACHA: u8 = 2;

fn seed(suite: u8, steps: &[(u8, &[u8])]) -> Vec<u8> {
    [vec![suite], input(steps)].concat()
}

fn repeat(step: (u8, &'static [u8]), n: usize) -> Vec<(u8, &'static [u8])> {
    vec![step; n]
}

const DATA: (u8, &[u8]) = (0, &[100, 0]);
const EMPTY: (u8, &[u8]) = (0, &[0, 0]);
const WRITE: (u8, &[u8]) = (9, &[20]);
const DELIVER: (u8, &[u8]) = (7, &[0, 0]);

/// The named seeds: each drives one rule of RFC 8446 §5 / §4.6.3 on both layers.
#[allow(clippy::too_many_lines)] // Reason: a table, one row per seed.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("data-aes128", seed(AES128, &[DATA, DATA, WRITE, DATA])),
        ("data-aes256", seed(AES256, &[DATA, WRITE, DATA])),
        ("data-chacha", seed(CHACHA, &[DATA, WRITE, DATA])),
        (
            "data-padded",
            seed(AES128, &[(0, &[50, 200]), (1, &[23, 0, 3, 1, 0x2b])]),
        ),
        (
            "data-full-record",
            seed(AES128, &[(1, &[23, 0x40, 0, 0, 0])]),
        ),
        ("data-over-2-14", seed(AES128, &[(1, &[23, 0x40, 1, 0, 0])])),
        (
            "data-full-with-padding",
            seed(AES128, &[(1, &[23, 0x40, 0, 0, 1])]),
        ),
        (
            "ciphertext-over-limit",
            seed(AES128, &[(1, &[23, 0x3f, 0x00, 1, 0x20])]),
        ),
        (
            "reads-cut-inside-records",
            seed(CHACHA, &[DATA, DATA, (7, &[0, 60]), DATA, (7, &[0, 3])]),
        ),
        (
            "all-zero-inner",
            seed(AES128, &[DATA, (1, &[0, 0, 0, 0, 9])]),
        ),
        (
            "all-zero-inner-no-padding",
            seed(AES128, &[(1, &[0, 0, 0, 0, 0])]),
        ),
        (
            "inner-change-cipher-spec",
            seed(AES128, &[(1, &[20, 0, 1, 0, 0])]),
        ),
        (
            "inner-unknown-type",
            seed(AES128, &[(1, &[99, 0, 4, 0, 0])]),
        ),
        ("inner-handshake-type-1", seed(AES128, &[(10, &[1, 10, 0])])),
        ("inner-handshake-split", seed(AES128, &[(10, &[4, 40, 2])])),
        (
            "empty-records-32",
            seed(AES128, &[repeat(EMPTY, 32), vec![DATA]].concat()),
        ),
        (
            "empty-records-33",
            seed(AES128, &[repeat(EMPTY, 33), vec![DATA]].concat()),
        ),
        (
            "empty-records-reset-by-data",
            seed(
                AES128,
                &[repeat(EMPTY, 30), vec![DATA], repeat(EMPTY, 30), vec![DATA]].concat(),
            ),
        ),
        ("close-notify", seed(AES128, &[DATA, (4, &[1, 0]), DATA])),
        ("close-notify-fatal-level", seed(AES128, &[(4, &[2, 0])])),
        ("user-canceled", seed(AES128, &[DATA, (4, &[1, 90]), DATA])),
        (
            "user-canceled-33",
            seed(AES128, &[repeat((4, &[1, 90]), 33), vec![DATA]].concat()),
        ),
        ("warning-alert", seed(AES128, &[(4, &[1, 42])])),
        ("fatal-alert", seed(AES128, &[DATA, (4, &[2, 40])])),
        ("alert-level-3", seed(AES128, &[(4, &[3, 40])])),
        ("alert-too-long", seed(AES128, &[(1, &[21, 0, 3, 0, 0])])),
        ("alert-too-short", seed(AES128, &[(1, &[21, 0, 1, 0, 0])])),
        (
            "key-update",
            seed(AES128, &[DATA, (2, &[0, 0]), DATA, WRITE]),
        ),
        (
            "key-update-requested",
            seed(AES128, &[DATA, (2, &[1, 0]), DATA, WRITE, DATA]),
        ),
        (
            "key-update-requested-each-suite",
            seed(AES256, &[(2, &[1, 0]), WRITE, (2, &[1, 0]), WRITE]),
        ),
        (
            "key-update-requested-chacha",
            seed(CHACHA, &[(2, &[1, 0]), WRITE]),
        ),
        (
            "key-update-requests-answered-once",
            seed(
                AES128,
                &[
                    DATA,
                    (2, &[1, 0]),
                    (0, &[1, 0]),
                    (2, &[1, 0]),
                    (0, &[1, 0]),
                    (2, &[1, 0]),
                    WRITE,
                    (2, &[1, 0]),
                    WRITE,
                ],
            ),
        ),
        ("key-update-request-2", seed(AES128, &[(2, &[2, 0])])),
        ("key-update-request-255", seed(AES128, &[(2, &[255, 0])])),
        (
            "key-updates-32",
            seed(AES128, &[repeat((2, &[0, 0]), 32), vec![DATA]].concat()),
        ),
        (
            "key-updates-33",
            seed(AES128, &[repeat((2, &[0, 0]), 33), vec![DATA]].concat()),
        ),
        (
            "key-updates-between-empty-records",
            seed(
                AES128,
                &[[(2, &[0, 0][..]), EMPTY].repeat(33), vec![DATA]].concat(),
            ),
        ),
        ("key-update-split-1", seed(AES128, &[(2, &[0, 1]), DATA])),
        (
            "key-update-split-2",
            seed(AES128, &[(2, &[1, 2]), DATA, WRITE]),
        ),
        ("key-update-split-3", seed(AES128, &[(2, &[0, 3]), DATA])),
        (
            "key-update-split-4",
            seed(AES128, &[(2, &[1, 4]), DATA, WRITE]),
        ),
        (
            "key-update-split-delivered-apart",
            seed(
                AES128,
                &[
                    (11, &[2, 24, 0]),
                    DELIVER,
                    (11, &[3, 0, 1, 0]),
                    (3, &[]),
                    DATA,
                ],
            ),
        ),
        (
            "key-update-split-three-ways",
            seed(
                AES128,
                &[
                    (11, &[1, 24]),
                    (11, &[2, 0, 0]),
                    (11, &[2, 1, 1]),
                    (3, &[]),
                    DATA,
                    WRITE,
                ],
            ),
        ),
        (
            "key-update-fragment-then-data",
            seed(AES128, &[(11, &[2, 24, 0]), DATA]),
        ),
        (
            "key-update-fragment-then-alert",
            seed(AES128, &[(11, &[2, 24, 0]), (4, &[1, 0])]),
        ),
        (
            "key-update-fragment-then-empty",
            seed(AES128, &[(11, &[2, 24, 0]), EMPTY]),
        ),
        (
            "key-update-fragment-at-the-end",
            seed(AES128, &[DATA, (11, &[3, 24, 0, 0])]),
        ),
        (
            "key-update-with-data-behind",
            seed(AES128, &[(11, &[6, 24, 0, 0, 1, 0, 24])]),
        ),
        (
            "key-update-length-0",
            seed(AES128, &[(11, &[4, 24, 0, 0, 0])]),
        ),
        (
            "key-update-length-2",
            seed(AES128, &[(11, &[6, 24, 0, 0, 2, 0, 0])]),
        ),
        (
            "key-update-length-2-split",
            seed(AES128, &[(11, &[4, 24, 0, 0, 2]), (11, &[2, 0, 0])]),
        ),
        ("handshake-empty-record", seed(AES128, &[(11, &[0])])),
        (
            "two-key-updates-in-one-record",
            seed(AES128, &[(11, &[10, 24, 0, 0, 1, 0, 24, 0, 0, 1, 0])]),
        ),
        (
            "new-keys-without-key-update",
            seed(AES128, &[(3, &[]), DATA]),
        ),
        (
            "key-update-without-new-keys",
            seed(AES128, &[(11, &[5, 24, 0, 0, 1, 0]), DATA]),
        ),
        ("sequence-gap", seed(AES128, &[DATA, (5, &[1]), DATA])),
        ("flipped-outer-type", seed(AES128, &[DATA, (6, &[0, 0])])),
        (
            "flipped-version-major",
            seed(AES128, &[(0, &[10, 0]), (6, &[0, 1])]),
        ),
        (
            "flipped-version-minor",
            seed(AES128, &[(0, &[10, 0]), (6, &[0, 2])]),
        ),
        (
            "flipped-length",
            seed(AES128, &[(0, &[10, 0]), (6, &[0, 4]), DATA]),
        ),
        (
            "flipped-length-high",
            seed(AES128, &[(0, &[10, 0]), (6, &[0x20, 3]), DATA]),
        ),
        ("flipped-tag", seed(AES128, &[(0, &[10, 0]), (6, &[0, 30])])),
        (
            "plaintext-alert",
            seed(AES128, &[(8, &[7, 21, 3, 3, 0, 2, 2, 40])]),
        ),
        (
            "plaintext-handshake",
            seed(AES128, &[(8, &[9, 22, 3, 3, 0, 4, 24, 0, 0, 1])]),
        ),
        (
            "change-cipher-spec-record",
            seed(AES128, &[(8, &[6, 20, 3, 3, 0, 1, 1]), DATA]),
        ),
        (
            "outer-version-3-1",
            seed(AES128, &[(8, &[5, 23, 3, 1, 0, 0])]),
        ),
        (
            "garbage",
            seed(
                AES128,
                &[(8, &[8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff])],
            ),
        ),
        (
            "partial-record-at-the-end",
            seed(AES128, &[DATA, (8, &[4, 23, 3, 3, 0])]),
        ),
        (
            "server-writes-only",
            seed(CHACHA, &[WRITE, WRITE, (9, &[255])]),
        ),
    ]
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/records")
}

#[test]
fn records_differential_agrees_on_every_named_seed() {
    let failed: Vec<String> = seeds()
        .into_iter()
        .filter_map(|(name, input)| compare(&input).err().map(|d| format!("{name}:\n{d}")))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// The corpus on disk is the named seeds (rewritten with `SHUCK_WRITE_SEEDS=1`) plus whatever
/// a fuzzing run added; all of it must agree.
#[test]
fn records_differential_agrees_on_the_corpus_files() {
    let dir = corpus_dir();
    if std::env::var_os("SHUCK_WRITE_SEEDS").is_some() {
        std::fs::create_dir_all(&dir).expect("corpus dir");
        for (name, input) in seeds() {
            std::fs::write(dir.join(name), input).expect("seed file");
        }
    }
    for (name, input) in seeds() {
        let file = std::fs::read(dir.join(name)).unwrap_or_default();
        assert_eq!(
            file, input,
            "{name}: rewrite the corpus with SHUCK_WRITE_SEEDS=1"
        );
    }
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).expect("corpus dir") {
        let path = entry.expect("entry").path();
        let input = std::fs::read(&path).expect("corpus file");
        eprintln!("{}", path.display());
        check(&input);
        files += 1;
    }
    assert!(files >= seeds().len());
}

/// A bounded, seeded stand-in for the fuzzer on stable: byte flips, truncations, insertions
/// and splices of the seeds.
#[test]
fn records_differential_agrees_on_mutated_seeds() {
    let seeds: Vec<Vec<u8>> = seeds().into_iter().map(|(_, s)| s).collect();
    let mut state: u64 = 0x5eed_0f5e_c0de;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // More with SHUCK_MUTATION_ROUNDS, for a longer run by hand.
    let rounds = std::env::var("SHUCK_MUTATION_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(400);
    for round in 0..rounds {
        let mut input = seeds[next() as usize % seeds.len()].clone();
        for _ in 0..=(next() % 4) {
            let at = next() as usize % input.len().max(1);
            match next() % 4 {
                0 if !input.is_empty() => input[at] ^= 1 << (next() % 8),
                1 => input.truncate(at.max(1)),
                2 => input.insert(at.min(input.len()), next() as u8),
                _ => {
                    let other = &seeds[next() as usize % seeds.len()];
                    input.extend_from_slice(&other[1..]);
                }
            }
        }
        if let Err(d) = compare(&input) {
            let hex = input.iter().fold(String::new(), |mut hex, b| {
                let _ = write!(hex, "{b:02x}");
                hex
            });
            panic!("round {round}, input {hex}:\n{d}");
        }
    }
}

#[test]
fn records_differential_rules_compare_what_they_should() {
    let base = Outcome {
        data: b"abc".to_vec(),
        end: EndKind::Failed,
        sent: vec![Sent::Data(b"x".to_vec()), Sent::Alert(2, 10)],
        error: Some(rustls::Error::DecryptError),
        failed_header: vec![23, 3, 3, 0, 20],
        done: 0,
        holding_fragment: false,
    };
    assert!(agree(&base, &base.clone()));
    let trailing = Outcome {
        sent: vec![
            Sent::Data(b"x".to_vec()),
            Sent::KeyUpdate(0),
            Sent::Alert(2, 10),
        ],
        ..base.clone()
    };
    assert!(agree(&trailing, &base), "an answer no data follows");
    let missing = Outcome {
        sent: vec![
            Sent::KeyUpdate(0),
            Sent::Data(b"x".to_vec()),
            Sent::Alert(2, 10),
        ],
        ..base.clone()
    };
    assert!(!agree(&missing, &base), "an answer before data");
    let other_alert = Outcome {
        sent: vec![Sent::Data(b"x".to_vec()), Sent::Alert(2, 50)],
        ..base.clone()
    };
    assert!(!agree(&other_alert, &base));
    let other_data = Outcome {
        data: b"abd".to_vec(),
        ..base.clone()
    };
    assert!(!agree(&other_data, &base));
    let open = Outcome {
        end: EndKind::Open,
        ..base.clone()
    };
    assert!(!agree(&open, &base));
}
