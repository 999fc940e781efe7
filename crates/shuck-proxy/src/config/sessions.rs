//! How sessions are shared beyond one process: ticket keys from files a fleet shares.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{key_err, resolve_paths, KeyError, RawFrontend};

/// How a ticket key file is read (`session_ticket_key_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TicketKeyFormat {
    /// Raw bytes: nginx; base64 lines: HAProxy.
    #[default]
    Auto,
    /// nginx `ssl_session_ticket_key`: one raw 48- or 80-byte key per file, the first encrypts.
    Nginx,
    /// HAProxy `tls-ticket-keys`: base64 lines; of the last three, the second-to-last encrypts.
    Haproxy,
}

impl std::fmt::Display for TicketKeyFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TicketKeyFormat::Auto => "auto",
            TicketKeyFormat::Nginx => "nginx",
            TicketKeyFormat::Haproxy => "haproxy",
        })
    }
}

/// `session_ticket_keys`: the files, read when TLS is loaded (start, reload, `shuck check`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketKeyFiles {
    pub paths: Vec<PathBuf>,
    pub format: TicketKeyFormat,
}

impl RawFrontend {
    pub(super) fn validate_ticket_keys(
        &self,
        base: Option<&Path>,
        tickets_on: bool,
    ) -> Result<Option<TicketKeyFiles>, KeyError> {
        let paths = resolve_paths(base, self.session_ticket_keys.as_ref());
        if paths.is_empty() {
            if self.session_ticket_key_format.is_some() {
                return Err(key_err(
                    "session_ticket_key_format",
                    "needs session_ticket_keys",
                ));
            }
            return Ok(None);
        }
        if !tickets_on {
            return Err(key_err(
                "session_ticket_keys",
                "needs session_tickets = true (tickets are off)",
            ));
        }
        Ok(Some(TicketKeyFiles {
            paths,
            format: self.session_ticket_key_format.unwrap_or_default(),
        }))
    }
}
