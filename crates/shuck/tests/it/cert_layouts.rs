//! Certificates as operators keep them: certbot's `live/` (symlinks into `archive/`), a
//! Kubernetes TLS secret (`tls.crt` + `tls.key`), a chain and its key as a pair, a bundle whose
//! key is in `NAME.key` beside it (HAProxy's rule), and `--cert`/`--key` on the command line.
//! curl verifies each name against the test CA, so a wrong certificate fails the request.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use shuck_test_support::clients::curl_at;
use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::Shuck;

/// Splits a bundle (chain then key) into `<dir>/<cert>` and `<dir>/<key>`, the key with `mode`.
fn split(bundle: &Path, dir: &Path, cert: &str, key: &str, mode: u32) -> (PathBuf, PathBuf) {
    let text = std::fs::read_to_string(bundle).expect("bundle");
    let at = text
        .find("-----BEGIN PRIVATE KEY-----")
        .expect("a key in the bundle");
    std::fs::create_dir_all(dir).expect("mkdir");
    let (c, k) = (dir.join(cert), dir.join(key));
    std::fs::write(&c, &text[..at]).expect("write chain");
    std::fs::write(&k, &text[at..]).expect("write key");
    std::fs::set_permissions(&k, std::fs::Permissions::from_mode(mode)).expect("chmod");
    (c, k)
}

/// certbot's layout for `name`: `archive/NAME/{fullchain,privkey}1.pem`, and `live/NAME/`
/// holding symlinks to them.
fn certbot(pki: &Pki, root: &Path, name: &str) {
    let bundle = pki.leaf(&format!("{name}.bundle"), name, &[name], Key::EcdsaP256);
    let archive = root.join("archive").join(name);
    split(&bundle, &archive, "fullchain1.pem", "privkey1.pem", 0o600);
    let live = root.join("live").join(name);
    std::fs::create_dir_all(&live).expect("mkdir live");
    for (link, target) in [
        ("fullchain.pem", "fullchain1.pem"),
        ("privkey.pem", "privkey1.pem"),
    ] {
        symlink(
            Path::new("../../archive").join(name).join(target),
            live.join(link),
        )
        .expect("symlink");
    }
}

fn served(pki: &Pki, shuck: &Shuck, names: &[&str]) {
    for name in names {
        let out = curl_at(pki, shuck.addrs[0], name, "/", &[]);
        assert!(
            out.status.success(),
            "{name}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            shuck.log_text()
        );
    }
}

#[test]
fn certbot_live_kubernetes_secrets_pairs_and_key_beside_are_served() {
    let pki = Pki::new();
    let root = pki.path("letsencrypt");
    certbot(&pki, &root, "a.test");
    certbot(&pki, &root, "b.test");
    let secret = pki.path("secret");
    let c = pki.leaf("c.bundle", "c", &["c.test"], Key::EcdsaP256);
    split(&c, &secret, "tls.crt", "tls.key", 0o600);
    let d = pki.leaf("d.bundle", "d", &["d.test"], Key::Rsa2048);
    let (d_cert, d_key) = split(&d, &pki.path("d"), "fullchain.pem", "privkey.pem", 0o600);
    // A bundle without its key, the key beside it and readable by others: served, one warning.
    let e = pki.leaf("e.bundle", "e", &["e.test"], Key::EcdsaP256);
    let (e_cert, e_key) = split(&e, &pki.path("e"), "e.pem", "e.pem.key", 0o644);
    let shuck = Shuck::start(&format!(
        "[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = [{}, {}, {{ cert = {}, key = {} }}, {}]\n",
        toml_path(&root.join("live")),
        toml_path(&secret),
        toml_path(&d_cert),
        toml_path(&d_key),
        toml_path(&e_cert),
    ));
    served(
        &pki,
        &shuck,
        &["a.test", "b.test", "c.test", "d.test", "e.test"],
    );
    let log = shuck.log_text();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("private key file is readable"))
        .collect();
    assert_eq!(
        warned.len(),
        1,
        "one warning, for the key others can read: {log}"
    );
    assert!(
        warned[0].contains(&e_key.display().to_string()),
        "{}",
        warned[0]
    );
}

#[test]
fn cert_and_key_flags_pair_in_order() {
    let pki = Pki::new();
    let d = pki.leaf("d.bundle", "d", &["d.test"], Key::EcdsaP256);
    let (d_cert, d_key) = split(&d, &pki.path("d"), "fullchain.pem", "privkey.pem", 0o600);
    let f = pki.leaf("f.pem", "f", &["f.test"], Key::EcdsaP256);
    let shuck = Shuck::with()
        .args(&[
            "--listen",
            "127.0.0.1:0",
            "--cert",
            &d_cert.display().to_string(),
            "--key",
            &d_key.display().to_string(),
            "--cert",
            &f.display().to_string(),
        ])
        .run();
    served(&pki, &shuck, &["d.test", "f.test"]);
}

/// A bundle without a key and nothing beside it: the error names the file and says where the
/// key may be.
#[test]
fn a_chain_without_its_key_is_refused_with_where_to_put_it() {
    let pki = Pki::new();
    let e = pki.leaf("e.bundle", "e", &["e.test"], Key::EcdsaP256);
    let (e_cert, _) = split(&e, &pki.path("e"), "chain.pem", "elsewhere.key", 0o600);
    let out = shuck_test_support::process::run_bounded(
        std::process::Command::new(&*shuck_test_support::process::SHUCK)
            .args(["check", "--cert"])
            .arg(&e_cert),
        b"",
        30,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&e_cert.display().to_string()) && err.contains("chain.pem.key"),
        "{err}"
    );
}

/// The first PEM certificate in `text`.
fn first_pem(text: &str) -> String {
    let start = text
        .find("-----BEGIN CERTIFICATE-----")
        .expect("a certificate");
    let end = text[start..]
        .find("-----END CERTIFICATE-----")
        .expect("its end")
        + start;
    text[start..end].to_string()
}

/// The leaf certificate shuck serves for `name`.
fn served_leaf(pki: &Pki, shuck: &Shuck, name: &str) -> String {
    let (ok, text) = shuck_test_support::clients::s_client(pki, shuck.addrs[0], Some(name), &[]);
    assert!(ok, "{text}\n{}", shuck.log_text());
    first_pem(&text)
}

/// Replaces symlink `link` by one to `target` at once, as certbot does (a new link renamed over).
fn swap_link(link: &Path, target: &Path) {
    let tmp = link.with_extension("new-link");
    symlink(target, &tmp).expect("symlink");
    std::fs::rename(&tmp, link).expect("rename");
}

/// A certbot renewal (new files in archive/, then the links in live/ swapped one after the
/// other) is served without a signal within a few seconds, and the moment between the two
/// swaps (chain and key not matching) is neither served nor logged. A Kubernetes secret whose
/// tls.crt is left half-written is one error line and one count, the old certificate served
/// meanwhile; once whole, it is served.
#[test]
fn renewed_files_are_served_without_a_signal_once_consistent() {
    let pki = Pki::new();
    let root = pki.path("letsencrypt");
    certbot(&pki, &root, "a.test");
    let secret = pki.path("secret");
    let c = pki.leaf("c.bundle", "c", &["c.test"], Key::EcdsaP256);
    split(&c, &secret, "tls.crt", "tls.key", 0o600);
    let backend = shuck_test_support::process::HttpBackend::start();
    let shuck = Shuck::start(&format!(
        "metrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = [{}, {}]\n",
        backend.addr,
        toml_path(&root.join("live")),
        toml_path(&secret),
    ));
    let first = served_leaf(&pki, &shuck, "a.test");
    // The renewal: a new key and certificate, as certbot writes them.
    let renewed = pki.leaf("a2.bundle", "a.test", &["a.test"], Key::EcdsaP256);
    let archive = root.join("archive").join("a.test");
    split(&renewed, &archive, "fullchain2.pem", "privkey2.pem", 0o600);
    let live = root.join("live").join("a.test");
    let t = std::time::Instant::now();
    swap_link(
        &live.join("fullchain.pem"),
        Path::new("../../archive/a.test/fullchain2.pem"),
    );
    // certbot's gap between its two link swaps: the half-done state the watcher must not load.
    std::thread::sleep(std::time::Duration::from_millis(100));
    swap_link(
        &live.join("privkey.pem"),
        Path::new("../../archive/a.test/privkey2.pem"),
    );
    let want = first_pem(&std::fs::read_to_string(archive.join("fullchain2.pem")).expect("read"));
    assert_ne!(first, want);
    while served_leaf(&pki, &shuck, "a.test") != want {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "not served after 10 s:\n{}",
            shuck.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    eprintln!(
        "the renewed certificate was served {:?} after the swap",
        t.elapsed()
    );
    let log = shuck.log_text();
    assert!(
        !log.contains("do not load"),
        "the half-done swap was reported: {log}"
    );

    // A half-written tls.crt: reported once, the old one served; then whole, and served.
    let old_c = served_leaf(&pki, &shuck, "c.test");
    let c2 = pki.leaf("c2.bundle", "c", &["c.test"], Key::EcdsaP256);
    let whole = std::fs::read_to_string(&c2).expect("read");
    let chain = &whole[..whole.find("-----BEGIN PRIVATE KEY-----").expect("key")];
    std::fs::write(secret.join("tls.crt"), &chain[..chain.len() / 3]).expect("write half");
    shuck.wait_log("do not load");
    // That the old certificate stays has no event: past the watcher's settling time it would
    // have been replaced.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(
        served_leaf(&pki, &shuck, "c.test"),
        old_c,
        "the old one is served meanwhile"
    );
    let log = shuck.log_text();
    assert_eq!(log.matches("do not load").count(), 1, "{log}");
    let errors = shuck_test_support::clients::sum(
        &shuck_test_support::clients::scrape(shuck.addrs[1]),
        "shuck_certificate_watch_errors_total",
        &[],
    );
    assert_eq!(errors, 1);
    let healthy = |shuck: &Shuck| {
        shuck_test_support::clients::sum(
            &shuck_test_support::clients::scrape(shuck.addrs[1]),
            "shuck_certificate_watch_healthy",
            &[],
        )
    };
    assert_eq!(healthy(&shuck), 0, "while the changed files do not load");
    // The rest of the file, with its key: served.
    split(&c2, &secret, "tls.crt", "tls.key", 0o600);
    let want = first_pem(chain);
    let t = std::time::Instant::now();
    while served_leaf(&pki, &shuck, "c.test") != want {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "{}",
            shuck.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let loaded = shuck_test_support::clients::sum(
        &shuck_test_support::clients::scrape(shuck.addrs[1]),
        "shuck_certificate_loaded_timestamp_seconds",
        &["certificate=\""],
    );
    assert!(loaded > 0, "a loaded timestamp per certificate");
    assert_eq!(healthy(&shuck), 1, "once they load");
}

/// `watch_certificates = false`: a changed file waits for SIGHUP.
#[test]
fn with_watching_off_a_change_waits_for_sighup() {
    let pki = Pki::new();
    let secret = pki.path("secret");
    let c = pki.leaf("c.bundle", "c", &["c.test"], Key::EcdsaP256);
    split(&c, &secret, "tls.crt", "tls.key", 0o600);
    let backend = shuck_test_support::process::HttpBackend::start();
    let shuck = Shuck::start(&format!(
        "watch_certificates = false\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\n",
        backend.addr,
        toml_path(&secret),
    ));
    let old = served_leaf(&pki, &shuck, "c.test");
    let c2 = pki.leaf("c2.bundle", "c", &["c.test"], Key::EcdsaP256);
    split(&c2, &secret, "tls.crt", "tls.key", 0o600);
    // A change that must not be picked up has no event: past the watcher's settling time.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(
        served_leaf(&pki, &shuck, "c.test"),
        old,
        "loaded without SIGHUP"
    );
    shuck.signal("HUP");
    shuck.wait_log("reloaded");
    assert_ne!(served_leaf(&pki, &shuck, "c.test"), old);
}

/// certbot's `live/NAME/` briefly incomplete (its key moved out, then back): one error line,
/// and the watch goes on, so a renewal after it is served without a signal. (The watch on
/// `live/NAME/` was once lost after the failed load: renewals stopped loading, silently.)
#[test]
fn a_renewal_after_live_was_briefly_incomplete_is_served() {
    let pki = Pki::new();
    let root = pki.path("letsencrypt");
    certbot(&pki, &root, "a.test");
    let backend = shuck_test_support::process::HttpBackend::start();
    let shuck = Shuck::start(&format!(
        "[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = [{}]\n",
        backend.addr,
        toml_path(&root.join("live")),
    ));
    let first = served_leaf(&pki, &shuck, "a.test");
    let live = root.join("live").join("a.test");
    // Moved to a directory nothing watches, as an operator's `mv` to their home would.
    let elsewhere = pki.path("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    let aside = elsewhere.join("privkey.pem");
    std::fs::rename(live.join("privkey.pem"), &aside).expect("move the key out");
    shuck.wait_log("do not load");
    // An operator puts it back a moment later. The watcher re-arms its watches after the line
    // above, and nothing observable says when: a second is far past it.
    std::thread::sleep(std::time::Duration::from_secs(1));
    std::fs::rename(&aside, live.join("privkey.pem")).expect("put it back");
    let renewed = pki.leaf("a2.bundle", "a.test", &["a.test"], Key::EcdsaP256);
    let archive = root.join("archive").join("a.test");
    split(&renewed, &archive, "fullchain2.pem", "privkey2.pem", 0o600);
    swap_link(
        &live.join("fullchain.pem"),
        Path::new("../../archive/a.test/fullchain2.pem"),
    );
    swap_link(
        &live.join("privkey.pem"),
        Path::new("../../archive/a.test/privkey2.pem"),
    );
    let want = first_pem(&std::fs::read_to_string(archive.join("fullchain2.pem")).expect("read"));
    assert_ne!(first, want);
    let t = std::time::Instant::now();
    while served_leaf(&pki, &shuck, "a.test") != want {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "the renewal is not served 10 s after it:\n{}",
            shuck.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let log = shuck.log_text();
    assert_eq!(log.matches("do not load").count(), 1, "{log}");
}

/// A key or certificate that others than its owner may write (or whose directory they may):
/// whoever can write it chooses what shuck serves, so `shuck check` and the server warn, naming
/// the file and who may write it. The owner's own modes (0600, 0644, 0700) are no warning.
#[test]
fn keys_and_directories_writable_by_others_are_warned_about() {
    let pki = Pki::new();
    let b = pki.leaf("w.bundle", "w", &["w.test"], Key::EcdsaP256);
    let dir = pki.path("w");
    let (cert, key) = split(&b, &dir, "w.crt", "w.key", 0o600);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let check = |cert: &Path, key: &Path| {
        let out = shuck_test_support::process::run_bounded(
            std::process::Command::new(&*shuck_test_support::process::SHUCK)
                .args(["check", "--cert"])
                .arg(cert)
                .arg("--key")
                .arg(key),
            b"",
            30,
        );
        assert!(out.status.success(), "{out:?}");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let quiet = check(&cert, &key);
    assert!(!quiet.contains("writable"), "{quiet}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let out = check(&cert, &key);
    assert!(
        out.contains(&format!("{} is writable by every user", key.display())),
        "{out}"
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).expect("chmod");
    let out = check(&cert, &key);
    assert!(
        out.contains(&format!("{} is writable by its group", dir.display())),
        "{out}"
    );
    let shuck = Shuck::start(&format!(
        "[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = [{{ cert = {}, key = {} }}]\n",
        toml_path(&cert),
        toml_path(&key)
    ));
    let log = shuck.log_text();
    assert_eq!(
        log.matches("is writable by its group").count(),
        1,
        "one line for the directory both files are in: {log}"
    );
}
