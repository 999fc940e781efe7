//! `shuck ctl`'s commands: parsed by clap on the command line (help, completion, errors before
//! anything is sent) and again by the server from the request line, so both read one grammar.
//! [`CtlCommand::words`] writes a parsed command back as the words of its request line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Where `shuck ctl` looks without `--socket`: what the Debian package configures.
pub(crate) const DEFAULT_SOCKET: &str = "/run/shuck/admin.sock";

#[derive(Debug, Clone, Args)]
pub(crate) struct CtlArgs {
    /// The admin socket (`admin_socket` in the configuration).
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET, global = true)]
    pub socket: PathBuf,
    /// Print the answer as JSON, for programs (exit codes as without).
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// A request line as the server parses it: the words of one command.
#[derive(Debug, Parser)]
#[command(name = "ctl", no_binary_name = true, disable_help_flag = true)]
pub(crate) struct RequestLine {
    #[command(subcommand)]
    pub command: CtlCommand,
}

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum CtlCommand {
    /// Show what runs: frontends, routes, backends, certificates, limits, open connections.
    #[command(subcommand)]
    Show(Show),
    /// Take a backend out of service or bring it back, or change its weight. BACKEND is
    /// FRONTEND/NAME or FRONTEND/ROUTE/NAME, NAME as the configuration writes it (a host
    /// name: all its addresses; NAME@ADDRESS: one). Kept across reloads, and across restarts
    /// with a state_dir.
    #[command(subcommand)]
    Backend(BackendAction),
    /// Close relayed connections (close_notify; an abort when bytes wait for a peer that
    /// does not read).
    #[command(subcommand)]
    Connections(ConnectionsAction),
    /// Add, replace or remove a frontend's certificates while it runs: checked as a configured
    /// one is (chain, key, names), served to new handshakes at once, kept in state_dir across
    /// reloads and restarts until removed.
    #[command(subcommand)]
    Cert(CertAction),
    /// OCSP staples.
    #[command(subcommand)]
    Ocsp(OcspAction),
    /// Reload the configuration, as SIGHUP does; the answer is the reload's report: what
    /// changed, what needs a restart, or why nothing was applied.
    Reload,
    /// Check the configuration file as `shuck check` does, against what runs.
    Check,
    /// Upgrade to the binary now installed, as SIGUSR2 does; answers once the new process is
    /// confirmed (after upgrade_confirm), or why it was rolled back.
    Upgrade,
}

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum Show {
    /// Each frontend: addresses, open connections, handshakes.
    Frontends,
    /// Each route: its server names, ALPN, backends.
    Routes(OneFrontend),
    /// Each backend: address, weight, state, health, connects.
    Backends(OneFrontend),
    /// Each certificate served: file, names, expiry, staple.
    Certificates(OneFrontend),
    /// max_connections, open connections, descriptors, each frontend's admission rules.
    Limits,
    /// Open relayed connections: client, server name, ALPN, version, backend, bytes, age.
    Connections {
        #[command(flatten)]
        filter: Filter,
        /// Describe at most this many (the count says how many matched).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=10_000))]
        limit: u32,
    },
}

#[derive(Debug, Clone, Args)]
pub(crate) struct OneFrontend {
    /// Only this frontend.
    #[arg(long, value_name = "NAME")]
    pub frontend: Option<String>,
}

#[derive(Debug, Clone, Default, Args)]
pub(crate) struct Filter {
    /// Only this frontend's.
    #[arg(long, value_name = "NAME")]
    pub frontend: Option<String>,
    /// Only clients in this network (an address alone: that address).
    #[arg(long, value_name = "CIDR")]
    pub client: Option<String>,
    /// Only connections that asked for this server name.
    #[arg(long, value_name = "NAME")]
    pub sni: Option<String>,
    /// Only connections relayed to this backend (NAME as written, a host name standing for
    /// its addresses, or NAME@ADDRESS).
    #[arg(long, value_name = "NAME")]
    pub backend: Option<String>,
}

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum BackendAction {
    /// No new connections; open ones finish.
    Drain { backend: String },
    /// No new connections; open ones are closed after shutdown_grace.
    Disable { backend: String },
    /// Back in service (and back to no state kept for it).
    Enable { backend: String },
    /// Its share of new connections, 1 to 100, in place of the configured weight.
    Weight {
        backend: String,
        #[arg(value_parser = clap::value_parser!(u32).range(1..=100))]
        weight: u32,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum CertAction {
    /// Add a certificate: its chain (leaf first) and key, from --cert and --key (or one
    /// bundle in --cert), else as PEM on standard input. Named by --name, else by its first
    /// DNS name.
    Add {
        frontend: String,
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        files: PemFiles,
    },
    /// Replace a certificate added before (NAME as `cert list` shows it).
    Replace {
        frontend: String,
        name: String,
        #[command(flatten)]
        files: PemFiles,
    },
    /// Remove a certificate added before.
    Remove { frontend: String, name: String },
    /// The certificates served: file, names, expiry, staple, and whether added here.
    List(OneFrontend),
}

/// Where `shuck ctl` reads a certificate from (it sends the PEM; the server never opens a
/// file a client names).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct PemFiles {
    /// The chain, leaf first (and the key, if it is a bundle).
    #[arg(long, value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// The private key, when not in --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
}

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum OcspAction {
    /// Load the frontend's certificates and OCSP staples again now (the .ocsp files beside
    /// them); with ocsp = "fetch", ask the responders now too.
    Refresh { frontend: String },
}

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum ConnectionsAction {
    /// Close the connections the filter picks (at least one of its options is required).
    Close {
        #[command(flatten)]
        filter: Filter,
    },
}

impl Filter {
    fn words(&self, out: &mut Vec<String>) {
        for (flag, v) in [
            ("--frontend", &self.frontend),
            ("--client", &self.client),
            ("--sni", &self.sni),
            ("--backend", &self.backend),
        ] {
            if let Some(v) = v {
                out.extend([flag.to_string(), v.clone()]);
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.frontend.is_none()
            && self.client.is_none()
            && self.sni.is_none()
            && self.backend.is_none()
    }
}

impl CtlCommand {
    /// The command as the words of its request line.
    pub(crate) fn words(&self) -> Vec<String> {
        let mut w: Vec<String> = Vec::new();
        let one = |w: &mut Vec<String>, f: &OneFrontend| {
            if let Some(f) = &f.frontend {
                w.extend(["--frontend".into(), f.clone()]);
            }
        };
        match self {
            CtlCommand::Show(s) => {
                w.push("show".into());
                match s {
                    Show::Frontends => w.push("frontends".into()),
                    Show::Routes(f) => {
                        w.push("routes".into());
                        one(&mut w, f);
                    }
                    Show::Backends(f) => {
                        w.push("backends".into());
                        one(&mut w, f);
                    }
                    Show::Certificates(f) => {
                        w.push("certificates".into());
                        one(&mut w, f);
                    }
                    Show::Limits => w.push("limits".into()),
                    Show::Connections { filter, limit } => {
                        w.push("connections".into());
                        filter.words(&mut w);
                        w.extend(["--limit".into(), limit.to_string()]);
                    }
                }
            }
            CtlCommand::Backend(a) => {
                w.push("backend".into());
                match a {
                    BackendAction::Drain { backend } => w.extend(["drain".into(), backend.clone()]),
                    BackendAction::Disable { backend } => {
                        w.extend(["disable".into(), backend.clone()]);
                    }
                    BackendAction::Enable { backend } => {
                        w.extend(["enable".into(), backend.clone()]);
                    }
                    BackendAction::Weight { backend, weight } => {
                        w.extend(["weight".into(), backend.clone(), weight.to_string()]);
                    }
                }
            }
            CtlCommand::Connections(ConnectionsAction::Close { filter }) => {
                w.extend(["connections".into(), "close".into()]);
                filter.words(&mut w);
            }
            CtlCommand::Cert(a) => {
                w.push("cert".into());
                match a {
                    CertAction::Add { frontend, name, .. } => {
                        w.extend(["add".into(), frontend.clone()]);
                        if let Some(n) = name {
                            w.extend(["--name".into(), n.clone()]);
                        }
                    }
                    CertAction::Replace { frontend, name, .. } => {
                        w.extend(["replace".into(), frontend.clone(), name.clone()]);
                    }
                    CertAction::Remove { frontend, name } => {
                        w.extend(["remove".into(), frontend.clone(), name.clone()]);
                    }
                    CertAction::List(f) => {
                        w.push("list".into());
                        one(&mut w, f);
                    }
                }
            }
            CtlCommand::Ocsp(OcspAction::Refresh { frontend }) => {
                w.extend(["ocsp".into(), "refresh".into(), frontend.clone()]);
            }
            CtlCommand::Reload => w.push("reload".into()),
            CtlCommand::Check => w.push("check".into()),
            CtlCommand::Upgrade => w.push("upgrade".into()),
        }
        w
    }

    /// Whether it changes something (and so is logged by the server).
    pub(crate) fn changes(&self) -> bool {
        !matches!(
            self,
            CtlCommand::Show(_) | CtlCommand::Check | CtlCommand::Cert(CertAction::List(_))
        )
    }

    /// The files whose PEM goes with the request, when it takes a certificate.
    pub(crate) fn pem_files(&self) -> Option<&PemFiles> {
        match self {
            CtlCommand::Cert(CertAction::Add { files, .. } | CertAction::Replace { files, .. }) => {
                Some(files)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command the client parses comes out of its words as the same command.
    #[test]
    fn a_command_reads_back_from_its_words() {
        let lines = [
            "show frontends",
            "show backends --frontend web",
            "show connections --client 10.0.0.0/8 --sni a.test --limit 5",
            "backend drain web/api/10.0.0.1:80",
            "backend weight web/b:1 7",
            "connections close --backend b:1",
            "cert add web --name www",
            "cert replace web www",
            "cert remove web www",
            "cert list --frontend web",
            "ocsp refresh web",
            "reload",
            "upgrade",
        ];
        for line in lines {
            let parsed = RequestLine::try_parse_from(line.split_whitespace()).expect(line);
            let again = parsed.command.words().join(" ");
            let reparsed = RequestLine::try_parse_from(again.split_whitespace()).expect(&again);
            assert_eq!(
                format!("{:?}", parsed.command),
                format!("{:?}", reparsed.command)
            );
        }
        assert!(RequestLine::try_parse_from(["backend", "weight", "web/b:1", "0"]).is_err());
    }
}
