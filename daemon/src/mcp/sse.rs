//! The older HTTP+SSE transport (protocol revision 2024-11-05), which rmcp no longer ships and
//! many deployed servers still speak: `GET` the SSE endpoint, whose first `endpoint` event names
//! the URL to `POST` messages to; the server's messages arrive as `message` events.
//!
//! Invariant: the one place outside `llm/` that names reqwest, and only for this transport.

use eventsource_stream::Eventsource;
use futures::StreamExt;
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::mpsc;

/// A failure of the SSE transport.
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    /// The event stream could not be opened (bad URL or header, refused, unreachable).
    #[error("{0}")]
    Connect(String),
    /// The stream opened but never named where to post messages.
    #[error("{0}")]
    NoEndpoint(String),
    /// A request failed or was refused.
    #[error("{0}")]
    Http(String),
}

/// The transport: messages are posted; replies come from the event stream's reader task.
pub struct SseTransport {
    client: reqwest::Client,
    post_url: reqwest::Url,
    headers: reqwest::header::HeaderMap,
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for SseTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Configured headers as a header map (the HTTP transports share it); a name or value HTTP
/// does not allow is an error naming it.
pub(super) fn header_map(
    headers: &BTreeMap<String, String>,
) -> Result<reqwest::header::HeaderMap, String> {
    let mut map = reqwest::header::HeaderMap::new();
    for (k, v) in headers {
        let name = reqwest::header::HeaderName::try_from(k.as_str())
            .map_err(|e| format!("header {k}: {e}"))?;
        let value = reqwest::header::HeaderValue::try_from(v.as_str())
            .map_err(|e| format!("header {k}: {e}"))?;
        map.insert(name, value);
    }
    Ok(map)
}

/// Opens the event stream and waits for the `endpoint` event (at most 30 s).
pub async fn connect(
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<SseTransport, SseError> {
    let headers = header_map(headers).map_err(SseError::Connect)?;
    let base = reqwest::Url::parse(url).map_err(|e| SseError::Connect(format!("{url}: {e}")))?;
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| SseError::Connect(e.to_string()))?;
    let response = client
        .get(base.clone())
        .headers(headers.clone())
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .send()
        .await
        .map_err(|e| SseError::Connect(format!("{url}: {e}")))?;
    if !response.status().is_success() {
        return Err(SseError::Connect(format!(
            "{url}: HTTP {}",
            response.status()
        )));
    }
    let mut events = response.bytes_stream().eventsource();
    let endpoint = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = events.next().await {
            match event {
                Ok(e) if e.event == "endpoint" => return Some(e.data),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .ok_or_else(|| SseError::NoEndpoint(format!("{url} sent no endpoint event")))?;
    let post_url = base
        .join(endpoint.trim())
        .map_err(|e| SseError::NoEndpoint(format!("endpoint {endpoint:?}: {e}")))?;
    let (tx, incoming) = mpsc::channel(64);
    let reader = tokio::spawn(async move {
        while let Some(Ok(event)) = events.next().await {
            if event.event != "message" && !event.event.is_empty() {
                continue;
            }
            match serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(&event.data) {
                Ok(message) => {
                    if tx.send(message).await.is_err() {
                        return;
                    }
                }
                Err(e) => tracing::warn!(target: "mcp", "unreadable SSE message dropped: {e}"),
            }
        }
    });
    Ok(SseTransport {
        client,
        post_url,
        headers,
        incoming,
        reader,
    })
}

impl rmcp::transport::Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let request = self
            .client
            .post(self.post_url.clone())
            .headers(self.headers.clone())
            .json(&item);
        async move {
            let response = request
                .send()
                .await
                .map_err(|e| SseError::Http(e.to_string()))?;
            if response.status().is_success() {
                Ok(())
            } else {
                Err(SseError::Http(format!("HTTP {}", response.status())))
            }
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        Ok(())
    }
}
