//! `shuck ctl cert add|replace|remove` against a running shuck: new handshakes get the change
//! at once, a client loop sees no failure, a mismatched bundle changes nothing.

use super::*;

/// The subject a handshake for `name` is served (openssl s_client's `subject=` line, without
/// spaces).
fn served_cn(pki: &Pki, web: std::net::SocketAddr, name: &str) -> String {
    let (_, out) = shuck_test_support::clients::s_client(pki, web, Some(name), &[]);
    out.lines()
        .find_map(|l| l.strip_prefix("subject=").map(|s| s.replace(' ', "")))
        .unwrap_or_else(|| panic!("no subject line: {out}"))
}

/// `cert add` from standard input: new handshakes for its name get it at once; `cert replace`
/// under a client loop (no failure) swaps it; a bundle whose key does not match is refused as a
/// configured one is, and nothing changes; it outlives a reload; `cert remove` takes it away.
#[test]
fn certificates_are_added_replaced_and_removed_while_serving() {
    let pki = Pki::new();
    let dir = socket_dir();
    let backend = HttpBackend::start();
    let state = socket_dir();
    let (shuck, socket) = start(
        &pki,
        dir.path(),
        &[&backend],
        &format!("state_dir = {}", toml_path(state.path())),
    );
    let web = shuck.addrs[0];
    assert!(served_cn(&pki, web, "new.test").contains("CN=web"));
    let first = pki.leaf("new1.pem", "new-one", &["new.test"], Key::EcdsaP256);
    let pem = std::fs::read(&first).expect("pem");
    let add = ctl_with(&socket, &["cert", "add", "web"], &pem);
    assert_eq!(add.status.code(), Some(0), "{}", text(&add));
    assert!(
        String::from_utf8_lossy(&add.stdout).contains("added"),
        "{}",
        text(&add)
    );
    assert!(served_cn(&pki, web, "new.test").contains("CN=new-one"));
    assert!(
        served_cn(&pki, web, "a.test").contains("CN=web"),
        "the others stay"
    );
    let again = ctl_with(&socket, &["cert", "add", "web"], &pem);
    assert_eq!(
        again.status.code(),
        Some(1),
        "the name is taken: {}",
        text(&again)
    );
    let bad = pki.mismatched("bad.pem");
    let refused = ctl(
        &socket,
        &[
            "cert",
            "replace",
            "web",
            "new.test",
            "--cert",
            bad.to_str().expect("path"),
        ],
    );
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(text(&refused).contains("key"), "{}", text(&refused));
    assert!(served_cn(&pki, web, "new.test").contains("CN=new-one"));
    let second = pki.leaf("new2.pem", "new-two", &["new.test"], Key::EcdsaP256);
    std::thread::scope(|scope| {
        let client = ClientLoop::start(scope, &pki, web, "new.test");
        within(
            Duration::from_secs(20),
            "requests before the swap",
            || served(&backend) >= 5,
            || shuck.log_text(),
        );
        let out = ctl(
            &socket,
            &[
                "cert",
                "replace",
                "web",
                "new.test",
                "--cert",
                second.to_str().expect("path"),
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let at = served(&backend);
        within(
            Duration::from_secs(20),
            "requests after the swap",
            || served(&backend) >= at + 5,
            || shuck.log_text(),
        );
        let (done, failures) = client.finish();
        assert!(
            failures.is_empty(),
            "{} of {done} failed: {failures:?}",
            failures.len()
        );
    });
    assert!(served_cn(&pki, web, "new.test").contains("CN=new-two"));
    let reload = ctl(&socket, &["reload"]);
    assert_eq!(reload.status.code(), Some(0), "{}", text(&reload));
    assert!(
        served_cn(&pki, web, "new.test").contains("CN=new-two"),
        "lost at reload"
    );
    let listed = ctl_json(&socket, &["cert", "list"]);
    let added: Vec<&serde_json::Value> = listed
        .as_array()
        .expect("list")
        .iter()
        .filter(|c| c["added"] == true)
        .collect();
    assert_eq!(added.len(), 1, "{listed}");
    assert_eq!(added[0]["names"][0], "new.test", "{listed}");
    let out = ctl(&socket, &["cert", "remove", "web", "new.test"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        served_cn(&pki, web, "new.test").contains("CN=web"),
        "removed, the default again"
    );
    // add, add (refused), replace (refused), replace, reload, remove.
    within(
        Duration::from_secs(5),
        "six admin command lines",
        || shuck.log_text().matches("admin command").count() == 6,
        || shuck.log_text(),
    );
}
