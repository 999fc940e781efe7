//! How busy a worker is, and how many new full handshakes it lets in.
//!
//! A worker is one thread: its load is the CPU time the thread used (`CLOCK_THREAD_CPUTIME_ID`)
//! over the wall time of windows of 100 ms, read when a window closes (one clock read per
//! window, on the next handshake), averaged with the window before (one busy window is not
//! overload). When that passes the threshold (`overload_threshold`), the share of *new full*
//! handshakes let in is cut by 30%; each window under it gives back 10 points, and so does each
//! window that passed with no handshake at all (a worker idle since its last overload starts
//! whole again). Resumptions are always let in: they cost a fraction
//! of a full handshake, and serving them is what keeps returning clients unaffected by a flood
//! of new ones. Clients already making full handshakes (per `per_client`) get the square of the
//! share: the heaviest sources are shed first.
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

/// The calling thread's CPU time so far (zero where the clock cannot be read: never sheds).
fn thread_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map_or(Duration::ZERO, Duration::from)
}

#[derive(Debug)]
pub(crate) struct HandshakeLoad {
    /// When the window began, on the wall clock and on the thread's CPU clock.
    window: Cell<Option<(Instant, Duration)>>,
    /// The share of new full handshakes let in, in millionths.
    admit: Cell<u32>,
    /// The last windows' share of a core (each window averaged with the one before), in
    /// millionths.
    last_share: Cell<u32>,
    rng: Cell<u64>,
    /// Hellos that offered to resume in this window, and those of them that did not resume
    /// (a full handshake, or none finished): offers are only trusted while few are bogus.
    offers: Cell<(u32, u32)>,
    /// The last window's share of bogus offers, in millionths.
    bogus_share: Cell<u32>,
    /// The worker, for the line said when shedding starts and ends.
    worker: usize,
}

impl HandshakeLoad {
    pub(crate) fn new(worker: usize) -> HandshakeLoad {
        HandshakeLoad {
            window: Cell::new(None),
            admit: Cell::new(WHOLE),
            last_share: Cell::new(0),
            rng: Cell::new(splitmix(worker as u64) | 1),
            offers: Cell::new((0, 0)),
            bogus_share: Cell::new(0),
            worker,
        }
    }

    /// Counts how a hello that offered to resume ended: resumed, or not (a full handshake, or
    /// an error).
    pub(crate) fn offer_ended(&self, resumed: bool) {
        let (n, bogus) = self.offers.get();
        self.offers.set((
            n.saturating_add(1),
            bogus.saturating_add(u32::from(!resumed)),
        ));
    }

    /// Called after each handshake step at `now`: closes the window when it is over, and
    /// adjusts the share let in against `threshold` (millionths; `WHOLE`: never shed).
    pub(crate) fn tick(&self, now: Instant, threshold: u32) {
        self.tick_with(now, threshold, thread_cpu);
    }

    fn tick_with(&self, now: Instant, threshold: u32, cpu: impl Fn() -> Duration) {
        let Some((start, cpu_start)) = self.window.get() else {
            self.window.set(Some((now, cpu())));
            return;
        };
        let elapsed = now.saturating_duration_since(start);
        if elapsed < WINDOW {
            return;
        }
        let cpu_now = cpu();
        let used = cpu_now.saturating_sub(cpu_start);
        let share = (used.as_micros() * u128::from(WHOLE) / elapsed.as_micros().max(1))
            .min(u128::from(WHOLE));
        let share = u32::try_from(share).unwrap_or(WHOLE);
        // Windows that went by without a handshake count as quiet ones: after a gap the
        // window before says nothing of now.
        let windows = u32::try_from(elapsed.as_micros() / WINDOW.as_micros()).unwrap_or(u32::MAX);
        let smoothed = if windows > 1 {
            share
        } else {
            u32::midpoint(self.last_share.get(), share)
        };
        self.last_share.set(smoothed);
        let (offered, bogus) = self.offers.replace((0, 0));
        if offered > 0 {
            let b = u64::from(bogus) * u64::from(WHOLE) / u64::from(offered);
            self.bogus_share.set(u32::try_from(b).unwrap_or(WHOLE));
        }
        let admit = self.admit.get();
        let next = if smoothed > threshold && threshold < WHOLE {
            (admit / 10 * 7).max(FLOOR)
        } else {
            admit
                .saturating_add((WHOLE / 10).saturating_mul(windows))
                .min(WHOLE)
        };
        self.say_change(admit, next, smoothed);
        self.admit.set(next);
        self.window.set(Some((now, cpu_now)));
    }

    /// One line when shedding begins and one when it ends.
    fn say_change(&self, was: u32, now: u32, share: u32) {
        if was >= WHOLE && now < WHOLE {
            tracing::warn!(
                worker = self.worker,
                cpu_share = f64::from(share) / f64::from(WHOLE),
                "worker overloaded: shedding new full handshakes, serving resumptions"
            );
        } else if was < WHOLE && now >= WHOLE {
            tracing::info!(
                worker = self.worker,
                "worker no longer overloaded: new full handshakes let in again"
            );
        }
    }

    /// Whether a hello offering to resume is let in while shedding: always, unless more than
    /// a tenth of the last window's offers did not resume (made-up tickets or PSKs, which
    /// would otherwise pass for returning clients): then as a new full handshake is.
    pub(crate) fn admits_offer(&self) -> bool {
        self.bogus_share.get() <= WHOLE / 10 || self.admits_full(false)
    }

    /// Whether a new full handshake is let in now (`heavy`: its client is already making full
    /// handshakes). Always while not shedding.
    pub(crate) fn admits_full(&self, heavy: bool) -> bool {
        let admit = self.admit.get();
        if admit >= WHOLE {
            return true;
        }
        let share = if heavy {
            u32::try_from(u64::from(admit) * u64::from(admit) / u64::from(WHOLE)).unwrap_or(0)
        } else {
            admit
        };
        self.next_random() % WHOLE < share
    }

    /// Whether new full handshakes are being shed now (the ClientHello is then looked at).
    pub(crate) fn shedding(&self) -> bool {
        self.admit.get() < WHOLE
    }

    /// The last window's share of a core, in millionths.
    #[cfg(test)]
    fn busy_share(&self) -> u32 {
        self.last_share.get()
    }

    /// xorshift64: cheap, per worker, good enough to spread refusals (seeded apart per worker).
    fn next_random(&self) -> u32 {
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        u32::try_from(x >> 32).unwrap_or(0)
    }
}

/// SplitMix64's mix: distinct seeds for neighbouring worker numbers.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HALF: u32 = WHOLE / 2;

    #[test]
    fn a_busy_worker_sheds_new_full_handshakes_and_recovers() {
        let load = HandshakeLoad::new(7);
        let cpu = Cell::new(Duration::ZERO);
        let t0 = Instant::now();
        load.tick_with(t0, HALF, || cpu.get());
        assert!(load.admits_full(false));
        // 90 ms of CPU in each 100 ms window, over a 50% threshold, four times (the first
        // averaged with nothing before it is not over).
        let mut t = t0;
        for _ in 0..4 {
            t += WINDOW;
            cpu.set(cpu.get() + Duration::from_millis(90));
            load.tick_with(t, HALF, || cpu.get());
        }
        assert!(load.shedding());
        assert!(load.busy_share() > 800_000, "{}", load.busy_share());
        let let_in = (0..10_000).filter(|_| load.admits_full(false)).count();
        // 0.7³ ≈ 34%.
        assert!((2_500..4_500).contains(&let_in), "{let_in}");
        let heavy_in = (0..10_000).filter(|_| load.admits_full(true)).count();
        assert!(heavy_in < let_in / 2, "{heavy_in} heavy against {let_in}");
        // Quiet windows give it back.
        for _ in 0..10 {
            t += WINDOW;
            load.tick_with(t, HALF, || cpu.get());
        }
        assert!(!load.shedding());
        assert!(load.admits_full(true));
    }

    #[test]
    fn one_busy_window_is_not_overload_and_idle_time_gives_the_share_back() {
        let load = HandshakeLoad::new(5);
        let cpu = Cell::new(Duration::ZERO);
        let mut t = Instant::now();
        load.tick_with(t, HALF, || cpu.get());
        t += WINDOW;
        cpu.set(cpu.get() + Duration::from_millis(95));
        load.tick_with(t, HALF, || cpu.get());
        assert!(!load.shedding(), "one busy window");
        for _ in 0..10 {
            t += WINDOW;
            cpu.set(cpu.get() + WINDOW);
            load.tick_with(t, HALF, || cpu.get());
        }
        assert!(load.shedding());
        // Five seconds with no handshake, then one: whole again.
        t += Duration::from_secs(5);
        load.tick_with(t, HALF, || cpu.get());
        assert!(!load.shedding());
    }

    #[test]
    fn after_an_idle_gap_a_low_threshold_lets_everyone_in() {
        let threshold = WHOLE / 10 * 3;
        let load = HandshakeLoad::new(1);
        let cpu = Cell::new(Duration::ZERO);
        let mut t = Instant::now();
        load.tick_with(t, threshold, || cpu.get());
        for _ in 0..10 {
            t += WINDOW;
            cpu.set(cpu.get() + WINDOW);
            load.tick_with(t, threshold, || cpu.get());
        }
        assert!(load.shedding());
        t += Duration::from_secs(5);
        load.tick_with(t, threshold, || cpu.get());
        assert!(!load.shedding(), "share {}", load.busy_share());
    }

    #[test]
    fn made_up_offers_are_shed_like_full_handshakes() {
        let load = HandshakeLoad::new(2);
        let cpu = Cell::new(Duration::ZERO);
        let mut t = Instant::now();
        load.tick_with(t, HALF, || cpu.get());
        for _ in 0..10 {
            for _ in 0..100 {
                load.offer_ended(true);
            }
            t += WINDOW;
            cpu.set(cpu.get() + WINDOW);
            load.tick_with(t, HALF, || cpu.get());
        }
        assert!(load.shedding());
        assert!(
            (0..1000).all(|_| load.admits_offer()),
            "genuine offers all let in"
        );
        for _ in 0..100 {
            load.offer_ended(false);
        }
        t += WINDOW;
        cpu.set(cpu.get() + WINDOW);
        load.tick_with(t, HALF, || cpu.get());
        let let_in = (0..1000).filter(|_| load.admits_offer()).count();
        assert!(let_in < 500, "{let_in} of 1000 bogus-looking offers let in");
    }

    #[test]
    fn a_threshold_of_one_never_sheds() {
        let load = HandshakeLoad::new(3);
        let cpu = Cell::new(Duration::ZERO);
        let mut t = Instant::now();
        for _ in 0..5 {
            load.tick_with(t, WHOLE, || cpu.get());
            t += WINDOW;
            cpu.set(cpu.get() + WINDOW);
        }
        assert!(!load.shedding());
    }

    #[test]
    fn the_thread_clock_moves_with_work() {
        let before = thread_cpu();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        assert!(thread_cpu() > before);
    }
}
