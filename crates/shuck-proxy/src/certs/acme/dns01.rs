//! DNS-01 (RFC 8555 §8.4) by dynamic update (RFC 2136) signed with TSIG (RFC 8945): the TXT
//! record `_acme-challenge.<name>` added on the zone's primary, looked for on every server the
//! CA may ask (the zone's NS, or `nameservers`) before the CA is told to validate, and removed
//! once the order is decided. Everything goes over TCP: an update is signed and answered in one
//! exchange, and no answer is ever truncated.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use hickory_proto::dnssec::rdata::tsig::TsigAlgorithm;
use hickory_proto::dnssec::tsig::TSigner;
use hickory_proto::op::{update_message, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::TXT;
use hickory_proto::rr::{Name, RData, RecordSet, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::AcmeError;
use crate::config::DnsUpdate;

/// One exchange with a DNS server, connect included.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the servers are asked again while the record has not reached them all.
const PROPAGATION_POLL: Duration = Duration::from_secs(2);
/// The TTL of the challenge record: resolvers must not keep it past the order.
const RECORD_TTL: u32 = 60;
/// The clock difference TSIG tolerates, as BIND's tools use.
const FUDGE: u16 = 300;

fn dns_err(server: SocketAddr, message: impl Into<String>) -> AcmeError {
    AcmeError::Dns {
        server,
        message: message.into(),
    }
}

/// The TSIG keys read at start (before privileges were dropped), by file: what an order signs
/// with when the file cannot be read again (made readable by root only, say).
#[derive(Default)]
pub(crate) struct Keys(std::sync::Mutex<std::collections::HashMap<std::path::PathBuf, TSigner>>);

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(..)") // never the secrets
    }
}

impl Keys {
    /// Keeps the key read from `path`.
    pub(crate) fn keep(&self, path: &Path, key: TSigner) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(path.to_path_buf(), key);
    }

    /// The key in `update`'s file now, else the one read at start.
    pub(super) fn signer(&self, update: &DnsUpdate) -> Result<TSigner, AcmeError> {
        let fresh = read_key(&update.tsig_key_file);
        let kept = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&update.tsig_key_file)
            .cloned();
        match (fresh, kept) {
            (Ok(key), _) | (Err(_), Some(key)) => Ok(key),
            (Err(e), None) => Err(e),
        }
    }
}

/// The TSIG key of a BIND key file (`key "name" { algorithm hmac-sha256; secret "…"; };`, as
/// `tsig-keygen` writes it). The error never shows the secret.
pub(crate) fn read_key(path: &Path) -> Result<TSigner, AcmeError> {
    let fail = |message: &str| AcmeError::TsigKey {
        path: path.to_path_buf(),
        message: message.to_string(),
    };
    let text = crate::sys::files::read(path).map_err(|source| AcmeError::State {
        path: path.to_path_buf(),
        source,
    })?;
    let text = String::from_utf8(text).map_err(|_| fail("not text"))?;
    let (name, algorithm, secret) = parse_key(&text).ok_or_else(|| {
        fail("no `key \"name\" { algorithm …; secret \"…\"; };` in it (BIND's format)")
    })?;
    let secret = base64::engine::general_purpose::STANDARD
        .decode(secret)
        .map_err(|_| fail("the secret is not base64"))?;
    let algorithm = match algorithm.to_ascii_lowercase().as_str() {
        "hmac-sha256" => TsigAlgorithm::HmacSha256,
        "hmac-sha384" => TsigAlgorithm::HmacSha384,
        "hmac-sha512" => TsigAlgorithm::HmacSha512,
        _ => {
            return Err(fail(
                "the algorithm is not hmac-sha256, hmac-sha384 or hmac-sha512",
            ))
        }
    };
    let name = Name::from_ascii(name).map_err(|_| fail("the key's name is not a DNS name"))?;
    TSigner::new(secret, algorithm, name, FUDGE).map_err(|e| fail(&e.to_string()))
}

/// The key's name, algorithm and secret, from the first `key "<name>"` clause of a BIND file
/// (comments before it, as `ddns-confgen` writes, are passed over).
fn parse_key(text: &str) -> Option<(&str, &str, &str)> {
    let start = text
        .match_indices("key")
        .map(|(i, _)| &text[i + 3..])
        .find(|rest| rest.trim_start().starts_with('"'))?;
    let rest = start.trim_start().strip_prefix('"')?;
    let (name, rest) = rest.split_once('"')?;
    let body = rest.split_once('{')?.1.split_once("};")?.0;
    let mut algorithm = None;
    let mut secret = None;
    for statement in body.split(';') {
        let statement = statement.trim();
        if let Some(a) = statement.strip_prefix("algorithm") {
            algorithm = Some(a.trim().trim_matches('"'));
        } else if let Some(s) = statement.strip_prefix("secret") {
            secret = Some(s.trim().trim_matches('"'));
        }
    }
    Some((name, algorithm?, secret?))
}

/// Where the TXT record for `name` lives (a wildcard's is its base name's).
pub(super) fn record_name(name: &str) -> String {
    format!(
        "_acme-challenge.{}.",
        name.strip_prefix("*.").unwrap_or(name)
    )
}

fn names(update: &DnsUpdate, name: &str) -> Result<(Name, Name), AcmeError> {
    let bad = |m: String| dns_err(update.server, m);
    let zone = Name::from_ascii(format!("{}.", update.zone)).map_err(|e| bad(e.to_string()))?;
    let record = Name::from_ascii(record_name(name)).map_err(|e| bad(e.to_string()))?;
    if !zone.zone_of(&record) {
        return Err(bad(format!("{name} is not in the zone {}", update.zone)));
    }
    Ok((zone, record))
}

fn txt_set(record: &Name, value: &str, ttl: u32) -> RecordSet {
    let mut set = RecordSet::new(record.clone(), RecordType::TXT, 0);
    set.set_ttl(ttl);
    set.add_rdata(RData::TXT(TXT::new(vec![value.to_string()])));
    set
}

/// A challenge record placed (or about to be): removed by [`Record::remove`], or, should the
/// order be cancelled first (its time limit, a lost lease), by a task its drop starts.
pub(super) struct Record {
    update: DnsUpdate,
    signer: TSigner,
    name: String,
    value: String,
    removed: bool,
}

impl Record {
    pub(super) fn new(update: &DnsUpdate, signer: TSigner, name: &str, value: &str) -> Record {
        Record {
            update: update.clone(),
            signer,
            name: name.to_string(),
            value: value.to_string(),
            removed: false,
        }
    }

    /// Says the server refused to add it: there is nothing to remove.
    pub(super) fn never_added(&mut self) {
        self.removed = true;
    }

    /// Removes the value (other values, another order's, stay); a failure is said once.
    /// Marked removed only once the server answered: cancelled before, the drop removes it.
    pub(super) async fn remove(mut self) {
        if self.removed {
            return;
        }
        let done = remove(&self.update, &self.signer, &self.name, &self.value).await;
        self.removed = true;
        if let Err(e) = done {
            tracing::warn!(name = %self.name, error = %e, "cannot remove the DNS-01 challenge record");
        }
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (update, signer, name, value) = (
            self.update.clone(),
            self.signer.clone(),
            std::mem::take(&mut self.name),
            std::mem::take(&mut self.value),
        );
        runtime.spawn(async move {
            if let Err(e) = remove(&update, &signer, &name, &value).await {
                tracing::warn!(name = %name, error = %e, "cannot remove the DNS-01 challenge record");
            }
        });
    }
}

/// Adds the record's value to its name's challenge record on the primary.
pub(super) async fn add(update: &DnsUpdate, record: &Record) -> Result<(), AcmeError> {
    let (zone, owner) = names(update, &record.name)?;
    let message = update_message::append(
        txt_set(&owner, &record.value, RECORD_TTL),
        zone,
        false,
        false,
    );
    signed_update(update, &record.signer, message).await
}

/// Removes `value` from `name`'s challenge record.
async fn remove(
    update: &DnsUpdate,
    signer: &TSigner,
    name: &str,
    value: &str,
) -> Result<(), AcmeError> {
    let (zone, record) = names(update, name)?;
    let message = update_message::delete_by_rdata(txt_set(&record, value, 0), zone, false);
    signed_update(update, signer, message).await
}

/// Sends an update signed with the zone's key; the answer's signature is checked too (a
/// forged "NOERROR" would have the CA validate a record that is not there).
async fn signed_update(
    update: &DnsUpdate,
    signer: &TSigner,
    mut message: Message,
) -> Result<(), AcmeError> {
    let now = u32::try_from(crate::sys::clock::unix_now()).unwrap_or(u32::MAX);
    let server = update.server;
    let mut verifier = message
        .finalize(signer, now)
        .map_err(|e| dns_err(server, e.to_string()))?
        .ok_or_else(|| dns_err(server, "the TSIG signer gave no verifier"))?;
    let bytes = message
        .to_vec()
        .map_err(|e| dns_err(server, e.to_string()))?;
    let answer = exchange(server, &bytes).await?;
    let response = verifier(&answer).map_err(|e| {
        // A server that does not know the key (or finds our MAC wrong) answers unsigned:
        // say what it answered, still refusing to believe it.
        match Message::from_vec(&answer) {
            Ok(m) if m.response_code() != ResponseCode::NoError => AcmeError::DnsRefused {
                server,
                message: format!(
                    "{} (the TSIG key's name or secret is not the server's)",
                    m.response_code()
                ),
                nothing_added: nothing_added(m.response_code()),
            },
            _ => dns_err(server, format!("the answer's TSIG does not verify: {e}")),
        }
    })?;
    match response.response_code() {
        ResponseCode::NoError => Ok(()),
        code => Err(AcmeError::DnsRefused {
            server,
            message: code.to_string(),
            nothing_added: nothing_added(code),
        }),
    }
}

/// Whether a server answering `code` to an update changed nothing for sure (RFC 2136 §3: it
/// refuses before applying any of it); a SERVFAIL from a forwarding secondary may not mean that.
fn nothing_added(code: ResponseCode) -> bool {
    matches!(
        code,
        ResponseCode::Refused
            | ResponseCode::NotAuth
            | ResponseCode::FormErr
            | ResponseCode::NotImp
    )
}

/// Waits until every server the CA may ask answers the record's name TXT with its value, at
/// most `propagation_timeout`: each NS server (any one of its addresses answering will do), or
/// each of `nameservers`.
pub(super) async fn await_propagation(
    update: &DnsUpdate,
    groups: &[Vec<SocketAddr>],
    r: &Record,
) -> Result<(), AcmeError> {
    let (_, owner) = names(update, &r.name)?;
    let deadline = tokio::time::Instant::now() + update.propagation_timeout;
    let mut waiting = groups.to_vec();
    loop {
        let mut still = Vec::new();
        for group in waiting {
            let mut seen = false;
            for server in &group {
                let asked = tokio::time::timeout_at(deadline, has_txt(*server, &owner, &r.value));
                if matches!(asked.await, Ok(Ok(true))) {
                    seen = true;
                    break;
                }
            }
            if !seen {
                still.push(group);
            }
        }
        if still.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() + PROPAGATION_POLL > deadline {
            let list: Vec<String> = still.iter().flatten().map(ToString::to_string).collect();
            return Err(dns_err(
                update.server,
                format!(
                    "{owner} TXT not seen on {} within {}s",
                    list.join(", "),
                    update.propagation_timeout.as_secs()
                ),
            ));
        }
        tokio::time::sleep(PROPAGATION_POLL).await;
        waiting = still;
    }
}

/// Where a record must be seen, once per order: each of `nameservers`, or the primary and each
/// of the zone's NS servers by its addresses on port 53 (asked of the primary for names in the
/// zone, else of the system's resolver; an NS name with no address is said and passed over).
pub(super) async fn servers(update: &DnsUpdate) -> Result<Vec<Vec<SocketAddr>>, AcmeError> {
    if !update.nameservers.is_empty() {
        return Ok(update.nameservers.iter().map(|a| vec![*a]).collect());
    }
    let zone = Name::from_ascii(format!("{}.", update.zone))
        .map_err(|e| dns_err(update.server, e.to_string()))?;
    authoritative_servers(update, &zone).await
}

async fn authoritative_servers(
    update: &DnsUpdate,
    zone: &Name,
) -> Result<Vec<Vec<SocketAddr>>, AcmeError> {
    let mut groups = vec![vec![update.server]];
    let ns = query(update.server, zone, RecordType::NS).await?;
    for record in ns.answers() {
        let RData::NS(host) = record.data() else {
            continue;
        };
        let mut addrs = addresses_from(update.server, &host.0).await;
        if addrs.is_empty() {
            addrs = system_addresses(&host.0).await;
        }
        if addrs.is_empty() {
            tracing::warn!(zone = %zone, ns = %host.0, "an NS server of the zone has no address; the DNS-01 record is not looked for there");
            continue;
        }
        if !groups.iter().any(|g| g.iter().any(|a| addrs.contains(a))) {
            groups.push(addrs);
        }
    }
    Ok(groups)
}

/// `host`'s addresses (port 53) as `server` answers them itself.
async fn addresses_from(server: SocketAddr, host: &Name) -> Vec<SocketAddr> {
    let mut addrs = Vec::new();
    for kind in [RecordType::A, RecordType::AAAA] {
        let Ok(answer) = query(server, host, kind).await else {
            continue;
        };
        for r in answer.answers() {
            let ip = match r.data() {
                RData::A(a) => std::net::IpAddr::V4(a.0),
                RData::AAAA(a) => std::net::IpAddr::V6(a.0),
                _ => continue,
            };
            addrs.push(SocketAddr::new(ip, 53));
        }
    }
    addrs
}

/// `host`'s addresses (port 53) through the system's resolver.
async fn system_addresses(host: &Name) -> Vec<SocketAddr> {
    let lookup = tokio::net::lookup_host((host.to_ascii().trim_end_matches('.').to_string(), 53));
    match tokio::time::timeout(EXCHANGE_TIMEOUT, lookup).await {
        Ok(Ok(addrs)) => addrs.collect(),
        _ => Vec::new(),
    }
}

/// Whether `server` answers `record` TXT with `value` among its strings.
async fn has_txt(server: SocketAddr, record: &Name, value: &str) -> Result<bool, AcmeError> {
    let answer = query(server, record, RecordType::TXT).await?;
    Ok(answer.answers().iter().any(|r| match r.data() {
        RData::TXT(t) => t.txt_data().iter().any(|s| &**s == value.as_bytes()),
        _ => false,
    }))
}

/// One non-recursive query: an authoritative server's own answer.
async fn query(server: SocketAddr, name: &Name, kind: RecordType) -> Result<Message, AcmeError> {
    let mut message = Message::new();
    let mut random = [0u8; 2];
    let _ = aws_lc_rs::rand::fill(&mut random);
    message
        .set_id(u16::from_be_bytes(random))
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(false)
        .add_query(Query::query(name.clone(), kind));
    let bytes = message
        .to_vec()
        .map_err(|e| dns_err(server, e.to_string()))?;
    let answer = exchange(server, &bytes).await?;
    let response = Message::from_vec(&answer).map_err(|e| dns_err(server, e.to_string()))?;
    if response.id() != message.id() {
        return Err(dns_err(server, "an answer to another query"));
    }
    Ok(response)
}

/// One message over TCP (RFC 1035 §4.2.2: a two-byte length, then the message), the answer at
/// most 64 KiB by that length.
async fn exchange(server: SocketAddr, bytes: &[u8]) -> Result<Vec<u8>, AcmeError> {
    let fail = |e: std::io::Error| dns_err(server, e.to_string());
    let go = async {
        let mut s = tokio::net::TcpStream::connect(server).await.map_err(fail)?;
        let len = u16::try_from(bytes.len()).map_err(|_| dns_err(server, "message too long"))?;
        let mut out = len.to_be_bytes().to_vec();
        out.extend_from_slice(bytes);
        s.write_all(&out).await.map_err(fail)?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len).await.map_err(fail)?;
        let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
        s.read_exact(&mut answer).await.map_err(fail)?;
        Ok(answer)
    };
    tokio::time::timeout(EXCHANGE_TIMEOUT, go)
        .await
        .map_err(|_| {
            dns_err(
                server,
                format!("no answer within {}s", EXCHANGE_TIMEOUT.as_secs()),
            )
        })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bind_key_file_gives_name_algorithm_and_secret() {
        let text = "key \"shuck-acme\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VjcmV0c2VjcmV0c2VjcmV0\";\n};\n";
        assert_eq!(
            parse_key(text),
            Some(("shuck-acme", "hmac-sha256", "c2VjcmV0c2VjcmV0c2VjcmV0"))
        );
        assert_eq!(parse_key("key \"k\" { secret \"x\"; };"), None);
        // ddns-confgen's comments name the key before the clause; a quoted algorithm.
        let text = "# Use the following in named.conf: key \"k\" ...\nkey \"k\" {\n\talgorithm \"hmac-sha512\";\n\tsecret \"c2VjcmV0\";\n};\n";
        assert_eq!(parse_key(text), Some(("k", "hmac-sha512", "c2VjcmV0")));
        assert_eq!(parse_key("nothing"), None);
    }

    #[test]
    fn a_wildcard_shares_its_base_names_record() {
        assert_eq!(record_name("*.example.com"), "_acme-challenge.example.com.");
        assert_eq!(
            record_name("www.example.com"),
            "_acme-challenge.www.example.com."
        );
    }
}
