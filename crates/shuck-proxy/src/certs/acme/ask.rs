//! The on-demand ask endpoint: the operator's own HTTP service that says whether a name may
//! have a certificate (`GET <ask>?domain=<name>`, 200 allows), asked before a first order and
//! before each renewal of an on-demand certificate.

use std::time::Duration;

/// One question to the endpoint.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// The operator's endpoint: `GET <ask>?domain=<name>`, 200 allows.
#[derive(Debug, Clone)]
pub(crate) struct AskEndpoint(pub String);

impl AskEndpoint {
    /// Whether the endpoint allows `name`; `Err` when it did not answer (or answered 5xx).
    pub(crate) async fn allows(&self, name: &str) -> Result<bool, String> {
        use http_body_util::Empty;
        let sep = if self.0.contains('?') { '&' } else { '?' };
        let url = format!("{}{sep}domain={name}", self.0);
        let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Empty<bytes::Bytes>>();
        let asked = tokio::time::timeout(ASK_TIMEOUT, client.get(uri)).await;
        let response = asked
            .map_err(|_| format!("{url}: no answer within {}s", ASK_TIMEOUT.as_secs()))?
            .map_err(|e| format!("{url}: {e}"))?;
        let status = response.status();
        if status.is_server_error() {
            return Err(format!("{url}: HTTP {status}"));
        }
        Ok(status == http::StatusCode::OK)
    }
}
