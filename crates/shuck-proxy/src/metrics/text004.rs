//! The Prometheus text format 0.0.4, for scrapers that do not ask for OpenMetrics (promtool,
//! older Prometheus servers, most exporters' readers): the OpenMetrics text with its differences
//! undone. A family's `# HELP` and `# TYPE` name its samples (`_total` for a counter, `_info`
//! for an info metric, which 0.0.4 writes as a gauge), and `# UNIT` and `# EOF` go.

use std::fmt::Write as _;

/// `openmetrics` (as `prometheus_client` writes it) as text format 0.0.4.
pub(crate) fn from_openmetrics(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // prometheus_client writes a family's HELP before its TYPE: held until the type is known.
    let mut help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            if let Some((name, text)) = help.take() {
                let _ = writeln!(out, "# HELP {name} {text}");
            }
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (suffix, kind) = match kind {
                "counter" => ("_total", "counter"),
                "info" => ("_info", "gauge"),
                "gauge" | "histogram" | "summary" => ("", kind),
                "gaugehistogram" => ("", "histogram"),
                "stateset" => ("", "gauge"),
                _ => ("", "untyped"),
            };
            if let Some((helped, text)) = help.take() {
                let _ = writeln!(out, "# HELP {helped}{suffix} {}", help_0_0_4(text));
            }
            let _ = writeln!(out, "# TYPE {name}{suffix} {kind}");
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A HELP text as 0.0.4 escapes it: `\\` and `\n` only (OpenMetrics also escapes `"`).
fn help_0_0_4(text: &str) -> String {
    text.replace("\\\"", "\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_named_by_their_samples() {
        let om = "# HELP shuck_x Some \\\"x\\\".\n# TYPE shuck_x counter\nshuck_x_total{a=\"1\"} 3\n\
                  # HELP shuck_build Build.\n# TYPE shuck_build info\nshuck_build_info{v=\"1\"} 1\n\
                  # HELP shuck_t Time.\n# TYPE shuck_t histogram\n# UNIT shuck_t seconds\nshuck_t_count 1\n# EOF\n";
        assert_eq!(
            from_openmetrics(om),
            "# HELP shuck_x_total Some \"x\".\n# TYPE shuck_x_total counter\nshuck_x_total{a=\"1\"} 3\n\
             # HELP shuck_build_info Build.\n# TYPE shuck_build_info gauge\nshuck_build_info{v=\"1\"} 1\n\
             # HELP shuck_t Time.\n# TYPE shuck_t histogram\nshuck_t_count 1\n"
        );
    }
}
