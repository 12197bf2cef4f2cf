//! An Agent SDK program's in-process MCP server (`"type": "sdk"` in a turn's MCP
//! configuration), reached through the session: each JSON-RPC message goes to the program that
//! started the turn (the session's `mcp_message` event) and its answer comes back
//! (`mcp/respond`). The server lives for its turn: connected as the turn starts, dropped when
//! it ends.
//!
//! Invariant: one message at a time (a program handles each message on its own, so the
//! handshake keeps its order only by waiting for each answer), but a cancellation, which
//! must overtake the call it cancels. Every message has a deadline: a tool call the tool
//! timeout, anything else the start timeout.

use super::client::{Connection, ListedTool, McpError, Running};
use super::config::Limits;
use super::tool::{Source, tools_of};
use crate::tools::Tools;
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Carries one JSON-RPC message to the program's server `server` and brings back its answer
/// (the response to a request; for a notification, whatever it is, unread).
pub trait Relay: Send + Sync {
    /// Sends `message` to `server`.
    fn relay(
        &self,
        server: &str,
        message: Value,
    ) -> Pin<Box<dyn Future<Output = Result<Value, String>> + Send + 'static>>;
}

/// A relay's failure, as rmcp's transport reports it.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The message did not reach the program, or the program did not answer.
    #[error("{0}")]
    Relay(String),
    /// The answer was not a JSON-RPC message.
    #[error("the program's answer is not JSON-RPC: {0}")]
    Answer(String),
}

/// rmcp's transport over a [`Relay`].
pub struct RelayTransport {
    server: String,
    relay: Arc<dyn Relay>,
    /// How long a tool call's answer may take, and any other message's.
    call: Duration,
    other: Duration,
    one: Arc<tokio::sync::Mutex<()>>,
    answers: mpsc::UnboundedSender<RxJsonRpcMessage<RoleClient>>,
    incoming: mpsc::UnboundedReceiver<RxJsonRpcMessage<RoleClient>>,
}

impl RelayTransport {
    /// The transport to `server` through `relay`; a tool call's answer may take `call`, any
    /// other message's `other`.
    pub fn new(server: &str, relay: Arc<dyn Relay>, call: Duration, other: Duration) -> Self {
        let (answers, incoming) = mpsc::unbounded_channel();
        Self {
            server: server.to_owned(),
            relay,
            call,
            other,
            one: Arc::new(tokio::sync::Mutex::new(())),
            answers,
            incoming,
        }
    }
}

impl rmcp::transport::Transport<RoleClient> for RelayTransport {
    type Error = RelayError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let message = serde_json::to_value(&item);
        let relay = self.relay.clone();
        let server = self.server.clone();
        let one = self.one.clone();
        let answers = self.answers.clone();
        let (call, other) = (self.call, self.other);
        async move {
            let message = message.map_err(|e| RelayError::Answer(e.to_string()))?;
            let request = message.get("id").is_some() && message.get("method").is_some();
            let method = message["method"].as_str().unwrap_or_default().to_owned();
            let patience = if method == "tools/call" { call } else { other };
            let _one = if method == "notifications/cancelled" {
                None
            } else {
                Some(one.lock().await)
            };
            let answer = match tokio::time::timeout(patience, relay.relay(&server, message)).await {
                Ok(answer) => answer,
                Err(_) => Err(format!("no answer within {patience:?}")),
            };
            if !request {
                // A notification's answer says nothing; one that did not arrive is only noted.
                if let Err(why) = answer {
                    tracing::debug!(server = %server, "{method}: {why}");
                }
                return Ok(());
            }
            let answer = serde_json::from_value::<RxJsonRpcMessage<RoleClient>>(
                answer.map_err(RelayError::Relay)?,
            )
            .map_err(|e| RelayError::Answer(e.to_string()))?;
            let _ = answers.send(answer);
            Ok(())
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// How long a tool call may wait for the program without `MCP_TOOL_TIMEOUT` (the turn's own
/// tool timeout stops it sooner).
const CALL_PATIENCE: Duration = Duration::from_secs(600);

/// A connected in-process server: its tools, held up for the turn.
pub struct SdkServer {
    name: String,
    limits: Limits,
    connection: Connection,
    _running: Running,
}

impl Source for SdkServer {
    fn name(&self) -> &str {
        &self.name
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn connect(
        self: Arc<Self>,
    ) -> Pin<Box<dyn Future<Output = Result<Connection, String>> + Send>> {
        Box::pin(async move { Ok(self.connection.clone()) })
    }
}

/// Connects to the program's server `name` through `relay` and lists its tools: the server
/// (hold it while the tools may be called) and its tools, with what was dropped from them.
pub async fn connect(
    name: &str,
    relay: Arc<dyn Relay>,
    limits: Limits,
) -> Result<(Arc<SdkServer>, Tools, Vec<String>), McpError> {
    let transport = RelayTransport::new(
        name,
        relay,
        limits.call.unwrap_or(CALL_PATIENCE),
        limits.start,
    );
    let (running, connection) =
        tokio::time::timeout(limits.start, super::client::connect_over(transport))
            .await
            .map_err(|_| {
                McpError::Handshake(format!("no handshake within {} s", limits.start.as_secs()))
            })??;
    let listed: Vec<ListedTool> = connection.list_tools(limits.start).await?;
    let server = Arc::new(SdkServer {
        name: name.to_owned(),
        limits,
        connection,
        _running: running,
    });
    let source: Arc<dyn Source> = server.clone();
    let (tools, dropped) = tools_of(&source, listed);
    Ok((server, tools, dropped))
}
