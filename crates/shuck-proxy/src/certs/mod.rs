//! Certificates shuck obtains and keeps fresh itself: ACME issuance and renewal, OCSP staples;
//! and `x509`, what shuck reads from any certificate.

pub(crate) mod acme;
pub(crate) mod ocsp;
pub(crate) mod staple_refresh;
pub(crate) mod x509;
