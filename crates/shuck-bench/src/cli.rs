//! Command-line arguments of `shuck bench` and `shuck speed`, and the code that runs them. The
//! `shuck` binary embeds these in its own clap parser.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use rustls::pki_types::ServerName;

use crate::http::Expect;
use crate::load::{self, LoadPlan, Schedule};
use crate::report::{BenchReport, Settings};
use crate::tls::{ClientTls, ResumeMode, TlsOptions, TlsVersion};
use crate::verdict::Thresholds;
use crate::{backend, compare, idle, plot, speed, BenchError};

/// `shuck bench [OPTIONS] HOST:PORT`, or one of its helper tools.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchCommand {
    #[command(subcommand)]
    pub tool: Option<BenchTool>,

    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum BenchTool {
    /// A minimal HTTP backend answering every GET with --size bytes (/size/N asks for N).
    Backend(BackendArgs),
    /// Hold N idle TLS connections and report the server's resident memory per connection.
    Idle(IdleArgs),
    /// Several runs side by side: a Markdown table of verdicts and plots against offered rate.
    Compare(CompareArgs),
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// NAME=FILE pairs, FILE being a run's results.json (or --json output).
    #[arg(required = true, value_name = "NAME=FILE")]
    pub runs: Vec<String>,
    /// Write compare-tps and compare-latency (.svg, .png) into this directory.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Title of the plots.
    #[arg(long, default_value = "shootout", value_name = "TEXT")]
    pub title: String,
}

#[derive(Debug, Args)]
pub struct BackendArgs {
    /// Address to listen on (port 0 picks a free one; see --ready-file).
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub listen: String,
    /// Body bytes of each answer.
    #[arg(long, default_value_t = 1024, value_name = "BYTES")]
    pub size: u64,
    /// Once listening, write the bound address there.
    #[arg(long, value_name = "PATH")]
    pub ready_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct IdleArgs {
    /// The TLS server, HOST:PORT ([::1]:443 for IPv6).
    #[arg(value_name = "HOST:PORT")]
    pub target: String,
    /// Connections to hold open.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub connections: usize,
    /// The server's process (its whole process tree is measured); repeatable.
    #[arg(long, required = true, value_name = "PID")]
    pub server_pid: Vec<u32>,
    /// Seconds to hold the connections before measuring.
    #[arg(long, default_value_t = 1.0, value_name = "SECS")]
    pub hold: f64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// TLS client settings shared by the load generator and `idle`.
#[derive(Debug, Clone, Args)]
pub struct TlsArgs {
    /// Protocol version (default: what the resumption mode needs, else both).
    #[arg(long = "tls", value_enum, value_name = "VERSION")]
    pub version: Option<TlsVersion>,
    /// How the connections after a session's first resume it.
    #[arg(long, value_enum, default_value = "psk", value_name = "MODE")]
    pub resume: ResumeMode,
    /// Cipher suite to offer, by rustls name, e.g. TLS13_AES_128_GCM_SHA256 (repeatable).
    #[arg(long, value_name = "SUITE")]
    pub cipher: Vec<String>,
    /// Key-exchange group to offer: X25519, secp256r1 (p256), secp384r1, X25519MLKEM768 (repeatable).
    #[arg(long, value_name = "GROUP")]
    pub group: Vec<String>,
    /// ALPN protocol to offer (repeatable).
    #[arg(long, value_name = "PROTO")]
    pub alpn: Vec<String>,
    /// PEM file of the CA(s) that signed the server's certificate.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Do not verify the server's certificate (the handshake signature is still checked).
    #[arg(long, conflicts_with = "ca")]
    pub insecure: bool,
    /// Server name to send and verify (default: the target's host).
    #[arg(long, value_name = "NAME")]
    pub sni: Option<String>,
    /// Send no SNI.
    #[arg(long)]
    pub no_sni: bool,
    /// Prefer an IPv6 address when the target's name resolves to both.
    #[arg(short = '6', long)]
    pub ipv6: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The TLS server, HOST:PORT ([::1]:443 for IPv6).
    #[arg(value_name = "HOST:PORT")]
    pub target: Option<String>,

    /// No TLS at all: the same requests over plain TCP. Loads a plain relay (HAProxy `mode tcp`)
    /// for the TCP floor the shootout compares terminators with.
    #[arg(long, conflicts_with_all = ["ca", "insecure", "sni", "no_sni", "alpn", "cipher", "group"])]
    pub plain: bool,
    /// Load threads, each with its own event loop.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub threads: usize,
    /// Connect from these addresses, one per TLS session in turn (its resumptions from the
    /// same one): a list
    /// (127.0.0.2,127.0.0.3) or an IPv4 range (127.0.1.1-127.0.1.250). On Linux all of
    /// 127.0.0.0/8 is local: many loopback addresses stand for many clients.
    #[arg(long, value_name = "ADDRS")]
    pub source: Option<String>,
    /// Pin load thread i to the i-th CPU of this list, e.g. --pin-cpus 1 or --pin-cpus 2,3.
    #[arg(long, value_delimiter = ',', value_name = "CPUS")]
    pub pin_cpus: Vec<usize>,

    /// Connections per TLS session: the first a full handshake, the rest resumed.
    #[arg(short = 'k', long, default_value_t = 8, value_name = "K")]
    pub requests_per_session: u32,
    /// HTTP requests per connection (1 = HTTP/1.0, no keep-alive, as in Bernat's benchmark).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub keepalive: u32,
    /// Path to request.
    #[arg(long, default_value = "/", value_name = "PATH")]
    pub path: String,
    /// Status every answer must have.
    #[arg(long, default_value_t = 200, value_name = "CODE")]
    pub expect_status: u16,
    /// Body size every answer must have (default: whatever Content-Length says).
    #[arg(long, value_name = "BYTES")]
    pub expect_size: Option<u64>,

    /// Closed loop: this many clients, each starting its next connection when one ends.
    #[arg(short = 'c', long, value_name = "C", conflicts_with = "rate_start")]
    pub concurrency: Option<usize>,
    /// Closed loop: seconds to run (in steps of --step-duration).
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub duration: f64,
    /// Open loop: the first step's offered rate, connections per second.
    #[arg(long, value_name = "RATE")]
    pub rate_start: Option<f64>,
    /// Open loop: rate added at each step (0 = one step).
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "RATE",
        requires = "rate_start"
    )]
    pub rate_step: f64,
    /// Open loop: the last step's rate (default: --rate-start).
    #[arg(long, value_name = "RATE", requires = "rate_start")]
    pub rate_max: Option<f64>,
    /// Seconds per step.
    #[arg(long, default_value_t = 2.0, value_name = "SECS")]
    pub step_duration: f64,
    /// Seconds a connection may take (connect to last byte) before it counts as failed.
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub timeout: f64,
    /// Connections in flight at most; arrivals beyond count as failed (client_overload).
    #[arg(long, default_value_t = 4096, value_name = "N")]
    pub max_in_flight: usize,
    /// Virtual clients (TLS sessions) made before the run, taken in turn: the load is spread
    /// over at least this many sessions (and, with --source, addresses) even when few
    /// connections are in flight at once.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub clients: usize,

    /// Verdict: failed/attempted must stay below this.
    #[arg(long, default_value_t = 0.001, value_name = "RATIO")]
    pub max_failure_ratio: f64,
    /// Verdict: mean latency limit in ms.
    #[arg(long, default_value_t = 100.0, value_name = "MS")]
    pub max_mean_ms: f64,
    /// Verdict: a step over the latency limit passes if the mean of the next N steps is under it
    /// (all N must exist: the last N steps of a ramp cannot be pardoned; 0 = no pardon).
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub lookahead: usize,

    /// The server's process: its process tree's CPU time per connection is reported (repeatable).
    #[arg(long, value_name = "PID")]
    pub server_pid: Vec<u32>,
    /// Print the results as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Write results.json, steps.csv and plots (tps/latency .svg/.png) into this directory.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Title of the plots (default: the target).
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
    /// No progress line on stderr.
    #[arg(short, long)]
    pub quiet: bool,

    #[command(flatten)]
    pub tls: TlsArgs,
}

pub fn run_bench(cmd: &BenchCommand) -> Result<(), BenchError> {
    match &cmd.tool {
        Some(BenchTool::Backend(a)) => backend::run(&backend::BackendOptions {
            listen: a.listen.clone(),
            size: a.size,
            ready_file: a.ready_file.clone(),
        }),
        Some(BenchTool::Idle(a)) => run_idle(a),
        Some(BenchTool::Compare(a)) => {
            let runs = compare::load(&a.runs)?;
            print!("{}", compare::table(&runs));
            if let Some(dir) = &a.out {
                compare::plots(&runs, dir, &a.title)?;
            }
            Ok(())
        }
        None => run_load(&cmd.run),
    }
}

/// A duration flag: positive, and at most a day (a longer step, run or timeout is a typo, and
/// would overflow the clock arithmetic of the schedule).
fn secs(flag: &'static str, s: f64) -> Result<Duration, BenchError> {
    const DAY: f64 = 86_400.0;
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero() && s <= DAY)
        .ok_or_else(|| BenchError::Option {
            flag,
            reason: format!("{s} is not a number of seconds above 0 and at most 86400"),
        })
}

/// Resolves HOST:PORT; returns the address, the host (for SNI and Host:) and the server name.
fn target(t: &str, tls: &TlsArgs) -> Result<(SocketAddr, String, ServerName<'static>), BenchError> {
    let err = |reason: String| BenchError::Resolve {
        target: t.to_string(),
        reason,
    };
    let (host, _port) = t
        .rsplit_once(':')
        .ok_or_else(|| err("expected HOST:PORT, e.g. 127.0.0.1:8443 or [::1]:8443".into()))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let addrs: Vec<SocketAddr> = t
        .to_socket_addrs()
        .map_err(|e| err(e.to_string()))?
        .collect();
    let addr = addrs
        .iter()
        .find(|a| a.is_ipv6() == tls.ipv6)
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| err("no address".into()))?;
    let name = tls.sni.clone().unwrap_or_else(|| host.clone());
    let server_name = ServerName::try_from(name.clone()).map_err(|e| BenchError::Option {
        flag: "--sni",
        reason: format!("{name:?} is not a DNS name or IP address: {e}"),
    })?;
    Ok((addr, host, server_name))
}

fn client_tls(a: &TlsArgs, plain: bool) -> Result<ClientTls, BenchError> {
    ClientTls::new(&TlsOptions {
        version: a.version,
        resume: a.resume,
        ciphers: a.cipher.clone(),
        groups: a.group.clone(),
        alpn: a.alpn.clone(),
        ca: a.ca.clone(),
        // Nothing is verified without TLS.
        insecure: a.insecure || plain,
        sni: !a.no_sni,
    })
}

/// Room for the connections in flight; 20000 is the project's ceiling for one process.
fn raise_fd_limit() {
    let _ = rlimit::increase_nofile_limit(20_000);
}

fn run_idle(a: &IdleArgs) -> Result<(), BenchError> {
    raise_fd_limit();
    let (addr, _, name) = target(&a.target, &a.tls)?;
    let tls = client_tls(&a.tls, false)?;
    let r = idle::run(
        addr,
        &name,
        &tls,
        a.connections,
        &a.server_pid,
        secs("--hold", a.hold)?,
    )?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).expect("plain data serialises")
        );
    } else {
        println!(
            "{} idle connections: server RSS {} KiB -> {} KiB, {:.1} KiB per connection",
            r.connections, r.rss_before_kib, r.rss_after_kib, r.kib_per_connection
        );
    }
    Ok(())
}

fn run_load(a: &RunArgs) -> Result<(), BenchError> {
    let report = load_report(a)?;
    if a.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.table());
    }
    if let (Some(dir), Some(t)) = (&a.out, &a.target) {
        write_outputs(&report, dir, a.title.as_deref().unwrap_or(t))?;
    }
    Ok(())
}

/// Runs the load `a` describes and returns the report `shuck bench` prints (and writes with
/// --out): the library entry point of a run.
pub fn load_report(a: &RunArgs) -> Result<BenchReport, BenchError> {
    let t = a.target.as_deref().ok_or_else(|| BenchError::Option {
        flag: "HOST:PORT",
        reason: "give the TLS server to load, e.g. shuck bench 127.0.0.1:8443 --insecure (see shuck bench --help)".into(),
    })?;
    raise_fd_limit();
    if a.out.is_some() {
        // A missing font would otherwise surface only after the whole run.
        plot::font()?;
    }
    let (addr, host, server_name) = target(t, &a.tls)?;
    // An IPv6 literal goes in brackets in Host:, as in a URL.
    let host_header = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    let step = secs("--step-duration", a.step_duration)?;
    let schedule = if let Some(start) = a.rate_start {
        Schedule::Open {
            rates: load::ramp(start, a.rate_step, a.rate_max.unwrap_or(start))?,
        }
    } else {
        let steps = (a.duration / a.step_duration).round();
        if !(1.0..=100_000.0).contains(&steps) {
            return Err(BenchError::Option {
                flag: "--duration",
                reason: "must hold between 1 and 100000 steps of --step-duration".into(),
            });
        }
        #[allow(clippy::cast_sign_loss)] // in 1..=100000, checked above
        let steps = steps as usize;
        Schedule::Closed {
            concurrency: a.concurrency.unwrap_or(1).max(1),
            steps,
        }
    };
    let plan = LoadPlan {
        target: addr,
        sources: parse_sources(a.source.as_deref())?,
        server_name: server_name.clone(),
        host_header,
        tls: client_tls(&a.tls, a.plain)?,
        plain: a.plain,
        requests_per_session: a.requests_per_session,
        keepalive: a.keepalive,
        path: a.path.clone(),
        expect: Expect {
            status: a.expect_status,
            size: a.expect_size,
        },
        threads: a.threads,
        cpus: a.pin_cpus.clone(),
        schedule: schedule.clone(),
        step,
        timeout: secs("--timeout", a.timeout)?,
        max_in_flight: a.max_in_flight.max(1),
        clients: a.clients,
        server_pids: a.server_pid.clone(),
        progress: !a.quiet,
    };
    if !(a.max_failure_ratio > 0.0 && a.max_failure_ratio <= 1.0) {
        return Err(BenchError::Option {
            flag: "--max-failure-ratio",
            reason: format!("{} is not above 0 and at most 1", a.max_failure_ratio),
        });
    }
    if !(a.max_mean_ms > 0.0 && a.max_mean_ms.is_finite()) {
        return Err(BenchError::Option {
            flag: "--max-mean-ms",
            reason: format!("{} is not a positive number of milliseconds", a.max_mean_ms),
        });
    }
    let thresholds = Thresholds {
        max_failure_ratio: a.max_failure_ratio,
        max_mean_ms: a.max_mean_ms,
        lookahead: a.lookahead,
    };
    let result = load::run(plan)?;
    let n = result.negotiated;
    let settings = Settings {
        target: addr.to_string(),
        server_name: server_name.to_str().into_owned(),
        mode: match schedule {
            Schedule::Open { .. } => "open".into(),
            Schedule::Closed { .. } => "closed".into(),
        },
        threads: a.threads,
        concurrency: match schedule {
            Schedule::Closed { concurrency, .. } => Some(concurrency),
            Schedule::Open { .. } => None,
        },
        requests_per_session: a.requests_per_session,
        keepalive: a.keepalive,
        resume: a.tls.resume.name().into(),
        path: a.path.clone(),
        protocol: n.protocol,
        cipher_suite: n.cipher_suite,
        kx_group: n.kx_group,
        alpn: n.alpn,
    };
    Ok(BenchReport::build(settings, &result.steps, thresholds))
}

/// results.json, steps.csv and the four plots.
pub fn write_outputs(
    r: &BenchReport,
    dir: &std::path::Path,
    title: &str,
) -> Result<(), BenchError> {
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|source| BenchError::Write { path: p, source })
    };
    std::fs::create_dir_all(dir).map_err(|source| BenchError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    write("results.json", r.json())?;
    write("steps.csv", r.csv())?;
    plot::write_all(r, dir, title)?;
    Ok(())
}

/// `shuck speed`: per-core crypto speed and the capacity it predicts.
#[derive(Debug, Args)]
pub struct SpeedArgs {
    /// 0.1 s per measurement instead of 1 s (done in a few seconds; figures less steady).
    #[arg(long)]
    pub quick: bool,
    /// The server's key type, for the prediction: rsa2048, rsa3072, rsa4096, p256, p384,
    /// ed25519; or a key in a PKCS#11 token by URI (RFC 7512, e.g.
    /// "pkcs11:token=edge;object=web?pin-source=file:/etc/shuck/pin"), measured against the
    /// cores: its signatures per second and latency beside one core's for the same key type.
    // A String, read by `parse_key`: clap would print a refused value whole, PIN included.
    #[arg(long, default_value = "p256", value_name = "TYPE|PKCS11-URI")]
    pub key: String,
    /// The PKCS#11 module for a token key whose URI names none (module-path).
    #[arg(long, value_name = "PATH")]
    pub pkcs11_module: Option<PathBuf>,
    /// Sessions signing at once with a token key (default: the cores the prediction is for).
    #[arg(long, value_name = "N")]
    pub token_sessions: Option<usize>,
    /// Take the key type from the private key in this PEM (a shuck certificate bundle).
    #[arg(long, value_name = "PEM", conflicts_with = "key")]
    pub cert: Option<PathBuf>,
    /// Key exchange, for the prediction (a --bench-json's negotiated group overrides it).
    #[arg(long, value_enum, default_value = "x25519mlkem768")]
    pub kx: speed::Kx,
    /// Bulk cipher, for the prediction (a --bench-json's suite overrides it).
    #[arg(long, value_enum, default_value = "aes-128-gcm")]
    pub cipher: speed::Cipher,
    /// Cores to scale the prediction to (default: this machine's).
    #[arg(long, value_name = "N")]
    pub cores: Option<usize>,
    /// Connections per TLS session in the mixed prediction (a --bench-json's K overrides it).
    #[arg(short = 'k', long, default_value_t = 8, value_name = "K")]
    pub requests_per_session: u32,
    /// A `shuck bench --json` result (or its results.json): print measured/predicted.
    #[arg(long, value_name = "FILE")]
    pub bench_json: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `--key`: a key type, or a token key by PKCS#11 URI.
#[derive(Debug, Clone)]
pub enum KeyArg {
    Type(speed::KeyType),
    Token(Box<shuck_proxy::pkcs11_uri::Pkcs11Uri>),
}

/// `--key`, whose errors never show a URI's PIN.
fn parse_key(s: &str) -> Result<KeyArg, BenchError> {
    use clap::ValueEnum as _;
    let bad = |reason: String| BenchError::Option {
        flag: "--key",
        reason,
    };
    if shuck_proxy::pkcs11_uri::Pkcs11Uri::is_uri(s) {
        return shuck_proxy::pkcs11_uri::Pkcs11Uri::parse(s)
            .map(|u| KeyArg::Token(Box::new(u)))
            .map_err(|e| bad(format!("the PKCS#11 URI {e}")));
    }
    speed::KeyType::from_str(s, true)
        .map(KeyArg::Type)
        .map_err(|_| {
            bad(format!(
                "{s:?} is none of rsa2048, rsa3072, rsa4096, p256, p384, ed25519, nor a pkcs11: URI"
            ))
        })
}

pub fn run_speed(a: &SpeedArgs) -> Result<(), BenchError> {
    let (r, token) = speed_report(a)?;
    if a.json {
        let both = serde_json::json!({ "speed": r, "token": token });
        let plain = if token.is_some() {
            both
        } else {
            serde_json::json!(r)
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&plain).expect("plain data serialises")
        );
    } else {
        print!("{}", speed::text(&r));
        if let Some(t) = &token {
            print!("{}", crate::speed_token::text(t, r.prediction.cores));
        }
    }
    Ok(())
}

/// Measures and predicts as `a` says and returns the report `shuck speed` prints.
pub fn speed_report(
    a: &SpeedArgs,
) -> Result<(speed::SpeedReport, Option<crate::speed_token::TokenReport>), BenchError> {
    // A token key is opened first: a wrong PIN or a missing object stops before measuring.
    let key_arg = parse_key(&a.key)?;
    let token = match &key_arg {
        KeyArg::Type(_) => None,
        KeyArg::Token(uri) => Some(crate::speed_token::open(uri, a.pkcs11_module.as_deref())?),
    };
    let key = match (&key_arg, &token) {
        (_, Some(t)) => crate::speed_token::key_type_of(t.kind)?,
        (KeyArg::Type(k), None) => *k,
        (KeyArg::Token(_), None) => speed::KeyType::P256,
    };
    let mut o = speed::SpeedOptions {
        quick: a.quick,
        key,
        kx: a.kx,
        cipher: a.cipher,
        cores: a
            .cores
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
            .max(1),
        requests_per_session: a.requests_per_session.max(1),
    };
    if let Some(pem) = &a.cert {
        o.key = speed::key_type_of(pem)?;
    }
    let bench = match &a.bench_json {
        Some(p) => Some(speed::read_bench(p, &mut o)?),
        None => None,
    };
    let measured = speed::measure(o.quick)?;
    let prediction = speed::predict(&measured, &o);
    let comparison = bench.as_ref().map(|b| speed::compare(b, &prediction));
    let token = match &token {
        None => None,
        Some(t) => {
            let budget = Duration::from_millis(if o.quick { 200 } else { 1000 });
            let sessions = a.token_sessions.unwrap_or(o.cores).max(1);
            Some(crate::speed_token::measure(t, sessions, budget, &measured)?)
        }
    };
    Ok((
        speed::SpeedReport {
            measured,
            prediction,
            comparison,
        },
        token,
    ))
}

/// `--source`: addresses separated by commas, or an IPv4 range `FIRST-LAST`.
fn parse_sources(s: Option<&str>) -> Result<Vec<std::net::IpAddr>, BenchError> {
    let Some(s) = s else {
        return Ok(Vec::new());
    };
    let bad = |reason: String| BenchError::Option {
        flag: "--source",
        reason,
    };
    if let Some((first, last)) = s.split_once('-') {
        let ip = |x: &str| {
            x.trim()
                .parse::<std::net::Ipv4Addr>()
                .map_err(|_| bad(format!("{x:?} is not an IPv4 address")))
        };
        let (a, b) = (u32::from(ip(first)?), u32::from(ip(last)?));
        if b < a || b - a >= 65_536 {
            return Err(bad(format!(
                "{s:?}: the range must run upwards, 65536 addresses at most"
            )));
        }
        return Ok((a..=b).map(|n| std::net::IpAddr::V4(n.into())).collect());
    }
    s.split(',')
        .map(|x| {
            x.trim()
                .parse()
                .map_err(|_| bad(format!("{x:?} is not an IP address")))
        })
        .collect()
}

#[cfg(test)]
mod source_tests {
    use super::parse_sources;

    #[test]
    fn sources_are_lists_or_ranges() {
        let r = parse_sources(Some("127.0.1.1-127.0.1.250")).expect("range");
        assert_eq!(r.len(), 250);
        assert_eq!(r[249].to_string(), "127.0.1.250");
        let l = parse_sources(Some("127.0.0.2, ::1")).expect("list");
        assert_eq!(l.len(), 2);
        assert!(parse_sources(Some("127.0.0.9-127.0.0.1")).is_err());
        assert!(parse_sources(Some("x")).is_err());
        assert!(parse_sources(None).expect("none").is_empty());
    }
}
