//! Session resumption across workers and processes: the per-process session cache, ticket keys
//! from files shared by a fleet, and a Redis store shared by hosts. Real `openssl s_client`
//! sessions (`-sess_out` / `-sess_in`), asserted on what the client reports ("Reused").

mod common;

use std::net::SocketAddr;

use common::clients::{s_client, scrape, sum};
use common::pki::{toml_path, Key, Pki};
use common::process::{HttpBackend, Shuck};

const WORKERS: usize = 4;
/// Enough connections that, spread by the kernel's SO_REUSEPORT hash, every one of the four
/// workers serves some (the chance that one gets none of 24 is 4 × 0.75^24 ≈ 0.04%).
const RECONNECTS: usize = 24;

struct Client<'a> {
    pki: &'a Pki,
    sni: &'a str,
}

impl Client<'_> {
    /// A full handshake that saves its session to `sess`.
    fn first(&self, addr: SocketAddr, version: &str, sess: &str) {
        let (ok, out) = s_client(self.pki, addr, Some(self.sni), &[version, "-sess_out", sess]);
        assert!(ok, "{out}");
        assert!(out.contains("\nNew, TLSv1."), "{version}: first handshake is full: {out}");
    }

    /// Reconnects with the session in `sess` (saving the new one when `chain`: a TLS 1.3
    /// stateful session is single-use); returns whether it resumed, and the output.
    fn again(&self, addr: SocketAddr, version: &str, sess: &str, chain: bool) -> (bool, String) {
        let mut args = vec![version, "-sess_in", sess];
        let next = format!("{sess}.next");
        if chain {
            args.extend(["-sess_out", &next]);
        }
        let (ok, out) = s_client(self.pki, addr, Some(self.sni), &args);
        assert!(ok, "{out}");
        if chain {
            std::fs::rename(&next, sess).expect("keep the new session");
        }
        (out.contains("\nReused, TLSv1."), out)
    }
}

fn config(backend: SocketAddr, cert: &std::path::Path, extra: &str) -> String {
    format!(
        "workers = {WORKERS}\nmetrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nbackend = \"{backend}\"\ncertificates = {}\n{extra}\n",
        toml_path(cert)
    )
}

/// Resumed handshakes per worker, from the metrics endpoint.
fn resumed_per_worker(metrics: SocketAddr) -> Vec<i64> {
    let text = scrape(metrics);
    (0..WORKERS)
        .map(|w| {
            sum(
                &text,
                "shuck_handshakes_total",
                &[&format!("worker=\"{w}\""), "kind=\"resumed\""],
            )
        })
        .collect()
}

/// Tickets off: TLS 1.2 session IDs and TLS 1.3 stateful sessions live in one cache per process,
/// so a client resumes on whichever worker the kernel hands its connection to.
#[test]
fn sessions_by_id_resume_on_every_worker() {
    let pki = Pki::new();
    let cert = pki.leaf("id.pem", "id", &["id.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let shuck = Shuck::start(&config(backend.addr, &cert, "session_tickets = false"));
    let client = Client { pki: &pki, sni: "id.test" };
    for (version, chain) in [("-tls1_2", false), ("-tls1_3", true)] {
        let sess = pki.path(&format!("id{version}.sess"));
        let sess = sess.to_str().expect("utf-8 path");
        client.first(shuck.addr(), version, sess);
        for i in 0..RECONNECTS {
            let (resumed, out) = client.again(shuck.addr(), version, sess, chain);
            assert!(resumed, "{version}: reconnect {i} not resumed: {out}");
        }
    }
    let per_worker = resumed_per_worker(shuck.addrs[1]);
    assert!(
        per_worker.iter().all(|&n| n > 0),
        "every worker resumed some sessions: {per_worker:?}"
    );
}
