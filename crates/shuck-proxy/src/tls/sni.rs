//! Certificate selection by SNI: exact names, one-label wildcards, a default, and per name the
//! best key type the client can verify (ECDSA before RSA).
//!
//! The tables are built once and only read during handshakes, so workers share them without locks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::certs::{LoadedCert, ServedCert};
use crate::certs::acme::on_demand::OnDemandCerts;
use crate::config::SniFallback;

/// Certificates that serve one name, most preferred first.
type Candidates = Vec<Arc<CertifiedKey>>;

#[derive(Debug)]
pub(crate) struct SniResolver {
    exact: HashMap<String, Candidates>,
    /// Keyed by the parent domain: `*.example.com` is stored under `example.com`.
    wildcard: HashMap<String, Candidates>,
    default: Candidates,
    unknown_sni: SniFallback,
    missing_sni: SniFallback,
    /// By certified-key address: what to tell backends about each certificate.
    served: HashMap<usize, Arc<ServedCert>>,
    /// The certified keys (by address) whose private key is in a PKCS#11 token.
    in_token: std::collections::HashSet<usize>,
    /// With `on_demand`: certificates issued for names the others do not cover.
    on_demand: Option<Arc<OnDemandCerts>>,
}

impl SniResolver {
    /// `certs` in configuration order; `default_index` picks the default certificate's name group
    /// (the first certificate when not configured).
    pub(crate) fn new(
        certs: &[LoadedCert],
        default_index: usize,
        unknown_sni: SniFallback,
        missing_sni: SniFallback,
    ) -> SniResolver {
        let mut sorted: Vec<&LoadedCert> = certs.iter().collect();
        // Stable sort: among equal key types, configuration order wins.
        sorted.sort_by_key(|c| c.key.preference());
        let mut exact: HashMap<String, Candidates> = HashMap::new();
        let mut wildcard: HashMap<String, Candidates> = HashMap::new();
        for c in &sorted {
            for name in &c.names {
                let (table, key) = match name.strip_prefix("*.") {
                    Some(parent) => (&mut wildcard, parent.to_string()),
                    None => (&mut exact, name.clone()),
                };
                let list = table.entry(key).or_default();
                if !list.iter().any(|k| Arc::ptr_eq(k, &c.certified)) {
                    list.push(c.certified.clone());
                }
            }
        }
        // The default serves every key type that shares the default certificate's first name, so a
        // dual ECDSA/RSA default works for old clients too.
        let default_cert = &certs[default_index];
        let mut default: Candidates = default_cert
            .names
            .first()
            .and_then(|n| match n.strip_prefix("*.") {
                Some(parent) => wildcard.get(parent),
                None => exact.get(n),
            })
            .cloned()
            .unwrap_or_default();
        if !default
            .iter()
            .any(|k| Arc::ptr_eq(k, &default_cert.certified))
        {
            default.insert(0, default_cert.certified.clone());
        }
        let served = certs
            .iter()
            .map(|c| (Arc::as_ptr(&c.certified) as usize, c.served.clone()))
            .collect();
        let in_token = certs
            .iter()
            .filter(|c| c.in_token)
            .map(|c| Arc::as_ptr(&c.certified) as usize)
            .collect();
        SniResolver {
            exact,
            wildcard,
            default,
            unknown_sni,
            missing_sni,
            served,
            in_token,
            on_demand: None,
        }
    }

    /// The same, serving the names the certificates do not cover from `on_demand` too.
    #[must_use]
    pub(crate) fn with_on_demand(mut self, on_demand: Option<Arc<OnDemandCerts>>) -> SniResolver {
        self.on_demand = on_demand;
        self
    }

    /// The frontend's on-demand certificates, when it has `on_demand`.
    pub(crate) fn on_demand(&self) -> Option<&Arc<OnDemandCerts>> {
        self.on_demand.as_ref()
    }

    /// Whether an on-demand certificate was issued for `server_name`.
    fn has_on_demand(&self, server_name: Option<&str>) -> bool {
        match (&self.on_demand, server_name) {
            (Some(o), Some(name)) => o.get(name.trim_end_matches('.')).is_some(),
            _ => false,
        }
    }

    /// The on-demand certificate for a name the configured ones do not cover, when one was
    /// issued and can sign with what the client offers.
    fn on_demand_for(&self, hello: &ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let on_demand = self.on_demand.as_ref()?;
        let name = hello.server_name()?;
        if self.lookup(name).is_some() {
            return None;
        }
        let key = on_demand.get(name.trim_end_matches('.'))?;
        key.key
            .choose_scheme(hello.signature_schemes())
            .is_some()
            .then_some(key)
    }

    /// Whether a handshake for `server_name` may sign with a key in a token: one of the
    /// certificates that could serve it has its key there.
    pub(crate) fn may_sign_in_token(&self, server_name: Option<&str>) -> bool {
        !self.in_token.is_empty()
            && self.candidates(server_name).is_some_and(|c| {
                c.iter()
                    .any(|k| self.in_token.contains(&(Arc::as_ptr(k) as usize)))
            })
    }

    /// The candidates for a server name, or `None` when nothing matches.
    pub(crate) fn lookup(&self, name: &str) -> Option<&Candidates> {
        // rustls has already validated and lower-cased the DNS name.
        let name = name.trim_end_matches('.');
        if let Some(c) = self.exact.get(name) {
            return Some(c);
        }
        let (_, parent) = name.split_once('.')?;
        self.wildcard.get(parent)
    }

    fn candidates(&self, server_name: Option<&str>) -> Option<&Candidates> {
        match server_name {
            Some(name) => match self.lookup(name) {
                Some(c) => Some(c),
                // On demand, a name is served its own certificate (`on_demand_for`) or refused.
                None if self.on_demand.is_some() => None,
                None => (self.unknown_sni == SniFallback::Default).then_some(&self.default),
            },
            None => (self.missing_sni == SniFallback::Default).then_some(&self.default),
        }
    }
}

impl SniResolver {
    /// The certificate for this ClientHello: the first candidate for its name whose key can sign
    /// with a scheme the client offered.
    fn choose(&self, hello: &ClientHello<'_>) -> Option<&Arc<CertifiedKey>> {
        let candidates = self.candidates(hello.server_name())?;
        let schemes = hello.signature_schemes();
        candidates
            .iter()
            .find(|k| k.key.choose_scheme(schemes).is_some())
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.on_demand_for(&hello)
            .or_else(|| self.choose(&hello).cloned())
    }
}

/// What the resolver chose for one handshake.
#[derive(Debug, Clone, Default)]
pub(crate) enum Choice {
    /// rustls did not ask (the handshake failed before choosing a certificate).
    #[default]
    NotAsked,
    /// The name is refused by policy (`unknown_sni`/`missing_sni = "reject"`): rustls refuses
    /// the handshake with access_denied.
    NameRefused,
    /// Certificates serve the name, but none can sign with what the client's suites allow:
    /// rustls refuses the handshake.
    NoCertificate,
    Served(Arc<ServedCert>),
}

/// One worker's resolver: the shared tables, and a note of the choice the running handshake
/// made. rustls asks the resolver only from `Accepted::into_connection`, a synchronous call the
/// ClientHello stage makes through [`WorkerResolver::choice_during`]; a worker runs one task at
/// a time, so between the note and its reading no other handshake can write it. The lock is
/// this worker's own, never contended.
#[derive(Debug)]
pub(crate) struct WorkerResolver {
    tables: Arc<SniResolver>,
    chosen: Mutex<Choice>,
}

impl WorkerResolver {
    pub(crate) fn new(tables: Arc<SniResolver>) -> WorkerResolver {
        WorkerResolver {
            tables,
            chosen: Mutex::new(Choice::NotAsked),
        }
    }

    /// The shared tables this resolver chooses from.
    pub(crate) fn tables(&self) -> &Arc<SniResolver> {
        &self.tables
    }

    fn note(&self) -> std::sync::MutexGuard<'_, Choice> {
        self.chosen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `start` (which hands a ClientHello to rustls) and says what the resolver chose
    /// during it.
    pub(crate) fn choice_during<T>(&self, start: impl FnOnce() -> T) -> (T, Choice) {
        *self.note() = Choice::NotAsked;
        let out = start();
        let choice = std::mem::take(&mut *self.note());
        (out, choice)
    }
}

impl ResolvesServerCert for WorkerResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let Some(key) = self.tables.on_demand_for(&hello) {
            // Told to backends as no configured certificate (it has no file).
            *self.note() = Choice::NotAsked;
            return Some(key);
        }
        let chosen = self.tables.choose(&hello);
        *self.note() = match chosen {
            // An on-demand certificate that cannot sign with what the client offers is no
            // certificate for it, not a refused name.
            None if self.tables.candidates(hello.server_name()).is_none()
                && !self.tables.has_on_demand(hello.server_name()) =>
            {
                Choice::NameRefused
            }
            None => Choice::NoCertificate,
            Some(k) => self
                .tables
                .served
                .get(&(Arc::as_ptr(k) as usize))
                .map_or(Choice::NotAsked, |s| Choice::Served(s.clone())),
        };
        chosen.cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::certs::{self_signed, KeyKind};

    fn cert(names: &[&str], key: KeyKind) -> LoadedCert {
        let mut c = self_signed(&rustls::crypto::aws_lc_rs::default_provider()).unwrap();
        c.names = names.iter().map(|s| (*s).to_string()).collect();
        c.key = key;
        // A distinct Arc so ptr_eq tells certificates apart.
        c.certified = Arc::new((*c.certified).clone());
        c
    }

    #[test]
    fn exact_then_wildcard_one_label_only() {
        let ecdsa = KeyKind::Ecdsa { bits: 256 };
        let certs = vec![
            cert(&["default.test"], ecdsa),
            cert(&["www.example.com"], ecdsa),
            cert(&["*.example.com"], ecdsa),
        ];
        let r = SniResolver::new(&certs, 0, SniFallback::Default, SniFallback::Reject);
        assert!(Arc::ptr_eq(
            &r.lookup("www.example.com").unwrap()[0],
            &certs[1].certified
        ));
        assert!(Arc::ptr_eq(
            &r.lookup("api.example.com").unwrap()[0],
            &certs[2].certified
        ));
        assert!(
            r.lookup("a.b.example.com").is_none(),
            "wildcards cover one label"
        );
        assert!(r.lookup("example.com").is_none());
        assert!(Arc::ptr_eq(
            &r.candidates(Some("other.test")).unwrap()[0],
            &certs[0].certified
        ));
        assert!(
            r.candidates(None).is_none(),
            "missing SNI is rejected by this policy"
        );
    }

    #[test]
    fn ecdsa_sorted_before_rsa_for_one_name() {
        let certs = vec![
            cert(&["dual.test"], KeyKind::Rsa { bits: 2048 }),
            cert(&["dual.test"], KeyKind::Ecdsa { bits: 256 }),
        ];
        let r = SniResolver::new(&certs, 0, SniFallback::Reject, SniFallback::Reject);
        let c = r.lookup("dual.test").unwrap();
        assert!(Arc::ptr_eq(&c[0], &certs[1].certified));
        assert!(Arc::ptr_eq(&c[1], &certs[0].certified));
        assert!(r.candidates(Some("nope.test")).is_none());
    }
}
