//! Zero-downtime binary upgrade (nginx's `kill -USR2`): the listening sockets are never closed.
//! The running process starts the binary at its own path with every listening socket inherited
//! (descriptors 3, 4, … with `LISTEN_FDS`, and which frontend and `listen` entry each belongs to
//! in `SHUCK_UPGRADE_SOCKETS`); the new process takes them over instead of binding, starts its
//! workers on them and, once listening, says so on the old process's datagram socket
//! (`SHUCK_UPGRADE_READY`). Only then does the old process stop accepting and drain. A connection
//! that arrives meanwhile waits in the kernel's queue of a socket both processes hold, so one of
//! them accepts it: none is refused.

use std::ffi::OsString;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use command_fds::{CommandFdExt, FdMapping};

/// Which frontend and `listen` entry each inherited descriptor belongs to, in descriptor order:
/// `<frontend name in hex>:<listen index>`, comma-separated.
const SOCKETS_ENV: &str = "SHUCK_UPGRADE_SOCKETS";
/// Set when the last inherited descriptor is the admin socket (`admin_socket`), to the path it
/// is named by (the name it was bound under was a temporary one), handed over whole: the new process serves the same socket under the same name, so a failed upgrade
/// leaves the old one's name in place and no new process has to give it its group.
const ADMIN_ENV: &str = "SHUCK_UPGRADE_ADMIN";
/// The old process's datagram socket, where the new one says it is ready.
const READY_ENV: &str = "SHUCK_UPGRADE_READY";
/// The old process's ID (this process may have lost it as its parent by the time it looks).
const FROM_ENV: &str = "SHUCK_UPGRADE_FROM";
/// The first inherited descriptor (after standard input, output and error).
const FIRST_FD: i32 = 3;

/// A listening socket and the `listen` entry of the frontend it serves.
#[derive(Debug)]
pub struct Socket {
    pub frontend: String,
    pub index: usize,
    pub listener: TcpListener,
}

/// What a process started by an upgrade inherited; empty otherwise.
#[derive(Debug, Default)]
pub struct Inherited {
    sockets: Vec<Socket>,
    /// The old process's admin socket, and the path that names it.
    admin: Option<(UnixListener, PathBuf)>,
    ready: Option<PathBuf>,
    pid_file: Option<PathBuf>,
    /// The process that started this one (the old one).
    parent: u32,
    /// `--takeover`: addresses another process listens on are shared with it.
    takeover: bool,
}

impl Inherited {
    /// The sockets this process was handed by its predecessor, if it was started by an upgrade.
    pub fn from_env() -> io::Result<Inherited> {
        let Some(list) = std::env::var_os(SOCKETS_ENV) else {
            return Ok(Inherited::default());
        };
        let list = list.to_string_lossy().into_owned();
        let mut fds = listenfd::ListenFd::from_env();
        let mut sockets = Vec::new();
        for (i, entry) in list.split(',').filter(|e| !e.is_empty()).enumerate() {
            let bad = || io::Error::other(format!("{SOCKETS_ENV}: bad entry {entry:?}"));
            let (name, index) = entry.split_once(':').ok_or_else(bad)?;
            let frontend = unhex(name).ok_or_else(bad)?;
            let index = index.parse().map_err(|_| bad())?;
            let listener = fds
                .take_tcp_listener(i)?
                .ok_or_else(|| io::Error::other(format!("inherited descriptor {i} is missing")))?;
            listener.set_nonblocking(true)?;
            sockets.push(Socket {
                frontend,
                index,
                listener,
            });
        }
        let admin = match std::env::var_os(ADMIN_ENV) {
            Some(path) => {
                let l = fds.take_unix_listener(sockets.len())?.ok_or_else(|| {
                    io::Error::other("the inherited admin socket's descriptor is missing")
                })?;
                Some((l, PathBuf::from(path)))
            }
            None => None,
        };
        Ok(Inherited {
            sockets,
            admin,
            ready: std::env::var_os(READY_ENV).map(PathBuf::from),
            pid_file: None,
            parent: std::env::var(FROM_ENV)
                .ok()
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(std::os::unix::process::parent_id),
            takeover: false,
        })
    }

    /// `--takeover`: the operator says another process (an old shuck being replaced) may
    /// still listen on these addresses, and this one is to share them until it stops.
    pub fn take_over_addresses(&mut self) {
        self.takeover = true;
    }

    /// Whether an address another process listens on may be shared with it: with
    /// `--takeover`, and in an upgrade (whose old process holds every address).
    pub(crate) fn may_share(&self) -> bool {
        self.takeover || self.is_upgrade()
    }

    /// Whether this process takes over from another.
    pub fn is_upgrade(&self) -> bool {
        self.ready.is_some()
    }

    /// The inherited sockets that serve `want` for `frontend`'s `index`-th listen entry (one per
    /// old worker): bound to exactly that address, whichever frontend had them (a renamed or
    /// reordered configuration keeps them); with port 0, those of the same frontend and entry on
    /// the same IP (the port the old process was given). The others stay for other entries.
    pub fn take(&mut self, frontend: &str, index: usize, want: SocketAddr) -> Vec<TcpListener> {
        let fits = |s: &Socket| {
            let Ok(actual) = s.listener.local_addr() else {
                return false;
            };
            if want.port() == 0 {
                s.frontend == frontend && s.index == index && actual.ip() == want.ip()
            } else {
                actual == want
            }
        };
        let (mine, rest): (Vec<Socket>, Vec<Socket>) = std::mem::take(&mut self.sockets)
            .into_iter()
            .partition(fits);
        self.sockets = rest;
        mine.into_iter().map(|s| s.listener).collect()
    }

    /// The old process's admin socket and the path that names it, if it handed one over.
    pub fn take_admin(&mut self) -> Option<(UnixListener, PathBuf)> {
        self.admin.take()
    }

    /// Sockets nobody took (their frontend or address is gone): closing them drops what waits in
    /// their queues, so say how many.
    pub fn leftover(&self) -> usize {
        self.sockets.len()
    }

    /// Closes the sockets nobody took: a connection to an address no longer configured is then
    /// refused instead of waiting in a queue nobody accepts from.
    pub fn close_leftovers(&mut self) {
        self.sockets.clear();
    }

    /// Whether the old process has ended. Its socket closes as it exits, a moment before this
    /// process gets a new parent: a refused word is checked for a short while (200 ms) before it
    /// is taken to mean the old process still runs and no longer waits.
    fn predecessor_gone(&self) -> bool {
        let ended = || {
            std::os::unix::process::parent_id() != self.parent
                || std::fs::read_to_string(format!("/proc/{}/stat", self.parent)).map_or(
                    true,
                    |stat| {
                        stat.rsplit(')')
                            .next()
                            .and_then(|rest| rest.split_whitespace().next())
                            .is_some_and(|state| matches!(state, "Z" | "X"))
                    },
                )
        };
        for _ in 0..20 {
            if ended() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// After [`Inherited::say_ready`]: says `ALIVE` to the old process every [`HEARTBEAT`]
    /// from the runtime this runs on, until the old process stops listening (it confirmed the
    /// upgrade, or it is gone). Through `upgrade_confirm` the old process takes silence for a hang.
    pub fn keep_saying_alive(
        &self,
    ) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        let path = self.ready.clone()?;
        Some(async move {
            let Ok(socket) = tokio::net::UnixDatagram::unbound() else {
                return;
            };
            let word = format!("ALIVE={}", std::process::id());
            let mut tick = tokio::time::interval(HEARTBEAT);
            loop {
                tick.tick().await;
                match socket.try_send_to(word.as_bytes(), &path) {
                    // The old process stopped listening: it confirmed the upgrade, or is gone.
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound
                        ) =>
                    {
                        return;
                    }
                    // Its queue is full (it has not read for a while): this beat is skipped, the
                    // next is tried; never given up while it may still be watching.
                    _ => {}
                }
            }
        })
    }

    /// The pid file this process adopts: the old process names this one in it once told this
    /// one is ready, or, if the old one is gone, this one does.
    pub fn set_pid_file(&mut self, path: Option<PathBuf>) {
        self.pid_file = path;
    }

    /// Tells the old process this one is listening; true when this one is now the service.
    /// If the old one cannot be told: when it is gone (this process has a new parent), this one
    /// is the service and names itself in the pid file; when it still runs, it cancelled the
    /// upgrade (it has told this one to stop) and this one does not take over.
    pub fn say_ready(&self) -> bool {
        let Some(path) = &self.ready else {
            return false;
        };
        let sent = std::os::unix::net::UnixDatagram::unbound().and_then(|s| {
            let word = format!("READY={}", std::process::id());
            s.send_to(&[word.as_bytes(), HEARTBEAT_MARK].concat(), path)
        });
        let Err(e) = sent else { return true };
        if !self.predecessor_gone() {
            tracing::warn!(error = %e, "the old process no longer waits for this one (it cancelled the upgrade); not taking over");
            return false;
        }
        match &self.pid_file {
            None => {
                tracing::warn!(error = %e, "the old process is gone; this one serves on");
            }
            Some(pid_file) => match crate::sys::pid_file::name_in(pid_file, std::process::id()) {
                Ok(()) => {
                    tracing::warn!(error = %e, pid_file = %pid_file.display(), "the old process is gone; this one serves on and the pid file names it");
                }
                Err(w) => {
                    tracing::error!(error = %e, pid_file = %w, "the old process is gone, and the pid file cannot be written; this one serves on");
                }
            },
        }
        true
    }
}

/// The running process's listening sockets (duplicates), to hand to a successor.
#[derive(Debug, Default)]
pub struct Handover {
    sockets: Vec<Socket>,
    admin: Option<(UnixListener, PathBuf)>,
}

impl Handover {
    pub fn add(&mut self, frontend: &str, index: usize, listener: &TcpListener) -> io::Result<()> {
        self.sockets.push(Socket {
            frontend: frontend.to_string(),
            index,
            listener: listener.try_clone()?,
        });
        Ok(())
    }

    /// Hands the admin socket over too, named by `path`.
    pub fn add_admin(&mut self, listener: &UnixListener, path: &Path) -> io::Result<()> {
        self.admin = Some((listener.try_clone()?, path.to_path_buf()));
        Ok(())
    }

    /// Starts `exe` with `args` and every socket inherited; the returned successor says when it
    /// is ready.
    pub fn spawn(&self, exe: &Path, args: &[OsString]) -> io::Result<Successor> {
        let dir = tempfile::Builder::new()
            .prefix("shuck-upgrade-")
            .tempdir()?;
        let path = dir.path().join("ready.sock");
        let socket = tokio::net::UnixDatagram::bind(&path)?;
        let mut mappings = Vec::with_capacity(self.sockets.len());
        let mut names = Vec::with_capacity(self.sockets.len());
        for (i, s) in self.sockets.iter().enumerate() {
            let fd: OwnedFd = s.listener.try_clone()?.into();
            let child_fd = FIRST_FD + i32::try_from(i).map_err(io::Error::other)?;
            mappings.push(FdMapping {
                parent_fd: fd,
                child_fd,
            });
            names.push(format!("{}:{}", hex(&s.frontend), s.index));
        }
        let mut cmd = Command::new(exe);
        cmd.env_remove(ADMIN_ENV);
        if let Some((admin, named)) = &self.admin {
            let child_fd = FIRST_FD + i32::try_from(mappings.len()).map_err(io::Error::other)?;
            mappings.push(FdMapping {
                parent_fd: admin.try_clone()?.into(),
                child_fd,
            });
            cmd.env(ADMIN_ENV, named);
        }
        let inherited = mappings.len();
        cmd.args(args)
            .env(SOCKETS_ENV, names.join(","))
            .env(READY_ENV, &path)
            .env(FROM_ENV, std::process::id().to_string())
            .env("LISTEN_FDS", inherited.to_string())
            .env_remove("LISTEN_PID")
            .env_remove("LISTEN_FDNAMES")
            .fd_mappings(mappings)
            .map_err(io::Error::other)?;
        let child = cmd.spawn()?;
        Ok(Successor {
            heartbeat_from: None,
            child,
            socket,
            _dir: dir,
        })
    }
}

/// How often a new process says it is alive during the confirmation window.
pub const HEARTBEAT: Duration = Duration::from_millis(250);
/// Ends the `READY=<pid>` of a process that says `ALIVE` after it (an older process reads the
/// word by its start and ignores this).
const HEARTBEAT_MARK: &[u8] = b";heartbeat";
/// Silence after which the old process takes a new one that had said it was alive for hung.
const SILENCE: Duration = Duration::from_secs(2);

/// How a new process fared through the confirmation window.
#[derive(Debug)]
pub enum Watched {
    /// It exited, with this status.
    Exited(std::process::ExitStatus),
    /// It had said it was alive, then went silent for longer than [`SILENCE`] (stopped, or its
    /// main loop stuck).
    Hung,
    /// It lived and answered throughout.
    Lived,
}

/// A new process started by an upgrade, from its start until this process has handed over to
/// it (or stopped it).
#[derive(Debug)]
pub struct Successor {
    child: Child,
    socket: tokio::net::UnixDatagram,
    _dir: tempfile::TempDir,
    /// When it said it was ready, if it also said it would keep saying it is alive: its
    /// readiness is its first beat, so a process that stops before its next one is a hang.
    heartbeat_from: Option<tokio::time::Instant>,
}

/// Why a new process did not become the service.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    #[error("the new process ({pid}) exited first: {status}")]
    Exited {
        pid: u32,
        status: std::process::ExitStatus,
    },
    #[error("the new process ({pid}) was not ready within {within:?}")]
    TimedOut { pid: u32, within: Duration },
}

impl Successor {
    /// Its process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the new process is listening, it exits, or `within` passes.
    pub async fn ready(&mut self, within: Duration) -> Result<(), NotReady> {
        let pid = self.pid();
        let mut buf = [0u8; 64];
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(NotReady::Exited { pid, status });
            }
            let tick = tokio::time::sleep(Duration::from_millis(200));
            tokio::select! {
                got = self.socket.recv(&mut buf) => {
                    if let Some(n) = got.ok().filter(|n| buf[..*n].starts_with(b"READY=")) {
                        if buf[..n].ends_with(HEARTBEAT_MARK) {
                            self.heartbeat_from = Some(tokio::time::Instant::now());
                        }
                        return Ok(());
                    }
                }
                () = tick => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(NotReady::TimedOut { pid, within });
            }
        }
    }

    /// Watches it through `within` (the upgrade's confirmation window): it exits, goes silent
    /// after it had said it was alive (a new process of a version that never says so is judged
    /// by its exit alone), or lives and answers throughout.
    pub async fn watch_within(&mut self, within: Duration) -> Watched {
        let deadline = tokio::time::Instant::now() + within;
        let mut last_alive = self.heartbeat_from;
        let mut buf = [0u8; 64];
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Watched::Exited(status);
            }
            while let Ok(n) = self.socket.try_recv(&mut buf) {
                if buf[..n].starts_with(b"ALIVE=") {
                    last_alive = Some(tokio::time::Instant::now());
                }
            }
            let now = tokio::time::Instant::now();
            if last_alive.is_some_and(|t| now.duration_since(t) > SILENCE) {
                return Watched::Hung;
            }
            if now >= deadline {
                return Watched::Lived;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Kills it (SIGKILL: a stopped or stuck process handles no SIGTERM) and reaps it.
    pub async fn kill(mut self) {
        let _ = self.child.kill();
        let _ = tokio::task::spawn_blocking(move || self.child.wait()).await;
    }

    /// Its exit status if it exits within `within`.
    pub async fn exits_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops it: SIGTERM (if it serves after all, it drains), then SIGKILL once `grace` has
    /// passed; reaped either way, so no `<defunct>` stays behind.
    pub async fn stop(mut self, grace: Duration) {
        let pid = self.pid();
        signal(pid, nix::sys::signal::Signal::SIGTERM);
        if self.exits_within(grace).await.is_none() {
            tracing::warn!(pid, "the new process did not stop on SIGTERM; killed");
            let _ = self.child.kill();
            let _ = tokio::task::spawn_blocking(move || self.child.wait()).await;
        }
    }

    /// Reaps it whenever it exits, while this process lives (it is this process's child). The
    /// handover socket goes first: the new process stops saying it is alive.
    pub async fn reap(self) {
        let Successor {
            mut child, socket, ..
        } = self;
        drop(socket);
        while !matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// Sends `sig` to process `pid`; never to 0 or below (kill(2) would take those for a process
/// group, this one's own among them).
pub fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    if let Ok(p @ 1..) = i32::try_from(pid) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), sig);
    }
}

fn hex(s: &str) -> String {
    s.bytes().fold(String::new(), |mut out, b| {
        use std::fmt::Write as _;
        let _ = write!(out, "{b:02x}");
        out
    })
}

fn unhex(s: &str) -> Option<String> {
    if s.len() % 2 != 0 {
        return None;
    }
    let bytes = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontend_names_survive_the_environment() {
        for name in ["web", "a,b:c", "ünïcode", ""] {
            assert_eq!(unhex(&hex(name)).as_deref(), Some(name));
        }
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("abc"), None);
    }
}
