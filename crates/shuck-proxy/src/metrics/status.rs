//! The status page at `/` of the metrics listener: one self-contained HTML page (no external
//! assets, no script; it reloads itself) built from a [`Snapshot`] of the same handles a
//! `/metrics` scrape encodes, so the page and the metrics never disagree, and the last minutes
//! of two rates kept here by taking a snapshot every [`EVERY`].

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

use super::snapshot::{Family, Frontend, Snapshot};

/// How often the history is sampled, and how many samples it keeps (five minutes).
pub(crate) const EVERY: Duration = Duration::from_secs(10);
const KEEP: usize = 31;

/// One sample of the history: per frontend, connections accepted and handshakes failed so far.
#[derive(Debug, Clone)]
struct Point {
    at: f64,
    totals: BTreeMap<String, (u64, u64)>,
}

/// The last minutes of connections and handshake failures, per frontend.
#[derive(Debug, Default)]
pub(crate) struct History {
    points: VecDeque<Point>,
}

impl History {
    /// Adds what `now` says.
    pub(crate) fn record(&mut self, now: &Snapshot) {
        let totals = now
            .frontends
            .iter()
            .map(|(name, fe)| (name.clone(), (fe.accepted, fe.handshake_failures())))
            .collect();
        self.points.push_back(Point { at: now.at, totals });
        while self.points.len() > KEEP {
            self.points.pop_front();
        }
    }

    /// Per second between samples: (connections, handshake failures), oldest first.
    #[allow(
        clippy::cast_precision_loss,
        reason = "a rate for a chart: counts past 2^52 may round"
    )]
    fn rates(&self, frontend: &str) -> (Vec<f64>, Vec<f64>) {
        let pairs = self.points.iter().zip(self.points.iter().skip(1));
        pairs
            .filter_map(|(a, b)| {
                let (a0, a1) = a.totals.get(frontend)?;
                let (b0, b1) = b.totals.get(frontend)?;
                let dt = (b.at - a.at).max(1.0);
                // A counter that went back (a restart of the family) counts as zero.
                let per_second = |old: &u64, new: &u64| new.saturating_sub(*old) as f64 / dt;
                Some((per_second(a0, b0), per_second(a1, b1)))
            })
            .unzip()
    }
}

/// Text for HTML.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A duration in words: "3d 4h", "5h 12m", "40s".
fn span(secs: f64) -> String {
    let s = Duration::try_from_secs_f64(secs.max(0.0)).map_or(0, |d| d.as_secs());
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// A number read from /proc, or "?" where it could not be read.
fn or_unknown<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "?".to_string(), |v| v.to_string())
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}\
h1{font-size:1.4em;margin:0}h2{font-size:1.2em;border-bottom:2px solid #357;padding-bottom:.2em}\
h3{font-size:1em;margin:.8em 0 .3em}section{background:#fff;border:1px solid #ddd;padding:0 1em 1em;margin:1em 0}\
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:2px 8px;text-align:left}\
th{background:#eef}.num{text-align:right}.grid{display:flex;flex-wrap:wrap;gap:2em}\
.warn{color:#b00;font-weight:bold}.muted{color:#777}svg{background:#f4f6fa;border:1px solid #ccd}";

/// The page: what `now` says, and the history.
#[allow(
    clippy::cast_precision_loss,
    reason = "resident memory in MiB, for reading"
)]
pub(crate) fn page(now: &Snapshot, history: &History) -> String {
    let mut h = String::with_capacity(16 * 1024);
    let p = &now.process;
    let _ = write!(
        h,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{}\"><title>shuck status</title><style>{STYLE}</style></head><body>\
         <h1>shuck {} <span class=\"muted\">commit {}</span></h1>\
         <p id=\"process\">up {} · resident memory {} MiB · open files {} of {} · refreshed every {} s</p>",
        EVERY.as_secs(),
        esc(p.version),
        esc(if p.commit.is_empty() { "?" } else { &p.commit }),
        p.started.map_or_else(|| "?".into(), |t| span(now.at - t)),
        or_unknown(p.resident_bytes.map(|b| format!("{:.1}", b as f64 / 1_048_576.0))),
        or_unknown(p.open_fds),
        or_unknown(p.max_fds),
        EVERY.as_secs(),
    );
    for (name, fe) in &now.frontends {
        frontend_section(&mut h, name, fe, history, now.at);
    }
    h.push_str("<p class=\"muted\">The same numbers, for Prometheus: <a href=\"/metrics\">/metrics</a>.</p></body></html>\n");
    h
}

fn frontend_section(h: &mut String, name: &str, fe: &Frontend, history: &History, now: f64) {
    let _ = write!(
        h,
        "<section class=\"frontend\" data-frontend=\"{0}\"><h2>frontend {0}</h2><div class=\"grid\">",
        esc(name)
    );
    let _ = write!(
        h,
        "<div><h3>Connections</h3><p><b class=\"open\">{}</b> open · {} accepted</p></div>",
        fe.active, fe.accepted,
    );
    handshakes(h, fe);
    failures(h, fe);
    h.push_str("</div><div class=\"grid\">");
    listeners(h, fe);
    backends(h, fe);
    h.push_str("</div>");
    certificates(h, fe, now);
    let (conns, fails) = history.rates(name);
    h.push_str("<h3>Last minutes</h3><div class=\"grid\">");
    chart(h, "connections per second", &conns);
    chart(h, "handshake failures per second", &fails);
    h.push_str("</div></section>");
}

#[allow(
    clippy::cast_precision_loss,
    reason = "a share in percent, for reading"
)]
fn handshakes(h: &mut String, fe: &Frontend) {
    h.push_str("<div><h3>Handshakes</h3><table><tr><th></th><th>TLS 1.2</th><th>TLS 1.3</th></tr>");
    for (kind, [tls12, tls13]) in ["full", "resumed"].iter().zip(fe.handshakes) {
        let _ = write!(
            h,
            "<tr><th>{kind}</th><td class=\"num\">{tls12}</td><td class=\"num\">{tls13}</td></tr>",
        );
    }
    let resumed: u64 = fe.handshakes[1].iter().sum();
    let all: u64 = resumed + fe.handshakes[0].iter().sum::<u64>();
    let share = if all > 0 {
        format!("{:.1}%", 100.0 * resumed as f64 / all as f64)
    } else {
        "–".into()
    };
    let _ = write!(
        h,
        "</table><p>resumed: <b class=\"resumption\">{share}</b></p></div>"
    );
}

/// A failure row's words: the family, and the reason where the family has several.
fn failure_words(family: Family, label: &str) -> String {
    match family {
        Family::Handshake => format!("handshake: {label}"),
        Family::Backend => format!("backend: {label}"),
        Family::ProxyHeader => format!("PROXY header: {label}"),
        Family::Resources => format!("resources: {label}"),
        Family::Client => "client errors".into(),
        Family::Idle => "idle timeouts".into(),
        Family::Refused => format!("refused: {label}"),
    }
}

fn failures(h: &mut String, fe: &Frontend) {
    h.push_str("<div><h3>Failures by reason</h3>");
    let mut rows = fe.failures.iter().filter(|(_, n)| **n > 0).peekable();
    if rows.peek().is_none() {
        h.push_str("<p class=\"muted\">none</p></div>");
        return;
    }
    h.push_str("<table class=\"failures\">");
    for ((family, label), n) in rows {
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"num\">{n}</td></tr>",
            esc(&failure_words(*family, label))
        );
    }
    h.push_str("</table></div>");
}

fn listeners(h: &mut String, fe: &Frontend) {
    h.push_str("<div><h3>Listening on</h3><ul class=\"listeners\">");
    for addr in &fe.listeners {
        let _ = write!(h, "<li>{addr}</li>");
    }
    h.push_str("</ul></div>");
}

/// Per route (`default`: the frontend's own) and backend: the active checks' verdict, the
/// connects and their mean time.
#[allow(clippy::cast_precision_loss, reason = "a mean, for reading")]
fn backends(h: &mut String, fe: &Frontend) {
    h.push_str("<div><h3>Backends</h3>");
    if fe.backends.is_empty() {
        h.push_str("<p class=\"muted\">the built-in demo page</p></div>");
        return;
    }
    h.push_str(
        "<table class=\"backends\"><tr><th>route</th><th>backend</th><th>state</th><th>health</th><th>connects</th><th>mean connect</th></tr>",
    );
    for ((route, b), backend) in &fe.backends {
        let n = backend.connects;
        let mean = if n > 0 {
            format!("{:.2} ms", 1000.0 * backend.seconds / n as f64)
        } else {
            "–".into()
        };
        let health = match backend.up {
            Some(true) => "up",
            Some(false) => "<b class=\"warn\">down</b>",
            None => "<span class=\"muted\">not checked</span>",
        };
        // Set by an operator (`shuck ctl backend …`).
        let state = match backend.admin {
            1 => "<b class=\"warn\">drain</b>",
            2 => "<b class=\"warn\">disabled</b>",
            _ => "enabled",
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{state}</td><td>{health}</td><td class=\"num\">{n}</td><td class=\"num\">{mean}</td></tr>",
            esc(route),
            esc(b)
        );
    }
    h.push_str("</table></div>");
}

#[allow(clippy::cast_precision_loss, reason = "Unix seconds in an f64")]
fn certificates(h: &mut String, fe: &Frontend, now: f64) {
    h.push_str("<h3>Certificates</h3><table class=\"certificates\"><tr><th>file</th><th>names</th><th>subject</th><th>expires in</th><th>OCSP staple age</th></tr>");
    for c in &fe.certificates {
        let left = c.not_after as f64 - now;
        let class = if left < 14.0 * 86_400.0 {
            " class=\"warn\""
        } else {
            ""
        };
        let staple = c
            .staple
            .map_or_else(|| "none".to_string(), |(this, _)| span(now - this as f64));
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td{class}>{}</td><td>{staple}</td></tr>",
            esc(&c.path),
            esc(&c.names.join(" ")),
            esc(&c.subject),
            if left > 0.0 {
                span(left)
            } else {
                "expired".into()
            },
        );
    }
    h.push_str("</table>");
}

/// A small line chart of `values` (per second, oldest first) as inline SVG.
fn chart(h: &mut String, title: &str, values: &[f64]) {
    const W: f64 = 300.0;
    const H: f64 = 60.0;
    let top = values.iter().copied().fold(0.0_f64, f64::max);
    let last = values.last().copied().unwrap_or(0.0);
    let _ = write!(
        h,
        "<figure><figcaption>{} (now {last:.1}, peak {top:.1})</figcaption><svg width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"{}\">",
        esc(title),
        esc(title)
    );
    let values: Vec<f64> = match values {
        [one] => vec![*one, *one],
        v => v.to_vec(),
    };
    if values.len() >= 2 {
        let step = W / (KEEP - 2) as f64;
        let x0 = W - step * (values.len() - 1) as f64;
        let scale = if top > 0.0 { (H - 4.0) / top } else { 0.0 };
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{:.1},{:.1}", x0 + step * i as f64, H - 2.0 - v * scale))
            .collect();
        let _ = write!(
            h,
            "<polyline fill=\"none\" stroke=\"#357\" stroke-width=\"2\" points=\"{}\"/>",
            points.join(" ")
        );
    } else {
        let _ = write!(
            h,
            "<text x=\"8\" y=\"34\" fill=\"#777\">collecting (one point every {} s)</text>",
            EVERY.as_secs()
        );
    }
    h.push_str("</svg></figure>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_shows_what_the_handles_say_and_escapes_it() {
        let m = super::super::Metrics::new();
        let fm = m.for_frontend("<web>", 0);
        let other_worker = m.for_frontend("<web>", 1);
        fm.accepted.inc_by(7);
        fm.active.set(2);
        other_worker.ended(crate::conn::conn_error::Reason::HandshakeTimeout);
        m.set_listeners(&[("<web>".into(), "127.0.0.1:443".parse().unwrap())]);
        let mut history = History::default();
        let mut now = m.snapshot();
        now.at = 1000.0;
        history.record(&now);
        fm.accepted.inc_by(50);
        let mut now = m.snapshot();
        now.at = 1010.0;
        history.record(&now);
        let page = page(&now, &history);
        assert!(page.contains("frontend &lt;web&gt;"), "{page}");
        assert!(!page.contains("<web>"), "escaped: {page}");
        assert!(
            page.contains("<b class=\"open\">2</b> open · 57 accepted"),
            "{page}"
        );
        assert!(page.contains("<li>127.0.0.1:443</li>"), "{page}");
        assert!(
            page.contains("<td>handshake: timeout</td><td class=\"num\">1</td>"),
            "{page}"
        );
        assert!(page.contains("(now 5.0, peak 5.0)"), "50 in 10 s: {page}");
        assert!(page.contains("<polyline"), "{page}");
    }

    #[test]
    fn backends_show_connects_verdicts_and_the_mean() {
        let m = super::super::Metrics::new();
        let w0 = m.for_frontend("web", 0);
        let w1 = m.for_frontend("web", 1);
        let names = ["10.0.0.1:80", "10.0.0.2:80"];
        let t0 = w0
            .backend_connects()
            .for_backends("default", names.into_iter());
        let t1 = w1
            .backend_connects()
            .for_backends("default", names.into_iter());
        t0[0].observe(0.001);
        t1[0].observe(0.003);
        m.backend_up("web", "default", "10.0.0.2:80").set(0);
        let shown = page(&m.snapshot(), &History::default());
        assert!(shown.contains("<tr><td>default</td><td>10.0.0.1:80</td><td>enabled</td><td><span class=\"muted\">not checked</span></td><td class=\"num\">2</td><td class=\"num\">2.00 ms</td></tr>"), "{shown}");
        assert!(shown.contains("<tr><td>default</td><td>10.0.0.2:80</td><td>enabled</td><td><b class=\"warn\">down</b></td><td class=\"num\">0</td>"), "{shown}");
        // Drained by an operator.
        m.set_backend_admin_state("web", "default", "10.0.0.2:80", 1);
        let shown = page(&m.snapshot(), &History::default());
        assert!(
            shown.contains(
                "<tr><td>default</td><td>10.0.0.2:80</td><td><b class=\"warn\">drain</b>"
            ),
            "{shown}"
        );
        m.forget_backend_admin_state("web", "default", "10.0.0.2:80");
        m.forget_backend_up("web", "default", "10.0.0.2:80");
        let shown = page(&m.snapshot(), &History::default());
        assert!(shown.contains("<tr><td>default</td><td>10.0.0.2:80</td><td>enabled</td><td><span class=\"muted\">not checked</span>"), "{shown}");
    }
}
