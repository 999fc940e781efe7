//! The status page at `/` of the metrics listener: one self-contained HTML page (no external
//! assets, no script; it reloads itself) built from the same text a `/metrics` scrape returns,
//! so the page and the metrics never disagree, and the last minutes of two rates kept here by
//! sampling that text every [`EVERY`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

use super::exposition::{sum, Sample};

/// How often the history is sampled, and how many samples it keeps (five minutes).
pub(crate) const EVERY: Duration = Duration::from_secs(10);
const KEEP: usize = 31;

/// One sample of the history: per frontend, connections accepted and handshakes failed so far.
#[derive(Debug, Clone)]
struct Point {
    at: f64,
    totals: BTreeMap<String, (f64, f64)>,
}

/// The last minutes of connections and handshake failures, per frontend.
#[derive(Debug, Default)]
pub(crate) struct History {
    points: VecDeque<Point>,
}

impl History {
    /// Adds what `samples` say at `at` (Unix seconds).
    pub(crate) fn record(&mut self, samples: &[Sample], at: f64) {
        let totals = frontends(samples)
            .into_iter()
            .map(|fe| {
                let with = [("frontend", fe.as_str())];
                let accepted = sum(samples, "shuck_connections_accepted_total", &with);
                let failed = sum(samples, "shuck_handshake_failures_total", &with);
                (fe, (accepted, failed))
            })
            .collect();
        self.points.push_back(Point { at, totals });
        while self.points.len() > KEEP {
            self.points.pop_front();
        }
    }

    /// Per second between samples: (connections, handshake failures), oldest first.
    fn rates(&self, frontend: &str) -> (Vec<f64>, Vec<f64>) {
        let pairs = self.points.iter().zip(self.points.iter().skip(1));
        pairs
            .filter_map(|(a, b)| {
                let (a0, a1) = a.totals.get(frontend)?;
                let (b0, b1) = b.totals.get(frontend)?;
                let dt = (b.at - a.at).max(1.0);
                // A counter that went back (a restart of the family) counts as zero.
                Some((((b0 - a0).max(0.0)) / dt, ((b1 - a1).max(0.0)) / dt))
            })
            .unzip()
    }
}

/// The frontends the metrics name.
fn frontends(samples: &[Sample]) -> BTreeSet<String> {
    samples
        .iter()
        .filter(|s| s.name == "shuck_connections_accepted_total")
        .filter_map(|s| s.label("frontend").map(str::to_string))
        .collect()
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

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}\
h1{font-size:1.4em;margin:0}h2{font-size:1.2em;border-bottom:2px solid #357;padding-bottom:.2em}\
h3{font-size:1em;margin:.8em 0 .3em}section{background:#fff;border:1px solid #ddd;padding:0 1em 1em;margin:1em 0}\
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:2px 8px;text-align:left}\
th{background:#eef}.num{text-align:right}.grid{display:flex;flex-wrap:wrap;gap:2em}\
.warn{color:#b00;font-weight:bold}.muted{color:#777}svg{background:#f4f6fa;border:1px solid #ccd}";

/// The page, from a scrape's samples, the history, and the time now (Unix seconds).
pub(crate) fn page(samples: &[Sample], history: &History, now: f64) -> String {
    let mut h = String::with_capacity(16 * 1024);
    let build = samples.iter().find(|s| s.name == "shuck_build_info");
    let version = build.and_then(|b| b.label("version")).unwrap_or("?");
    let commit = build.and_then(|b| b.label("commit")).unwrap_or("?");
    let started = sum(samples, "process_start_time_seconds", &[]);
    let _ = write!(
        h,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{}\"><title>shuck status</title><style>{STYLE}</style></head><body>\
         <h1>shuck {} <span class=\"muted\">commit {}</span></h1>\
         <p id=\"process\">up {} · resident memory {:.1} MiB · open files {} of {} · refreshed every {} s</p>",
        EVERY.as_secs(),
        esc(version),
        esc(commit),
        span(now - started),
        sum(samples, "process_resident_memory_bytes", &[]) / 1_048_576.0,
        sum(samples, "process_open_fds", &[]),
        sum(samples, "process_max_fds", &[]),
        EVERY.as_secs(),
    );
    for fe in frontends(samples) {
        frontend_section(&mut h, samples, history, &fe, now);
    }
    h.push_str("<p class=\"muted\">The numbers come from <a href=\"/metrics\">/metrics</a>.</p></body></html>\n");
    h
}

fn frontend_section(h: &mut String, samples: &[Sample], history: &History, fe: &str, now: f64) {
    let _ = write!(
        h,
        "<section class=\"frontend\" data-frontend=\"{0}\"><h2>frontend {0}</h2><div class=\"grid\">",
        esc(fe)
    );
    connections(h, samples, fe);
    handshakes(h, samples, fe);
    failures(h, samples, fe);
    h.push_str("</div><div class=\"grid\">");
    listeners(h, samples, fe);
    backends(h, samples, fe);
    h.push_str("</div>");
    certificates(h, samples, fe, now);
    let (conns, fails) = history.rates(fe);
    h.push_str("<h3>Last minutes</h3><div class=\"grid\">");
    chart(h, "connections per second", &conns);
    chart(h, "handshake failures per second", &fails);
    h.push_str("</div></section>");
}

fn connections(h: &mut String, samples: &[Sample], fe: &str) {
    let with = [("frontend", fe)];
    let _ = write!(
        h,
        "<div><h3>Connections</h3><p><b class=\"open\">{}</b> open · {} accepted</p></div>",
        sum(samples, "shuck_connections_active", &with),
        sum(samples, "shuck_connections_accepted_total", &with),
    );
}

fn handshakes(h: &mut String, samples: &[Sample], fe: &str) {
    let count = |kind: &str, version: &str| {
        sum(
            samples,
            "shuck_handshakes_total",
            &[("frontend", fe), ("kind", kind), ("version", version)],
        )
    };
    h.push_str("<div><h3>Handshakes</h3><table><tr><th></th><th>TLS 1.2</th><th>TLS 1.3</th></tr>");
    for kind in ["full", "resumed"] {
        let _ = write!(
            h,
            "<tr><th>{kind}</th><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            count(kind, "TLSv1.2"),
            count(kind, "TLSv1.3")
        );
    }
    let resumed = count("resumed", "TLSv1.2") + count("resumed", "TLSv1.3");
    let all = resumed + count("full", "TLSv1.2") + count("full", "TLSv1.3");
    let share = if all > 0.0 {
        format!("{:.1}%", 100.0 * resumed / all)
    } else {
        "–".into()
    };
    let _ = write!(
        h,
        "</table><p>resumed: <b class=\"resumption\">{share}</b></p></div>"
    );
}

fn failures(h: &mut String, samples: &[Sample], fe: &str) {
    let mut rows: Vec<(String, f64)> = Vec::new();
    for (family, label, what) in [
        ("shuck_handshake_failures_total", "reason", "handshake"),
        ("shuck_backend_errors_total", "kind", "backend"),
        ("shuck_proxy_header_errors_total", "reason", "PROXY header"),
        ("shuck_resource_errors_total", "kind", "resources"),
    ] {
        let mut by: BTreeMap<&str, f64> = BTreeMap::new();
        for s in samples
            .iter()
            .filter(|s| s.name == family && s.label("frontend") == Some(fe))
        {
            *by.entry(s.label(label).unwrap_or("?")).or_default() += s.value;
        }
        rows.extend(
            by.into_iter()
                .filter(|(_, n)| *n > 0.0)
                .map(|(r, n)| (format!("{what}: {r}"), n)),
        );
    }
    for (family, what) in [
        ("shuck_client_errors_total", "client errors"),
        ("shuck_idle_timeouts_total", "idle timeouts"),
    ] {
        let n = sum(samples, family, &[("frontend", fe)]);
        if n > 0.0 {
            rows.push((what.into(), n));
        }
    }
    h.push_str("<div><h3>Failures by reason</h3>");
    if rows.is_empty() {
        h.push_str("<p class=\"muted\">none</p>");
    } else {
        h.push_str("<table class=\"failures\">");
        for (what, n) in rows {
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=\"num\">{n}</td></tr>",
                esc(&what)
            );
        }
        h.push_str("</table>");
    }
    h.push_str("</div>");
}

fn listeners(h: &mut String, samples: &[Sample], fe: &str) {
    h.push_str("<div><h3>Listening on</h3><ul class=\"listeners\">");
    for s in samples
        .iter()
        .filter(|s| s.name == "shuck_listener_info" && s.label("frontend") == Some(fe))
    {
        let _ = write!(h, "<li>{}</li>", esc(s.label("address").unwrap_or("?")));
    }
    h.push_str("</ul></div>");
}

/// Per route (`default`: the frontend's own) and backend: the active checks' verdict, the
/// connects and their mean time.
fn backends(h: &mut String, samples: &[Sample], fe: &str) {
    // (route, backend) -> (connects, seconds connecting, up: None when not checked)
    let mut by: BTreeMap<(&str, &str), (f64, f64, Option<bool>)> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.label("frontend") == Some(fe)) {
        let (Some(route), Some(b)) = (s.label("route"), s.label("backend")) else {
            continue;
        };
        let e = by.entry((route, b)).or_default();
        match s.name.as_str() {
            "shuck_backend_connect_duration_seconds_count" => e.0 += s.value,
            "shuck_backend_connect_duration_seconds_sum" => e.1 += s.value,
            "shuck_backend_up" => e.2 = Some(s.value > 0.0),
            _ => {}
        }
    }
    h.push_str("<div><h3>Backends</h3>");
    if by.is_empty() {
        h.push_str("<p class=\"muted\">the built-in demo page</p></div>");
        return;
    }
    h.push_str(
        "<table class=\"backends\"><tr><th>route</th><th>backend</th><th>health</th><th>connects</th><th>mean connect</th></tr>",
    );
    for ((route, b), (n, total, up)) in by {
        let mean = if n > 0.0 {
            format!("{:.2} ms", 1000.0 * total / n)
        } else {
            "–".into()
        };
        let health = match up {
            Some(true) => "up",
            Some(false) => "<b class=\"warn\">down</b>",
            None => "<span class=\"muted\">not checked</span>",
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{health}</td><td class=\"num\">{n}</td><td class=\"num\">{mean}</td></tr>",
            esc(route),
            esc(b)
        );
    }
    h.push_str("</table></div>");
}

fn certificates(h: &mut String, samples: &[Sample], fe: &str, now: f64) {
    h.push_str("<h3>Certificates</h3><table class=\"certificates\"><tr><th>file</th><th>names</th><th>subject</th><th>expires in</th><th>OCSP staple age</th></tr>");
    for s in samples
        .iter()
        .filter(|s| s.name == "shuck_certificate_info" && s.label("frontend") == Some(fe))
    {
        let file = s.label("certificate").unwrap_or("?");
        let key = [("frontend", fe), ("certificate", file)];
        let not_after = sum(
            samples,
            "shuck_certificate_not_after_timestamp_seconds",
            &key,
        );
        let left = not_after - now;
        let class = if left < 14.0 * 86_400.0 {
            " class=\"warn\""
        } else {
            ""
        };
        let staple = samples
            .iter()
            .find(|x| {
                x.name == "shuck_ocsp_staple_age_seconds"
                    && x.label("frontend") == Some(fe)
                    && x.label("certificate") == Some(file)
            })
            .map_or_else(|| "none".to_string(), |x| span(x.value));
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td{class}>{}</td><td>{staple}</td></tr>",
            esc(file),
            esc(s.label("names").unwrap_or("")),
            esc(s.label("subject").unwrap_or("")),
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
    use super::super::exposition::samples;
    use super::*;

    #[test]
    fn the_page_shows_what_the_metrics_say_and_escapes_it() {
        let m = super::super::Metrics::new();
        let fm = m.for_frontend("<web>", 0);
        fm.accepted.inc_by(7);
        fm.active.set(2);
        m.set_listeners(&[("<web>".into(), "127.0.0.1:443".parse().unwrap())]);
        let mut history = History::default();
        history.record(&samples(&m.encode()), 1000.0);
        fm.accepted.inc_by(50);
        history.record(&samples(&m.encode()), 1010.0);
        let page = page(&samples(&m.encode()), &history, 1010.0);
        assert!(page.contains("frontend &lt;web&gt;"), "{page}");
        assert!(!page.contains("<web>"), "escaped: {page}");
        assert!(
            page.contains("<b class=\"open\">2</b> open · 57 accepted"),
            "{page}"
        );
        assert!(page.contains("<li>127.0.0.1:443</li>"), "{page}");
        assert!(page.contains("(now 5.0, peak 5.0)"), "50 in 10 s: {page}");
        assert!(page.contains("<polyline"), "{page}");
    }
}
