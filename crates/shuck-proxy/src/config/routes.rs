//! `[[frontend.route]]`: other backends for the connections whose negotiated SNI and ALPN match,
//! several services behind one address. A route is chosen after the handshake (so the
//! certificate choice is unchanged), the first that matches in file order; none: the
//! frontend's own `backend`.
//!
//! A route with `sni` may also carry its own TLS policy (`client_auth` with `client_ca` and
//! `client_crl`, `protocols`, `ciphersuites`, `groups`): it applies to the handshakes whose
//! ClientHello asks for one of its names, chosen before the handshake from the first such route
//! in file order; other handshakes get the frontend's.

use std::path::Path;

use serde::Deserialize;

use super::section::{OnChange, Section};
use super::{key_err, Backends, KeyError, OneOrMany, RawFrontend};
use super::{BackendPolicy, ProxyProtocol, ProxyTlvs};
use crate::proto::proxy_protocol::Version;

/// Routes per frontend: each is a pool of its own in every worker.
pub const MAX_ROUTES: usize = 256;

/// A route as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    pub name: Option<String>,
    pub sni: Option<Vec<String>>,
    pub alpn: Option<Vec<String>>,
    pub backend: Option<OneOrMany<super::backend::BackendEntry>>,
    pub backend_policy: Option<BackendPolicy>,
    pub connect_timeout: Option<String>,
    pub backend_cooldown: Option<String>,
    pub dns_refresh: Option<String>,
    pub health_check: Option<super::health::RawHealthCheck>,
    pub proxy_protocol: Option<ProxyProtocol>,
    pub proxy_protocol_tlvs: Option<Vec<String>>,
    pub client_auth: Option<super::ClientAuth>,
    pub client_ca: Option<std::path::PathBuf>,
    pub client_crl: Option<OneOrMany<std::path::PathBuf>>,
    pub protocols: Option<Vec<String>>,
    pub ciphersuites: Option<Vec<String>>,
    pub groups: Option<Vec<String>>,
    pub backend_tls: Option<super::backend_tls::RawBackendTls>,
}

impl RawRoute {
    /// Whether it sets any key of a TLS policy of its own.
    fn has_policy(&self) -> bool {
        self.client_auth.is_some()
            || self.client_ca.is_some()
            || self.client_crl.is_some()
            || self.protocols.is_some()
            || self.ciphersuites.is_some()
            || self.groups.is_some()
    }
}

/// A route's own TLS policy: the frontend's, with what the route sets in its place.
#[derive(serde::Serialize, Debug, Clone, PartialEq)]
pub struct RoutePolicy {
    pub tls: super::Tls,
    pub client_auth: super::ClientAuthSettings,
}

/// A validated route.
#[derive(serde::Serialize, Debug, Clone, PartialEq)]
pub struct Route {
    /// For logs and metrics: as written, or `route1`, `route2`, … by position.
    pub name: String,
    /// Server names, lower-case; `*.example.com` matches one label under it. Empty: any.
    pub sni: Vec<String>,
    /// ALPN protocols, any of which matches. Empty: any.
    pub alpn: Vec<String>,
    pub backend: Backends,
    /// The PROXY header to this route's backends, if any, and its TLVs.
    #[serde(serialize_with = "super::ser::version")]
    pub send: Option<Version>,
    pub tlvs: ProxyTlvs,
    /// Its own TLS policy, for handshakes asking for one of its `sni` names.
    pub policy: Option<RoutePolicy>,
}

impl Route {
    /// Whether a ClientHello asking for `sni` gets this route's TLS policy (it has one, and
    /// one of its names matches).
    pub fn policy_for(&self, sni: Option<&str>) -> Option<&RoutePolicy> {
        let name = sni?;
        let name = name.strip_suffix('.').unwrap_or(name);
        self.policy
            .as_ref()
            .filter(|_| self.sni.iter().any(|p| name_matches(p, name)))
    }

    /// Whether a connection that negotiated `sni` and `alpn` takes this route: every condition
    /// the route has holds.
    pub fn matches(&self, sni: Option<&str>, alpn: Option<&[u8]>) -> bool {
        // One trailing dot is the same name (as the certificate and the TLS policy see it).
        let sni = sni.map(|n| n.strip_suffix('.').unwrap_or(n));
        let sni_ok = self.sni.is_empty()
            || sni.is_some_and(|name| self.sni.iter().any(|p| name_matches(p, name)));
        let alpn_ok = self.alpn.is_empty()
            || alpn.is_some_and(|a| self.alpn.iter().any(|p| p.as_bytes() == a));
        sni_ok && alpn_ok
    }
}

/// `pattern` (lower-case, maybe `*.suffix`) against a server name, case-insensitively.
pub fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => name
            .split_once('.')
            .is_some_and(|(label, rest)| !label.is_empty() && rest.eq_ignore_ascii_case(suffix)),
        None => pattern.eq_ignore_ascii_case(name),
    }
}

/// The routes of a frontend, in file order.
#[derive(serde::Serialize, Debug, Clone, PartialEq, Default)]
pub struct Routes(pub Vec<Route>);

/// Workers build each route's pool afresh when its backend settings change, as for the
/// frontend's own (`worker`).
impl Section for Routes {
    const KEY: &'static str = "route";
    const ON_CHANGE: OnChange = OnChange::NewConnections;
}

impl RawFrontend {
    pub(super) fn validate_routes(&self, base: Option<&Path>) -> Result<Routes, KeyError> {
        if self.routes.len() > MAX_ROUTES {
            return Err(key_err(
                "route",
                format!(
                    "{} routes: at most {MAX_ROUTES} per frontend",
                    self.routes.len()
                ),
            ));
        }
        let mut out: Vec<Route> = Vec::with_capacity(self.routes.len());
        for (i, raw) in self.routes.iter().enumerate() {
            let route = self
                .validate_route(raw, i, base)
                .map_err(|e| key_err(&format!("route[{i}].{}", e.key), e.message))?;
            if out.iter().any(|r| r.name == route.name) {
                return Err(key_err(
                    &format!("route[{i}].name"),
                    format!("{:?} is used twice", route.name),
                ));
            }
            out.push(route);
        }
        Ok(Routes(out))
    }

    /// One route: its conditions, and its backend keys validated as the frontend's are, with
    /// the frontend's values where the route sets none.
    fn validate_route(
        &self,
        raw: &RawRoute,
        i: usize,
        base: Option<&Path>,
    ) -> Result<Route, KeyError> {
        let name = raw
            .name
            .clone()
            .unwrap_or_else(|| format!("route{}", i + 1));
        if name == "default" {
            return Err(key_err(
                "name",
                "\"default\" names the frontend's own backends in metrics: choose another",
            ));
        }
        if name.is_empty()
            || name
                .chars()
                .any(|c| c == '"' || c == '\\' || c.is_control())
        {
            return Err(key_err(
                "name",
                format!("{name:?}: not empty, no quote, backslash or control character"),
            ));
        }
        let sni = validate_names(raw.sni.as_deref().unwrap_or_default())?;
        let alpn = raw.alpn.clone().unwrap_or_default();
        if let Some(p) = alpn.iter().find(|p| p.is_empty() || p.len() > 255) {
            return Err(key_err(
                "alpn",
                format!("{p:?}: a protocol name is 1 to 255 bytes"),
            ));
        }
        if sni.is_empty() && alpn.is_empty() {
            return Err(key_err("sni", "a route needs sni, alpn or both: without a condition it would take every connection"));
        }
        if raw.backend.is_none() {
            return Err(key_err(
                "backend",
                "missing: a route sends its connections to its own backends",
            ));
        }
        let mut as_frontend = self.clone();
        as_frontend.backend.clone_from(&raw.backend);
        let keep = |route: &Option<String>, frontend: &Option<String>| {
            route.clone().or_else(|| frontend.clone())
        };
        as_frontend.backend_policy = raw.backend_policy.or(self.backend_policy);
        as_frontend.connect_timeout = keep(&raw.connect_timeout, &self.connect_timeout);
        as_frontend.backend_cooldown = keep(&raw.backend_cooldown, &self.backend_cooldown);
        as_frontend.dns_refresh = keep(&raw.dns_refresh, &self.dns_refresh);
        as_frontend.health_check = raw
            .health_check
            .clone()
            .or_else(|| self.health_check.clone());
        as_frontend.proxy_protocol = raw.proxy_protocol.or(self.proxy_protocol);
        as_frontend.backend_tls = raw.backend_tls.clone().or_else(|| self.backend_tls.clone());
        as_frontend.proxy_protocol_tlvs = raw
            .proxy_protocol_tlvs
            .clone()
            .or_else(|| self.proxy_protocol_tlvs.clone());
        let backend = as_frontend.validate_backend(base)?;
        if backend.target == super::Backend::Demo {
            return Err(key_err(
                "backend",
                "empty: a route sends its connections to its own backends",
            ));
        }
        let send = as_frontend.validate_send_proxy()?;
        let policy = self.validate_route_policy(raw, &sni, base)?;
        Ok(Route {
            name,
            sni,
            alpn,
            backend,
            send: send.version,
            tlvs: send.tlvs,
            policy,
        })
    }

    /// A route's TLS policy: validated as the frontend's keys are, the frontend's values where
    /// the route sets none (a route's `client_auth` brings its own `client_ca`/`client_crl`).
    fn validate_route_policy(
        &self,
        raw: &RawRoute,
        sni: &[String],
        base: Option<&Path>,
    ) -> Result<Option<RoutePolicy>, KeyError> {
        if !raw.has_policy() {
            return Ok(None);
        }
        if sni.is_empty() {
            return Err(key_err(
                "sni",
                "a route's TLS keys (client_auth, protocols, ciphersuites, groups) need sni: the policy is chosen from the ClientHello's server name, before ALPN is settled",
            ));
        }
        let mut as_frontend = self.clone();
        if raw.client_auth.is_some() || raw.client_ca.is_some() || raw.client_crl.is_some() {
            as_frontend.client_auth = raw.client_auth;
            as_frontend.client_ca.clone_from(&raw.client_ca);
            as_frontend.client_crl.clone_from(&raw.client_crl);
        }
        let keep = |route: &Option<Vec<String>>, frontend: &Option<Vec<String>>| {
            route.clone().or_else(|| frontend.clone())
        };
        as_frontend.protocols = keep(&raw.protocols, &self.protocols);
        as_frontend.ciphersuites = keep(&raw.ciphersuites, &self.ciphersuites);
        as_frontend.groups = keep(&raw.groups, &self.groups);
        // A frontend with routes never serves the demo page.
        Ok(Some(RoutePolicy {
            tls: as_frontend.validate_tls(false)?,
            client_auth: as_frontend.validate_client_auth(base)?,
        }))
    }
}

/// `sni` entries: host names, lower-cased, or `*.` and a name.
fn validate_names(names: &[String]) -> Result<Vec<String>, KeyError> {
    names
        .iter()
        .map(|n| {
            let bare = n.strip_prefix("*.").unwrap_or(n);
            let ok = !bare.is_empty()
                && bare
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
            if ok {
                Ok(n.to_ascii_lowercase())
            } else {
                Err(key_err(
                    "sni",
                    format!("{n:?} is not a host name (or *. and one)"),
                ))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(sni: &[&str], alpn: &[&str]) -> Route {
        Route {
            name: "r".into(),
            sni: sni.iter().map(|s| (*s).to_string()).collect(),
            alpn: alpn.iter().map(|s| (*s).to_string()).collect(),
            backend: Backends {
                target: super::super::Backend::Demo,
                policy: BackendPolicy::RoundRobin,
                connect_timeout: std::time::Duration::from_secs(1),
                cooldown: std::time::Duration::from_secs(1),
                health_check: None,
                dns_refresh: None,
                tls: None,
            },
            send: None,
            tlvs: ProxyTlvs::default(),
            policy: None,
        }
    }

    #[test]
    fn a_route_matches_when_all_its_conditions_do() {
        let api = route(&["api.example.com", "*.apps.example.com"], &[]);
        assert!(api.matches(Some("api.example.com"), None));
        assert!(api.matches(Some("API.Example.COM"), Some(b"h2")));
        assert!(api.matches(Some("x.apps.example.com"), None));
        assert!(!api.matches(Some("apps.example.com"), None));
        assert!(!api.matches(Some("a.b.apps.example.com"), None));
        assert!(!api.matches(None, None));
        let h2 = route(&[], &["h2"]);
        assert!(h2.matches(None, Some(b"h2")));
        assert!(!h2.matches(Some("any"), Some(b"http/1.1")));
        assert!(!h2.matches(Some("any"), None));
        let both = route(&["api.example.com"], &["h2"]);
        assert!(both.matches(Some("api.example.com"), Some(b"h2")));
        assert!(!both.matches(Some("api.example.com"), Some(b"http/1.1")));
    }
}
