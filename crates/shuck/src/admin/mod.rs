//! The admin socket (`admin_socket`): one request per line, the words of a `shuck ctl` command
//! (with `--json` anywhere for a JSON answer); each answer is text lines ending with an empty
//! line, or one JSON line `{"exit":…,"text":…,"data":…}`. `shuck ctl` and `socat` speak it. At
//! most `MAX_CLIENTS` at once; a line is at most `MAX_LINE` bytes and must come within
//! `LINE_WAIT`. Every command that changes something writes one log line naming it and the
//! asking user. Reload and upgrade are the signal loop's (`Asked`), answered when they end.

mod render;
pub(crate) mod socket;

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use serde::Serialize;
use shuck_proxy::control::{
    AdminState, BackendChange, CertChange, ConnFilter, Control, ControlError,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::cli::ServeArgs;
use crate::ctl_cli::{
    BackendAction, CertAction, ConnectionsAction, CtlCommand, Filter, OcspAction, RequestLine, Show,
};

/// Admin connections served at once; more are told so and closed.
const MAX_CLIENTS: usize = 16;
/// The longest request line.
pub(crate) const MAX_LINE: usize = 4096;
/// How long a connection may take to send its next line.
const LINE_WAIT: Duration = Duration::from_secs(60);
/// The most a request's payload (the PEM after a line ending in `<<`) may hold.
pub(crate) const MAX_PAYLOAD: usize = 256 * 1024;
/// The word that ends a line followed by a payload, which ends at an empty line (HAProxy's
/// runtime API marks a payload so too).
pub(crate) const PAYLOAD: &str = "<<";

/// Exit codes, as `shuck ctl` exits with them.
pub(crate) mod exit {
    /// Done.
    pub(crate) const OK: u8 = 0;
    /// Refused, or failed: nothing was changed (a reload: nothing applied).
    pub(crate) const FAILED: u8 = 1;
    /// Not a command: unknown words, a missing argument.
    pub(crate) const USAGE: u8 = 2;
    /// A reload applied, but some changes need a restart (or an upgrade).
    pub(crate) const RESTART: u8 = 3;
    /// `shuck ctl` could not reach the socket (the server never answers this).
    pub(crate) const UNREACHABLE: u8 = 4;
}

/// One answer: its exit code, its text, and the same for programs.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Reply {
    pub(crate) exit: u8,
    pub(crate) text: String,
    pub(crate) data: serde_json::Value,
}

impl Reply {
    pub(crate) fn ok(text: String, data: &impl Serialize) -> Reply {
        Reply {
            exit: exit::OK,
            text,
            data: serde_json::to_value(data).unwrap_or(serde_json::Value::Null),
        }
    }

    pub(crate) fn error(exit: u8, message: &str) -> Reply {
        Reply {
            exit,
            text: format!("error: {message}\n"),
            data: serde_json::json!({ "error": message }),
        }
    }
}

impl From<ControlError> for Reply {
    fn from(e: ControlError) -> Reply {
        Reply::error(exit::FAILED, &e.to_string())
    }
}

/// What the signal loop does for the admin socket, answering on the channel given.
#[derive(Debug)]
pub(crate) enum Asked {
    Reload(oneshot::Sender<Reply>),
    /// Load one frontend's certificates and staples again.
    Refresh(String, oneshot::Sender<Reply>),
    Upgrade(oneshot::Sender<Reply>),
}

/// What answering needs.
pub(crate) struct Admin {
    pub(crate) control: Control,
    /// The signal loop, for reload and upgrade.
    pub(crate) asks: mpsc::UnboundedSender<Asked>,
    /// How the server was started: the configuration `check` reads.
    pub(crate) args: ServeArgs,
    /// `reload_timeout`, `upgrade_timeout` and `upgrade_confirm` at start: how long an answer
    /// from the signal loop is waited for.
    pub(crate) timeouts: shuck_proxy::reload::ProcessTimeouts,
    /// Held by a `cert` command from its change on disk to its answer: one at a time.
    pub(crate) certificates: tokio::sync::Mutex<()>,
}

/// Starts serving `bound`'s socket on `rt` with `control`; the channel the signal loop reads
/// the socket's reloads and upgrades from.
pub(crate) fn start(
    rt: &tokio::runtime::Runtime,
    bound: &mut socket::Bound,
    (control, args, timeouts): (Control, ServeArgs, shuck_proxy::reload::ProcessTimeouts),
) -> Option<mpsc::UnboundedReceiver<Asked>> {
    let listener = bound.listener.take()?;
    let (asks, asked) = mpsc::unbounded_channel();
    let admin = Admin {
        control,
        asks,
        args,
        timeouts,
        certificates: tokio::sync::Mutex::new(()),
    };
    rt.spawn(serve(listener, Arc::new(admin), bound.handover.clone()));
    Some(asked)
}

/// Serves the socket for the life of the process, or until an upgrade hands it over.
pub(crate) async fn serve(
    listener: std::os::unix::net::UnixListener,
    admin: Arc<Admin>,
    handover: Arc<socket::Handover>,
) {
    let listener = match tokio::net::UnixListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "admin socket not served");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(MAX_CLIENTS));
    loop {
        let accepted = tokio::select! {
            // First: once handed over, not one more connection is taken here.
            biased;
            () = handover.stop.notified() => {
                tracing::info!("admin socket handed over to the new process");
                return;
            }
            a = listener.accept() => a,
        };
        let mut stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors, say: try again shortly rather than spin.
                tracing::warn!(error = %e, "admin socket: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            let busy = format!("error: {MAX_CLIENTS} admin connections are open already\n\n");
            tokio::spawn(async move {
                let _ =
                    tokio::time::timeout(Duration::from_secs(1), stream.write_all(busy.as_bytes()))
                        .await;
            });
            continue;
        };
        let admin = admin.clone();
        tokio::spawn(async move {
            session(stream, &admin).await;
            drop(permit);
        });
    }
}

/// One client: requests answered in turn until it closes, sends too long a line, or waits
/// too long.
async fn session(stream: UnixStream, admin: &Admin) {
    let uid = stream.peer_cred().ok().map(|c| c.uid());
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        line.clear();
        let limit = u64::try_from(MAX_LINE).unwrap_or(u64::MAX) + 1;
        let got = tokio::time::timeout(
            LINE_WAIT,
            (&mut read).take(limit).read_until(b'\n', &mut line),
        )
        .await;
        let (answer, last) = match got {
            Err(_) => (
                Some(Reply::error(exit::USAGE, "no request line within 60 s")),
                true,
            ),
            Ok(Err(_) | Ok(0)) => (None, true),
            Ok(Ok(_)) if line.last() != Some(&b'\n') && line.len() > MAX_LINE => (
                Some(Reply::error(
                    exit::USAGE,
                    &format!("request line longer than {MAX_LINE} bytes"),
                )),
                true,
            ),
            Ok(Ok(_)) => match std::str::from_utf8(&line) {
                Err(_) => (
                    Some(Reply::error(exit::USAGE, "request line is not UTF-8")),
                    true,
                ),
                Ok(text) => with_payload(text, &mut read, admin, uid).await,
            },
        };
        if let Some((reply, json)) = answer.map(|r| split_json(r, &line)) {
            // A client that does not read its answers does not hold its slot for long.
            let sent =
                tokio::time::timeout(LINE_WAIT, write.write_all(&encode(&reply, json))).await;
            if !matches!(sent, Ok(Ok(()))) {
                return;
            }
        }
        if last {
            return;
        }
    }
}

/// The answer to `text`, with the payload that follows it when it ends in `<<`; whether the
/// connection ends (a payload that could not be read).
async fn with_payload<R: tokio::io::AsyncBufRead + Unpin>(
    text: &str,
    read: &mut R,
    admin: &Admin,
    uid: Option<u32>,
) -> (Option<Reply>, bool) {
    if text.split_whitespace().last() != Some(PAYLOAD) {
        return (answer(text, &[], admin, uid).await, false);
    }
    match read_payload(read).await {
        Ok(payload) => (answer(text, &payload, admin, uid).await, false),
        Err(e) => (Some(Reply::error(exit::USAGE, &e)), true),
    }
}

/// The payload after a line ending in `<<`: lines up to an empty one (or the end), bounded.
async fn read_payload<R: tokio::io::AsyncBufRead + Unpin>(read: &mut R) -> Result<Vec<u8>, String> {
    let mut payload = Vec::new();
    loop {
        let mut line = Vec::new();
        let room = u64::try_from(MAX_PAYLOAD + 1 - payload.len().min(MAX_PAYLOAD)).unwrap_or(0);
        let got = tokio::time::timeout(LINE_WAIT, read.take(room).read_until(b'\n', &mut line))
            .await
            .map_err(|_| "the payload did not end within 60 s (an empty line ends it)".to_string())?
            .map_err(|e| format!("payload: {e}"))?;
        if got == 0 || line == b"\n" || line == b"\r\n" {
            return Ok(payload);
        }
        payload.extend_from_slice(&line);
        if payload.len() > MAX_PAYLOAD {
            return Err(format!("payload longer than {MAX_PAYLOAD} bytes"));
        }
    }
}

/// Whether the request asked for JSON (an answer to a line that could not be read: no).
fn split_json(reply: Reply, line: &[u8]) -> (Reply, bool) {
    let json = std::str::from_utf8(line).is_ok_and(|l| l.split_whitespace().any(|w| w == "--json"));
    (reply, json)
}

fn encode(reply: &Reply, json: bool) -> Vec<u8> {
    if json {
        let mut out = serde_json::to_vec(reply).unwrap_or_default();
        out.push(b'\n');
        out
    } else {
        // An empty line ends an answer: one inside it (help text) holds a space instead.
        let mut out = String::with_capacity(reply.text.len() + 2);
        for line in reply.text.lines() {
            out.push_str(if line.is_empty() { " " } else { line });
            out.push('\n');
        }
        out.push('\n');
        out.into_bytes()
    }
}

/// The answer to one request line (and its payload); `None` for a blank line.
async fn answer(line: &str, payload: &[u8], admin: &Admin, uid: Option<u32>) -> Option<Reply> {
    let words: Vec<&str> = line
        .split_whitespace()
        .filter(|w| *w != "--json" && *w != PAYLOAD)
        .collect();
    if words.is_empty() {
        return None;
    }
    let command = match RequestLine::try_parse_from(&words) {
        Ok(r) => r.command,
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => {
            return Some(Reply::ok(e.to_string(), &serde_json::Value::Null));
        }
        Err(e) => {
            let message = e.to_string();
            let first = message
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ");
            return Some(Reply::error(exit::USAGE, first));
        }
    };
    if command.changes() {
        tracing::info!(command = %words.join(" "), uid, "admin command");
    }
    Some(dispatch(command, payload, admin).await)
}

async fn dispatch(command: CtlCommand, payload: &[u8], admin: &Admin) -> Reply {
    let c = &admin.control;
    match command {
        CtlCommand::Show(s) => show(s, c).await,
        CtlCommand::Cert(action) => certificate(action, payload, admin).await,
        CtlCommand::Ocsp(OcspAction::Refresh { frontend }) => {
            let fetching = match c.fetch_staples_now(&frontend) {
                Ok(f) => f,
                Err(e) => return e.into(),
            };
            let mut loaded = ask(admin, |tx| Asked::Refresh(frontend, tx)).await;
            if fetching && loaded.exit == exit::OK {
                loaded.text.push_str(
                    "asked the OCSP responders now (ocsp = \"fetch\"): a new response is stapled once it comes; the log says what each answered\n",
                );
            }
            loaded
        }
        CtlCommand::Backend(action) => {
            let (target, change) = match action {
                BackendAction::Drain { backend } => {
                    (backend, BackendChange::State(AdminState::Drain))
                }
                BackendAction::Disable { backend } => {
                    (backend, BackendChange::State(AdminState::Disabled))
                }
                BackendAction::Enable { backend } => {
                    (backend, BackendChange::State(AdminState::Enabled))
                }
                BackendAction::Weight { backend, weight } => {
                    (backend, BackendChange::Weight(weight))
                }
            };
            match c.set_backend(&target, change) {
                Ok(done) => Reply::ok(render::backend_changed(&done), &done),
                Err(e) => e.into(),
            }
        }
        CtlCommand::Connections(ConnectionsAction::Close { filter }) => {
            if filter.is_empty() {
                return Reply::error(
                    exit::USAGE,
                    "connections close needs --frontend, --client, --sni or --backend (all would be every connection)",
                );
            }
            let filter = match conn_filter(&filter) {
                Ok(f) => f,
                Err(e) => return Reply::error(exit::USAGE, &e),
            };
            match c.connections(&filter, 0, true).await {
                Ok((_, closed)) => Reply::ok(
                    format!("{closed} connections told to close\n"),
                    &serde_json::json!({ "closed": closed }),
                ),
                Err(e) => e.into(),
            }
        }
        CtlCommand::Reload => ask(admin, Asked::Reload).await,
        CtlCommand::Upgrade => ask(admin, Asked::Upgrade).await,
        CtlCommand::Check => check(admin.args.clone()).await,
    }
}

async fn show(s: Show, c: &Control) -> Reply {
    let result = match s {
        Show::Frontends => {
            let v = c.frontends();
            Ok(Reply::ok(render::frontends(&v), &v))
        }
        Show::Routes(f) => c
            .routes(f.frontend.as_deref())
            .map(|v| Reply::ok(render::routes(&v), &v)),
        Show::Backends(f) => c
            .backends(f.frontend.as_deref())
            .map(|v| Reply::ok(render::backends(&v), &v)),
        Show::Certificates(f) => c
            .certificates(f.frontend.as_deref())
            .map(|v| Reply::ok(render::certificates(&v), &v)),
        Show::Limits => {
            let v = c.limits();
            Ok(Reply::ok(render::limits(&v), &v))
        }
        Show::Connections { filter, limit } => {
            let filter = match conn_filter(&filter) {
                Ok(f) => f,
                Err(e) => return Reply::error(exit::USAGE, &e),
            };
            let limit = usize::try_from(limit).unwrap_or(usize::MAX);
            c.connections(&filter, limit, false)
                .await
                .map(|(v, _)| Reply::ok(render::connections(&v), &v))
        }
    };
    result.unwrap_or_else(Reply::from)
}

/// `cert …`: the change staged on disk, the frontend loaded again with it, undone if that
/// load fails (the answer says why).
async fn certificate(action: CertAction, payload: &[u8], admin: &Admin) -> Reply {
    let c = &admin.control;
    let (frontend, name, change) = match action {
        CertAction::List(f) => {
            return match c.certificates(f.frontend.as_deref()) {
                Ok(v) => Reply::ok(render::certificates(&v), &v),
                Err(e) => e.into(),
            }
        }
        CertAction::Add { files, .. } | CertAction::Replace { files, .. } if files.cert.is_some() => {
            return Reply::error(
                exit::USAGE,
                "--cert and --key are read by shuck ctl; over the socket, send the PEM after a line ending in <<",
            )
        }
        CertAction::Add { frontend, name, .. } => (frontend, name, CertChange::Add),
        CertAction::Replace { frontend, name, .. } => (frontend, Some(name), CertChange::Replace),
        CertAction::Remove { frontend, name } => (frontend, Some(name), CertChange::Remove),
    };
    let _one_at_a_time = admin.certificates.lock().await;
    if change != CertChange::Remove && payload.is_empty() {
        return Reply::error(
            exit::USAGE,
            "no PEM: end the line with << and send the chain and key after it, then an empty line",
        );
    }
    let (staged, view) = match c.stage_certificate(&frontend, name.as_deref(), payload, change) {
        Ok(s) => s,
        Err(e) => return e.into(),
    };
    let loaded = ask(admin, |tx| Asked::Refresh(frontend.clone(), tx)).await;
    if loaded.exit != exit::OK {
        staged.undo();
        return loaded;
    }
    let done = match change {
        CertChange::Add => "added",
        CertChange::Replace => "replaced",
        CertChange::Remove => "removed",
    };
    let text = if view.names.is_empty() {
        format!(
            "{done} {} for frontend {frontend:?}; new handshakes get it now\n",
            view.path
        )
    } else {
        format!(
            "{done} {} ({}) for frontend {frontend:?}; new handshakes get it now\n",
            view.path,
            view.names.join(", ")
        )
    };
    Reply::ok(text, &view)
}

/// The engine's filter from the command's options.
fn conn_filter(f: &Filter) -> Result<ConnFilter, String> {
    let client = match &f.client {
        None => None,
        Some(c) => Some(
            c.parse::<ipnet::IpNet>()
                .or_else(|_| c.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| {
                    format!("--client {c:?} is neither an address nor a network (10.0.0.0/8)")
                })?,
        ),
    };
    Ok(ConnFilter {
        frontend: f.frontend.clone(),
        route: None,
        client,
        sni: f.sni.clone(),
        backend: f.backend.clone(),
    })
}

/// Hands `asked` to the signal loop and waits for its answer, at most as long as the job can
/// take (a reload queued behind another: twice `reload_timeout`; an upgrade: its start and
/// confirmation) and a minute more.
async fn ask(admin: &Admin, asked: impl FnOnce(oneshot::Sender<Reply>) -> Asked) -> Reply {
    let (tx, rx) = oneshot::channel();
    let asked = asked(tx);
    let t = admin.timeouts;
    let bound = Duration::from_secs(60)
        + match asked {
            Asked::Upgrade(_) => t.upgrade + t.upgrade_confirm,
            Asked::Reload(_) | Asked::Refresh(..) => t.reload * 2,
        };
    if admin.asks.send(asked).is_err() {
        return Reply::error(exit::FAILED, "the signal loop is gone (stopping?)");
    }
    match tokio::time::timeout(bound, rx).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(_)) => Reply::error(exit::FAILED, "no answer: the process is stopping"),
        Err(_) => Reply::error(
            exit::FAILED,
            &format!(
                "no answer within {}: it may still end (the log says how)",
                humantime::format_duration(bound)
            ),
        ),
    }
}

/// `shuck check` on the file the server was started with, off the runtime (it reads files).
async fn check(args: ServeArgs) -> Reply {
    let done = tokio::task::spawn_blocking(move || {
        let config = crate::load_config(&args.config, None)?;
        shuck_proxy::check::report(&config).map_err(|e| e.to_string())
    })
    .await;
    match done {
        Ok(Ok(report)) => {
            let mut text = report.summary.clone();
            for w in &report.warnings {
                text.push_str("warning: ");
                text.push_str(w);
                text.push('\n');
            }
            Reply::ok(
                text,
                &serde_json::json!({ "summary": report.summary, "warnings": report.warnings }),
            )
        }
        Ok(Err(e)) => Reply::error(exit::FAILED, &crate::reloading::one_line(&e)),
        Err(e) => Reply::error(exit::FAILED, &format!("check failed unexpectedly: {e}")),
    }
}
