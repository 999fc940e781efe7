//! `shuck speed`: what one core can do with aws-lc-rs (signatures, key exchanges, AEAD), and
//! the handshake and bulk capacity that follows (the NGINX paper's method: small-request rates
//! track the server's signing speed). With a bench JSON, the measured/predicted ratio.

use std::fmt::Write as _;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use aws_lc_rs::{aead, agreement, kem, rand, signature};
use serde::Serialize;

use crate::report::BenchReport;
use crate::BenchError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyType {
    Rsa2048,
    Rsa3072,
    Rsa4096,
    P256,
    P384,
    Ed25519,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kx {
    X25519,
    P256,
    P384,
    X25519mlkem768,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum Cipher {
    #[value(name = "aes-128-gcm")]
    #[serde(rename = "aes-128-gcm")]
    Aes128Gcm,
    #[value(name = "aes-256-gcm")]
    #[serde(rename = "aes-256-gcm")]
    Aes256Gcm,
    #[value(name = "chacha20-poly1305")]
    #[serde(rename = "chacha20-poly1305")]
    Chacha20Poly1305,
}

const KEYS: [KeyType; 6] = [
    KeyType::Rsa2048,
    KeyType::Rsa3072,
    KeyType::Rsa4096,
    KeyType::P256,
    KeyType::P384,
    KeyType::Ed25519,
];
const KXS: [Kx; 4] = [Kx::X25519, Kx::P256, Kx::P384, Kx::X25519mlkem768];
const CIPHERS: [Cipher; 3] = [
    Cipher::Aes128Gcm,
    Cipher::Aes256Gcm,
    Cipher::Chacha20Poly1305,
];

fn name<T: clap::ValueEnum>(v: &T) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
}

#[derive(Debug, Clone)]
pub struct SpeedOptions {
    pub quick: bool,
    /// The server's key type, for the prediction.
    pub key: KeyType,
    pub kx: Kx,
    pub cipher: Cipher,
    /// Cores the prediction is scaled to.
    pub cores: usize,
    /// Connections per TLS session in the mixed prediction (K, as in Bernat's benchmark).
    pub requests_per_session: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub sign_per_s: Vec<(KeyType, f64)>,
    pub kx_per_s: Vec<(Kx, f64)>,
    /// (cipher, record bytes, MB/s)
    pub aead_mb_per_s: Vec<(Cipher, usize, f64)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    pub key: KeyType,
    pub kx: Kx,
    pub cipher: Cipher,
    pub cores: usize,
    pub requests_per_session: u32,
    /// Public-key work of a full handshake: one signature, one server key share.
    pub full_per_core: f64,
    /// TLS 1.3 resumption with (EC)DHE (psk_dhe_ke): one key share, no signature.
    pub resumed_tls13_per_core: f64,
    /// K connections per session, the first full, the rest TLS 1.3 resumed.
    pub mixed_tls13_per_core: f64,
    /// K connections per session, the rest TLS 1.2 resumed (no public-key work).
    pub mixed_tls12_per_core: f64,
    /// 16 KiB records, the bulk case.
    pub bulk_mb_per_s_per_core: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub measured_tps: f64,
    pub predicted_tps: f64,
    pub ratio: f64,
    /// From the server's CPU time per connection: connections per core-second.
    pub measured_per_cpu_second: Option<f64>,
    pub cpu_ratio: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SpeedReport {
    pub measured: Measured,
    pub prediction: Prediction,
    pub comparison: Option<Comparison>,
}

/// Calls `f` in batches until `budget` has passed; returns calls per second.
fn rate(budget: Duration, mut f: impl FnMut()) -> f64 {
    f(); // warm caches and lazy initialisation out of the timing
    let start = Instant::now();
    let mut n = 0u64;
    let mut batch = 1u64;
    loop {
        for _ in 0..batch {
            f();
        }
        n += batch;
        let el = start.elapsed();
        if el >= budget {
            return n as f64 / el.as_secs_f64();
        }
        batch = (batch * 2).min(1024);
    }
}

fn crypto(what: &'static str) -> impl Fn(aws_lc_rs::error::Unspecified) -> BenchError {
    move |_| BenchError::Crypto { what }
}

fn sign_rate(k: KeyType, budget: Duration) -> Result<f64, BenchError> {
    let rng = rand::SystemRandom::new();
    // About what TLS 1.3 signs: 64 spaces, a context string and a transcript hash.
    let msg = [0x20u8; 130];
    Ok(match k {
        KeyType::Rsa2048 | KeyType::Rsa3072 | KeyType::Rsa4096 => {
            let size = match k {
                KeyType::Rsa2048 => aws_lc_rs::rsa::KeySize::Rsa2048,
                KeyType::Rsa3072 => aws_lc_rs::rsa::KeySize::Rsa3072,
                _ => aws_lc_rs::rsa::KeySize::Rsa4096,
            };
            let kp = signature::RsaKeyPair::generate(size).map_err(crypto("RSA key generation"))?;
            let mut sig = vec![0u8; kp.public_modulus_len()];
            // TLS 1.3 signs with RSA-PSS.
            rate(budget, || {
                let _ = kp.sign(&signature::RSA_PSS_SHA256, &rng, black_box(&msg), &mut sig);
            })
        }
        KeyType::P256 | KeyType::P384 => {
            let alg = if k == KeyType::P256 {
                &signature::ECDSA_P256_SHA256_ASN1_SIGNING
            } else {
                &signature::ECDSA_P384_SHA384_ASN1_SIGNING
            };
            let kp =
                signature::EcdsaKeyPair::generate(alg).map_err(crypto("ECDSA key generation"))?;
            rate(budget, || {
                let _ = black_box(kp.sign(&rng, black_box(&msg)));
            })
        }
        KeyType::Ed25519 => {
            let kp =
                signature::Ed25519KeyPair::generate().map_err(crypto("Ed25519 key generation"))?;
            rate(budget, || {
                black_box(kp.sign(black_box(&msg)));
            })
        }
    })
}

/// The server's side of one key exchange: a fresh key share and the shared secret with the
/// client's share (and, for the hybrid, an ML-KEM-768 encapsulation to the client's key).
fn kx_rate(kx: Kx, budget: Duration) -> Result<f64, BenchError> {
    let rng = rand::SystemRandom::new();
    let alg = match kx {
        Kx::X25519 | Kx::X25519mlkem768 => &agreement::X25519,
        Kx::P256 => &agreement::ECDH_P256,
        Kx::P384 => &agreement::ECDH_P384,
    };
    let client =
        agreement::EphemeralPrivateKey::generate(alg, &rng).map_err(crypto("key share"))?;
    let client_pub = client.compute_public_key().map_err(crypto("public key"))?;
    let client_pub = client_pub.as_ref().to_vec();
    let mlkem_client = if kx == Kx::X25519mlkem768 {
        let dk = kem::DecapsulationKey::generate(&kem::ML_KEM_768).map_err(crypto("ML-KEM key"))?;
        let ek = dk.encapsulation_key().map_err(crypto("ML-KEM key"))?;
        Some(
            ek.key_bytes()
                .map_err(crypto("ML-KEM key"))?
                .as_ref()
                .to_vec(),
        )
    } else {
        None
    };
    let mut failed = false;
    let r = rate(budget, || {
        let ok = (|| {
            let mine = agreement::EphemeralPrivateKey::generate(alg, &rng).ok()?;
            black_box(mine.compute_public_key().ok()?);
            let peer = agreement::UnparsedPublicKey::new(alg, &client_pub);
            agreement::agree_ephemeral(mine, peer, (), |s| Ok(black_box(s.len()))).ok()?;
            if let Some(ek) = &mlkem_client {
                let ek = kem::EncapsulationKey::new(&kem::ML_KEM_768, ek).ok()?;
                black_box(ek.encapsulate().ok()?);
            }
            Some(())
        })();
        failed |= ok.is_none();
    });
    if failed {
        return Err(BenchError::Crypto {
            what: "a key exchange",
        });
    }
    Ok(r)
}

fn aead_rate(c: Cipher, len: usize, budget: Duration) -> Result<f64, BenchError> {
    let alg = match c {
        Cipher::Aes128Gcm => &aead::AES_128_GCM,
        Cipher::Aes256Gcm => &aead::AES_256_GCM,
        Cipher::Chacha20Poly1305 => &aead::CHACHA20_POLY1305,
    };
    let key = vec![7u8; alg.key_len()];
    let key = aead::LessSafeKey::new(aead::UnboundKey::new(alg, &key).map_err(crypto("AEAD key"))?);
    let mut buf = vec![0u8; len];
    // A fixed nonce is fine for timing: nothing sealed here is ever sent or kept.
    let ops = rate(budget, || {
        let nonce = aead::Nonce::assume_unique_for_key([0u8; 12]);
        let _ = black_box(key.seal_in_place_separate_tag(nonce, aead::Aad::empty(), &mut buf));
    });
    Ok(ops * len as f64 / 1e6)
}

pub fn measure(quick: bool) -> Result<Measured, BenchError> {
    let budget = Duration::from_millis(if quick { 100 } else { 1000 });
    let mut m = Measured {
        sign_per_s: Vec::new(),
        kx_per_s: Vec::new(),
        aead_mb_per_s: Vec::new(),
    };
    for k in KEYS {
        m.sign_per_s.push((k, sign_rate(k, budget)?));
    }
    for kx in KXS {
        m.kx_per_s.push((kx, kx_rate(kx, budget)?));
    }
    for c in CIPHERS {
        for len in [1024, 16 * 1024] {
            m.aead_mb_per_s.push((c, len, aead_rate(c, len, budget)?));
        }
    }
    Ok(m)
}

pub fn predict(m: &Measured, o: &SpeedOptions) -> Prediction {
    let sign = m
        .sign_per_s
        .iter()
        .find(|(k, _)| *k == o.key)
        .map_or(f64::NAN, |x| x.1);
    let kx = m
        .kx_per_s
        .iter()
        .find(|(k, _)| *k == o.kx)
        .map_or(f64::NAN, |x| x.1);
    let bulk = m
        .aead_mb_per_s
        .iter()
        .find(|(c, len, _)| *c == o.cipher && *len == 16 * 1024)
        .map_or(f64::NAN, |x| x.2);
    let t_full = 1.0 / sign + 1.0 / kx;
    let k = f64::from(o.requests_per_session.max(1));
    Prediction {
        key: o.key,
        kx: o.kx,
        cipher: o.cipher,
        cores: o.cores,
        requests_per_session: o.requests_per_session,
        full_per_core: 1.0 / t_full,
        resumed_tls13_per_core: kx,
        mixed_tls13_per_core: 1.0 / (t_full / k + (k - 1.0) / k / kx),
        mixed_tls12_per_core: k / t_full,
        bulk_mb_per_s_per_core: bulk,
    }
}

/// The type of the private key in a PEM file: a shuck bundle (chain + key) or a key file.
pub fn key_type_of(path: &Path) -> Result<KeyType, BenchError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::PrivateKeyDer;
    let bad = |reason: String| BenchError::BadFile {
        path: path.to_path_buf(),
        reason,
    };
    let key = PrivateKeyDer::from_pem_file(path)
        .map_err(|e| bad(format!("no usable private key in it ({e})")))?;
    let der = key.secret_der();
    if let Ok(kp) =
        signature::RsaKeyPair::from_pkcs8(der).or_else(|_| signature::RsaKeyPair::from_der(der))
    {
        return match kp.public_modulus_len() * 8 {
            2048 => Ok(KeyType::Rsa2048),
            3072 => Ok(KeyType::Rsa3072),
            4096 => Ok(KeyType::Rsa4096),
            bits => Err(bad(format!(
                "an RSA {bits}-bit key; shuck speed measures 2048, 3072 and 4096 (use --key)"
            ))),
        };
    }
    if signature::EcdsaKeyPair::from_private_key_der(
        &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        der,
    )
    .is_ok()
    {
        return Ok(KeyType::P256);
    }
    if signature::EcdsaKeyPair::from_private_key_der(
        &signature::ECDSA_P384_SHA384_ASN1_SIGNING,
        der,
    )
    .is_ok()
    {
        return Ok(KeyType::P384);
    }
    if signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(der).is_ok() {
        return Ok(KeyType::Ed25519);
    }
    Err(bad(
        "a private key of a type shuck speed does not measure (use --key)".into(),
    ))
}

/// Reads a `shuck bench` JSON and sets the options it determines (K, key exchange, cipher).
pub fn read_bench(path: &Path, o: &mut SpeedOptions) -> Result<BenchReport, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|source| BenchError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let r: BenchReport = serde_json::from_str(&text).map_err(|e| BenchError::BadFile {
        path: path.to_path_buf(),
        reason: format!("not a shuck bench JSON ({e})"),
    })?;
    o.requests_per_session = if r.settings.resume == "none" {
        1
    } else {
        r.settings.requests_per_session
    };
    match r.settings.kx_group.as_deref() {
        Some("X25519") => o.kx = Kx::X25519,
        Some("secp256r1") => o.kx = Kx::P256,
        Some("secp384r1") => o.kx = Kx::P384,
        Some("X25519MLKEM768") => o.kx = Kx::X25519mlkem768,
        _ => {}
    }
    if let Some(s) = r.settings.cipher_suite.as_deref() {
        if s.contains("AES_128_GCM") {
            o.cipher = Cipher::Aes128Gcm;
        } else if s.contains("AES_256_GCM") {
            o.cipher = Cipher::Aes256Gcm;
        } else if s.contains("CHACHA20") {
            o.cipher = Cipher::Chacha20Poly1305;
        }
    }
    Ok(r)
}

pub fn compare(r: &BenchReport, p: &Prediction) -> Comparison {
    let tls12 = r.settings.protocol.as_deref() == Some("TLSv1.2");
    let per_core = if tls12 {
        p.mixed_tls12_per_core
    } else {
        p.mixed_tls13_per_core
    };
    let measured_tps = r.verdict.max_tps.unwrap_or(r.totals.peak_successful_tps);
    let predicted_tps = per_core * p.cores as f64;
    let measured_per_cpu_second = r
        .totals
        .server_cpu_us_per_conn
        .filter(|c| *c > 0.0)
        .map(|c| 1e6 / c);
    Comparison {
        measured_tps,
        predicted_tps,
        ratio: measured_tps / predicted_tps,
        measured_per_cpu_second,
        cpu_ratio: measured_per_cpu_second.map(|m| m / per_core),
    }
}

pub fn text(r: &SpeedReport) -> String {
    let mut o = String::new();
    let meas = &r.measured;
    let _ = writeln!(o, "one core, aws-lc-rs:");
    for (k, v) in &meas.sign_per_s {
        let _ = writeln!(o, "  sign      {:<18} {v:>12.0} ops/s", name(k));
    }
    for (k, v) in &meas.kx_per_s {
        let _ = writeln!(
            o,
            "  kx        {:<18} {v:>12.0} ops/s (server side)",
            name(k)
        );
    }
    for (c, len, v) in &meas.aead_mb_per_s {
        let size = format!("{} KiB", len / 1024);
        let _ = writeln!(o, "  aead      {:<18} {v:>12.0} MB/s at {size}", name(c));
    }
    let pred = &r.prediction;
    let _ = writeln!(
        o,
        "prediction for key {}, key exchange {}, {}, K = {} connections per session:",
        name(&pred.key),
        name(&pred.kx),
        name(&pred.cipher),
        pred.requests_per_session
    );
    let n = pred.cores as f64;
    let _ = writeln!(
        o,
        "  {:<40} {:>12} {:>12}",
        "",
        "per core",
        format!("{} cores", pred.cores)
    );
    for (label, v) in [
        ("full handshakes/s", pred.full_per_core),
        (
            "resumed handshakes/s (TLS 1.3 psk_dhe)",
            pred.resumed_tls13_per_core,
        ),
        (
            "connections/s, K per session, TLS 1.3",
            pred.mixed_tls13_per_core,
        ),
        (
            "connections/s, K per session, TLS 1.2",
            pred.mixed_tls12_per_core,
        ),
        ("bulk MB/s", pred.bulk_mb_per_s_per_core),
    ] {
        let _ = writeln!(o, "  {label:<40} {v:>12.0} {:>12.0}", v * n);
    }
    let _ = writeln!(
        o,
        "  public-key crypto only: the NGINX paper measured 0.5-0.6 of this for small requests ({:.0}-{:.0} full/s per core)",
        0.5 * pred.full_per_core,
        0.6 * pred.full_per_core
    );
    if let Some(c) = &r.comparison {
        let _ = writeln!(
            o,
            "measured/predicted: {:.2} ({:.0} TPS measured, {:.0} predicted for {} cores)",
            c.ratio, c.measured_tps, c.predicted_tps, pred.cores
        );
        if let (Some(m), Some(ratio)) = (c.measured_per_cpu_second, c.cpu_ratio) {
            let _ = writeln!(
                o,
                "measured/predicted per CPU-second: {ratio:.2} ({m:.0} connections per second of server CPU)"
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured() -> Measured {
        Measured {
            sign_per_s: vec![(KeyType::P256, 1000.0), (KeyType::Rsa2048, 500.0)],
            kx_per_s: vec![(Kx::X25519, 1000.0)],
            aead_mb_per_s: vec![
                (Cipher::Aes128Gcm, 16384, 3000.0),
                (Cipher::Aes128Gcm, 1024, 900.0),
            ],
        }
    }

    fn opts() -> SpeedOptions {
        SpeedOptions {
            quick: true,
            key: KeyType::P256,
            kx: Kx::X25519,
            cipher: Cipher::Aes128Gcm,
            cores: 2,
            requests_per_session: 4,
        }
    }

    #[test]
    fn prediction_adds_signature_and_key_exchange_times() {
        let p = predict(&measured(), &opts());
        // 1 ms + 1 ms per full handshake.
        assert!((p.full_per_core - 500.0).abs() < 1e-9);
        assert!((p.resumed_tls13_per_core - 1000.0).abs() < 1e-9);
        // 4 connections: 2 ms + 3 × 1 ms = 5 ms.
        assert!((p.mixed_tls13_per_core - 800.0).abs() < 1e-9);
        // TLS 1.2 resumption costs no public-key work: 4 connections per 2 ms.
        assert!((p.mixed_tls12_per_core - 2000.0).abs() < 1e-9);
        assert!((p.bulk_mb_per_s_per_core - 3000.0).abs() < 1e-9);
        let t = text(&SpeedReport {
            measured: measured(),
            prediction: p,
            comparison: None,
        });
        assert!(t.contains("2 cores"), "{t}");
    }
}
