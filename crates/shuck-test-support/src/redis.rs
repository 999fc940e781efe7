//! Real `redis-server` processes for the tests: one alone, or a Redis Cluster of masters made
//! by `redis-cli --cluster create`. Each runs in a temporary directory (replication and cluster
//! state write files there), without persistence, on free loopback ports; killed on drop.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::peers::require;
use crate::process::run_bounded;

/// One redis-server.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    crate::ports::tcp()
}

impl RedisServer {
    /// A server with `extra` options, once it accepts connections.
    pub fn start(extra: &[&str]) -> RedisServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let child = Command::new(require("redis-server", "redis-server"))
            .current_dir(dir.path())
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        RedisServer {
            child,
            port,
            _dir: dir,
        }
    }

    /// `redis-cli -p PORT ARGS…`, its output.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }

    /// The server's process id (to stop and continue it: a store that does not answer).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// `redis-cli -h 127.0.0.1 -p PORT ARGS…`, its output.
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = run_bounded(
        Command::new(require("redis-cli", "redis-tools"))
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args),
        b"",
        10,
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits (bounded, 30 s) until `redis-cli -p port args` says `needle`.
pub fn wait_cli(port: u16, args: &[&str], needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = cli(port, args);
        if out.contains(needle) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{args:?} never said {needle:?}: {out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A Redis Cluster of `masters` masters and no replicas, its state ok.
pub fn cluster(masters: usize) -> Vec<RedisServer> {
    let nodes: Vec<RedisServer> = (0..masters)
        .map(|_| {
            // The cluster bus listens on port + 10000 unless told: a port of its own, free.
            let bus = free_port().to_string();
            RedisServer::start(&["--cluster-enabled", "yes", "--cluster-port", &bus])
        })
        .collect();
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let mut create = vec!["--cluster", "create"];
    create.extend(addrs.iter().map(String::as_str));
    create.extend(["--cluster-replicas", "0", "--cluster-yes"]);
    let made = nodes[0].cli(&create);
    assert!(made.contains("[OK]"), "{made}");
    for n in &nodes {
        wait_cli(n.port, &["cluster", "info"], "cluster_state:ok");
    }
    nodes
}
