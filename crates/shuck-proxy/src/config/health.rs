//! `health_check`: active checks of a set of backends (the frontend's own, or a route's), run
//! from one place per process (`backend::health`).

use std::time::Duration;

use serde::Deserialize;

use super::{duration_or, key_err, KeyError};

/// As written: `health_check = { interval = "2s", timeout = "1s", rise = 2, fall = 3,
/// http = "GET /healthz", expect_status = 200, host = "app.internal" }`.
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
}

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
        })
    }
}
