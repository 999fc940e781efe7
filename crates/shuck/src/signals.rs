//! The signal loop while serving. TERM, INT and QUIT stop (the first drains, the second exits at
//! once), HUP reloads, USR2 upgrades the binary, USR1 is answered (there is nothing to reopen);
//! every other signal whose default would end the process is ignored with a line saying so. The
//! loop never waits on a reload's or an upgrade's I/O: both run on their own, so a stop is acted
//! on at once whatever else is under way.

use std::collections::VecDeque;

use shuck_proxy::reload::ProcessTimeouts;
use shuck_proxy::server::{CertificateUpdates, Reloader};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::admin::{exit, Asked, Reply};
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
    /// The admin socket's reloads and upgrades, when it has one.
    pub(crate) asks: Option<mpsc::UnboundedReceiver<Asked>>,
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
                _ = self.hup.recv() => state.hangup(Vec::new()),
                _ = self.usr1.recv() => tracing::info!("SIGUSR1: nothing to reopen (shuck writes only to standard error, which whoever started it holds)"),
                _ = self.usr2.recv() => state.start_upgrade(),
                () = past(state.job.as_ref().and_then(Job::deadline)) => state.job_past_deadline(),
                reloader = finished_job(&mut state.job) => state.job_done(reloader),
                done = finished_upgrade(&mut state.upgrading) => state.upgrade_done(done),
                Some(frontend) = next_update(&mut state.updates) => state.queue(Work::Refresh(frontend), Vec::new()),
                Some(asked) = next_ask(&mut state.asks) => state.asked(asked),
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
    waiting: VecDeque<(Work, Replies)>,
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
    asks: Option<mpsc::UnboundedReceiver<Asked>>,
    /// Admin requests answered when the upgrade under way (or about to start) ends.
    upgrade_replies: Vec<oneshot::Sender<Reply>>,
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
            asks: s.asks,
            upgrade_replies: Vec::new(),
        }
    }

    /// A request from the admin socket.
    fn asked(&mut self, asked: Asked) {
        match asked {
            Asked::Reload(reply) => self.hangup(vec![reply]),
            Asked::Refresh(frontend, reply) => self.queue(Work::Refresh(frontend), vec![reply]),
            Asked::Upgrade(reply) => {
                self.upgrade_replies.push(reply);
                self.start_upgrade();
            }
        }
    }

    /// Answers the admin requests waiting for the upgrade.
    fn answer_upgrade(&mut self, reply: &Reply) {
        for r in self.upgrade_replies.drain(..) {
            let _ = r.send(reply.clone());
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

    /// A reload (SIGHUP, or the admin socket's, whose `replies` hear how it went).
    fn hangup(&mut self, replies: Replies) {
        if self.handed_over {
            let why = "SIGHUP ignored: this process has handed over to a new one and is draining";
            tracing::warn!("{why}");
            refuse(replies, why);
        } else {
            self.queue(Work::Reload, replies);
        }
    }

    /// Starts `work` now, or once the job under way ends; `replies` hear how it went.
    fn queue(&mut self, work: Work, replies: Replies) {
        if self.lost {
            tracing::warn!("reload ignored: an earlier reload task was lost");
            refuse(replies, "reload ignored: an earlier reload task was lost");
            return;
        }
        if *self.stops.borrow() > 0 {
            refuse(replies, "reload ignored: the process is stopping");
            return;
        }
        if matches!(work, Work::Reload) && self.upgrading.is_some() {
            // The new process reads the configuration itself; a reload here would change
            // sockets it has already been handed. A signal's reload waits for the upgrade's
            // end; an admin request is refused (its answer cannot wait that long).
            if replies.is_empty() {
                tracing::warn!("reload deferred: an upgrade is under way (applied if it fails)");
                self.waits.reload = true;
            } else {
                refuse(
                    replies,
                    "refused: an upgrade is under way; ask again once it is answered",
                );
            }
            return;
        }
        let Some(reloader) = self.reloader.take() else {
            let reload = matches!(work, Work::Reload);
            if let Some((_, waiting)) = self
                .waiting
                .iter_mut()
                .find(|(w, _)| reload && matches!(w, Work::Reload))
            {
                // One reload waiting answers everyone who asked for it.
                waiting.extend(replies);
                return;
            }
            if reload {
                let stuck = self.job.as_ref().is_some_and(Job::abandoned);
                tracing::info!(
                    stuck,
                    "SIGHUP: a reload is under way; this one runs when it ends"
                );
            }
            self.waiting.push_back((work, replies));
            return;
        };
        self.job = Some(Job::start(work, &self.args, reloader, replies));
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
        while let Some((next, replies)) = self.waiting.pop_front() {
            self.queue(next, replies);
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
        let refused = if self.handed_over {
            Some("SIGUSR2 ignored: this process has already handed over")
        } else if *self.stops.borrow() > 0 {
            Some("SIGUSR2 ignored: this process is stopping")
        } else {
            None
        };
        if let Some(why) = refused {
            tracing::warn!("{why}");
            self.answer_upgrade(&Reply::error(exit::FAILED, why));
        } else if self.upgrading.is_some() {
            // Those who asked now hear how the one under way ends.
            tracing::warn!("SIGUSR2 ignored: an upgrade is under way");
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
        } else {
            // An earlier upgrade's task was lost (said then): nothing will answer.
            let why = "SIGUSR2 ignored: an earlier upgrade task was lost";
            self.answer_upgrade(&Reply::error(exit::FAILED, why));
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
        let reply = match &done {
            Ok((_, o)) => upgrade_reply(*o),
            Err(_) => Reply::error(
                exit::FAILED,
                "upgrade task lost; SIGUSR2 is ignored from now on",
            ),
        };
        // Answered once the admin socket is the new process's alone.
        self.react_to_upgrade(done);
        self.answer_upgrade(&reply);
    }

    fn react_to_upgrade(&mut self, done: Result<(Upgrade, Outcome), tokio::task::JoinError>) {
        match done {
            Ok((u, Outcome::HandedOver)) => {
                self.handed_over = true;
                u.admin_handed_over();
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
                    self.queue(Work::Reload, Vec::new());
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "upgrade task lost; SIGUSR2 is ignored from now on");
            }
        }
    }
}

/// The admin socket's requests waiting on a job.
type Replies = Vec<oneshot::Sender<Reply>>;

/// Answers `replies` with an error: what they waited for will not happen.
fn refuse(replies: Replies, why: &str) {
    for r in replies {
        let _ = r.send(Reply::error(exit::FAILED, why));
    }
}

/// What the admin socket hears of an upgrade's end.
fn upgrade_reply(outcome: Outcome) -> Reply {
    let (exit, text) = match outcome {
        Outcome::HandedOver => (
            exit::OK,
            "upgraded: the new process serves and was confirmed; this one drains",
        ),
        Outcome::Stopped => (
            exit::OK,
            "the new process was stopped within upgrade_confirm: the service stops",
        ),
        Outcome::Failed => (
            exit::FAILED,
            "upgrade failed: the new process never served (the log says why); this one serves on",
        ),
        Outcome::RolledBack => (
            exit::FAILED,
            "upgrade rolled back: the new process died within upgrade_confirm; this one serves again",
        ),
    };
    Reply {
        exit,
        text: format!("{text}\n"),
        data: serde_json::json!({ "outcome": format!("{outcome:?}").to_lowercase() }),
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

/// The admin socket's next request for the loop; pending forever without one.
async fn next_ask(asks: &mut Option<mpsc::UnboundedReceiver<Asked>>) -> Option<Asked> {
    match asks {
        Some(a) => a.recv().await,
        None => std::future::pending().await,
    }
}

/// The next renewed certificate's frontend; pending forever without ACME.
async fn next_update(updates: &mut Option<CertificateUpdates>) -> Option<String> {
    match updates {
        Some(u) => u.next().await,
        None => std::future::pending().await,
    }
}
