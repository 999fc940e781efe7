//! The listening addresses while shuck runs: each address bound (one socket per worker), which
//! frontend serves it, and the workers' control channels through which the start and every
//! reload open and close accept loops. It also keeps a duplicate of every socket in use: what an
//! upgrade hands to the new process.
//!
//! A reload changes the set in two steps, so a failure leaves it untouched: [`Bindings::prepare`]
//! binds every address that is new (or takes the socket of an address that moves from one
//! frontend to another), then [`Bindings::commit`] starts the new accept loops and closes the
//! ones no longer configured. Closing an address only stops accepting on it: the connections
//! accepted from it run to their end.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::config::Frontend;
use crate::error::{Error, Listener, Result};
use crate::sys::listener;
use crate::sys::upgrade::{Handover, Inherited};
use crate::tls::TlsSlot;
use crate::worker::accept::Control;
use crate::worker::SettingsSlot;

/// A frontend's slots as the workers share them: the settings, and each worker's TLS slot.
#[derive(Clone)]
pub(crate) struct FrontendSlots {
    pub settings: SettingsSlot,
    pub tls: Vec<TlsSlot>,
}

/// One address listened on: one socket per worker (duplicates; the workers hold the others).
struct Bound {
    key: u64,
    frontend: String,
    /// Its position in the frontend's `listen`, and the address as configured (port 0 stays 0).
    index: usize,
    want: SocketAddr,
    addr: SocketAddr,
    sockets: Vec<TcpListener>,
}

/// The addresses a reload adds, bound but not yet accepted on: each with the sockets its workers
/// will take (made now, while failing still changes nothing).
pub(crate) struct Prepared {
    added: Vec<(Bound, Vec<TcpListener>)>,
}

/// The listening addresses in use and the way to the workers.
pub struct Bindings {
    workers: Vec<UnboundedSender<Control>>,
    live: Vec<Bound>,
    next_key: u64,
    /// The metrics endpoint's socket, handed over on upgrade like the others.
    metrics: Option<TcpListener>,
    /// The `[[redirect]]` listeners' sockets, in configuration order, handed over likewise.
    redirects: Vec<TcpListener>,
}

/// The handover name of the metrics endpoint's socket (no frontend has listen index `usize::MAX`).
pub(crate) const METRICS: &str = "metrics";
/// The handover name of the `[[redirect]]` listeners' sockets (indexed in configuration order).
pub(crate) const REDIRECT: &str = "redirect";

impl Bindings {
    /// No addresses yet; one control channel per worker (the receivers go to the workers).
    pub(crate) fn new(workers: usize) -> (Bindings, Vec<UnboundedReceiver<Control>>) {
        let (senders, receivers) = (0..workers).map(|_| unbounded_channel()).unzip();
        let bindings = Bindings {
            workers: senders,
            live: Vec::new(),
            next_key: 0,
            metrics: None,
            redirects: Vec::new(),
        };
        (bindings, receivers)
    }

    /// Binds the addresses of `frontends` not bound yet (sockets an old process handed over are
    /// taken first; an address moving to another frontend keeps its socket). Nothing changes
    /// for the workers until [`Bindings::commit`].
    pub(crate) fn prepare(
        &mut self,
        frontends: &[&Frontend],
        inherited: &mut Inherited,
    ) -> Result<Prepared> {
        refuse_shared(frontends)?;
        let may_share = inherited.may_share();
        // Ports this process listens on, or binds now: another of its addresses on one of them
        // (a wildcard beside a specific address) is not another process's.
        let mut ours: Vec<u16> = self.live.iter().map(|b| b.addr.port()).collect();
        let mut added = Vec::new();
        for fe in frontends {
            for (index, &want) in fe.listen.addrs.iter().enumerate() {
                if self.position(&fe.name, want).is_some() {
                    continue;
                }
                let mut sockets = inherited.take(&fe.name, index, want);
                if sockets.is_empty() {
                    sockets = self.moving_socket(want, frontends)?;
                }
                let bound = self.bind((fe, index, want), sockets, (may_share, &ours))?;
                ours.push(bound.addr.port());
                let for_workers = bound
                    .sockets
                    .iter()
                    .map(TcpListener::try_clone)
                    .collect::<io::Result<Vec<_>>>()
                    .map_err(|source| {
                        Error::bind(bound.addr, Listener::Frontend(fe.name.clone()), source)
                    })?;
                added.push((bound, for_workers));
            }
        }
        Ok(Prepared { added })
    }

    /// Starts accepting on what `prepared` bound (for the frontend of each, from `slots`),
    /// closes every address not listed in `frontends`, and gives every address its frontend's
    /// `defer_accept` and `backlog` (kept, moved and handed-over ones too: nothing can fail from
    /// here).
    pub(crate) fn commit(
        &mut self,
        prepared: Prepared,
        frontends: &[&Frontend],
        slots: impl Fn(&str) -> Option<FrontendSlots>,
    ) {
        let listed = |b: &Bound| {
            frontends
                .iter()
                .any(|f| f.name == b.frontend && f.listen.addrs.contains(&b.want))
        };
        let (keep, gone): (Vec<Bound>, Vec<Bound>) =
            std::mem::take(&mut self.live).into_iter().partition(listed);
        self.live = keep;
        for b in gone {
            for w in &self.workers {
                let _ = w.send(Control::Close { key: b.key });
            }
            tracing::info!(frontend = %b.frontend, addr = %b.addr, "stopped listening; its connections carry on");
        }
        for (b, sockets) in prepared.added {
            let Some(s) = slots(&b.frontend) else {
                continue;
            };
            // An old process with more workers handed over more sockets than there are
            // workers: each worker then accepts on several, so no queue is left unserved.
            for (k, socket) in sockets.into_iter().enumerate() {
                let w = k % self.workers.len();
                let _ = self.workers[w].send(Control::Listen {
                    key: b.key,
                    settings: s.settings.clone(),
                    tls: s.tls[w].clone(),
                    socket,
                });
            }
            tracing::info!(frontend = %b.frontend, addr = %b.addr, "listening");
            self.live.push(b);
        }
        // Configuration order, as the ready file lists them: positions first, then the sort.
        for b in &mut self.live {
            if let Some(f) = frontends.iter().find(|f| f.name == b.frontend) {
                b.index = f
                    .listen
                    .addrs
                    .iter()
                    .position(|a| *a == b.want)
                    .unwrap_or(b.index);
            }
        }
        let order = |b: &Bound| {
            frontends
                .iter()
                .position(|f| f.name == b.frontend)
                .map(|i| (i, b.index))
        };
        self.live.sort_by_key(order);
        self.apply_socket_options(frontends);
    }

    /// Sends each worker what `ask` makes; the answers' receivers, one per worker told.
    pub(crate) fn tell_workers<A>(&self, ask: impl Fn() -> (Control, A)) -> Vec<A> {
        let mut answers = Vec::with_capacity(self.workers.len());
        for w in &self.workers {
            let (message, answer) = ask();
            if w.send(message).is_ok() {
                answers.push(answer);
            }
        }
        answers
    }

    /// Each address listened on, with its frontend, in configuration order.
    pub fn addresses(&self) -> Vec<(String, SocketAddr)> {
        self.live
            .iter()
            .map(|b| (b.frontend.clone(), b.addr))
            .collect()
    }

    /// Keeps a duplicate of the metrics endpoint's socket for an upgrade.
    pub(crate) fn set_metrics(&mut self, socket: &TcpListener) -> io::Result<()> {
        self.metrics = Some(socket.try_clone()?);
        Ok(())
    }

    /// Keeps a duplicate of each `[[redirect]]` listener's socket for an upgrade.
    pub(crate) fn set_redirects(&mut self, sockets: &[(usize, TcpListener)]) -> io::Result<()> {
        self.redirects = sockets
            .iter()
            .map(|(_, s)| s.try_clone())
            .collect::<io::Result<_>>()?;
        Ok(())
    }

    /// Duplicates of every socket in use, for a new process (`kill -USR2`).
    pub fn handover(&self) -> io::Result<Handover> {
        let mut h = Handover::default();
        for b in &self.live {
            for s in &b.sockets {
                h.add(&b.frontend, b.index, s)?;
            }
        }
        if let Some(m) = &self.metrics {
            h.add(METRICS, usize::MAX, m)?;
        }
        for (i, r) in self.redirects.iter().enumerate() {
            h.add(REDIRECT, i, r)?;
        }
        Ok(h)
    }

    /// Drops this process's duplicates: once a new process serves the addresses, sockets kept
    /// here would only outlive the workers that accept on them.
    pub fn release(&mut self) {
        for b in &mut self.live {
            b.sockets.clear();
        }
        self.metrics = None;
        self.redirects.clear();
    }

    /// Sets each address's `defer_accept` and `backlog` from its frontend in `frontends` (both
    /// apply to a listening socket at any time: `listen()` again only resizes its queue).
    fn apply_socket_options(&self, frontends: &[&Frontend]) {
        for b in &self.live {
            let Some(fe) = frontends.iter().find(|f| f.name == b.frontend) else {
                continue;
            };
            for socket in &b.sockets {
                if let Err(e) = listener::set_defer_accept(socket, fe.listen.defer_accept) {
                    tracing::warn!(frontend = %b.frontend, addr = %b.addr, error = %e, "cannot set defer_accept");
                }
                if let Err(e) = listener::set_backlog(socket, fe.listen.backlog) {
                    tracing::warn!(frontend = %b.frontend, addr = %b.addr, error = %e, "cannot set backlog");
                }
            }
        }
    }

    fn position(&self, frontend: &str, want: SocketAddr) -> Option<usize> {
        self.live
            .iter()
            .position(|b| b.frontend == frontend && b.want == want)
    }

    /// The sockets of an address that another frontend listens on today but not in `frontends`
    /// (it moves): duplicates, so the queue of connections waiting in it is kept.
    fn moving_socket(&self, want: SocketAddr, frontends: &[&Frontend]) -> Result<Vec<TcpListener>> {
        if want.port() == 0 {
            return Ok(Vec::new());
        }
        let staying = |b: &Bound| {
            frontends
                .iter()
                .any(|f| f.name == b.frontend && f.listen.addrs.contains(&b.want))
        };
        let Some(b) = self.live.iter().find(|b| b.addr == want && !staying(b)) else {
            return Ok(Vec::new());
        };
        b.sockets
            .iter()
            .map(TcpListener::try_clone)
            .collect::<io::Result<Vec<_>>>()
            .map_err(|source| Error::bind(want, Listener::Frontend(b.frontend.clone()), source))
    }

    /// One socket per worker for `want`: those given, then bound (the first fixes the port when
    /// `want` has port 0; the others share it with SO_REUSEPORT). An address another process
    /// listens on is refused unless `may_share` (SO_REUSEPORT would let this process bind it,
    /// and the kernel would split new connections between the two); on a port in `ours` (this
    /// process's) the probe cannot tell, and the bind itself decides.
    fn bind(
        &mut self,
        (fe, index, want): (&Frontend, usize, SocketAddr),
        mut sockets: Vec<TcpListener>,
        (may_share, ours): (bool, &[u16]),
    ) -> Result<Bound> {
        // defer_accept on fresh sockets only: those handed over (an upgrade) or moving from
        // another frontend are shared with what still runs, and this may yet fail; they take
        // the new value in `apply_socket_options`, after the commit.
        let bind = |addr| {
            listener::bind(addr, fe.listen.backlog)
                .and_then(|s| {
                    if !fe.listen.defer_accept.is_zero() {
                        listener::set_defer_accept(&s, fe.listen.defer_accept)?;
                    }
                    Ok(s)
                })
                .map_err(|source| Error::bind(addr, Listener::Frontend(fe.name.clone()), source))
        };
        if sockets.is_empty() {
            if want.port() != 0 && !ours.contains(&want.port()) && listener::in_use(want) {
                if !may_share {
                    let owner = Listener::Frontend(fe.name.clone());
                    return Err(Error::AddressInUse { addr: want, owner });
                }
                tracing::warn!(frontend = %fe.name, addr = %want, "sharing this address with the process that listens on it (--takeover or an upgrade): the kernel splits new connections between the two until it stops");
            }
            sockets.push(bind(want)?);
        }
        let addr = sockets[0]
            .local_addr()
            .map_err(|source| Error::bind(want, Listener::Frontend(fe.name.clone()), source))?;
        while sockets.len() < self.workers.len() {
            sockets.push(bind(addr)?);
        }
        self.next_key += 1;
        Ok(Bound {
            key: self.next_key,
            frontend: fe.name.clone(),
            index,
            want,
            addr,
            sockets,
        })
    }
}

/// One address per line: the listeners in configuration order, then the metrics endpoint.
/// Written to a temporary name then renamed, so a reader never sees half a file.
pub(crate) fn write_ready_file(path: &Path, addrs: &[SocketAddr]) -> Result<()> {
    let err = |source| Error::ReadyFile {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(err)?;
    for addr in addrs {
        writeln!(f, "{addr}").map_err(err)?;
    }
    f.sync_all().map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// Two frontends configured with one address (a frontend a reload keeps as it runs may still
/// hold one the new file gives to another): the kernel would split connections between them.
fn refuse_shared(frontends: &[&Frontend]) -> Result<()> {
    for (i, fe) in frontends.iter().enumerate() {
        for addr in fe.listen.addrs.iter().filter(|a| a.port() != 0) {
            if let Some(other) = frontends[i + 1..]
                .iter()
                .find(|o| o.listen.addrs.contains(addr))
            {
                return Err(Error::Reload(format!(
                    "{addr} would be listened on by frontends {:?} and {:?} (a frontend that needs a restart keeps the addresses it runs with)",
                    fe.name, other.name
                )));
            }
        }
    }
    Ok(())
}
