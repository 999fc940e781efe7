//! `shuck-bench`: `shuck bench` and `shuck speed` (the load generator, its plots, the crypto
//! speed estimate) in a binary of their own. `shuck bench …` and `shuck speed …` run it with
//! their arguments, so the terminator itself links none of the plotting stack.
#![forbid(unsafe_code)]

use std::process::ExitCode;

// The same allocator as shuck's (when built with it), so the load generator and `shuck bench
// backend` measure as they did when they were part of the shuck binary.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use clap::{Parser, Subcommand};

/// Named `shuck` in its help: users reach it as `shuck bench` and `shuck speed`.
#[derive(Debug, Parser)]
#[command(
    name = "shuck",
    bin_name = "shuck",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("SHUCK_COMMIT"), ")"),
    about = "shuck's benchmark and capacity tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Load a TLS server as Vincent Bernat's TLS-termination benchmark did (K connections per
    /// TLS session, an offered-rate ramp, the maximum within a latency bound); `shuck bench backend` and `shuck bench idle` help set it up.
    Bench(Box<shuck_bench::cli::BenchCommand>),
    /// Measure this machine's per-core crypto speed and predict handshakes/s and bulk MB/s.
    Speed(shuck_bench::cli::SpeedArgs),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Bench(args) => shuck_bench::cli::run_bench(&args),
        Command::Speed(args) => shuck_bench::cli::run_speed(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shuck: error: {e}");
            ExitCode::FAILURE
        }
    }
}
