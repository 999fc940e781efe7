//! The `shuck` binary: parses the command line and hands over to the engine.
#![forbid(unsafe_code)]

mod cli;
mod logging;
mod privileges;

// jemalloc returns what a flood of handshakes left behind (the `jemalloc` feature's note in
// Cargo.toml); its background thread purges freed pages while the workers are idle.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use shuck_proxy::bindings::Bindings;
use shuck_proxy::config::{self, Config, LogFormat, OneOrMany, Origin, RawConfig, RawFrontend};
use shuck_proxy::server::{CertificateUpdates, Reloader, Server};
use shuck_proxy::{notify, upgrade};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

use cli::{
    Cli, Command, ConfigArgs, LogFormatArg, ProxyProtocolArg, ServeArgs, TicketKeyArgs,
    TicketKeyFormatArg,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(&args),
        Command::Check(args) => check(&args),
        Command::TicketKey(args) => ticket_key(&args),
        #[cfg(feature = "bench")]
        Command::Bench(args) => shuck_bench::cli::run_bench(&args).map_err(|e| e.to_string()),
        #[cfg(feature = "bench")]
        Command::Speed(args) => shuck_bench::cli::run_speed(&args).map_err(|e| e.to_string()),
        Command::Completions { shell } => {
            // Into a buffer: clap_complete panics on a write error (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "shuck", &mut script);
            std::io::Write::write_all(&mut std::io::stdout(), &script)
                .map_err(|e| format!("cannot write the completions: {e}"))
        }
        Command::Man => clap_mangen::Man::new(Cli::command())
            .render(&mut std::io::stdout())
            .map_err(|e| format!("cannot write the manual page: {e}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shuck: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Builds the validated configuration from the file or from the one-frontend flags, then applies
/// the global overrides (workers, pinning, limits).
fn load_config(args: &ConfigArgs, log: Option<&ServeArgs>) -> Result<Config, String> {
    let one_liner = !args.listen.is_empty()
        || !args.backend.is_empty()
        || !args.cert.is_empty()
        || args.self_signed
        || !args.alpn.is_empty()
        || args.proxy_protocol.is_some()
        || args.accept_proxy
        || !args.ticket_keys.is_empty()
        || args.session_store.is_some();
    let mut raw = if let Some(path) = &args.config {
        if one_liner {
            return Err(
                    "--config cannot be combined with --listen/--backend/--cert/--self-signed/--alpn/--proxy-protocol/--accept-proxy(-from)/--ticket-keys/--session-store: put them in the file".into(),
                );
        }
        RawConfig::from_file(path).map_err(|e| e.to_string())?
    } else {
        if args.cert.is_empty() && !args.self_signed {
            return Err("nothing to serve: give --config FILE, --cert PEM or --self-signed (see shuck serve --help)".into());
        }
        let fe = RawFrontend {
            name: Some("default".into()),
            listen: (!args.listen.is_empty()).then(|| OneOrMany::Many(args.listen.clone())),
            backend: (!args.backend.is_empty()).then(|| OneOrMany::Many(args.backend.clone())),
            certificates: (!args.cert.is_empty()).then(|| OneOrMany::Many(args.cert.clone())),
            self_signed: Some(args.self_signed),
            alpn: (!args.alpn.is_empty()).then(|| args.alpn.clone()),
            proxy_protocol: args.proxy_protocol.map(|p| match p {
                ProxyProtocolArg::None => config::ProxyProtocol::None,
                ProxyProtocolArg::V1 => config::ProxyProtocol::V1,
                ProxyProtocolArg::V2 => config::ProxyProtocol::V2,
            }),
            accept_proxy: args.accept_proxy.then_some(true),
            accept_proxy_from: (!args.accept_proxy_from.is_empty())
                .then(|| args.accept_proxy_from.clone()),
            session_ticket_keys: (!args.ticket_keys.is_empty())
                .then(|| OneOrMany::Many(args.ticket_keys.clone())),
            session_store: args.session_store.clone(),
            session_store_key: args.session_store_key.clone(),
            ..RawFrontend::default()
        };
        RawConfig {
            frontends: vec![fe],
            ..RawConfig::default()
        }
    };
    if let Some(w) = args.workers {
        raw.workers = Some(w);
    }
    if args.pin_cpus {
        raw.pin_cpus = Some(true);
    }
    if let Some(m) = &args.metrics_listen {
        raw.metrics_listen = Some(m.clone());
    }
    if let Some(m) = args.max_connections {
        raw.max_connections = Some(m);
    }
    if let Some(serve) = log {
        if let Some(f) = serve.log_format {
            raw.log_format = Some(match f {
                LogFormatArg::Compact => LogFormat::Compact,
                LogFormatArg::Json => LogFormat::Json,
            });
        }
        if let Some(l) = &serve.log_level {
            raw.log_level = Some(l.clone());
        }
        if serve.log_connections {
            raw.log_connections = Some(true);
        }
        if let Some(u) = &serve.user {
            raw.user = Some(u.clone());
            raw.group.clone_from(&serve.group);
        }
        if serve.allow_root {
            raw.allow_root = Some(true);
        }
    }
    // Relative certificate paths in a file are relative to the file, as nginx and HAProxy do.
    let (origin, base) = match &args.config {
        Some(p) => (
            Origin::File(p.clone()),
            p.parent().map(std::path::Path::to_path_buf),
        ),
        None => (Origin::CommandLine, None),
    };
    raw.validate(origin, base.as_deref())
        .map_err(|e| e.to_string())
}

fn serve(args: &ServeArgs) -> Result<(), String> {
    let config = load_config(&args.config, Some(args))?;
    let log_queue = logging::init(&config);
    shuck_proxy::logging::panics_as_lines();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the main runtime: {e}"))?;
    rt.spawn(log_queue.report_drops());
    // Handlers first, before certificates are loaded and sockets bound: a SIGHUP (a certificate
    // deploy hook, say) arriving during start-up must not kill the process.
    let signals = {
        let _guard = rt.enter();
        Signals::install().map_err(|e| format!("cannot install signal handlers: {e}"))?
    };
    let mut inherited = upgrade::Inherited::from_env()
        .map_err(|e| format!("cannot take over the old process's sockets: {e}"))?;
    let run_as = privileges::RunAs::of(&config);
    let inherited_upgrade = inherited.is_upgrade();
    let mut server = Server::prepare_with(config, &mut inherited).map_err(|e| e.to_string())?;
    // After an upgrade the old process rewrites the pid file once this one is listening (so a
    // new process that fails never takes it); this one only removes it at exit, if still its.
    let pid_file = match &args.pid_file {
        Some(p) if inherited_upgrade => Some(PidFile(p.clone())),
        Some(p) => Some(PidFile::write(p, std::process::id())?),
        None => None,
    };
    // Ports bound, keys read, state directories made: now the workers may start unprivileged.
    run_as.apply()?;
    let (stops_tx, stops) = watch::channel(0u32);
    let updates = server.certificate_updates();
    let successor = Successor {
        pid_file: args.pid_file.clone(),
        metrics: server.metrics_handover(),
        bindings: server.bindings(),
        exe: std::env::current_exe().map_err(|e| format!("cannot find my own binary: {e}"))?,
        args: std::env::args_os().skip(1).collect(),
    };
    let mut reloader = server.reloader();
    if let Some(path) = &args.ready_file {
        reloader = reloader.with_ready_file(path.clone(), server.metrics_addr());
    }
    rt.spawn(signals.handle(args.clone(), reloader, updates, successor, stops_tx));
    let (mut first, mut second) = (stops.clone(), stops);
    let result = server
        .run(
            &rt,
            args.ready_file.as_deref(),
            async move {
                let _ = first.wait_for(|n| *n >= 1).await;
            },
            async move {
                // If the signal task is gone, no second signal can come: never force.
                if second.wait_for(|n| *n >= 2).await.is_err() {
                    std::future::pending::<()>().await;
                }
            },
        )
        .map_err(|e| e.to_string());
    // Do not wait for workers still draining after a forced stop: leaving main ends them.
    rt.shutdown_background();
    drop(pid_file);
    result
}

/// `--pid-file`: written once the sockets are bound, removed at exit unless another process (a
/// newer shuck) has written its own since.
struct PidFile(std::path::PathBuf);

impl PidFile {
    fn write(path: &std::path::Path, pid: u32) -> Result<PidFile, String> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, format!("{pid}\n"))
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| format!("cannot write pid file {}: {e}", path.display()))?;
        Ok(PidFile(path.to_path_buf()))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let ours = std::fs::read_to_string(&self.0)
            .is_ok_and(|s| s.trim() == std::process::id().to_string());
        if ours {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
    usr2: Signal,
}

/// What `kill -USR2` starts: the binary at the path this one was started from (a new version
/// installed there), with the same arguments and every listening socket.
struct Successor {
    /// Rewritten with the new process's ID once it listens.
    pid_file: Option<std::path::PathBuf>,
    /// The metrics endpoint, answered by the new process once it listens.
    metrics: shuck_proxy::server::MetricsHandover,
    /// The listening sockets as they are when the upgrade starts (a reload may change them).
    bindings: std::sync::Arc<std::sync::Mutex<Bindings>>,
    exe: std::path::PathBuf,
    args: Vec<std::ffi::OsString>,
}

impl Successor {
    /// How long the new process may take to listen before it is given up.
    const PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

    /// Starts the new process and waits until it listens; true when this one should now stop
    /// accepting and drain.
    async fn take_over(&self) -> bool {
        tracing::info!(binary = %self.exe.display(), "upgrade: starting the new binary with the listening sockets");
        let handover = self
            .bindings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .handover();
        let started = match handover.and_then(|h| h.spawn(&self.exe, &self.args)) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "upgrade failed: cannot start the new binary; still serving");
                return false;
            }
        };
        match started.ready(Self::PATIENCE).await {
            Ok(pid) => {
                tracing::info!(
                    pid,
                    "upgrade: the new process is listening; this one stops accepting and drains"
                );
                notify::handed_over();
                if let Some(path) = &self.pid_file {
                    if let Err(e) = PidFile::write(path, pid) {
                        tracing::warn!(error = %e, "upgrade: the pid file still names this process");
                    }
                }
                // After the pid file: whoever sees the old endpoint go finds the new process named.
                self.metrics.hand_over();
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "upgrade failed; still serving");
                false
            }
        }
    }
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }

    /// Counts SIGTERM/SIGINT into `stops` (the first drains, the second exits at once) and
    /// reloads certificates and TLS settings on SIGHUP.
    async fn handle(
        mut self,
        args: ServeArgs,
        reloader: Reloader,
        mut updates: Option<CertificateUpdates>,
        successor: Successor,
        stops: watch::Sender<u32>,
    ) {
        let mut reloader = Some(reloader);
        let mut upgraded = false;
        let mut successor = Some(successor);
        let mut upgrading: Option<tokio::task::JoinHandle<(Successor, bool)>> = None;
        let mut deferred_reload = false;
        loop {
            tokio::select! {
                _ = self.usr2.recv() => {
                    if upgraded {
                        tracing::warn!("SIGUSR2 ignored: this process has already handed over");
                    } else if upgrading.is_some() {
                        tracing::warn!("SIGUSR2 ignored: an upgrade is under way");
                    } else if let Some(s) = successor.take() {
                        // Off the loop: SIGTERM and SIGHUP are still handled while it waits.
                        upgrading = Some(tokio::spawn(async move {
                            let ok = s.take_over().await;
                            (s, ok)
                        }));
                    }
                }
                Some(done) = finished(&mut upgrading) => {
                    match done {
                        Ok((s, true)) => {
                            upgraded = true;
                            // Its copies of the listening sockets, now the new process's.
                            s.bindings
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .release();
                            // Drain, unless a stop is already under way.
                            stops.send_if_modified(|n| {
                                let start = *n == 0;
                                if start {
                                    *n = 1;
                                }
                                start
                            });
                        }
                        Ok((s, false)) => {
                            successor = Some(s);
                            if std::mem::take(&mut deferred_reload) {
                                tracing::info!("applying the reload deferred during the failed upgrade");
                                reloader = reload_off_runtime(&args, reloader).await;
                            }
                        }
                        Err(e) => tracing::error!(error = %e, "upgrade task lost; SIGUSR2 is ignored from now on"),
                    }
                }
                _ = self.term.recv() => { stops.send_modify(|n| *n += 1); }
                _ = self.int.recv() => { stops.send_modify(|n| *n += 1); }
                Some(frontend) = next_update(&mut updates) => {
                    let Some(mut r) = reloader.take() else { continue };
                    let task = tokio::task::spawn_blocking(move || {
                        match r.refresh(&frontend) {
                            Ok(()) => tracing::info!(frontend, "loaded a renewed certificate or OCSP staple"),
                            Err(e) => tracing::error!(frontend, error = %e, "renewed certificate or staple not loaded; still serving the previous ones"),
                        }
                        r
                    });
                    match task.await {
                        Ok(r) => reloader = Some(r),
                        Err(e) => tracing::error!(error = %e, "certificate refresh lost; further SIGHUPs are ignored"),
                    }
                }
                _ = self.hup.recv() => {
                    if upgraded {
                        tracing::warn!("SIGHUP ignored: this process has handed over to a new one and is draining");
                    } else if upgrading.is_some() {
                        // The new process reads the configuration itself; a reload here would
                        // change sockets it has already been handed.
                        tracing::warn!("SIGHUP deferred: an upgrade is under way (applied if it fails)");
                        deferred_reload = true;
                    } else {
                        reloader = reload_off_runtime(&args, reloader).await;
                    }
                }
            }
        }
    }
}

/// Reloads off the main runtime: reading files and resolving backend names may block, and
/// metrics must keep answering meanwhile. `None` in, `None` out: an earlier reload was lost.
async fn reload_off_runtime(args: &ServeArgs, reloader: Option<Reloader>) -> Option<Reloader> {
    let Some(mut r) = reloader else {
        tracing::warn!("SIGHUP ignored: an earlier reload was lost");
        return None;
    };
    let args = args.clone();
    notify::reloading();
    let task = tokio::task::spawn_blocking(move || {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            reload(&args, &mut r);
        }));
        notify::reloaded();
        if outcome.is_err() {
            tracing::error!("reload failed unexpectedly; still serving the previous configuration");
        }
        r
    });
    match task.await {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::error!(error = %e, "reload task lost; further SIGHUPs are ignored");
            None
        }
    }
}

fn reload(args: &ServeArgs, reloader: &mut Reloader) {
    let result = load_config(&args.config, Some(args)).and_then(|c| {
        let notes = reloader.reload(&c).map_err(|e| e.to_string())?;
        Ok((notes, c.log_level))
    });
    match result {
        Ok((notes, level)) => {
            for n in notes {
                tracing::warn!("{n}");
            }
            if logging::set_level(&level) {
                tracing::info!(log_level = %level, "log level changed");
            }
            tracing::info!("reloaded certificates and configuration");
        }
        Err(e) => {
            let error = one_line(&e);
            tracing::error!(
                error,
                "reload failed; still serving the previous configuration"
            );
        }
    }
}

/// The upgrade under way, once it is decided; pending forever when there is none.
async fn finished(
    upgrading: &mut Option<tokio::task::JoinHandle<(Successor, bool)>>,
) -> Option<Result<(Successor, bool), tokio::task::JoinError>> {
    let done = match upgrading {
        Some(task) => task.await,
        None => std::future::pending().await,
    };
    *upgrading = None;
    Some(done)
}

/// The next renewed certificate's frontend; pending forever without ACME.
async fn next_update(updates: &mut Option<CertificateUpdates>) -> Option<String> {
    match updates {
        Some(u) => u.next().await,
        None => std::future::pending().await,
    }
}

/// A message on one line, for logs: TOML's errors show the offending line and a caret under it,
/// on lines of their own.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn check(args: &ConfigArgs) -> Result<(), String> {
    let config = load_config(args, None)?;
    let report = shuck_proxy::check::report(&config).map_err(|e| e.to_string())?;
    print!("{}", report.summary);
    for w in &report.warnings {
        eprintln!("shuck: warning: {w}");
    }
    Ok(())
}

/// `shuck ticket-key`: appends a key to a HAProxy-format file or writes a new nginx-format one,
/// owner-readable only. Says what it did, never the key.
fn ticket_key(args: &TicketKeyArgs) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let format = match args.format {
        TicketKeyFormatArg::Haproxy => config::TicketKeyFormat::Haproxy,
        TicketKeyFormatArg::Nginx => config::TicketKeyFormat::Nginx,
    };
    let key = shuck_proxy::new_ticket_key(format, args.size)?;
    let mut open = std::fs::OpenOptions::new();
    open.mode(0o600);
    match format {
        config::TicketKeyFormat::Nginx => open.write(true).create_new(true),
        _ => open.append(true).create(true),
    };
    let path = args.file.display();
    // A file whose last line has no end would glue the new key to the old one.
    let glue = format == config::TicketKeyFormat::Haproxy
        && std::fs::read(&args.file).is_ok_and(|b| b.last().is_some_and(|&c| c != b'\n'));
    let mut f = open.open(&args.file).map_err(|e| format!("{path}: {e}"))?;
    if glue {
        f.write_all(b"\n").map_err(|e| format!("{path}: {e}"))?;
    }
    f.write_all(&key)
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("{path}: {e}"))?;
    match format {
        config::TicketKeyFormat::Nginx => println!("wrote a new {}-byte ticket key to {path}", args.size),
        _ => println!(
            "appended a {}-byte ticket key to {path}; once every host has it, reload them all: the key before it starts encrypting",
            args.size
        ),
    }
    Ok(())
}
