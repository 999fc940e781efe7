//! `shuck speed --key pkcs11:…`: the token against the cores, as "Accelerated SSL" set an
//! accelerator card against CPU cores: the token's signatures per second (one session back to
//! back, with its latency, then several sessions at once) beside one core's for the same key
//! type, how many cores the token equals, and the full handshakes per second each allows.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use shuck_proxy::pkcs11::{KeyKind, TokenKey, TokenSpeed};
use shuck_proxy::pkcs11_uri::Pkcs11Uri;

use crate::speed::{KeyType, Measured};
use crate::BenchError;

#[derive(Debug, Clone, Serialize)]
pub struct TokenReport {
    pub token: TokenSpeed,
    /// One core's signatures per second with a key of the same type (aws-lc-rs).
    pub cpu_sign_per_core: f64,
    /// The token's signatures per second over one core's.
    pub cores_equal: f64,
}

/// The key type a token key of `kind` is measured against.
pub fn key_type_of(kind: KeyKind) -> Result<KeyType, BenchError> {
    Ok(match kind {
        KeyKind::Rsa { bits: 2048 } => KeyType::Rsa2048,
        KeyKind::Rsa { bits: 3072 } => KeyType::Rsa3072,
        KeyKind::Rsa { bits: 4096 } => KeyType::Rsa4096,
        KeyKind::Rsa { bits } => {
            return Err(BenchError::Option {
                flag: "--key",
                reason: format!("an RSA {bits}-bit key; shuck speed compares 2048, 3072 and 4096"),
            })
        }
        KeyKind::EcP256 => KeyType::P256,
        KeyKind::EcP384 => KeyType::P384,
    })
}

/// Opens the key `uri` names (with `module` unless the URI names its own).
pub fn open(uri: &Pkcs11Uri, module: Option<&Path>) -> Result<TokenKey, BenchError> {
    TokenKey::open(uri, module).map_err(|e| BenchError::Option {
        flag: "--key",
        reason: e.to_string(),
    })
}

/// Measures `key` for `budget` per figure with `sessions` at once, against `measured`.
pub fn measure(
    key: &TokenKey,
    sessions: usize,
    budget: Duration,
    measured: &Measured,
) -> Result<TokenReport, BenchError> {
    let token = TokenSpeed::measure(key, sessions, budget).map_err(|e| BenchError::Option {
        flag: "--key",
        reason: e.to_string(),
    })?;
    let kind = key_type_of(key.kind)?;
    let cpu = measured
        .sign_per_s
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(0.0, |(_, v)| *v);
    Ok(TokenReport {
        cores_equal: if cpu > 0.0 {
            token.per_second / cpu
        } else {
            0.0
        },
        cpu_sign_per_core: cpu,
        token,
    })
}

/// The report in words.
pub fn text(r: &TokenReport, cores: usize) -> String {
    let t = &r.token;
    let mut o = String::new();
    let _ = writeln!(o, "token {} ({}):", t.key, t.scheme);
    let _ = writeln!(
        o,
        "  one session: {:.0} signatures/s, latency p50 {} µs, p99 {} µs",
        t.per_second_one_session, t.p50_us, t.p99_us
    );
    let _ = writeln!(
        o,
        "  {} at once: {:.0} signatures/s",
        match t.sessions {
            1 => "one session".to_string(),
            n => format!("{n} sessions"),
        },
        t.per_second
    );
    let _ = writeln!(
        o,
        "  one core signs with the same key type at {:.0}/s: the token equals {:.2} cores",
        r.cpu_sign_per_core, r.cores_equal
    );
    let _ = writeln!(
        o,
        "  full handshakes/s, signatures alone: {:.0} with the token, {:.0} with {cores} cores",
        t.per_second,
        r.cpu_sign_per_core * cores as f64
    );
    o
}
