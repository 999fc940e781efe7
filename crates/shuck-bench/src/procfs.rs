//! CPU time and resident memory of a server's process tree, from /proc. CPU time is the figure
//! that survives a noisy shared machine: it counts what the server spent, not what it got.

use std::collections::HashMap;

use crate::BenchError;

/// Linux reports utime/stime in USER_HZ ticks, which is 100 on every architecture the kernel
/// exposes to user space through /proc (it is fixed by the ABI, unlike the kernel's HZ).
const TICKS_PER_S: u64 = 100;

struct Stat {
    ppid: u32,
    cpu_ticks: u64,
}

fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): ppid is field 4, utime 14, stime 15, cutime 16, cstime 17. The
    // children's times keep a child that exits during a step (a forking server, a respawned
    // worker) in the sum: its time moves to its parent's cutime when it is reaped.
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some(Stat {
        ppid: f.get(1)?.parse().ok()?,
        cpu_ticks: ticks(11)? + ticks(12)? + ticks(13)? + ticks(14)?,
    })
}

/// The roots and all their descendants alive now.
pub fn tree(roots: &[u32]) -> Result<Vec<u32>, BenchError> {
    for &r in roots {
        if stat(r).is_none() {
            return Err(BenchError::Proc {
                pid: r,
                reason: "no such process".into(),
            });
        }
    }
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let dir = std::fs::read_dir("/proc").map_err(|e| BenchError::Proc {
        pid: roots.first().copied().unwrap_or(0),
        reason: e.to_string(),
    })?;
    for e in dir.flatten() {
        if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
            if let Some(s) = stat(pid) {
                children.entry(s.ppid).or_default().push(pid);
            }
        }
    }
    let mut out: Vec<u32> = roots.to_vec();
    let mut i = 0;
    while i < out.len() {
        if let Some(c) = children.get(&out[i]) {
            for &p in c {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
        i += 1;
    }
    Ok(out)
}

/// User plus system CPU time of the whole tree, in microseconds.
pub fn tree_cpu_us(roots: &[u32]) -> Result<u64, BenchError> {
    Ok(tree(roots)?
        .into_iter()
        .filter_map(stat)
        .map(|s| s.cpu_ticks * 1_000_000 / TICKS_PER_S)
        .sum())
}

/// Resident memory of the whole tree, in KiB.
pub fn tree_rss_kib(roots: &[u32]) -> Result<u64, BenchError> {
    let mut sum = 0;
    for pid in tree(roots)? {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue; // exited meanwhile
        };
        sum += text
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_tree_includes_a_child_and_counts_cpu_and_memory() {
        let me = std::process::id();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let t = tree(&[me]).unwrap();
        assert!(t.contains(&child.id()), "{t:?}");
        // Burn measurable CPU: the counter must move by at least a tick.
        let before = tree_cpu_us(&[me]).unwrap();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(60) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        assert!(tree_cpu_us(&[me]).unwrap() > before);
        assert!(tree_rss_kib(&[me]).unwrap() > 100);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_child_that_exits_keeps_its_cpu_time_in_the_tree() {
        // A shell burns CPU in a subshell, which exits and is reaped; then it becomes `sleep`.
        let mut root = std::process::Command::new("sh")
            .arg("-c")
            .arg("(i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done); exec sleep 20")
            .spawn()
            .unwrap();
        let pid = root.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default() != "sleep\n"
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the busy subshell never finished"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let cpu = tree_cpu_us(&[pid]).unwrap();
        root.kill().unwrap();
        root.wait().unwrap();
        // 300000 shell loop iterations take well over 20 ms of CPU on any machine.
        assert!(
            cpu >= 20_000,
            "{cpu} µs: the reaped subshell's time is missing"
        );
    }

    #[test]
    fn a_missing_process_is_an_error_naming_it() {
        // PIDs are below 2^22 on Linux.
        let e = tree_cpu_us(&[u32::MAX - 1]).unwrap_err().to_string();
        assert!(e.contains(&(u32::MAX - 1).to_string()), "{e}");
    }
}
