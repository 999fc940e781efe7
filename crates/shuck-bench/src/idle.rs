//! Memory per idle connection: hold N TLS connections open (handshake done, then silent) and
//! divide the growth of the server's resident memory by N.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use serde::Serialize;

use crate::tls::ClientTls;
use crate::{procfs, BenchError};

#[derive(Debug, Clone, Serialize)]
pub struct IdleReport {
    pub connections: usize,
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
    pub kib_per_connection: f64,
}

/// Opens `n` connections, 64 handshakes at a time, holds them `hold`, measures, closes.
pub fn run(
    target: SocketAddr,
    server_name: &ServerName<'static>,
    tls: &ClientTls,
    n: usize,
    server_pids: &[u32],
    settle: Duration,
) -> Result<IdleReport, BenchError> {
    let before = procfs::tree_rss_kib(server_pids)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(BenchError::Threads)?;
    let cfg = tls.new_session();
    let held = rt.block_on(async {
        let sem = Arc::new(tokio::sync::Semaphore::new(64));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..n {
            let (cfg, name, sem) = (cfg.clone(), server_name.clone(), sem.clone());
            tasks.spawn(async move {
                let _permit = sem.acquire().await;
                let tcp = tokio::net::TcpStream::connect(target)
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::time::timeout(
                    Duration::from_secs(20),
                    tokio_rustls::TlsConnector::from(cfg).connect(name, tcp),
                )
                .await
                .map_err(|_| "handshake timed out".to_string())?
                .map_err(|e| e.to_string())
            });
        }
        let mut held = Vec::with_capacity(n);
        let mut first_error = None;
        while let Some(r) = tasks.join_next().await {
            match r {
                Ok(Ok(s)) => held.push(s),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => {
                    first_error.get_or_insert(e.to_string());
                }
            }
        }
        match first_error {
            Some(reason) => Err(BenchError::Unreachable {
                target: target.to_string(),
                reason: format!(
                    "{} of {n} idle connections failed, first: {reason}",
                    n - held.len()
                ),
            }),
            None => Ok(held),
        }
    })?;
    // Let the server finish its per-connection set-up (backend connects, buffers released).
    std::thread::sleep(settle);
    let after = procfs::tree_rss_kib(server_pids)?;
    drop(held);
    Ok(IdleReport {
        connections: n,
        rss_before_kib: before,
        rss_after_kib: after,
        kib_per_connection: after.saturating_sub(before) as f64 / n.max(1) as f64,
    })
}
