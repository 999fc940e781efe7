//! Routes (`[[frontend.route]]`) with real peers: curl picks the server name and the ALPN
//! protocol; which backend answered is read from what the backends say and from the metrics.

use shuck_test_support::clients::{curl_at, scrape, sum, wait_metric};
use shuck_test_support::peers::{echo_fields, haproxy_echo_unix, split_curl, CURL_ENDS};
use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::{HttpBackend, Shuck};

/// The status page at `/` of the metrics listener.
pub(crate) fn status_page(metrics: std::net::SocketAddr) -> String {
    let out = shuck_test_support::process::run_bounded(
        std::process::Command::new("curl").args([
            "-sS",
            "--max-time",
            "10",
            &format!("http://{metrics}/"),
        ]),
        b"",
        20,
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Connections that reached `backend` by `route`, from the connect-time histograms.
fn connects(text: &str, route: &str, backend: &str) -> i64 {
    sum(
        text,
        "shuck_backend_connect_duration_seconds_count",
        &[
            &format!("route=\"{route}\""),
            &format!("backend=\"{backend}\""),
        ],
    )
}

/// One frontend, three services: `www.test` to the frontend's own backend, `api.test` to
/// another by SNI, and every h2 connection by ALPN to HAProxy on a Unix socket with a PROXY v2
/// header naming the client (as curl saw its own end).
#[test]
fn a_frontend_serves_two_services_by_sni_and_a_third_by_alpn() {
    let pki = Pki::new();
    let cert = pki.leaf(
        "routes.pem",
        "routes",
        &["www.test", "api.test", "h2.test"],
        Key::EcdsaP256,
    );
    let (www, api) = (HttpBackend::start(), HttpBackend::start());
    let (echo, socket) = haproxy_echo_unix();
    let unix = format!("unix:{}", socket.display());
    let shuck = Shuck::start(&format!(
        "metrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\n\
         backend = \"{www}\"\ncertificates = {cert}\nalpn = [\"h2\", \"http/1.1\"]\n\
         [[frontend.route]]\nname = \"api\"\nsni = [\"api.test\"]\nbackend = \"{api}\"\n\
         [[frontend.route]]\nname = \"h2\"\nalpn = [\"h2\"]\nbackend = {unix_toml}\nproxy_protocol = \"v2\"\n",
        www = www.addr,
        api = api.addr,
        cert = toml_path(&cert),
        unix_toml = toml_path(std::path::Path::new(&unix)),
    ));
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    let context = || format!("{}--- shuck log:\n{}", echo.describe(), shuck.log_text());
    for (name, want) in [("www.test", "/www"), ("api.test", "/api")] {
        let out = curl_at(&pki, web, name, want, &["--http1.1"]);
        let body = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && body.contains(want),
            "{name}: {body}\n{}",
            context()
        );
    }
    let out = curl_at(&pki, web, "h2.test", "/h2", &["--http2", "-w", CURL_ENDS]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "h2: {}{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr),
        context()
    );
    let (body, ends) = split_curl(&stdout);
    let fields = echo_fields(&body);
    assert_eq!(
        fields.get("rcvd_proxy").map(String::as_str),
        Some("1"),
        "{body}"
    );
    assert_eq!(
        fields.get("src").map(String::as_str),
        Some(ends.local.ip().to_string().as_str()),
        "{body}"
    );
    assert_eq!(
        fields.get("src_port").map(String::as_str),
        Some(ends.local.port().to_string().as_str()),
        "{body}"
    );
    // The destination is shuck's listener, as curl reached it (the frontend itself sends no
    // header: only the route does).
    assert_eq!(
        fields.get("dst").map(String::as_str),
        Some(ends.remote.ip().to_string().as_str()),
        "{body}"
    );
    assert_eq!(
        fields.get("dst_port").map(String::as_str),
        Some(ends.remote.port().to_string().as_str()),
        "{body}"
    );
    let text = wait_metric(
        metrics,
        "shuck_backend_connect_duration_seconds_count",
        &[],
        3,
    );
    assert_eq!(
        connects(&text, "default", &www.addr.to_string()),
        1,
        "{text}"
    );
    assert_eq!(connects(&text, "api", &api.addr.to_string()), 1, "{text}");
    assert_eq!(connects(&text, "h2", &unix), 1, "{text}");
}

/// A frontend with routes and no backend of its own: a connection no route takes is closed
/// after its handshake (close_notify), counted as `no_route` and logged, never served the demo
/// page; one a route takes is served.
#[test]
fn without_a_backend_of_its_own_an_unmatched_connection_is_closed_and_counted() {
    let pki = Pki::new();
    let cert = pki.leaf("r.pem", "r", &["api.test", "other.test"], Key::EcdsaP256);
    let api = HttpBackend::start();
    let shuck = Shuck::start(&format!(
        "metrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\n\
         certificates = {}\n[[frontend.route]]\nsni = [\"api.test\"]\nbackend = \"{}\"\n",
        toml_path(&cert),
        api.addr
    ));
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    let out = curl_at(&pki, web, "api.test", "/routed", &[]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("/routed"),
        "{}",
        shuck.log_text()
    );
    let out = curl_at(&pki, web, "other.test", "/", &[]);
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && body.is_empty(), "served: {body}");
    let text = wait_metric(
        metrics,
        "shuck_backend_errors_total",
        &["kind=\"no_route\""],
        1,
    );
    assert_eq!(
        sum(&text, "shuck_backend_errors_total", &["kind=\"no_route\""]),
        1,
        "{text}"
    );
    let log = shuck.wait_log("no route for its server name and ALPN");
    assert!(
        log.contains("other.test") || log.contains("no_route"),
        "{log}"
    );
    assert_eq!(
        sum(
            &scrape(metrics),
            "shuck_backend_connect_duration_seconds_count",
            &["route=\"route1\""]
        ),
        1
    );
}

/// `backend = [{ address, weight }, …]`: one worker sends weight 3 and weight 1 backends their
/// shares exactly (smooth weighted round-robin), in a route as in the frontend's own pool.
#[test]
fn weights_share_a_pool_in_proportion() {
    let pki = Pki::new();
    let cert = pki.leaf("w.pem", "w", &["w.test", "r.test"], Key::EcdsaP256);
    let (heavy, light) = (HttpBackend::start(), HttpBackend::start());
    let pool = format!(
        "[{{ address = \"{}\", weight = 3 }}, \"{}\"]",
        heavy.addr, light.addr
    );
    let shuck = Shuck::start(&format!(
        "workers = 1\nmetrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\n\
         backend = {pool}\ncertificates = {}\n[[frontend.route]]\nname = \"r\"\nsni = [\"r.test\"]\nbackend = {pool}\n",
        toml_path(&cert)
    ));
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    for name in ["w.test", "r.test"] {
        for i in 0..8 {
            let out = curl_at(&pki, web, name, &format!("/{i}"), &[]);
            assert!(out.status.success(), "{}", shuck.log_text());
        }
    }
    let text = wait_metric(
        metrics,
        "shuck_backend_connect_duration_seconds_count",
        &[],
        16,
    );
    for route in ["default", "r"] {
        assert_eq!(connects(&text, route, &heavy.addr.to_string()), 6, "{text}");
        assert_eq!(connects(&text, route, &light.addr.to_string()), 2, "{text}");
    }
}

/// A backend the test makes hung (it accepts and never answers, as a wedged server does) or
/// healthy (it answers `200 OK`).
struct Flaky {
    addr: std::net::SocketAddr,
    healthy: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Flaky {
    fn start() -> Flaky {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let healthy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let h = healthy.clone();
        std::thread::spawn(move || {
            for conn in l.incoming().flatten() {
                let h = h.clone();
                std::thread::spawn(move || {
                    let mut conn = conn;
                    if !h.load(Ordering::Relaxed) {
                        // Held, silent, then dropped.
                        std::thread::sleep(std::time::Duration::from_secs(10));
                        return;
                    }
                    let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(2)));
                    let mut buf = [0u8; 2048];
                    let _ = conn.read(&mut buf);
                    let _ = conn.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nflaky\n",
                    );
                });
            }
        });
        Flaky { addr, healthy }
    }
}

/// `health_check` with an HTTP check: a backend that accepts and never answers is taken out
/// within fall x interval (one line, `shuck_backend_up` 0), a client loop then sees no failure
/// (no connection is sent there), and once it answers again it is back after `rise` good
/// checks and takes connections again.
#[test]
fn a_hung_backend_is_taken_out_by_the_health_check_and_brought_back() {
    use std::sync::atomic::Ordering;
    let pki = Pki::new();
    let cert = pki.leaf("h.pem", "h", &["h.test"], Key::EcdsaP256);
    let good = HttpBackend::start();
    let flaky = Flaky::start();
    let started = std::time::Instant::now();
    let shuck = Shuck::start(&format!(
        "workers = 2\nmetrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\n\
         backend = [\"{}\", \"{}\"]\ncertificates = {}\n\
         health_check = {{ interval = \"200ms\", timeout = \"150ms\", rise = 2, fall = 2, http = \"GET /healthz\" }}\n",
        good.addr,
        flaky.addr,
        toml_path(&cert)
    ));
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    let up = |text: &str| {
        sum(
            text,
            "shuck_backend_up",
            &[&format!("backend=\"{}\"", flaky.addr)],
        )
    };
    let log = shuck.wait_log("backend down");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(6),
        "taken out after {:?} (fall x interval is 400 ms)",
        started.elapsed()
    );
    assert_eq!(log.matches("backend down").count(), 1, "one line: {log}");
    assert_eq!(up(&scrape(metrics)), 0);
    // The status page says so, beside the healthy one.
    let page = status_page(metrics);
    for (backend, health) in [
        (flaky.addr, "<b class=\"warn\">down</b>"),
        (good.addr, "up"),
    ] {
        let row =
            format!("<tr><td>default</td><td>{backend}</td><td>enabled</td><td>{health}</td>");
        assert!(page.contains(&row), "{row}: {page}");
    }
    for i in 0..20 {
        let out = curl_at(&pki, web, "h.test", &format!("/{i}"), &["--max-time", "5"]);
        assert!(
            out.status.success(),
            "request {i} failed while the hung backend was down:\n{}",
            shuck.log_text()
        );
    }
    let text = scrape(metrics);
    assert_eq!(
        connects(&text, "default", &flaky.addr.to_string()),
        0,
        "{text}"
    );
    flaky.healthy.store(true, Ordering::Relaxed);
    shuck.wait_log("backend up");
    assert_eq!(up(&scrape(metrics)), 1);
    for i in 0..8 {
        let out = curl_at(
            &pki,
            web,
            "h.test",
            &format!("/back{i}"),
            &["--max-time", "5"],
        );
        assert!(out.status.success(), "{}", shuck.log_text());
    }
    let text = scrape(metrics);
    assert!(
        connects(&text, "default", &flaky.addr.to_string()) > 0,
        "back in the pool: {text}"
    );
}

/// A backend that passes its health check and fails real traffic: `GET /healthz` is answered
/// `200 OK`; any other request is read and answered with a reset (SO_LINGER 0), as a server whose
/// health endpoint lives on while its application is broken does.
struct ResetsTraffic {
    addr: std::net::SocketAddr,
    /// Requests it reset.
    reset: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl ResetsTraffic {
    fn start() -> ResetsTraffic {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let reset = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = reset.clone();
        std::thread::spawn(move || {
            for conn in l.incoming().flatten() {
                let count = count.clone();
                std::thread::spawn(move || {
                    let mut conn = conn;
                    let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(2)));
                    // The request head, or what came of it before an end or the timeout.
                    let mut head = Vec::new();
                    let mut buf = [0u8; 2048];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    if head.starts_with(b"GET /healthz ") {
                        let _ = conn.write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n",
                        );
                        return;
                    }
                    let _ =
                        socket2::SockRef::from(&conn).set_linger(Some(std::time::Duration::ZERO));
                    count.fetch_add(1, Ordering::Relaxed);
                });
            }
        });
        ResetsTraffic { addr, reset }
    }
}

/// One request on a connection of its own, read to its end: whether a whole `200` answer came
/// (a reset, or an end without close_notify, is a failure).
fn get_ok(
    client: &std::sync::Arc<rustls::ClientConfig>,
    web: std::net::SocketAddr,
    name: &str,
    path: &str,
) -> bool {
    use std::io::{Read, Write};
    let server = rustls::pki_types::ServerName::try_from(name.to_string()).expect("name");
    let conn = rustls::ClientConnection::new(client.clone(), server).expect("client");
    let Ok(tcp) = std::net::TcpStream::connect(web) else {
        return false;
    };
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let request = format!("GET {path} HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n");
    if tls.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = Vec::new();
    tls.read_to_end(&mut answer).is_ok() && answer.starts_with(b"HTTP/1.1 200 ")
}

/// `health_check.observe = "layer4"`: a backend that passes `GET /healthz` but resets every
/// real request is taken out by what traffic sees, after `error_limit` failures in a row (one
/// line, `shuck_backend_up` 0), so the requests after them all succeed; the active check, which
/// it passes, brings it back after `rise` checks. Without `observe` (the control), the active
/// check sees nothing wrong and half the requests keep failing.
#[test]
fn a_backend_that_resets_real_traffic_is_taken_out_by_what_traffic_sees() {
    let pki = Pki::new();
    let cert = pki.leaf("o.pem", "o", &["o.test"], Key::EcdsaP256);
    let good = HttpBackend::start();
    let bad = ResetsTraffic::start();
    let client = std::sync::Arc::new(shuck_test_support::pki::client_config(&pki));
    // Coming back takes at least (rise - 1) intervals: 4 s, far more than 120 requests.
    let config = |observe: &str| {
        format!(
            "workers = 2\nmetrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\n\
             backend = [\"{}\", \"{}\"]\ncertificates = {}\n\
             health_check = {{ interval = \"1s\", timeout = \"500ms\", rise = 5, fall = 3, http = \"GET /healthz\"{observe} }}\n",
            good.addr,
            bad.addr,
            toml_path(&cert)
        )
    };
    let bad_label = format!("backend=\"{}\"", bad.addr);
    let up = |metrics| sum(&scrape(metrics), "shuck_backend_up", &[&bad_label]);
    let failures = |web, from: usize, n: usize| {
        (from..from + n)
            .filter(|i| !get_ok(&client, web, "o.test", &format!("/r{i}")))
            .count()
    };

    let control = Shuck::start(&config(""));
    let control_failed = failures(control.addrs[0], 0, 20);
    assert!(
        control_failed >= 8,
        "without observe, {control_failed} of 20 failed: the bad backend should keep its share\n{}",
        control.log_text()
    );
    assert_eq!(up(control.addrs[1]), 1, "the active check passes");
    assert!(
        !control.log_text().contains("backend down"),
        "{}",
        control.log_text()
    );
    drop(control);

    let limit = 3;
    let shuck = Shuck::start(&config(&format!(
        ", observe = \"layer4\", error_limit = {limit}"
    )));
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    let reset_before = bad.reset.load(std::sync::atomic::Ordering::Relaxed);
    let burst = failures(web, 0, 20);
    let later = failures(web, 20, 100);
    eprintln!(
        "failed without observe: {control_failed} of 20; with: {burst} of the first 20, {later} of the next 100"
    );
    assert!(
        burst <= limit && later <= limit,
        "with observe: {burst} of the first 20 and {later} of the next 100 failed (control: \
         {control_failed} of 20)\n{}",
        shuck.log_text()
    );
    assert_eq!(
        burst + later,
        limit,
        "sequential requests: the limit's failures take it out, no more\n{}",
        shuck.log_text()
    );
    assert_eq!(
        bad.reset.load(std::sync::atomic::Ordering::Relaxed) - reset_before,
        limit,
        "real requests the bad backend got"
    );
    let text = wait_metric(metrics, "shuck_backend_up", &[&bad_label], 0);
    assert_eq!(sum(&text, "shuck_backend_up", &[&bad_label]), 0, "{text}");
    // Written by the set's checker, woken by the worker that took it out.
    let log = shuck.wait_log("on real traffic");
    let down: Vec<&str> = log.lines().filter(|l| l.contains("backend down")).collect();
    assert_eq!(down.len(), 1, "one line: {log}");
    assert!(
        down[0].contains(&format!("{limit} consecutive failures on real traffic"))
            && down[0].contains("web")
            && down[0].contains(&bad.addr.to_string()),
        "{}",
        down[0]
    );
    // The active check, which it passes, brings it back.
    shuck.wait_log("backend up");
    assert_eq!(up(metrics), 1);
    assert_eq!(
        shuck.log_text().matches("backend down").count(),
        1,
        "{}",
        shuck.log_text()
    );
}

/// A backend that expects a PROXY header (HAProxy with `accept-proxy`, on a Unix socket) is
/// checked with one (v2 LOCAL, v1 UNKNOWN): with `fall = 1` and a 100 ms interval, a check
/// without it would take the backend out within a few checks; it stays up through 15.
#[test]
fn health_checks_send_a_proxy_header_to_backends_that_expect_one() {
    let pki = Pki::new();
    let cert = pki.leaf("p.pem", "p", &["p.test"], Key::EcdsaP256);
    let (echo, socket) = haproxy_echo_unix();
    for version in ["v1", "v2"] {
        let shuck = Shuck::start(&format!(
            "metrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\n\
             backend = {}\ncertificates = {}\nproxy_protocol = \"{version}\"\n\
             health_check = {{ interval = \"100ms\", timeout = \"100ms\", fall = 1, http = \"GET /health\" }}\n",
            toml_path(std::path::Path::new(&format!("unix:{}", socket.display()))),
            toml_path(&cert)
        ));
        // 15 intervals, bounded: the absence of a "backend down" line is what is checked.
        let until = std::time::Instant::now() + std::time::Duration::from_millis(1500);
        while std::time::Instant::now() < until {
            assert!(
                !shuck.log_text().contains("backend down"),
                "{version}: {}\n{}",
                shuck.log_text(),
                echo.describe()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let text = scrape(shuck.addrs[1]);
        assert_eq!(sum(&text, "shuck_backend_up", &[]), 1, "{version}: {text}");
    }
}

/// Reloads change routes while clients run: a route gains a backend and a new route appears,
/// with no failed request; a connection under way keeps its backend; the hung backend the
/// health checks had taken out stays out across the reload (its verdict carries over: it gets no
/// connection, and no second `backend down` line); the new route takes its connections at once.
#[test]
fn a_reload_changes_routes_under_traffic_and_keeps_health_verdicts() {
    use shuck_test_support::clients::{held_request, within, ClientLoop};
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;
    let pki = Pki::new();
    let cert = pki.leaf(
        "rr.pem",
        "rr",
        &["www.test", "api.test", "new.test"],
        Key::EcdsaP256,
    );
    let (www, api1, api2) = (
        HttpBackend::start(),
        HttpBackend::start(),
        HttpBackend::start(),
    );
    let hung = Flaky::start();
    let config = |api: &str, extra: &str| {
        format!(
            "workers = 2\nmetrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\n\
             backend = \"{}\"\ncertificates = {}\n\
             [[frontend.route]]\nname = \"api\"\nsni = [\"api.test\"]\nbackend = {api}\n\
             health_check = {{ interval = \"200ms\", timeout = \"150ms\", rise = 2, fall = 2, http = \"GET /healthz\" }}\n{extra}",
            www.addr,
            toml_path(&cert)
        )
    };
    let before = config(&format!("[\"{}\", \"{}\"]", api1.addr, hung.addr), "");
    let shuck = Shuck::start(&before);
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    shuck.wait_log("backend down");
    let mut held = held_request(&pki, web, "api.test", "/held");
    wait_metric(
        metrics,
        "shuck_backend_connect_duration_seconds_count",
        &["route=\"api\""],
        1,
    );
    let after = config(
        &format!("[\"{}\", \"{}\", \"{}\"]", api1.addr, hung.addr, api2.addr),
        &format!(
            "[[frontend.route]]\nname = \"new\"\nsni = [\"new.test\"]\nbackend = \"{}\"\n",
            api2.addr
        ),
    );
    std::thread::scope(|scope| {
        let (api_loop, www_loop) = (
            ClientLoop::start(scope, &pki, web, "api.test"),
            ClientLoop::start(scope, &pki, web, "www.test"),
        );
        let served = api2.served.load(Ordering::Relaxed);
        std::fs::write(shuck.config_path(), &after).expect("write config");
        shuck.signal("HUP");
        shuck.wait_log("reloaded");
        let up = sum(
            &scrape(metrics),
            "shuck_backend_up",
            &[&format!("backend=\"{}\"", hung.addr)],
        );
        assert_eq!(up, 0, "the hung backend's verdict carried over");
        let out = curl_at(&pki, web, "new.test", "/new", &[]);
        assert!(out.status.success(), "{}", shuck.log_text());
        within(
            std::time::Duration::from_secs(20),
            "the api route's new backend taking connections",
            || api2.served.load(Ordering::Relaxed) >= served + 5,
            || shuck.log_text(),
        );
        let (api_done, api_failures) = api_loop.finish();
        let (www_done, www_failures) = www_loop.finish();
        assert!(
            api_done >= 5 && www_done >= 5,
            "{api_done} and {www_done} requests ran"
        );
        assert!(
            api_failures.is_empty() && www_failures.is_empty(),
            "api: {} of {api_done} failed {api_failures:?}; www: {} of {www_done} failed {www_failures:?}\n{}",
            api_failures.len(),
            www_failures.len(),
            shuck.log_text()
        );
    });
    // The connection made before the reload still goes to the backend it had.
    let served = api1.served.load(Ordering::Relaxed);
    held.write_all(b"Host: api.test\r\n\r\n")
        .expect("rest of the request");
    let mut answer = Vec::new();
    let _ = held.read_to_end(&mut answer);
    assert!(
        String::from_utf8_lossy(&answer).contains("backend got: GET /held"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert_eq!(api1.served.load(Ordering::Relaxed), served + 1);
    let text = scrape(metrics);
    assert_eq!(
        connects(&text, "api", &hung.addr.to_string()),
        0,
        "the hung backend got connections: {text}"
    );
    assert_eq!(
        shuck.log_text().matches("backend down").count(),
        1,
        "{}",
        shuck.log_text()
    );
}
