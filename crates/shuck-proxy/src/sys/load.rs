//! How busy a worker is with handshakes, and how many new full handshakes it lets in.
//!
//! A worker is one thread: the share of its time spent in rustls' synchronous handshake step
//! (the ClientHello processed, the signature made) is measured over windows of 100 ms. When
//! a window's share passes the threshold (`overload_threshold`), the share of *new full*
//! handshakes let in is cut by 30%; each window under it gives back 10 points. Resumptions
//! are always let in: they cost a fraction of a full handshake, and serving them is what keeps
//! returning clients unaffected by a flood of new ones. Clients already making full handshakes
//! (per `per_client`) get the square of the share: the heaviest sources are shed first.
//!
//! Per worker, in `Cell`s: nothing is shared between workers, no atomics on the path.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The window the share is measured over.
const WINDOW: Duration = Duration::from_millis(100);
/// Shares in millionths.
const WHOLE: u32 = 1_000_000;
/// The least share of new full handshakes let in while overloaded: a worker keeps taking some
/// new clients, and keeps measuring.
const FLOOR: u32 = 20_000;

#[derive(Debug)]
pub(crate) struct HandshakeLoad {
    window_start: Cell<Option<Instant>>,
    busy: Cell<Duration>,
    /// The share of new full handshakes let in, in millionths.
    admit: Cell<u32>,
    /// The last window's busy share, in millionths.
    last_share: Cell<u32>,
    rng: Cell<u64>,
}

impl HandshakeLoad {
    pub(crate) fn new(seed: u64) -> HandshakeLoad {
        HandshakeLoad {
            window_start: Cell::new(None),
            busy: Cell::new(Duration::ZERO),
            admit: Cell::new(WHOLE),
            last_share: Cell::new(0),
            rng: Cell::new(seed | 1),
        }
    }

    /// Counts `spent` in a handshake step ending at `now`; closes the window when it is over,
    /// adjusting the share let in against `threshold` (millionths; `WHOLE` or more: never shed).
    pub(crate) fn spent(&self, spent: Duration, now: Instant, threshold: u32) {
        self.busy.set(self.busy.get() + spent);
        self.roll(now, threshold);
    }

    fn roll(&self, now: Instant, threshold: u32) {
        let start = *self.window_start.get().get_or_insert(now);
        self.window_start.set(Some(start));
        let elapsed = now.saturating_duration_since(start);
        if elapsed < WINDOW {
            return;
        }
        let share = (self.busy.get().as_micros() * u128::from(WHOLE) / elapsed.as_micros().max(1))
            .min(u128::from(WHOLE));
        let share = u32::try_from(share).unwrap_or(WHOLE);
        self.last_share.set(share);
        let admit = self.admit.get();
        let next = if share > threshold && threshold < WHOLE {
            (admit / 10 * 7).max(FLOOR)
        } else {
            // Windows that were idle count once: the share comes back over a few windows.
            (admit + WHOLE / 10).min(WHOLE)
        };
        self.admit.set(next);
        self.window_start.set(Some(now));
        self.busy.set(Duration::ZERO);
    }

    /// Whether a new full handshake is let in now (`heavy`: its client is already making full
    /// handshakes). Always while not overloaded.
    pub(crate) fn admits_full(&self, now: Instant, threshold: u32, heavy: bool) -> bool {
        self.roll(now, threshold);
        let admit = self.admit.get();
        if admit >= WHOLE {
            return true;
        }
        let share = if heavy {
            (u64::from(admit) * u64::from(admit) / u64::from(WHOLE)) as u32
        } else {
            admit
        };
        self.next_random() % WHOLE < share
    }

    /// Whether full handshakes are being shed now (the ClientHello is then looked at).
    pub(crate) fn shedding(&self) -> bool {
        self.admit.get() < WHOLE
    }

    /// The last window's share of time in handshakes, in millionths.
    #[cfg(test)]
    fn busy_share(&self) -> u32 {
        self.last_share.get()
    }

    /// xorshift64: cheap, per worker, good enough to spread refusals.
    fn next_random(&self) -> u32 {
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        (x >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HALF: u32 = WHOLE / 2;

    #[test]
    fn a_busy_worker_sheds_new_full_handshakes_and_recovers() {
        let load = HandshakeLoad::new(7);
        let t0 = Instant::now();
        assert!(load.admits_full(t0, HALF, false));
        // 90 ms of handshakes in a 100 ms window, over a 50% threshold, three times.
        let mut t = t0;
        for _ in 0..3 {
            t += WINDOW;
            load.spent(Duration::from_millis(90), t, HALF);
        }
        assert!(load.shedding());
        assert!(load.busy_share() > 800_000, "{}", load.busy_share());
        let let_in = (0..10_000)
            .filter(|_| load.admits_full(t, HALF, false))
            .count();
        // 0.7³ ≈ 34%.
        assert!((2_500..4_500).contains(&let_in), "{let_in}");
        let heavy_in = (0..10_000)
            .filter(|_| load.admits_full(t, HALF, true))
            .count();
        assert!(heavy_in < let_in / 2, "{heavy_in} heavy against {let_in}");
        // Quiet windows give it back.
        for _ in 0..10 {
            t += WINDOW;
            load.spent(Duration::ZERO, t, HALF);
        }
        assert!(!load.shedding());
        assert!(load.admits_full(t, HALF, true));
    }

    #[test]
    fn a_threshold_of_one_never_sheds() {
        let load = HandshakeLoad::new(3);
        let mut t = Instant::now();
        for _ in 0..5 {
            t += WINDOW;
            load.spent(WINDOW, t, WHOLE);
        }
        assert!(!load.shedding());
    }
}
