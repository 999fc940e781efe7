//! `shuck ctl`: sends one command to a running shuck's admin socket and prints the answer
//! (its text, or with `--json` its data), exiting with the code the server gave
//! (`admin::exit`; 4 when the socket cannot be reached).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::Duration;

use crate::admin::{exit, MAX_LINE, MAX_PAYLOAD, PAYLOAD};
use crate::ctl_cli::{CtlArgs, PemFiles};

/// How long an answer may take: an upgrade waits for `upgrade_confirm` (up to an hour).
const ANSWER_WAIT: Duration = Duration::from_secs(2 * 3600);

pub(crate) fn run(args: &CtlArgs) -> ExitCode {
    match ask(args) {
        Ok((code, shown)) => {
            print!("{shown}");
            ExitCode::from(code)
        }
        Err((code, message)) => {
            eprintln!("shuck ctl: {message}");
            ExitCode::from(code)
        }
    }
}

/// The answer's exit code and what to print.
fn ask(args: &CtlArgs) -> Result<(u8, String), (u8, String)> {
    let words = args.command.words();
    if let Some(w) = words
        .iter()
        .find(|w| w.is_empty() || w.contains(char::is_whitespace))
    {
        return Err((
            exit::USAGE,
            format!("{w:?}: a word of a command may not be empty or hold spaces"),
        ));
    }
    let mut line = words.join(" ");
    line.push_str(" --json");
    if line.len() >= MAX_LINE {
        return Err((
            exit::USAGE,
            format!("the command is longer than {MAX_LINE} bytes"),
        ));
    }
    match args.command.pem_files() {
        Some(files) => {
            let pem = read_pem(files)?;
            line.push(' ');
            line.push_str(PAYLOAD);
            line.push('\n');
            line.push_str(&pem);
            line.push_str("\n\n");
        }
        None => line.push('\n'),
    }
    let socket = args.socket.display();
    let unreachable = |e: std::io::Error| {
        let hint = match e.kind() {
            std::io::ErrorKind::NotFound => {
                " (is shuck running with admin_socket set to it? --socket names another)"
            }
            std::io::ErrorKind::PermissionDenied => {
                " (the socket is for the user shuck runs as and admin_group)"
            }
            std::io::ErrorKind::ConnectionRefused => " (no shuck listens there any more)",
            _ => "",
        };
        (exit::UNREACHABLE, format!("{socket}: {e}{hint}"))
    };
    let mut stream = UnixStream::connect(&args.socket).map_err(unreachable)?;
    stream
        .set_read_timeout(Some(ANSWER_WAIT))
        .and_then(|()| stream.write_all(line.as_bytes()))
        .map_err(unreachable)?;
    let mut answer = String::new();
    BufReader::new(&stream)
        .read_line(&mut answer)
        .map_err(|e| (exit::FAILED, format!("{socket}: no answer: {e}")))?;
    let reply: serde_json::Value = serde_json::from_str(&answer).map_err(|e| {
        (
            exit::FAILED,
            format!("{socket}: not an answer ({e}): {answer:?}"),
        )
    })?;
    let code = reply
        .get("exit")
        .and_then(serde_json::Value::as_u64)
        .and_then(|c| u8::try_from(c).ok())
        .unwrap_or(exit::FAILED);
    let shown = if args.json {
        let data = reply.get("data").cloned().unwrap_or_default();
        format!(
            "{}\n",
            serde_json::to_string_pretty(&data).unwrap_or_default()
        )
    } else {
        reply
            .get("text")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    if code == exit::OK || code == exit::RESTART || args.json {
        Ok((code, shown))
    } else {
        Err((
            code,
            shown.trim_end().trim_start_matches("error: ").to_string(),
        ))
    }
}

/// The PEM to send: `--cert` (and `--key`), else standard input; without empty lines (an
/// empty line ends the payload).
fn read_pem(files: &PemFiles) -> Result<String, (u8, String)> {
    let read = |p: &std::path::Path| {
        std::fs::read_to_string(p).map_err(|e| (exit::USAGE, format!("{}: {e}", p.display())))
    };
    let mut pem = if let Some(cert) = &files.cert {
        read(cert)?
    } else {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| (exit::USAGE, format!("standard input: {e}")))?;
        s
    };
    if let Some(key) = &files.key {
        pem.push('\n');
        pem.push_str(&read(key)?);
    }
    let pem: Vec<&str> = pem.lines().filter(|l| !l.trim().is_empty()).collect();
    let pem = pem.join("\n");
    if pem.is_empty() {
        return Err((
            exit::USAGE,
            "no PEM given (--cert FILE, or on standard input)".into(),
        ));
    }
    // The server counts the line end after the last line too.
    if pem.len() + 1 > MAX_PAYLOAD {
        return Err((
            exit::USAGE,
            format!("the PEM is longer than {MAX_PAYLOAD} bytes"),
        ));
    }
    Ok(pem)
}
