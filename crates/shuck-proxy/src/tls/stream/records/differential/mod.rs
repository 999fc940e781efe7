//! Differential testing of shuck's record layer against rustls' own.
//!
//! Two server connections finish the same deterministic TLS 1.3 handshake ([`pair`]), so they
//! hold the same traffic keys. One hands its records to [`ShuckRecords`](super::ShuckRecords), the
//! other keeps them in rustls. A script decoded from the input ([`script`]) seals records with
//! the client's real keys — any content type, padding, length, KeyUpdate and alert bodies,
//! handshake messages split over records, sequence gaps, flipped bits, raw bytes — and
//! delivers the same bytes to both, cut the same way, with server writes in between. Then
//! [`check`] asserts the same outcome: the same application bytes read, the same end (still
//! open, close_notify, or failure), and the same messages sent back, read as the client reads
//! them (data, KeyUpdates, the alert).
//!
//! Where the two differ on purpose, [`rules`] says so in one place, and docs/fuzzing.md lists
//! each rule. Run by the `records` fuzz target (`crates/shuck-proxy/fuzz`) and, over the seed
//! corpus, by `cargo test` (`tests.rs`).

mod observe;
pub(super) mod pair;
mod rules;
mod script;
mod servers;
#[cfg(test)]
mod tests;
mod traffic;

use rustls::CipherSuite;

use observe::Sent;
use servers::{End, Ours, Seen, Theirs};
use traffic::Traffic;

const SUITES: [CipherSuite; 3] = [
    CipherSuite::TLS13_AES_128_GCM_SHA256,
    CipherSuite::TLS13_AES_256_GCM_SHA384,
    CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
];

/// One server's outcome, as the comparison sees it.
#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    /// The application data it read.
    data: Vec<u8>,
    end: EndKind,
    /// What its client read from it.
    sent: Vec<Sent>,
    /// Why it failed, if it did.
    error: Option<rustls::Error>,
    /// The first bytes (up to five) of the record it failed on (shuck's side only).
    failed_header: Vec<u8>,
    /// Where its processing stopped, in bytes delivered (see `Seen::done`).
    done: usize,
    /// Part of a handshake message was held when it failed (shuck's side).
    holding_fragment: bool,
}

/// How the reading ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EndKind {
    Open,
    CloseNotify,
    Failed,
}

impl Outcome {
    fn of(seen: &Seen, suite: CipherSuite, server_secret: &[u8]) -> Outcome {
        let (end, error) = match &seen.end {
            End::Open => (EndKind::Open, None),
            End::CloseNotify => (EndKind::CloseNotify, None),
            End::Failed(e) => (EndKind::Failed, Some(e.clone())),
        };
        Outcome {
            data: seen.data.clone(),
            end,
            sent: observe::read(Traffic::new(suite, server_secret), &seen.sent),
            error,
            failed_header: seen.failed_header.clone(),
            done: seen.done,
            holding_fragment: seen.holding_fragment,
        }
    }

    fn summary(&self) -> String {
        let sent: Vec<String> = self
            .sent
            .iter()
            .map(|s| match s {
                Sent::Data(d) => format!("Data({})", d.len()),
                other => format!("{other:?}"),
            })
            .collect();
        format!(
            "{} bytes read, {:?} at byte {} ({:?}), sent {sent:?}",
            self.data.len(),
            self.end,
            self.done,
            self.error
        )
    }
}

/// The two outcomes of an input the layers disagree on.
#[derive(Debug)]
// Public for the fuzz targets (`shuck_proxy::fuzzing`); unreachable from outside in tests.
#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]
pub struct Disagreement {
    ours: Outcome,
    theirs: Outcome,
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "shuck:  {}\nrustls: {}",
            self.ours.summary(),
            self.theirs.summary()
        )
    }
}

/// Runs `input` through both record layers; panics, saying how, when they disagree beyond
/// the rules in [`agree`]. The fuzz target's body.
// Public for the fuzz targets (`shuck_proxy::fuzzing`); unreachable from outside in tests.
#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]
pub fn check(input: &[u8]) {
    if let Err(d) = compare(input) {
        panic!("the record layers disagree\n{d}");
    }
}

/// Runs `input` through both record layers and compares their outcomes.
// Public for the fuzz targets (`shuck_proxy::fuzzing`); unreachable from outside in tests.
#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]
pub fn compare(input: &[u8]) -> Result<(), Box<Disagreement>> {
    let suite = SUITES[usize::from(input.first().copied().unwrap_or(0)) % SUITES.len()];
    let a = pair::handshake(suite);
    let b = pair::handshake(suite);
    assert!(
        a.client_secret == b.client_secret && a.server_secret == b.server_secret,
        "the two handshakes must agree on their keys"
    );
    let (client_secret, server_secret) = (a.client_secret, a.server_secret);
    let mut ours = Ours::new(a.server);
    let mut theirs = Theirs::new(b.server);
    let client = Traffic::new(suite, &client_secret);
    for (n, step) in script::steps(input.get(1..).unwrap_or(&[]), client)
        .into_iter()
        .enumerate()
    {
        match step {
            script::Step::Deliver(bytes) => {
                ours.deliver(&bytes);
                theirs.deliver(&bytes);
            }
            script::Step::ServerWrite(len) => {
                let data: Vec<u8> = (0..len).map(|i| (i + n) as u8).collect();
                ours.write(&data);
                theirs.write(&data);
            }
        }
    }
    let ours = Outcome::of(&ours.seen, suite, &server_secret);
    let theirs = Outcome::of(&theirs.seen, suite, &server_secret);
    if rules::agree(&ours, &theirs) {
        Ok(())
    } else {
        Err(Box::new(Disagreement { ours, theirs }))
    }
}
