//! `shuck ctl upgrade` against a running shuck: it answers once the new process is confirmed
//! and the socket follows it; a failed upgrade leaves the old process answering.

use super::*;

/// `shuck ctl upgrade` answers once the new process is confirmed (after `upgrade_confirm`),
/// and the socket's name is the new process's from then on: `show limits` names its pid. A
/// refresh of a frontend that does not exist is refused.
#[test]
fn an_upgrade_answers_once_confirmed_and_the_socket_follows_the_new_process() {
    let pki = Pki::new();
    let dir = socket_dir();
    let backend = HttpBackend::start();
    let cert = pki.leaf("web.pem", "web", &["a.test"], Key::EcdsaP256);
    let socket = dir.path().join("admin.sock");
    let pid_file = dir.path().join("shuck.pid");
    let shuck = Shuck::with()
        .config(&format!(
            "admin_socket = {}\nupgrade_confirm = \"1s\"\nshutdown_grace = \"1s\"\n[[frontend]]\nname = \"web\"\n\
             listen = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\n",
            toml_path(&socket),
            backend.addr,
            toml_path(&cert)
        ))
        .args(&["--pid-file", pid_file.to_str().expect("path")])
        .run();
    let old = shuck.pid();
    assert_eq!(ctl_json(&socket, &["show", "limits"])["pid"], old);
    let refused = ctl(&socket, &["ocsp", "refresh", "nope"]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let refreshed = ctl(&socket, &["ocsp", "refresh", "web"]);
    assert_eq!(refreshed.status.code(), Some(0), "{}", text(&refreshed));
    let out = ctl(&socket, &["upgrade"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        text(&out),
        shuck.log_text()
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("upgraded"),
        "{}",
        text(&out)
    );
    let new: u32 = std::fs::read_to_string(&pid_file)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    let _kill = KillLater(new);
    assert_ne!(new, old);
    assert_eq!(ctl_json(&socket, &["show", "limits"])["pid"], new);
    assert!(curl_at(&pki, shuck.addrs[0], "a.test", "/", &[])
        .status
        .success());
}

/// An upgrade whose new process refuses the configuration fails: `shuck ctl upgrade` says so
/// (exit 1), and the old process still answers on its socket, under its name.
#[test]
fn a_failed_upgrade_leaves_the_old_process_answering_on_its_socket() {
    let pki = Pki::new();
    let dir = socket_dir();
    let backend = HttpBackend::start();
    let (shuck, socket) = start(&pki, dir.path(), &[&backend], "upgrade_confirm = \"1s\"");
    let old = shuck.pid();
    let path = shuck.config_path();
    let good = std::fs::read_to_string(&path).expect("config");
    std::fs::write(&path, good.replace("listen =", "listen = [")).expect("break it");
    let out = ctl(&socket, &["upgrade"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}\n{}",
        text(&out),
        shuck.log_text()
    );
    assert!(text(&out).contains("upgrade failed"), "{}", text(&out));
    assert_eq!(ctl_json(&socket, &["show", "limits"])["pid"], old);
    assert!(curl_at(&pki, shuck.addrs[0], "a.test", "/", &[])
        .status
        .success());
}

/// Kills the upgrade's new process (not the test's child) at the end.
struct KillLater(u32);

impl Drop for KillLater {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.to_string()).status();
    }
}
