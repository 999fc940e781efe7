//! The keys outside `[[frontend]]`: workers, the connection limit, shutdown, logging, metrics.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::section::Applies;
use super::{defaults, duration_or, key_err, Config, Frontend, KeyError, Origin, RawConfig};

/// The longest drain: contrib/shuck.service's `TimeoutStopSec=` (3660 s) is set above it, so
/// systemd never cuts a drain short.
pub const MAX_SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Far above what one machine's descriptors allow; keeps the per-worker semaphore in range.
pub const MAX_CONNECTIONS_LIMIT: usize = 1 << 24;

/// How `log_connections` lines are written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ConnectionLogFormat {
    /// Named fields (top-level in JSON logs).
    #[default]
    Fields,
    /// HAProxy's `tcplog` record as the message (for tools that parse those).
    Haproxy,
    /// The operator's own line (`{name}` for each field), as the message.
    Template(std::sync::Arc<super::log_template::LogTemplate>),
}

impl std::fmt::Display for ConnectionLogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectionLogFormat::Fields => f.write_str("fields"),
            ConnectionLogFormat::Haproxy => f.write_str("haproxy"),
            ConnectionLogFormat::Template(t) => write!(f, "{:?}", t.source),
        }
    }
}

/// `connection_log_format`: `fields`, `haproxy`, or a template.
fn connection_log_format(raw: Option<&str>) -> Result<ConnectionLogFormat, KeyError> {
    Ok(match raw {
        None | Some("fields") => ConnectionLogFormat::Fields,
        Some("haproxy") => ConnectionLogFormat::Haproxy,
        Some(t) if t.contains('{') => ConnectionLogFormat::Template(std::sync::Arc::new(
            super::log_template::LogTemplate::parse(t)
                .map_err(|m| key_err("connection_log_format", m))?,
        )),
        Some(other) => {
            return Err(key_err(
                "connection_log_format",
                format!("{other:?} is not \"fields\", \"haproxy\" or a template naming fields as {{client}}, {{sni}}, {{ms}}"),
            ))
        }
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Compact,
    Json,
}

/// `log_target`: where log lines go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LogTarget {
    /// Standard error, in `log_format`.
    #[default]
    Stderr,
    /// journald's native protocol: a datagram per line to its socket.
    Journald(PathBuf),
    /// RFC 5424 syslog messages.
    Syslog(SyslogAddress),
}

/// Where syslog messages go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyslogAddress {
    /// A local socket (`/dev/log`): one datagram per message.
    Unix(PathBuf),
    /// One datagram per message.
    Udp(SocketAddr),
    /// A stream, each message framed by its length (RFC 6587 octet counting).
    Tcp(SocketAddr),
}

/// journald's socket, where systemd puts it.
pub const JOURNALD_SOCKET: &str = "/run/systemd/journal/socket";
/// The local syslog daemon's socket.
pub const SYSLOG_SOCKET: &str = "/dev/log";

impl LogTarget {
    /// `stderr`, `journald` or `syslog`.
    pub fn kind(&self) -> &'static str {
        match self {
            LogTarget::Stderr => "stderr",
            LogTarget::Journald(_) => "journald",
            LogTarget::Syslog(_) => "syslog",
        }
    }
}

impl std::fmt::Display for LogTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogTarget::Stderr => f.write_str("stderr"),
            LogTarget::Journald(p) => write!(f, "journald ({})", p.display()),
            LogTarget::Syslog(SyslogAddress::Unix(p)) => write!(f, "syslog ({})", p.display()),
            LogTarget::Syslog(SyslogAddress::Udp(a)) => write!(f, "syslog (udp://{a})"),
            LogTarget::Syslog(SyslogAddress::Tcp(a)) => write!(f, "syslog (tcp://{a})"),
        }
    }
}

/// `log_target`, with `log_address` where it goes (a socket path, or for syslog
/// `udp://HOST:PORT` or `tcp://HOST:PORT`, IP literals only).
fn log_target(target: Option<&str>, address: Option<&str>) -> Result<LogTarget, KeyError> {
    let path = |default: &str| PathBuf::from(address.unwrap_or(default));
    match target.unwrap_or("stderr") {
        "stderr" if address.is_some() => Err(key_err(
            "log_address",
            "only for log_target = \"journald\" or \"syslog\"",
        )),
        "stderr" => Ok(LogTarget::Stderr),
        "journald" if address.is_some_and(|a| !a.starts_with('/')) => Err(key_err(
            "log_address",
            "journald is reached by a socket path, such as /run/systemd/journal/socket",
        )),
        "journald" => Ok(LogTarget::Journald(path(JOURNALD_SOCKET))),
        "syslog" => {
            let a = address.unwrap_or(SYSLOG_SOCKET);
            let net = |rest: &str| {
                rest.parse().map_err(|_| {
                    key_err(
                        "log_address",
                        format!("{a:?} is not udp://IP:PORT or tcp://IP:PORT (IPv6 in brackets)"),
                    )
                })
            };
            Ok(LogTarget::Syslog(
                if let Some(rest) = a.strip_prefix("udp://") {
                    SyslogAddress::Udp(net(rest)?)
                } else if let Some(rest) = a.strip_prefix("tcp://") {
                    SyslogAddress::Tcp(net(rest)?)
                } else if a.starts_with('/') {
                    SyslogAddress::Unix(PathBuf::from(a))
                } else {
                    return Err(key_err(
                        "log_address",
                        format!(
                            "{a:?}: give a socket path (/dev/log), udp://IP:PORT or tcp://IP:PORT"
                        ),
                    ));
                },
            ))
        }
        other => Err(key_err(
            "log_target",
            format!("{other:?} is not \"stderr\", \"journald\" or \"syslog\""),
        )),
    }
}

impl RawConfig {
    /// The global keys, in a configuration whose frontends are still to be added.
    pub(super) fn validate_globals(
        &self,
        origin: Origin,
        base: Option<&Path>,
    ) -> Result<Config, KeyError> {
        let workers = match self.workers.unwrap_or(0) {
            0 => std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            n if n > 1024 => return Err(key_err("workers", format!("{n} is more than 1024"))),
            n => n,
        };
        let max_connections = self.max_connections.unwrap_or(defaults::MAX_CONNECTIONS);
        if !(1..=MAX_CONNECTIONS_LIMIT).contains(&max_connections) {
            return Err(key_err(
                "max_connections",
                format!("{max_connections} is not in 1..={MAX_CONNECTIONS_LIMIT}"),
            ));
        }
        let shutdown_grace = duration_or(
            "shutdown_grace",
            self.shutdown_grace.as_deref(),
            defaults::SHUTDOWN_GRACE,
        )?;
        if shutdown_grace > MAX_SHUTDOWN_GRACE {
            return Err(key_err(
                "shutdown_grace",
                "at most 1h (contrib/shuck.service's TimeoutStopSec is set above it)",
            ));
        }
        let reload_timeout = duration_or(
            "reload_timeout",
            self.reload_timeout.as_deref(),
            defaults::RELOAD_TIMEOUT,
        )?;
        if reload_timeout.is_zero() {
            return Err(key_err("reload_timeout", "must be more than 0s"));
        }
        let upgrade_confirm = duration_or(
            "upgrade_confirm",
            self.upgrade_confirm.as_deref(),
            defaults::UPGRADE_CONFIRM,
        )?;
        let upgrade_timeout = duration_or(
            "upgrade_timeout",
            self.upgrade_timeout.as_deref(),
            defaults::UPGRADE_TIMEOUT,
        )?;
        if upgrade_timeout.is_zero() {
            return Err(key_err("upgrade_timeout", "must be more than 0s"));
        }
        let log_queue_lines = self.log_queue_lines.unwrap_or(defaults::LOG_QUEUE_LINES);
        if !(16..=1_000_000).contains(&log_queue_lines) {
            return Err(key_err(
                "log_queue_lines",
                format!("{log_queue_lines} is not in 16..=1000000"),
            ));
        }
        let certificate_expiry_warning = duration_or(
            "certificate_expiry_warning",
            self.certificate_expiry_warning.as_deref(),
            defaults::CERTIFICATE_EXPIRY_WARNING,
        )?;
        self.check_companion_keys()?;
        let log_level = self.log_level.clone().unwrap_or_else(|| "info".into());
        if log_level.parse::<tracing::Level>().is_err() {
            return Err(key_err(
                "log_level",
                format!("{log_level:?} is not one of error, warn, info, debug, trace"),
            ));
        }
        let metrics_listen = match &self.metrics_listen {
            None => None,
            Some(a) => Some(a.parse::<SocketAddr>().map_err(|_| {
                key_err(
                    "metrics_listen",
                    format!("{a:?} is not an IP:port address (IPv6 as [::1]:9100)"),
                )
            })?),
        };
        let resolvers = self.validate_resolvers()?;
        let overload_threshold = self
            .overload_threshold
            .unwrap_or(defaults::OVERLOAD_THRESHOLD);
        if !(0.05..=1.0).contains(&overload_threshold) {
            return Err(key_err(
                "overload_threshold",
                format!("{overload_threshold} is not a share from 0.05 to 1.0 (1.0: never shed)"),
            ));
        }
        Ok(Config {
            origin,
            workers,
            pin_cpus: self.pin_cpus.unwrap_or(false),
            max_connections,
            shutdown_grace,
            reload_timeout,
            upgrade_confirm,
            upgrade_timeout,
            log_format: self.log_format.unwrap_or_default(),
            log_target: log_target(self.log_target.as_deref(), self.log_address.as_deref())?,
            log_queue_lines,
            log_level,
            log_connections: self.log_connections.unwrap_or(false),
            connection_log_format: connection_log_format(self.connection_log_format.as_deref())?,
            metrics_listen,
            certificate_expiry_warning,
            user: self.user.clone(),
            group: self.group.clone(),
            allow_root: self.allow_root.unwrap_or(false),
            resolvers,
            dns_allow_special_addresses: self.dns_allow_special_addresses.unwrap_or(false),
            overload_threshold,
            watch_certificates: self.watch_certificates.unwrap_or(true),
            metrics_per_worker: self.metrics_per_worker.unwrap_or(false),
            admin_socket: self
                .admin_socket
                .clone()
                .map(|p| super::resolve_path(base, p)),
            admin_group: self.admin_group.clone(),
            pkcs11: self.pkcs11(base)?,
            redirect: Vec::new(),
            state_dir: self.state_dir(base),
            frontends: Vec::new(),
        })
    }
}

impl RawConfig {
    /// `state_dir`, or its default.
    fn state_dir(&self, base: Option<&Path>) -> PathBuf {
        self.state_dir.clone().map_or_else(
            || PathBuf::from(super::acme::STATE_DIR),
            |p| super::resolve_path(base, p),
        )
    }

    /// `pkcs11_module` and `pkcs11_signers`.
    fn pkcs11(&self, base: Option<&Path>) -> Result<super::certificates::Pkcs11Settings, KeyError> {
        let signers = self.pkcs11_signers.unwrap_or(2);
        if !(1..=64).contains(&signers) {
            return Err(key_err(
                "pkcs11_signers",
                format!("{signers}: from 1 to 64 signer threads per token key"),
            ));
        }
        Ok(super::certificates::Pkcs11Settings {
            module: self
                .pkcs11_module
                .clone()
                .map(|p| super::resolve_path(base, p)),
            signers,
        })
    }

    /// Keys that mean nothing alone: `group` without `user`, `admin_group` without
    /// `admin_socket`.
    fn check_companion_keys(&self) -> Result<(), KeyError> {
        if self.group.is_some() && self.user.is_none() {
            return Err(key_err("group", "needs user (the user to run as)"));
        }
        if self.admin_group.is_some() && self.admin_socket.is_none() {
            return Err(key_err(
                "admin_group",
                "needs admin_socket (the socket whose group it is)",
            ));
        }
        Ok(())
    }
}

/// The metrics address may not also be a frontend's (port 0 picks a fresh port each time).
pub(super) fn check_metrics_listen_free(
    metrics: Option<SocketAddr>,
    frontends: &[Frontend],
) -> Result<(), KeyError> {
    if let Some(m) = metrics.filter(|m| m.port() != 0) {
        if let Some(fe) = frontends.iter().find(|f| f.listen.addrs.contains(&m)) {
            return Err(key_err(
                "metrics_listen",
                format!("{m} is also a listen address of frontend {:?}", fe.name),
            ));
        }
    }
    Ok(())
}

/// One global key: how it shows in `running.toml` and `shuck check`, and whether a reload
/// applies it. The one declaration the reload's notes and `shuck check` read.
pub struct GlobalKey {
    pub key: &'static str,
    /// Whether a reload applies it (otherwise it is named as needing a restart).
    pub applies: Applies,
    pub recorded: Recorded,
    pub value: fn(&Config) -> String,
}

/// Whether `running.toml` keeps a global key, for `shuck check` to compare: not the keys
/// serve's flags may set, which `shuck check` cannot see, nor those that act once at start
/// (privileges).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    Yes,
    No,
}

const fn key(
    key: &'static str,
    applies: Applies,
    recorded: Recorded,
    value: fn(&Config) -> String,
) -> GlobalKey {
    GlobalKey {
        key,
        applies,
        recorded,
        value,
    }
}

fn duration(d: std::time::Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// Every global key. `log_level` is applied by the `shuck` binary's reload (the log filter
/// belongs to the process's subscriber), not by the engine.
pub const GLOBAL_KEYS: &[GlobalKey] = &[
    key("workers", Applies::Restart, Recorded::Yes, |c| {
        c.workers.to_string()
    }),
    key("pin_cpus", Applies::Restart, Recorded::Yes, |c| {
        c.pin_cpus.to_string()
    }),
    key("max_connections", Applies::Reload, Recorded::Yes, |c| {
        c.max_connections.to_string()
    }),
    key("shutdown_grace", Applies::Reload, Recorded::Yes, |c| {
        duration(c.shutdown_grace)
    }),
    key("reload_timeout", Applies::Reload, Recorded::Yes, |c| {
        duration(c.reload_timeout)
    }),
    key("upgrade_confirm", Applies::Reload, Recorded::Yes, |c| {
        duration(c.upgrade_confirm)
    }),
    key("upgrade_timeout", Applies::Reload, Recorded::Yes, |c| {
        duration(c.upgrade_timeout)
    }),
    key("log_format", Applies::Restart, Recorded::No, |c| {
        format!("{:?}", c.log_format)
    }),
    key("log_target", Applies::Restart, Recorded::Yes, |c| {
        c.log_target.kind().to_string()
    }),
    key("log_address", Applies::Restart, Recorded::Yes, |c| {
        c.log_target.to_string()
    }),
    key("log_queue_lines", Applies::Restart, Recorded::Yes, |c| {
        c.log_queue_lines.to_string()
    }),
    key("log_level", Applies::Reload, Recorded::No, |c| {
        c.log_level.clone()
    }),
    key("log_connections", Applies::Reload, Recorded::No, |c| {
        c.log_connections.to_string()
    }),
    key("overload_threshold", Applies::Reload, Recorded::Yes, |c| {
        c.overload_threshold.to_string()
    }),
    key(
        "connection_log_format",
        Applies::Reload,
        Recorded::Yes,
        |c| c.connection_log_format.to_string(),
    ),
    key("metrics_listen", Applies::Restart, Recorded::Yes, |c| {
        format!("{:?}", c.metrics_listen)
    }),
    key("redirect", Applies::Restart, Recorded::Yes, |c| {
        format!("{:?}", c.redirect)
    }),
    key(
        "certificate_expiry_warning",
        Applies::Reload,
        Recorded::Yes,
        |c| duration(c.certificate_expiry_warning),
    ),
    key("state_dir", Applies::Restart, Recorded::Yes, |c| {
        c.state_dir.display().to_string()
    }),
    // Privileges are dropped once, at start: a reload runs as the user already.
    key("user", Applies::Restart, Recorded::No, |c| {
        format!("{:?}", c.user)
    }),
    key("group", Applies::Restart, Recorded::No, |c| {
        format!("{:?}", c.group)
    }),
    key("allow_root", Applies::Restart, Recorded::No, |c| {
        c.allow_root.to_string()
    }),
    key("resolvers", Applies::Reload, Recorded::Yes, |c| {
        format!("{:?}", c.resolvers)
    }),
    key(
        "dns_allow_special_addresses",
        Applies::Reload,
        Recorded::Yes,
        |c| c.dns_allow_special_addresses.to_string(),
    ),
    key("watch_certificates", Applies::Reload, Recorded::Yes, |c| {
        c.watch_certificates.to_string()
    }),
    key("metrics_per_worker", Applies::Reload, Recorded::Yes, |c| {
        c.metrics_per_worker.to_string()
    }),
    // The socket is made once, at start, with the privileges to give it its group.
    key("admin_socket", Applies::Restart, Recorded::Yes, |c| {
        format!("{:?}", c.admin_socket)
    }),
    key("pkcs11_module", Applies::Reload, Recorded::Yes, |c| {
        format!("{:?}", c.pkcs11.module)
    }),
    key("pkcs11_signers", Applies::Reload, Recorded::Yes, |c| {
        c.pkcs11.signers.to_string()
    }),
    key("admin_group", Applies::Restart, Recorded::Yes, |c| {
        format!("{:?}", c.admin_group)
    }),
];

/// DNS servers per process at most: each is asked in turn when the one before fails.
const MAX_RESOLVERS: usize = 8;

impl RawConfig {
    /// `resolvers`: the DNS servers that host-name backends are looked up with (empty: the
    /// system's, from /etc/resolv.conf).
    fn validate_resolvers(&self) -> Result<Vec<SocketAddr>, KeyError> {
        let list = self.resolvers.clone().unwrap_or_default();
        if list.len() > MAX_RESOLVERS {
            return Err(key_err(
                "resolvers",
                format!("{} servers: at most {MAX_RESOLVERS}", list.len()),
            ));
        }
        list.iter()
            .map(|r| {
                r.parse::<SocketAddr>()
                    .or_else(|_| {
                        r.parse::<std::net::IpAddr>()
                            .map(|ip| SocketAddr::new(ip, 53))
                    })
                    .map_err(|_| {
                        key_err(
                            "resolvers",
                            format!("{r:?} is not an IP address or IP:port (IPv6 as [::1]:53)"),
                        )
                    })
            })
            .collect()
    }
}

/// Whether a reload applies the global key `key` (None: no such key).
pub fn applies(key: &str) -> Option<Applies> {
    GLOBAL_KEYS.iter().find(|k| k.key == key).map(|k| k.applies)
}

/// The global keys whose value differs in `new` and that a reload cannot apply.
pub fn needing_a_restart(old: &Config, new: &Config) -> Vec<&'static str> {
    GLOBAL_KEYS
        .iter()
        .filter(|k| k.applies == Applies::Restart && (k.value)(old) != (k.value)(new))
        .map(|k| k.key)
        .collect()
}
