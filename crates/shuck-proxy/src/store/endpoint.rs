//! Where the store's connections go: one server (`redis://`, `rediss://`, a Unix socket), or the
//! master that Redis Sentinel names (`redis+sentinel://HOST:PORT,HOST:PORT/MASTER[/DB]`, or
//! `rediss+sentinel://` for TLS to the sentinels and the master). With Sentinel each connection
//! asks the sentinels in turn which server is the master, connects there, and checks with `ROLE`
//! that it is one; a failover ends the connection (its errors, or `READONLY` from a demoted
//! master) and the next asks again.
//!
//! Over TLS, the master's certificate is verified against a name the URL fixes, never against
//! the address a sentinel answered: the master name (`…/mymaster`), or `?tls_name=NAME`. A
//! sentinel that lies (or one an attacker stands up) could otherwise send the credentials to
//! any server holding a certificate for the name it gives.

use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

/// How long one sentinel may take to name the master.
const SENTINEL_TIMEOUT: Duration = Duration::from_millis(300);

#[derive(Clone, Debug)]
pub(super) enum Endpoint {
    Direct(ConnectionInfo),
    /// Redis Cluster: the seed nodes, and the settings of every node's connections.
    Cluster {
        seeds: Vec<(String, u16)>,
        template: ConnectionInfo,
    },
    Sentinel {
        sentinels: Vec<(String, u16)>,
        master: String,
        /// The master's settings (credentials, database, TLS), its address filled in when known.
        template: ConnectionInfo,
        /// Over TLS: the name the master's certificate must hold.
        tls_name: Option<String>,
    },
}

impl Endpoint {
    /// Reads `url`: a redis crate URL, or a Sentinel one (see the module's description).
    pub(super) fn parse(url: &str) -> Result<Endpoint, String> {
        if let Some((scheme, rest)) = url.split_once("+cluster://") {
            return Self::parse_cluster(scheme, rest);
        }
        let Some((scheme, rest)) = url.split_once("+sentinel://") else {
            return url
                .into_connection_info()
                .map(Endpoint::Direct)
                .map_err(|e| e.to_string());
        };
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((auth, rest)) => (format!("{auth}@"), rest),
            None => (String::new(), rest),
        };
        let (hosts, path) = rest
            .split_once('/')
            .ok_or("a Sentinel URL ends with /MASTER_NAME")?;
        let (path, tls_name) = match path.split_once("?tls_name=") {
            Some((path, name)) if !name.is_empty() => (path, Some(name.to_string())),
            Some(_) => return Err("tls_name= names the master's certificate name".into()),
            None => (path, None),
        };
        let (master, db) = match path.split_once('/') {
            Some((m, db)) => (m, format!("/{db}")),
            None => (path, String::new()),
        };
        if master.is_empty() {
            return Err("a Sentinel URL ends with /MASTER_NAME".into());
        }
        let sentinels = host_list(hosts, "a sentinel")?;
        let template = format!("{scheme}://{auth}sentinel-master{db}")
            .into_connection_info()
            .map_err(|e| e.to_string())?;
        let tls = matches!(template.addr(), ConnectionAddr::TcpTls { .. });
        if tls_name.is_some() && !tls {
            return Err("tls_name is for rediss+sentinel:// (TLS to the master)".into());
        }
        Ok(Endpoint::Sentinel {
            sentinels,
            master: master.to_string(),
            tls_name: tls.then(|| tls_name.unwrap_or_else(|| master.to_string())),
            template,
        })
    }

    /// `redis+cluster://[AUTH@]HOST:PORT,HOST:PORT[/]`: the seeds (Redis Cluster has one
    /// database).
    fn parse_cluster(scheme: &str, rest: &str) -> Result<Endpoint, String> {
        let (auth, hosts) = match rest.rsplit_once('@') {
            Some((auth, hosts)) => (format!("{auth}@"), hosts),
            None => (String::new(), rest),
        };
        let hosts = hosts.trim_end_matches('/');
        if hosts.contains('/') {
            return Err("a cluster URL names nodes only: Redis Cluster has no databases".into());
        }
        let seeds = host_list(hosts, "a cluster node")?;
        let template = format!("{scheme}://{auth}cluster-node")
            .into_connection_info()
            .map_err(|e| e.to_string())?;
        Ok(Endpoint::Cluster { seeds, template })
    }

    /// Reads `url` and refuses what shuck does not do: `#insecure` TLS, RESP3.
    pub(super) fn parse_supported(url: &str) -> Result<Endpoint, String> {
        let endpoint = Self::parse(url)?;
        let info = endpoint.info();
        if matches!(info.addr(), ConnectionAddr::TcpTls { insecure: true, .. }) {
            return Err(
                "#insecure is not supported: shuck always verifies the store's certificate".into(),
            );
        }
        // The reply bound reads RESP2 framing; RESP3 brings maps and pushes shuck never needs.
        if info.redis_settings().protocol() != redis::ProtocolVersion::RESP2 {
            return Err("protocol=resp3 is not supported: shuck speaks RESP2 to the store".into());
        }
        Ok(endpoint)
    }

    /// The settings every connection uses (credentials, database, protocol).
    pub(super) fn info(&self) -> &ConnectionInfo {
        match self {
            Endpoint::Direct(info) => info,
            Endpoint::Sentinel { template, .. } | Endpoint::Cluster { template, .. } => template,
        }
    }

    /// The server to connect to now: the one server, or the master a sentinel names (the first
    /// that answers, in the URL's order), with the name its certificate must hold when that is
    /// not the address's own.
    pub(super) async fn resolve(&self) -> Result<(ConnectionInfo, Option<String>), String> {
        let Endpoint::Sentinel {
            sentinels,
            master,
            template,
            tls_name,
        } = self
        else {
            return Ok((self.info().clone(), None));
        };
        let tls = matches!(template.addr(), ConnectionAddr::TcpTls { .. });
        let mut errors = Vec::new();
        for (host, port) in sentinels {
            match tokio::time::timeout(SENTINEL_TIMEOUT, ask(host, *port, master, tls)).await {
                Ok(Ok((ip, port))) => return Ok((at(template, &ip, port), tls_name.clone())),
                Ok(Err(e)) => errors.push(format!("sentinel {host}:{port}: {e}")),
                Err(_) => errors.push(format!(
                    "sentinel {host}:{port}: no answer within {SENTINEL_TIMEOUT:?}"
                )),
            }
        }
        Err(errors.join("; "))
    }

    /// Whether connections must check they reached a master (`ROLE`).
    pub(super) fn needs_master_check(&self) -> bool {
        matches!(self, Endpoint::Sentinel { .. })
    }
}

/// `template`'s settings for the server at `host:port` (over TLS when `template` is).
pub(super) fn at(template: &ConnectionInfo, host: &str, port: u16) -> ConnectionInfo {
    let addr = match template.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: host.to_string(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host.to_string(), port),
    };
    template.clone().set_addr(addr)
}

/// `HOST:PORT,HOST:PORT` (IPv6 in brackets), each `what`.
fn host_list(hosts: &str, what: &str) -> Result<Vec<(String, u16)>, String> {
    hosts
        .split(',')
        .map(|h| {
            let bad = || format!("{h:?}: {what} is HOST:PORT");
            let (host, port) = h.rsplit_once(':').ok_or_else(bad)?;
            let port = port.parse::<u16>().map_err(|_| bad())?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            Ok((host.to_string(), port))
        })
        .collect()
}

/// `SENTINEL get-master-addr-by-name`, on a connection of its own (bounded as every other);
/// over TLS (the sentinel's certificate verified against its name in the URL) when `tls`.
async fn ask(host: &str, port: u16, master: &str, tls: bool) -> Result<(String, u16), String> {
    let addr = if tls {
        ConnectionAddr::TcpTls {
            host: host.to_string(),
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host.to_string(), port)
    };
    let info = addr.into_connection_info().map_err(|e| e.to_string())?;
    let (mut conn, driver) = super::transport::open(&info, None, std::sync::Arc::default()).await?;
    let task = tokio::spawn(driver);
    let answer: Result<Option<(String, String)>, String> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(master)
        .query_async(&mut conn)
        .await
        .map_err(|e| e.to_string());
    task.abort();
    let (ip, port) = answer?.ok_or_else(|| format!("knows no master named {master:?}"))?;
    let port = port
        .parse::<u16>()
        .map_err(|_| format!("named port {port:?}"))?;
    Ok((ip, port))
}

/// Whether the server behind `conn` is a master (`ROLE`'s first element).
pub(super) async fn is_master(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<bool, String> {
    let role: redis::Value = redis::cmd("ROLE")
        .query_async(conn)
        .await
        .map_err(|e| e.to_string())?;
    Ok(match role {
        redis::Value::Array(items) => matches!(
            items.first(),
            Some(redis::Value::BulkString(b)) if b == b"master"
        ),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls_name_the_sentinels_the_master_and_its_settings() {
        let e = Endpoint::parse("redis+sentinel://:pw@10.0.0.1:26379,[::1]:26380/mymaster/2")
            .expect("parses");
        let Endpoint::Sentinel {
            sentinels,
            master,
            template,
            tls_name,
        } = &e
        else {
            panic!("{e:?}");
        };
        assert_eq!(tls_name, &None, "plain TCP: no certificate to check");
        assert_eq!(
            sentinels,
            &[("10.0.0.1".to_string(), 26379), ("::1".to_string(), 26380)]
        );
        assert_eq!(master, "mymaster");
        assert_eq!(template.redis_settings().db(), 2);
        assert_eq!(template.redis_settings().password(), Some("pw"));
        assert!(Endpoint::parse("redis+sentinel://10.0.0.1:26379/").is_err());
        assert!(Endpoint::parse("redis+sentinel://10.0.0.1/m").is_err());
        assert!(matches!(
            Endpoint::parse("redis://127.0.0.1:6379"),
            Ok(Endpoint::Direct(_))
        ));
        let Ok(Endpoint::Cluster { seeds, .. }) =
            Endpoint::parse("redis+cluster://127.0.0.1:7000,127.0.0.1:7001")
        else {
            panic!("a cluster URL");
        };
        assert_eq!(seeds.len(), 2);
        assert!(Endpoint::parse("redis+cluster://127.0.0.1:7000/2").is_err());
    }

    #[test]
    fn over_tls_the_masters_certificate_must_hold_a_name_the_url_fixes() {
        let name = |url: &str| match Endpoint::parse(url) {
            Ok(Endpoint::Sentinel { tls_name, .. }) => tls_name,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            name("rediss+sentinel://:pw@10.0.0.1:26379/mymaster"),
            Some("mymaster".into())
        );
        assert_eq!(
            name("rediss+sentinel://10.0.0.1:26379/mymaster/2?tls_name=redis.internal"),
            Some("redis.internal".into())
        );
        assert!(Endpoint::parse("redis+sentinel://10.0.0.1:26379/m?tls_name=x").is_err());
        assert!(Endpoint::parse("rediss+sentinel://10.0.0.1:26379/m?tls_name=").is_err());
    }
}
