//! Keys in PKCS#11 tokens, read at each scrape from the signer pools' shared stats
//! (`tls::pkcs11`): signatures by key and result, the signatures waiting, and how long each
//! took from the ask to the answer.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::tls::pkcs11::{all_stats, SignResult};

#[derive(Debug)]
pub(super) struct Pkcs11Collector;

impl Collector for Pkcs11Collector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let keys = all_stats();
        if keys.is_empty() {
            return Ok(());
        }
        let mut signatures = encoder.encode_descriptor(
            "pkcs11_signatures",
            "Signatures asked of a key in a PKCS#11 token, by key (its URI without the PIN) and result: ok, failed (the token refused or did not answer), queue_full (refused at once: pkcs11_signers' queue was full), timeout (no answer within 5 s)",
            None,
            MetricType::Counter,
        )?;
        for k in &keys {
            for r in SignResult::ALL {
                let labels = [("key", k.key.as_str()), ("result", r.label())];
                let n = k.results[r as usize].load(std::sync::atomic::Ordering::Relaxed);
                ConstCounter::new(n).encode(signatures.encode_family(&labels)?)?;
            }
        }
        let mut waiting = encoder.encode_descriptor(
            "pkcs11_queue_depth",
            "Signatures asked of a token key and not answered yet",
            None,
            MetricType::Gauge,
        )?;
        for k in &keys {
            let labels = [("key", k.key.as_str())];
            let n = k.waiting.load(std::sync::atomic::Ordering::Relaxed);
            ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX))
                .encode(waiting.encode_family(&labels)?)?;
        }
        let mut latency = encoder.encode_descriptor(
            "pkcs11_sign_seconds",
            "Time from asking a token key for a signature to its answer, signatures made",
            None,
            MetricType::Histogram,
        )?;
        for k in &keys {
            let labels = [("key", k.key.as_str())];
            k.latency.encode(latency.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
