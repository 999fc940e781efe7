//! `on_demand = { … }`: certificates ordered at the first handshake for a name no certificate
//! covers, when an endpoint of the operator's says the name is allowed (a platform whose
//! customers point their own names at it).

use std::time::Duration;

use serde::Deserialize;

use super::{duration_or, key_err, KeyError};

/// `on_demand` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOnDemand {
    pub ask: Option<String>,
    pub max_per_minute: Option<u32>,
    pub max_certificates: Option<usize>,
    pub hold: Option<String>,
}

/// A frontend's on-demand issuance, validated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OnDemand {
    /// `http://…`: asked `GET <ask>?domain=<name>`; 200 allows the name, anything else refuses.
    pub ask: String,
    /// Orders started per minute at most (the CA's rate limits are the fleet's to keep).
    pub max_per_minute: u32,
    /// On-demand certificates the frontend keeps at most.
    pub max_certificates: usize,
    /// How long a handshake waits for its name's certificate before it fails.
    pub hold: Duration,
}

const HOLD: Duration = Duration::from_secs(30);

impl RawOnDemand {
    pub(super) fn validate(&self) -> Result<OnDemand, KeyError> {
        let ask = self.ask.clone().ok_or_else(|| {
            key_err(
                "on_demand.ask",
                "missing: the http:// URL asked whether a name may have a certificate",
            )
        })?;
        let uri: http::Uri = ask
            .parse()
            .map_err(|e| key_err("on_demand.ask", format!("{ask:?} is not a URL: {e}")))?;
        if uri.scheme_str() != Some("http") || uri.host().is_none() || ask.contains('#') {
            return Err(key_err(
                "on_demand.ask",
                format!("{ask:?} is not an http:// URL without a #fragment (the endpoint is the operator's own, usually on 127.0.0.1)"),
            ));
        }
        let max_per_minute = self.max_per_minute.unwrap_or(10);
        if !(1..=1000).contains(&max_per_minute) {
            return Err(key_err(
                "on_demand.max_per_minute",
                format!("{max_per_minute} is not in 1..=1000"),
            ));
        }
        let max_certificates = self.max_certificates.unwrap_or(1000);
        if !(1..=100_000).contains(&max_certificates) {
            return Err(key_err(
                "on_demand.max_certificates",
                format!("{max_certificates} is not in 1..=100000"),
            ));
        }
        let hold = duration_or("on_demand.hold", self.hold.as_deref(), HOLD)?;
        if hold < Duration::from_secs(1) || hold > Duration::from_secs(300) {
            return Err(key_err("on_demand.hold", "must be from 1s to 5m"));
        }
        Ok(OnDemand {
            ask,
            max_per_minute,
            max_certificates,
            hold,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_http_and_the_limits_have_defaults() {
        let raw = RawOnDemand {
            ask: Some("http://127.0.0.1:9000/allowed".into()),
            max_per_minute: None,
            max_certificates: None,
            hold: None,
        };
        let d = raw.validate().unwrap();
        assert_eq!(
            (d.max_per_minute, d.max_certificates, d.hold),
            (10, 1000, HOLD)
        );
        for bad in [
            "https://ask.example/",
            "ftp://x/",
            "not a url",
            "/allowed",
            "http://a/allowed#x",
        ] {
            let raw = RawOnDemand {
                ask: Some(bad.into()),
                ..raw.clone()
            };
            assert_eq!(raw.validate().unwrap_err().key, "on_demand.ask", "{bad}");
        }
    }
}
