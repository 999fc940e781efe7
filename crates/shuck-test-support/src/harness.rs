//! In-process harness: the engine started from the library, as the `shuck` binary does it
//! (`RawConfig::parse` → `validate` → `Server::prepare` → `Server::run` on its own thread), with
//! listeners on port 0 whose addresses come from the ready file. No process, no signals: the
//! handle's `stop()` is the first SIGTERM (drain), dropping it is the second (stop at once).
//!
//! Only the engine's lasting public API is used: `config::{RawConfig, Origin}` and
//! `server::Server` (`prepare`, `run`, `metrics_addr`, `reloader`).

use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use shuck_proxy::config::{Config, Origin, RawConfig};
use shuck_proxy::server::{Reloader, Server};
use tokio::sync::oneshot;

/// `toml` parsed and validated as a command-line configuration would be; panics with the
/// engine's message if it is refused.
pub fn config(toml: &str) -> Config {
    RawConfig::parse(toml, &Origin::CommandLine)
        .and_then(|raw| raw.validate(Origin::CommandLine, None))
        .unwrap_or_else(|e| panic!("configuration refused: {e}\n{toml}"))
}

fn prepare(toml: &str) -> Server {
    Server::prepare(config(toml)).unwrap_or_else(|e| panic!("prepare failed: {e}"))
}

/// A server running on a thread of this process; stopped (at once) when dropped.
pub struct Running {
    /// The listeners, in configuration order.
    pub addrs: Vec<SocketAddr>,
    /// The metrics endpoint, when `metrics_listen` is set.
    pub metrics: Option<SocketAddr>,
    shutdown: Option<oneshot::Sender<()>>,
    force: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<(), String>>>,
    _dir: tempfile::TempDir,
}

impl Running {
    /// Parses and validates `toml` as a command-line configuration would be, binds, and serves;
    /// returns once the ready file is written (every worker listening). Panics with the engine's
    /// message if the configuration is refused or the server stops early.
    pub fn start(toml: &str) -> Running {
        Running::serve(prepare(toml))
    }

    /// Like `start`, with the handle a SIGHUP would use to apply a new configuration.
    pub fn start_reloadable(toml: &str) -> (Running, Reloader) {
        let server = prepare(toml);
        let reloader = server.reloader();
        (Running::serve(server), reloader)
    }

    fn serve(server: Server) -> Running {
        let metrics = server.metrics_addr();
        let dir = tempfile::tempdir().expect("tempdir");
        let ready = dir.path().join("ready");
        let (shutdown, shutdown_rx) = oneshot::channel::<()>();
        let (force, force_rx) = oneshot::channel::<()>();
        let ready_file = ready.clone();
        let thread = std::thread::Builder::new()
            .name("shuck-server".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                // A dropped sender completes the future too: losing the handle stops the server.
                let result = server
                    .run(
                        &rt,
                        Some(&ready_file),
                        async move {
                            let _ = shutdown_rx.await;
                        },
                        async move {
                            let _ = force_rx.await;
                        },
                    )
                    .map_err(|e| e.to_string());
                // As the binary does: workers still draining after a forced stop are left behind.
                rt.shutdown_background();
                result
            })
            .expect("spawn the server thread");
        let mut running = Running {
            addrs: Vec::new(),
            metrics,
            shutdown: Some(shutdown),
            force: Some(force),
            thread: Some(thread),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read_to_string(&ready) {
                let mut addrs: Vec<SocketAddr> = text
                    .lines()
                    .map(|l| l.parse().expect("ready file address"))
                    .collect();
                // The metrics endpoint, when there is one, is the last line.
                if metrics.is_some() {
                    assert_eq!(addrs.pop(), metrics, "ready file: {text}");
                }
                running.addrs = addrs;
                return running;
            }
            if running.thread.as_ref().is_some_and(JoinHandle::is_finished) {
                let outcome = running.join();
                panic!("server stopped before it was ready: {outcome:?}");
            }
            assert!(Instant::now() < deadline, "server not ready in 30 s");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    pub fn port(&self) -> u16 {
        self.addrs[0].port()
    }

    /// The server is still running (its `run` has not returned).
    pub fn assert_alive(&self) {
        assert!(
            self.thread.as_ref().is_some_and(|t| !t.is_finished()),
            "the server stopped"
        );
    }

    /// Stops accepting, waits for open connections to end (within the grace period, bounded here
    /// at 40 s) and returns what `run` returned.
    pub fn stop(mut self) -> Result<(), String> {
        drop(self.shutdown.take());
        let deadline = Instant::now() + Duration::from_secs(40);
        while !self.thread.as_ref().is_some_and(JoinHandle::is_finished) {
            assert!(
                Instant::now() < deadline,
                "the server did not stop within 40 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        self.join()
    }

    fn join(&mut self) -> Result<(), String> {
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err("the server thread panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        drop(self.shutdown.take());
        drop(self.force.take());
        let _ = self.join();
    }
}
