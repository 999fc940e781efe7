//! The `shuck` binary: parses the command line and hands over to the engine.
#![forbid(unsafe_code)]

mod admin;
mod bench_tool;
mod cli;
mod ctl;
mod ctl_cli;
mod hitch;
mod json_log;
mod log_targets;
mod logging;
mod privileges;
mod reloading;
mod signals;
mod upgrading;

// jemalloc returns what a flood of handshakes left behind (the `jemalloc` feature's note in
// Cargo.toml); its background thread purges freed pages while the workers are idle.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use shuck_proxy::config::{self, Config, LogFormat, OneOrMany, Origin, RawConfig, RawFrontend};
use shuck_proxy::server::Server;
use shuck_proxy::upgrade;
use tokio::sync::watch;

use cli::{
    Cli, Command, ConfigArgs, LogFormatArg, ProxyProtocolArg, RecordLayerArg, ServeArgs,
    TicketKeyArgs, TicketKeyFormatArg,
};
use shuck_proxy::pid_file::PidFile;
use signals::{Serving, Signals};
use upgrading::Upgrade;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        // Its own exit codes: the server's answer's.
        Command::Ctl(args) => return ctl::run(&args),
        Command::Serve(args) => serve(&args),
        Command::Check(args) => check(&args),
        Command::TicketKey(args) => ticket_key(&args),
        Command::Bench { args } => Err(bench_tool::run("bench", &args)),
        Command::Speed { args } => Err(bench_tool::run("speed", &args)),
        Command::Completions { shell } => {
            // Into a buffer: clap_complete panics on a write error (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "shuck", &mut script);
            std::io::Write::write_all(&mut std::io::stdout(), &script)
                .map_err(|e| format!("cannot write the completions: {e}"))
        }
        Command::Import(cli::ImportCommand::Hitch { file }) => std::fs::read_to_string(&file)
            .map_err(|e| format!("{}: {e}", file.display()))
            .and_then(|text| {
                hitch::convert(&text, &file.display().to_string())
                    .map_err(|e| format!("{}: {e}", file.display()))
            })
            .map(|toml| print!("{toml}")),
        Command::Version { verbose } => {
            print!("{}", version_text(verbose));
            Ok(())
        }
        Command::Man { out } => man_pages(out.as_deref()),
    };
    // A token's module must not be torn down at exit under a signer thread.
    shuck_proxy::pkcs11::quiesce(std::time::Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            json_log::fatal(&e);
            ExitCode::FAILURE
        }
    }
}

/// `shuck man`: shuck(1) on standard output, or with `out` every page (one per subcommand
/// too) in that directory. No `help` subcommand page: `--help` is on every command.
fn man_pages(out: Option<&std::path::Path>) -> Result<(), String> {
    let cmd = Cli::command().disable_help_subcommand(true);
    match out {
        Some(dir) => std::fs::create_dir_all(dir)
            .and_then(|()| clap_mangen::generate_to(cmd, dir))
            .map_err(|e| format!("cannot write the manual pages to {}: {e}", dir.display())),
        None => clap_mangen::Man::new(cmd)
            .render(&mut std::io::stdout())
            .map_err(|e| format!("cannot write the manual page: {e}")),
    }
}

/// `shuck version`: one line, or with `verbose` what a bug report needs about the build and this
/// machine.
fn version_text(verbose: bool) -> String {
    let first = format!(
        "shuck {} (commit {})\n",
        env!("CARGO_PKG_VERSION"),
        env!("SHUCK_COMMIT")
    );
    if !verbose {
        return first;
    }
    let features = features();
    let allocator = if features.contains(&"jemalloc") {
        "jemalloc"
    } else {
        "system (glibc malloc)"
    };
    let ktls = match shuck_proxy::kernel_has_tls() {
        Ok(()) => "this kernel has it (ktls = true hands TLS 1.3 records to it; an unprivileged service needs module tls loaded at boot)".to_string(),
        Err(e) => format!("not for this process: {e}"),
    };
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "unknown".into(), |s| s.trim().to_string());
    let lines = [
        ("features", features.join(",")),
        ("rustls", env!("SHUCK_RUSTLS_VERSION").to_string()),
        (
            "aws-lc-rs",
            format!(
                "{} (aws-lc-sys {})",
                env!("SHUCK_AWS_LC_RS_VERSION"),
                env!("SHUCK_AWS_LC_SYS_VERSION")
            ),
        ),
        ("allocator", allocator.to_string()),
        ("compiler", env!("SHUCK_RUSTC_VERSION").to_string()),
        ("target", env!("SHUCK_TARGET").to_string()),
        ("kernel", kernel),
        ("kTLS", ktls),
    ];
    let mut out = first;
    for (k, v) in lines {
        let _ = writeln!(out, "{k}: {v}");
    }
    out
}

/// The features this binary was built with, for `shuck_build_info`.
fn features() -> Vec<&'static str> {
    let mut f = Vec::new();
    if cfg!(feature = "bench") {
        f.push("bench");
    }
    if cfg!(feature = "jemalloc") {
        f.push("jemalloc");
    }
    f
}

/// `--cert` and `--key`, paired in order: the Nth key goes with the Nth certificate, and
/// certificates after the last key are bundles (or directories).
fn cert_entries(args: &ConfigArgs) -> Result<Option<OneOrMany<config::CertEntry>>, String> {
    if args.key.len() > args.cert.len() {
        return Err(format!(
            "{} --key for {} --cert: each key goes with the certificate in the same position",
            args.key.len(),
            args.cert.len()
        ));
    }
    if args.cert.is_empty() {
        return Ok(None);
    }
    let entries = args
        .cert
        .iter()
        .enumerate()
        .map(|(i, cert)| match args.key.get(i) {
            Some(key) => config::CertEntry::Pair(config::CertPair {
                cert: cert.clone(),
                key: key.clone(),
            }),
            None => config::CertEntry::Path(cert.clone()),
        })
        .collect();
    Ok(Some(OneOrMany::Many(entries)))
}

/// Builds the validated configuration from the file or from the one-frontend flags, then applies
/// the global overrides (workers, pinning, limits).
pub(crate) fn load_config(args: &ConfigArgs, log: Option<&ServeArgs>) -> Result<Config, String> {
    let one_liner = !args.listen.is_empty()
        || !args.backend.is_empty()
        || !args.cert.is_empty()
        || !args.key.is_empty()
        || args.self_signed
        || !args.alpn.is_empty()
        || args.proxy_protocol.is_some()
        || args.record_layer.is_some()
        || args.accept_proxy
        || !args.ticket_keys.is_empty()
        || args.session_store.is_some();
    let mut raw = if let Some(path) = &args.config {
        if one_liner {
            return Err(
                    "--config cannot be combined with --listen/--backend/--cert/--key/--self-signed/--alpn/--proxy-protocol/--record-layer/--accept-proxy(-from)/--ticket-keys/--session-store: put them in the file".into(),
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
            backend: (!args.backend.is_empty())
                .then(|| OneOrMany::Many(args.backend.iter().cloned().map(Into::into).collect())),
            certificates: cert_entries(args)?,
            self_signed: Some(args.self_signed),
            alpn: (!args.alpn.is_empty()).then(|| args.alpn.clone()),
            proxy_protocol: args.proxy_protocol.map(|p| match p {
                ProxyProtocolArg::None => config::ProxyProtocol::None,
                ProxyProtocolArg::V1 => config::ProxyProtocol::V1,
                ProxyProtocolArg::V2 => config::ProxyProtocol::V2,
            }),
            record_layer: args.record_layer.map(|l| match l {
                RecordLayerArg::Shuck => config::RecordLayer::Shuck,
                RecordLayerArg::Rustls => config::RecordLayer::Rustls,
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
    if let Some(t) = args.overload_threshold {
        raw.overload_threshold = Some(t);
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
    // Asked for on the command line: even an error loading the configuration is a JSON line.
    json_log::fatal_as_json(matches!(args.log_format, Some(LogFormatArg::Json)));
    let config = load_config(&args.config, Some(args))?;
    let log_queue = logging::init(&config);
    shuck_proxy::set_build_info(shuck_proxy::BuildInfo {
        commit: env!("SHUCK_COMMIT").into(),
        rustls: env!("SHUCK_RUSTLS_VERSION").into(),
        features: features().join(","),
    });
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
    // Files that load now (as root) and not later (as the user that serves): said at start.
    for w in unreadable_later(&config, &run_as) {
        tracing::warn!("{w}");
    }
    let inherited_upgrade = inherited.is_upgrade();
    // Named by the old process once this one listens, or by this one if the old is gone.
    inherited.set_pid_file(args.pid_file.clone());
    if args.takeover {
        inherited.take_over_addresses();
    }
    let config_admin = config
        .admin_socket
        .clone()
        .map(|p| (p, config.admin_group.clone()));
    // An upgrade's old process hands its admin socket over with the others.
    let inherited_admin = inherited.take_admin();
    let mut server = Server::prepare_with(config, &mut inherited).map_err(|e| read_error(&e))?;
    // After an upgrade the old process rewrites the pid file once this one is listening (so a
    // new process that fails never takes it); this one only removes it at exit, if still its.
    let pid_file = match &args.pid_file {
        Some(p) if inherited_upgrade => Some(PidFile::adopt(p)),
        Some(p) => Some(PidFile::write(p, std::process::id())?),
        None => None,
    };
    // Made while root may still give it its owner and group.
    let mut admin_socket = match &config_admin {
        Some((path, group)) => Some(admin::socket::bind(
            path,
            group.as_deref(),
            &run_as.reader()?,
            inherited_admin,
        )?),
        None => None,
    };
    // Ports bound, keys read, state directories made: now the workers may start unprivileged.
    run_as.apply()?;
    let (stops_tx, stops) = watch::channel(0u32);
    let updates = server.certificate_updates();
    let upgrade = Upgrade {
        admin: admin::socket::for_upgrade(admin_socket.as_ref())?,
        pid_file: args.pid_file.clone(),
        metrics: server.metrics_handover(),
        bindings: server.bindings(),
        exe: std::env::current_exe().map_err(|e| format!("cannot find my own binary: {e}"))?,
        args: std::env::args_os().skip(1).collect(),
        starting: upgrading::Starting::default(),
    };
    let mut reloader = server.reloader();
    if let Some(path) = &args.ready_file {
        reloader = reloader.with_ready_file(path.clone(), server.metrics_addr());
    }
    let asks = admin_socket.as_mut().and_then(|s| {
        let serving = (server.control(), args.clone(), reloader.process_timeouts());
        admin::start(&rt, s, serving)
    });
    rt.spawn(signals.handle(Serving {
        args: args.clone(),
        reloader,
        updates,
        upgrade,
        stops: stops_tx,
        asks,
    }));
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
    drop(admin_socket);
    result
}

fn check(args: &ConfigArgs) -> Result<(), String> {
    let config = load_config(args, None)?;
    let run_as = privileges::RunAs::of(&config);
    let report = shuck_proxy::check::report(&config).map_err(|e| read_error(&e))?;
    print!("{}", report.summary);
    for w in report
        .warnings
        .iter()
        .chain(&unreadable_later(&config, &run_as))
    {
        eprintln!("shuck: warning: {w}");
    }
    Ok(())
}

/// `e` as its message, with who could not read a certificate or key: the user this process
/// runs as now (an unprivileged start, or an upgrade's new process).
fn read_error(e: &shuck_proxy::Error) -> String {
    match e {
        shuck_proxy::Error::CertRead { source, .. }
            if source.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            let who = shuck_proxy::access::me();
            format!("{e} (shuck runs as user {who:?}, who may not read it: give that user read access to it and search access to the directories above it)")
        }
        _ => e.to_string(),
    }
}

/// What the user that serves after start could not read or watch (`check::unreadable_by`);
/// a user that cannot be found is `serve`'s error to give, not this.
fn unreadable_later(config: &Config, run_as: &privileges::RunAs) -> Vec<String> {
    run_as
        .reader()
        .map(|r| shuck_proxy::check::unreadable_by(config, &r))
        .unwrap_or_default()
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
