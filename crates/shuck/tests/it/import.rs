//! `shuck import hitch`: hitch configurations, each first accepted by the real hitch
//! (`hitch --test`), converted, accepted by `shuck check`, and served.

use std::path::{Path, PathBuf};
use std::process::Command;

use shuck_test_support::clients::curl;
use shuck_test_support::pki::{Key, Pki};
use shuck_test_support::process::{run_bounded, HttpBackend, Shuck, SHUCK};

/// Debian's hitch package puts its example here (`.ci/run` installs the package).
const DEBIAN_EXAMPLE: &str = "/usr/share/doc/hitch/examples/hitch.conf.example";

fn hitch_accepts(config: &Path) {
    let out = run_bounded(
        Command::new("/usr/sbin/hitch").args(["--test", &format!("--config={}", config.display())]),
        b"",
        30,
    );
    assert!(
        out.status.success(),
        "hitch refuses its own configuration: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `shuck import hitch FILE`, written beside it as shuck.toml.
fn import(config: &Path) -> (PathBuf, String) {
    let out = run_bounded(
        Command::new(&*SHUCK).args(["import", "hitch", config.to_str().expect("path")]),
        b"",
        30,
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = config.with_file_name("shuck.toml");
    std::fs::write(&path, &text).expect("write shuck.toml");
    (path, text)
}

fn shuck_check(config: &Path) -> String {
    let out = run_bounded(
        Command::new(&*SHUCK).args(["check", "--config", config.to_str().expect("path")]),
        b"",
        60,
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "shuck check refuses the import: {text}"
    );
    text
}

/// Every example Debian's hitch package ships (its examples directory) converts: on a public address without a pem-file the conversion is not self-signed (a
/// comment says to list the bundles, and `shuck check` refuses it until then); with the bundle
/// listed, `shuck check` accepts it.
#[test]
fn every_example_hitch_ships_converts_and_checks_once_given_a_certificate() {
    let pki = Pki::new();
    let bundle = pki.leaf("ex.pem", "ex", &["ex.test"], Key::EcdsaP256);
    let examples: Vec<PathBuf> =
        std::fs::read_dir(Path::new(DEBIAN_EXAMPLE).parent().expect("dir"))
            .expect("Debian's hitch examples (package hitch)")
            .map(|e| e.expect("entry").path())
            .collect();
    assert!(!examples.is_empty());
    for source in examples {
        let dir = tempfile::tempdir().expect("tempdir");
        let example = dir.path().join("hitch.conf");
        std::fs::copy(&source, &example).expect("copy");
        // Not `hitch --test`: the example runs as a `hitch` user this machine may not have.
        let (path, toml) = import(&example);
        assert!(
            !toml.contains("self_signed"),
            "{}:\n{toml}",
            source.display()
        );
        assert!(toml.contains("list your bundles here"), "{toml}");
        let out = run_bounded(
            Command::new(&*SHUCK).args(["check", "--config", path.to_str().expect("path")]),
            b"",
            60,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("certificates: missing"), "{err}");
        let given = toml.replace(
            "[[frontend]]\n",
            &format!(
                "[[frontend]]\ncertificates = [{:?}]\n",
                bundle.display().to_string()
            ),
        );
        std::fs::write(&path, given).expect("write");
        shuck_check(&path);
        if source == Path::new(DEBIAN_EXAMPLE) {
            for want in [
                "workers = 4",
                "user = \"hitch\"",
                "listen = [\"0.0.0.0:443\", \"[::]:443\"]",
                "backend = \"127.0.0.1:6086\"",
                "proxy_protocol = \"v2\"",
                "# hitch: daemon = on: shuck stays in the foreground",
            ] {
                assert!(toml.contains(want), "{want}\n{toml}");
            }
        }
    }
}

/// `workers = auto` (newer hitch) is shuck's default; without a pem-file on loopback only, the
/// conversion is self-signed, for trying it out.
#[test]
fn workers_auto_is_the_default_and_loopback_may_be_self_signed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("hitch.conf");
    std::fs::write(&conf, "workers = auto\nfrontend = \"[127.0.0.1]:8443\"\n").expect("write");
    let (path, toml) = import(&conf);
    assert!(!toml.lines().any(|l| l.starts_with("workers")), "{toml}");
    assert!(toml.contains("workers = auto: left out"), "{toml}");
    assert!(toml.contains("self_signed = true"), "{toml}");
    shuck_check(&path);
}

/// The configuration the shootout gives hitch (bench/shootout), and one with most of what
/// hitch.conf(5) offers: hitch accepts both; shuck check accepts their conversions; the first,
/// served, relays to its backend.
#[test]
fn hitch_configurations_are_served_the_same_once_converted() {
    let pki = Pki::new();
    let bundle = pki.leaf("bundle.pem", "h", &["hitch.test"], Key::EcdsaP256);
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = HttpBackend::start();
    let shootout = format!(
        "frontend = \"[127.0.0.1]:0\"\nbackend = \"[127.0.0.1]:{}\"\npem-file = \"{}\"\nworkers = 1\ndaemon = off\nuser = \"nobody\"\ngroup = \"nogroup\"\ntls-protos = TLSv1.2 TLSv1.3\n",
        backend.addr.port(),
        bundle.display()
    );
    let conf = dir.path().join("hitch.conf");
    std::fs::write(&conf, &shootout).expect("write");
    hitch_accepts(&conf);
    let (path, toml) = import(&conf);
    assert!(
        toml.contains("protocols = [\"TLS1.2\", \"TLS1.3\"]"),
        "{toml}"
    );
    let summary = shuck_check(&path);
    assert!(summary.contains("hitch.test"), "{summary}");
    // Served (as root the test keeps root: the bundle is root's).
    let shuck = Shuck::with()
        .config(&toml.replace("user = \"nobody\"\ngroup = \"nogroup\"\n", ""))
        .run();
    let out = curl(&pki, &shuck, "hitch.test", "/converted", &[]);
    assert!(out.status.success(), "{}", shuck.log_text());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("/converted"),
        "the backend answered: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    let ca = pki.ca_path();
    let rich = format!(
        "frontend = {{\n  host = \"127.0.0.1\"\n  port = \"0\"\n  sni-nomatch-abort = on\n}}\n\
         backend = \"[127.0.0.1]:{port}\"\n\
         pem-file = \"{b}\"\n\
         alpn-protos = \"h2, http/1.1\"\n\
         ciphers = \"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-SHA384\"\n\
         ciphersuites = \"TLS_AES_256_GCM_SHA384:TLS_AES_128_CCM_SHA256\"\n\
         ecdh-curve = \"X25519:prime256v1\"\n\
         write-proxy-v1 = on\n\
         client-verify = optional\n\
         client-verify-ca = \"{ca}\"\n\
         prefer-server-ciphers = on\n\
         keepalive = 3600\n\
         log-level = 1\n",
        port = backend.addr.port(),
        b = bundle.display(),
        ca = ca.display()
    );
    std::fs::write(&conf, &rich).expect("write");
    hitch_accepts(&conf);
    let (path, toml) = import(&conf);
    for want in [
        "unknown_sni = \"reject\"",
        "alpn = [\"h2\", \"http/1.1\"]",
        "ciphersuites = [\"TLS_AES_256_GCM_SHA384\", \"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\"]",
        "groups = [\"X25519\", \"prime256v1\"]",
        "proxy_protocol = \"v1\"",
        "client_auth = \"optional\"",
        "log_level = \"error\"",
        "# hitch: prefer-server-ciphers = on:",
        "# hitch: keepalive = 3600:",
        "ECDHE-ECDSA-AES256-SHA384 left out",
        "TLS_AES_128_CCM_SHA256",
    ] {
        assert!(toml.contains(want), "{want}\n{toml}");
    }
    shuck_check(&path);
}

/// A hitch file whose directory name holds a line break and a setting: the import names it in
/// its first comment, and `shuck check` must not find that setting in the result.
#[test]
fn a_file_name_holding_a_line_break_adds_no_setting() {
    let pki = Pki::new();
    let bundle = pki.leaf("bundle.pem", "h", &["hitch.test"], Key::EcdsaP256);
    let dir = tempfile::tempdir().expect("tempdir");
    let evil = dir.path().join("x\nmetrics_listen = \"0.0.0.0:9911\"\n#");
    std::fs::create_dir(&evil).expect("mkdir");
    let conf = evil.join("hitch.conf");
    let text = format!(
        "frontend = \"[127.0.0.1]:8443\"\nbackend = \"[127.0.0.1]:8000\"\npem-file = \"{}\"\n",
        bundle.display()
    );
    std::fs::write(&conf, text).expect("write");
    hitch_accepts(&conf);
    let (path, toml) = import(&conf);
    assert!(toml.starts_with("# Converted from "), "{toml}");
    let parsed: toml::Table = toml::from_str(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    assert!(!parsed.contains_key("metrics_listen"), "{toml}");
    let check = shuck_check(&path);
    assert!(check.contains("frontend \"hitch\""), "{check}");
}
