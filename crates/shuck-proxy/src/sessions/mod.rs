//! Sessions a client can resume, on any worker or any host: the ticket keys (`tickets`, and
//! `ticket_keys` for the files a fleet shares), the per-process session cache (`cache`), the
//! remote store in front of it (`remote`, fed by the ClientHello stage, over the `store`
//! folder's client), and which mechanism resumed (`resumption`).

pub(crate) mod cache;
pub(crate) mod remote;
pub(crate) mod resumption;
pub(crate) mod ticket_keys;
pub(crate) mod tickets;
