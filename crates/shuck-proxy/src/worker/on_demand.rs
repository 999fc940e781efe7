//! The handshake's side of on-demand certificates: a ClientHello for a name no certificate of
//! the frontend covers waits, up to `on_demand.hold`, while the frontend's manager asks the
//! operator's endpoint and orders one (`certs::acme::on_demand`). The handshake then goes on:
//! served from the new certificate, or refused by the resolver as any unknown name is.

use crate::tls::handshake::error::Deadline;
use crate::tls::handshake::hello::Hello;
use crate::tls::WorkerTls;

use super::WorkerFrontend;

/// Waits for `name`'s on-demand certificate when it needs one; the handshake's time starts
/// again after the wait (the client waited on us, not the other way round).
pub(super) async fn wait_for_certificate(
    tls: &WorkerTls,
    fe: &WorkerFrontend,
    hello: &Hello,
    deadline: &mut Deadline,
) {
    let tables = tls.resolver.tables();
    let Some(certs) = tables.on_demand() else {
        return;
    };
    // Made only here: a frontend without `on_demand` allocates nothing.
    let Some(name) = hello
        .accepted
        .client_hello()
        .server_name()
        .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
    else {
        return;
    };
    if tables.lookup(&name).is_some() || certs.get(&name).is_some() {
        return;
    }
    let Some(hold) = fe
        .cfg
        .acme()
        .and_then(|a| a.on_demand.as_ref())
        .map(|o| o.hold)
    else {
        return;
    };
    if tokio::time::timeout(hold, certs.wanted(&name))
        .await
        .is_err()
    {
        certs.events.held_too_long.inc();
    }
    *deadline = deadline.restarted();
}
