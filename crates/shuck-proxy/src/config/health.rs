//! `health_check`: active checks of a set of backends (the frontend's own, or a route's), run
//! from one place per process (`backend::health`).

use std::time::Duration;

use serde::Deserialize;

use super::{duration_or, key_err, KeyError};

/// As written: `health_check = { interval = "2s", timeout = "1s", rise = 2, fall = 3,
/// http = "GET /healthz", expect_status = 200, host = "app.internal", observe = "layer4",
/// error_limit = 10 }`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealthCheck {
    pub interval: Option<String>,
    pub timeout: Option<String>,
    pub rise: Option<u32>,
    pub fall: Option<u32>,
    pub http: Option<String>,
    pub expect_status: Option<u16>,
    pub host: Option<String>,
    pub observe: Option<String>,
    pub error_limit: Option<u32>,
}

/// `error_limit` when `observe` is set without it: HAProxy's default.
const DEFAULT_ERROR_LIMIT: u32 = 10;

/// A validated check.
#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq, Hash)]
pub struct HealthCheck {
    #[serde(serialize_with = "super::ser::duration")]
    pub interval: Duration,
    #[serde(serialize_with = "super::ser::duration")]
    pub timeout: Duration,
    /// Good checks in a row that bring a down backend back.
    pub rise: u32,
    /// Failed checks in a row that take an up backend out.
    pub fall: u32,
    /// An HTTP/1.1 request (method, path) whose answer must carry `expect_status`; `None`: a
    /// TCP connect is the check.
    pub http: Option<(String, String)>,
    pub expect_status: u16,
    /// The request's Host header (default: the backend's address as written).
    pub host: Option<String>,
    /// With `observe = "layer4"`: failures in a row on real traffic (failed connects, resets
    /// before the backend's first byte) that take an up backend out until `rise` good checks
    /// bring it back, as HAProxy's `observe layer4` with `on-error mark-down`. `None`: traffic
    /// is not observed.
    pub error_limit: Option<u32>,
}

impl RawHealthCheck {
    pub(super) fn validate(&self) -> Result<HealthCheck, KeyError> {
        let interval = duration_or(
            "health_check.interval",
            self.interval.as_deref(),
            Duration::from_secs(2),
        )?;
        let timeout = duration_or(
            "health_check.timeout",
            self.timeout.as_deref(),
            Duration::from_secs(1),
        )?;
        if interval < Duration::from_millis(100) {
            return Err(key_err("health_check.interval", "at least 100ms"));
        }
        if timeout.is_zero() || timeout > interval {
            return Err(key_err(
                "health_check.timeout",
                "more than 0s and at most the interval",
            ));
        }
        let rise = self.rise.unwrap_or(2);
        let fall = self.fall.unwrap_or(3);
        for (key, n) in [("health_check.rise", rise), ("health_check.fall", fall)] {
            if !(1..=100).contains(&n) {
                return Err(key_err(key, format!("{n} is not in 1..=100")));
            }
        }
        let http = match &self.http {
            None => None,
            Some(line) => {
                let (method, path) = line.split_once(' ').unwrap_or(("GET", line.as_str()));
                let ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_graphic());
                if !ok(method) || !path.starts_with('/') || !ok(path) {
                    return Err(key_err(
                        "health_check.http",
                        format!("{line:?} is not like \"GET /healthz\""),
                    ));
                }
                Some((method.to_string(), path.to_string()))
            }
        };
        if http.is_none() && (self.expect_status.is_some() || self.host.is_some()) {
            return Err(key_err(
                "health_check.http",
                "expect_status and host need http = \"GET /path\"",
            ));
        }
        let expect_status = self.expect_status.unwrap_or(200);
        if !(100..=599).contains(&expect_status) {
            return Err(key_err(
                "health_check.expect_status",
                format!("{expect_status} is not an HTTP status"),
            ));
        }
        if let Some(h) = &self.host {
            if h.is_empty() || !h.chars().all(|c| c.is_ascii_graphic()) {
                return Err(key_err(
                    "health_check.host",
                    format!("{h:?} is not a host name"),
                ));
            }
        }
        Ok(HealthCheck {
            interval,
            timeout,
            rise,
            fall,
            http,
            expect_status,
            host: self.host.clone(),
            error_limit: self.validate_observe()?,
        })
    }

    /// `observe` and `error_limit`: the limit when traffic is observed.
    fn validate_observe(&self) -> Result<Option<u32>, KeyError> {
        match (self.observe.as_deref(), self.error_limit) {
            (None, None) => Ok(None),
            (None, Some(_)) => Err(key_err(
                "health_check.error_limit",
                "needs observe = \"layer4\": without it real traffic is not observed",
            )),
            (Some("layer4"), n) => {
                let n = n.unwrap_or(DEFAULT_ERROR_LIMIT);
                if !(1..=100).contains(&n) {
                    return Err(key_err(
                        "health_check.error_limit",
                        format!("{n} is not in 1..=100"),
                    ));
                }
                Ok(Some(n))
            }
            (Some(other), _) => Err(key_err(
                "health_check.observe",
                format!("{other:?}: only \"layer4\" (failed connects and resets on real traffic)"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<HealthCheck, KeyError> {
        let raw: RawHealthCheck = toml::from_str(text).expect("toml");
        raw.validate()
    }

    #[test]
    fn observe_takes_layer4_and_an_error_limit() {
        assert_eq!(check("").unwrap().error_limit, None);
        let on = check("observe = \"layer4\"").unwrap();
        assert_eq!(on.error_limit, Some(DEFAULT_ERROR_LIMIT));
        let three = check("observe = \"layer4\"\nerror_limit = 3").unwrap();
        assert_eq!(three.error_limit, Some(3));
        let refused = |text: &str| check(text).unwrap_err();
        let alone = refused("error_limit = 3");
        assert_eq!(alone.key, "health_check.error_limit");
        assert!(alone.message.contains("observe"), "{}", alone.message);
        assert_eq!(refused("observe = \"layer7\"").key, "health_check.observe");
        for n in [0, 101] {
            let e = refused(&format!("observe = \"layer4\"\nerror_limit = {n}"));
            assert_eq!(e.key, "health_check.error_limit");
        }
    }
}
