//! The one error type of shuck-bench: every variant says what to change.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{flag}: {reason}")]
    Option { flag: &'static str, reason: String },

    #[error("cannot resolve the target {target}: {reason}")]
    Resolve { target: String, reason: String },

    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("{path}: {reason}")]
    BadFile { path: PathBuf, reason: String },

    #[error("cannot draw {path}: {reason}")]
    Plot { path: PathBuf, reason: String },

    #[error("plots need a TrueType font and none was found at {tried}: install fonts-dejavu-core or set SHUCK_BENCH_FONT to a .ttf file")]
    NoFont { tried: String },

    #[error("cannot start the load threads: {0}")]
    Threads(std::io::Error),

    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },

    #[error("the crypto library refused {what}")]
    Crypto { what: &'static str },

    #[error("cannot read process {pid} in /proc ({reason}): is it running, and is it yours?")]
    Proc { pid: u32, reason: String },

    #[error("no connection to {target} succeeded ({reason}): is the server up, and do the TLS options match it?")]
    Unreachable { target: String, reason: String },
}
