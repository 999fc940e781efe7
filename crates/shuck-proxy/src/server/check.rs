//! `shuck check`: load everything `serve` would load and describe what would be served.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::config::{
    AcmeKey, Backend, BackendPolicy, ClientAuth, Config, Frontend, OcspMode, SniFallback,
};
use crate::error::Result;
use crate::proto::tls_params as params;
use crate::server::running::{self, Applies};
use crate::sys::access::{self, Blocked, Reader};
use crate::tls::{certs, TlsContext};

/// The summary and the warnings (expiry and the like), or the first error.
pub struct Report {
    pub summary: String,
    pub warnings: Vec<String>,
}

pub fn report(config: &Config) -> Result<Report> {
    let now = crate::sys::clock::unix_now();
    let mut s = String::new();
    let mut warnings = Vec::new();
    write_globals(&mut s, config);
    for fe in &config.frontends {
        let tls = TlsContext::load(fe)?;
        let listen: Vec<String> = fe.listen.addrs.iter().map(ToString::to_string).collect();
        let _ = writeln!(s, "\nfrontend {:?}", fe.name);
        let _ = writeln!(s, "  listen: {}", listen.join(", "));
        write_backend(&mut s, fe);
        write_proxy(&mut s, fe);
        write_client_auth(&mut s, fe);
        write_acme(&mut s, fe)?;
        for c in &tls.certs {
            let days = (c.not_after - now).div_euclid(86_400);
            let _ = writeln!(
                s,
                "  certificate {}: {} [{}], chain of {}, expires in {} days, names: {}",
                c.path.display(),
                c.subject,
                c.key,
                c.chain_len,
                days,
                c.names.join(" ")
            );
            write_staple(&mut s, fe, c, now);
            if fe.acme().is_none() {
                warnings.extend(c.warnings(now, config.certificate_expiry_warning));
            }
            warnings.extend(c.writable_by_others.iter().map(|w| {
                format!("{w}: whoever may write it chooses what is served (make it writable by its owner only)")
            }));
        }
        write_tls(&mut s, fe);
        write_resumption(&mut s, fe, &tls);
        write_timeouts(&mut s, fe);
        write_ktls(&mut s, fe);
    }
    write_reload_changes(&mut s, config);
    Ok(Report {
        summary: s,
        warnings,
    })
}

fn write_globals(s: &mut String, config: &Config) {
    let _ = writeln!(s, "configuration {}: ok", config.origin);
    let _ = writeln!(
        s,
        "workers: {}{}, max_connections: {}, shutdown_grace: {}",
        config.workers,
        if config.pin_cpus { " (pinned)" } else { "" },
        config.max_connections,
        humantime::format_duration(config.shutdown_grace)
    );
    if let Some(m) = config.metrics_listen {
        let _ = writeln!(s, "metrics: http://{m}/metrics");
    }
    for r in &config.redirect {
        let listen: Vec<String> = r.listen.iter().map(ToString::to_string).collect();
        let unknown = match &r.unknown_host {
            crate::config::UnknownHost::Misdirected => "421".to_string(),
            crate::config::UnknownHost::To(url) => format!("{} to {url}", r.code),
        };
        let _ = writeln!(
            s,
            "redirect: http://{} -> https (port {}, {}), other hosts: {unknown}; ACME HTTP-01 answered",
            listen.join(", http://"),
            r.https_port,
            r.code
        );
    }
}

/// The OCSP staple a certificate goes out with, if any.
fn write_staple(s: &mut String, fe: &Frontend, c: &certs::LoadedCert, now: i64) {
    if fe.ocsp == OcspMode::Off {
        return;
    }
    let _ = match c.staple {
        Some(v) => writeln!(
            s,
            "    OCSP staple: good, {} s old, valid {} s more",
            now - v.this_update,
            v.next_update - now
        ),
        None => writeln!(s, "    OCSP staple: none"),
    };
}

/// Where the certificate comes from and what is stored (never the account or keys).
fn write_acme(s: &mut String, fe: &Frontend) -> Result<()> {
    let Some(acme) = fe.acme() else {
        return Ok(());
    };
    let _ = writeln!(
        s,
        "  acme: {} for {} ({} key, {}), renewed at 2/3 of its lifetime",
        acme.directory,
        acme.names.join(" "),
        match acme.key {
            AcmeKey::Ecdsa => "ECDSA P-256",
            AcmeKey::Rsa => "RSA 2048",
        },
        acme.challenge.as_str(),
    );
    if let Some(d) = &acme.dns_update {
        // Read as the start reads it: a bad file stops `shuck check` too (never its secret).
        crate::certs::acme::dns01::read_key(&d.tsig_key_file).map_err(|e| {
            crate::error::Error::TsigKey {
                frontend: fe.name.clone(),
                message: e.to_string(),
            }
        })?;
        let _ = writeln!(
            s,
            "  acme dns-01: updates to {} for zone {}, TSIG key {} (readable)",
            d.server,
            d.zone,
            d.tsig_key_file.display()
        );
    }
    if let Some(o) = &acme.on_demand {
        let _ = writeln!(
            s,
            "  on demand: asks {}, at most {} orders a minute and {} certificates, a handshake held up to {}",
            o.ask,
            o.max_per_minute,
            o.max_certificates,
            humantime::format_duration(o.hold)
        );
    }
    if acme.names.is_empty() {
        return Ok(());
    }
    let stored = if acme.bundle.exists() {
        "stored"
    } else {
        "not yet issued: a temporary certificate is served"
    };
    let _ = writeln!(s, "  acme certificate {}: {stored}", acme.bundle.display());
    Ok(())
}

fn write_backend(s: &mut String, fe: &Frontend) {
    match &fe.backend.target {
        Backend::Demo if fe.route.0.is_empty() => {
            let _ = writeln!(s, "  backend: built-in demo page");
        }
        Backend::Demo => {
            let _ = writeln!(s, "  backend: none (a connection no route takes is closed)");
        }
        Backend::Servers(_) => {
            let _ = writeln!(s, "  backend: {}", backends_text(&fe.backend));
        }
    }
    for (i, r) in fe.route.0.iter().enumerate() {
        let mut when = Vec::new();
        if !r.sni.is_empty() {
            when.push(format!("sni {}", r.sni.join(" ")));
        }
        if !r.alpn.is_empty() {
            when.push(format!("alpn {}", r.alpn.join(" ")));
        }
        let proxy = r.send.map_or_else(String::new, |v| format!(", PROXY {v}"));
        let _ = writeln!(
            s,
            "  route {} {:?}: {} -> {}{proxy}",
            i + 1,
            r.name,
            when.join(" and "),
            backends_text(&r.backend)
        );
        if let Some(p) = &r.policy {
            write_route_policy(s, fe, r, p);
        }
    }
}

/// A route's own TLS policy, for the handshakes asking for its names.
fn write_route_policy(
    s: &mut String,
    fe: &Frontend,
    r: &crate::config::Route,
    p: &crate::config::RoutePolicy,
) {
    let mut with = fe.clone();
    with.tls = p.tls.clone();
    with.client_auth = p.client_auth.clone();
    let mut policy = String::new();
    if with.client_auth.mode == ClientAuth::None {
        policy.push_str("client certificates: none\n");
    }
    write_client_auth(&mut policy, &with);
    write_negotiated(&mut policy, &with);
    let _ = writeln!(
        s,
        "    TLS for {} (before the handshake, from the ClientHello's name):",
        r.sni.join(" ")
    );
    for line in policy
        .lines()
        .filter(|l| !l.trim_start().starts_with("alpn:"))
    {
        let _ = writeln!(s, "      {}", line.trim_start());
    }
}

/// `a, b (resolved) (policy)`.
fn backends_text(b: &crate::config::Backends) -> String {
    let Backend::Servers(list) = &b.target else {
        return "none".into();
    };
    let names: Vec<String> = list
        .iter()
        .map(|b| {
            // The resolved address, when the name was a host name; the weight, when not 1.
            let mut text = if b.name == b.addr.to_string() {
                b.name.clone()
            } else {
                format!("{} ({})", b.name, b.addr)
            };
            if b.weight != 1 {
                let _ = write!(text, " weight {}", b.weight);
            }
            text
        })
        .collect();
    let policy = match b.policy {
        BackendPolicy::RoundRobin => "round-robin",
        BackendPolicy::LeastConnections => "least connections",
    };
    format!("{} ({policy})", names.join(", "))
}

/// PROXY headers sent to the backend and accepted from load balancers.
fn write_proxy(s: &mut String, fe: &Frontend) {
    if let Some(version) = fe.proxy_protocol.send {
        let tlv_names = fe.proxy_protocol.tlvs.names();
        let _ = writeln!(
            s,
            "  proxy_protocol: {} to the backend{}",
            version,
            if tlv_names.is_empty() {
                String::new()
            } else {
                format!(", TLVs: {}", tlv_names.join(", "))
            }
        );
    }
    if let Some(ap) = &fe.proxy_protocol.accept {
        let from: Vec<String> = ap.from.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            s,
            "  accept_proxy: v1/v2 header required from {} (timeout {:?})",
            if from.is_empty() {
                "any peer".to_string()
            } else {
                from.join(", ")
            },
            ap.timeout
        );
    }
}

fn write_client_auth(s: &mut String, fe: &Frontend) {
    if fe.client_auth.mode == ClientAuth::None {
        return;
    }
    let _ = writeln!(
        s,
        "  client certificates: {} ({}{})",
        fe.client_auth.mode,
        fe.client_auth.ca.as_ref().map_or_else(
            || "no CA: every certificate is passed on unverified".to_string(),
            |ca| format!("CA {}", ca.display())
        ),
        if fe.client_auth.crls.is_empty() {
            String::new()
        } else {
            format!(", {} CRL file(s)", fe.client_auth.crls.len())
        }
    );
}

/// SNI fallbacks, and what the handshake may negotiate.
fn write_tls(s: &mut String, fe: &Frontend) {
    let fallback = |f: SniFallback| match f {
        SniFallback::Default => "default certificate",
        SniFallback::Reject => "reject",
    };
    let unknown = if fe.acme().is_some_and(|a| a.on_demand.is_some()) {
        "its own certificate on demand, else refused"
    } else {
        fallback(fe.certificates.unknown_sni)
    };
    let _ = writeln!(
        s,
        "  unknown SNI: {unknown}; missing SNI: {}",
        fallback(fe.certificates.missing_sni)
    );
    write_negotiated(s, fe);
}

/// Protocols, cipher suites, groups and ALPN.
fn write_negotiated(s: &mut String, fe: &Frontend) {
    let versions: Vec<&str> = fe
        .tls
        .versions
        .iter()
        .map(|v| params::version_name(v.version))
        .collect();
    // Only the suites of enabled versions: the others can never be chosen.
    let suites: Vec<&str> = fe
        .tls
        .ciphersuites
        .iter()
        .filter(|c| {
            fe.tls
                .versions
                .iter()
                .any(|v| v.version == c.version().version)
        })
        .map(|c| params::suite_name(*c))
        .collect();
    let groups: Vec<&str> = fe
        .tls
        .groups
        .iter()
        .map(|g| params::group_name(*g))
        .collect();
    let alpn: Vec<String> = fe
        .tls
        .alpn
        .iter()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    let _ = writeln!(s, "  protocols: {}", versions.join(", "));
    let _ = writeln!(s, "  ciphersuites (server order): {}", suites.join(", "));
    let _ = writeln!(s, "  groups: {}", groups.join(", "));
    let _ = writeln!(
        s,
        "  alpn: {}",
        if alpn.is_empty() {
            "none".into()
        } else {
            alpn.join(", ")
        }
    );
}

fn write_resumption(s: &mut String, fe: &Frontend, tls: &TlsContext) {
    let _ = writeln!(
        s,
        "  resumption: session cache {} per process, tickets {}",
        fe.resumption.cache_size,
        match &tls.ticketer {
            Some(t) => format!("on ({})", t.describe()),
            None => "off".into(),
        }
    );
    if let Some(files) = &fe.resumption.ticket_keys {
        let paths: Vec<String> = files
            .paths
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let _ = writeln!(s, "  ticket key files: {}", paths.join(", "));
    }
    if let Some(store) = &fe.session_store {
        let _ = writeln!(
            s,
            "  session store: {} (lookups wait at most {}; sessions sealed with the key in {})",
            store.url_for_display(),
            humantime::format_duration(store.timeout),
            store.key.display()
        );
    }
}

fn write_timeouts(s: &mut String, fe: &Frontend) {
    let _ = writeln!(
        s,
        "  timeouts: handshake {}, idle {}, connect {}; backlog {}",
        humantime::format_duration(fe.timeouts.handshake),
        humantime::format_duration(fe.timeouts.idle),
        humantime::format_duration(fe.backend.connect_timeout),
        fe.listen.backlog
    );
}

/// With `ktls`, whether this kernel lists the `tls` upper-layer protocol now (Linux loads the
/// module on first use where it can, so "not listed" is a warning, not an error).
fn write_ktls(s: &mut String, fe: &Frontend) {
    if fe.record_layer.layer == crate::config::RecordLayer::Rustls {
        let _ = writeln!(
            s,
            "  record_layer: rustls protects the records for each connection's whole life"
        );
    }
    if !fe.record_layer.ktls {
        return;
    }
    let listed = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp")
        .is_ok_and(|l| l.split_whitespace().any(|u| u == "tls"));
    let _ = writeln!(
        s,
        "  ktls: TLS 1.3 records go to the kernel after the handshake; {}",
        if listed {
            "this kernel lists the tls module"
        } else {
            "this kernel does not list the tls module (records stay in user space unless it loads on first use)"
        }
    );
}

/// What a reload of this configuration would change in the shuck that recorded its settings in
/// the same state directory, and what would wait for a restart.
fn write_reload_changes(s: &mut String, config: &Config) {
    let Some((path, running)) = running::read(&config.state_dir) else {
        let _ = writeln!(
            s,
            "\nno running shuck recorded in {} (nothing to compare a reload with)",
            config.state_dir.display()
        );
        return;
    };
    if running.format != running::FORMAT {
        let _ = writeln!(
            s,
            "\n{} was written by another version of shuck (pid {}): its settings are not compared; it is rewritten at the next start or reload",
            path.display(),
            running.pid
        );
        return;
    }
    let alive = std::path::Path::new(&format!("/proc/{}", running.pid)).exists();
    let _ = writeln!(
        s,
        "\ncompared with what runs ({}, pid {}{}):",
        path.display(),
        running.pid,
        if alive { "" } else { ", which is not running" }
    );
    let changes = running::changes(&running.settings, &running::settings(config));
    if changes.is_empty() {
        let _ = writeln!(
            s,
            "  a reload changes no setting (certificate and key files are read again)"
        );
    }
    // A frontend added or removed is one line, not one per setting.
    let whole: Vec<String> = changes
        .iter()
        .filter(|c| c.old.is_none() || c.new.is_none())
        .filter(|c| c.key.starts_with("frontend ") && c.key.ends_with('"'))
        .map(|c| format!("{} ", c.key))
        .collect();
    for c in &changes {
        if whole.iter().any(|w| c.key.starts_with(w.as_str())) {
            continue;
        }
        let how = match c.applies {
            Applies::Reload => "a reload applies",
            Applies::Restart => "needs a restart",
        };
        let _ = match (&c.old, &c.new) {
            (None, Some(_)) => writeln!(s, "  {how}: {} added", c.key),
            (Some(_), None) => writeln!(s, "  {how}: {} removed", c.key),
            (Some(old), Some(new)) => {
                for (field, old, new) in running::differing_fields(old, new) {
                    let _ = writeln!(s, "  {how}: {}{field}: {old} -> {new}", c.key);
                }
                Ok(())
            }
            (None, None) => Ok(()),
        };
    }
}

/// What `reader`, the user that serves after start, could not read or watch of what `config`
/// reads again at renewals and reloads: one line per place that stops it (a directory closed
/// to it stops every file under it), naming the user, the place, its mode and owners, and how
/// many files it holds back. Empty when the user may do all of it.
pub fn unreadable_by(config: &Config, reader: &Reader) -> Vec<String> {
    let mut by_place: std::collections::BTreeMap<PathBuf, (Blocked, PathBuf, usize)> =
        std::collections::BTreeMap::new();
    for fe in &config.frontends {
        for (path, need) in crate::server::cert_watch::needs(fe, config.watch_certificates) {
            if let Err(b) = access::check(&path, reader, need) {
                let entry = by_place.entry(b.at.clone()).or_insert((b, path, 0));
                entry.2 += 1;
            }
        }
    }
    by_place
        .into_values()
        .map(|(b, example, n)| {
            let more = match n {
                1 => String::new(),
                n => format!(" and {} more", n - 1),
            };
            format!(
                "user {:?} (uid {}), who serves after start, cannot get to {}{more}: {} is {:04o} {}:{}, without {} permission for it; renewals, reloads and the certificate watch will fail. Give it access (e.g. chgrp {} {} and chmod g+rX on it; certbot keeps a key's group across renewals)",
                reader.name,
                reader.uid,
                example.display(),
                b.at.display(),
                b.mode,
                user_name(b.uid),
                group_name(b.gid),
                b.needed,
                reader.gids.first().map_or_else(|| reader.name.clone(), |g| group_name(*g)),
                b.at.display(),
            )
        })
        .collect()
}

fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name)
}

fn group_name(gid: u32) -> String {
    nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))
        .ok()
        .flatten()
        .map_or_else(|| gid.to_string(), |g| g.name)
}
