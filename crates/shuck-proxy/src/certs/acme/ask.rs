//! The on-demand ask endpoint: the operator's own HTTP service that says whether a name may
//! have a certificate (`GET <ask>?domain=<name>`, 200 allows), asked before a first order and
//! before each renewal of an on-demand certificate.

use std::time::Duration;

/// One question to the endpoint.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Empty<bytes::Bytes>,
>;

/// The operator's endpoint: `GET <ask>?domain=<name>`, 200 allows. One client (and its pool of
/// kept connections) for every question of a frontend: cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct AskEndpoint {
    url: String,
    client: Client,
}

impl AskEndpoint {
    pub(crate) fn new(url: &str) -> AskEndpoint {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .pool_max_idle_per_host(4)
                .build_http();
        AskEndpoint {
            url: url.to_string(),
            client,
        }
    }

    /// Whether the endpoint allows `name`; `Err` when it did not answer (or answered 5xx).
    pub(crate) async fn allows(&self, name: &str) -> Result<bool, String> {
        let sep = if self.url.contains('?') { '&' } else { '?' };
        let url = format!("{}{sep}domain={name}", self.url);
        let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        let asked = tokio::time::timeout(ASK_TIMEOUT, self.client.get(uri)).await;
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
