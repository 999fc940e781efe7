//! Real PROXY-protocol peers: HAProxy and nginx started by the test as the current user with a
//! generated configuration in a temporary directory, on an OS-chosen port, killed on drop.
//!
//! The Debian packages' own services are never used: they listen on fixed ports with the
//! system configuration, which would make the tests depend on the machine's state.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What the HAProxy echo backend answers: every value it derived from the PROXY header.
/// HAProxy 2.6 has no `fc_pp_tlv` (2.9+), so only the authority and unique-id TLVs are visible.
const HAPROXY_ECHO: &str = "src=%[src] src_port=%[src_port] dst=%[dst] dst_port=%[dst_port] \
     authority=%[fc_pp_authority] unique_id=%[fc_pp_unique_id] rcvd_proxy=%[fc_rcvd_proxy]\\n";

/// nginx 1.22 has no `$proxy_protocol_tlv_*` variables (1.23.2+): addresses only.
const NGINX_ECHO: &str = "addr=$proxy_protocol_addr port=$proxy_protocol_port \
     server_addr=$proxy_protocol_server_addr server_port=$proxy_protocol_server_port\\n";

/// A running HAProxy or nginx, killed and reaped on drop (also when the test panics).
pub struct Peer {
    child: Child,
    pub addr: SocketAddr,
    name: &'static str,
    log: PathBuf,
    // Held so the configuration, pid and temp paths outlive the process.
    dir: tempfile::TempDir,
}

impl Peer {
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn config_text(&self) -> String {
        let file = if self.name == "nginx" {
            "nginx.conf"
        } else {
            "haproxy.cfg"
        };
        std::fs::read_to_string(self.dir.path().join(file)).unwrap_or_default()
    }

    /// The file `name` the peer writes in its directory (an access log), empty if none yet.
    pub fn file_text(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    /// Log and configuration, for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "--- {} on {} config:\n{}--- {} log:\n{}",
            self.name,
            self.addr,
            self.config_text(),
            self.name,
            self.log_text()
        )
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Finds a peer binary. A missing one fails the test: passing without the peer would claim an
/// interoperability that was never checked.
pub fn require(bin: &str, package: &str) -> PathBuf {
    // /usr/sbin is often missing from a non-root PATH, and that is where Debian puts both.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from));
    for d in dirs {
        let p = d.join(bin);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "`{bin}` not found in PATH or /usr/sbin: install it (`apt-get install -y {package}`); \
         .ci/run installs it on CI. These tests fail rather than skip without it."
    );
}

/// True when [::1] can be bound here (containers without IPv6 cannot).
pub fn ipv6_loopback() -> bool {
    TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_ok()
}

pub const V4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
pub const V6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

/// A free port on `ip` for the peer to bind (`crate::ports`: nothing but another pick takes
/// it; `spawn` still retries with a new port when the peer fails to start).
fn free_addr(ip: IpAddr) -> SocketAddr {
    SocketAddr::new(ip, crate::ports::tcp_on(ip))
}

/// Starts the peer built by `make(addr, dir)` on a fresh port and waits until it accepts TCP
/// connections (polling, at most 10 s). A peer that exits first (port taken meanwhile) is
/// retried on another port, up to three times.
fn spawn(name: &'static str, ip: IpAddr, make: &dyn Fn(SocketAddr, &Path) -> Command) -> Peer {
    let mut failures = String::new();
    for _attempt in 0..3 {
        let dir = tempfile::tempdir().expect("tempdir");
        let addr = free_addr(ip);
        let log = dir.path().join(format!("{name}.log"));
        let mut cmd = make(addr, dir.path());
        let out = std::fs::File::create(&log).expect("log file");
        let child = cmd
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup log"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let mut peer = Peer {
            child,
            addr,
            name,
            log,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let started = loop {
            if let Some(st) = peer.child.try_wait().expect("try_wait") {
                let _ = write!(
                    failures,
                    "{name} exited ({st}) on {addr}:\n{}",
                    peer.describe()
                );
                break false;
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                // The connect may have reached whoever took the port; our peer then dies on
                // bind, which the next check sees.
                if peer.child.try_wait().expect("try_wait").is_none() {
                    break true;
                }
                continue;
            }
            assert!(
                Instant::now() < deadline,
                "{name} not accepting on {addr} after 10 s:\n{}",
                peer.describe()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        if started {
            return peer;
        }
    }
    panic!("{name} failed to start three times:\n{failures}");
}

fn haproxy(addr: SocketAddr, dir: &Path, body: &str) -> Command {
    let cfg = dir.join("haproxy.cfg");
    std::fs::write(&cfg, body.replace("@ADDR@", &addr.to_string())).expect("write haproxy.cfg");
    let mut c = Command::new(require("haproxy", "haproxy"));
    // -db: stay in the foreground, so the child is HAProxy itself and kill reaches it.
    c.arg("-db").arg("-f").arg(&cfg);
    c
}

// One thread is plenty for a test and leaves the shared cores to the builds.
const HAPROXY_GLOBAL: &str = "global\n    nbthread 1\n";

/// The configuration of an echoing HAProxy bound to `bind` with `accept-proxy`.
fn echo_config(bind: &str) -> String {
    format!(
        "{HAPROXY_GLOBAL}\
defaults
    mode http
    timeout connect 5s
    timeout client 20s
    timeout server 20s
frontend echo
    bind {bind} accept-proxy
    http-request return status 200 content-type text/plain lf-string \"{HAPROXY_ECHO}\"
"
    )
}

/// HAProxy as a backend: `accept-proxy` (v1 and v2 auto-detected), answering every HTTP
/// request with what it learnt from the PROXY header, one `key=value` per word.
pub fn haproxy_echo(ip: IpAddr) -> Peer {
    let body = echo_config("@ADDR@");
    spawn("haproxy", ip, &|addr, dir| haproxy(addr, dir, &body))
}

/// HAProxy as a backend on a Unix socket (`bind unix@…` with `accept-proxy`), answering as
/// [`haproxy_echo`] does. Returns the peer and its socket's path; waits (at most 10 s) until the
/// socket accepts connections.
pub fn haproxy_echo_unix() -> (Peer, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("echo.sock");
    let body = echo_config(&format!("unix@{}", socket.display()));
    let log = dir.path().join("haproxy.log");
    let out = std::fs::File::create(&log).expect("log file");
    let child = haproxy(SocketAddr::from(([0, 0, 0, 0], 0)), dir.path(), &body)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup log"))
        .stderr(out)
        .spawn()
        .expect("spawn haproxy");
    let mut peer = Peer {
        child,
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        name: "haproxy",
        log,
        dir,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if let Some(st) = peer.child.try_wait().expect("try_wait") {
            panic!("haproxy exited ({st}):\n{}", peer.describe());
        }
        assert!(
            Instant::now() < deadline,
            "haproxy not accepting on {} after 10 s:\n{}",
            socket.display(),
            peer.describe()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (peer, socket)
}

#[derive(Clone, Copy, Debug)]
pub enum SendProxy {
    V1,
    V2,
}

/// HAProxy in front of `target` in TCP mode, prepending a PROXY header (`send-proxy` or
/// `send-proxy-v2`) to each connection it forwards, as an L4 load balancer would.
pub fn haproxy_front(ip: IpAddr, target: SocketAddr, send: SendProxy) -> Peer {
    let opt = match send {
        SendProxy::V1 => "send-proxy",
        SendProxy::V2 => "send-proxy-v2",
    };
    let body = format!(
        "{HAPROXY_GLOBAL}\
defaults
    mode tcp
    timeout connect 5s
    timeout client 20s
    timeout server 20s
frontend front
    bind @ADDR@
    default_backend target
backend target
    server s1 {target} {opt}
"
    );
    spawn("haproxy", ip, &|addr, dir| haproxy(addr, dir, &body))
}

/// HAProxy as the fleet's balancer: `mode tcp`, round-robin over `targets`, no health checks; a
/// connect refused (a host down) is retried on the next target (`option redispatch 1`).
pub fn haproxy_balancer(ip: IpAddr, targets: &[SocketAddr]) -> Peer {
    let mut servers = String::new();
    for (i, t) in targets.iter().enumerate() {
        let _ = writeln!(servers, "    server s{i} {t}");
    }
    let body = format!(
        "{HAPROXY_GLOBAL}\
defaults
    mode tcp
    timeout connect 2s
    timeout client 20s
    timeout server 20s
    retries 3
    option redispatch 1
frontend front
    bind @ADDR@
    default_backend fleet
backend fleet
    balance roundrobin
{servers}"
    );
    spawn("haproxy", ip, &|addr, dir| haproxy(addr, dir, &body))
}

/// nginx as a backend: `listen ... proxy_protocol`, answering with the PROXY header's addresses.
pub fn nginx_echo(ip: IpAddr) -> Peer {
    let bin = require("nginx", "nginx-light");
    spawn("nginx", ip, &|addr, dir| {
        let http = format!(
            "    access_log off;
    server {{
        listen {addr} proxy_protocol;
        default_type text/plain;
        return 200 \"{NGINX_ECHO}\";
    }}
"
        );
        nginx(&bin, dir, &http)
    })
}

/// nginx as a TLS backend (`listen … ssl proxy_protocol`: the PROXY header, then TLS, as HAProxy
/// and shuck send them) with certificate bundle `cert`, requiring a client certificate from
/// `client_ca`. It answers with what it saw (`reused=` its session reuse, `verify=` and `dn=` the
/// client certificate, `addr=` the PROXY header's client) and logs every request, `/healthz`
/// too, the same way in `access.log` (`Peer::file_text`).
pub fn nginx_tls_backend(ip: IpAddr, cert: &Path, client_ca: &Path) -> Peer {
    let bin = require("nginx", "nginx-light");
    spawn("nginx", ip, &|addr, dir| {
        let (d, cert, ca) = (dir.display(), cert.display(), client_ca.display());
        let said = "uri=$request_uri reused=$ssl_session_reused verify=$ssl_client_verify \
                    dn=$ssl_client_s_dn addr=$proxy_protocol_addr";
        let http = format!(
            "    log_format said \"{said}\";
    access_log {d}/access.log said;
    ssl_session_cache shared:backend:1m;
    server {{
        listen {addr} ssl proxy_protocol;
        ssl_certificate {cert};
        ssl_certificate_key {cert};
        ssl_client_certificate {ca};
        ssl_verify_client on;
        default_type text/plain;
        return 200 \"{said}\\n\";
    }}
"
        );
        nginx(&bin, dir, &http)
    })
}

/// nginx (`bin`) in the foreground as a single process, with `http` as its http block and every
/// path it writes inside `dir`.
fn nginx(bin: &Path, dir: &Path, http: &str) -> Command {
    let d = dir.display();
    let conf = format!(
        "daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/nginx.log info;
events {{ worker_connections 64; }}
http {{
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
{http}}}
"
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).expect("write nginx.conf");
    let mut c = Command::new(bin);
    // -p and -e keep nginx off /usr/share/nginx and /var/log/nginx even before it has read the
    // configuration.
    c.arg("-p")
        .arg(dir)
        .arg("-e")
        .arg(dir.join("nginx.log"))
        .arg("-c")
        .arg(&path);
    c
}

/// The `key=value` words of an echo body. Values may be empty (HAProxy prints an absent TLV
/// as nothing).
pub fn echo_fields(body: &str) -> HashMap<String, String> {
    body.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The two ends of a TCP connection as curl itself saw them (`-w`), independently of shuck.
#[derive(Debug)]
pub struct CurlEnds {
    pub local: SocketAddr,
    pub remote: SocketAddr,
}

/// The `-w` argument that makes curl print `CurlEnds` on the last line of its output.
pub const CURL_ENDS: &str = "\n%{local_ip} %{local_port} %{remote_ip} %{remote_port}";

/// Splits curl's output made with `-w CURL_ENDS` into the body and the connection's ends.
pub fn split_curl(out: &str) -> (String, CurlEnds) {
    let (body, last) = out
        .rsplit_once('\n')
        .unwrap_or_else(|| panic!("no -w line in curl output {out:?}"));
    let w: Vec<&str> = last.split_whitespace().collect();
    assert_eq!(w.len(), 4, "curl -w line {last:?}");
    let sa = |ip: &str, port: &str| {
        SocketAddr::new(
            ip.parse().unwrap_or_else(|_| panic!("curl ip {ip:?}")),
            port.parse()
                .unwrap_or_else(|_| panic!("curl port {port:?}")),
        )
    };
    (
        body.to_string(),
        CurlEnds {
            local: sa(w[0], w[1]),
            remote: sa(w[2], w[3]),
        },
    )
}
