//! The load generator. Each load thread runs its own single-threaded runtime with a pool of
//! virtual clients; a virtual client makes K connections per TLS session (the first a full
//! handshake, the rest resumed), one at a time. Open loop: connections start on a schedule at
//! the offered rate, whatever the server does, and latency runs from the scheduled start, so a
//! slow server cannot hide its queue (coordinated omission). Closed loop: C clients back to back.

use std::cell::{Cell, RefCell};
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, HandshakeKind};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::http::{self, Expect};
use crate::report::StepMeta;
use crate::stats::{Failure, StepAcc};
use crate::tls::ClientTls;
use crate::{procfs, BenchError};

#[derive(Debug, Clone)]
pub enum Schedule {
    /// `concurrency` clients back to back for `steps` steps.
    Closed { concurrency: usize, steps: usize },
    /// One step per offered rate (connections per second).
    Open { rates: Vec<f64> },
}

impl Schedule {
    pub fn steps(&self) -> usize {
        match self {
            Schedule::Closed { steps, .. } => *steps,
            Schedule::Open { rates } => rates.len(),
        }
    }
}

/// Offered rates are bounded to 0.01 ..= 10 million connections per second.
const MIN_RATE: f64 = 0.01;
const MAX_RATE: f64 = 1e7;

/// The offered rates of a ramp: start, start+step, ... up to max inclusive.
pub fn ramp(start: f64, step: f64, max: f64) -> Result<Vec<f64>, BenchError> {
    let bad = |reason: &str| BenchError::Option {
        flag: "--rate-start/--rate-step/--rate-max",
        reason: reason.into(),
    };
    // The bounds keep each thread's arrival interval a sane, non-zero duration.
    if !(start >= MIN_RATE && max >= start && step >= 0.0 && max <= MAX_RATE) {
        return Err(bad(
            "need 0.01 <= rate-start <= rate-max <= 10000000 and rate-step >= 0",
        ));
    }
    if step == 0.0 {
        return Ok(vec![start]);
    }
    let n = ((max - start) / step).floor() + 1.0;
    if n > 10_000.0 {
        return Err(bad("more than 10000 steps: raise --rate-step"));
    }
    #[allow(clippy::cast_sign_loss)] // positive and at most 10000, checked above
    let n = n as usize;
    Ok((0..n).map(|i| start + step * i as f64).collect())
}

pub struct LoadPlan {
    pub target: SocketAddr,
    /// Source addresses the TLS sessions connect from, one each in turn (empty: the system's
    /// choice). Many loopback addresses stand for many clients.
    pub sources: Vec<std::net::IpAddr>,
    pub server_name: ServerName<'static>,
    pub host_header: String,
    pub tls: ClientTls,
    /// Plain TCP, no TLS (the floor a terminator is compared with).
    pub plain: bool,
    pub requests_per_session: u32,
    pub keepalive: u32,
    pub path: String,
    pub expect: Expect,
    pub threads: usize,
    /// Pin load thread i to `cpus[i % len]`; empty = no pinning.
    pub cpus: Vec<usize>,
    pub schedule: Schedule,
    pub step: Duration,
    pub timeout: Duration,
    pub max_in_flight: usize,
    /// Virtual clients made before the run (spread over the threads).
    pub clients: usize,
    /// Server processes whose tree's CPU time is charged per step.
    pub server_pids: Vec<u32>,
    pub progress: bool,
}

/// What the server chose, from the first connection that completed.
#[derive(Debug, Clone, Default)]
pub struct Negotiated {
    pub protocol: Option<String>,
    pub cipher_suite: Option<String>,
    pub kx_group: Option<String>,
    pub alpn: Option<String>,
}

pub struct LoadResult {
    pub steps: Vec<(StepMeta, StepAcc)>,
    pub negotiated: Negotiated,
}

#[derive(Default)]
struct Live {
    ok: AtomicU64,
    failed: AtomicU64,
    in_flight: AtomicU64,
    negotiated: Mutex<Option<Negotiated>>,
}

struct Done {
    resumed: bool,
    bytes: u64,
    at: Instant,
}

/// One connection: TCP, TLS handshake, `keepalive` requests, answers checked.
async fn transaction(
    plan: &LoadPlan,
    (cfg, source): (Arc<ClientConfig>, Option<std::net::IpAddr>),
    live: &Live,
    buf: &mut [u8],
) -> Result<Done, (Failure, String)> {
    let tcp = connect_from(plan.target, source)
        .await
        .map_err(|e| (Failure::Connect, e.to_string()))?;
    // Without it, small answers wait for delayed ACKs (the 40 ms latency Bernat's stud runs showed).
    let _ = tcp.set_nodelay(true);
    if plan.plain {
        let mut tcp = tcp;
        let bytes = exchange(plan, &mut tcp, buf).await?;
        return Ok(Done {
            resumed: false,
            bytes,
            at: Instant::now(),
        });
    }
    let mut tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(plan.server_name.clone(), tcp)
        .await
        .map_err(|e| (Failure::Handshake, e.to_string()))?;
    let conn = tls.get_ref().1;
    let resumed = conn.handshake_kind() == Some(HandshakeKind::Resumed);
    if !resumed {
        let mut n = live
            .negotiated
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if n.is_none() {
            *n = Some(Negotiated {
                protocol: conn
                    .protocol_version()
                    .map(|v| format!("{v:?}").replace("TLSv1_", "TLSv1.")),
                cipher_suite: conn
                    .negotiated_cipher_suite()
                    .map(|s| format!("{:?}", s.suite())),
                kx_group: conn
                    .negotiated_key_exchange_group()
                    .map(|g| format!("{:?}", g.name())),
                alpn: conn
                    .alpn_protocol()
                    .map(|a| String::from_utf8_lossy(a).into_owned()),
            });
        }
    }
    let bytes = exchange(plan, &mut tls, buf).await?;
    let at = Instant::now();
    // close_notify, bounded: a server that already closed makes this fail, which is fine.
    let _ = tokio::time::timeout(Duration::from_secs(1), tls.shutdown()).await;
    Ok(Done { resumed, bytes, at })
}

/// The `keepalive` requests of one connection and their answers, checked; the bytes read.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    plan: &LoadPlan,
    s: &mut S,
    buf: &mut [u8],
) -> Result<u64, (Failure, String)> {
    let mut bytes = 0;
    let keepalive = plan.keepalive > 1;
    for i in 0..plan.keepalive {
        let last = i + 1 == plan.keepalive;
        s.write_all(&http::request(
            &plan.path,
            &plan.host_header,
            keepalive,
            last,
        ))
        .await
        .map_err(|e| (Failure::Io, e.to_string()))?;
        bytes += http::read_response(s, buf, plan.expect, !last).await?;
    }
    Ok(bytes)
}

/// A TCP connection to `target`, from `source` when given.
async fn connect_from(
    target: SocketAddr,
    source: Option<std::net::IpAddr>,
) -> std::io::Result<TcpStream> {
    let Some(ip) = source else {
        return TcpStream::connect(target).await;
    };
    let socket = if target.is_ipv6() {
        tokio::net::TcpSocket::new_v6()?
    } else {
        tokio::net::TcpSocket::new_v4()?
    };
    socket.bind(SocketAddr::new(ip, 0))?;
    socket.connect(target).await
}

/// A virtual client: its session configuration, how many connections it made with it, and the
/// address it connects from.
struct Client {
    cfg: Arc<ClientConfig>,
    used: u32,
    source: Option<std::net::IpAddr>,
    /// A connection of this session completed: the next ones offer to resume it.
    established: bool,
}

struct Thread {
    plan: Arc<LoadPlan>,
    /// When step 0 begins.
    start: Instant,
    live: Arc<Live>,
    stats: RefCell<Vec<StepAcc>>,
    /// Clients between connections, oldest first: taken in turn, so every session carries
    /// its share of the load (a stack would let a few carry it all, from a few addresses).
    idle: RefCell<std::collections::VecDeque<Client>>,
    in_flight: Cell<usize>,
    max_in_flight: usize,
    /// The next session's place in the source addresses.
    made: Cell<usize>,
}

impl Thread {
    /// The source address of the next TLS session: threads take turns through them (thread
    /// i: i, i + threads, ...), so each address makes its share of new sessions.
    fn next_source(&self) -> Option<std::net::IpAddr> {
        let sources = &self.plan.sources;
        if sources.is_empty() {
            return None;
        }
        let n = self.made.get();
        self.made.set(n + self.plan.threads.max(1));
        Some(sources[n % sources.len()])
    }

    fn take_client(&self) -> Client {
        let mut c = self
            .idle
            .borrow_mut()
            .pop_front()
            .unwrap_or_else(|| Client {
                cfg: self.plan.tls.new_session(),
                used: 0,
                source: self.next_source(),
                established: false,
            });
        if c.used == self.plan.requests_per_session {
            // A new session from the next address; its resumptions come from the same one.
            c = Client {
                cfg: self.plan.tls.new_session(),
                used: 0,
                source: self.next_source(),
                established: false,
            };
        }
        c.used += 1;
        c
    }

    /// Counts a transaction in flight from the moment it is decided, not when its task first
    /// runs: an open loop behind schedule would otherwise spawn past `max_in_flight`.
    fn begin(&self) {
        self.in_flight.set(self.in_flight.get() + 1);
        self.live.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// The step whose wall-clock window holds `at` (the last one for stragglers).
    fn step_at(&self, at: Instant) -> usize {
        let s =
            at.saturating_duration_since(self.start).as_nanos() / self.plan.step.as_nanos().max(1);
        usize::try_from(s)
            .unwrap_or(usize::MAX)
            .min(self.plan.schedule.steps() - 1)
    }

    /// Runs one transaction (after `begin`). Attempts and failures count in `step`, the one it
    /// was started (or scheduled) in, so a step's failure ratio is that of its own arrivals
    /// (a timeout seconds later must not land on a later step's ratio). Successes, with their
    /// latency (from `since`), count in the step in which they ended, as the Avalanche in Bernat's benchmark
    /// counted per second: a saturated server's successful TPS is what it completed in that
    /// window, not the arrivals it eventually served.
    async fn run_one(self: Rc<Self>, step: usize, since: Instant) {
        let mut client = self.take_client();
        let offered =
            client.established && self.plan.requests_per_session > 1 && self.plan.tls.resumes();
        let mut buf = vec![0u8; 16 * 1024];
        let out = tokio::time::timeout(
            self.plan.timeout,
            transaction(
                &self.plan,
                (client.cfg.clone(), client.source),
                &self.live,
                &mut buf,
            ),
        )
        .await
        .unwrap_or_else(|_| Err((Failure::Timeout, "timed out".into())));
        {
            let done = self.step_at(Instant::now());
            let mut stats = self.stats.borrow_mut();
            stats[step].attempted += 1;
            stats[step].offered_resumption += u64::from(offered);
            match out {
                Ok(d) => {
                    client.established = true;
                    let s = &mut stats[done];
                    s.ok += 1;
                    s.resumed += u64::from(d.resumed);
                    s.bytes += d.bytes;
                    s.latency
                        .record(d.at.saturating_duration_since(since).as_micros() as u64);
                    self.live.ok.fetch_add(1, Ordering::Relaxed);
                }
                Err((f, _)) => {
                    stats[step].fail(f);
                    stats[step].offered_failed += u64::from(offered);
                    self.live.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.idle.borrow_mut().push_back(client);
        self.in_flight.set(self.in_flight.get() - 1);
        self.live.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    async fn open_loop(self: Rc<Self>, start: Instant, rates: Vec<f64>, idx: usize) {
        let threads = self.plan.threads as f64;
        for (s, rate) in rates.iter().enumerate() {
            let step_start = start + self.plan.step * s as u32;
            let step_end = step_start + self.plan.step;
            let per_thread = rate / threads;
            if per_thread <= 0.0 {
                continue;
            }
            let interval = Duration::from_secs_f64(1.0 / per_thread);
            // Threads interleave their arrivals instead of starting in bursts.
            let mut next = step_start + interval.mul_f64(idx as f64 / threads);
            while next < step_end {
                if next > Instant::now() {
                    tokio::time::sleep_until(next.into()).await;
                }
                if self.in_flight.get() >= self.max_in_flight {
                    let mut stats = self.stats.borrow_mut();
                    stats[s].attempted += 1;
                    stats[s].fail(Failure::Overload);
                    self.live.failed.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.begin();
                    tokio::task::spawn_local(self.clone().run_one(s, next));
                }
                next += interval;
            }
        }
    }

    async fn closed_loop(self: Rc<Self>, start: Instant, clients: usize, steps: usize) {
        let end = start + self.plan.step * steps as u32;
        tokio::time::sleep_until(start.into()).await;
        let mut tasks = Vec::new();
        for _ in 0..clients {
            let me = self.clone();
            tasks.push(tokio::task::spawn_local(async move {
                loop {
                    let t0 = Instant::now();
                    if t0 >= end {
                        break;
                    }
                    let s = me.step_at(t0);
                    me.begin();
                    me.clone().run_one(s, t0).await;
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    }
}

fn thread_main(
    plan: Arc<LoadPlan>,
    live: Arc<Live>,
    idx: usize,
    start: Instant,
) -> std::io::Result<Vec<StepAcc>> {
    if !plan.cpus.is_empty() {
        let id = plan.cpus[idx % plan.cpus.len()];
        if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
            // Unpinned load would share the server's CPU unnoticed: say so.
            eprintln!("shuck bench: cannot pin load thread {idx} to CPU {id}; it runs unpinned");
        }
    }
    let steps = plan.schedule.steps();
    let threads = plan.threads;
    let t = Rc::new(Thread {
        max_in_flight: plan.max_in_flight.div_ceil(threads),
        stats: RefCell::new(vec![StepAcc::default(); steps]),
        idle: RefCell::new(std::collections::VecDeque::new()),
        in_flight: Cell::new(0),
        made: Cell::new(idx),
        live,
        plan,
        start,
    });
    // Clients made up front, so even a light load is spread over many sessions.
    let mine = plan_clients_for(&t.plan, idx);
    for _ in 0..mine {
        let c = Client {
            cfg: t.plan.tls.new_session(),
            used: 0,
            source: t.next_source(),
            established: false,
        };
        t.idle.borrow_mut().push_back(c);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let t2 = t.clone();
    local.block_on(&rt, async move {
        match t2.plan.schedule.clone() {
            Schedule::Open { rates } => t2.clone().open_loop(start, rates, idx).await,
            Schedule::Closed { concurrency, steps } => {
                let share = concurrency / threads + usize::from(idx < concurrency % threads);
                t2.clone().closed_loop(start, share, steps).await;
            }
        }
        // Let the last arrivals finish; each is bounded by the transaction timeout.
        let deadline = Instant::now() + t2.plan.timeout + Duration::from_secs(2);
        while t2.in_flight.get() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let stats = t.stats.borrow().clone();
    Ok(stats)
}

/// This thread's share of the clients made before the run.
fn plan_clients_for(plan: &LoadPlan, idx: usize) -> usize {
    let threads = plan.threads.max(1);
    plan.clients / threads + usize::from(idx < plan.clients % threads)
}

/// One connection before the run: a wrong CA, port or protocol fails here with its reason
/// instead of as a step full of failures.
pub fn probe(plan: &LoadPlan) -> Result<Negotiated, BenchError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(BenchError::Threads)?;
    let live = Live::default();
    let mut buf = vec![0u8; 16 * 1024];
    let out = rt.block_on(async {
        tokio::time::timeout(
            plan.timeout,
            transaction(
                plan,
                (plan.tls.new_session(), plan.sources.first().copied()),
                &live,
                &mut buf,
            ),
        )
        .await
        .unwrap_or_else(|_| Err((Failure::Timeout, "timed out".into())))
    });
    match out {
        Ok(_) => Ok(live
            .negotiated
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .unwrap_or_default()),
        Err((f, why)) => Err(BenchError::Unreachable {
            target: plan.target.to_string(),
            reason: format!("{}: {why}", f.name()),
        }),
    }
}

/// The progress line on stderr: about once a second, rewritten in place on a terminal, and at
/// least once per step in a log.
struct Progress {
    on: bool,
    tty: bool,
    last_ok: u64,
    last_failed: u64,
    last_print: Instant,
}

impl Progress {
    fn new(on: bool) -> Progress {
        Progress {
            on,
            tty: std::io::stderr().is_terminal(),
            last_ok: 0,
            last_failed: 0,
            last_print: Instant::now(),
        }
    }

    /// `(step, nsteps)`: the step under way, counted from 1.
    fn tick(
        &mut self,
        live: &Live,
        (step, nsteps): (usize, usize),
        offered: Option<f64>,
        step_end: Instant,
    ) {
        let elapsed = self.last_print.elapsed().as_secs_f64();
        if !self.on || !(elapsed >= 0.99 || (!self.tty && Instant::now() >= step_end)) {
            return;
        }
        let ok = live.ok.load(Ordering::Relaxed);
        let failed = live.failed.load(Ordering::Relaxed);
        let text = format!(
            "step {step}/{nsteps}{}: {:.0} ok/s, {:.0} failed/s, {} in flight",
            offered
                .map(|r| format!(" offered {r:.0}/s"))
                .unwrap_or_default(),
            (ok - self.last_ok) as f64 / elapsed,
            (failed - self.last_failed) as f64 / elapsed,
            live.in_flight.load(Ordering::Relaxed)
        );
        if self.tty {
            eprint!("\r{text:<78}");
        } else {
            eprintln!("{text}");
        }
        (self.last_ok, self.last_failed, self.last_print) = (ok, failed, Instant::now());
    }

    fn finish(&self) {
        if self.on && self.tty {
            eprintln!();
        }
    }
}

pub fn run(plan: LoadPlan) -> Result<LoadResult, BenchError> {
    if plan.threads == 0 || plan.requests_per_session == 0 || plan.keepalive == 0 {
        return Err(BenchError::Option {
            flag: "--threads/--requests-per-session/--keepalive",
            reason: "must be at least 1".into(),
        });
    }
    let nsteps = plan.schedule.steps();
    if nsteps == 0 {
        return Err(BenchError::Option {
            flag: "--duration",
            reason: "no step to run: the duration must be at least one step".into(),
        });
    }
    let mut negotiated = probe(&plan)?;
    let plan = Arc::new(plan);
    let live = Arc::new(Live::default());
    let start = Instant::now() + Duration::from_millis(100);
    let mut handles = Vec::new();
    for idx in 0..plan.threads {
        let (p, l) = (plan.clone(), live.clone());
        handles.push(
            std::thread::Builder::new()
                .name(format!("load-{idx}"))
                .spawn(move || thread_main(p, l, idx, start))
                .map_err(BenchError::Threads)?,
        );
    }
    let mut metas = Vec::with_capacity(nsteps);
    let cpu = |pids: &[u32]| {
        if pids.is_empty() {
            None
        } else {
            procfs::tree_cpu_us(pids).ok()
        }
    };
    std::thread::sleep(start.saturating_duration_since(Instant::now()));
    let me = [std::process::id()];
    let mut cpu_before = cpu(&plan.server_pids);
    let mut client_before = cpu(&me);
    let mut progress = Progress::new(plan.progress);
    for s in 0..nsteps {
        let step_end = start + plan.step * (s as u32 + 1);
        let offered = match &plan.schedule {
            Schedule::Open { rates } => Some(rates[s]),
            Schedule::Closed { .. } => None,
        };
        while Instant::now() < step_end {
            let wait = step_end
                .saturating_duration_since(Instant::now())
                .min(Duration::from_secs(1));
            std::thread::sleep(wait);
            progress.tick(&live, (s + 1, nsteps), offered, step_end);
        }
        let cpu_now = cpu(&plan.server_pids);
        let client_now = cpu(&me);
        metas.push(StepMeta {
            start_s: plan.step.as_secs_f64() * s as f64,
            duration_s: plan.step.as_secs_f64(),
            offered_rate: offered,
            server_cpu_us: cpu_before
                .zip(cpu_now)
                .map(|(a, b)| b.saturating_sub(a) as f64),
            client_cpu_us: client_before
                .zip(client_now)
                .map(|(a, b)| b.saturating_sub(a) as f64),
        });
        if s + 1 < nsteps {
            cpu_before = cpu_now;
            client_before = client_now;
        }
    }
    progress.finish();
    let mut merged = vec![StepAcc::default(); nsteps];
    for h in handles {
        let stats = h
            .join()
            .map_err(|_| BenchError::Threads(std::io::Error::other("a load thread panicked")))?
            .map_err(BenchError::Threads)?;
        for (m, s) in merged.iter_mut().zip(&stats) {
            m.merge(s);
        }
    }
    // Connections still in flight at the end finish during the drain and count as successes of
    // the last step: its window runs until they are done, so its TPS and CPU are not inflated.
    if let Some(last) = metas.last_mut() {
        let last_start = start + plan.step * (nsteps as u32 - 1);
        last.duration_s = last_start.elapsed().as_secs_f64().max(last.duration_s);
        last.server_cpu_us = cpu_before
            .zip(cpu(&plan.server_pids))
            .map(|(a, b)| b.saturating_sub(a) as f64);
        last.client_cpu_us = client_before
            .zip(cpu(&me))
            .map(|(a, b)| b.saturating_sub(a) as f64);
    }
    if let Some(n) = live
        .negotiated
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
    {
        negotiated = n;
    }
    Ok(LoadResult {
        steps: metas.into_iter().zip(merged).collect(),
        negotiated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramp_includes_both_ends() {
        assert_eq!(
            ramp(100.0, 50.0, 300.0).unwrap(),
            vec![100.0, 150.0, 200.0, 250.0, 300.0]
        );
        assert_eq!(ramp(100.0, 0.0, 100.0).unwrap(), vec![100.0]);
        assert_eq!(ramp(100.0, 70.0, 300.0).unwrap(), vec![100.0, 170.0, 240.0]);
    }

    #[test]
    fn bad_ramps_are_refused() {
        assert!(ramp(0.0, 10.0, 100.0).is_err());
        assert!(ramp(200.0, 10.0, 100.0).is_err());
        assert!(ramp(1.0, 0.0001, 100.0).is_err());
        assert!(ramp(f64::NAN, 1.0, 100.0).is_err());
    }
}
