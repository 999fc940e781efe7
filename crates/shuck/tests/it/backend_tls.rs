//! TLS to the backends (`backend_tls`) against `openssl s_server` as the backend: it checks
//! shuck's client certificate (`-Verify`), shuck checks its certificate and name; sessions
//! to it resume (its `-www` page says `Reused`); a backend whose certificate is from another
//! CA, or one that wants a client certificate shuck has none of, is refused and counted. nginx
//! as a backend requiring a client certificate behind a PROXY header sees shuck's certificate,
//! resumed sessions and health checks in TLS.

use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use shuck_test_support::clients::{curl_at, scrape, sum};
use shuck_test_support::peers::nginx_tls_backend;
use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::{wait_for, Shuck};

/// `openssl s_server -www` on a free port, killed on drop.
struct SServer {
    child: Child,
    addr: SocketAddr,
}

impl SServer {
    /// With certificate bundle `cert`; `verify_ca`: require a client certificate from it.
    fn start(cert: &std::path::Path, verify_ca: Option<&std::path::Path>) -> SServer {
        let port = shuck_test_support::ports::tcp();
        let mut cmd = Command::new("openssl");
        cmd.args(["s_server", "-www", "-accept"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("-cert")
            .arg(cert)
            .arg("-key")
            .arg(cert);
        if let Some(ca) = verify_ca {
            cmd.args(["-Verify", "1", "-verify_return_error", "-CAfile"])
                .arg(ca);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl s_server");
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        wait_for(
            "openssl s_server listening",
            Duration::from_secs(10),
            || TcpStream::connect(addr).is_ok(),
        );
        SServer { child, addr }
    }
}

impl Drop for SServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A shuck with one frontend in front of `backend` with `backend_tls = { tls }`.
fn shuck_to(pki: &Pki, backend: SocketAddr, tls: &str) -> Shuck {
    let cert = pki.leaf("front.pem", "front", &["www.test"], Key::EcdsaP256);
    Shuck::start(&format!(
        "workers = 1\nmetrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"web\"\n\
         listen = \"127.0.0.1:0\"\nbackend = \"{backend}\"\ncertificates = {}\nbackend_tls = {{ {tls} }}\n",
        toml_path(&cert)
    ))
}

fn tls_errors(shuck: &Shuck) -> i64 {
    sum(
        &scrape(shuck.addrs[1]),
        "shuck_backend_errors_total",
        &["kind=\"tls\""],
    )
}

#[test]
fn a_verified_backend_that_checks_shucks_certificate_is_served_and_resumed() {
    let pki = Pki::new();
    let backend_cert = pki.leaf("api.pem", "api", &["api.internal"], Key::EcdsaP256);
    let ours = pki.leaf("to-backend.pem", "shuck", &[], Key::EcdsaP256);
    let backend = SServer::start(&backend_cert, Some(&pki.ca_path()));
    let shuck = shuck_to(
        &pki,
        backend.addr,
        &format!(
            "ca = {}, server_name = \"api.internal\", client_certificate = {{ cert = {} }}",
            toml_path(&pki.ca_path()),
            toml_path(&ours)
        ),
    );
    let web = shuck.addrs[0];
    let first = curl_at(&pki, web, "www.test", "/", &[]);
    let page = String::from_utf8_lossy(&first.stdout);
    assert!(first.status.success(), "{page}\n{}", shuck.log_text());
    // s_server's page: the session, and the client certificate it checked.
    assert!(page.contains("New, TLSv1.3"), "{page}");
    assert!(
        page.contains("CN=shuck") || page.contains("CN = shuck"),
        "{page}"
    );
    let second = curl_at(&pki, web, "www.test", "/", &[]);
    let page = String::from_utf8_lossy(&second.stdout);
    assert!(page.contains("Reused, TLSv1.3"), "resumed: {page}");
    assert_eq!(tls_errors(&shuck), 0);
}

#[test]
fn a_backend_from_another_ca_or_wanting_a_certificate_shuck_lacks_is_refused_and_counted() {
    let pki = Pki::new();
    let stranger = Pki::new();
    let foreign = stranger.leaf("api.pem", "api", &["api.internal"], Key::EcdsaP256);
    let backend = SServer::start(&foreign, None);
    let shuck = shuck_to(
        &pki,
        backend.addr,
        &format!(
            "ca = {}, server_name = \"api.internal\"",
            toml_path(&pki.ca_path())
        ),
    );
    for _ in 0..3 {
        let out = curl_at(&pki, shuck.addrs[0], "www.test", "/", &[]);
        assert!(
            !out.status.success(),
            "served through a backend from another CA"
        );
    }
    assert_eq!(tls_errors(&shuck), 3, "{}", shuck.log_text());
    // Written by the log thread: waited for. Three failures, one line saying TLS fails.
    shuck.wait_log_count("reason=\"backend_tls\"", 3);
    let failing = "TLS to the backend fails";
    assert_eq!(
        shuck.log_text().matches(failing).count(),
        1,
        "{}",
        shuck.log_text()
    );
    // Trusting its CA (a reload): served, and one line saying it works again.
    let trusting = std::fs::read_to_string(shuck.config_path())
        .unwrap()
        .replace(&toml_path(&pki.ca_path()), &toml_path(&stranger.ca_path()));
    std::fs::write(shuck.config_path(), trusting).unwrap();
    shuck.signal("HUP");
    shuck.wait_log("reloaded");
    // Said once no handshake failed for 10 s (a flapping backend stays failing).
    wait_for(
        "TLS to the backend works again",
        Duration::from_secs(30),
        || {
            let out = curl_at(&pki, shuck.addrs[0], "www.test", "/", &[]);
            assert!(out.status.success(), "{}", shuck.log_text());
            let said = shuck.log_text().contains("works again");
            if !said {
                std::thread::sleep(Duration::from_millis(500));
            }
            said
        },
    );
    let log = shuck.wait_log("TLS to the backend works again");
    assert_eq!(log.matches("works again").count(), 1, "{log}");
    assert_eq!(log.matches(failing).count(), 1, "{log}");
    drop(shuck);

    let ours = pki.leaf("api2.pem", "api", &["api.internal"], Key::EcdsaP256);
    let strict = SServer::start(&ours, Some(&pki.ca_path()));
    let shuck = shuck_to(
        &pki,
        strict.addr,
        &format!(
            "ca = {}, server_name = \"api.internal\"",
            toml_path(&pki.ca_path())
        ),
    );
    let out = curl_at(&pki, shuck.addrs[0], "www.test", "/", &[]);
    assert!(
        !out.status.success(),
        "served without the certificate the backend wants"
    );
    // A wrong name is refused too: the certificate names api.internal, not other.internal.
    drop(shuck);
    let shuck = shuck_to(
        &pki,
        strict.addr,
        &format!(
            "ca = {}, server_name = \"other.internal\"",
            toml_path(&pki.ca_path())
        ),
    );
    let out = curl_at(&pki, shuck.addrs[0], "www.test", "/", &[]);
    assert!(!out.status.success(), "served a backend under another name");
    assert_eq!(tls_errors(&shuck), 1, "{}", shuck.log_text());
}

/// `verify = "none"`: a backend whose certificate nothing vouches for is still reached in TLS
/// (encrypted, not authenticated), the client's name asked for with `server_name = "client"`.
#[test]
fn verify_none_reaches_an_unvouched_backend_in_tls() {
    let pki = Pki::new();
    let stranger = Pki::new();
    let foreign = stranger.leaf("any.pem", "any", &["whatever.internal"], Key::EcdsaP256);
    let backend = SServer::start(&foreign, None);
    let shuck = shuck_to(
        &pki,
        backend.addr,
        "verify = \"none\", server_name = \"client\"",
    );
    let out = curl_at(&pki, shuck.addrs[0], "www.test", "/", &[]);
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{page}\n{}", shuck.log_text());
    assert!(page.contains("TLSv1.3"), "{page}");
    assert_eq!(tls_errors(&shuck), 0);
}

/// nginx (`ssl_verify_client on`, `listen … ssl proxy_protocol`) behind shuck: the PROXY header
/// before the handshake, shuck's client certificate verified by nginx, the second connection
/// resumed as nginx sees it, and the health checks' HTTP requests made in TLS.
#[test]
fn nginx_wanting_a_client_certificate_sees_it_resumed_and_checked_in_tls() {
    let pki = Pki::new();
    let backend_cert = pki.leaf("api.pem", "api", &["api.internal"], Key::EcdsaP256);
    let ours = pki.leaf("to-backend.pem", "shuck", &[], Key::EcdsaP256);
    let nginx = nginx_tls_backend([127, 0, 0, 1].into(), &backend_cert, &pki.ca_path());
    let cert = pki.leaf("front.pem", "front", &["www.test"], Key::EcdsaP256);
    // No TLV: nginx 1.22 reads at most 107 bytes of PROXY header before a TLS handshake.
    let shuck = Shuck::start(&format!(
        "workers = 1\nmetrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"web\"\n\
         listen = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\nproxy_protocol = \"v2\"\nproxy_protocol_tlvs = []\n\
         health_check = {{ interval = \"1s\", timeout = \"1s\", http = \"GET /healthz\", rise = 1 }}\n\
         backend_tls = {{ ca = {}, server_name = \"api.internal\", client_certificate = {{ cert = {} }} }}\n",
        nginx.addr,
        toml_path(&cert),
        toml_path(&pki.ca_path()),
        toml_path(&ours)
    ));
    let said: Vec<String> = (0..2)
        .map(|_| {
            let out = curl_at(&pki, shuck.addrs[0], "www.test", "/", &[]);
            let body = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "{body}\n{}\n{}",
                shuck.log_text(),
                nginx.describe()
            );
            body
        })
        .collect();
    for body in &said {
        assert!(body.contains("verify=SUCCESS"), "{body}");
        assert!(body.contains("CN=shuck"), "{body}");
        assert!(
            body.contains("addr=127.0.0.1"),
            "the PROXY header's client: {body}"
        );
    }
    assert!(said[1].contains("reused=r"), "resumed: {said:?}");
    // Three checks in TLS, each a full handshake verified by nginx (checks do not resume, so
    // each sees the backend's certificate).
    let checks = || {
        let log = nginx.file_text("access.log");
        log.lines()
            .filter(|l| l.contains("uri=/healthz"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    wait_for("three health checks", Duration::from_secs(20), || {
        checks().len() >= 3
    });
    let checks = checks();
    assert!(
        checks.iter().all(|l| l.contains("verify=SUCCESS")),
        "{checks:?}"
    );
    assert!(checks.iter().all(|l| l.contains("reused=.")), "{checks:?}");
    let up = sum(&scrape(shuck.addrs[1]), "shuck_backend_up", &[]);
    assert_eq!(up, 1);
    assert_eq!(tls_errors(&shuck), 0);
}
