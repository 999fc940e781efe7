//! Test harness: certificates generated at test time, the real `shuck` binary started on port 0
//! with a ready file, small real backends, and helpers to drive curl and `openssl s_client`.
#![allow(dead_code)] // each test file uses a different part of the harness

pub mod peers;
pub mod tlv_backend;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SignatureAlgorithm};

pub const SHUCK: &str = env!("CARGO_BIN_EXE_shuck");

/// A CA and leaf bundles signed by it, written into a temporary directory.
pub struct Pki {
    pub dir: tempfile::TempDir,
    ca_key: KeyPair,
    ca: rcgen::Certificate,
}

#[derive(Clone, Copy)]
pub enum Key {
    EcdsaP256,
    EcdsaP384,
    Rsa2048,
    Ed25519,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca_key = KeyPair::generate().expect("CA key");
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(DnType::CommonName, "shuck test CA");
        let ca = p.self_signed(&ca_key).expect("CA cert");
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).expect("write CA");
        Pki { dir, ca_key, ca }
    }

    pub fn ca_path(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `<file>` holding leaf, CA, key; the leaf's CN is `cn`, its SANs `names`.
    pub fn leaf(&self, file: &str, cn: &str, names: &[&str], key: Key) -> PathBuf {
        self.leaf_with_serial(file, cn, names, key, None)
    }

    /// A client certificate (no names) with a known serial number, for CRL tests.
    pub fn client(&self, file: &str, cn: &str, serial: u64) -> PathBuf {
        self.leaf_with_serial(file, cn, &[], Key::EcdsaP256, Some(serial))
    }

    /// A PEM CRL, signed by the CA, revoking `serials`.
    pub fn crl(&self, file: &str, serials: &[u64]) -> PathBuf {
        let now = time::OffsetDateTime::now_utc();
        let crl = rcgen::CertificateRevocationListParams {
            this_update: now - time::Duration::hours(1),
            next_update: now + time::Duration::days(1),
            crl_number: rcgen::SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: serials
                .iter()
                .map(|s| rcgen::RevokedCertParams {
                    serial_number: rcgen::SerialNumber::from(*s),
                    revocation_time: now - time::Duration::minutes(5),
                    reason_code: Some(rcgen::RevocationReason::KeyCompromise),
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        }
        .signed_by(&self.ca, &self.ca_key)
        .expect("sign CRL");
        let path = self.path(file);
        std::fs::write(&path, crl.pem().expect("CRL PEM")).expect("write CRL");
        path
    }

    fn leaf_with_serial(
        &self,
        file: &str,
        cn: &str,
        names: &[&str],
        key: Key,
        serial: Option<u64>,
    ) -> PathBuf {
        let alg: &'static SignatureAlgorithm = match key {
            Key::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            Key::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            Key::Rsa2048 => &rcgen::PKCS_RSA_SHA256,
            Key::Ed25519 => &rcgen::PKCS_ED25519,
        };
        let kp = KeyPair::generate_for(alg).expect("leaf key");
        let mut p =
            CertificateParams::new(names.iter().map(|s| (*s).to_string()).collect::<Vec<_>>())
                .expect("leaf params");
        p.distinguished_name.push(DnType::CommonName, cn);
        p.serial_number = serial.map(rcgen::SerialNumber::from);
        let cert = p.signed_by(&kp, &self.ca, &self.ca_key).expect("sign leaf");
        let path = self.path(file);
        std::fs::write(
            &path,
            format!("{}{}{}", cert.pem(), self.ca.pem(), kp.serialize_pem()),
        )
        .expect("write bundle");
        path
    }

    /// A client certificate issued by an intermediate CA (serial `intermediate_serial`, signed
    /// by this CA); the bundle holds leaf, intermediate and key, as a client sends them.
    pub fn client_via_intermediate(
        &self,
        file: &str,
        cn: &str,
        intermediate_serial: u64,
    ) -> PathBuf {
        let ik = KeyPair::generate().expect("intermediate key");
        let mut ip = CertificateParams::new(Vec::<String>::new()).expect("intermediate params");
        ip.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ip.distinguished_name.push(
            DnType::CommonName,
            format!("intermediate {intermediate_serial}"),
        );
        ip.serial_number = Some(rcgen::SerialNumber::from(intermediate_serial));
        let inter = ip
            .signed_by(&ik, &self.ca, &self.ca_key)
            .expect("sign intermediate");
        let kp = KeyPair::generate().expect("leaf key");
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("leaf params");
        p.distinguished_name.push(DnType::CommonName, cn);
        let leaf = p.signed_by(&kp, &inter, &ik).expect("sign leaf");
        let path = self.path(file);
        std::fs::write(
            &path,
            format!("{}{}{}", leaf.pem(), inter.pem(), kp.serialize_pem()),
        )
        .expect("write bundle");
        path
    }

    /// A bundle whose key does not belong to its certificate.
    pub fn mismatched(&self, file: &str) -> PathBuf {
        let kp = KeyPair::generate().expect("key");
        let other = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(vec!["mismatch.test".to_string()])
            .expect("params")
            .signed_by(&kp, &self.ca, &self.ca_key)
            .expect("sign");
        let path = self.path(file);
        std::fs::write(&path, format!("{}{}", cert.pem(), other.serialize_pem())).expect("write");
        path
    }
}

/// A running `shuck serve`, killed on drop.
pub struct Shuck {
    child: Child,
    pub addrs: Vec<SocketAddr>,
    pub log: PathBuf,
    dir: tempfile::TempDir,
}

impl Shuck {
    /// Starts `shuck serve --config <toml>` and waits for the ready file.
    pub fn start(config: &str) -> Shuck {
        Self::start_args(config, &[])
    }

    pub fn start_args(config: &str, extra: &[&str]) -> Shuck {
        Self::start_limited(config, extra, None)
    }

    /// Like `start_args`, with the open-files limit (soft and hard) set to `nofile` first, so
    /// shuck cannot raise it.
    pub fn start_limited(config: &str, extra: &[&str], nofile: Option<u32>) -> Shuck {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = dir.path().join("shuck.toml");
        std::fs::write(&cfg, config).expect("write config");
        let cfg = cfg.to_str().expect("utf-8 path").to_string();
        let mut args = vec!["--config", &cfg];
        args.extend(extra);
        Self::spawn(dir, &args, nofile)
    }

    /// `shuck serve ARGS --ready-file ...`, without a configuration file.
    pub fn start_flags(args: &[&str]) -> Shuck {
        Self::spawn(tempfile::tempdir().expect("tempdir"), args, None)
    }

    fn spawn(dir: tempfile::TempDir, args: &[&str], nofile: Option<u32>) -> Shuck {
        let ready = dir.path().join("ready");
        let log = dir.path().join("shuck.log");
        let mut cmd = match nofile {
            None => Command::new(SHUCK),
            Some(n) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(SHUCK);
                c
            }
        };
        let child = cmd
            .arg("serve")
            .args(args)
            .arg("--ready-file")
            .arg(&ready)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn shuck");
        let mut s = Shuck {
            child,
            addrs: Vec::new(),
            log,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read_to_string(&ready) {
                s.addrs = text
                    .lines()
                    .map(|l| l.parse().expect("ready file address"))
                    .collect();
                return s;
            }
            if let Some(status) = s.child.try_wait().expect("try_wait") {
                panic!("shuck exited early ({status}): {}", s.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "shuck not ready in 30s: {}",
                s.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The configuration file `start` wrote (rewrite it, then `signal("HUP")` to reload).
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("shuck.toml")
    }

    /// Sends a signal by name ("HUP", "TERM").
    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill");
        assert!(st.success());
    }

    /// Waits (bounded) until `needle` appears `n` times in the log.
    pub fn wait_log_count(&self, needle: &str, n: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let t = self.log_text();
            if t.matches(needle).count() >= n {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "log never had {n}x {needle:?}: {t}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    pub fn port(&self) -> u16 {
        self.addrs[0].port()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn assert_alive(&mut self) {
        assert!(
            self.child.try_wait().expect("try_wait").is_none(),
            "shuck died: {}",
            self.log_text()
        );
    }

    /// Waits (bounded) until the log contains `needle`.
    pub fn wait_log(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let t = self.log_text();
            if t.contains(needle) {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "log never contained {needle:?}: {t}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit status and the log.
    pub fn stop(mut self) -> (std::process::ExitStatus, String) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return (st, self.log_text());
            }
            assert!(Instant::now() < deadline, "shuck did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Shuck {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tiny HTTP/1.x backend on a thread: answers every request with `backend got: <request line>`
/// and closes. Stops when dropped.
pub struct HttpBackend {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl HttpBackend {
    pub fn start() -> HttpBackend {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind backend");
        let addr = l.local_addr().expect("addr");
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                std::thread::spawn(move || {
                    let mut r = BufReader::new(conn.try_clone().expect("clone"));
                    let mut first = String::new();
                    if r.read_line(&mut first).is_err() {
                        return;
                    }
                    loop {
                        let mut line = String::new();
                        match r.read_line(&mut line) {
                            Ok(0) | Err(_) => break,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => {}
                        }
                    }
                    let body = format!("backend got: {}", first.trim_end());
                    let mut w = conn;
                    let _ = write!(
                        w,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        HttpBackend { addr, stop }
    }
}

impl Drop for HttpBackend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

/// Runs a command with a time bound, returning its output.
pub fn run_bounded(cmd: &mut Command, stdin: &[u8], secs: u64) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut si = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    std::thread::spawn(move || {
        let _ = si.write_all(&data);
    });
    let pid = child.id();
    let done = Arc::new(AtomicBool::new(false));
    let done2 = done.clone();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if done2.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    });
    let out = child.wait_with_output().expect("wait");
    done.store(true, Ordering::Relaxed);
    out
}

/// `curl` through shuck: `name` is resolved to shuck's address, verified against the test CA.
pub fn curl(pki: &Pki, shuck: &Shuck, name: &str, path: &str, extra: &[&str]) -> Output {
    curl_at(pki, shuck.addr(), name, path, extra)
}

/// `curl` to one of shuck's addresses.
pub fn curl_at(pki: &Pki, a: SocketAddr, name: &str, path: &str, extra: &[&str]) -> Output {
    let url_host = if a.is_ipv6() {
        format!("[{}]", a.ip())
    } else {
        a.ip().to_string()
    };
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "20", "--cacert"])
        .arg(pki.ca_path())
        .arg("--resolve")
        .arg(format!("{name}:{}:{url_host}", a.port()))
        .args(extra)
        .arg(format!("https://{name}:{}{path}", a.port()));
    run_bounded(&mut c, b"", 30)
}

/// `openssl s_client` through shuck with an HTTP/1.0 request; returns (success, stdout+stderr).
pub fn s_client(pki: &Pki, addr: SocketAddr, sni: Option<&str>, extra: &[&str]) -> (bool, String) {
    let mut c = Command::new("openssl");
    c.arg("s_client")
        .arg("-connect")
        .arg(addr.to_string())
        .arg("-CAfile")
        .arg(pki.ca_path())
        .args(["-verify_return_error", "-ign_eof"]);
    match sni {
        Some(n) => c.args(["-servername", n]),
        None => c.arg("-noservername"),
    };
    c.args(extra);
    let out = run_bounded(&mut c, b"GET /via-openssl HTTP/1.0\r\n\r\n", 30);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && text.contains("backend got:"), text)
}

/// The value after `key` on the first line that has it (`s_client` output).
pub fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.trim_start().strip_prefix(key).map(str::trim))
}

/// True when this CPU has AES-NI (so shuck's default prefers AES-128-GCM).
pub fn cpu_has_aes() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| {
        c.lines()
            .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "aes"))
    })
}

pub fn toml_path(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

/// Reads whatever arrives until EOF or error, bounded.
pub fn read_all_bounded(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut v = Vec::new();
    let _ = s.read_to_end(&mut v);
    v
}

/// A rustls client trusting the test CA.
pub fn connector(pki: &Pki) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(pki.ca_path()).expect("ca");
    for c in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
        let c: rustls::pki_types::CertificateDer<'static> = c.expect("pem");
        roots.add(c).expect("root");
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

/// The Prometheus text from shuck's metrics endpoint.
pub fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).expect("connect metrics");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    String::from_utf8(read_all_bounded(&mut s)).expect("utf-8")
}

/// Sum of every sample of `name` whose labels contain all of `labels`.
pub fn sum(text: &str, name: &str, labels: &[&str]) -> i64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok())
        .sum()
}

/// Scrapes until the sum of `name` over samples with `labels` equals `want` (counters move on
/// shuck's worker threads, a little after the client saw the effect); bounded at 20 s.
pub fn wait_metric(addr: SocketAddr, name: &str, labels: &[&str], want: i64) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = scrape(addr);
        if sum(&text, name, labels) == want || Instant::now() >= deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
