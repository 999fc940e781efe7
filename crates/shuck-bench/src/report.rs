//! The results of a run: per-step figures, totals and the verdict, as a table, CSV and JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::stats::{Failure, LatencySummary, StepAcc};
use crate::verdict::{self, Point, Thresholds};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    pub step: usize,
    pub start_s: f64,
    pub duration_s: f64,
    /// Open loop: the offered rate (connections/s). Closed loop: none.
    pub offered_rate: Option<f64>,
    pub attempted: u64,
    pub successful: u64,
    pub failed: u64,
    /// Successful connections that resumed a TLS session.
    pub resumed: u64,
    /// Connections whose session had already completed one (they offered to resume), and
    /// how many of those failed: what returning clients saw.
    #[serde(default)]
    pub offered_resumption: u64,
    #[serde(default)]
    pub offered_failed: u64,
    /// Response bytes received (headers and body).
    pub bytes: u64,
    pub attempted_tps: f64,
    pub successful_tps: f64,
    pub failed_tps: f64,
    /// Latency of successful transactions; none when nothing succeeded.
    pub latency_ms: Option<LatencySummary>,
    /// Failures by kind (connect, handshake, io, timeout, status, size, client_overload).
    pub failures: BTreeMap<String, u64>,
    /// The server's process-tree CPU time during the step per successful connection.
    pub server_cpu_us_per_conn: Option<f64>,
    /// CPU the load generator itself used during the step, in % of one core: near 100% per
    /// load thread, the figures show the client's limit rather than the server's.
    #[serde(default)]
    pub client_cpu_percent: Option<f64>,
    pub passes: bool,
}

/// How the run was set up and what the server negotiated.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub target: String,
    pub server_name: String,
    /// "open" (rate ramp) or "closed" (fixed concurrency).
    pub mode: String,
    pub threads: usize,
    pub concurrency: Option<usize>,
    pub requests_per_session: u32,
    pub keepalive: u32,
    pub resume: String,
    pub path: String,
    pub protocol: Option<String>,
    pub cipher_suite: Option<String>,
    pub kx_group: Option<String>,
    pub alpn: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub attempted: u64,
    pub successful: u64,
    pub failed: u64,
    pub resumed: u64,
    /// resumed / successful; K requests per session, as in Bernat's benchmark, give (K-1)/K.
    pub resumption_ratio: f64,
    pub peak_successful_tps: f64,
    pub bytes: u64,
    /// Response bytes per second over the run, in MB (10^6) per second.
    pub mb_per_s: f64,
    pub server_cpu_us_per_conn: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerdictReport {
    pub thresholds: Thresholds,
    pub best_step: Option<usize>,
    pub offered_rate: Option<f64>,
    pub max_tps: Option<f64>,
    pub mean_ms: Option<f64>,
    /// The verdict is the ramp's last step: the run's ceiling, not the server's (raise
    /// `--rate-max`). Absent in reports written before it was kept.
    #[serde(default)]
    pub at_ceiling: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub settings: Settings,
    pub steps: Vec<StepReport>,
    pub totals: Totals,
    pub verdict: VerdictReport,
}

/// What the load generator hands over for one step besides the counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepMeta {
    pub start_s: f64,
    pub duration_s: f64,
    pub offered_rate: Option<f64>,
    pub server_cpu_us: Option<f64>,
    pub client_cpu_us: Option<f64>,
}

impl BenchReport {
    pub fn build(
        settings: Settings,
        steps: &[(StepMeta, StepAcc)],
        thresholds: Thresholds,
    ) -> BenchReport {
        let mut reports: Vec<StepReport> = steps
            .iter()
            .enumerate()
            .map(|(i, (m, a))| step_report(i, m, a))
            .collect();
        let points: Vec<Point> = reports
            .iter()
            .map(|s| Point {
                attempted: s.attempted,
                failed: s.failed,
                successful_tps: s.successful_tps,
                mean_ms: s.latency_ms.map(|l| l.mean),
            })
            .collect();
        let v = verdict::judge(&points, &thresholds);
        for (r, p) in reports.iter_mut().zip(&v.passes) {
            r.passes = *p;
        }
        let mut t = Totals::default();
        let mut secs = 0.0;
        let mut cpu = 0.0;
        let mut cpu_known = true;
        for s in &reports {
            t.attempted += s.attempted;
            t.successful += s.successful;
            t.failed += s.failed;
            t.resumed += s.resumed;
            t.bytes += s.bytes;
            t.peak_successful_tps = t.peak_successful_tps.max(s.successful_tps);
            secs += s.duration_s;
        }
        for (m, _) in steps {
            match m.server_cpu_us {
                Some(c) => cpu += c,
                None => cpu_known = false,
            }
        }
        if t.successful > 0 {
            t.resumption_ratio = t.resumed as f64 / t.successful as f64;
            if cpu_known && !steps.is_empty() {
                t.server_cpu_us_per_conn = Some(cpu / t.successful as f64);
            }
        }
        if secs > 0.0 {
            t.mb_per_s = t.bytes as f64 / secs / 1e6;
        }
        let verdict = VerdictReport {
            thresholds,
            best_step: v.best_step,
            offered_rate: v.best_step.and_then(|i| reports[i].offered_rate),
            max_tps: v.max_tps,
            mean_ms: v
                .best_step
                .and_then(|i| reports[i].latency_ms.map(|l| l.mean)),
            at_ceiling: v.at_ceiling,
        };
        BenchReport {
            settings,
            steps: reports,
            totals: t,
            verdict,
        }
    }

    /// The human-readable table for stdout.
    pub fn table(&self) -> String {
        let set = &self.settings;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "target {} ({}), {} loop, {} threads, {} connections per TLS session (resume: {}), {} request(s) per connection, path {}",
            set.target,
            set.server_name,
            set.mode,
            set.threads,
            set.requests_per_session,
            set.resume,
            set.keepalive,
            set.path
        );
        let _ = writeln!(
            o,
            "negotiated: {} {} {}{}",
            set.protocol.as_deref().unwrap_or("-"),
            set.cipher_suite.as_deref().unwrap_or("-"),
            set.kx_group.as_deref().unwrap_or("-"),
            set.alpn
                .as_deref()
                .map(|a| format!(" alpn {a}"))
                .unwrap_or_default()
        );
        let _ = writeln!(
            o,
            "{:>4} {:>8} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8} {:>8} {:>4}",
            "step",
            "offered",
            "attempt/s",
            "ok/s",
            "fail/s",
            "mean ms",
            "p50",
            "p90",
            "p99",
            "max",
            "resumed",
            "srv µs/c",
            "client %",
            "pass"
        );
        for r in &self.steps {
            let l = r.latency_ms.unwrap_or_default();
            let res = if r.successful > 0 {
                format!("{:.0}%", 100.0 * r.resumed as f64 / r.successful as f64)
            } else {
                "-".into()
            };
            let _ = writeln!(
                o,
                "{:>4} {:>8} {:>9.1} {:>9.1} {:>8.1} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>7} {:>8} {:>8} {:>4}",
                r.step,
                r.offered_rate.map_or_else(|| "-".into(), |x| format!("{x:.0}")),
                r.attempted_tps,
                r.successful_tps,
                r.failed_tps,
                l.mean,
                l.p50,
                l.p90,
                l.p99,
                l.max,
                res,
                r.server_cpu_us_per_conn.map_or_else(|| "-".into(), |x| format!("{x:.0}")),
                r.client_cpu_percent.map_or_else(|| "-".into(), |x| format!("{x:.0}")),
                if r.passes { "yes" } else { "no" }
            );
        }
        let t = &self.totals;
        let _ = writeln!(
            o,
            "total: {} attempted, {} ok, {} failed, resumed {:.1}%, {:.2} MB/s{}",
            t.attempted,
            t.successful,
            t.failed,
            100.0 * t.resumption_ratio,
            t.mb_per_s,
            t.server_cpu_us_per_conn
                .map(|c| format!(", server CPU {c:.0} µs/connection"))
                .unwrap_or_default()
        );
        let v = &self.verdict;
        let th = &v.thresholds;
        match (v.best_step, v.max_tps) {
            (Some(i), Some(tps)) => {
                let _ = writeln!(
                    o,
                    "verdict: {tps:.1} TPS (step {i}{}, mean {:.2} ms) under < {}% failures and mean ≤ {} ms (look-ahead {})",
                    v.offered_rate.map(|r| format!(", offered {r:.0}/s")).unwrap_or_default(),
                    v.mean_ms.unwrap_or_default(),
                    th.max_failure_ratio * 100.0,
                    th.max_mean_ms,
                    th.lookahead
                );
                if v.at_ceiling {
                    let _ = writeln!(
                        o,
                        "verdict at the ramp's ceiling: its last step passed, so this is the run's limit, not the server's (raise --rate-max)"
                    );
                }
            }
            _ => {
                let _ = writeln!(
                    o,
                    "verdict: no step passed (< {}% failures and mean ≤ {} ms)",
                    th.max_failure_ratio * 100.0,
                    th.max_mean_ms
                );
            }
        }
        o
    }

    pub const CSV_HEADER: &'static str = "step,start_s,duration_s,offered_rate,attempted,successful,failed,resumed,bytes,attempted_tps,successful_tps,failed_tps,mean_ms,p50_ms,p90_ms,p99_ms,max_ms,server_cpu_us_per_conn,client_cpu_percent,passes";

    /// One line per step; empty fields where a figure does not exist.
    pub fn csv(&self) -> String {
        let mut o = String::from(Self::CSV_HEADER);
        o.push('\n');
        let opt = |x: Option<f64>| x.map(|v| format!("{v:.3}")).unwrap_or_default();
        for r in &self.steps {
            let l = r.latency_ms;
            let _ = writeln!(
                o,
                "{},{:.3},{:.3},{},{},{},{},{},{},{:.3},{:.3},{:.3},{},{},{},{},{},{},{},{}",
                r.step,
                r.start_s,
                r.duration_s,
                opt(r.offered_rate),
                r.attempted,
                r.successful,
                r.failed,
                r.resumed,
                r.bytes,
                r.attempted_tps,
                r.successful_tps,
                r.failed_tps,
                opt(l.map(|l| l.mean)),
                opt(l.map(|l| l.p50)),
                opt(l.map(|l| l.p90)),
                opt(l.map(|l| l.p99)),
                opt(l.map(|l| l.max)),
                opt(r.server_cpu_us_per_conn),
                opt(r.client_cpu_percent),
                r.passes
            );
        }
        o
    }

    pub fn json(&self) -> String {
        // Plain data with string keys: serialisation cannot fail.
        serde_json::to_string_pretty(self).expect("report serialises")
    }
}

fn step_report(i: usize, m: &StepMeta, a: &StepAcc) -> StepReport {
    let d = if m.duration_s > 0.0 {
        m.duration_s
    } else {
        f64::NAN
    };
    let failed = a.failed();
    let per_s = |n: u64| if d.is_nan() { 0.0 } else { n as f64 / d };
    let failures = Failure::ALL
        .iter()
        .zip(a.failures)
        .filter(|(_, n)| *n > 0)
        .map(|(f, n)| (f.name().to_string(), n))
        .collect();
    StepReport {
        step: i,
        start_s: m.start_s,
        duration_s: m.duration_s,
        offered_rate: m.offered_rate,
        attempted: a.attempted,
        successful: a.ok,
        failed,
        resumed: a.resumed,
        offered_resumption: a.offered_resumption,
        offered_failed: a.offered_failed,
        bytes: a.bytes,
        attempted_tps: per_s(a.attempted),
        successful_tps: per_s(a.ok),
        failed_tps: per_s(failed),
        latency_ms: (a.latency.count() > 0).then(|| a.latency.summary()),
        failures,
        server_cpu_us_per_conn: m
            .server_cpu_us
            .and_then(|c| (a.ok > 0).then(|| c / a.ok as f64)),
        client_cpu_percent: m
            .client_cpu_us
            .and_then(|c| (m.duration_s > 0.0).then(|| c / m.duration_s / 1e4)),
        passes: false,
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // the inputs are chosen so these figures are exact
mod tests {
    use super::*;

    fn sample() -> BenchReport {
        let mut steps = Vec::new();
        for (i, (ok, failed, lat)) in [
            (100u64, 0u64, 2_000u64),
            (200, 0, 5_000),
            (250, 50, 300_000),
        ]
        .into_iter()
        .enumerate()
        {
            let mut a = StepAcc {
                attempted: ok + failed,
                ok,
                resumed: ok * 3 / 4,
                bytes: ok * 1100,
                ..StepAcc::default()
            };
            for _ in 0..ok {
                a.latency.record(lat);
            }
            for _ in 0..failed {
                a.fail(Failure::Timeout);
            }
            let m = StepMeta {
                start_s: i as f64 * 2.0,
                duration_s: 2.0,
                offered_rate: Some(50.0 * (i as f64 + 1.0)),
                server_cpu_us: Some(ok as f64 * 400.0),
                client_cpu_us: Some(1_000_000.0),
            };
            steps.push((m, a));
        }
        BenchReport::build(
            Settings {
                target: "127.0.0.1:8443".into(),
                mode: "open".into(),
                requests_per_session: 4,
                ..Settings::default()
            },
            &steps,
            Thresholds::default(),
        )
    }

    #[test]
    fn build_computes_rates_verdict_and_totals() {
        let r = sample();
        assert_eq!(r.steps[1].successful_tps, 100.0);
        assert_eq!(r.steps[2].failed_tps, 25.0);
        assert_eq!(
            r.steps.iter().map(|s| s.passes).collect::<Vec<_>>(),
            vec![true, true, false]
        );
        assert_eq!(r.verdict.best_step, Some(1));
        assert_eq!(r.verdict.offered_rate, Some(100.0));
        assert_eq!(r.verdict.max_tps, Some(100.0));
        assert_eq!(r.totals.successful, 550);
        assert!((r.totals.resumption_ratio - 0.75).abs() < 0.01);
        assert_eq!(r.totals.server_cpu_us_per_conn, Some(400.0));
        assert_eq!(r.steps[0].server_cpu_us_per_conn, Some(400.0));
        assert_eq!(r.steps[2].failures.get("timeout"), Some(&50));
    }

    #[test]
    fn csv_has_one_row_per_step_and_the_header_columns() {
        let r = sample();
        let csv = r.csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + r.steps.len());
        let cols = BenchReport::CSV_HEADER.split(',').count();
        assert_eq!(cols, 20);
        for l in &lines {
            assert_eq!(l.split(',').count(), cols, "{l}");
        }
        let row1: Vec<&str> = lines[2].split(',').collect();
        assert_eq!(row1[0], "1");
        assert_eq!(row1[3], "100.000");
        assert_eq!(row1[10], "100.000");
        // 1 s of CPU in a 2 s step.
        assert_eq!(row1[18], "50.000");
        assert_eq!(row1[19], "true");
    }

    #[test]
    fn json_round_trips_and_has_the_documented_keys() {
        let r = sample();
        let text = r.json();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        for k in ["settings", "steps", "totals", "verdict"] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert_eq!(v["verdict"]["max_tps"], 100.0);
        assert_eq!(v["steps"][2]["failures"]["timeout"], 50);
        assert!(v["steps"][0]["latency_ms"]["p99"].is_number());
        // `shuck speed --bench-json` reads it back.
        let back: BenchReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back.steps, r.steps);
        assert_eq!(back.verdict, r.verdict);
        assert_eq!(back.settings, r.settings);
    }

    #[test]
    fn table_names_the_verdict() {
        let t = sample().table();
        assert!(
            t.contains("verdict: 100.0 TPS (step 1, offered 100/s"),
            "{t}"
        );
        assert_eq!(
            t.lines()
                .filter(|l| l.ends_with(" yes") || l.ends_with(" no"))
                .count(),
            3
        );
    }
}
