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
pub(super) struct Readings {
    pub(super) cpu_seconds: Option<f64>,
    pub(super) resident_bytes: Option<i64>,
    pub(super) open_fds: Option<i64>,
    pub(super) max_fds: Option<i64>,
    pub(super) start_time_seconds: Option<f64>,
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let r = read();
        let e = &mut encoder;
        let cpu = r.cpu_seconds.map(ConstCounter::new);
        one(
            e,
            "process_cpu_seconds",
            "User and system CPU time spent, in seconds",
            cpu,
        )?;
        let rss = r.resident_bytes.map(ConstGauge::new);
        one(
            e,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            rss,
        )?;
        let open = r.open_fds.map(ConstGauge::new);
        one(e, "process_open_fds", "Open file descriptors", open)?;
        let max = r.max_fds.map(ConstGauge::new);
        one(
            e,
            "process_max_fds",
            "The open file descriptors limit (soft)",
            max,
        )?;
        let start = r.start_time_seconds.map(ConstGauge::new);
        let help = "Start time of the process since the Unix epoch, in seconds";
        one(e, "process_start_time_seconds", help, start)
    }
}

/// One metric, if it was read.
fn one(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: Option<impl EncodeMetric>,
) -> Result<(), std::fmt::Error> {
    let Some(m) = metric else { return Ok(()) };
    m.encode(encoder.encode_descriptor(name, help, None, m.metric_type())?)
}

pub(super) fn read() -> Readings {
    let text = |p: &str| std::fs::read_to_string(p).ok();
    let mut r = parse(&Texts {
        stat: text("/proc/self/stat"),
        status: text("/proc/self/status"),
        system: text("/proc/stat"),
        limits: text("/proc/self/limits"),
    });
    r.open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| i64::try_from(d.count()).unwrap_or(i64::MAX));
    r
}

/// The clock ticks per second /proc's times are in (USER_HZ: 100 on every Linux).
const TICKS: f64 = 100.0;

/// What /proc gave: /proc/self/stat, /proc/self/status, /proc/stat, /proc/self/limits.
struct Texts {
    stat: Option<String>,
    status: Option<String>,
    system: Option<String>,
    limits: Option<String>,
}

fn parse(t: &Texts) -> Readings {
    let mut r = Readings::default();
    // Fields after the command name, which may hold spaces and parentheses: from the last ')'.
    let fields: Vec<&str> = t
        .stat
        .as_deref()
        .and_then(|s| s.rsplit_once(')'))
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // proc_pid_stat(5): utime is field 14, stime 15, starttime 22; `fields` starts at field 3.
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    if let (Some(u), Some(s)) = (field(14), field(15)) {
        r.cpu_seconds = Some((u + s) as f64 / TICKS);
    }
    // In kB whatever the page size (stat's rss counts pages).
    r.resident_bytes = line_value(t.status.as_deref(), "VmRSS:").map(|kb| kb * 1024);
    // The boot time as a fixed number (not now minus uptime, which moves between scrapes).
    let booted = line_value(t.system.as_deref(), "btime");
    if let (Some(b), Some(start)) = (booted, field(22)) {
        r.start_time_seconds = Some(b as f64 + start as f64 / TICKS);
    }
    r.max_fds = t
        .limits
        .as_deref()
        .and_then(|l| l.lines().find(|l| l.starts_with("Max open files")))
        .and_then(|l| l.split_whitespace().nth(3)?.parse().ok());
    r
}

/// The number after `key` on its line of `text`.
fn line_value(text: Option<&str>, key: &str) -> Option<i64> {
    text?
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_texts_are_read_as_proc_pid_stat_describes_them() {
        let t = Texts {
            stat: Some("4242 (shuck (w) 1) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 3 0 12000 300000000 2560 18446744073709551615".into()),
            status: Some("Name:\tshuck\nVmRSS:\t   10240 kB\n".into()),
            system: Some("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n".into()),
            limits: Some("Limit                     Soft Limit           Hard Limit           Units\nMax open files            20000                20000                files\n".into()),
        };
        let r = parse(&t);
        assert_eq!(r.cpu_seconds, Some(3.0));
        assert_eq!(r.resident_bytes, Some(10240 * 1024));
        assert_eq!(r.max_fds, Some(20000));
        assert_eq!(r.start_time_seconds, Some(1_700_000_120.0));
        let none = Texts {
            stat: None,
            status: None,
            system: None,
            limits: None,
        };
        assert_eq!(parse(&none), Readings::default());
    }

    #[test]
    fn this_process_reads_back() {
        let r = read();
        assert!(r.cpu_seconds.is_some() && r.resident_bytes.is_some_and(|b| b > 0));
        assert!(r.open_fds.is_some_and(|n| n > 0) && r.max_fds.is_some_and(|n| n > 0));
        let now = crate::sys::clock::unix_now() as f64;
        assert!(r
            .start_time_seconds
            .is_some_and(|t| t <= now + 1.0 && t > now - 86_400.0 * 365.0));
    }
}
