//! `log_format = "json"`: one JSON object per line, with `timestamp`, `level` and `message`
//! first and then the event's fields, typed as log collectors want them: numbers as numbers,
//! booleans as booleans, text as strings, a missing value as `null` (the engine writes a missing
//! value as `-`, which the compact format shows as it is), and an address with a port (`client`,
//! `balancer`, `listen`, `backend_source`, `address`) as two fields, `client` and `client_port`. A field the line declares
//! and does not record (a value it has not got) is `null` too. Fatal errors are written
//! the same way (`fatal`), so the last line a supervisor sees parses too.

use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The engine's mark for a value a line has not got (`Dash`).
const MISSING: &str = "-";

/// Fields that hold `ip:port`: split into the address and `<name>_port`.
const ADDRESSES: [&str; 5] = ["client", "balancer", "address", "listen", "backend_source"];

/// The JSON line formatter.
pub(crate) struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        // A field the line declares but did not record (`Option::None`) is null.
        for field in event.metadata().fields() {
            if field.name() != "message" && !fields.seen.contains(&field.name()) {
                fields.raw(field.name(), &"null");
            }
        }
        let level = event.metadata().level().as_str();
        writer.write_str(&line(level, fields.message.as_deref(), &fields.rest))?;
        writer.write_char('\n')
    }
}

/// One line: the head, then `rest` (`,"key":value` pairs already encoded).
fn line(level: &str, message: Option<&str>, rest: &str) -> String {
    let now = humantime::format_rfc3339_micros(std::time::SystemTime::now());
    let mut out = String::with_capacity(96 + rest.len());
    let _ = write!(out, "{{\"timestamp\":\"{now}\",\"level\":\"{level}\"");
    if let Some(m) = message {
        let _ = write!(out, ",\"message\":{}", quoted(m));
    }
    out.push_str(rest);
    out.push('}');
    out
}

/// Whether errors that end the process are written as JSON lines (`log_format = "json"` was
/// chosen, by the file or `--log-format`).
static FATAL_AS_JSON: AtomicBool = AtomicBool::new(false);

pub(crate) fn fatal_as_json(yes: bool) {
    FATAL_AS_JSON.store(yes, Ordering::Relaxed);
}

/// The error that ends the process, on standard error: a JSON line when JSON was chosen, else
/// `shuck: error: …`.
pub(crate) fn fatal(message: &str) {
    if FATAL_AS_JSON.load(Ordering::Relaxed) {
        eprintln!("{}", line("ERROR", Some(message), ""));
    } else {
        eprintln!("shuck: error: {message}");
    }
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "null".into())
}

/// An event's fields as JSON.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    rest: String,
    /// The fields recorded so far.
    seen: Vec<&'static str>,
}

impl Fields {
    fn raw(&mut self, name: &str, value: &dyn fmt::Display) {
        let _ = write!(self.rest, ",{}:{value}", quoted(name));
    }

    fn saw(&mut self, field: &Field) {
        self.seen.push(field.name());
    }

    fn text(&mut self, name: &str, text: &str) {
        if text == MISSING {
            return self.raw(name, &"null");
        }
        if ADDRESSES.contains(&name) {
            if let Ok(addr) = text.parse::<std::net::SocketAddr>() {
                self.raw(name, &quoted(&addr.ip().to_string()));
                return self.raw(&format!("{name}_port"), &addr.port());
            }
        }
        self.raw(name, &quoted(text));
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.saw(field);
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = Some(text);
        } else {
            self.text(field.name(), &text);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.saw(field);
        if field.name() == "message" {
            self.message = Some(value.to_string());
        } else {
            self.text(field.name(), value);
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.saw(field);
        self.raw(field.name(), &value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.saw(field);
        self.raw(field.name(), &value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.saw(field);
        self.raw(field.name(), &value);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.saw(field);
        if value.is_finite() {
            self.raw(field.name(), &value);
        } else {
            self.raw(field.name(), &"null");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_typed_and_addresses_split() {
        let mut f = Fields::default();
        f.text("client", "192.0.2.7:40000");
        f.text("balancer", "-");
        f.text("sni", "a.test");
        f.raw("up", &12u64);
        f.text("route", "web \"x\"");
        let line = line("WARN", Some("closed"), &f.rest);
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(v["client"], "192.0.2.7");
        assert_eq!(v["client_port"], 40000);
        assert!(v["balancer"].is_null());
        assert_eq!(v["sni"], "a.test");
        assert_eq!(v["up"], 12);
        assert_eq!(v["route"], "web \"x\"");
        assert_eq!(v["level"], "WARN");
        assert_eq!(v["message"], "closed");
    }
}
