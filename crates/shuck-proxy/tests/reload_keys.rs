//! Every key in docs/configuration.md, changed in a running engine and reloaded: the reload
//! either applies it to what new connections are built from, or names it as needing a restart.
//! No key may be silently kept.
//!
//! What new connections get is read from the engine as its workers read it when they accept
//! (`Reloader::in_force`: each frontend's settings slot, the global keys as applied), rendered
//! the way `running.toml` renders it. A reload that recorded a new value but left the workers
//! on the old one (as `ktls` once was) shows there. Each row also says which of the two it
//! expects, and `shuck check`'s prediction (`running::changes`) must agree with what the reload
//! did.

use shuck_test_support::harness;

use std::collections::BTreeMap;

use harness::{config, Running};
use shuck_proxy::running::{self, Applies};
use shuck_test_support::pki::{toml_path, Key, Pki};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// New connections get the new value.
    Applied,
    /// The reload names the key as needing a restart, and keeps the old value.
    Restart,
    /// Applied by the `shuck` binary's reload, outside the engine (`log_level`: the log
    /// filter belongs to the process's subscriber).
    ByTheBinary,
}

/// Files the rows name.
struct Files {
    pki: Pki,
    other_ca: Pki,
    state: tempfile::TempDir,
    other_state: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        let pki = Pki::new();
        pki.leaf("a.pem", "a.test", &["a.test"], Key::EcdsaP256);
        pki.leaf("b.pem", "b.test", &["b.test"], Key::EcdsaP256);
        pki.crl("crl.pem", &[7]);
        for (name, format) in [("tk1", "haproxy"), ("tk2", "nginx")] {
            let format = match format {
                "nginx" => shuck_proxy::config::TicketKeyFormat::Nginx,
                _ => shuck_proxy::config::TicketKeyFormat::Haproxy,
            };
            let key = shuck_proxy::new_ticket_key(format, 80).expect("ticket key");
            std::fs::write(pki.path(name), key).expect("ticket key file");
        }
        std::fs::write(pki.path("store1"), [1u8; 40]).expect("store key");
        std::fs::write(pki.path("store2"), [2u8; 40]).expect("store key");
        Files {
            other_ca: Pki::new(),
            pki,
            state: tempfile::tempdir().expect("state dir"),
            other_state: tempfile::tempdir().expect("state dir"),
        }
    }

    fn path(&self, name: &str) -> String {
        toml_path(&self.pki.path(name))
    }
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    shuck_test_support::ports::tcp()
}

/// One key: its lines before and after (global lines, frontend lines), and what the reload
/// should do.
struct Row {
    key: &'static str,
    global: (String, String),
    frontend: (String, String),
    expect: Expect,
}

fn global(key: &'static str, a: &str, b: &str, expect: Expect) -> Row {
    Row {
        key,
        global: (a.into(), b.into()),
        frontend: (String::new(), String::new()),
        expect,
    }
}

fn frontend(key: &'static str, a: String, b: String, expect: Expect) -> Row {
    Row {
        key,
        global: (String::new(), String::new()),
        frontend: (a, b),
        expect,
    }
}

#[allow(clippy::too_many_lines)] // Reason: the table, one row per documented key.
fn rows(f: &Files) -> Vec<Row> {
    use Expect::{Applied, ByTheBinary, Restart};
    let state2 = format!("state_dir = {}", toml_path(f.other_state.path()));
    let metrics = format!("metrics_listen = \"127.0.0.1:{}\"", free_port());
    let (a, b, ca, ca2) = (
        f.path("a.pem"),
        f.path("b.pem"),
        toml_path(&f.pki.ca_path()),
        toml_path(&f.other_ca.ca_path()),
    );
    let required = format!("client_auth = \"required\"\nclient_ca = {ca}\n");
    let v2_cert = format!(
        "{required}proxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"ssl\", \"client_cert\"]\n"
    );
    let store = |key: &str, timeout: &str| {
        format!("session_store = \"redis://127.0.0.1:1/\"\nsession_store_key = {}\nsession_store_timeout = \"{timeout}\"\n", f.path(key))
    };
    let acme = |name: &str| {
        format!("acme = {{ directory = \"https://127.0.0.1:1/dir\", names = [\"{name}\"] }}\n")
    };
    let acme_store = |key: &str| {
        format!(
            "{}acme_store = \"redis://127.0.0.1:1/\"\nacme_store_key = {}\n",
            acme("a.test"),
            f.path(key)
        )
    };
    vec![
        global("workers", "workers = 1", "workers = 2", Restart),
        global("pin_cpus", "pin_cpus = false", "pin_cpus = true", Restart),
        global(
            "overload_threshold",
            "overload_threshold = 0.9",
            "overload_threshold = 0.5",
            Applied,
        ),
        global(
            "max_connections",
            "max_connections = 100",
            "max_connections = 200",
            Applied,
        ),
        global("shutdown_grace", "", "shutdown_grace = \"7s\"", Applied),
        global("reload_timeout", "", "reload_timeout = \"7s\"", Applied),
        global("upgrade_confirm", "", "upgrade_confirm = \"7s\"", Applied),
        global("upgrade_timeout", "", "upgrade_timeout = \"7s\"", Applied),
        global("log_format", "", "log_format = \"json\"", Restart),
        global("log_queue_lines", "", "log_queue_lines = 100", Restart),
        global("log_target", "", "log_target = \"syslog\"", Restart),
        global(
            "log_address",
            "log_target = \"syslog\"",
            "log_target = \"syslog\"\nlog_address = \"udp://127.0.0.1:9\"",
            Restart,
        ),
        global("log_level", "", "log_level = \"debug\"", ByTheBinary),
        global("log_connections", "", "log_connections = true", Applied),
        global(
            "connection_log_format",
            "",
            "connection_log_format = \"haproxy\"",
            Applied,
        ),
        global("metrics_listen", "", &metrics, Restart),
        global(
            "redirect",
            "",
            &format!("[[redirect]]\nlisten = \"127.0.0.1:{}\"", free_port()),
            Restart,
        ),
        global("user", "", "user = \"nobody\"", Restart),
        global("group", "user = \"nobody\"", "user = \"nobody\"\ngroup = \"nogroup\"", Restart),
        global("allow_root", "", "allow_root = true", Restart),
        global("resolvers", "", "resolvers = [\"127.0.0.1:53\"]", Applied),
        global(
            "dns_allow_special_addresses",
            "",
            "dns_allow_special_addresses = true",
            Applied,
        ),
        global("watch_certificates", "", "watch_certificates = false", Applied),
        global(
            "pkcs11_module",
            "",
            "pkcs11_module = \"/usr/lib/softhsm/libsofthsm2.so\"",
            Applied,
        ),
        global("pkcs11_signers", "", "pkcs11_signers = 4", Applied),
        global("metrics_per_worker", "", "metrics_per_worker = true", Applied),
        global("admin_socket", "", "admin_socket = \"/run/shuck/a.sock\"", Restart),
        global(
            "admin_group",
            "admin_socket = \"/run/shuck/a.sock\"",
            "admin_socket = \"/run/shuck/a.sock\"\nadmin_group = \"adm\"",
            Restart,
        ),
        global(
            "certificate_expiry_warning",
            "",
            "certificate_expiry_warning = \"3d\"",
            Applied,
        ),
        global("state_dir", "", &state2, Restart),
        frontend("name", String::new(), "name = \"web2\"".into(), Applied),
        frontend(
            "listen",
            String::new(),
            format!("listen = \"127.0.0.1:{}\"", free_port()),
            Applied,
        ),
        frontend(
            "backend",
            String::new(),
            "backend = \"127.0.0.1:10\"".into(),
            Applied,
        ),
        frontend(
            "health_check",
            String::new(),
            "health_check = { interval = \"1s\", timeout = \"500ms\" }".into(),
            Applied,
        ),
        // (Written `backend=` so the base's own `backend = …` line stays.)
        frontend(
            "route",
            String::new(),
            "[[frontend.route]]\nsni = [\"a.test\"]\nbackend=\"127.0.0.1:11\"".into(),
            Applied,
        ),
        frontend(
            "backend_tls",
            String::new(),
            "backend_tls = { verify = \"none\" }".into(),
            Applied,
        ),
        frontend(
            "backend_policy",
            String::new(),
            "backend_policy = \"least_connections\"".into(),
            Applied,
        ),
        frontend(
            "certificates",
            format!("certificates = {a}"),
            format!("certificates = {b}"),
            Applied,
        ),
        frontend(
            "self_signed",
            format!("certificates = {a}"),
            "self_signed = true".into(),
            Applied,
        ),
        frontend("acme", acme("a.test"), acme("b.test"), Restart),
        frontend(
            "on_demand",
            acme("a.test"),
            format!(
                "{}on_demand = {{ ask = \"http://127.0.0.1:9/allowed\" }}\n",
                acme("a.test")
            ),
            Restart,
        ),
        frontend("ocsp", String::new(), "ocsp = \"fetch\"".into(), Restart),
        frontend(
            "default_certificate",
            format!("certificates = [{a}, {b}]"),
            format!("certificates = [{a}, {b}]\ndefault_certificate = {b}"),
            Applied,
        ),
        frontend(
            "unknown_sni",
            String::new(),
            "unknown_sni = \"reject\"".into(),
            Applied,
        ),
        frontend(
            "missing_sni",
            String::new(),
            "missing_sni = \"reject\"".into(),
            Applied,
        ),
        frontend(
            "protocols",
            String::new(),
            "protocols = [\"TLS1.3\"]".into(),
            Applied,
        ),
        frontend(
            "ciphersuites",
            String::new(),
            "ciphersuites = [\"TLS13_AES_128_GCM_SHA256\", \"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\"]".into(),
            Applied,
        ),
        frontend(
            "groups",
            String::new(),
            "groups = [\"X25519\"]".into(),
            Applied,
        ),
        frontend("alpn", String::new(), "alpn = [\"h2\"]".into(), Applied),
        frontend(
            "handshake_timeout",
            String::new(),
            "handshake_timeout = \"3s\"".into(),
            Applied,
        ),
        frontend(
            "idle_timeout",
            String::new(),
            "idle_timeout = \"3s\"".into(),
            Applied,
        ),
        frontend(
            "connect_timeout",
            String::new(),
            "connect_timeout = \"1s\"".into(),
            Applied,
        ),
        frontend(
            "backend_cooldown",
            String::new(),
            "backend_cooldown = \"1s\"".into(),
            Applied,
        ),
        frontend(
            "dns_refresh",
            String::new(),
            "dns_refresh = \"5s\"".into(),
            Applied,
        ),
        frontend("backlog", String::new(), "backlog = 64".into(), Applied),
        frontend(
            "defer_accept",
            String::new(),
            "defer_accept = \"0s\"".into(),
            Applied,
        ),
        frontend("ktls", String::new(), "ktls = true".into(), Applied),
        frontend(
            "record_layer",
            String::new(),
            "record_layer = \"rustls\"".into(),
            Applied,
        ),
        frontend(
            "proxy_protocol",
            String::new(),
            "proxy_protocol = \"v1\"".into(),
            Applied,
        ),
        frontend(
            "proxy_protocol_tlvs",
            "proxy_protocol = \"v2\"".into(),
            "proxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"alpn\"]".into(),
            Applied,
        ),
        frontend(
            "proxy_client_cert_tlv",
            v2_cert.clone(),
            format!("{v2_cert}proxy_client_cert_tlv = 0xE1"),
            Applied,
        ),
        frontend(
            "accept_proxy",
            String::new(),
            "accept_proxy = true".into(),
            Applied,
        ),
        frontend(
            "accept_proxy_from",
            "accept_proxy = true".into(),
            "accept_proxy = true\naccept_proxy_from = [\"10.0.0.0/8\"]".into(),
            Applied,
        ),
        frontend(
            "allow",
            String::new(),
            "allow = [\"127.0.0.0/8\"]".into(),
            Applied,
        ),
        frontend(
            "deny",
            String::new(),
            "deny = [\"192.0.2.0/24\"]".into(),
            Applied,
        ),
        frontend(
            "deny_ja4",
            String::new(),
            "deny_ja4 = [\"t13d1516h2_8daaf6152771_e5627efa2ab1\"]".into(),
            Applied,
        ),
        frontend(
            "max_connections",
            String::new(),
            "max_connections = 10".into(),
            Applied,
        ),
        frontend(
            "per_client",
            "per_client = { connections = 8 }".into(),
            "per_client = { connections = 9, handshakes = \"20/s\" }".into(),
            Applied,
        ),
        frontend(
            "per_client_table",
            "per_client = { connections = 8 }".into(),
            "per_client = { connections = 8 }\nper_client_table = 4096".into(),
            Applied,
        ),
        frontend(
            "proxy_header_timeout",
            "accept_proxy = true".into(),
            "accept_proxy = true\nproxy_header_timeout = \"2s\"".into(),
            Applied,
        ),
        frontend("client_auth", String::new(), required.clone(), Applied),
        frontend(
            "client_ca",
            required.clone(),
            format!("client_auth = \"required\"\nclient_ca = {ca2}\n"),
            Applied,
        ),
        frontend(
            "client_crl",
            required.clone(),
            format!("{required}client_crl = {}", f.path("crl.pem")),
            Applied,
        ),
        frontend(
            "session_cache_size",
            String::new(),
            "session_cache_size = 100".into(),
            Applied,
        ),
        frontend(
            "session_tickets",
            String::new(),
            "session_tickets = false".into(),
            Applied,
        ),
        frontend(
            "session_ticket_keys",
            String::new(),
            format!("session_ticket_keys = {}", f.path("tk1")),
            Applied,
        ),
        frontend(
            "session_ticket_key_format",
            format!("session_ticket_keys = {}", f.path("tk1")),
            format!(
                "session_ticket_keys = {}\nsession_ticket_key_format = \"haproxy\"",
                f.path("tk1")
            ),
            Applied,
        ),
        frontend(
            "session_ticket_lifetime",
            String::new(),
            "session_ticket_lifetime = \"1h\"".into(),
            Applied,
        ),
        frontend(
            "session_store",
            String::new(),
            store("store1", "200ms"),
            Applied,
        ),
        frontend(
            "session_store_timeout",
            store("store1", "200ms"),
            store("store1", "500ms"),
            Applied,
        ),
        frontend(
            "session_store_key",
            store("store1", "200ms"),
            store("store2", "200ms"),
            Applied,
        ),
        frontend(
            "acme_store",
            acme("a.test"),
            acme_store("store1"),
            Restart,
        ),
        frontend(
            "acme_store_key",
            acme_store("store1"),
            acme_store("store2"),
            Restart,
        ),
    ]
}

/// The configuration of one side of a row: the row's lines over a base (one worker, a state
/// directory, one frontend "web" on a free port with a self-signed certificate and a backend
/// nothing listens on), each base line left out where the row sets its key.
fn text(f: &Files, global: &str, frontend: &str) -> String {
    let sets = |lines: &str, key: &str| lines.lines().any(|l| l.starts_with(&format!("{key} =")));
    let mut out = String::new();
    if !sets(global, "workers") {
        out.push_str("workers = 1\n");
    }
    if !sets(global, "state_dir") {
        out = out + "state_dir = " + &toml_path(f.state.path()) + "\n";
    }
    out.push_str(global);
    out.push_str("\n[[frontend]]\n");
    for (key, line) in [
        ("name", "name = \"web\""),
        ("listen", "listen = \"127.0.0.1:0\""),
        ("backend", "backend = \"127.0.0.1:9\""),
    ] {
        if !sets(frontend, key) {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !["certificates", "self_signed", "acme"]
        .iter()
        .any(|k| sets(frontend, k))
    {
        out.push_str("self_signed = true\n");
    }
    out.push_str(frontend);
    out.push('\n');
    out
}

/// What one row's reload did: applied, noted, or neither (the failure this test is for).
fn outcome(
    row: &Row,
    before: &BTreeMap<String, toml::Value>,
    want: &BTreeMap<String, toml::Value>,
    in_force: &BTreeMap<String, toml::Value>,
    notes: &[String],
) -> Result<Expect, String> {
    let named = notes.iter().any(|n| n.contains(row.key));
    let changed: std::collections::BTreeSet<&String> = before
        .keys()
        .chain(want.keys())
        .filter(|k| before.get(*k) != want.get(*k))
        .collect();
    let applied = !changed.is_empty() && changed.iter().all(|k| in_force.get(*k) == want.get(*k));
    // Named and kept as it runs.
    let kept = changed.iter().all(|k| in_force.get(*k) == before.get(*k));
    match (applied, named) {
        (true, false) => Ok(Expect::Applied),
        (_, true) if kept => Ok(Expect::Restart),
        (_, true) => Err(format!(
            "named as needing a restart, yet new connections get the new value: {notes:?}"
        )),
        (false, false) if changed.is_empty() => Err(format!(
            "running.toml does not show the change, and the reload does not name it: {notes:?}"
        )),
        (false, false) => Err(format!(
            "silently kept: {:?} differ from the new configuration in what new connections get, and the reload says nothing ({notes:?})",
            changed.iter().filter(|k| in_force.get(**k) != want.get(**k)).collect::<Vec<_>>()
        )),
    }
}

/// What `Reloader::in_force` should say once `c` is in force.
fn expected(c: &shuck_proxy::config::Config) -> BTreeMap<String, toml::Value> {
    let mut settings = running::settings(c);
    settings.insert(
        "log_connections".into(),
        toml::Value::String(c.log_connections.to_string()),
    );
    settings
}

#[test]
fn every_documented_key_is_applied_by_a_reload_or_named_as_needing_a_restart() {
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ))
    .expect("docs/configuration.md");
    let documented: Vec<&str> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("### `")?.strip_suffix('`'))
        .collect();
    let files = Files::new();
    let rows = rows(&files);
    let missing: Vec<&&str> = documented
        .iter()
        .filter(|k| !rows.iter().any(|r| r.key == **k))
        .collect();
    assert!(
        missing.is_empty(),
        "documented keys without a row: {missing:?}"
    );
    let mut failures = Vec::new();
    for row in &rows {
        let a = config(&text(&files, &row.global.0, &row.frontend.0));
        let b = config(&text(&files, &row.global.1, &row.frontend.1));
        let (_running, mut reloader) =
            Running::start_reloadable(&text(&files, &row.global.0, &row.frontend.0));
        let before = reloader.in_force();
        let notes = match reloader.reload(&b) {
            Ok(notes) => notes,
            Err(e) => {
                failures.push(format!("{}: the reload failed: {e}", row.key));
                continue;
            }
        };
        let (old, want) = (expected(&a), expected(&b));
        assert_eq!(
            before, old,
            "{}: before the reload, in force is what started",
            row.key
        );
        let got = match row.expect {
            // The binary applies it: the engine neither applies nor names it.
            Expect::ByTheBinary if notes.iter().all(|n| !n.contains(row.key)) => {
                Ok(Expect::ByTheBinary)
            }
            _ => outcome(row, &old, &want, &reloader.in_force(), &notes),
        };
        match got {
            Ok(got) if got == row.expect => {}
            Ok(got) => failures.push(format!(
                "{}: expected {:?}, the reload did {got:?} ({notes:?})",
                row.key, row.expect
            )),
            Err(e) => failures.push(format!("{}: {e}", row.key)),
        }
        // `shuck check` predicts the same.
        for c in running::changes(&running::settings(&a), &running::settings(&b)) {
            let predicted = c.applies == Applies::Restart;
            if predicted != (row.expect == Expect::Restart) && row.expect != Expect::ByTheBinary {
                failures.push(format!(
                    "{}: shuck check says {:?} for {}",
                    row.key, c.applies, c.key
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
