//! Certificate files watched (`watch_certificates`): a renewal on disk is served without
//! SIGHUP. The directories holding each frontend's certificate, key, OCSP, ticket-key and
//! client CA/CRL files (and, for symlinks, their targets' directories: certbot swaps the links
//! in `live/` to new files in `archive/`) are watched through inotify (the `notify` crate). After
//! a change the files must stay quiet for a moment, and the certificates must load (chain in
//! order, key matching) before the frontend is refreshed as a renewal is: a half-written file
//! or a swap half done is never served, and a set that stays bad is one error line and one count
//! per state of the files, never one per event.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::watch;

use crate::config::{CertFiles, CertSource, Frontend};
use crate::metrics::Metrics;
use crate::tls::certs;

/// How long the files must be left alone before they are looked at.
const QUIET: Duration = Duration::from_millis(400);
/// A stream of changes is looked at after this long anyway.
const AT_MOST: Duration = Duration::from_secs(2);

/// The watcher: told of every new configuration (start, reload).
#[derive(Clone)]
pub(crate) struct CertWatch {
    frontends: Arc<watch::Sender<Vec<Frontend>>>,
}

impl CertWatch {
    /// A watcher of the frontends of `c` (none when `watch_certificates` is off), not yet
    /// running.
    pub(crate) fn new(c: &crate::config::Config) -> CertWatch {
        let (tx, _) = watch::channel(Self::watched(c, c.frontends.iter()));
        CertWatch {
            frontends: Arc::new(tx),
        }
    }

    /// Runs it on `rt`: a frontend whose files changed and load is named to `refresh`.
    pub(crate) fn start(
        &self,
        rt: &tokio::runtime::Handle,
        refresh: UnboundedSender<String>,
        metrics: Arc<Metrics>,
    ) {
        rt.spawn(run(self.frontends.subscribe(), refresh, metrics));
    }

    /// Watches these frontends from now on (none when `c` turns `watch_certificates` off).
    pub(crate) fn update<'a>(
        &self,
        c: &crate::config::Config,
        frontends: impl Iterator<Item = &'a Frontend>,
    ) {
        self.frontends.send_replace(Self::watched(c, frontends));
    }

    fn watched<'a>(
        c: &crate::config::Config,
        frontends: impl Iterator<Item = &'a Frontend>,
    ) -> Vec<Frontend> {
        if c.watch_certificates {
            frontends.cloned().collect()
        } else {
            Vec::new()
        }
    }
}

/// What is known of one frontend's files: their state when last loaded, and the last state
/// reported as bad.
#[derive(Default)]
struct Seen {
    loaded: u64,
    reported: Option<u64>,
}

async fn run(
    mut config: watch::Receiver<Vec<Frontend>>,
    refresh: UnboundedSender<String>,
    metrics: Arc<Metrics>,
) {
    let (events_tx, mut events) = unbounded_channel();
    let mut watcher = match notify::recommended_watcher(move |e: notify::Result<notify::Event>| {
        // Reading the files (ours included: each look opens them) is no change.
        if e.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_))) {
            let _ = events_tx.send(true);
        }
    }) {
        Ok(w) => w,
        Err(e) => {
            tracing::error!(error = %e, "cannot watch certificate files; renewed files are loaded on SIGHUP only");
            return;
        }
    };
    let mut frontends = config.borrow_and_update().clone();
    let mut seen: HashMap<String, Seen> = HashMap::new();
    let mut dirs = BTreeSet::new();
    loop {
        rewatch(&mut watcher, &mut dirs, &frontends);
        for fe in &frontends {
            seen.entry(fe.name.clone()).or_insert_with(|| Seen {
                loaded: state_of(fe),
                reported: None,
            });
        }
        tokio::select! {
            changed = config.changed() => {
                if changed.is_err() {
                    return;
                }
                frontends.clone_from(&config.borrow_and_update());
                // A reload loaded every file: what is on disk now is what is served.
                seen.clear();
                continue;
            }
            event = events.recv() => {
                if event.is_none() {
                    return;
                }
            }
        }
        settle(&mut events).await;
        for fe in &frontends {
            let Some(s) = seen.get_mut(&fe.name) else {
                continue;
            };
            look(fe, s, &refresh, &metrics);
        }
    }
}

/// Waits until no event came for [`QUIET`], or [`AT_MOST`] passed.
async fn settle(events: &mut UnboundedReceiver<bool>) {
    let deadline = tokio::time::Instant::now() + AT_MOST;
    while let Ok(Some(_)) = tokio::time::timeout(QUIET, events.recv()).await {
        if tokio::time::Instant::now() >= deadline {
            break;
        }
    }
}

/// Refreshes `fe` when its files changed since they were loaded and its certificates load now;
/// reports a changed set that does not load, once per state of the files.
fn look(fe: &Frontend, s: &mut Seen, refresh: &UnboundedSender<String>, metrics: &Metrics) {
    let now = state_of(fe);
    if now == s.loaded || s.reported == Some(now) {
        return;
    }
    match loads(fe) {
        Ok(()) => {
            tracing::info!(frontend = %fe.name, "certificate files changed on disk; loading them");
            s.loaded = now;
            s.reported = None;
            let _ = refresh.send(fe.name.clone());
        }
        Err(e) => {
            tracing::error!(frontend = %fe.name, error = %e, "certificate files changed on disk but do not load; still serving the previous ones");
            metrics.certificate_watch_error(&fe.name);
            s.reported = Some(now);
        }
    }
}

/// Whether `fe`'s certificates load as they are on disk now (every check a start makes).
fn loads(fe: &Frontend) -> crate::error::Result<()> {
    let CertSource::Files { paths, .. } = &fe.certificates.source else {
        return Ok(());
    };
    let provider = crate::tls::provider_for(fe);
    for files in certs::expand_paths(paths)? {
        certs::load_certificate(&files, &provider)?;
    }
    Ok(())
}

/// The files `fe` reads that a renewal may change (those that exist now, and the directories
/// named in `certificates`, whose contents count).
fn files_of(fe: &Frontend) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let CertSource::Files { paths, .. } = &fe.certificates.source {
        out.extend(
            paths
                .iter()
                .filter(|p| p.cert.is_dir())
                .map(|p| p.cert.clone()),
        );
        for CertFiles { cert, key } in certs::expand_paths(paths).unwrap_or_default() {
            let mut ocsp = cert.clone().into_os_string();
            ocsp.push(".ocsp");
            out.push(key.unwrap_or_else(|| certs::key_beside(&cert)));
            out.push(PathBuf::from(ocsp));
            out.push(cert);
        }
    }
    if let Some(t) = &fe.resumption.ticket_keys {
        out.extend(t.paths.iter().cloned());
    }
    out.extend(fe.client_auth.ca.iter().cloned());
    out.extend(fe.client_auth.crls.iter().cloned());
    out
}

/// A digest of what `fe`'s files hold now (contents, and which files a directory lists).
/// Only compared, never shown: it is no secret's fingerprint anyone sees.
fn state_of(fe: &Frontend) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for f in files_of(fe) {
        f.hash(&mut h);
        if f.is_dir() {
            continue;
        }
        crate::sys::files::read(&f).ok().hash(&mut h);
    }
    h.finish()
}

/// Watches the directories of every file of `frontends`, and of their symlinks' targets.
fn rewatch(
    watcher: &mut notify::RecommendedWatcher,
    dirs: &mut BTreeSet<PathBuf>,
    frontends: &[Frontend],
) {
    let mut want = BTreeSet::new();
    for f in frontends.iter().flat_map(files_of) {
        if f.is_dir() {
            want.insert(f.clone());
        }
        if let Some(dir) = f.parent() {
            want.insert(dir.to_path_buf());
        }
        if let Some(dir) = std::fs::canonicalize(&f)
            .ok()
            .as_deref()
            .and_then(Path::parent)
        {
            want.insert(dir.to_path_buf());
        }
    }
    for gone in dirs.difference(&want) {
        let _ = watcher.unwatch(gone);
    }
    dirs.clear();
    for dir in want {
        // Watched again each time (a directory removed and made again loses its watch); one
        // missing or unreadable now is tried again after the next event.
        match watcher.watch(&dir, RecursiveMode::NonRecursive) {
            Ok(()) => {
                dirs.insert(dir);
            }
            Err(e) => tracing::debug!(dir = %dir.display(), error = %e, "cannot watch"),
        }
    }
}
