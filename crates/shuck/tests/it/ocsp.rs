//! OCSP stapling against OpenSSL's responder (`openssl ocsp -index … -rsigner …`): its answers are
//! checked with `openssl s_client -status`. `cargo test --workspace ocsp` runs these.
//!
//! OpenSSL 3.0's `-port` binds every interface (it takes a port number only), and these tests
//! stay on loopback: the responder's logic is OpenSSL's, run once per request (`-reqin`,
//! `-respout`), behind a small HTTP listener on 127.0.0.1.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shuck_test_support::pki::{toml_path, Pki};
use shuck_test_support::process::{run_bounded, Shuck};

const NAME: &str = "stapled.test";
const SERIAL: u64 = 0x1234;

/// Who signs the responder's answers.
#[derive(Clone)]
struct Signer {
    cert: PathBuf,
    key: PathBuf,
}

/// OpenSSL's OCSP responder over HTTP on loopback, for one CA database (`index.txt`).
struct Responder {
    addr: SocketAddr,
    signer: Arc<Mutex<Signer>>,
    stop: Arc<AtomicBool>,
}

impl Responder {
    fn start(pki: &Pki, index: &Path, minutes: u32) -> Responder {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let signer = Arc::new(Mutex::new(Signer {
            cert: pki.ca_path(),
            key: pki.ca_key_path(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (ca, index, dir) = (
            pki.ca_path(),
            index.to_path_buf(),
            pki.dir.path().to_path_buf(),
        );
        let (s, st) = (signer.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut conn) = conn else { continue };
                let signer = s.lock().expect("signer").clone();
                let _ = answer(&mut conn, &ca, &index, &signer, &dir, minutes);
            }
        });
        Responder { addr, signer, stop }
    }

    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    fn sign_with(&self, signer: Signer) {
        *self.signer.lock().expect("signer") = signer;
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(self.addr);
    }
}

/// One HTTP POST: the request to OpenSSL, its response back.
fn answer(
    conn: &mut std::net::TcpStream,
    ca: &Path,
    index: &Path,
    signer: &Signer,
    dir: &Path,
    minutes: u32,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        if line.trim().is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let (req, resp) = (dir.join("req.der"), dir.join("resp.der"));
    std::fs::write(&req, &body)?;
    respond(
        index,
        ca,
        signer,
        &req,
        &resp,
        &["-nmin", &minutes.to_string()],
    );
    let der = std::fs::read(&resp)?;
    write!(
        conn,
        "HTTP/1.0 200 OK\r\nContent-Type: application/ocsp-response\r\nContent-Length: {}\r\n\r\n",
        der.len()
    )?;
    conn.write_all(&der)
}

/// OpenSSL's CA database with our certificate, good or revoked.
fn write_index(path: &Path, revoked: bool) {
    let line = if revoked {
        format!("R\t301231235959Z\t251101000000Z\t{SERIAL:04X}\tunknown\t/CN={NAME}\n")
    } else {
        format!("V\t301231235959Z\t\t{SERIAL:04X}\tunknown\t/CN={NAME}\n")
    };
    std::fs::write(path, line).expect("index");
}

/// A signer the certificate's CA never delegated to.
fn rogue_signer(dir: &Path) -> Signer {
    let rogue = Pki::new();
    let (cert, key) = (dir.join("rogue.pem"), dir.join("rogue.key"));
    std::fs::copy(rogue.ca_path(), &cert).expect("rogue cert");
    std::fs::copy(rogue.ca_key_path(), &key).expect("rogue key");
    Signer { cert, key }
}

/// What `openssl s_client -status` says about the staple.
fn staple_status(addr: SocketAddr) -> String {
    let out = run_bounded(
        Command::new("openssl").args([
            "s_client",
            "-status",
            "-connect",
            &addr.to_string(),
            "-servername",
            NAME,
        ]),
        b"",
        20,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("OCSP response: no response sent") {
        "none".into()
    } else if text.contains("Cert Status: good") {
        "good".into()
    } else {
        text.into_owned()
    }
}

/// An OCSP response made offline by OpenSSL, as an operator's cron job would: into `out`.
fn response_file(pki: &Pki, bundle: &Path, index: &Path, signer: &Signer, out: &Path) {
    let req = pki.dir.path().join("file-req.der");
    let run = |args: &mut Command| {
        let o = run_bounded(args, b"", 20);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    run(Command::new("openssl")
        .args(["ocsp", "-no_nonce", "-issuer"])
        .arg(pki.ca_path())
        .arg("-cert")
        .arg(bundle)
        .arg("-reqout")
        .arg(&req));
    respond(index, &pki.ca_path(), signer, &req, out, &["-ndays", "1"]);
}

/// OpenSSL's responder answering one request file (`validity`: `-nmin N` or `-ndays N`).
fn respond(index: &Path, ca: &Path, signer: &Signer, req: &Path, resp: &Path, validity: &[&str]) {
    let out = run_bounded(
        Command::new("openssl")
            .args(["ocsp", "-index"])
            .arg(index)
            .arg("-CA")
            .arg(ca)
            .arg("-rsigner")
            .arg(&signer.cert)
            .arg("-rkey")
            .arg(&signer.key)
            .arg("-reqin")
            .arg(req)
            .arg("-respout")
            .arg(resp)
            .args(validity),
        b"",
        20,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `site.pem.ocsp` is stapled (HAProxy's habit, the default `ocsp = "file"`); replaced by a
/// revoked or a forged response and reloaded (SIGHUP), it is not stapled any more, with a line
/// saying why; one from a responder the CA delegated to is, one from another CA's responder is
/// not; a good one again, and it is.
#[test]
fn ocsp_file_is_stapled_checked_and_reloaded_on_sighup() {
    let pki = Pki::new();
    let bundle = pki.leaf_with_ocsp("site.pem", &[NAME], SERIAL, "http://127.0.0.1:9/");
    let staple = pki.path("site.pem.ocsp");
    let index = pki.path("index.txt");
    let ca = Signer {
        cert: pki.ca_path(),
        key: pki.ca_key_path(),
    };
    write_index(&index, false);
    response_file(&pki, &bundle, &index, &ca, &staple);
    let config = format!(
        "metrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
        toml_path(&bundle)
    );
    let shuck = Shuck::start(&config);
    assert_eq!(staple_status(shuck.addr()), "good");
    let staple_age = || {
        shuck_test_support::clients::scrape(shuck.addrs[1])
            .lines()
            .find(|l| l.starts_with("shuck_ocsp_staple_age_seconds{"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<i64>().ok())
    };
    // Made a moment ago by OpenSSL: seconds old.
    assert!(
        staple_age().is_some_and(|a| (0..120).contains(&a)),
        "{:?}",
        staple_age()
    );

    write_index(&index, true);
    response_file(&pki, &bundle, &index, &ca, &staple);
    shuck.signal("HUP");
    shuck.wait_log_count("reloaded certificates", 1);
    assert_eq!(staple_status(shuck.addr()), "none");
    assert!(shuck.log_text().contains("the certificate is revoked"));
    assert_eq!(staple_age(), None, "no staple, no age");

    write_index(&index, false);
    response_file(
        &pki,
        &bundle,
        &index,
        &rogue_signer(pki.dir.path()),
        &staple,
    );
    shuck.signal("HUP");
    shuck.wait_log_count("reloaded certificates", 2);
    assert_eq!(staple_status(shuck.addr()), "none");
    assert!(shuck
        .log_text()
        .contains("neither the issuer's nor a delegated responder's"));

    // A responder the CA delegated to (OCSP-signing, signed by the CA): stapled.
    let (cert, key) = pki.ocsp_responder("delegated");
    response_file(&pki, &bundle, &index, &Signer { cert, key }, &staple);
    shuck.signal("HUP");
    shuck.wait_log_count("reloaded certificates", 3);
    assert_eq!(staple_status(shuck.addr()), "good", "{}", shuck.log_text());

    // One with OCSP-signing but from another CA: refused.
    let rogue = Pki::new();
    let (cert, key) = rogue.ocsp_responder("rogue-delegated");
    response_file(&pki, &bundle, &index, &Signer { cert, key }, &staple);
    shuck.signal("HUP");
    shuck.wait_log_count("reloaded certificates", 4);
    assert_eq!(staple_status(shuck.addr()), "none");

    response_file(&pki, &bundle, &index, &ca, &staple);
    shuck.signal("HUP");
    shuck.wait_log_count("reloaded certificates", 5);
    assert_eq!(staple_status(shuck.addr()), "good");
}

/// `ocsp = "fetch"`: the response is fetched from the responder the certificate names, checked
/// and stapled; a responder that starts forging answers (asked at once by `shuck ctl ocsp
/// refresh`, rather than a minute later) leaves the last good staple in place; after a restart
/// with the responder gone, the stored staple is served at once.
#[test]
fn ocsp_fetched_is_stapled_and_a_forged_or_missing_answer_keeps_the_last_good_one() {
    let pki = Pki::new();
    let index = pki.path("index.txt");
    write_index(&index, false);
    // Two-minute responses: fetched again after a minute (a minute before they lapse).
    let responder = Responder::start(&pki, &index, 2);
    let bundle = pki.leaf_with_ocsp("site.pem", &[NAME], SERIAL, &responder.url());
    let state = pki.dir.path().join("state");
    let socket = pki.dir.path().join("admin.sock");
    let config = format!(
        "state_dir = {}\nadmin_socket = {}\n[[frontend]]\nname = \"site\"\nlisten = \"127.0.0.1:0\"\ncertificates = {}\nocsp = \"fetch\"\n",
        toml_path(&state),
        toml_path(&socket),
        toml_path(&bundle)
    );
    let shuck = Shuck::start(&config);
    shuck.wait_log("loaded a renewed certificate or OCSP staple");
    assert_eq!(staple_status(shuck.addr()), "good");

    responder.sign_with(rogue_signer(pki.dir.path()));
    // Without it the next fetch would come a minute after the first.
    refresh_now(&socket);
    let log = shuck.wait_log_within("OCSP fetch failed", Duration::from_secs(20));
    assert!(
        log.contains("neither the issuer's nor a delegated responder's"),
        "{log}"
    );
    assert_eq!(staple_status(shuck.addr()), "good", "{log}");
    let (status, _) = shuck.stop();
    assert!(status.success());

    drop(responder);
    let shuck = Shuck::start(&config);
    assert_eq!(staple_status(shuck.addr()), "good");
    // The stored response is not due for a minute: asked now, the responder is gone.
    refresh_now(&socket);
    let log = shuck.wait_log("OCSP fetch failed");
    assert_eq!(staple_status(shuck.addr()), "good", "{log}");
}

/// `shuck ctl ocsp refresh site`: the staple tasks ask their responder now.
fn refresh_now(socket: &Path) {
    let asked = run_bounded(
        Command::new(&*shuck_test_support::process::SHUCK)
            .args(["ctl", "--socket"])
            .arg(socket)
            .args(["ocsp", "refresh", "site"]),
        b"",
        30,
    );
    let said = String::from_utf8_lossy(&asked.stdout);
    assert!(
        asked.status.success() && said.contains("asked the OCSP responders now"),
        "{said}{}",
        String::from_utf8_lossy(&asked.stderr)
    );
}
