//! TLS protocol versions, cipher suites and key-exchange groups: their names (as configured, as
//! OpenSSL and the PROXY SSL TLV say them), defaults and parsing. A leaf: config, tls and the
//! PROXY header writer all use it.

use rustls::crypto::aws_lc_rs::{self, cipher_suite as cs, kx_group};
use rustls::crypto::SupportedKxGroup;
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};

pub(crate) fn default_versions() -> Vec<&'static SupportedProtocolVersion> {
    vec![&rustls::version::TLS13, &rustls::version::TLS12]
}

pub(crate) fn parse_versions(
    list: &[String],
) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    let mut out = Vec::new();
    for name in list {
        let v: &'static SupportedProtocolVersion = match name
            .to_ascii_uppercase()
            .replace(['v', 'V', '_'], "")
            .as_str()
        {
            "TLS1.2" | "TLS12" => &rustls::version::TLS12,
            "TLS1.3" | "TLS13" => &rustls::version::TLS13,
            _ => {
                return Err(format!(
                    "{name:?} is not a supported version: use \"TLS1.2\" and/or \"TLS1.3\""
                ))
            }
        };
        if !out
            .iter()
            .any(|o: &&SupportedProtocolVersion| o.version == v.version)
        {
            out.push(v);
        }
    }
    if out.is_empty() {
        return Err("empty list: enable TLS1.2 and/or TLS1.3".into());
    }
    Ok(out)
}

/// True when the CPU has AES and carry-less multiply instructions, so AES-GCM is both faster and
/// cheaper than ChaCha20-Poly1305 (a lesson of Bernat's benchmarks: the server should pick the cheap strong cipher).
pub(crate) fn cpu_has_aes() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// AES-128-GCM first on AES-capable CPUs, ChaCha20 first elsewhere; ECDSA before RSA for TLS 1.2.
pub(crate) fn default_ciphersuites() -> Vec<SupportedCipherSuite> {
    let aes = [cs::TLS13_AES_128_GCM_SHA256, cs::TLS13_AES_256_GCM_SHA384];
    let chacha = [cs::TLS13_CHACHA20_POLY1305_SHA256];
    let aes12 = [
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ];
    let chacha12 = [
        cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ];
    let mut out = Vec::new();
    if cpu_has_aes() {
        out.extend(aes);
        out.extend(chacha);
        out.extend(aes12);
        out.extend(chacha12);
    } else {
        out.extend(chacha);
        out.extend(aes);
        out.extend(chacha12);
        out.extend(aes12);
    }
    out
}

pub(crate) fn suite_name(s: SupportedCipherSuite) -> &'static str {
    s.suite().as_str().unwrap_or("unknown")
}

/// The OpenSSL name of a suite, as HAProxy and nginx report ciphers (`ssl_fc_cipher`,
/// `$ssl_cipher`) and so as backends reading the PROXY SSL TLV expect them. For TLS 1.3 that is
/// the RFC 8446 name, which rustls spells with a "TLS13_" prefix.
pub(crate) fn openssl_suite_name(s: SupportedCipherSuite) -> &'static str {
    match suite_name(s) {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" => "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" => "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS13_AES_128_GCM_SHA256" => "TLS_AES_128_GCM_SHA256",
        "TLS13_AES_256_GCM_SHA384" => "TLS_AES_256_GCM_SHA384",
        "TLS13_CHACHA20_POLY1305_SHA256" => "TLS_CHACHA20_POLY1305_SHA256",
        other => other,
    }
}

/// Looks each name up (case-insensitively) in `all`, drops duplicates, keeps the given order.
fn parse_names<T: Copy>(
    list: &[String],
    all: &[T],
    name_of: impl Fn(T) -> &'static str,
    what: &str,
) -> Result<Vec<T>, String> {
    let mut out: Vec<T> = Vec::with_capacity(list.len());
    for name in list {
        let found = all
            .iter()
            .copied()
            .find(|t| name_of(*t).eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                let known: Vec<&str> = all.iter().map(|t| name_of(*t)).collect();
                format!(
                    "{name:?} is not a supported {what}; known: {}",
                    known.join(", ")
                )
            })?;
        if !out.iter().any(|o| name_of(*o) == name_of(found)) {
            out.push(found);
        }
    }
    if out.is_empty() {
        return Err("empty list".into());
    }
    Ok(out)
}

/// OpenSSL's names of the TLS 1.2 suites rustls has, and their IANA names (which shuck uses).
pub const OPENSSL_TLS12_SUITES: [(&str, &str); 6] = [
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
];

pub(crate) fn parse_ciphersuites(list: &[String]) -> Result<Vec<SupportedCipherSuite>, String> {
    // The RFC 8446 / OpenSSL spelling of TLS 1.3 suites ("TLS_AES_128_GCM_SHA256") is what
    // operators copy from other servers; rustls spells them "TLS13_…". OpenSSL's TLS 1.2 names
    // ("ECDHE-RSA-AES128-GCM-SHA256", from nginx's `ssl_ciphers` or HAProxy's `ciphers`) are
    // taken where they name one suite rustls has.
    let list: Vec<String> = list
        .iter()
        .map(|n| {
            if let Some((_, iana)) = OPENSSL_TLS12_SUITES
                .iter()
                .find(|(o, _)| o.eq_ignore_ascii_case(n))
            {
                return (*iana).to_string();
            }
            match n.strip_prefix("TLS_") {
                Some(rest) if !rest.starts_with("ECDHE") => format!("TLS13_{rest}"),
                _ => n.clone(),
            }
        })
        .collect();
    parse_names(
        &list,
        aws_lc_rs::ALL_CIPHER_SUITES,
        suite_name,
        "cipher suite",
    )
}

/// Each enabled protocol version needs at least one suite, or every handshake at that version
/// fails in a way that is hard to diagnose from the client side.
pub(crate) fn check_suites_cover_versions(
    suites: &[SupportedCipherSuite],
    versions: &[&'static SupportedProtocolVersion],
) -> Result<(), String> {
    for v in versions {
        if !suites.iter().any(|s| s.version().version == v.version) {
            let name = version_name(v.version);
            return Err(format!(
                "no cipher suite for {name}, which is enabled: add one or remove {name} from protocols"
            ));
        }
    }
    Ok(())
}

/// TLS 1.2 cannot use the post-quantum groups; with only those, every TLS 1.2 handshake fails.
pub(crate) fn check_groups_cover_versions(
    groups: &[&'static dyn SupportedKxGroup],
    versions: &[&'static SupportedProtocolVersion],
) -> Result<(), String> {
    for v in versions {
        if !groups.iter().any(|g| g.usable_for_version(v.version)) {
            let name = version_name(v.version);
            return Err(format!(
                "no group usable with {name}, which is enabled: add X25519 or P-256, or remove {name} from protocols"
            ));
        }
    }
    Ok(())
}

/// A negotiated version as OpenSSL and the PROXY SSL TLV name it ("TLSv1.3").
pub(crate) fn protocol_name(v: Option<rustls::ProtocolVersion>) -> &'static str {
    match v {
        Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
        Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
        _ => "unknown",
    }
}

/// A version as the configuration names it ("TLS1.3").
pub(crate) fn version_name(v: rustls::ProtocolVersion) -> &'static str {
    match v {
        rustls::ProtocolVersion::TLSv1_2 => "TLS1.2",
        rustls::ProtocolVersion::TLSv1_3 => "TLS1.3",
        _ => "unknown",
    }
}

/// Hybrid post-quantum (cheap on modern CPUs, protects against harvest-now-decrypt-later), X25519,
/// and P-256 for clients that only do NIST curves. This is the allowed set: in TLS 1.3 rustls takes
/// the client's key share when it is allowed, which saves the HelloRetryRequest round trip.
pub(crate) fn default_groups() -> Vec<&'static dyn SupportedKxGroup> {
    vec![
        kx_group::X25519MLKEM768,
        kx_group::X25519,
        kx_group::SECP256R1,
    ]
}

pub(crate) fn group_name(g: &dyn SupportedKxGroup) -> &'static str {
    g.name().as_str().unwrap_or("unknown")
}

pub(crate) fn parse_groups(list: &[String]) -> Result<Vec<&'static dyn SupportedKxGroup>, String> {
    // OpenSSL-style aliases operators know from nginx/HAProxy configurations.
    let list: Vec<String> = list
        .iter()
        .map(|n| match n.to_ascii_lowercase().as_str() {
            "p-256" | "p256" | "prime256v1" => "secp256r1".to_string(),
            "p-384" | "p384" => "secp384r1".to_string(),
            _ => n.clone(),
        })
        .collect();
    parse_names(&list, aws_lc_rs::ALL_KX_GROUPS, group_name, "group")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssl_names_are_taken_where_they_name_one_suite() {
        let names = |l: &[&str]| {
            let list: Vec<String> = l.iter().map(|s| (*s).to_string()).collect();
            parse_ciphersuites(&list).map(|v| v.into_iter().map(suite_name).collect::<Vec<_>>())
        };
        assert_eq!(
            names(&["ECDHE-RSA-AES128-GCM-SHA256", "TLS_AES_256_GCM_SHA384"]).expect("taken"),
            [
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                "TLS13_AES_256_GCM_SHA384"
            ]
        );
        // A keyword or a suite rustls does not have is still refused.
        assert!(names(&["HIGH"]).is_err());
        assert!(names(&["ECDHE-RSA-AES128-SHA256"]).is_err());
    }

    #[test]
    fn default_suite_order_follows_cpu() {
        let first = suite_name(default_ciphersuites()[0]);
        if cpu_has_aes() {
            assert_eq!(first, "TLS13_AES_128_GCM_SHA256");
        } else {
            assert_eq!(first, "TLS13_CHACHA20_POLY1305_SHA256");
        }
    }

    #[test]
    fn names_parse_case_insensitively_with_aliases() {
        let g = parse_groups(&["X25519MLKEM768".into(), "p-256".into()]).unwrap();
        assert_eq!(group_name(g[1]), "secp256r1");
        let s = parse_ciphersuites(&["tls13_aes_256_gcm_sha384".into()]).unwrap();
        assert_eq!(suite_name(s[0]), "TLS13_AES_256_GCM_SHA384");
        let v = parse_versions(&["TLSv1.3".into()]).unwrap();
        assert_eq!(v.len(), 1);
        assert!(parse_groups(&["x448".into()]).is_err());
    }
}
