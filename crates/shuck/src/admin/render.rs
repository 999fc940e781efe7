//! The admin socket's answers as text, for people: one table per `show`, columns aligned.

use std::fmt::Write as _;

use shuck_proxy::control::{
    BackendChanged, BackendView, CertificateView, ConnectionsView, FrontendView, LimitsView,
    RouteView,
};

/// Rows under a header, each column as wide as its widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::new();
        for (cell, w) in cells.zip(&widths) {
            let _ = write!(l, "{cell:<w$}  ");
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for r in rows {
        line(&mut r.iter().map(String::as_str));
    }
    out
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join(",")
    }
}

pub(crate) fn frontends(v: &[FrontendView]) -> String {
    let rows: Vec<Vec<String>> = v
        .iter()
        .map(|f| {
            vec![
                f.name.clone(),
                list(&f.listen.iter().map(ToString::to_string).collect::<Vec<_>>()),
                f.active.to_string(),
                f.accepted.to_string(),
                f.full_handshakes.to_string(),
                f.resumed_handshakes.to_string(),
                f.handshake_failures.to_string(),
                f.routes.to_string(),
                f.certificates.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "FRONTEND", "LISTEN", "OPEN", "ACCEPTED", "FULL", "RESUMED", "FAILED", "ROUTES",
            "CERTS",
        ],
        &rows,
    )
}

pub(crate) fn routes(v: &[RouteView]) -> String {
    let rows: Vec<Vec<String>> = v
        .iter()
        .map(|r| {
            vec![
                r.frontend.clone(),
                r.route.clone(),
                list(&r.sni),
                list(&r.alpn),
                list(&r.backends),
            ]
        })
        .collect();
    table(&["FRONTEND", "ROUTE", "SNI", "ALPN", "BACKENDS"], &rows)
}

pub(crate) fn backends(v: &[BackendView]) -> String {
    let rows: Vec<Vec<String>> = v
        .iter()
        .map(|b| {
            vec![
                b.frontend.clone(),
                b.route.clone(),
                b.backend.clone(),
                b.address.clone(),
                b.weight.to_string(),
                b.state.as_str().to_string(),
                match b.up {
                    None => "unchecked".into(),
                    Some(true) => "up".into(),
                    Some(false) => "down".into(),
                },
                b.connects.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "FRONTEND", "ROUTE", "BACKEND", "ADDRESS", "WEIGHT", "STATE", "HEALTH", "CONNECTS",
        ],
        &rows,
    )
}

/// Unix seconds as an RFC 3339 date.
fn date(unix: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| unix.to_string())
}

pub(crate) fn certificates(v: &[CertificateView]) -> String {
    let rows: Vec<Vec<String>> = v
        .iter()
        .map(|c| {
            vec![
                c.frontend.clone(),
                c.path.clone(),
                list(&c.names),
                date(c.not_after),
                if c.managed {
                    "acme"
                } else if c.added {
                    "ctl"
                } else {
                    "file"
                }
                .into(),
                c.staple_next_update.map_or_else(|| "-".into(), date),
            ]
        })
        .collect();
    table(
        &[
            "FRONTEND",
            "CERTIFICATE",
            "NAMES",
            "NOT AFTER",
            "FROM",
            "STAPLE UNTIL",
        ],
        &rows,
    )
}

pub(crate) fn limits(v: &LimitsView) -> String {
    let mut out = format!(
        "pid {}\nmax_connections {}\nopen_connections {}\nfd_limit {}\nworkers {}\noverload_threshold {}\n",
        v.pid, v.max_connections, v.open_connections, v.fd_limit, v.workers, v.overload_threshold
    );
    for f in &v.frontends {
        let _ = writeln!(
            out,
            "frontend {} admission {} timeouts {}",
            f.frontend,
            inline(&f.admission),
            inline(&f.timeouts)
        );
    }
    out
}

/// A TOML table on one line.
fn inline(v: &toml::Value) -> String {
    shuck_proxy::running::inline(v)
}

pub(crate) fn connections(v: &ConnectionsView) -> String {
    let rows: Vec<Vec<String>> = v
        .shown
        .iter()
        .map(|c| {
            vec![
                c.frontend.clone(),
                c.client.to_string(),
                c.sni.clone().unwrap_or_else(|| "-".into()),
                c.alpn.clone().unwrap_or_else(|| "-".into()),
                c.version.clone(),
                c.route.clone().unwrap_or_else(|| "-".into()),
                c.backend.clone(),
                c.bytes_in.to_string(),
                c.bytes_out.to_string(),
                format!("{:.1}", ms_as_s(c.age_ms)),
                format!("{:.1}", ms_as_s(c.idle_ms)),
                c.worker.to_string(),
            ]
        })
        .collect();
    let mut out = format!("{} connections match; {} shown\n", v.picked, v.shown.len());
    if !rows.is_empty() {
        out.push_str(&table(
            &[
                "FRONTEND",
                "CLIENT",
                "SNI",
                "ALPN",
                "VERSION",
                "ROUTE",
                "BACKEND",
                "BYTES IN",
                "BYTES OUT",
                "AGE S",
                "IDLE S",
                "WORKER",
            ],
            &rows,
        ));
    }
    out
}

#[expect(
    clippy::cast_precision_loss,
    reason = "a connection's age in ms fits an f64's mantissa"
)]
fn ms_as_s(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

pub(crate) fn backend_changed(c: &BackendChanged) -> String {
    let weight = |w: Option<u32>| w.map_or_else(|| "as configured".into(), |w| w.to_string());
    let mut out = format!(
        "{}/{}/{}: {} (weight {}), was {} (weight {})\n",
        c.frontend,
        c.route,
        c.backend,
        c.now.state().as_str(),
        weight(c.now.weight),
        c.before.state().as_str(),
        weight(c.before.weight)
    );
    if let Some(after) = c.closing_after {
        let _ = writeln!(
            out,
            "its open connections close in {} (shutdown_grace)",
            humantime::format_duration(after)
        );
    }
    out
}
