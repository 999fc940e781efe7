//! Certificate files watched (`watch_certificates`): a renewal on disk is served without
//! SIGHUP. The directories holding each frontend's certificate, key, OCSP, ticket-key and
//! client CA/CRL files (and, for symlinks, their targets' directories: certbot swaps the links
//! in `live/` to new files in `archive/`) are watched through inotify (the `notify` crate). After
//! a change the files must stay quiet for a moment, and the certificates must load (chain in
//! order, key matching) before the frontend is refreshed as a renewal is: a half-written file
//! or a swap half done is never served, and a set that stays bad is one error line and one count
//! per state of the files, never one per event. A failed load loses no watch: the directories
//! named in `certificates` and their subdirectories (certbot's `live/NAME/`) are watched whether
//! or not they load, and every [`RESCAN`] the files are looked at even without an event, for
//! what inotify missed (a directory made again, a network file system).

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
/// How often the files are looked at without an event.
const RESCAN: Duration = Duration::from_secs(30);

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
    let mut refused = BTreeSet::new();
    let mut rescan = tokio::time::interval_at(tokio::time::Instant::now() + RESCAN, RESCAN);
    rescan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        rewatch(&mut watcher, (&mut dirs, &mut refused), &frontends);
        seen = off_the_loop(&frontends, seen, move |f, mut seen| {
            for fe in f {
                seen.entry(fe.name.clone()).or_insert_with(|| Seen {
                    loaded: state_of(fe),
                    reported: None,
                });
            }
            seen
        })
        .await;
        for fe in &frontends {
            if seen.get(&fe.name).is_some_and(|s| s.reported.is_none()) {
                metrics.certificate_watch_healthy(&fe.name, true);
            }
        }
        tokio::select! {
            changed = config.changed() => {
                if changed.is_err() {
                    return;
                }
                frontends.clone_from(&config.borrow_and_update());
                // A reload loaded every file: what is on disk now is what is served.
                for name in seen.keys().filter(|n| !frontends.iter().any(|f| f.name == **n)) {
                    metrics.forget_certificate_watch(name);
                }
                seen.clear();
                continue;
            }
            event = events.recv() => {
                if event.is_none() {
                    return;
                }
                settle(&mut events).await;
            }
            _ = rescan.tick() => {}
        }
        let (to, m) = (refresh.clone(), metrics.clone());
        seen = off_the_loop(&frontends, seen, move |f, mut seen| {
            for fe in f {
                if let Some(s) = seen.get_mut(&fe.name) {
                    look(fe, s, &to, &m);
                }
            }
            seen
        })
        .await;
    }
}

/// Runs `work` (reading and hashing files: CRLs run to megabytes) on a blocking thread, not on
/// the main runtime that answers probes and runs the checks; what it knew before if it failed.
async fn off_the_loop(
    frontends: &[Frontend],
    seen: HashMap<String, Seen>,
    work: impl FnOnce(&[Frontend], HashMap<String, Seen>) -> HashMap<String, Seen> + Send + 'static,
) -> HashMap<String, Seen> {
    let f = frontends.to_vec();
    tokio::task::spawn_blocking(move || work(&f, seen))
        .await
        .unwrap_or_default()
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
    if now == s.loaded {
        if s.reported.take().is_some() {
            // Put back as they were loaded: what is on disk is what is served.
            metrics.certificate_watch_healthy(&fe.name, true);
        }
        return;
    }
    if s.reported == Some(now) {
        return;
    }
    match loads(fe) {
        Ok(()) => {
            tracing::info!(frontend = %fe.name, "certificate files changed on disk; loading them");
            s.loaded = now;
            s.reported = None;
            metrics.certificate_watch_healthy(&fe.name, true);
            let _ = refresh.send(fe.name.clone());
        }
        Err(e) => {
            tracing::error!(frontend = %fe.name, error = %e, "certificate files changed on disk but do not load; still serving the previous ones");
            metrics.certificate_watch_error(&fe.name);
            metrics.certificate_watch_healthy(&fe.name, false);
            s.reported = Some(now);
        }
    }
}

/// Whether `fe`'s files load as they are on disk now (every check a start makes).
fn loads(fe: &Frontend) -> crate::error::Result<()> {
    let provider = crate::tls::provider_for(fe);
    if let CertSource::Files { paths, .. } = &fe.certificates.source {
        for files in certs::expand_paths(paths)? {
            certs::load_certificate_in(&files, &provider, &fe.certificates.pkcs11)?;
        }
    }
    // The client CA and CRLs, and the ticket keys, as the refresh will read them: a set that
    // would fail there is reported here, not taken for loaded.
    crate::tls::client_auth::verifier(fe, &Arc::new(provider))?;
    if let Some(t) = &fe.resumption.ticket_keys {
        crate::sessions::ticket_keys::read(&t.paths, t.format)?;
    }
    Ok(())
}

/// What a renewal of `fe` may change: the directories named in `certificates` with their
/// subdirectories (watched, and their files looked at, whether or not they load now), and the
/// files `fe` reads, each with the most its loader reads of it.
#[derive(Default)]
struct Watched {
    dirs: Vec<PathBuf>,
    files: Vec<(PathBuf, u64)>,
}

fn watched_of(fe: &Frontend) -> Watched {
    use crate::sys::files::{CAP, LARGE_CAP};
    let mut w = Watched::default();
    if let CertSource::Files { paths, .. } = &fe.certificates.source {
        for dir in paths.iter().map(|p| &p.cert).filter(|p| p.is_dir()) {
            w.dirs.push(dir.clone());
            w.dirs
                .extend(entries(dir).into_iter().filter(|p| p.is_dir()));
        }
        let listed = w
            .dirs
            .iter()
            .flat_map(|d| entries(d))
            .filter(|p| p.is_file());
        w.files.extend(listed.map(|f| (f, CAP)));
        for files in certs::expand_paths(paths).unwrap_or_default() {
            // A key in a token has no file to watch.
            let in_token = files.token_key().is_some();
            let CertFiles { cert, key } = files;
            let mut ocsp = cert.clone().into_os_string();
            ocsp.push(".ocsp");
            if !in_token {
                w.files
                    .push((key.unwrap_or_else(|| certs::key_beside(&cert)), CAP));
            }
            w.files.push((PathBuf::from(ocsp), CAP));
            w.files.push((cert, CAP));
        }
    }
    if let Some(t) = &fe.resumption.ticket_keys {
        w.files.extend(t.paths.iter().map(|p| (p.clone(), CAP)));
    }
    // CA bundles and CRLs are read up to the larger cap (a large CA's CRL runs to megabytes):
    // the frontend's, and those of the routes' own policies.
    let policies = fe.route.0.iter().filter_map(|r| r.policy.as_ref());
    let auths = std::iter::once(&fe.client_auth).chain(policies.map(|p| &p.client_auth));
    for a in auths {
        let trust = a.ca.iter().chain(&a.crls);
        w.files.extend(trust.map(|p| (p.clone(), LARGE_CAP)));
    }
    // TLS to the backends: its CA bundle, and the client certificate and key.
    let backends = std::iter::once(&fe.backend).chain(fe.route.0.iter().map(|r| &r.backend));
    for t in backends.filter_map(|b| b.tls.as_ref()) {
        w.files.extend(t.ca.iter().map(|p| (p.clone(), LARGE_CAP)));
        if let Some(c) = &t.client_certificate {
            w.files.push((
                c.key.clone().unwrap_or_else(|| certs::key_beside(&c.cert)),
                CAP,
            ));
            w.files.push((c.cert.clone(), CAP));
        }
    }
    w.files.sort();
    w.files.dedup();
    w
}

/// What the user serving `fe` must be able to do after start: read every file its renewals
/// and reloads read, and, when `watching`, watch the directories the watcher watches.
pub(crate) fn needs(fe: &Frontend, watching: bool) -> Vec<(PathBuf, crate::sys::access::Need)> {
    use crate::sys::access::Need;
    let w = watched_of(fe);
    let mut dirs = BTreeSet::new();
    if watching {
        dirs.extend(w.dirs.iter().cloned());
        for (f, _) in &w.files {
            want_parents(f, &mut dirs);
        }
    }
    let files = w.files.into_iter().map(|(f, _)| (f, Need::Read));
    files
        .chain(dirs.into_iter().map(|d| (d, Need::Watch)))
        .collect()
}

/// What `dir` lists, sorted; nothing when it cannot be read.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    out.sort();
    out
}

/// A digest of what `fe`'s files hold now (contents up to their loader's cap; a file over it
/// by its size, time and inode, so that its change is still seen and the loader says what is
/// wrong), and which files the directories list. Only compared, never shown.
fn state_of(fe: &Frontend) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let w = watched_of(fe);
    w.dirs.hash(&mut h);
    for (f, cap) in &w.files {
        f.hash(&mut h);
        match crate::sys::files::read_capped(f, *cap) {
            Ok(bytes) => bytes.hash(&mut h),
            Err(_) => std::fs::metadata(f)
                .ok()
                .map(|m| {
                    (
                        m.len(),
                        m.modified().ok(),
                        std::os::unix::fs::MetadataExt::ino(&m),
                    )
                })
                .hash(&mut h),
        }
    }
    h.finish()
}

/// Watches the directories of every file of `frontends`, and of their symlinks' targets.
fn rewatch(
    watcher: &mut notify::RecommendedWatcher,
    (dirs, refused): (&mut BTreeSet<PathBuf>, &mut BTreeSet<PathBuf>),
    frontends: &[Frontend],
) {
    let mut want = BTreeSet::new();
    for w in frontends.iter().map(watched_of) {
        want.extend(w.dirs.iter().cloned());
        for f in w
            .dirs
            .into_iter()
            .chain(w.files.into_iter().map(|(f, _)| f))
        {
            want_parents(&f, &mut want);
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
                refused.remove(&dir);
                dirs.insert(dir);
            }
            // Not allowed: said once, until it is allowed again (renewals there go unseen).
            Err(notify::Error {
                kind: notify::ErrorKind::Io(e),
                ..
            }) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                if !refused.contains(&dir) {
                    tracing::warn!(dir = %dir.display(), user = %crate::sys::access::me(), "cannot watch this directory for renewed certificates (permission denied): renewals there are loaded on SIGHUP only, and only if this user can read them");
                    refused.insert(dir);
                }
            }
            Err(e) => tracing::debug!(dir = %dir.display(), error = %e, "cannot watch"),
        }
    }
}

/// The directory of `f`, and of its symlink's target (certbot's `archive/NAME/`).
fn want_parents(f: &Path, want: &mut BTreeSet<PathBuf>) {
    if let Some(dir) = f.parent() {
        want.insert(dir.to_path_buf());
    }
    if let Some(dir) = std::fs::canonicalize(f)
        .ok()
        .as_deref()
        .and_then(Path::parent)
    {
        want.insert(dir.to_path_buf());
    }
}
