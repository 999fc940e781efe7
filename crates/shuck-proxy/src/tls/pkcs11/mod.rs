//! Private keys in a PKCS#11 token (an HSM, SoftHSM, a smart card), named by URI (RFC 7512,
//! `proto::pkcs11_uri`): the module loaded once per process (`cryptoki`, the Parsec project's
//! safe wrapper, so no FFI of ours), the key found and its public half read and checked, and a
//! pool of signer threads (`signer`), each with its own session, that signs for whoever asks
//! through a bounded queue.

mod der;
mod sign;
pub mod signer;
mod token;

pub use sign::KeyKind;
pub use signer::{all_stats, quiesce, SignError, SignResult, SignStats, SignerPool, TokenSpeed};
pub use token::{Pkcs11Error, TokenKey};
