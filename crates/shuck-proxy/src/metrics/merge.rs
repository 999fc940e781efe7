//! The exposition with the workers summed (`metrics_per_worker = false`, the default): each
//! worker keeps counting on its own handles (no memory another worker writes on the connection
//! path), and the text is merged when it is scraped: samples that differ only in their `worker`
//! label become one, whose value is their sum. Counters, histograms' buckets, sums and counts,
//! and the gauges that carry `worker` (open connections, a store's open breakers: how many
//! workers have one open) all add up. Series keep the order of their first worker.
//!
//! The text is the one `prometheus_client` wrote, so a sample line is `name{labels} value`, and
//! label values are escaped as OpenMetrics says (`\"`, `\\`, `\n`).

use std::collections::HashMap;
use std::fmt::Write as _;

/// `text` with every sample's `worker` label taken out and the samples that then agree summed.
pub(crate) fn without_workers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut block = Block::default();
    for line in text.lines() {
        if let Some((key, value)) = sample_without_worker(line) {
            block.add(key, value);
            continue;
        }
        block.flush(&mut out);
        out.push_str(line);
        out.push('\n');
    }
    block.flush(&mut out);
    out
}

/// The samples of one family, summed by their series.
#[derive(Default)]
struct Block {
    order: Vec<(String, Value)>,
    at: HashMap<String, usize>,
}

impl Block {
    fn add(&mut self, key: String, value: Value) {
        if let Some(&i) = self.at.get(&key) {
            self.order[i].1 = self.order[i].1.plus(value);
        } else {
            self.at.insert(key.clone(), self.order.len());
            self.order.push((key, value));
        }
    }

    fn flush(&mut self, out: &mut String) {
        for (key, value) in self.order.drain(..) {
            let _ = match value {
                Value::Int(n) => writeln!(out, "{key} {n}"),
                Value::Float(x) => writeln!(out, "{key} {x}"),
            };
        }
        self.at.clear();
    }
}

/// A sample's value: kept an integer while every part is one, as the encoder wrote it.
#[derive(Clone, Copy)]
enum Value {
    Int(i64),
    Float(f64),
}

impl Value {
    fn parse(s: &str) -> Option<Value> {
        s.parse()
            .map(Value::Int)
            .ok()
            .or_else(|| s.parse().ok().map(Value::Float))
    }

    fn plus(self, other: Value) -> Value {
        match (self, other) {
            (Value::Int(a), Value::Int(b)) => a.checked_add(b).map_or_else(
                // Too large for an integer: as a float, as Prometheus reads it anyway.
                || Value::Float(a as f64 + b as f64),
                Value::Int,
            ),
            (a, b) => Value::Float(a.as_f64() + b.as_f64()),
        }
    }

    #[allow(
        clippy::cast_precision_loss,
        reason = "exposition values are f64 to Prometheus"
    )]
    fn as_f64(self) -> f64 {
        match self {
            Value::Int(n) => n as f64,
            Value::Float(x) => x,
        }
    }
}

/// A sample line's series without its `worker` label, and its value; `None` for comments, the
/// end marker, and anything else not `series value` (kept as it is).
fn sample_without_worker(line: &str) -> Option<(String, Value)> {
    if line.starts_with('#') {
        return None;
    }
    let Some(open) = line.find('{') else {
        let (series, value) = line.split_once(' ')?;
        return Some((series.to_string(), Value::parse(value)?));
    };
    let close = label_end(line, open + 1)?;
    let (series, rest) = line.split_at(close + 1);
    let value = Value::parse(rest.trim())?;
    let labels = split_labels(&series[open + 1..close]);
    let kept: Vec<&str> = labels
        .into_iter()
        .filter(|l| !l.starts_with("worker="))
        .collect();
    let name = &series[..open];
    let key = if kept.is_empty() {
        name.to_string()
    } else {
        format!("{name}{{{}}}", kept.join(","))
    };
    Some((key, value))
}

/// Where the label set that starts at `from` ends (its `}`), past quoted values.
fn label_end(line: &str, from: usize) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in line[from..].char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some(from + i),
            _ => {}
        }
    }
    None
}

/// `a="x",b="y,z"` as `["a=\"x\"", "b=\"y,z\""]`, commas inside values kept.
fn split_labels(labels: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in labels.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&labels[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < labels.len() {
        out.push(&labels[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_are_summed_and_the_rest_kept() {
        let text = "# HELP shuck_x X.\n# TYPE shuck_x counter\n\
            shuck_x_total{frontend=\"a\",worker=\"0\",kind=\"full\"} 3\n\
            shuck_x_total{frontend=\"a\",worker=\"1\",kind=\"full\"} 4\n\
            shuck_x_total{frontend=\"b,\\\"q}\",worker=\"0\"} 1\n\
            # TYPE shuck_h histogram\n\
            shuck_h_sum{frontend=\"a\",worker=\"0\"} 0.25\n\
            shuck_h_sum{frontend=\"a\",worker=\"1\"} 0.5\n\
            shuck_h_bucket{frontend=\"a\",worker=\"0\",le=\"+Inf\"} 2\n\
            shuck_h_bucket{frontend=\"a\",worker=\"1\",le=\"+Inf\"} 5\n\
            shuck_build_info{version=\"1\"} 1\n\
            shuck_solo{worker=\"0\"} 2\n\
            shuck_solo{worker=\"1\"} 2\n\
            # EOF\n";
        let merged = without_workers(text);
        assert_eq!(
            merged,
            "# HELP shuck_x X.\n# TYPE shuck_x counter\n\
             shuck_x_total{frontend=\"a\",kind=\"full\"} 7\n\
             shuck_x_total{frontend=\"b,\\\"q}\"} 1\n\
             # TYPE shuck_h histogram\n\
             shuck_h_sum{frontend=\"a\"} 0.75\n\
             shuck_h_bucket{frontend=\"a\",le=\"+Inf\"} 7\n\
             shuck_build_info{version=\"1\"} 1\n\
             shuck_solo 4\n\
             # EOF\n"
        );
    }
}
