//! PROXY protocol against real peers: curl -> shuck (`proxy_protocol` v1/v2) -> HAProxy or nginx
//! as the backend, each echoing what it parsed from the header; and HAProxy in front of shuck.
//! Expected values are what curl itself measured (its local and remote address), never copies
//! of shuck's output. HAProxy and nginx must be installed; .ci/run installs them.

use shuck_test_support::clients::curl_at;
use shuck_test_support::peers::{
    echo_fields, haproxy_echo, haproxy_echo_unix, haproxy_front, ipv6_loopback, nginx_echo,
    split_curl, Peer, SendProxy, CURL_ENDS, V4, V6,
};
use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::{run_bounded, Shuck};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::process::Command;

const NAME: &str = "www.example.test";

fn frontend(pki: &Pki, listen: IpAddr, backend: SocketAddr, extra: &str) -> Shuck {
    let cert = pki.leaf("www.pem", "www", &[NAME], Key::EcdsaP256);
    let listen = SocketAddr::new(listen, 0);
    Shuck::start(&format!(
        "workers = 1\n[[frontend]]\nlisten = \"{listen}\"\nbackend = \"{backend}\"\n\
         certificates = {}\n{extra}\n",
        toml_path(&cert)
    ))
}

/// One HTTPS request to `at` (shuck, or a balancer in front of it); the echoed fields and the
/// connection's ends as curl saw them.
fn request(
    pki: &Pki,
    at: SocketAddr,
    context: &dyn Fn() -> String,
) -> (HashMap<String, String>, shuck_test_support::peers::CurlEnds) {
    let out = curl_at(pki, at, NAME, "/", &["-w", CURL_ENDS]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "curl to {at} failed ({}): {}{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        context()
    );
    let (body, ends) = split_curl(&stdout);
    (echo_fields(&body), ends)
}

fn ip(fields: &HashMap<String, String>, key: &str, body: &dyn Fn() -> String) -> IpAddr {
    let v = fields
        .get(key)
        .unwrap_or_else(|| panic!("no {key} in echo {fields:?}\n{}", body()));
    v.parse()
        .unwrap_or_else(|_| panic!("{key}={v:?} is not an IP address\n{}", body()))
}

fn port(fields: &HashMap<String, String>, key: &str, body: &dyn Fn() -> String) -> u16 {
    let v = fields
        .get(key)
        .unwrap_or_else(|| panic!("no {key} in echo {fields:?}\n{}", body()));
    v.parse()
        .unwrap_or_else(|_| panic!("{key}={v:?} is not a port\n{}", body()))
}

/// Asserts that the peer's four PROXY-derived fields name the two ends curl measured.
fn assert_ends(
    fields: &HashMap<String, String>,
    keys: [&str; 4],
    client: SocketAddr,
    server: SocketAddr,
    context: &dyn Fn() -> String,
) {
    let [src, src_port, dst, dst_port] = keys;
    let what = || {
        format!(
            "echo {fields:?}, client {client}, server {server}\n{}",
            context()
        )
    };
    assert_eq!(ip(fields, src, &what), client.ip(), "{src}: {}", what());
    assert_eq!(
        port(fields, src_port, &what),
        client.port(),
        "{src_port}: {}",
        what()
    );
    assert_eq!(ip(fields, dst, &what), server.ip(), "{dst}: {}", what());
    assert_eq!(
        port(fields, dst_port, &what),
        server.port(),
        "{dst_port}: {}",
        what()
    );
}

/// Addresses of the families this machine can serve; IPv6 is left out, with a note, only when
/// [::1] cannot be bound.
fn families() -> Vec<IpAddr> {
    if ipv6_loopback() {
        vec![V4, V6]
    } else {
        eprintln!("note: [::1] cannot be bound on this machine; IPv6 cases skipped");
        vec![V4]
    }
}

const HAPROXY_KEYS: [&str; 4] = ["src", "src_port", "dst", "dst_port"];
const NGINX_KEYS: [&str; 4] = ["addr", "port", "server_addr", "server_port"];

/// curl -> shuck (v1, then v2) -> `peer`, once per address family, asserting `keys`.
fn client_address_reaches(start: fn(IpAddr) -> Peer, keys: [&str; 4]) {
    let pki = Pki::new();
    for family in families() {
        let peer = start(family);
        for version in ["v1", "v2"] {
            let shuck = frontend(
                &pki,
                family,
                peer.addr,
                &format!("proxy_protocol = \"{version}\""),
            );
            let context = || {
                format!(
                    "{version} over {family}\n{}--- shuck log:\n{}",
                    peer.describe(),
                    shuck.log_text()
                )
            };
            let (fields, ends) = request(&pki, shuck.addr(), &context);
            // curl's remote end is shuck's listener; checked against the ready file so a
            // mix-up of shuck's own addresses cannot pass as the client's.
            assert_eq!(ends.remote, shuck.addr(), "{}", context());
            assert_ne!(ends.local, ends.remote, "{}", context());
            assert_ends(&fields, keys, ends.local, ends.remote, &context);
            if keys == HAPROXY_KEYS {
                assert_eq!(
                    fields.get("rcvd_proxy").map(String::as_str),
                    Some("1"),
                    "{}",
                    context()
                );
            }
        }
    }
}

/// A Unix-socket backend (`backend = "unix:/path"`): HAProxy listening there gets PROXY v1 and
/// v2 headers naming the client's TCP addresses, as a TCP backend does; a socket nobody
/// listens on is a backend failure like a refused connect.
#[test]
fn a_unix_socket_backend_gets_the_client_address_v1_v2() {
    let pki = Pki::new();
    let (peer, socket) = haproxy_echo_unix();
    for version in ["v1", "v2"] {
        let cert = pki.leaf("www.pem", "www", &[NAME], Key::EcdsaP256);
        let shuck = Shuck::start(&format!(
            "workers = 1\nmetrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = {}\n\
             certificates = {}\nproxy_protocol = \"{version}\"\n",
            toml_path(std::path::Path::new(&format!("unix:{}", socket.display()))),
            toml_path(&cert)
        ));
        let context = || {
            format!(
                "{version}\n{}--- shuck log:\n{}",
                peer.describe(),
                shuck.log_text()
            )
        };
        let (fields, ends) = request(&pki, shuck.addr(), &context);
        assert_eq!(ends.remote, shuck.addr(), "{}", context());
        assert_ends(&fields, HAPROXY_KEYS, ends.local, ends.remote, &context);
        assert_eq!(
            fields.get("rcvd_proxy").map(String::as_str),
            Some("1"),
            "{}",
            context()
        );
    }
    let gone = socket.with_file_name("nobody.sock");
    let cert = pki.leaf("www.pem", "www", &[NAME], Key::EcdsaP256);
    let shuck = Shuck::start(&format!(
        "workers = 1\nmetrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = {}\ncertificates = {}\n",
        toml_path(std::path::Path::new(&format!("unix:{}", gone.display()))),
        toml_path(&cert)
    ));
    let out = curl_at(&pki, shuck.addr(), NAME, "/", &[]);
    assert!(!out.status.success(), "served without a backend");
    let text = shuck_test_support::clients::wait_metric(
        shuck.addrs[1],
        "shuck_backend_errors_total",
        &["kind=\"connect\""],
        1,
    );
    assert_eq!(
        shuck_test_support::clients::sum(
            &text,
            "shuck_backend_errors_total",
            &["kind=\"connect\""]
        ),
        1,
        "{text}\n{}",
        shuck.log_text()
    );
}

#[test]
fn haproxy_backend_sees_the_client_address_v1_v2_ipv4_ipv6() {
    client_address_reaches(haproxy_echo, HAPROXY_KEYS);
}

#[test]
fn nginx_backend_sees_the_client_address_v1_v2_ipv4_ipv6() {
    client_address_reaches(nginx_echo, NGINX_KEYS);
}

/// The balancer helper on its own (no shuck): HAProxy's `send-proxy`/`send-proxy-v2` read by
/// nginx, so the helper is known to work before shuck can accept PROXY.
#[test]
fn harness_haproxy_front_sends_the_client_address() {
    for family in families() {
        let nginx = nginx_echo(family);
        for send in [SendProxy::V1, SendProxy::V2] {
            let front = haproxy_front(family, nginx.addr, send);
            let a = front.addr;
            let host = if a.is_ipv6() {
                format!("[{}]", a.ip())
            } else {
                a.ip().to_string()
            };
            let out = run_bounded(
                Command::new("curl")
                    .args(["-sS", "--max-time", "20", "-w", CURL_ENDS])
                    .arg(format!("http://{host}:{}/", a.port())),
                b"",
                30,
            );
            let context = || {
                format!(
                    "{send:?} over {family}\n{}{}",
                    front.describe(),
                    nginx.describe()
                )
            };
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "curl: {}{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr),
                context()
            );
            let (body, ends) = split_curl(&stdout);
            assert_eq!(ends.remote, front.addr, "{}", context());
            assert_ends(
                &echo_fields(&body),
                NGINX_KEYS,
                ends.local,
                ends.remote,
                &context,
            );
        }
    }
}

/// SNI and a per-connection unique id reach HAProxy as TLVs 0x02 and 0x05. The ALPN and SSL
/// TLVs have no fetch in HAProxy 2.6 nor variable in nginx 1.22; sending them checks that
/// both still parse the header.
#[test]
fn v2_tlvs_reach_haproxy_and_nginx_still_parses_them() {
    let pki = Pki::new();
    let tlvs = "proxy_protocol = \"v2\"\n\
                proxy_protocol_tlvs = [\"alpn\", \"authority\", \"ssl\", \"unique_id\", \"ja4\"]\n\
                alpn = [\"http/1.1\"]";
    for family in families() {
        let haproxy = haproxy_echo(family);
        let shuck = frontend(&pki, family, haproxy.addr, tlvs);
        let context = || {
            format!(
                "over {family}\n{}--- shuck log:\n{}",
                haproxy.describe(),
                shuck.log_text()
            )
        };
        let mut ids = Vec::new();
        for _ in 0..2 {
            let (fields, ends) = request(&pki, shuck.addr(), &context);
            assert_ends(&fields, HAPROXY_KEYS, ends.local, ends.remote, &context);
            assert_eq!(
                fields.get("authority").map(String::as_str),
                Some(NAME),
                "{fields:?}\n{}",
                context()
            );
            let id = fields.get("unique_id").cloned().unwrap_or_default();
            assert!(!id.is_empty(), "empty unique_id: {fields:?}\n{}", context());
            ids.push(id);
        }
        assert_ne!(ids[0], ids[1], "unique_id repeated across connections");

        let nginx = nginx_echo(family);
        let shuck = frontend(&pki, family, nginx.addr, tlvs);
        let context = || {
            format!(
                "over {family}\n{}--- shuck log:\n{}",
                nginx.describe(),
                shuck.log_text()
            )
        };
        let (fields, ends) = request(&pki, shuck.addr(), &context);
        assert_ends(&fields, NGINX_KEYS, ends.local, ends.remote, &context);
    }
}

/// curl -> HAProxy (`send-proxy`, `send-proxy-v2`) -> shuck (`accept_proxy`, emitting v2) ->
/// HAProxy echo: the backend sees curl's address and the balancer's listener, not the
/// balancer's own outgoing connection.
#[test]
fn haproxy_in_front_client_address_passes_through_shuck() {
    let pki = Pki::new();
    for family in families() {
        let echo = haproxy_echo(family);
        let shuck = frontend(
            &pki,
            family,
            echo.addr,
            "accept_proxy = true\nproxy_protocol = \"v2\"",
        );
        for send in [SendProxy::V1, SendProxy::V2] {
            let front = haproxy_front(family, shuck.addr(), send);
            let context = || {
                format!(
                    "{send:?} over {family}\n{}{}--- shuck log:\n{}",
                    front.describe(),
                    echo.describe(),
                    shuck.log_text()
                )
            };
            let (fields, ends) = request(&pki, front.addr, &context);
            assert_eq!(ends.remote, front.addr, "{}", context());
            assert_ends(&fields, HAPROXY_KEYS, ends.local, ends.remote, &context);
        }
    }
}
