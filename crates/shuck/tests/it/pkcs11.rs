//! Keys in a PKCS#11 token, against a real SoftHSM2 token initialised here with
//! `softhsm2-util` and keys generated in it by OpenSC's `pkcs11-tool`, whose export of each
//! public key the test CA certifies: shuck serves with the keys only in the token (curl and
//! `openssl s_client` verify its signatures: ECDSA P-256 and P-384, RSA-PSS, PKCS#1 v1.5, TLS
//! 1.3 and 1.2); resumed handshakes are not held behind a slow token; `shuck check` refuses a
//! wrong PIN, a missing key, a mismatch or a missing module in one line without the PIN; a
//! token served by `p11-kit server` (a network HSM's shape) that stops answering fails full
//! handshakes, not resumptions, and is used again once it answers; `shuck speed --key
//! pkcs11:…` measures the token against the cores.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use shuck_test_support::peers::require;
use shuck_test_support::process::run_bounded;

const MODULE: &str = "/usr/lib/softhsm/libsofthsm2.so";

/// A SoftHSM2 token labelled `edge` (user PIN `pin-8253`, which nothing else prints) in a directory of its own, with an ECDSA
/// P-256 key `web` and an RSA-2048 key `rsa`. SOFTHSM2_CONF points every user of the module in
/// this process (and the commands run with `env`) at it.
struct Token {
    dir: tempfile::TempDir,
}

impl Token {
    fn new() -> Token {
        Token::with_keys(&[("EC:prime256v1", "web", "01"), ("rsa:2048", "rsa", "02")])
    }

    /// A token with the keys `(type, label, id)`, as `pkcs11-tool --keypairgen` takes them.
    fn with_keys(keys: &[(&str, &str, &str)]) -> Token {
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
        std::fs::write(dir.path().join("pin"), "pin-8253\n").expect("PIN file");
        let t = Token { dir };
        t.run(
            require("softhsm2-util", "softhsm2"),
            &[
                "--init-token",
                "--free",
                "--label",
                "edge",
                "--pin",
                "pin-8253",
                "--so-pin",
                "5678",
            ],
        );
        for (kind, label, id) in keys {
            t.logged_in(&[
                "--keypairgen",
                "--key-type",
                kind,
                "--label",
                label,
                "--id",
                id,
            ]);
        }
        t
    }

    /// `pkcs11-tool` logged in to the token with `args`.
    fn logged_in(&self, args: &[&str]) {
        let mut all = vec![
            "--module",
            MODULE,
            "--token-label",
            "edge",
            "--login",
            "--pin",
            "pin-8253",
        ];
        all.extend_from_slice(args);
        self.run(require("pkcs11-tool", "opensc"), &all);
    }

    /// The public key of `label`, as pkcs11-tool reads it: a SubjectPublicKeyInfo in DER.
    fn public_key(&self, label: &str) -> Vec<u8> {
        let out = self.dir.path().join(format!("{label}.pub.der"));
        self.run(
            require("pkcs11-tool", "opensc"),
            &[
                "--module",
                MODULE,
                "--token-label",
                "edge",
                "--read-object",
                "--type",
                "pubkey",
                "--label",
                label,
                "--output-file",
                out.to_str().expect("UTF-8 path"),
            ],
        );
        std::fs::read(out).expect("public key")
    }

    /// Imports an ECDSA P-384 key made by OpenSSL as `label` (this pkcs11-tool cannot export
    /// the public half of a P-384 key it generates); its public key, as OpenSSL writes it.
    fn import_p384(&self, label: &str, id: &str) -> Vec<u8> {
        let d = self.dir.path();
        let (key, public) = (
            d.join(format!("{label}.key.der")),
            d.join(format!("{label}.pub.der")),
        );
        let openssl = |args: &[&str]| {
            let out = run_bounded(Command::new("openssl").args(args), b"", 30);
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let (k, p) = (
            key.to_str().expect("UTF-8"),
            public.to_str().expect("UTF-8"),
        );
        openssl(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-384",
            "-outform",
            "DER",
            "-out",
            k,
        ]);
        openssl(&[
            "pkey", "-inform", "DER", "-in", k, "-pubout", "-outform", "DER", "-out", p,
        ]);
        for (file, kind) in [(k, "privkey"), (p, "pubkey")] {
            self.logged_in(&[
                "--write-object",
                file,
                "--type",
                kind,
                "--label",
                label,
                "--id",
                id,
            ]);
        }
        std::fs::read(public).expect("public key")
    }

    fn pin_file(&self) -> PathBuf {
        self.dir.path().join("pin")
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

    /// `shuck check --config config`, pointed at this token.
    fn check(&self, config: impl AsRef<std::ffi::OsStr>) -> std::process::Output {
        run_bounded(
            Command::new(env!("CARGO_BIN_EXE_shuck"))
                .args(["check", "--config"])
                .arg(config)
                .env("SOFTHSM2_CONF", self.conf()),
            b"",
            60,
        )
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
        "pkcs11:token=edge;object=web?pin-value=pin-8253",
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
    assert!(!text.contains("pin-8253"), "the PIN in the output: {text}");
    // The prediction is for the token key's type.
    assert_eq!(v["speed"]["prediction"]["key"], "p256", "{v}");

    // Words, with the module named in the URI this time.
    let out = token.speed(&[
        "--quick",
        "--key",
        &format!("pkcs11:token=edge;object=rsa?pin-value=pin-8253&module-path={MODULE}"),
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
            "pkcs11:token=edge;object=web?pin-value=wrong-pin",
            "refused the PIN",
        ),
        (
            "pkcs11:token=edge;object=nothing?pin-value=pin-8253",
            "no private key matches",
        ),
        (
            "pkcs11:token=elsewhere;object=web?pin-value=pin-8253",
            "no token matches",
        ),
        // A misspelt URI: its error shows nothing of the PIN.
        (
            "pkcs11:token=edge;object=web?pin-value=pin-8%zz253",
            "bad %-encoding",
        ),
        (
            "pkcs11:token=edge;object=web?pin-value=pin-8&253",
            "not name=value",
        ),
    ] {
        let out = token.speed(&["--quick", "--pkcs11-module", MODULE, "--key", uri]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{uri}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{uri}: {err}");
        assert!(
            !err.contains("wrong-pin") && !err.contains("pin-8253") && !err.contains("253"),
            "{err}"
        );
    }
}

/// A shuck serving `certs` (TOML entries) with its keys in `token`, one worker, the demo page.
fn serve_from(token: &Token, certs: &str, globals: &str) -> shuck_test_support::process::Shuck {
    shuck_test_support::process::Shuck::with()
        .config(&format!(
            "workers = 1\nmetrics_listen = \"127.0.0.1:0\"\npkcs11_module = \"{MODULE}\"\n{globals}\n\
             [[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\ncertificates = [{certs}]\n"
        ))
        .env("SOFTHSM2_CONF", token.conf().to_str().expect("UTF-8 path"))
        .run()
}

/// A certificate entry whose key is `object` in the token, its PIN from a file.
fn entry(cert: &Path, token: &Token, object: &str) -> String {
    format!(
        "{{ cert = {}, key = \"pkcs11:token=edge;object={object}?pin-source=file:{}\" }}",
        shuck_test_support::pki::toml_path(cert),
        token.pin_file().display()
    )
}

#[test]
fn a_frontend_serves_with_keys_only_in_the_token() {
    let token = Token::new();
    let pki = shuck_test_support::pki::Pki::new();
    let web = pki.leaf_for_public_key("web.pem", &["www.test"], &token.public_key("web"));
    let rsa = pki.leaf_for_public_key("rsa.pem", &["rsa.test"], &token.public_key("rsa"));
    let p384 =
        pki.leaf_for_public_key("p384.pem", &["p384.test"], &token.import_p384("p384", "03"));
    let certs = format!(
        "{}, {}, {{ cert = {}, key = \"pkcs11:token=edge;object=rsa?pin-value=pin-8253\" }}",
        entry(&web, &token, "web"),
        entry(&p384, &token, "p384"),
        shuck_test_support::pki::toml_path(&rsa)
    );
    let shuck = serve_from(&token, &certs, "");
    let addr = shuck.addrs[0];
    // ECDSA in TLS 1.3 and 1.2; RSA-PSS in TLS 1.3, PKCS#1 v1.5 in TLS 1.2.
    for (name, extra) in [
        ("www.test", &["--tlsv1.3"][..]),
        ("www.test", &["--tlsv1.2", "--tls-max", "1.2"][..]),
        ("rsa.test", &["--tlsv1.3"][..]),
        ("p384.test", &["--tlsv1.3"][..]),
    ] {
        let out = shuck_test_support::clients::curl_at(&pki, addr, name, "/", extra);
        assert!(
            out.status.success(),
            "{name} {extra:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            shuck.log_text()
        );
    }
    // A HelloRetryRequest first (the client's only key share is X448, which shuck does not
    // take): the second ClientHello, where the signature is made, is processed off the worker
    // as the first was.
    let (_, text) = shuck_test_support::clients::s_client(
        &pki,
        addr,
        Some("www.test"),
        &["-tls1_3", "-groups", "X448:X25519", "-msg"],
    );
    assert!(
        text.contains("Verification: OK") && text.contains("protocol: TLSv1.3"),
        "{text}"
    );
    // OpenSSL's -msg shows the retry request as a ServerHello before a second ClientHello.
    assert_eq!(
        text.matches("], ClientHello").count(),
        2,
        "no HelloRetryRequest: {text}"
    );
    // The demo page answers (the helper's `ok` wants an echo backend).
    let (_, text) = shuck_test_support::clients::s_client(
        &pki,
        addr,
        Some("rsa.test"),
        &["-tls1_2", "-sigalgs", "RSA+SHA256"],
    );
    assert!(
        text.contains("Verification: OK") && text.contains("protocol: TLSv1.2"),
        "{text}"
    );
    assert!(
        text.contains("Peer signature type: RSA\n") || text.contains("Peer signature type: RSA\r"),
        "PKCS#1: {text}"
    );
    let metrics = shuck_test_support::clients::scrape(shuck.addrs[1]);
    let signed = shuck_test_support::clients::sum(
        &metrics,
        "shuck_pkcs11_signatures_total",
        &["result=\"ok\""],
    );
    assert!(signed >= 6, "{metrics}");
    assert!(
        metrics.contains("key=\"pkcs11:token=edge;object=rsa\",result=\"ok\"} 2"),
        "{metrics}"
    );
    assert!(!metrics.contains("pin-8253") && !shuck.log_text().contains("pin-8253"));
    // shuck check logs in too, and shows the key without its PIN.
    let out = token.check(shuck.config_path());
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(!said.contains("pin-8253"), "{said}");
}

#[test]
fn a_wrong_pin_a_missing_key_a_mismatch_or_no_module_stop_check_with_one_line() {
    let token = Token::new();
    let pki = shuck_test_support::pki::Pki::new();
    let web = pki.leaf_for_public_key("web.pem", &["www.test"], &token.public_key("web"));
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            format!(
                "{{ cert = {}, key = \"pkcs11:token=edge;object=web?pin-value=wrong-pin\" }}",
                shuck_test_support::pki::toml_path(&web)
            ),
            format!("pkcs11_module = \"{MODULE}\""),
            "refused the PIN",
        ),
        (
            entry(&web, &token, "gone"),
            format!("pkcs11_module = \"{MODULE}\""),
            "no private key matches",
        ),
        (
            entry(&web, &token, "rsa"),
            format!("pkcs11_module = \"{MODULE}\""),
            "does not match the certificate",
        ),
        (
            entry(&web, &token, "web"),
            "pkcs11_module = \"/nonexistent/libnothing.so\"".to_string(),
            "cannot load the PKCS#11 module",
        ),
        (entry(&web, &token, "web"), String::new(), "needs a module"),
    ];
    for (i, (certs, globals, says)) in cases.iter().enumerate() {
        let cfg = dir.path().join(format!("{i}.toml"));
        std::fs::write(
            &cfg,
            format!("{globals}\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\ncertificates = [{certs}]\n"),
        )
        .expect("config");
        let out = token.check(&cfg);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{says}: accepted");
        assert!(err.contains(says), "{says}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            !err.contains("wrong-pin") && !err.contains("pin-8253"),
            "{err}"
        );
    }
}

/// While an RSA-4096 key in SoftHSM signs for a queue of full handshakes on one signer thread,
/// the same worker goes on: it resumes other clients' sessions for that name (processed off the
/// worker too, without a signature) and makes full handshakes for a name whose key is in a file
/// (processed on the worker itself, which would wait behind the token if the token's
/// handshakes held it); all finish while full handshakes still wait at the token.
#[test]
fn resumed_handshakes_are_not_held_behind_a_slow_token() {
    use std::time::{Duration, Instant};
    let token = Token::with_keys(&[("rsa:4096", "slow", "09")]);
    let pki = shuck_test_support::pki::Pki::new();
    let slow = pki.leaf_for_public_key("slow.pem", &["slow.test"], &token.public_key("slow"));
    let fast = pki.leaf(
        "fast.pem",
        "fast",
        &["fast.test"],
        shuck_test_support::pki::Key::EcdsaP256,
    );
    let certs = format!(
        "{}, {}",
        entry(&slow, &token, "slow"),
        shuck_test_support::pki::toml_path(&fast)
    );
    let shuck = serve_from(&token, &certs, "pkcs11_signers = 1");
    let addr = shuck.addrs[0];
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let config = |resume: bool| client_config(&pki, resume);
    let returning = config(true);
    rt.block_on(async {
        // Sessions to resume later (each TLS 1.3 ticket is used once).
        for _ in 0..3 {
            visit(addr, "slow.test", returning.clone()).await;
        }
        let started = Instant::now();
        let full: Vec<_> = (0..32)
            .map(|_| tokio::spawn(visit(addr, "slow.test", config(false))))
            .collect();
        // Until the token has a queue (the signers' own gauge says).
        let metrics = shuck.addrs[1];
        let queued = tokio::task::spawn_blocking(move || {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let m = shuck_test_support::clients::scrape(metrics);
                let depth = shuck_test_support::clients::sum(&m, "shuck_pkcs11_queue_depth", &[]);
                if depth >= 8 || Instant::now() > deadline {
                    return depth;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
        .await
        .expect("scrape");
        assert!(queued >= 8, "no queue formed at the token");
        for _ in 0..2 {
            assert!(visit(addr, "slow.test", returning.clone()).await, "not resumed");
            assert!(!visit(addr, "fast.test", config(false)).await);
        }
        let others_done = started.elapsed();
        let mut last_full = Duration::ZERO;
        for f in full {
            f.await.expect("full handshake");
            last_full = last_full.max(started.elapsed());
        }
        assert!(
            others_done < last_full,
            "resumed and file-key handshakes done at {others_done:?}, the token's full ones at {last_full:?}: held behind the token"
        );
    });
}

/// A client trusting the test CA, resuming or not.
fn client_config(
    pki: &shuck_test_support::pki::Pki,
    resume: bool,
) -> std::sync::Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(pki.ca_path()).expect("CA");
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(c.expect("CA PEM")).expect("CA");
    }
    let mut c = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    if !resume {
        c.resumption = rustls::client::Resumption::disabled();
    }
    std::sync::Arc::new(c)
}

/// One handshake for `host`, the demo page read; whether it resumed.
async fn visit(
    addr: std::net::SocketAddr,
    host: &'static str,
    config: std::sync::Arc<rustls::ClientConfig>,
) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from(host).expect("name");
    let mut tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .expect("handshake");
    tls.write_all(format!("GET / HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .await
        .expect("request");
    let mut page = Vec::new();
    let _ = tls.read_to_end(&mut page).await;
    assert!(
        page.starts_with(b"HTTP/1."),
        "{}",
        String::from_utf8_lossy(&page)
    );
    tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
}

/// p11-kit's client module, which reaches a token another process serves (`p11-kit server`):
/// a network HSM's shape, whose server the test can stop and start again.
fn p11_kit_client() -> PathBuf {
    std::fs::read_dir("/usr/lib")
        .expect("/usr/lib")
        .filter_map(Result::ok)
        .map(|d| d.path().join("pkcs11/p11-kit-client.so"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("p11-kit-client.so not found: install p11-kit-modules"))
}

/// A token behind `p11-kit server`, stopped (SIGSTOP: it no longer answers) and continued:
/// full handshakes fail after the signature's 5 s while resumptions go on, one line says the
/// key fails and one that it signs again, with no restart.
#[test]
fn a_token_that_stops_answering_fails_full_handshakes_until_it_answers_again() {
    let token = Token::new();
    let pki = shuck_test_support::pki::Pki::new();
    let web = pki.leaf_for_public_key("web.pem", &["www.test"], &token.public_key("web"));
    let socket = token.dir.path().join("p11.sock");
    // Its own process group: the server hands each client to a p11-kit-remote child, and
    // stopping the token is stopping them all.
    let server = Group(
        Command::new(require("p11-kit", "p11-kit"))
            .process_group(0)
            .args(["server", "-f", "--provider", MODULE, "-n"])
            .arg(&socket)
            .arg("pkcs11:token=edge")
            .env("SOFTHSM2_CONF", token.conf())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("p11-kit server"),
    );
    shuck_test_support::process::wait_for(
        "p11-kit's socket",
        std::time::Duration::from_secs(10),
        || socket.exists(),
    );
    let shuck = shuck_test_support::process::Shuck::with()
        .config(&format!(
            "workers = 1\nmetrics_listen = \"127.0.0.1:0\"\npkcs11_module = \"{}\"\n\
             [[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\ncertificates = [{}]\n",
            p11_kit_client().display(),
            entry(&web, &token, "web")
        ))
        .env(
            "P11_KIT_SERVER_ADDRESS",
            &format!("unix:path={}", socket.display()),
        )
        .run();
    let addr = shuck.addrs[0];
    let session = token.dir.path().join("session.pem");
    let s_client = |args: &[&str]| {
        let (_, text) = shuck_test_support::clients::s_client(&pki, addr, Some("www.test"), args);
        text
    };
    let first = s_client(&["-tls1_2", "-sess_out", session.to_str().expect("UTF-8")]);
    assert!(
        first.contains("New, TLSv1.2"),
        "{first}\n{}",
        shuck.log_text()
    );
    let signal = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, "--", &format!("-{}", server.0.id())])
            .status()
            .expect("kill");
        assert!(ok.success());
    };
    signal("-STOP");
    let stopped = shuck_test_support::clients::curl_at(&pki, addr, "www.test", "/", &[]);
    assert!(
        !stopped.status.success(),
        "served while the token did not answer"
    );
    // No signature needed: resumed while the token is stopped.
    let resumed = s_client(&["-tls1_2", "-sess_in", session.to_str().expect("UTF-8")]);
    assert!(resumed.contains("Reused, TLSv1.2"), "{resumed}");
    shuck.wait_log("the token key fails to sign");
    let m = shuck_test_support::clients::scrape(shuck.addrs[1]);
    assert!(
        shuck_test_support::clients::sum(
            &m,
            "shuck_pkcs11_signatures_total",
            &["result=\"timeout\""]
        ) >= 1,
        "{m}"
    );
    signal("-CONT");
    let back = shuck_test_support::clients::curl_at(&pki, addr, "www.test", "/", &[]);
    assert!(back.status.success(), "{}", shuck.log_text());
    let log = shuck.wait_log("the token key signs again");
    assert_eq!(log.matches("fails to sign").count(), 1, "{log}");
}

/// A process group, killed on drop (a test that fails while it is stopped leaves nothing).
struct Group(std::process::Child);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.wait();
    }
}

/// A reload opens the keys again: a changed URI serves the other key (and its certificate);
/// `shuck check` refuses one with a wrong PIN while the running process goes on serving.
#[test]
fn a_reload_serves_the_key_a_changed_uri_names_and_check_refuses_a_wrong_pin() {
    let token = Token::with_keys(&[
        ("EC:prime256v1", "web", "01"),
        ("EC:prime256v1", "web2", "05"),
    ]);
    let pki = shuck_test_support::pki::Pki::new();
    let one = pki.leaf_for_public_key("one.pem", &["one.test"], &token.public_key("web"));
    let two = pki.leaf_for_public_key("two.pem", &["two.test"], &token.public_key("web2"));
    let shuck = serve_from(&token, &entry(&one, &token, "web"), "");
    let addr = shuck.addrs[0];
    let curl = |name: &str| shuck_test_support::clients::curl_at(&pki, addr, name, "/", &[]);
    assert!(curl("one.test").status.success(), "{}", shuck.log_text());
    assert!(
        !curl("two.test").status.success(),
        "two.test served before the reload"
    );
    let config = std::fs::read_to_string(shuck.config_path()).expect("config");
    let changed = config.replace(&entry(&one, &token, "web"), &entry(&two, &token, "web2"));
    assert_ne!(changed, config);
    std::fs::write(shuck.config_path(), &changed).expect("config");
    shuck.signal("HUP");
    shuck.wait_log("reloaded");
    assert!(curl("two.test").status.success(), "{}", shuck.log_text());
    // A wrong PIN: PKCS#11 keeps one login per process and token, so the running process,
    // logged in, does not see it (the reload goes on with the session it has); `shuck check`,
    // a process of its own, does, naming the URI without the PIN.
    let wrong = changed.replace(
        &format!("pin-source=file:{}", token.pin_file().display()),
        "pin-value=wrong-pin",
    );
    assert_ne!(wrong, changed);
    std::fs::write(shuck.config_path(), &wrong).expect("config");
    let out = token.check(shuck.config_path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("refused the PIN"),
        "{err}"
    );
    assert!(!err.contains("wrong-pin"), "{err}");
    assert!(curl("two.test").status.success(), "{}", shuck.log_text());
}
