//! The process metrics every Prometheus exporter has (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_open_fds`, `process_max_fds`,
//! `process_start_time_seconds`), read from /proc at each scrape, and `shuck_build_info`.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Reads /proc/self at each scrape; what cannot be read is left out.
#[derive(Debug)]
pub(super) struct ProcessCollector;

/// What /proc says of this process.
#[derive(Debug, Default, PartialEq)]
struct Readings {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<i64>,
    open_fds: Option<i64>,
    max_fds: Option<i64>,
    start_time_seconds: Option<f64>,
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let r = read();
        if let Some(v) = r.cpu_seconds {
            let m = ConstCounter::new(v);
            m.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "User and system CPU time spent, in seconds",
                None,
                m.metric_type(),
            )?)?;
        }
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                r.resident_bytes,
            ),
            ("process_open_fds", "Open file descriptors", r.open_fds),
            (
                "process_max_fds",
                "The open file descriptors limit (soft)",
                r.max_fds,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                let m = ConstGauge::new(v);
                m.encode(encoder.encode_descriptor(name, help, None, m.metric_type())?)?;
            }
        }
        if let Some(v) = r.start_time_seconds {
            let m = ConstGauge::new(v);
            m.encode(encoder.encode_descriptor(
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch, in seconds",
                None,
                m.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

fn read() -> Readings {
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    let uptime = std::fs::read_to_string("/proc/uptime").ok();
    let limits = std::fs::read_to_string("/proc/self/limits").ok();
    let mut r = parse(
        stat.as_deref(),
        uptime.as_deref(),
        limits.as_deref(),
        crate::clock::unix_now(),
    );
    r.open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| i64::try_from(d.count()).unwrap_or(i64::MAX));
    r
}

/// The clock ticks per second /proc's times are in (USER_HZ: 100 on every Linux).
const TICKS: f64 = 100.0;
const PAGE: i64 = 4096;

/// Readings from the texts of /proc/self/stat, /proc/uptime and /proc/self/limits (`now`: Unix
/// seconds).
fn parse(stat: Option<&str>, uptime: Option<&str>, limits: Option<&str>, now: i64) -> Readings {
    let mut r = Readings::default();
    // Fields after the command name, which may hold spaces and parentheses: from the last ')'.
    let fields: Vec<&str> = stat
        .and_then(|s| s.rsplit_once(')'))
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // stat(5): utime is field 14 and stime 15, starttime 22, rss 24; `fields` starts at field 3.
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    if let (Some(u), Some(s)) = (field(14), field(15)) {
        r.cpu_seconds = Some((u + s) as f64 / TICKS);
    }
    r.resident_bytes = field(24)
        .and_then(|p| i64::try_from(p).ok())
        .map(|p| p * PAGE);
    let booted = uptime
        .and_then(|u| u.split_whitespace().next()?.parse::<f64>().ok())
        .map(|up| now as f64 - up);
    if let (Some(b), Some(start)) = (booted, field(22)) {
        r.start_time_seconds = Some(b + start as f64 / TICKS);
    }
    r.max_fds = limits
        .and_then(|l| l.lines().find(|l| l.starts_with("Max open files")))
        .and_then(|l| l.split_whitespace().nth(3)?.parse().ok());
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_texts_are_read_as_stat5_describes_them() {
        let stat = "4242 (shuck (w) 1) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 3 0 12000 300000000 2560 18446744073709551615";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            20000                20000                files\n";
        let r = parse(
            Some(stat),
            Some("5000.50 9000.00\n"),
            Some(limits),
            1_000_000,
        );
        assert_eq!(r.cpu_seconds, Some(3.0));
        assert_eq!(r.resident_bytes, Some(2560 * 4096));
        assert_eq!(r.max_fds, Some(20000));
        assert_eq!(r.start_time_seconds, Some(1_000_000.0 - 5000.5 + 120.0));
        assert_eq!(parse(None, None, None, 0), Readings::default());
    }

    #[test]
    fn this_process_reads_back() {
        let r = read();
        assert!(r.cpu_seconds.is_some() && r.resident_bytes.is_some_and(|b| b > 0));
        assert!(r.open_fds.is_some_and(|n| n > 0) && r.max_fds.is_some_and(|n| n > 0));
        let now = crate::clock::unix_now() as f64;
        assert!(r
            .start_time_seconds
            .is_some_and(|t| t <= now + 1.0 && t > now - 86_400.0 * 365.0));
    }
}
