//! Command-line interface. Everything a flag sets, the TOML file can set too (docs/configuration.md).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "shuck",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("SHUCK_COMMIT"), ")"),
    about = "A fast, memory-safe TLS terminator",
    long_about = "shuck accepts TLS from clients and hands the plaintext to backends, one worker per core.\n\n\
                  Try it:   shuck serve --self-signed   then   curl -k https://127.0.0.1:8443/"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Terminate TLS and relay to backends until SIGINT/SIGTERM.
    Serve(ServeArgs),
    /// Validate a configuration (files, certificates, keys, chains, expiry) and print what would
    /// be served; exit 0 if it is valid, 1 if not.
    Check(ConfigArgs),
    /// Write a new session-ticket key for a fleet's key file: appended as a base64 line to a
    /// HAProxy-format file (rotate by appending on every host, then reloading), or as a new raw
    /// nginx-format file. Created readable by the owner only; the key is never printed.
    TicketKey(TicketKeyArgs),
    /// Load a TLS server as Vincent Bernat's TLS-termination benchmark did (K connections per
    /// TLS session, an offered-rate ramp, the maximum within a latency bound); `shuck bench backend` and `shuck bench idle` help set it up.
    /// `shuck bench --help` lists its options.
    #[command(disable_help_flag = true)]
    Bench {
        /// Passed to the shuck-bench binary, which runs the benchmark.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Measure this machine's per-core crypto speed and predict handshakes/s and bulk MB/s.
    /// `shuck speed --help` lists its options.
    #[command(disable_help_flag = true)]
    Speed {
        /// Passed to the shuck-bench binary, which measures.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Act on a running shuck through its admin socket (admin_socket): show what runs, drain
    /// or disable a backend, close connections, reload, check, upgrade. Exit codes: 0 done, 1
    /// refused or failed, 2 not a command, 3 reloaded but some changes need a restart, 4 the
    /// socket cannot be reached.
    Ctl(crate::ctl_cli::CtlArgs),
    /// Convert another terminator's configuration into shuck's (printed; check it with
    /// `shuck check`).
    #[command(subcommand)]
    Import(ImportCommand),
    /// Print the version; with --verbose also the commit, features, rustls and aws-lc versions,
    /// the allocator, the compiler, and whether this kernel has kTLS.
    Version {
        #[arg(short, long)]
        verbose: bool,
    },
    /// Print the shell completion script for SHELL (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), generated from this command line's definition.
    Man {
        /// Write every page into DIR instead: shuck.1 and one per subcommand (shuck-serve.1,
        /// shuck-check.1, ...), as the Debian package ships them beside shuck.toml(5).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ImportCommand {
    /// A hitch configuration (hitch.conf): print the equivalent shuck.toml, with a comment at
    /// each option that does not carry over saying why.
    Hitch {
        /// The hitch configuration file.
        file: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ProxyProtocolArg {
    None,
    V1,
    V2,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum RecordLayerArg {
    /// shuck's own, on the keys rustls hands over after the handshake (the default).
    Shuck,
    /// rustls' for the connection's whole life.
    Rustls,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum TicketKeyFormatArg {
    /// One base64 key per line (HAProxy tls-ticket-keys); the key is appended.
    Haproxy,
    /// One raw key per file (nginx ssl_session_ticket_key); the file must not exist yet.
    Nginx,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct TicketKeyArgs {
    /// The key file to append to (haproxy) or create (nginx).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// The file's format.
    #[arg(long, value_enum, default_value = "haproxy")]
    pub format: TicketKeyFormatArg,

    /// Key size in bytes: 80 (AES-256 keys in OpenSSL peers) or 48 (AES-128).
    #[arg(long, default_value_t = 80, value_parser = key_size)]
    pub size: usize,
}

fn key_size(s: &str) -> Result<usize, String> {
    match s {
        "48" => Ok(48),
        "80" => Ok(80),
        _ => Err("a ticket key is 48 or 80 bytes".into()),
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum LogFormatArg {
    Compact,
    Json,
}

/// What to serve: a configuration file, or one frontend described by flags.
#[derive(Debug, Clone, Args)]
pub(crate) struct ConfigArgs {
    /// TOML configuration file. Cannot be combined with the flags that describe a single
    /// frontend without a file: --listen, --backend, --cert, --key, --self-signed, --alpn,
    /// --proxy-protocol, --accept-proxy, --accept-proxy-from, --ticket-keys, --session-store and
    /// --session-store-key.
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Address to listen on, IP:port (repeatable; IPv6 as [::]:443). Default 127.0.0.1:8443.
    #[arg(short, long, value_name = "ADDR")]
    pub listen: Vec<String>,

    /// Backend host:port (repeatable; round-robin). Without one, a built-in demo page answers.
    #[arg(short, long, value_name = "ADDR")]
    pub backend: Vec<String>,

    /// PEM bundle (certificate chain, leaf first, then the private key; or the key in PEM.key
    /// beside it), or a directory: *.pem bundles, certbot's live/ (NAME/fullchain.pem and
    /// privkey.pem) or a Kubernetes TLS secret (tls.crt and tls.key). Repeatable; the first is
    /// the default certificate.
    #[arg(long, value_name = "PEM")]
    pub cert: Vec<PathBuf>,

    /// The private key of the certificate given by the --cert in the same position (repeatable):
    /// --cert fullchain.pem --key privkey.pem.
    #[arg(long, value_name = "KEY", requires = "cert")]
    pub key: Vec<PathBuf>,

    /// Serve an in-memory self-signed certificate for localhost, 127.0.0.1 and ::1.
    #[arg(long, conflicts_with = "cert")]
    pub self_signed: bool,

    /// ALPN protocol to offer (repeatable, in preference order), e.g. --alpn h2 --alpn http/1.1.
    #[arg(long, value_name = "PROTO")]
    pub alpn: Vec<String>,

    /// Send a PROXY protocol header to the backend so it learns the client address.
    #[arg(long, value_enum, value_name = "VERSION")]
    pub proxy_protocol: Option<ProxyProtocolArg>,

    /// Who protects a TLS 1.3 connection's records after the handshake (the file's
    /// record_layer): shuck's own layer, or rustls' for the connection's whole life.
    #[arg(long, value_enum, value_name = "LAYER")]
    pub record_layer: Option<RecordLayerArg>,

    /// Expect a PROXY protocol header (v1 or v2) from a load balancer before TLS on every
    /// connection (the file's accept_proxy). Without --accept-proxy-from any peer may announce
    /// any client address: limit it to your balancers.
    #[arg(long)]
    pub accept_proxy: bool,

    /// Network allowed to send a PROXY header, as CIDR or a single address (repeatable; the
    /// file's accept_proxy_from): other peers are closed before anything is read. Needs
    /// --accept-proxy.
    #[arg(long, value_name = "CIDR", requires = "accept_proxy")]
    pub accept_proxy_from: Vec<String>,

    /// Session-ticket key file shared by a fleet (the file's session_ticket_keys): a HAProxy-style
    /// file of base64 lines, or nginx-style raw key files (repeatable; the first encrypts).
    #[arg(long, value_name = "PATH")]
    pub ticket_keys: Vec<PathBuf>,

    /// Remote session store shared by a fleet (the file's session_store): redis://HOST:PORT,
    /// rediss://HOST:PORT or unix:/PATH. Needs --session-store-key.
    #[arg(long, value_name = "URL", requires = "session_store_key")]
    pub session_store: Option<String>,

    /// File whose secret seals the sessions in the store, the same on every host (the file's
    /// session_store_key; `shuck ticket-key --format nginx FILE` makes one).
    #[arg(long, value_name = "PATH", requires = "session_store")]
    pub session_store_key: Option<PathBuf>,

    /// Worker threads, each with its own listening socket; 0 = one per CPU core.
    #[arg(short, long, value_name = "N")]
    pub workers: Option<usize>,

    /// Pin worker N to CPU core N.
    #[arg(long)]
    pub pin_cpus: bool,

    /// Serve Prometheus metrics at http://ADDR/metrics (plain HTTP: keep it on a private address).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,

    /// Connections served at once by the whole process (one count shared by all workers);
    /// beyond it new ones wait in the kernel backlog.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,

    /// Past this share of a core (0.05 to 1.0; default 0.95), a worker lets in fewer new full
    /// handshakes and every resumption; 1.0 never sheds (what CPU-at-saturation benchmarks want).
    #[arg(long, value_name = "SHARE")]
    pub overload_threshold: Option<f64>,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArgs,

    /// Once listening, write the bound addresses there, one per line (for scripts and tests).
    #[arg(long, value_name = "PATH")]
    pub ready_file: Option<PathBuf>,

    /// Write the process ID there once listening (removed at exit if still ours).
    #[arg(long, value_name = "PATH")]
    pub pid_file: Option<PathBuf>,

    /// Share listen addresses another process already listens on (an old shuck being replaced
    /// by hand), the kernel splitting new connections between the two until it stops. Without
    /// it such an address is refused. Not needed for SIGUSR2 upgrades, which hand sockets over.
    #[arg(long)]
    pub takeover: bool,

    /// Run as this user once the ports are bound and the keys read (started as root).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,

    /// With --user: run as this group (default: the user's).
    #[arg(long, value_name = "GROUP", requires = "user")]
    pub group: Option<String>,

    /// Keep root when started as root without --user (otherwise the workers run as the `shuck`
    /// user, or `nobody`).
    #[arg(long)]
    pub allow_root: bool,

    /// Log format.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormatArg>,

    /// Log level: error, warn, info, debug or trace (RUST_LOG overrides it).
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,

    /// Log one line per connection when it closes (failures are always logged).
    #[arg(long)]
    pub log_connections: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }
}
