//! Reading back the text exposition `/metrics` serves, so the status page and its history are
//! built from exactly what Prometheus scrapes.

/// One sample line: `name{label="value",…} 12.5`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub(super) fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Every sample of `text` (comments and malformed lines skipped).
pub(crate) fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(sample)
        .collect()
}

fn sample(line: &str) -> Option<Sample> {
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return None,
    };
    let (labels, value) = match rest.strip_prefix('{') {
        Some(inner) => {
            let (labels, after) = label_pairs(inner)?;
            (labels, after)
        }
        None => (Vec::new(), rest),
    };
    let value = value.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// `k="v",k2="v2"}` and what follows the `}`.
fn label_pairs(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut out = Vec::new();
    loop {
        s = s.trim_start_matches(',');
        if let Some(after) = s.strip_prefix('}') {
            return Some((out, after));
        }
        let (key, rest) = s.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        out.push((key.to_string(), value));
        s = &rest[end + 1..];
    }
}

/// The sum of the samples called `name` whose labels include every pair of `with`.
pub(crate) fn sum(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && with.iter().all(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_text_reads_back() {
        let m = crate::metrics::Metrics::new();
        let fm = m.for_frontend("web", 0);
        fm.accepted.inc_by(3);
        m.set_certificates(
            "web",
            vec![crate::metrics::CertRecord {
                path: r#"/etc/a "b" \c.pem"#.into(),
                subject: r"CN=x,O=Foo\, Inc.".into(),
                not_after: 0,
                managed: false,
                staple: None,
                names: vec!["a.test".into()],
            }],
        );
        let all = samples(&m.encode());
        let accepted = sum(
            &all,
            "shuck_connections_accepted_total",
            &[("frontend", "web")],
        );
        assert!((accepted - 3.0).abs() < f64::EPSILON, "{accepted}");
        let info = all
            .iter()
            .find(|s| s.name == "shuck_certificate_info")
            .expect("certificate info");
        assert_eq!(info.label("certificate"), Some(r#"/etc/a "b" \c.pem"#));
        assert_eq!(info.label("subject"), Some(r"CN=x,O=Foo\, Inc."));
        let s = sample(r#"a_b{x="1\\2",y="q\"z"} 2.5e3"#).unwrap();
        assert_eq!(s.label("x"), Some("1\\2"));
        assert_eq!(s.label("y"), Some("q\"z"));
        assert!((s.value - 2500.0).abs() < f64::EPSILON);
        assert!((sample("plain 7").unwrap().value - 7.0).abs() < f64::EPSILON);
        assert!(sample("broken{x=\"1\" 3").is_none());
    }
}
