//! Certificates shuck obtains and keeps fresh itself: ACME issuance and renewal, OCSP staples.

pub(crate) mod acme;
pub(crate) mod ocsp;
pub(crate) mod staple_refresh;
