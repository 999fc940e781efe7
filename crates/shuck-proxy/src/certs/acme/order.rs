//! One certificate order (RFC 8555 §7.4) with instant-acme: the account (stored, or created and
//! stored), the order, a challenge of the configured type per pending authorization, finalization with a CSR
//! for a key shuck generates, and the chain written with that key to the state directory.

use std::sync::Arc;
use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, CertificateIdentifier, ChallengeType,
    ExternalAccountKey, Identifier, NewAccount, NewOrder, OrderStatus, RetryPolicy,
};
use rcgen::{CertificateParams, DistinguishedName, KeyPair};

use super::challenge::{Challenges, Published};
use super::fleet::Fleet;
use super::http01::{self, HttpPublished};
use super::{dns01, state, AcmeError};
use crate::config::{Acme, AcmeKey, Challenge};

/// How long an order may take from ready challenges to a certificate (validation included).
const ORDER_PATIENCE: Duration = Duration::from_secs(90);

/// Obtains a certificate for `acme.names` and stores it as `acme.bundle`; returns the bundle
/// (chain, then key). With a `fleet`, the account is the fleet's and each challenge is published
/// for the other hosts to answer with.
/// A renewal names the certificate it `replaces` (RFC 9773), when the CA's window set its time.
pub(super) async fn obtain(
    challenges: &Arc<Challenges>,
    acme: &Acme,
    fleet: Option<&Fleet>,
    replaces: Option<CertificateIdentifier<'static>>,
) -> Result<Vec<u8>, AcmeError> {
    let account = account(acme, fleet).await?;
    let identifiers: Vec<Identifier> = acme
        .names
        .iter()
        .map(|n| Identifier::Dns(n.clone()))
        .collect();
    let mut new = NewOrder::new(&identifiers);
    if let Some(old) = replaces {
        new = new.replaces(old);
    }
    let mut order = account.new_order(&new).await?;
    // Kept until the order is decided: the CA's validators may ask more than once.
    let mut placed: Vec<Placed> = Vec::new();
    let patience = RetryPolicy::new()
        .initial_delay(Duration::from_millis(250))
        .timeout(ORDER_PATIENCE);
    let status = match prepare_challenges(&mut order, challenges, acme, fleet, &mut placed).await {
        Ok(()) => order.poll_ready(&patience).await.map_err(AcmeError::from),
        Err(e) => Err(e),
    };
    withdraw(placed, fleet).await;
    if status? != OrderStatus::Ready {
        return Err(AcmeError::Refused(why_invalid(&mut order).await));
    }
    // RSA key generation takes a while: off the main thread's runtime (metrics, signals).
    let (names, kind) = (acme.names.clone(), acme.key);
    let (csr, key) = tokio::task::spawn_blocking(move || request(&names, kind))
        .await
        .map_err(|e| AcmeError::Internal(format!("key generation task lost: {e}")))??;
    order.finalize_csr(&csr).await?;
    let chain = order.poll_certificate(&patience).await?;
    let mut bundle = chain.into_bytes();
    if !bundle.ends_with(b"\n") {
        bundle.push(b'\n');
    }
    bundle.extend_from_slice(key.serialize_pem().as_bytes());
    state::write_private(&acme.bundle, &bundle)?;
    Ok(bundle)
}

/// One challenge put where the CA looks, until the order is decided.
enum Placed {
    /// A TLS-ALPN-01 certificate (withdrawn when dropped), and what the fleet's store holds.
    Alpn(Published, Option<Vec<u8>>),
    /// An HTTP-01 answer (withdrawn when dropped), its token, and what the fleet's store holds.
    Http {
        _answer: HttpPublished,
        token: String,
        stored: Option<Vec<u8>>,
    },
    /// A DNS-01 TXT record (removed when dropped, should the order be cancelled first).
    Dns(dns01::Record),
}

/// Puts each pending authorization's challenge where the CA looks, waits for every DNS-01
/// record to be seen on every authoritative server (together), then tells the CA each is
/// ready; `placed` gathers what to take back, also when this fails half way.
async fn prepare_challenges(
    order: &mut instant_acme::Order,
    challenges: &Arc<Challenges>,
    acme: &Acme,
    fleet: Option<&Fleet>,
    placed: &mut Vec<Placed>,
) -> Result<(), AcmeError> {
    let kind = challenge_type(acme.challenge);
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz?;
        match authz.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => return Err(AcmeError::Refused(format!("authorization is {other:?}"))),
        }
        let ch = authz.challenge(kind.clone()).ok_or_else(|| {
            AcmeError::Refused(format!(
                "the CA offers no {} challenge",
                acme.challenge.as_str()
            ))
        })?;
        let name = ch.identifier().to_string();
        if !super::challenge::is_ordered(&acme.names, &name) {
            // A CA answering for a name the order did not ask for would have the fleet serve
            // challenges for it (and replace another frontend's pending one).
            return Err(AcmeError::Refused(format!(
                "the CA's authorization is for {name:?}, which this order did not ask for (names: {})",
                acme.names.join(", ")
            )));
        }
        place(&ch, &name, (challenges, acme, fleet), placed).await?;
    }
    if acme.challenge == Challenge::Dns01 && !placed.is_empty() {
        let update = dns_update(acme)?;
        let servers = dns01::servers(update).await?;
        let waits = placed.iter().filter_map(|p| match p {
            Placed::Dns(r) => Some(dns01::await_propagation(update, &servers, r)),
            _ => None,
        });
        futures_util::future::try_join_all(waits).await?;
    }
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz?;
        if authz.status != AuthorizationStatus::Pending {
            continue;
        }
        if let Some(mut ch) = authz.challenge(kind.clone()) {
            ch.set_ready().await?;
        }
    }
    Ok(())
}

fn challenge_type(c: Challenge) -> ChallengeType {
    match c {
        Challenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
        Challenge::Http01 => ChallengeType::Http01,
        Challenge::Dns01 => ChallengeType::Dns01,
    }
}

/// Puts one challenge where the CA looks (and in the fleet's store).
async fn place(
    ch: &instant_acme::ChallengeHandle<'_>,
    name: &str,
    (challenges, acme, fleet): (&Arc<Challenges>, &Acme, Option<&Fleet>),
    placed: &mut Vec<Placed>,
) -> Result<(), AcmeError> {
    let key_authorization = ch.key_authorization();
    match acme.challenge {
        Challenge::TlsAlpn01 => {
            let provider = rustls::crypto::aws_lc_rs::default_provider();
            let p = challenges.publish(name, key_authorization.digest().as_ref(), &provider)?;
            let key = super::fleet::challenge_key(p.name());
            let shared = share_challenge(fleet, &key, &p.material().encode()).await?;
            placed.push(Placed::Alpn(p, shared));
        }
        Challenge::Http01 => {
            let token = ch.token.clone();
            let answer = key_authorization.as_str();
            let p = challenges.http.publish(&token, answer);
            let shared =
                share_challenge(fleet, &http01::store_key(&token), answer.as_bytes()).await?;
            placed.push(Placed::Http {
                _answer: p,
                token,
                stored: shared,
            });
        }
        Challenge::Dns01 => {
            let update = dns_update(acme)?;
            // Kept before it is sent: an update applied whose answer is lost is removed too.
            let signer = challenges.dns_keys.signer(update)?;
            let record = dns01::Record::new(update, signer, name, &key_authorization.dns_value());
            placed.push(Placed::Dns(record));
            if let Some(Placed::Dns(r)) = placed.last_mut() {
                let added = dns01::add(update, r).await;
                if let Err(AcmeError::DnsRefused {
                    nothing_added: true,
                    ..
                }) = added
                {
                    r.never_added();
                }
                added?;
            }
        }
    }
    Ok(())
}

fn dns_update(acme: &Acme) -> Result<&crate::config::DnsUpdate, AcmeError> {
    acme.dns_update
        .as_ref()
        .ok_or_else(|| AcmeError::Internal("dns-01 without dns_update".into()))
}

/// Publishes a challenge in the fleet's store, when there is a fleet; what was stored.
async fn share_challenge(
    fleet: Option<&Fleet>,
    key: &str,
    material: &[u8],
) -> Result<Option<Vec<u8>>, AcmeError> {
    let Some(f) = fleet else {
        return Ok(None);
    };
    f.publish_challenge(key, material)
        .await
        .map(Some)
        .map_err(|e| {
            AcmeError::Refused(format!(
                "cannot publish the challenge to the fleet's store: {e}"
            ))
        })
}

/// Takes back every challenge placed: the fleet's copies, the DNS records (a record that
/// cannot be removed is said, once; the order goes on), the local answers (by dropping).
async fn withdraw(placed: Vec<Placed>, fleet: Option<&Fleet>) {
    for p in placed {
        match p {
            Placed::Alpn(p, Some(stored)) => {
                if let Some(f) = fleet {
                    f.withdraw_challenge(&super::fleet::challenge_key(p.name()), &stored)
                        .await;
                }
            }
            Placed::Http {
                token,
                stored: Some(stored),
                ..
            } => {
                if let Some(f) = fleet {
                    f.withdraw_challenge(&http01::store_key(&token), &stored)
                        .await;
                }
            }
            Placed::Dns(record) => record.remove().await,
            Placed::Alpn(_, None) | Placed::Http { stored: None, .. } => {}
        }
    }
}

/// The account for the directory: the fleet's (when there is a fleet and it has one), else the
/// stored one (shared with the fleet), else a new one (stored, and shared, before it is used).
async fn account(acme: &Acme, fleet: Option<&Fleet>) -> Result<Account, AcmeError> {
    if let Some(account) = existing_account(acme, fleet).await? {
        return Ok(account);
    }
    create_account(acme, fleet).await
}

fn builder(acme: &Acme) -> Result<instant_acme::AccountBuilder, AcmeError> {
    Ok(match &acme.directory_ca {
        Some(ca) => Account::builder_with_root(ca)?,
        None => Account::builder()?,
    })
}

/// The fleet's account, else the stored one (then shared with the fleet); `None`: none yet.
pub(super) async fn existing_account(
    acme: &Acme,
    fleet: Option<&Fleet>,
) -> Result<Option<Account>, AcmeError> {
    let path = state::account_path(&acme.dir, &acme.directory);
    let fleet_key = Fleet::account_key(&acme.directory);
    let shared = match fleet {
        Some(f) => f.store.get(&fleet_key).await.map_err(AcmeError::Refused)?,
        None => None,
    };
    // Only a missing file means "no account yet": any other error must not replace the account.
    let stored = match shared {
        Some(json) => Some(json),
        None => match crate::sys::files::read(&path) {
            Ok(text) => {
                share(fleet, &fleet_key, &text).await?;
                Some(text)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(AcmeError::State { path, source }),
        },
    };
    let Some(text) = stored else {
        return Ok(None);
    };
    let credentials: AccountCredentials =
        serde_json::from_slice(&text).map_err(|e| AcmeError::Account {
            path: path.clone(),
            message: e.to_string(),
        })?;
    Ok(Some(builder(acme)?.from_credentials(credentials).await?))
}

/// A new account (with the CA's terms agreed and, when set, the external account binding),
/// stored and shared with the fleet before it is used.
async fn create_account(acme: &Acme, fleet: Option<&Fleet>) -> Result<Account, AcmeError> {
    let path = state::account_path(&acme.dir, &acme.directory);
    let fleet_key = Fleet::account_key(&acme.directory);
    let contact: Vec<&str> = acme.contact.iter().map(String::as_str).collect();
    let new = NewAccount {
        contact: &contact,
        terms_of_service_agreed: true,
        only_return_existing: false,
    };
    let eab = match &acme.eab {
        Some(e) => Some(external_account_key(e)?),
        None => None,
    };
    let (account, credentials) = builder(acme)?
        .create(&new, acme.directory.clone(), eab.as_ref())
        .await?;
    let json = serde_json::to_vec(&credentials).map_err(|e| AcmeError::Account {
        path: path.clone(),
        message: e.to_string(),
    })?;
    state::write_private(&path, &json)?;
    share(fleet, &fleet_key, &json).await?;
    tracing::info!(account = account.id(), directory = %acme.directory, "ACME account created");
    Ok(account)
}

/// The external account binding key: its ID, and the HMAC key read from its file (base64url,
/// padded or not, as CAs hand it out).
fn external_account_key(eab: &crate::config::Eab) -> Result<ExternalAccountKey, AcmeError> {
    use base64::Engine as _;
    let path = &eab.hmac_key_file;
    let text = crate::sys::files::read(path).map_err(|source| AcmeError::State {
        path: path.clone(),
        source,
    })?;
    let encoded = String::from_utf8_lossy(&text);
    let trimmed = encoded.trim().trim_end_matches('=');
    let key = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(trimmed)
        .map_err(|_| AcmeError::Account {
            path: path.clone(),
            message: "the EAB HMAC key is not base64url".into(),
        })?;
    Ok(ExternalAccountKey::new(eab.kid.clone(), &key))
}

/// Puts the account in the fleet's store (sealed: it holds the account key).
async fn share(fleet: Option<&Fleet>, key: &str, json: &[u8]) -> Result<(), AcmeError> {
    let Some(f) = fleet else {
        return Ok(());
    };
    // Years: an account outlives its certificates.
    let ttl = Duration::from_secs(10 * 365 * 86_400);
    f.store.put(key, json, ttl).await.map_err(|e| {
        AcmeError::Refused(format!("cannot share the ACME account with the fleet: {e}"))
    })
}

/// A CSR for `names` and the new key it is for.
fn request(names: &[String], key: AcmeKey) -> Result<(Vec<u8>, KeyPair), AcmeError> {
    let alg = match key {
        AcmeKey::Ecdsa => &rcgen::PKCS_ECDSA_P256_SHA256,
        AcmeKey::Rsa => &rcgen::PKCS_RSA_SHA256,
    };
    let key_pair = KeyPair::generate_for(alg)?;
    let mut params = CertificateParams::new(names.to_vec())?;
    params.distinguished_name = DistinguishedName::new();
    let csr = params.serialize_request(&key_pair)?;
    Ok((csr.der().to_vec(), key_pair))
}

/// The CA's reasons, from the order and its authorizations' challenges.
async fn why_invalid(order: &mut instant_acme::Order) -> String {
    let mut reasons = Vec::new();
    if let Some(p) = &order.state().error {
        reasons.push(p.to_string());
    }
    let mut authorizations = order.authorizations();
    while let Some(Ok(authz)) = authorizations.next().await {
        for ch in &authz.challenges {
            if let Some(p) = &ch.error {
                reasons.push(format!("{}: {p}", authz.identifier()));
            }
        }
    }
    if reasons.is_empty() {
        "the order became invalid; the CA gave no reason".into()
    } else {
        reasons.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_cert::der::Decode;

    #[test]
    fn requests_are_for_the_names_with_a_new_key_of_the_kind_asked() {
        let names = vec!["a.example".to_string(), "b.example".to_string()];
        for kind in [AcmeKey::Ecdsa, AcmeKey::Rsa] {
            let (csr, key) = request(&names, kind).expect("request");
            let parsed = x509_cert::request::CertReq::from_der(&csr).expect("CSR");
            let pem = key.serialize_pem();
            assert!(pem.contains("PRIVATE KEY"));
            let want_rsa = kind == AcmeKey::Rsa;
            assert_eq!(
                parsed.info.public_key.algorithm.oid
                    == x509_cert::der::oid::db::rfc5912::RSA_ENCRYPTION,
                want_rsa
            );
        }
    }
}
