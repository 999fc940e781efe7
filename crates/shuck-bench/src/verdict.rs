//! The pass/fail rule of Bernat's benchmark for a rate ramp (round 2): a step passes when fewer than 1 in 1000
//! transactions failed and its mean latency, or the mean of the next 8 steps' means, is at most
//! 100 ms. The look-ahead forgives a passing latency spike; failures are never forgiven.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Failed / attempted must stay strictly below this.
    pub max_failure_ratio: f64,
    /// Mean latency bound, milliseconds.
    pub max_mean_ms: f64,
    /// How many following steps may vouch for a step whose own mean is too high.
    pub lookahead: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            max_failure_ratio: 0.001,
            max_mean_ms: 100.0,
            lookahead: 8,
        }
    }
}

/// What the rule needs to know about one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub attempted: u64,
    pub failed: u64,
    pub successful_tps: f64,
    /// Mean latency in ms; `None` when nothing succeeded (counts as failing latency).
    pub mean_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Per step: did it pass.
    pub passes: Vec<bool>,
    /// The passing step with the highest successful TPS.
    pub best_step: Option<usize>,
    pub max_tps: Option<f64>,
    /// The best step is the ramp's last: the ramp ended before the server did, so `max_tps`
    /// is the run's ceiling, not the server's.
    pub at_ceiling: bool,
}

fn failures_ok(p: &Point, t: &Thresholds) -> bool {
    p.attempted > 0 && (p.failed as f64) / (p.attempted as f64) < t.max_failure_ratio
}

fn latency_ok(points: &[Point], i: usize, t: &Thresholds) -> bool {
    if points[i].mean_ms.is_some_and(|m| m <= t.max_mean_ms) {
        return true;
    }
    // The rule speaks of "the next 8 points": near the end of a ramp, with fewer left, there is
    // nobody to vouch (a single fast last step must not pardon a slow one).
    if t.lookahead == 0 || i + t.lookahead >= points.len() {
        return false;
    }
    let next = &points[i + 1..=i + t.lookahead];
    let mut sum = 0.0;
    for p in next {
        match p.mean_ms {
            Some(m) => sum += m,
            None => return false,
        }
    }
    sum / next.len() as f64 <= t.max_mean_ms
}

pub fn judge(points: &[Point], t: &Thresholds) -> Verdict {
    let passes: Vec<bool> = (0..points.len())
        .map(|i| failures_ok(&points[i], t) && latency_ok(points, i, t))
        .collect();
    let best_step = (0..points.len()).filter(|&i| passes[i]).max_by(|&a, &b| {
        points[a]
            .successful_tps
            .total_cmp(&points[b].successful_tps)
    });
    Verdict {
        max_tps: best_step.map(|i| points[i].successful_tps),
        at_ceiling: !points.is_empty() && best_step == Some(points.len() - 1),
        passes,
        best_step,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(tps: f64, attempted: u64, failed: u64, mean: f64) -> Point {
        Point {
            attempted,
            failed,
            successful_tps: tps,
            mean_ms: Some(mean),
        }
    }

    #[test]
    fn a_verdict_on_the_last_step_is_the_ramps_ceiling() {
        let t = Thresholds::default();
        let rising = [pt(100.0, 1000, 0, 5.0), pt(200.0, 2000, 0, 6.0)];
        assert!(judge(&rising, &t).at_ceiling);
        let saturated = [pt(100.0, 1000, 0, 5.0), pt(150.0, 2000, 40, 300.0)];
        assert!(!judge(&saturated, &t).at_ceiling);
        assert!(!judge(&[], &t).at_ceiling);
    }

    #[test]
    fn highest_step_under_both_limits_wins() {
        let pts = [
            pt(100.0, 1000, 0, 5.0),
            pt(200.0, 2000, 1, 20.0),
            pt(300.0, 3000, 0, 90.0),
            pt(310.0, 4000, 500, 400.0),
        ];
        let v = judge(&pts, &Thresholds::default());
        assert_eq!(v.passes, vec![true, true, true, false]);
        assert_eq!(v.best_step, Some(2));
        assert_eq!(v.max_tps, Some(300.0));
    }

    #[test]
    fn one_failure_per_thousand_is_already_too_many() {
        let pts = [pt(100.0, 1000, 1, 5.0), pt(100.0, 1001, 1, 5.0)];
        let v = judge(&pts, &Thresholds::default());
        assert_eq!(v.passes, vec![false, true]);
    }

    #[test]
    fn a_spike_is_forgiven_when_the_next_eight_average_under_the_limit() {
        // Step 1 spikes to 150 ms; steps 2..=9 average (8×90)/8 = 90 ms, so it passes.
        let mut pts = vec![pt(100.0, 1000, 0, 10.0), pt(200.0, 1000, 0, 150.0)];
        for k in 0..8 {
            pts.push(pt(210.0 + f64::from(k), 1000, 0, 90.0));
        }
        let v = judge(&pts, &Thresholds::default());
        assert!(v.passes[1]);
        assert_eq!(v.best_step, Some(9));
    }

    #[test]
    fn the_look_ahead_is_eight_steps_not_more() {
        // Steps 2..=9 average 120 ms; a tenth, fast step must not be counted in.
        let mut pts = vec![pt(100.0, 1000, 0, 10.0), pt(500.0, 1000, 0, 150.0)];
        for _ in 0..8 {
            pts.push(pt(200.0, 1000, 0, 120.0));
        }
        pts.push(pt(150.0, 1000, 0, 1.0));
        let v = judge(&pts, &Thresholds::default());
        assert!(!v.passes[1], "{:?}", v.passes);
        // Step 2's window (3..=10) holds the fast step: (7×120 + 1)/8 ≈ 105 ms, failing.
        assert!(!v.passes[2], "{:?}", v.passes);
        // With a look-ahead of 9 the fast step counts: (8×120 + 1)/9 ≈ 106.8 > 100, still failing;
        // the rule's window length matters, so check it is honoured.
        let t = Thresholds {
            lookahead: 9,
            max_mean_ms: 107.0,
            ..Thresholds::default()
        };
        assert!(judge(&pts, &t).passes[1]);
    }

    #[test]
    fn failures_are_never_forgiven_by_the_look_ahead() {
        let mut pts = vec![pt(300.0, 1000, 2, 10.0)];
        for _ in 0..8 {
            pts.push(pt(100.0, 1000, 0, 10.0));
        }
        let v = judge(&pts, &Thresholds::default());
        assert!(!v.passes[0]);
        assert_eq!(v.max_tps, Some(100.0));
    }

    #[test]
    fn last_step_with_high_mean_has_nobody_to_vouch() {
        let pts = [pt(100.0, 1000, 0, 10.0), pt(200.0, 1000, 0, 101.0)];
        assert_eq!(
            judge(&pts, &Thresholds::default()).passes,
            vec![true, false]
        );
    }

    #[test]
    fn fewer_than_eight_following_steps_cannot_vouch() {
        // The review's case: a fast last step with 40% failures must not pardon a 150 ms step.
        let pts = [
            pt(100.0, 1000, 0, 10.0),
            pt(4000.0, 40_000, 0, 150.0),
            pt(2520.0, 42_000, 16_800, 20.0),
        ];
        let v = judge(&pts, &Thresholds::default());
        assert_eq!(v.passes, vec![true, false, false]);
        assert_eq!(v.max_tps, Some(100.0));
        // Seven fast steps after a slow one are not eight.
        let mut pts = vec![pt(200.0, 1000, 0, 150.0)];
        pts.extend((0..7).map(|_| pt(100.0, 1000, 0, 10.0)));
        assert!(!judge(&pts, &Thresholds::default()).passes[0]);
        pts.push(pt(100.0, 1000, 0, 10.0));
        assert!(judge(&pts, &Thresholds::default()).passes[0]);
    }

    #[test]
    fn empty_steps_and_steps_without_successes_fail() {
        let pts = [
            pt(0.0, 0, 0, 0.0),
            Point {
                attempted: 10,
                failed: 0,
                successful_tps: 0.0,
                mean_ms: None,
            },
        ];
        let v = judge(&pts, &Thresholds::default());
        assert_eq!(v.passes, vec![false, false]);
        assert_eq!(v.best_step, None);
        assert_eq!(v.max_tps, None);
    }

    #[test]
    fn configurable_thresholds_apply() {
        let pts = [pt(100.0, 100, 1, 30.0), pt(200.0, 100, 0, 60.0)];
        let t = Thresholds {
            max_failure_ratio: 0.05,
            max_mean_ms: 50.0,
            lookahead: 0,
        };
        assert_eq!(judge(&pts, &t).passes, vec![true, false]);
    }
}
