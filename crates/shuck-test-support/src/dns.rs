//! A real DNS server for the tests: dnsmasq on a free loopback port, answering for the names of
//! a hosts file the test rewrites (`set`), with a 1 s TTL. `dig` checks each change took.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::peers::require;
use crate::process::run_bounded;

pub struct Dnsmasq {
    child: Child,
    pub addr: SocketAddr,
    hosts: PathBuf,
    log: PathBuf,
    // Held so the hosts file and log outlive the server.
    _dir: tempfile::TempDir,
}

/// A port free on 127.0.0.1 for both UDP and TCP (DNS answers on both).
fn free_dns_port() -> u16 {
    crate::ports::tcp_and_udp()
}

impl Dnsmasq {
    /// Serves `records` (name, address) with a TTL of 1 s, and nothing else (no upstream).
    pub fn start(records: &[(&str, IpAddr)]) -> Dnsmasq {
        let bin = require("dnsmasq", "dnsmasq-base");
        let dir = tempfile::tempdir().expect("tempdir");
        // dnsmasq started as root reads the hosts file again as nobody.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let (hosts, log) = (dir.path().join("hosts"), dir.path().join("dnsmasq.log"));
        write_hosts(&hosts, records);
        let port = free_dns_port();
        let child = Command::new(bin)
            .args([
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--bind-interfaces",
                "--listen-address=127.0.0.1",
                "--local-ttl=1",
                "--log-queries",
            ])
            .arg(format!("--port={port}"))
            .arg(format!("--addn-hosts={}", hosts.display()))
            .arg(format!("--pid-file={}", dir.path().join("pid").display()))
            .arg(format!("--log-facility={}", log.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn dnsmasq");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut d = Dnsmasq {
            child,
            addr,
            hosts,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            if let Ok(Some(st)) = d.child.try_wait() {
                panic!("dnsmasq exited ({st}): {}", d.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "dnsmasq not listening: {}",
                d.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d.wait_answer(records);
        d
    }

    /// Answers `records` from now on (dnsmasq reads its hosts file again on SIGHUP); returns
    /// once `dig` sees the new answer for each name.
    pub fn set(&self, records: &[(&str, IpAddr)]) {
        write_hosts(&self.hosts, records);
        let st = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(st.success());
        self.wait_answer(records);
    }

    /// Stops answering at all (the server is killed; reaped when dropped).
    pub fn stop(&self) {
        let st = Command::new("kill")
            .args(["-KILL", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(st.success());
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The A records `dig` gets for `name`, sorted.
    pub fn dig(&self, name: &str) -> Vec<String> {
        let out = run_bounded(
            Command::new(require("dig", "bind9-dnsutils"))
                .arg(format!("@{}", self.addr.ip()))
                .args([
                    "-p",
                    &self.addr.port().to_string(),
                    "+short",
                    "+tries=1",
                    "+time=2",
                ])
                .arg(name),
            b"",
            10,
        );
        let mut ips: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        ips.sort();
        ips
    }

    fn wait_answer(&self, records: &[(&str, IpAddr)]) {
        let deadline = Instant::now() + Duration::from_secs(10);
        for (name, _) in records {
            let mut want: Vec<String> = records
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, ip)| ip.to_string())
                .collect();
            want.sort();
            loop {
                let got = self.dig(name);
                if got == want {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "dnsmasq answers {got:?} for {name}, not {want:?}: {}",
                    self.log_text()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn write_hosts(path: &std::path::Path, records: &[(&str, IpAddr)]) {
    let mut text = String::new();
    for (name, ip) in records {
        let _ = writeln!(text, "{ip} {name}");
    }
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).expect("write hosts");
    std::fs::rename(&tmp, path).expect("rename hosts");
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
