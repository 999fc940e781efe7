//! The validated frontend: its name and its sections, each a typed value, and the one
//! declaration of how a change to each section takes effect.
//!
//! A reload compares the running frontend with the new one section by section (derived
//! `PartialEq`), and what it does with a difference comes from the section's [`Section`]
//! declaration, never from a list of fields kept elsewhere: a key added to a section is compared,
//! applied and shown by `shuck check` without anything else to remember. The sections are listed
//! once, in `frontend_sections!` below, which also declares the struct, so a section cannot be
//! left out of the comparison.

use std::path::PathBuf;

use super::acme::Acme;
use super::admission::Admission;
use super::backend::Backends;
use super::certificates::{Certificates, OcspMode};
use super::client_auth::ClientAuthSettings;
use super::listen::Listen;
use super::proxy::Proxy;
use super::routes::Routes;
pub use super::section::{Applies, OnChange, Section, SectionVisitor};
use super::sessions::{Resumption, SessionStoreSettings};
use super::timeouts::Timeouts;
use super::tls::{RecordLayerSettings, Tls};

macro_rules! frontend_sections {
    ($($(#[$doc:meta])* $field:ident: $ty:ty,)*) => {
        /// A validated frontend.
        #[derive(Debug, Clone)]
        pub struct Frontend {
            pub name: String,
            /// Whether the file named it (unnamed frontends are named by position, so a reload
            /// cannot tell one from another that took its place).
            pub named: bool,
            /// The global `state_dir` (ACME state and fetched staples are kept there).
            pub state_dir: PathBuf,
            $($(#[$doc])* pub $field: $ty,)*
        }

        impl Frontend {
            /// Shows `visitor` each section of `self` beside the same section of `new`.
            pub fn zip_sections(&self, new: &mut Frontend, visitor: &mut impl SectionVisitor) {
                $(visitor.visit(&self.$field, &mut new.$field);)*
            }
        }

        /// Every section's key and how a change to it applies, in declaration order.
        pub const SECTIONS: &[(&str, OnChange)] =
            &[$((<$ty as Section>::KEY, <$ty as Section>::ON_CHANGE),)*];
    };
}

frontend_sections! {
    /// Addresses, `backlog`, `defer_accept`.
    listen: Listen,
    /// Where decrypted connections go and how the pool picks and avoids backends.
    backend: Backends,
    /// Certificate files (or self-signed, or ACME's) and the SNI fallbacks.
    certificates: Certificates,
    /// The ACME settings the renewal task runs with, if the certificates come from ACME.
    acme: AcmeSettings,
    /// Where OCSP staples come from.
    ocsp: OcspMode,
    /// Versions, cipher suites, groups, ALPN.
    tls: Tls,
    /// Who protects records after the handshake: `record_layer`, `ktls`.
    record_layer: RecordLayerSettings,
    timeouts: Timeouts,
    /// Who may connect and how much: allow and deny lists, per-client limits.
    admission: Admission,
    /// PROXY headers sent to the backend and accepted from a balancer.
    proxy_protocol: Proxy,
    client_auth: ClientAuthSettings,
    /// The session cache and tickets.
    resumption: Resumption,
    /// A store shared by hosts for sessions by ID (Redis).
    session_store: Option<SessionStoreSettings>,
    /// Other backends by negotiated SNI and ALPN.
    route: Routes,
}

/// `acme = { … }`: the settings ACME renewal runs with.
#[derive(serde::Serialize, Debug, Clone, PartialEq)]
pub struct AcmeSettings(pub Option<Box<Acme>>);

impl Section for AcmeSettings {
    const KEY: &'static str = "acme";
    const ON_CHANGE: OnChange = OnChange::RestartFrontend(
        "the renewal task keeps the settings it started with (acme, on_demand, and acme_store or acme_store_key when the fleet shares it), and another name list or CA would serve a temporary certificate nobody orders",
    );
}

impl Section for OcspMode {
    const KEY: &'static str = "ocsp";
    const ON_CHANGE: OnChange =
        OnChange::Restart("its fetch tasks follow the settings shuck started with");
}

impl Section for Option<SessionStoreSettings> {
    const KEY: &'static str = "session_store";
    const ON_CHANGE: OnChange = OnChange::NewConnections;
}

/// One section that differs between two frontends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SectionChange {
    pub key: &'static str,
    pub on_change: OnChange,
}

impl Frontend {
    /// The sections that differ in `new`, each with how its change applies.
    pub fn changes(&self, new: &Frontend) -> Vec<SectionChange> {
        struct Diff(Vec<SectionChange>);
        impl SectionVisitor for Diff {
            fn visit<S: Section>(&mut self, old: &S, new: &mut S) {
                if old != new {
                    self.0.push(SectionChange {
                        key: S::KEY,
                        on_change: S::ON_CHANGE,
                    });
                }
            }
        }
        let mut diff = Diff(Vec::new());
        self.zip_sections(&mut new.clone(), &mut diff);
        diff.0
    }

    /// `new` with the sections a reload cannot apply put back as they run (`self`).
    #[must_use]
    pub fn keeping_what_needs_a_restart(&self, mut new: Frontend) -> Frontend {
        struct Keep;
        impl SectionVisitor for Keep {
            fn visit<S: Section>(&mut self, old: &S, new: &mut S) {
                if !matches!(S::ON_CHANGE, OnChange::NewConnections) {
                    new.clone_from(old);
                }
            }
        }
        self.zip_sections(&mut new, &mut Keep);
        new.state_dir.clone_from(&self.state_dir);
        new
    }

    /// Each section's key and value, as the TOML values `running.toml` keeps (`config::ser`:
    /// durations as written, TLS parameters by name, store URLs without their password).
    pub fn section_values(&self) -> Vec<(&'static str, toml::Value)> {
        struct Values(Vec<(&'static str, toml::Value)>);
        impl SectionVisitor for Values {
            fn visit<S: Section>(&mut self, old: &S, _: &mut S) {
                self.0.push((S::KEY, super::ser::value_of(old)));
            }
        }
        let mut values = Values(Vec::new());
        self.zip_sections(&mut self.clone(), &mut values);
        values.0
    }

    /// The ACME settings, if the certificates come from ACME.
    pub fn acme(&self) -> Option<&Acme> {
        self.acme.0.as_deref()
    }

    /// Where this frontend's fleet shares its ACME state: `acme_store`, else the session store.
    pub fn fleet_store(&self) -> Option<super::AcmeStore> {
        let acme = self.acme()?;
        acme.store.clone().or_else(|| {
            self.session_store.as_ref().map(|s| super::AcmeStore {
                url: s.url.clone(),
                key: s.key.clone(),
            })
        })
    }

    /// Whether the frontend has tasks of its own (ACME renewal, OCSP fetching) that start with
    /// the process: adding or removing it takes a restart.
    pub fn runs_tasks(&self) -> bool {
        self.acme.0.is_some() || self.ocsp == OcspMode::Fetch
    }
}

/// How a change to the section called `key` applies, from [`SECTIONS`].
pub fn on_change_of(key: &str) -> Option<OnChange> {
    SECTIONS.iter().find(|(k, _)| *k == key).map(|(_, o)| *o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_keys_are_unique() {
        let mut keys: Vec<&str> = SECTIONS.iter().map(|(k, _)| *k).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), SECTIONS.len(), "{SECTIONS:?}");
    }
}
