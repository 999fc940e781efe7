//! `shuck ctl` and the admin socket against a running shuck with real clients: curl in a loop
//! while a backend is drained, connections held open while a backend is disabled or
//! connections are closed, a reload of a broken file, the socket's permissions, and requests
//! that are too long or not commands, through `socat` as an operator would type them;
//! certificates changed while serving in `certificates`, upgrades through the socket in
//! `upgrades`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use shuck_test_support::clients::{curl_at, held_request, within, ClientLoop};
use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::{run_bounded, running_as_root, HttpBackend, Shuck, SHUCK};

mod certificates;
mod upgrades;

/// A directory for the socket that only its owner may write (the test's own directory is
/// opened to every user when the tests run as root, which the socket refuses).
fn socket_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    dir
}

/// Requests `b` answered so far.
fn served(b: &HttpBackend) -> usize {
    b.served.load(std::sync::atomic::Ordering::Relaxed)
}

/// `shuck ctl --socket SOCKET ARGS…` with `stdin`.
fn ctl_with(socket: &Path, args: &[&str], stdin: &[u8]) -> Output {
    run_bounded(
        Command::new(&*SHUCK)
            .arg("ctl")
            .arg("--socket")
            .arg(socket)
            .args(args),
        stdin,
        30,
    )
}

/// `shuck ctl --socket SOCKET ARGS…`.
fn ctl(socket: &Path, args: &[&str]) -> Output {
    ctl_with(socket, args, b"")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `shuck ctl … --json`'s data, asserting exit 0.
fn ctl_json(socket: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = ctl(socket, &all);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    serde_json::from_slice(&out.stdout).expect("json")
}

/// What `socat` gets back for `input` sent to the socket.
fn socat(socket: &Path, input: &[u8]) -> String {
    let out = run_bounded(
        Command::new("socat").args([
            "-t",
            "5",
            "-",
            &format!("UNIX-CONNECT:{}", socket.display()),
        ]),
        input,
        20,
    );
    assert!(out.status.success(), "socat: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A shuck with one frontend `web` over `backends`, its admin socket in `dir`; `more` adds
/// global keys.
fn start(pki: &Pki, dir: &Path, backends: &[&HttpBackend], more: &str) -> (Shuck, PathBuf) {
    let cert = pki.leaf("web.pem", "web", &["a.test", "b.test"], Key::EcdsaP256);
    let socket = dir.join("admin.sock");
    let list: Vec<String> = backends.iter().map(|b| format!("\"{}\"", b.addr)).collect();
    let shuck = Shuck::start(&format!(
        "workers = 2\nadmin_socket = {}\n{more}\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\n\
         backend = [{}]\ncertificates = {}\n",
        toml_path(&socket),
        list.join(", "),
        toml_path(&cert)
    ));
    (shuck, socket)
}

/// Drained under a client loop: no request fails, the drained backend gets no new connection,
/// the one it had open finishes; enabled again, it gets its share back. The state shows in
/// `show backends`, and the command is logged once.
#[test]
fn a_drained_backend_gets_no_new_connection_and_its_open_one_finishes() {
    let pki = Pki::new();
    let dir = socket_dir();
    let (one, two) = (HttpBackend::start(), HttpBackend::start());
    let (shuck, socket) = start(
        &pki,
        dir.path(),
        &[&one, &two],
        "metrics_listen = \"127.0.0.1:0\"",
    );
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    // A connection on each backend, held open (request line sent, headers not yet).
    let mut held: Vec<_> = (0..4)
        .map(|i| held_request(&pki, web, "a.test", &format!("/held{i}")))
        .collect();
    let target = format!("web/{}", two.addr);
    std::thread::scope(|scope| {
        let client = ClientLoop::start(scope, &pki, web, "a.test");
        within(
            Duration::from_secs(20),
            "requests before the drain",
            || served(&one) >= 5,
            || shuck.log_text(),
        );
        let out = ctl(&socket, &["backend", "drain", &target]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("drain"),
            "{}",
            text(&out)
        );
        // A connection accepted before the drain may still go to it: let those finish first.
        let settled = served(&one) + 2;
        within(
            Duration::from_secs(20),
            "requests in flight at the drain",
            || served(&one) >= settled,
            || shuck.log_text(),
        );
        let at_drain = served(&two);
        let ones = served(&one);
        within(
            Duration::from_secs(30),
            "requests after the drain",
            || served(&one) >= ones + 20,
            || shuck.log_text(),
        );
        let (done, failures) = client.finish();
        assert!(
            failures.is_empty(),
            "{} of {done} failed: {failures:?}",
            failures.len()
        );
        assert_eq!(
            served(&two),
            at_drain,
            "the drained backend got new requests"
        );
    });
    // The connections opened before the drain finish, on whichever backend they had.
    for tls in &mut held {
        tls.write_all(b"Host: a.test\r\n\r\n")
            .expect("rest of the request");
        let mut answer = Vec::new();
        let _ = tls.read_to_end(&mut answer);
        assert!(
            String::from_utf8_lossy(&answer).contains("backend got: GET /held"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
    }
    assert!(
        served(&two) >= 1,
        "a held connection was on the drained backend"
    );
    let shown = ctl_json(&socket, &["show", "backends"]);
    let state = |addr: &str| {
        shown
            .as_array()
            .expect("list")
            .iter()
            .find(|b| b["backend"] == addr)
            .map(|b| b["state"].clone())
    };
    assert_eq!(
        state(&two.addr.to_string()),
        Some("drain".into()),
        "{shown}"
    );
    assert_eq!(
        state(&one.addr.to_string()),
        Some("enabled".into()),
        "{shown}"
    );
    // In the metrics and on the status page too.
    let scraped = shuck_test_support::clients::scrape(metrics);
    let admin = format!(
        "shuck_backend_admin_state{{frontend=\"web\",route=\"default\",backend=\"{}\"}} 1",
        two.addr
    );
    assert!(scraped.contains(&admin), "{scraped}");
    let page = super::routes::status_page(metrics);
    assert!(page.contains("<b class=\"warn\">drain</b>"), "{page}");
    within(
        Duration::from_secs(5),
        "one admin command line",
        || shuck.log_text().matches("admin command").count() >= 1,
        || shuck.log_text(),
    );
    assert_eq!(
        shuck.log_text().matches("admin command").count(),
        1,
        "{}",
        shuck.log_text()
    );
    // Enabled: back in the rotation.
    let out = ctl(&socket, &["backend", "enable", &target]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let before = served(&two);
    for i in 0..6 {
        assert!(curl_at(&pki, web, "a.test", &format!("/after{i}"), &[])
            .status
            .success());
    }
    assert!(served(&two) > before, "enabled, it got nothing");
}

/// Disabled: its open connections are closed after `shutdown_grace` (close_notify: the client
/// sees an orderly end), the other backend's stay; a backend that is not configured is refused
/// with the list of those that are.
#[test]
fn a_disabled_backends_open_connections_close_after_the_grace() {
    let pki = Pki::new();
    let dir = socket_dir();
    let (one, two) = (HttpBackend::start(), HttpBackend::start());
    let (shuck, socket) = start(&pki, dir.path(), &[&one, &two], "shutdown_grace = \"1s\"");
    let web = shuck.addrs[0];
    let mut held: Vec<_> = (0..4)
        .map(|i| held_request(&pki, web, "a.test", &format!("/h{i}")))
        .collect();
    // Wait until all four relay (each worker's registry lists them).
    within(
        Duration::from_secs(10),
        "four relayed connections",
        || ctl_json(&socket, &["show", "connections"])["picked"] == 4,
        || shuck.log_text(),
    );
    // Each worker takes turns from the first backend: a worker with two has one on each.
    let held_on_two = ctl_json(
        &socket,
        &["show", "connections", "--backend", &two.addr.to_string()],
    )["picked"]
        .as_u64()
        .expect("count");
    assert!(held_on_two >= 1);
    let refused = ctl(&socket, &["backend", "disable", "web/127.0.0.1:1"]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains(&one.addr.to_string()),
        "{}",
        text(&refused)
    );
    let out = ctl(
        &socket,
        &["backend", "disable", &format!("web/{}", two.addr)],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("close in 1s"),
        "{}",
        text(&out)
    );
    shuck.wait_log("disabled backend: closed its open connections");
    // Gone once their close_notify is out (bounded at a second).
    within(
        Duration::from_secs(5),
        "the disabled backend's connections gone",
        || {
            ctl_json(
                &socket,
                &["show", "connections", "--backend", &two.addr.to_string()],
            )["picked"]
                == 0
        },
        || shuck.log_text(),
    );
    let on_one = ctl_json(
        &socket,
        &["show", "connections", "--backend", &one.addr.to_string()],
    );
    assert_eq!(on_one["picked"], 4 - held_on_two, "{on_one}");
    // Those on the disabled backend were closed in order (close_notify then EOF), the others
    // still answer.
    let (mut closed, mut answered) = (0, 0);
    for tls in &mut held {
        let _ = tls.write_all(b"Host: a.test\r\n\r\n");
        let mut answer = Vec::new();
        match tls.read_to_end(&mut answer) {
            Ok(_) if answer.is_empty() => closed += 1,
            Ok(_) => answered += 1,
            Err(e) => panic!("not an orderly close: {e}"),
        }
    }
    assert_eq!((closed, answered), (held_on_two, 4 - held_on_two));
}

/// `show connections` names each connection's client, server name, version and backend, with
/// its bytes; `connections close --sni` closes only those that asked for that name.
#[test]
fn connections_are_listed_and_closed_by_server_name() {
    let pki = Pki::new();
    let dir = socket_dir();
    let backend = HttpBackend::start();
    let (shuck, socket) = start(&pki, dir.path(), &[&backend], "");
    let web = shuck.addrs[0];
    let mut a = held_request(&pki, web, "a.test", "/a");
    let mut b = held_request(&pki, web, "b.test", "/b");
    within(
        Duration::from_secs(10),
        "two relayed connections",
        || ctl_json(&socket, &["show", "connections"])["picked"] == 2,
        || shuck.log_text(),
    );
    let shown = ctl_json(&socket, &["show", "connections", "--sni", "A.TEST"]);
    assert_eq!(shown["picked"], 1, "{shown}");
    let c = &shown["shown"][0];
    assert_eq!(c["sni"], "a.test", "{c}");
    assert_eq!(c["version"], "TLSv1.3", "{c}");
    assert_eq!(c["backend"], backend.addr.to_string(), "{c}");
    assert_eq!(c["frontend"], "web", "{c}");
    assert!(
        c["client"]
            .as_str()
            .is_some_and(|s| s.starts_with("127.0.0.1:")),
        "{c}"
    );
    // The request line went through: "GET /a HTTP/1.1\r\n".
    assert_eq!(c["bytes_in"], 17, "{c}");
    let people = ctl(&socket, &["show", "connections"]);
    assert!(
        String::from_utf8_lossy(&people.stdout).contains("2 connections match"),
        "{}",
        text(&people)
    );
    let none = ctl_json(&socket, &["show", "connections", "--client", "10.0.0.0/8"]);
    assert_eq!(none["picked"], 0, "{none}");
    let out = ctl(&socket, &["connections", "close", "--sni", "a.test"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("1 connections told to close"),
        "{}",
        text(&out)
    );
    let mut rest = Vec::new();
    assert!(
        a.read_to_end(&mut rest).is_ok() && rest.is_empty(),
        "a.test: not an orderly close"
    );
    b.write_all(b"Host: b.test\r\n\r\n").expect("b");
    let mut answer = String::new();
    let _ = b.read_to_string(&mut answer);
    assert!(answer.contains("backend got: GET /b"), "{answer}");
    let all = ctl(&socket, &["connections", "close"]);
    assert_eq!(
        all.status.code(),
        Some(2),
        "a close without a filter: {}",
        text(&all)
    );
}

/// `shuck ctl reload`: a broken file is named and nothing applies (exit 1); a good one says
/// which settings changed (exit 0); one needing a restart says so (exit 3). `check` answers
/// as `shuck check` does.
#[test]
fn a_reload_answers_with_its_report_and_exit_code() {
    let pki = Pki::new();
    let dir = socket_dir();
    let backend = HttpBackend::start();
    let (shuck, socket) = start(&pki, dir.path(), &[&backend], "");
    let path = shuck.config_path();
    let good = std::fs::read_to_string(&path).expect("config");
    std::fs::write(&path, good.replace("listen =", "listen = [")).expect("break it");
    let broken = ctl(&socket, &["reload"]);
    assert_eq!(broken.status.code(), Some(1), "{}", text(&broken));
    assert!(
        text(&broken).contains("nothing applied") && text(&broken).contains("shuck.toml"),
        "{}",
        text(&broken)
    );
    let check = ctl(&socket, &["check"]);
    assert_eq!(check.status.code(), Some(1), "{}", text(&check));
    std::fs::write(
        &path,
        good.replace("[[frontend]]", "[[frontend]]\nidle_timeout = \"7s\""),
    )
    .expect("edit");
    let ok = ctl(&socket, &["reload"]);
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    assert!(
        String::from_utf8_lossy(&ok.stdout)
            .contains("changed frontend \"web\" timeouts.idle: \"5m\" -> \"7s\""),
        "{}",
        text(&ok)
    );
    let check = ctl(&socket, &["check"]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check));
    assert!(
        String::from_utf8_lossy(&check.stdout).contains("idle 7s"),
        "{}",
        text(&check)
    );
    std::fs::write(&path, format!("metrics_listen = \"127.0.0.1:0\"\n{good}")).expect("edit");
    let restart = ctl(&socket, &["reload"]);
    assert_eq!(restart.status.code(), Some(3), "{}", text(&restart));
    assert!(
        text(&restart).contains("metrics_listen changed; restart to apply it"),
        "{}",
        text(&restart)
    );
    // Served all along.
    assert!(curl_at(&pki, shuck.addrs[0], "a.test", "/", &[])
        .status
        .success());
}

/// Requests as `socat` sends them: several on one connection, each answered; a word that is
/// no command gets one error line and the connection goes on; a line over 4096 bytes or not
/// UTF-8 gets one error line and the connection is closed.
#[test]
fn malformed_and_oversized_requests_get_one_error_line() {
    let pki = Pki::new();
    let dir = socket_dir();
    let backend = HttpBackend::start();
    let (shuck, socket) = start(&pki, dir.path(), &[&backend], "");
    let answer = socat(&socket, b"frobnicate\nshow limits --json\nshow frontends\n");
    let parts: Vec<&str> = answer.split("\n\n").collect();
    assert!(
        parts[0].starts_with("error: unrecognized subcommand 'frobnicate'")
            && !parts[0].contains('\n'),
        "{answer}"
    );
    let json: serde_json::Value =
        serde_json::from_str(parts[1].lines().next().expect("json")).expect(parts[1]);
    assert_eq!(json["exit"], 0, "{json}");
    assert_eq!(json["data"]["max_connections"], 8192, "{json}");
    assert!(
        parts[1]
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("FRONTEND")),
        "{answer}"
    );
    let long = format!("show {}\nshow frontends\n", "x".repeat(5000));
    let answer = socat(&socket, long.as_bytes());
    assert_eq!(
        answer, "error: request line longer than 4096 bytes\n\n",
        "{answer}"
    );
    let answer = socat(&socket, b"show \xff\xfe\nshow frontends\n");
    assert_eq!(answer, "error: request line is not UTF-8\n\n", "{answer}");
    let mut s = std::os::unix::net::UnixStream::connect(&socket).expect("connect");
    s.write_all(b"backend weight web/x 0\n").expect("send");
    s.shutdown(std::net::Shutdown::Write).expect("shutdown");
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("read");
    assert!(
        answer.starts_with("error: invalid value '0'") && answer.ends_with("\n\n"),
        "{answer}"
    );
    assert!(
        shuck.log_text().matches("admin command").count() == 0,
        "{}",
        shuck.log_text()
    );
}

/// The socket is 0660 and refused to other users (checked as root with `nobody`); a directory
/// every user may write is refused at start, naming it.
#[test]
fn the_socket_is_the_serving_users_and_other_users_cannot_connect() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let pki = Pki::new();
    let dir = socket_dir();
    let backend = HttpBackend::start();
    let (_shuck, socket) = start(&pki, dir.path(), &[&backend], "");
    let meta = std::fs::metadata(&socket).expect("socket");
    assert_eq!(meta.mode() & 0o777, 0o660);
    assert_eq!(meta.uid(), nix_euid());
    if running_as_root() {
        let out = run_bounded(
            Command::new("setpriv")
                .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
                .arg(&*SHUCK)
                .args(["ctl", "--socket"])
                .arg(&socket)
                .args(["show", "frontends"]),
            b"",
            20,
        );
        assert_eq!(out.status.code(), Some(4), "{}", text(&out));
        assert!(text(&out).contains("Permission denied"), "{}", text(&out));
    }
    let open = tempfile::tempdir().expect("dir");
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let cert = pki.leaf("o.pem", "o", &["a.test"], Key::EcdsaP256);
    let cfg = open.path().join("shuck.toml");
    std::fs::write(
        &cfg,
        format!(
            "admin_socket = {}\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
            toml_path(&open.path().join("admin.sock")),
            toml_path(&cert)
        ),
    )
    .expect("config");
    let out = run_bounded(
        Command::new(&*SHUCK)
            .args(["serve", "--config"])
            .arg(&cfg)
            .args(shuck_test_support::process::as_root_allowed()),
        b"",
        20,
    );
    assert!(!out.status.success());
    let said = text(&out);
    assert!(
        said.contains("can be written by every user")
            && said.contains(&open.path().display().to_string()),
        "{said}"
    );
}

fn nix_euid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1).map(str::to_string))
        })
        .and_then(|u| u.parse().ok())
        .expect("euid")
}

/// A backend's state outlives a reload and, with a `state_dir`, a restart; a reload that
/// removes the backend forgets it, so added back later it starts enabled.
#[test]
fn backend_states_outlive_reloads_and_restarts_until_the_backend_goes() {
    let pki = Pki::new();
    let dir = socket_dir();
    let state = socket_dir();
    std::fs::set_permissions(
        state.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("chmod");
    let (one, two) = (HttpBackend::start(), HttpBackend::start());
    let more = format!("state_dir = {}", toml_path(state.path()));
    let state_of = |socket: &Path, backend: &HttpBackend| {
        ctl_json(socket, &["show", "backends"])
            .as_array()
            .expect("list")
            .iter()
            .find(|b| b["backend"] == backend.addr.to_string())
            .map(|b| b["state"].clone())
    };
    let (shuck, socket) = start(&pki, dir.path(), &[&one, &two], &more);
    let target = format!("web/{}", two.addr);
    let out = ctl(&socket, &["backend", "drain", &target]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = ctl(&socket, &["reload"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(state_of(&socket, &two), Some("drain".into()));
    let (status, _) = shuck.stop();
    assert!(status.success());
    let (shuck, socket) = start(&pki, dir.path(), &[&one, &two], &more);
    assert_eq!(
        state_of(&socket, &two),
        Some("drain".into()),
        "lost at restart"
    );
    // Served by the other one alone.
    let before = served(&two);
    for i in 0..4 {
        assert!(
            curl_at(&pki, shuck.addrs[0], "a.test", &format!("/{i}"), &[])
                .status
                .success()
        );
    }
    assert_eq!(served(&two), before);
    // Removed by a reload, then added back: enabled.
    let path = shuck.config_path();
    let both = std::fs::read_to_string(&path).expect("config");
    let without = both.replace(&format!(", \"{}\"", two.addr), "");
    assert_ne!(without, both);
    std::fs::write(&path, &without).expect("config");
    assert_eq!(ctl(&socket, &["reload"]).status.code(), Some(0));
    std::fs::write(&path, &both).expect("config");
    assert_eq!(ctl(&socket, &["reload"]).status.code(), Some(0));
    assert_eq!(state_of(&socket, &two), Some("enabled".into()));
}
