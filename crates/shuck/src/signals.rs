//! The signal loop while serving. TERM, INT and QUIT stop (the first drains, the second exits at
//! once), HUP reloads, USR2 upgrades the binary, USR1 is answered (there is nothing to reopen);
//! every other signal whose default would end the process is ignored with a line saying so. The
//! loop never waits on a reload's or an upgrade's I/O: both run on their own, so a stop is acted
//! on at once whatever else is under way.

use std::collections::VecDeque;

use shuck_proxy::reload::ProcessTimeouts;
use shuck_proxy::server::{CertificateUpdates, Reloader};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cli::ServeArgs;
use crate::reloading::{Job, Work};
use crate::upgrading::{Outcome, Starting, Upgrade};

pub(crate) struct Signals {
    term: Signal,
    int: Signal,
    quit: Signal,
    hup: Signal,
    usr1: Signal,
    usr2: Signal,
}

/// What the loop works with.
pub(crate) struct Serving {
    pub(crate) args: ServeArgs,
    pub(crate) reloader: Reloader,
    pub(crate) updates: Option<CertificateUpdates>,
    pub(crate) upgrade: Upgrade,
    /// Counts the stop signals: the server drains at 1 and exits at 2.
    pub(crate) stops: watch::Sender<u32>,
}

impl Signals {
    /// Installs the handlers (in the runtime entered), the ignored signals' among them.
    pub(crate) fn install() -> std::io::Result<Signals> {
        let signals = Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            quit: signal(SignalKind::quit())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        };
        ignore_the_rest()?;
        Ok(signals)
    }

    /// Runs the loop for the life of the process.
    pub(crate) async fn handle(mut self, serving: Serving) {
        let mut state = Loop::new(serving);
        loop {
            tokio::select! {
                _ = self.term.recv() => state.stop("TERM"),
                _ = self.int.recv() => state.stop("INT"),
                _ = self.quit.recv() => state.stop("QUIT"),
                _ = self.hup.recv() => state.hangup(),
                _ = self.usr1.recv() => tracing::info!("SIGUSR1: nothing to reopen (shuck writes only to standard error, which whoever started it holds)"),
                _ = self.usr2.recv() => state.start_upgrade(),
                () = past(state.job.as_ref().and_then(Job::deadline)) => state.job_past_deadline(),
                reloader = finished_job(&mut state.job) => state.job_done(reloader),
                done = finished_upgrade(&mut state.upgrading) => state.upgrade_done(done),
                Some(frontend) = next_update(&mut state.updates) => state.queue(Work::Refresh(frontend)),
            }
        }
    }
}

/// Where the loop is: the reload job under way and what waits for it, the upgrade under way.
struct Loop {
    args: ServeArgs,
    /// `None` while a job holds it (or after a job was lost).
    reloader: Option<Reloader>,
    timeouts: ProcessTimeouts,
    job: Option<Job>,
    /// Reloads and refreshes asked while a job ran (a SIGHUP is kept once).
    waiting: VecDeque<Work>,
    /// Lost for good: a reload task ended without giving the reloader back.
    lost: bool,
    updates: Option<CertificateUpdates>,
    /// The upgrade, until one hands over.
    upgrade: Option<Upgrade>,
    upgrading: Option<JoinHandle<(Upgrade, Outcome)>>,
    /// The upgrade's new process while it starts.
    starting: Starting,
    handed_over: bool,
    /// What waits for the other to end: a reload for the upgrade, an upgrade for the reload.
    waits: Waits,
    stops: watch::Sender<u32>,
}

impl Loop {
    fn new(s: Serving) -> Loop {
        Loop {
            timeouts: s.reloader.process_timeouts(),
            args: s.args,
            reloader: Some(s.reloader),
            job: None,
            waiting: VecDeque::new(),
            lost: false,
            updates: s.updates,
            starting: s.upgrade.starting.clone(),
            upgrade: Some(s.upgrade),
            upgrading: None,
            handed_over: false,
            waits: Waits::default(),
            stops: s.stops,
        }
    }

    /// A stop signal: counted (the first drains, the second exits at once); a reload under way
    /// is abandoned.
    fn stop(&mut self, signal: &str) {
        // First: once the count moves, this process may exit before the upgrade's task runs.
        self.starting.stop();
        self.stops.send_modify(|n| *n += 1);
        let n = *self.stops.borrow();
        if n == 1 {
            tracing::info!(signal, "stopping: no new connections; open ones may finish (a second stop signal ends them at once)");
        }
        if let Some(job) = &mut self.job {
            job.abandon("a stop came first");
        }
    }

    fn hangup(&mut self) {
        if self.handed_over {
            tracing::warn!(
                "SIGHUP ignored: this process has handed over to a new one and is draining"
            );
        } else {
            self.queue(Work::Reload);
        }
    }

    /// Starts `work` now, or once the job under way ends.
    fn queue(&mut self, work: Work) {
        if self.lost {
            tracing::warn!("reload ignored: an earlier reload task was lost");
            return;
        }
        if *self.stops.borrow() > 0 {
            return;
        }
        if matches!(work, Work::Reload) && self.upgrading.is_some() {
            // The new process reads the configuration itself; a reload here would change
            // sockets it has already been handed.
            tracing::warn!("reload deferred: an upgrade is under way (applied if it fails)");
            self.waits.reload = true;
            return;
        }
        let Some(reloader) = self.reloader.take() else {
            let reload = matches!(work, Work::Reload);
            if reload && self.waiting.iter().any(|w| matches!(w, Work::Reload)) {
                return;
            }
            if reload {
                let stuck = self.job.as_ref().is_some_and(Job::abandoned);
                tracing::info!(
                    stuck,
                    "SIGHUP: a reload is under way; this one runs when it ends"
                );
            }
            self.waiting.push_back(work);
            return;
        };
        self.job = Some(Job::start(work, &self.args, reloader));
    }

    fn job_done(&mut self, reloader: Option<Reloader>) {
        self.job = None;
        let Some(r) = reloader else {
            self.lost = true;
            return;
        };
        self.timeouts = r.process_timeouts();
        self.reloader = Some(r);
        if std::mem::take(&mut self.waits.upgrade) {
            self.start_upgrade();
        }
        while let Some(next) = self.waiting.pop_front() {
            self.queue(next);
            if self.job.is_some() {
                break;
            }
        }
    }

    /// The job under way is past its deadline: given up. An upgrade that waited for it starts:
    /// a job given up applies nothing, so it cannot change the sockets the upgrade hands over.
    fn job_past_deadline(&mut self) {
        let timeout = humantime::format_duration(self.timeouts.reload);
        if let Some(job) = &mut self.job {
            job.abandon(&format!("still loading after reload_timeout, {timeout}"));
        }
        if std::mem::take(&mut self.waits.upgrade) {
            self.start_upgrade();
        }
    }

    fn start_upgrade(&mut self) {
        if self.handed_over {
            tracing::warn!("SIGUSR2 ignored: this process has already handed over");
        } else if self.upgrading.is_some() {
            tracing::warn!("SIGUSR2 ignored: an upgrade is under way");
        } else if *self.stops.borrow() > 0 {
            tracing::warn!("SIGUSR2 ignored: this process is stopping");
        } else if self.job.as_ref().is_some_and(|j| !j.abandoned()) {
            // A reload may bind or close listening sockets: the upgrade hands over what is
            // in use once it has ended.
            tracing::info!("SIGUSR2: a reload is under way; the upgrade starts when it ends");
            self.waits.upgrade = true;
        } else if let Some(u) = self.upgrade.take() {
            let (stops, timeouts) = (self.stops.subscribe(), self.timeouts);
            // Off the loop: other signals are still handled while it waits.
            self.upgrading = Some(tokio::spawn(async move {
                let outcome = u.take_over(stops, timeouts).await;
                (u, outcome)
            }));
        }
    }

    /// The service stops here (handed over, or stopped with the new process): drain, unless a
    /// stop is already under way.
    fn start_drain(&self) {
        self.stops.send_if_modified(|n| {
            let start = *n == 0;
            if start {
                *n = 1;
            }
            start
        });
    }

    fn upgrade_done(&mut self, done: Result<(Upgrade, Outcome), tokio::task::JoinError>) {
        match done {
            Ok((u, Outcome::HandedOver)) => {
                self.handed_over = true;
                // Its copies of the listening sockets, now the new process's.
                u.bindings
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .release();
                self.start_drain();
            }
            Ok((u, Outcome::Stopped)) => {
                self.upgrade = Some(u);
                self.start_drain();
            }
            Ok((u, Outcome::Failed | Outcome::RolledBack)) => {
                self.upgrade = Some(u);
                if std::mem::take(&mut self.waits.reload) {
                    tracing::info!("applying the reload deferred during the upgrade");
                    self.queue(Work::Reload);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "upgrade task lost; SIGUSR2 is ignored from now on");
            }
        }
    }
}

/// A reload and an upgrade never run at once: a reload may bind or close the listening sockets
/// an upgrade hands over.
#[derive(Debug, Default)]
struct Waits {
    /// A SIGHUP that came during an upgrade: applied if it fails.
    reload: bool,
    /// A SIGUSR2 that came during a reload: the upgrade starts when the reload ends.
    upgrade: bool,
}

/// Signals whose default action ends the process and that shuck has no use for: each is
/// answered with one line (per signal received) instead. Not the faults a process raises on
/// itself (SEGV, BUS, ILL, FPE, ABRT, SYS, TRAP): those must still end it.
fn ignore_the_rest() -> std::io::Result<()> {
    let mut kinds: Vec<(i32, String)> = [
        (libc::SIGALRM, "ALRM"),
        (libc::SIGVTALRM, "VTALRM"),
        (libc::SIGPROF, "PROF"),
        (libc::SIGIO, "IO"),
        (libc::SIGPWR, "PWR"),
        (libc::SIGSTKFLT, "STKFLT"),
        (libc::SIGXCPU, "XCPU"),
        (libc::SIGXFSZ, "XFSZ"),
    ]
    .into_iter()
    .map(|(n, name)| (n, name.to_string()))
    .collect();
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    kinds.extend((min..=max).map(|n| (n, format!("RTMIN+{}", n - min))));
    for (n, name) in kinds {
        let mut s = signal(SignalKind::from_raw(n))?;
        tokio::spawn(async move {
            while s.recv().await.is_some() {
                tracing::warn!(signal = %name, "signal ignored: shuck acts on TERM, INT, QUIT (stop), HUP (reload), USR2 (upgrade) and USR1");
            }
        });
    }
    Ok(())
}

/// Resolves at `deadline`; never without one.
async fn past(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// The reload job under way, once it ends; pending forever when there is none.
async fn finished_job(job: &mut Option<Job>) -> Option<Reloader> {
    match job {
        Some(j) => j.finish().await,
        None => std::future::pending().await,
    }
}

/// The upgrade under way, once it is decided; pending forever when there is none.
async fn finished_upgrade(
    upgrading: &mut Option<JoinHandle<(Upgrade, Outcome)>>,
) -> Result<(Upgrade, Outcome), tokio::task::JoinError> {
    let done = match upgrading {
        Some(task) => task.await,
        None => std::future::pending().await,
    };
    *upgrading = None;
    done
}

/// The next renewed certificate's frontend; pending forever without ACME.
async fn next_update(updates: &mut Option<CertificateUpdates>) -> Option<String> {
    match updates {
        Some(u) => u.next().await,
        None => std::future::pending().await,
    }
}
