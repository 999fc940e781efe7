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

/// The TSIG key of a BIND key file (`key "name" { algorithm hmac-sha256; secret "…"; };`, as
/// `tsig-keygen` writes it). The error never shows the secret.
pub(super) fn read_key(path: &Path) -> Result<TSigner, AcmeError> {
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

/// The key's name, algorithm and secret, from the first `key` clause of a BIND file.
fn parse_key(text: &str) -> Option<(&str, &str, &str)> {
    let text = text.trim_start();
    let rest = text.split_once("key")?.1.trim_start();
    let rest = rest.strip_prefix('"')?;
    let (name, rest) = rest.split_once('"')?;
    let body = rest.split_once('{')?.1.split_once("};")?.0;
    let mut algorithm = None;
    let mut secret = None;
    for statement in body.split(';') {
        let statement = statement.trim();
        if let Some(a) = statement.strip_prefix("algorithm") {
            algorithm = Some(a.trim());
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

/// Adds `value` to `name`'s challenge record on the primary.
pub(super) async fn add(update: &DnsUpdate, name: &str, value: &str) -> Result<(), AcmeError> {
    let (zone, record) = names(update, name)?;
    let message = update_message::append(txt_set(&record, value, RECORD_TTL), zone, false, false);
    signed_update(update, message).await
}

/// Removes `value` from `name`'s challenge record (other values, another order's, stay).
pub(super) async fn remove(update: &DnsUpdate, name: &str, value: &str) -> Result<(), AcmeError> {
    let (zone, record) = names(update, name)?;
    let message = update_message::delete_by_rdata(txt_set(&record, value, 0), zone, false);
    signed_update(update, message).await
}

/// Sends an update signed with the zone's key; the answer's signature is checked too (a
/// forged "NOERROR" would have the CA validate a record that is not there).
async fn signed_update(update: &DnsUpdate, mut message: Message) -> Result<(), AcmeError> {
    let signer = read_key(&update.tsig_key_file)?;
    let now = u32::try_from(crate::sys::clock::unix_now()).unwrap_or(u32::MAX);
    let server = update.server;
    let mut verifier = message
        .finalize(&signer, now)
        .map_err(|e| dns_err(server, e.to_string()))?
        .ok_or_else(|| dns_err(server, "the TSIG signer gave no verifier"))?;
    let bytes = message
        .to_vec()
        .map_err(|e| dns_err(server, e.to_string()))?;
    let answer = exchange(server, &bytes).await?;
    let response = verifier(&answer)
        .map_err(|e| dns_err(server, format!("the answer's TSIG does not verify: {e}")))?;
    match response.response_code() {
        ResponseCode::NoError => Ok(()),
        code => Err(dns_err(server, format!("the update was refused: {code}"))),
    }
}

/// Waits until every server the CA may ask answers `name`'s TXT record with `value`, at most
/// `propagation_timeout`.
pub(super) async fn await_propagation(
    update: &DnsUpdate,
    name: &str,
    value: &str,
) -> Result<(), AcmeError> {
    let (zone, record) = names(update, name)?;
    let servers = match update.nameservers.as_slice() {
        [] => authoritative_servers(update, &zone).await?,
        listed => listed.to_vec(),
    };
    let deadline = tokio::time::Instant::now() + update.propagation_timeout;
    let mut waiting = servers;
    loop {
        let mut still = Vec::new();
        for server in waiting {
            if !matches!(has_txt(server, &record, value).await, Ok(true)) {
                still.push(server);
            }
        }
        if still.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() + PROPAGATION_POLL > deadline {
            let list: Vec<String> = still.iter().map(ToString::to_string).collect();
            return Err(dns_err(
                update.server,
                format!(
                    "{record} TXT not seen on {} within {}s",
                    list.join(", "),
                    update.propagation_timeout.as_secs()
                ),
            ));
        }
        tokio::time::sleep(PROPAGATION_POLL).await;
        waiting = still;
    }
}

/// The zone's NS servers, their addresses asked of the primary (in-zone names) on port 53;
/// the primary itself always.
async fn authoritative_servers(
    update: &DnsUpdate,
    zone: &Name,
) -> Result<Vec<SocketAddr>, AcmeError> {
    let mut servers = vec![update.server];
    let ns = query(update.server, zone, RecordType::NS).await?;
    for record in ns.answers() {
        let RData::NS(host) = record.data() else {
            continue;
        };
        for kind in [RecordType::A, RecordType::AAAA] {
            let Ok(answer) = query(update.server, &host.0, kind).await else {
                continue;
            };
            for r in answer.answers() {
                let ip = match r.data() {
                    RData::A(a) => std::net::IpAddr::V4(a.0),
                    RData::AAAA(a) => std::net::IpAddr::V6(a.0),
                    _ => continue,
                };
                let addr = SocketAddr::new(ip, 53);
                if !servers.contains(&addr) {
                    servers.push(addr);
                }
            }
        }
    }
    Ok(servers)
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
