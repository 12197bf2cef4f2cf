//! An Agent SDK program's in-process MCP server (`"type": "sdk"` in a turn's MCP
//! configuration), reached through the session: each JSON-RPC message goes to the program that
//! started the turn (the session's `mcp_message` event) and its answer comes back
//! (`mcp/respond`). The server lives for its turn: connected as the turn starts, dropped when
//! it ends.
//!
//! Invariant: one message at a time; a program handles each message on its own, so the
//! handshake keeps its order only by waiting for each answer.

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
use tokio::sync::mpsc;

/// Carries one JSON-RPC message to the program's server `server` and brings back its answer
/// (the response to a request; anything for a notification).
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
    one: Arc<tokio::sync::Mutex<()>>,
    answers: mpsc::UnboundedSender<RxJsonRpcMessage<RoleClient>>,
    incoming: mpsc::UnboundedReceiver<RxJsonRpcMessage<RoleClient>>,
}

impl RelayTransport {
    /// The transport to `server` through `relay`.
    pub fn new(server: &str, relay: Arc<dyn Relay>) -> Self {
        let (answers, incoming) = mpsc::unbounded_channel();
        Self {
            server: server.to_owned(),
            relay,
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
        async move {
            let message = message.map_err(|e| RelayError::Answer(e.to_string()))?;
            let request = message.get("id").is_some() && message.get("method").is_some();
            let _one = one.lock().await;
            let answer = relay
                .relay(&server, message)
                .await
                .map_err(RelayError::Relay)?;
            if request {
                let answer = serde_json::from_value::<RxJsonRpcMessage<RoleClient>>(answer)
                    .map_err(|e| RelayError::Answer(e.to_string()))?;
                let _ = answers.send(answer);
            }
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
    let transport = RelayTransport::new(name, relay);
    let (running, connection) = super::client::connect_over(transport).await?;
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
