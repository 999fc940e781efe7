//! Client certificates (mutual TLS) with real clients: curl and openssl s_client with, without,
//! and with foreign, revoked or forged certificates; what the backend learns of them through the
//! PROXY v2 SSL TLV (read by a raw backend); CRLs, reloads and resumption.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use shuck_test_support::clients::{curl, curl_at, s_client, sum, wait_metric};
use shuck_test_support::configs::{Config, Frontend};
use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::{HttpBackend, Shuck};
use shuck_test_support::tlv_backend::{first_cert_der, ssl_subs, text, tlv, walk_v2, RawBackend};

/// curl to tlv.test presenting the client certificate (and key) in the bundle `cert`.
fn curl_with_cert(pki: &Pki, shuck: &Shuck, cert: &std::path::Path) -> std::process::Output {
    curl(
        pki,
        shuck,
        "tlv.test",
        "/",
        &["--cert", cert.to_str().expect("path")],
    )
}

fn mtls_frontend(pki: &Pki, backend: SocketAddr, client_auth: &str, tlvs: &[&str]) -> Shuck {
    let cert = pki.leaf("server.pem", "server", &["tlv.test"], Key::EcdsaP256);
    let frontend = Frontend::new()
        .backend(backend)
        .certificates(&[cert])
        .set("alpn", ["http/1.1"])
        .set(
            "ciphersuites",
            [
                "TLS_AES_256_GCM_SHA384",
                "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            ],
        )
        .set("proxy_protocol", "v2")
        .set("proxy_protocol_tlvs", tlvs)
        .set("client_auth", client_auth)
        .set("client_ca", pki.ca_path());
    Shuck::start(
        &Config::new()
            .set("metrics_listen", "127.0.0.1:0")
            .frontend(frontend)
            .to_string(),
    )
}

#[test]
fn ssl_tlvs_and_the_client_certificate_reach_the_backend() {
    let pki = Pki::new();
    let client = pki.leaf("client.pem", "client one", &[], Key::EcdsaP256);
    let backend = RawBackend::start();
    let shuck = mtls_frontend(
        &pki,
        backend.addr,
        "required",
        &["alpn", "authority", "ssl", "client_cert", "crc32c"],
    );
    let out = curl(
        &pki,
        &shuck,
        "tlv.test",
        "/x",
        &["--cert", client.to_str().expect("path"), "--tlsv1.3"],
    );
    assert!(
        out.status.success(),
        "curl: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        shuck.log_text()
    );
    let (tlvs, after) = walk_v2(&backend.next());
    assert!(after.starts_with(b"GET /x HTTP/1.1\r\n"), "{after:?}");
    assert_eq!(text(tlv(&tlvs, 0x01)), "http/1.1");
    assert_eq!(text(tlv(&tlvs, 0x02)), "tlv.test");
    let (client_bits, verify, subs) = ssl_subs(&tlvs);
    assert_eq!(
        client_bits,
        0x01 | 0x02 | 0x04,
        "client: SSL + certificate on this connection and so in this session"
    );
    assert_eq!(verify, 0, "verify: 0 = verified");
    assert_eq!(text(tlv(&subs, 0x21)), "TLSv1.3");
    assert_eq!(text(tlv(&subs, 0x22)), "client one");
    assert_eq!(text(tlv(&subs, 0x23)), "TLS_AES_256_GCM_SHA384");
    // The server certificate: a P-256 key signed by the test CA's P-256 key with SHA-256.
    assert_eq!(text(tlv(&subs, 0x24)), "ecdsa-with-SHA256");
    assert_eq!(text(tlv(&subs, 0x25)), "EC256");
    assert_eq!(tlv(&tlvs, 0xE0), Some(first_cert_der(&client).as_slice()));
    // The checksum TLV comes last, covering everything before it.
    assert_eq!(tlvs.last().map(|t| t.0), Some(0x03));
}

/// Most connections in production are resumed (K requests per session, as in Bernat's benchmark): a resumed
/// one must tell the backend as much as the full handshake did, with CERT_SESS but not
/// CERT_CONN, since the certificate was shown earlier in the session, not on this connection.
#[test]
fn resumed_sessions_still_carry_the_whole_ssl_tlv() {
    let pki = Pki::new();
    let client = pki.leaf("client.pem", "client one", &[], Key::EcdsaP256);
    let backend = RawBackend::start();
    let shuck = mtls_frontend(&pki, backend.addr, "required", &["ssl"]);
    let c = client.to_str().expect("path");
    for (proto, version, cipher) in [
        ("-tls1_3", "TLSv1.3", "TLS_AES_256_GCM_SHA384"),
        ("-tls1_2", "TLSv1.2", "ECDHE-ECDSA-AES256-GCM-SHA384"),
    ] {
        let sess = pki.path(&format!("resume{proto}.sess"));
        let s = sess.to_str().expect("path");
        for (pass, flag) in [("full", "-sess_out"), ("resumed", "-sess_in")] {
            let (_, out) = s_client(
                &pki,
                shuck.addr(),
                Some("tlv.test"),
                &[proto, "-cert", c, "-key", c, flag, s],
            );
            assert!(out.contains("\nok"), "{proto} {pass}: {out}");
            assert_eq!(
                out.contains("\nReused,"),
                pass == "resumed",
                "{proto} {pass}: {out}"
            );
            let (tlvs, _) = walk_v2(&backend.next());
            let (client_bits, verify, subs) = ssl_subs(&tlvs);
            let cert_bits = if pass == "full" { 0x02 | 0x04 } else { 0x04 };
            assert_eq!(client_bits, 0x01 | cert_bits, "{proto} {pass}");
            assert_eq!(verify, 0, "{proto} {pass}");
            assert_eq!(text(tlv(&subs, 0x21)), version, "{proto} {pass}");
            assert_eq!(text(tlv(&subs, 0x22)), "client one", "{proto} {pass}");
            assert_eq!(text(tlv(&subs, 0x23)), cipher, "{proto} {pass}");
            assert_eq!(
                text(tlv(&subs, 0x24)),
                "ecdsa-with-SHA256",
                "{proto} {pass}"
            );
            assert_eq!(text(tlv(&subs, 0x25)), "EC256", "{proto} {pass}");
        }
    }
}

/// With an ECDSA and an RSA certificate for one name, the SSL TLV names the one the client was
/// actually served. A TLS 1.2 client offering only RSA suites gets the RSA certificate although
/// its signature algorithms also allow ECDSA: rustls narrows them to the suites, so the TLV must
/// come from rustls' own choice, not from asking the resolver again with the raw ClientHello.
#[test]
fn the_ssl_tlv_names_the_certificate_actually_served() {
    let pki = Pki::new();
    let rsa = pki.leaf("dual-rsa.pem", "dual-rsa", &["dual.test"], Key::Rsa2048);
    let ecdsa = pki.leaf(
        "dual-ecdsa.pem",
        "dual-ecdsa",
        &["dual.test"],
        Key::EcdsaP256,
    );
    let backend = RawBackend::start();
    let shuck = Shuck::start(&format!(
        "[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = [{}, {}]\n\
         proxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"ssl\"]\n",
        backend.addr,
        toml_path(&rsa),
        toml_path(&ecdsa)
    ));
    for (args, key) in [
        (
            &["-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256"][..],
            "RSA2048",
        ),
        (
            &["-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"][..],
            "EC256",
        ),
        (&["-tls1_3"][..], "EC256"),
    ] {
        let (_, out) = s_client(&pki, shuck.addr(), Some("dual.test"), args);
        assert!(out.contains("\nok"), "{args:?}: {out}");
        let (tlvs, _) = walk_v2(&backend.next());
        let (_, _, subs) = ssl_subs(&tlvs);
        assert_eq!(text(tlv(&subs, 0x25)), key, "{args:?}");
    }
}

#[test]
fn client_auth_required_refuses_clients_without_a_valid_certificate() {
    let pki = Pki::new();
    let other_ca = Pki::new();
    let stranger = other_ca.leaf("stranger.pem", "stranger", &[], Key::EcdsaP256);
    let good = pki.leaf("client.pem", "client one", &[], Key::EcdsaP256);
    // A backend that reads the PROXY v2 header (an HTTP-only one would answer the header's first
    // CRLF and close on the unread request, resetting the connection).
    let backend = RawBackend::start();
    let shuck = mtls_frontend(&pki, backend.addr, "required", &[]);

    let none = curl(&pki, &shuck, "tlv.test", "/", &[]);
    assert!(!none.status.success(), "served without a certificate");
    let bad = curl_with_cert(&pki, &shuck, &stranger);
    assert!(
        !bad.status.success(),
        "served a certificate from another CA"
    );
    let ok = curl_with_cert(&pki, &shuck, &good);
    assert!(
        ok.status.success() && ok.stdout == b"ok",
        "{:?} stdout {:?} stderr {:?}\n{}",
        ok.status,
        String::from_utf8_lossy(&ok.stdout),
        String::from_utf8_lossy(&ok.stderr),
        shuck.log_text()
    );
    let (_, request) = walk_v2(&backend.next());
    assert!(request.starts_with(b"GET / HTTP/1.1\r\n"), "{request:?}");
    let labels = ["reason=\"client_certificate\""];
    let metrics = wait_metric(
        *shuck.addrs.last().expect("metrics addr"),
        "shuck_handshake_failures_total",
        &labels,
        2,
    );
    assert_eq!(
        sum(&metrics, "shuck_handshake_failures_total", &labels),
        2,
        "{metrics}"
    );
}

#[test]
fn client_auth_optional_serves_anonymous_clients_and_tells_the_backend() {
    let pki = Pki::new();
    let other_ca = Pki::new();
    let stranger = other_ca.leaf("stranger.pem", "stranger", &[], Key::EcdsaP256);
    let backend = RawBackend::start();
    let shuck = mtls_frontend(&pki, backend.addr, "optional", &["ssl"]);

    let anon = curl(&pki, &shuck, "tlv.test", "/", &[]);
    assert!(
        anon.status.success(),
        "{}",
        String::from_utf8_lossy(&anon.stderr)
    );
    let (tlvs, _) = walk_v2(&backend.next());
    let ssl = tlv(&tlvs, 0x20).expect("SSL TLV");
    assert_eq!(ssl[0], 0x01, "SSL, no certificate");
    assert_ne!(&ssl[1..5], &[0, 0, 0, 0], "verify must not claim success");
    assert!(tlv(&tlvs, 0x01).is_none(), "ALPN TLV not asked for");

    // Optional is not 'anything goes': a certificate that does not verify is refused.
    let bad = curl_with_cert(&pki, &shuck, &stranger);
    assert!(
        !bad.status.success(),
        "served a certificate from another CA"
    );
}

/// `optional_no_ca`: every client is served and the backend learns how its certificate fared,
/// as an OpenSSL verify code, resumed sessions included. The stranger's CA has the same name as
/// ours but another key: 7, signature failure (as OpenSSL says), not 20, unknown issuer.
#[test]
fn optional_no_ca_serves_every_certificate_and_tells_the_backend_its_verify_result() {
    let pki = Pki::new();
    let other_ca = Pki::new();
    let stranger = other_ca.leaf("stranger.pem", "stranger", &[], Key::EcdsaP256);
    let good = pki.client("good.pem", "good one", 3001);
    let revoked = pki.client("revoked.pem", "revoked one", 3002);
    let crl = pki.crl("ca.crl.pem", &[3002]);
    let cert = pki.leaf("server.pem", "server", &["tlv.test"], Key::EcdsaP256);
    let backend = RawBackend::start();
    let config = |ca: &str| {
        format!(
            "metrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\n\
             certificates = {}\nproxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"ssl\", \"client_cert\"]\n\
             client_auth = \"optional_no_ca\"\n{ca}",
            backend.addr,
            toml_path(&cert),
        )
    };
    let shuck = Shuck::start(&config(&format!(
        "client_ca = {}\nclient_crl = {}\n",
        toml_path(&pki.ca_path()),
        toml_path(&crl)
    )));
    // What the backend got for one connection: (client bits, verify, CN, certificate TLV).
    let seen = |out: &std::process::Output| {
        assert!(
            out.status.success() && out.stdout == b"ok",
            "{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            shuck.log_text()
        );
        let (tlvs, _) = walk_v2(&backend.next());
        let (bits, verify, subs) = ssl_subs(&tlvs);
        let cn = text(tlv(&subs, 0x22)).to_string();
        (bits, verify, cn, tlv(&tlvs, 0xE0).map(<[u8]>::to_vec))
    };
    let full = 0x01 | 0x02 | 0x04;
    assert_eq!(
        seen(&curl_with_cert(&pki, &shuck, &good)),
        (full, 0, "good one".into(), Some(first_cert_der(&good)))
    );
    assert_eq!(
        seen(&curl_with_cert(&pki, &shuck, &stranger)),
        (full, 7, "stranger".into(), Some(first_cert_der(&stranger)))
    );
    assert_eq!(
        seen(&curl_with_cert(&pki, &shuck, &revoked)),
        (
            full,
            23,
            "revoked one".into(),
            Some(first_cert_der(&revoked))
        )
    );
    let (bits, verify, cn, der) = seen(&curl(&pki, &shuck, "tlv.test", "/", &[]));
    assert_eq!((bits, cn, der), (0x01, "<absent>".into(), None));
    assert_ne!(verify, 0, "no certificate must not read as verified");

    // A resumed session is judged again: still 7, certificate shown in the session only.
    let sess = pki.path("stranger.sess");
    let (c, s) = (
        stranger.to_str().expect("path"),
        sess.to_str().expect("path"),
    );
    for (flag, bits) in [("-sess_out", full), ("-sess_in", 0x01 | 0x04)] {
        let (_, out) = s_client(
            &pki,
            shuck.addr(),
            Some("tlv.test"),
            &["-tls1_3", "-cert", c, "-key", c, flag, s],
        );
        assert!(out.contains("\nok"), "{flag}: {out}");
        assert_eq!(out.contains("\nReused,"), flag == "-sess_in", "{out}");
        let (tlvs, _) = walk_v2(&backend.next());
        let (got_bits, verify, _) = ssl_subs(&tlvs);
        assert_eq!((got_bits, verify), (bits, 7), "{flag}");
    }
    let labels = [];
    let metrics = wait_metric(
        *shuck.addrs.last().expect("metrics addr"),
        "shuck_client_certificates_unverified_total",
        &labels,
        4,
    );
    assert_eq!(
        sum(
            &metrics,
            "shuck_client_certificates_unverified_total",
            &labels
        ),
        4,
        "stranger, revoked, stranger twice by s_client: {metrics}"
    );
    drop(shuck);

    // Without a CA nothing verifies (20, unknown issuer), and every certificate is passed on.
    let shuck = Shuck::start(&config(""));
    let out = curl_with_cert(&pki, &shuck, &good);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (tlvs, _) = walk_v2(&backend.next());
    assert_eq!(ssl_subs(&tlvs).1, 20);
    assert_eq!(tlv(&tlvs, 0xE0), Some(first_cert_der(&good).as_slice()));
}

/// optional_no_ca accepts any issuer, but not a certificate without its key: a client showing
/// someone else's certificate (signing the handshake with its own key) is refused.
#[test]
fn optional_no_ca_still_needs_proof_of_the_private_key() {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let pki = Pki::new();
    let victim = pki.client("victim.pem", "victim", 4001);
    let thief = pki.client("thief.pem", "thief", 4002);
    let backend = RawBackend::start();
    let shuck = mtls_frontend(&pki, backend.addr, "optional_no_ca", &["ssl"]);

    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&victim)
        .expect("read")
        .collect::<Result<_, _>>()
        .expect("pem");
    let key = provider
        .key_provider
        .load_private_key(PrivateKeyDer::from_pem_file(&thief).expect("key"))
        .expect("signing key");
    let forged = Arc::new(rustls::sign::CertifiedKey::new(chain, key));
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(pki.ca_path()).expect("ca"))
        .expect("root");
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("versions")
        .with_root_certificates(roots)
        .with_client_cert_resolver(Arc::new(Always(forged)));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let answer = rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let tcp = tokio::net::TcpStream::connect(shuck.addr())
            .await
            .expect("connect");
        let name = rustls::pki_types::ServerName::try_from("tlv.test").expect("name");
        // TLS 1.3: the client's side of the handshake ends before the server has checked its
        // CertificateVerify, so the refusal shows on the first read.
        let Ok(mut tls) = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(name, tcp)
            .await
        else {
            return Vec::new();
        };
        let _ = tls.write_all(b"GET / HTTP/1.0\r\n\r\n").await;
        let mut v = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(20), tls.read_to_end(&mut v)).await;
        v
    });
    assert!(answer.is_empty(), "served a forged certificate: {answer:?}");
    // The refusal is logged once the server has read the bad signature, which may be after the
    // client's read ended: wait for it (bounded).
    shuck.wait_log("TLS handshake failed");
    assert!(backend.got.try_recv().is_err(), "backend reached");
}

/// A client certificate resolver that always offers the same (forged) certificate and key.
#[derive(Debug)]
struct Always(Arc<rustls::sign::CertifiedKey>);

impl rustls::client::ResolvesClientCert for Always {
    fn resolve(
        &self,
        _: &[&[u8]],
        _: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A frontend requiring client certificates from the test CA, checked against `crl`.
fn crl_frontend(pki: &Pki, backend: &HttpBackend, crl: &std::path::Path) -> Shuck {
    let cert = pki.leaf("server.pem", "server", &["tlv.test"], Key::EcdsaP256);
    Shuck::start(&format!(
        "[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\n\
         client_auth = \"required\"\nclient_ca = {}\nclient_crl = {}\n",
        backend.addr,
        toml_path(&cert),
        toml_path(&pki.ca_path()),
        toml_path(crl)
    ))
}

/// A CRL refuses the client certificates it revokes, and every certificate under an
/// intermediate CA it revokes (nginx and HAProxy check the whole chain too); the others pass.
#[test]
fn certificates_revoked_by_the_crl_or_under_a_revoked_intermediate_are_refused() {
    let pki = Pki::new();
    let revoked = pki.client("revoked.pem", "revoked one", 1001);
    let kept = pki.client("kept.pem", "kept one", 1002);
    let under_revoked = pki.client_via_intermediate("a.pem", "under revoked", 5001);
    let under_sound = pki.client_via_intermediate("b.pem", "under sound", 5002);
    let crl = pki.crl("ca.crl.pem", &[1001, 5001]);
    let backend = HttpBackend::start();
    let shuck = crl_frontend(&pki, &backend, &crl);
    for (client, served) in [
        (&kept, true),
        (&under_sound, true),
        (&revoked, false),
        (&under_revoked, false),
    ] {
        let out = curl_with_cert(&pki, &shuck, client);
        assert_eq!(
            out.status.success(),
            served,
            "{}: {}{}\n{}",
            client.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            shuck.log_text()
        );
    }
    // Logged when the server has read the certificate, possibly after curl gave up: bounded wait.
    shuck.wait_log_count("client certificate refused: revoked", 2);
}

/// Resumption does not check a client certificate again, so a reload that revokes one must also
/// retire the sessions and tickets made under the old trust: the revoked client's ticket must
/// not get it back in.
#[test]
fn a_reload_with_a_new_crl_does_not_let_revoked_clients_resume() {
    let pki = Pki::new();
    let client = pki.client("alice.pem", "alice", 2001);
    let crl = pki.crl("ca.crl.pem", &[]);
    let backend = HttpBackend::start();
    let shuck = crl_frontend(&pki, &backend, &crl);
    let sess = pki.path("alice.sess");
    let c = client.to_str().expect("path");
    let s = sess.to_str().expect("path");
    let (ok, out) = s_client(
        &pki,
        shuck.addr(),
        Some("tlv.test"),
        &["-tls1_3", "-cert", c, "-key", c, "-sess_out", s],
    );
    assert!(ok, "{out}");
    // Control: before the reload the session resumes.
    let (ok, out) = s_client(
        &pki,
        shuck.addr(),
        Some("tlv.test"),
        &["-tls1_3", "-cert", c, "-key", c, "-sess_in", s],
    );
    assert!(ok && out.contains("\nReused, TLSv1.3"), "{out}");

    // Revoke alice, reload, and try the old session again.
    let revoking = pki.crl("revoking.crl.pem", &[2001]);
    std::fs::rename(&revoking, &crl).expect("replace CRL");
    shuck.signal("HUP");
    let log = shuck.wait_log("reloaded certificates");
    assert!(log.contains("client certificate trust changed"), "{log}");
    let (ok, out) = s_client(
        &pki,
        shuck.addr(),
        Some("tlv.test"),
        &["-tls1_3", "-cert", c, "-key", c, "-sess_in", s],
    );
    assert!(!out.contains("\nReused,"), "revoked client resumed: {out}");
    assert!(
        !out.contains("backend got"),
        "revoked client served: {ok} {out}"
    );
}

/// A CRL larger than 1 MiB (a large CA's runs to megabytes; the loader takes up to 64 MiB),
/// replaced on disk by one that revokes a client: `watch_certificates` loads it and the client
/// is refused, without a signal. (The watcher once hashed files through the 1 MiB cap, saw no
/// change, and kept admitting the client.)
#[test]
fn a_crl_over_one_mib_replaced_on_disk_is_applied() {
    let pki = Pki::new();
    let client = pki.client("carol.pem", "carol", 7001);
    let many: Vec<u64> = (1_000_000..1_032_000).collect();
    let crl = pki.crl("big.crl.pem", &many);
    let size = std::fs::metadata(&crl).expect("CRL").len();
    assert!(size > 1 << 20, "the CRL is {size} bytes");
    let backend = HttpBackend::start();
    let shuck = crl_frontend(&pki, &backend, &crl);
    assert!(curl_with_cert(&pki, &shuck, &client).status.success());
    let mut revoking = many;
    revoking.push(7001);
    let new = pki.crl("big-revoking.crl.pem", &revoking);
    std::fs::rename(&new, &crl).expect("replace CRL");
    let t = std::time::Instant::now();
    while curl_with_cert(&pki, &shuck, &client).status.success() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the revoked client is still admitted 10 s after the CRL changed:\n{}",
            shuck.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("refused {:?} after the CRL changed", t.elapsed());
}

/// A CRL replaced on disk by one that does not load: the watcher reports it as files that do
/// not load (once), keeps the previous trust, and does not take it for loaded. (It once checked
/// only the certificate chains, called the set loaded, and the refresh then failed unseen.)
#[test]
fn a_crl_that_does_not_load_is_reported_by_the_watcher() {
    let pki = Pki::new();
    let client = pki.client("dave.pem", "dave", 8001);
    let revoked = pki.client("erin.pem", "erin", 8002);
    let crl = pki.crl("ca.crl.pem", &[8002]);
    let backend = HttpBackend::start();
    let shuck = crl_frontend(&pki, &backend, &crl);
    assert!(curl_with_cert(&pki, &shuck, &client).status.success());
    let bad = pki.path("bad.crl.pem");
    std::fs::write(
        &bad,
        "-----BEGIN X509 CRL-----\nnot a CRL\n-----END X509 CRL-----\n",
    )
    .expect("write");
    std::fs::rename(&bad, &crl).expect("replace CRL");
    let log = shuck.wait_log("do not load");
    assert!(!log.contains("loading them"), "{log}");
    assert!(curl_with_cert(&pki, &shuck, &client).status.success());
    assert!(
        !curl_with_cert(&pki, &shuck, &revoked).status.success(),
        "the previous CRL still applies"
    );
}

/// One listener, a TLS policy per name: `admin.test` requires a client certificate and
/// `www.test` does not; `legacy.test` takes a TLS 1.2 client the frontend (TLS 1.3 only) refuses
/// with `protocol_version` on `www.test`; `shuck check` prints each route's policy.
#[test]
fn routes_have_their_own_tls_policy_chosen_by_the_name_asked_for() {
    let pki = Pki::new();
    let cert = pki.leaf(
        "multi.pem",
        "multi",
        &["www.test", "admin.test", "legacy.test"],
        Key::EcdsaP256,
    );
    let client = pki.leaf("client.pem", "client one", &[], Key::EcdsaP256);
    let (www, admin, legacy) = (
        HttpBackend::start(),
        HttpBackend::start(),
        HttpBackend::start(),
    );
    let shuck = Shuck::start(&format!(
        "[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\n\
         protocols = [\"TLS1.3\"]\n\
         [[frontend.route]]\nname = \"admin\"\nsni = [\"admin.test\"]\nbackend = \"{}\"\n\
         client_auth = \"required\"\nclient_ca = {}\n\
         [[frontend.route]]\nname = \"legacy\"\nsni = [\"legacy.test\"]\nbackend = \"{}\"\n\
         protocols = [\"TLS1.2\", \"TLS1.3\"]\n",
        www.addr,
        toml_path(&cert),
        admin.addr,
        toml_path(&pki.ca_path()),
        legacy.addr
    ));
    let web = shuck.addr();
    let with_cert = ["--cert", client.to_str().expect("path")];
    let get = |name: &str, extra: &[&str]| curl_at(&pki, web, name, "/", extra);
    let plain = get("www.test", &[]);
    assert!(plain.status.success(), "{}", shuck.log_text());
    assert!(String::from_utf8_lossy(&plain.stdout).starts_with("backend got:"));
    assert!(
        !get("admin.test", &[]).status.success(),
        "admin.test served without a certificate"
    );
    let mutual = get("admin.test", &with_cert);
    assert!(mutual.status.success(), "{}", shuck.log_text());
    assert_eq!(admin.served.load(std::sync::atomic::Ordering::Relaxed), 1);
    let (ok, out) = s_client(&pki, web, Some("legacy.test"), &["-tls1_2"]);
    assert!(ok, "TLS 1.2 on legacy.test: {out}");
    assert!(out.contains("TLSv1.2"), "{out}");
    let (ok, out) = s_client(&pki, web, Some("www.test"), &["-tls1_2"]);
    assert!(!ok, "TLS 1.2 on www.test served: {out}");
    assert!(out.contains("alert protocol version"), "{out}");
    let check = shuck_test_support::process::run_bounded(
        std::process::Command::new(&*shuck_test_support::process::SHUCK)
            .args(["check", "--config"])
            .arg(shuck.config_path()),
        b"",
        30,
    );
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{said}");
    assert!(
        said.contains("TLS for admin.test") && said.contains("client certificates: required"),
        "{said}"
    );
    assert!(
        said.contains("TLS for legacy.test") && said.contains("protocols: TLS1.2, TLS1.3"),
        "{said}"
    );
}

/// A route without a policy of its own before a later route whose policy covers the same
/// name: the handshake gets the later route's (no certificate asked for), the connection
/// would go to the earlier route's backend: refused (`policy_mismatch`), never served
/// without the frontend's required certificate.
#[test]
fn a_connection_whose_route_has_another_tls_policy_than_its_handshake_is_refused() {
    let pki = Pki::new();
    let cert = pki.leaf("m.pem", "m", &["admin.test", "www.test"], Key::EcdsaP256);
    let (admin, public) = (HttpBackend::start(), HttpBackend::start());
    let shuck = Shuck::start(&format!(
        "metrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\n\
         certificates = {}\nclient_auth = \"required\"\nclient_ca = {}\n\
         [[frontend.route]]\nname = \"admin\"\nsni = [\"admin.test\"]\nbackend = \"{}\"\n\
         [[frontend.route]]\nname = \"public\"\nsni = [\"*.test\"]\nbackend = \"{}\"\nclient_auth = \"none\"\n",
        toml_path(&cert),
        toml_path(&pki.ca_path()),
        admin.addr,
        public.addr
    ));
    let web = shuck.addrs[0];
    assert!(curl_at(&pki, web, "www.test", "/", &[]).status.success());
    let out = curl_at(&pki, web, "admin.test", "/", &[]);
    assert!(
        !out.status.success(),
        "admin.test served without the required certificate"
    );
    assert_eq!(admin.served.load(std::sync::atomic::Ordering::Relaxed), 0);
    let metrics = wait_metric(
        shuck.addrs[1],
        "shuck_backend_errors_total",
        &["kind=\"policy_mismatch\""],
        1,
    );
    assert_eq!(
        sum(
            &metrics,
            "shuck_backend_errors_total",
            &["kind=\"policy_mismatch\""]
        ),
        1,
        "{metrics}"
    );
}

/// A reload that makes a name require a client certificate: a session made before, without
/// one, does not let the client back in.
#[test]
fn a_session_made_before_a_name_required_a_certificate_does_not_resume_past_it() {
    let pki = Pki::new();
    let cert = pki.leaf("r.pem", "r", &["www.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let shuck = Shuck::start(&format!(
        "[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\n",
        backend.addr,
        toml_path(&cert)
    ));
    let web = shuck.addr();
    let sess = pki.dir.path().join("before.sess");
    let sess = sess.to_str().expect("path");
    let (ok, out) = s_client(&pki, web, Some("www.test"), &["-sess_out", sess]);
    assert!(ok, "{out}");
    let (ok, out) = s_client(&pki, web, Some("www.test"), &["-sess_in", sess]);
    assert!(
        ok && out.contains("Reused"),
        "the session resumes before the reload: {out}"
    );
    let path = shuck.config_path();
    let text = std::fs::read_to_string(&path).expect("config");
    let stricter = format!(
        "{text}[[frontend.route]]\nname = \"locked\"\nsni = [\"www.test\"]\nbackend = \"{}\"\n\
         client_auth = \"required\"\nclient_ca = {}\n",
        backend.addr,
        toml_path(&pki.ca_path())
    );
    std::fs::write(&path, stricter).expect("config");
    shuck.signal("HUP");
    shuck.wait_log("reloaded certificates and configuration");
    let (ok, out) = s_client(&pki, web, Some("www.test"), &["-sess_in", sess]);
    assert!(!ok, "resumed past the certificate now required: {out}");
}
