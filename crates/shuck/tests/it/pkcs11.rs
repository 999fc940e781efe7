//! Keys in a PKCS#11 token, against a real SoftHSM2 token initialised here with
//! `softhsm2-util` and keys generated in it by OpenSC's `pkcs11-tool`: the signer pool's
//! signatures verify under the public key read from the token (ECDSA P-256, RSA-PSS and
//! PKCS#1 v1.5); `shuck speed --key pkcs11:…` measures the token against the cores; a wrong
//! PIN and a missing object are one clear error naming the URI without its PIN.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use rustls::pki_types::SubjectPublicKeyInfoDer;
use rustls::SignatureScheme;
use shuck_proxy::pkcs11::{SignerPool, TokenKey};
use shuck_proxy::pkcs11_uri::Pkcs11Uri;
use shuck_test_support::peers::require;
use shuck_test_support::process::run_bounded;

const MODULE: &str = "/usr/lib/softhsm/libsofthsm2.so";

/// A SoftHSM2 token labelled `edge` (user PIN 1234) in a directory of its own, with an ECDSA
/// P-256 key `web` and an RSA-2048 key `rsa`. SOFTHSM2_CONF points every user of the module in
/// this process (and the commands run with `env`) at it.
struct Token {
    dir: tempfile::TempDir,
}

impl Token {
    fn new() -> Token {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("tokens")).expect("token directory");
        let conf = dir.path().join("softhsm2.conf");
        std::fs::write(
            &conf,
            format!(
                "directories.tokendir = {}\nobjectstore.backend = file\nlog.level = ERROR\n",
                dir.path().join("tokens").display()
            ),
        )
        .expect("softhsm2.conf");
        let t = Token { dir };
        t.run(
            require("softhsm2-util", "softhsm2"),
            &[
                "--init-token",
                "--free",
                "--label",
                "edge",
                "--pin",
                "1234",
                "--so-pin",
                "5678",
            ],
        );
        for (kind, label, id) in [("EC:prime256v1", "web", "01"), ("rsa:2048", "rsa", "02")] {
            t.run(
                require("pkcs11-tool", "opensc"),
                &[
                    "--module",
                    MODULE,
                    "--token-label",
                    "edge",
                    "--login",
                    "--pin",
                    "1234",
                    "--keypairgen",
                    "--key-type",
                    kind,
                    "--label",
                    label,
                    "--id",
                    id,
                ],
            );
        }
        t
    }

    fn conf(&self) -> PathBuf {
        self.dir.path().join("softhsm2.conf")
    }

    fn run(&self, bin: PathBuf, args: &[&str]) {
        let out = run_bounded(
            Command::new(bin)
                .args(args)
                .env("SOFTHSM2_CONF", self.conf()),
            b"",
            60,
        );
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `shuck speed` with `args`, pointed at this token.
    fn speed(&self, args: &[&str]) -> std::process::Output {
        run_bounded(
            Command::new(env!("CARGO_BIN_EXE_shuck"))
                .arg("speed")
                .args(args)
                .env("SOFTHSM2_CONF", self.conf()),
            b"",
            120,
        )
    }
}

/// Checks `sig` with rustls' own verifiers (aws-lc-rs) against the key in `spki`.
fn verify(spki: &SubjectPublicKeyInfoDer<'_>, scheme: SignatureScheme, msg: &[u8], sig: &[u8]) {
    let algs = rustls::crypto::aws_lc_rs::default_provider().signature_verification_algorithms;
    let (_, verifiers) = algs
        .mapping
        .iter()
        .find(|(s, _)| *s == scheme)
        .expect("a verifier for the scheme");
    let key = subject_public_key(spki);
    assert!(
        verifiers
            .iter()
            .any(|v| v.verify_signature(key, msg, sig).is_ok()),
        "{scheme:?} does not verify"
    );
}

/// The subjectPublicKey bits of a SubjectPublicKeyInfo (`SEQUENCE { alg SEQUENCE, BIT STRING }`).
fn subject_public_key<'a>(spki: &'a SubjectPublicKeyInfoDer<'_>) -> &'a [u8] {
    /// The tag's contents and what follows them.
    fn take(der: &[u8]) -> (&[u8], &[u8]) {
        let (len, head) = match der[1] {
            n if n < 0x80 => (usize::from(n), 2),
            0x81 => (usize::from(der[2]), 3),
            0x82 => (usize::from(der[2]) << 8 | usize::from(der[3]), 4),
            other => panic!("length form {other:#x}"),
        };
        (&der[head..head + len], &der[head + len..])
    }
    let (body, _) = take(spki.as_ref());
    let (_, rest) = take(body);
    let (bits, _) = take(rest);
    &bits[1..]
}

#[test]
fn token_signatures_verify_under_the_public_key_read_from_the_token() {
    let token = Token::new();
    // The module reads SOFTHSM2_CONF when this process loads it, here, first.
    std::env::set_var("SOFTHSM2_CONF", token.conf());
    let msg = b"a TLS 1.3 CertificateVerify's content, or near enough";
    for (object, schemes) in [
        ("web", &[SignatureScheme::ECDSA_NISTP256_SHA256][..]),
        (
            "rsa",
            &[
                SignatureScheme::RSA_PSS_SHA256,
                SignatureScheme::RSA_PKCS1_SHA256,
                SignatureScheme::RSA_PSS_SHA384,
            ][..],
        ),
    ] {
        let uri =
            Pkcs11Uri::parse(&format!("pkcs11:token=edge;object={object}?pin-value=1234")).unwrap();
        let key = Arc::new(TokenKey::open(&uri, Some(Path::new(MODULE))).expect("token key"));
        let pool = SignerPool::start(key.clone(), 2, 8).expect("signers");
        for scheme in schemes {
            let sig = pool.sign(*scheme, msg).expect("signed");
            verify(&key.public_key, *scheme, msg, &sig);
        }
        // rustls picks the first scheme the client offers that the key makes.
        let signing = pool.signing_key();
        let chosen = signing
            .choose_scheme(&[SignatureScheme::ED25519, schemes[0]])
            .expect("a scheme");
        assert_eq!(chosen.scheme(), schemes[0]);
        verify(&key.public_key, schemes[0], msg, &chosen.sign(msg).unwrap());
        assert_eq!(pool.waiting(), 0);
    }
}

#[test]
fn speed_measures_the_token_against_the_cores_and_refuses_a_wrong_pin_in_one_line() {
    let token = Token::new();
    let out = token.speed(&[
        "--quick",
        "--json",
        "--token-sessions",
        "2",
        "--pkcs11-module",
        MODULE,
        "--key",
        "pkcs11:token=edge;object=web?pin-value=1234",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let t = &v["token"];
    assert_eq!(t["token"]["scheme"], "ECDSA_NISTP256_SHA256", "{v}");
    assert_eq!(t["token"]["sessions"], 2, "{v}");
    for field in ["per_second_one_session", "per_second"] {
        assert!(t["token"][field].as_f64().unwrap() > 0.0, "{field}: {v}");
    }
    assert!(t["cpu_sign_per_core"].as_f64().unwrap() > 0.0, "{v}");
    assert!(t["cores_equal"].as_f64().unwrap() > 0.0, "{v}");
    assert!(!text.contains("1234"), "the PIN in the output: {text}");
    // The prediction is for the token key's type.
    assert_eq!(v["speed"]["prediction"]["key"], "p256", "{v}");

    // Words, with the module named in the URI this time.
    let out = token.speed(&[
        "--quick",
        "--key",
        &format!("pkcs11:token=edge;object=rsa?pin-value=1234&module-path={MODULE}"),
    ]);
    let words = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        words.contains("token pkcs11:token=edge;object=rsa"),
        "{words}"
    );
    assert!(words.contains("the token equals"), "{words}");

    for (uri, says) in [
        (
            "pkcs11:token=edge;object=web?pin-value=9999",
            "refused the PIN",
        ),
        (
            "pkcs11:token=edge;object=nothing?pin-value=1234",
            "no private key matches",
        ),
        (
            "pkcs11:token=elsewhere;object=web?pin-value=1234",
            "no token matches",
        ),
    ] {
        let out = token.speed(&["--quick", "--pkcs11-module", MODULE, "--key", uri]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{uri}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{uri}: {err}");
        assert!(!err.contains("9999") && !err.contains("1234"), "{err}");
    }
}
