//! One connection to one MCP server, through rmcp: the transport (a child process in its own
//! process group, Streamable HTTP, or the older SSE transport from `sse.rs`), the handshake
//! (rmcp's lifecycle negotiation: `server/discover` for current servers, `initialize` for older
//! ones), tool listing, and calls with progress, timeout and cancellation.
//!
//! Invariant: the only file that names rmcp's service types; everything it hands out is plain
//! JSON and strings.

use super::config::Transport;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientConfig, ClientRequest, Implementation,
    ProgressNotificationParam, ProgressToken, ProtocolVersion,
};
use rmcp::service::{
    ClientLifecycleMode, NotificationContext, Peer, PeerRequestOptions, RoleClient, RunningService,
    serve_client_with_lifecycle,
};
use rmcp::{ClientHandler, ServiceError};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A failure to reach a server or to get an answer from it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum McpError {
    /// The process could not start or the address could not be reached.
    #[error("could not start: {0}")]
    Spawn(String),
    /// The handshake failed or did not finish in time.
    #[error("handshake failed: {0}")]
    Handshake(String),
    /// The connection closed.
    #[error("the server disconnected")]
    Closed,
    /// The server did not answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The server answered with a JSON-RPC error, or something that is not a result.
    #[error("{0}")]
    Protocol(String),
    /// The call was cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl From<ServiceError> for McpError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::TransportClosed => Self::Closed,
            ServiceError::Timeout { timeout } => Self::Timeout(timeout),
            other => Self::Protocol(other.to_string()),
        }
    }
}

/// A tool as the server lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedTool {
    /// The server's name for it.
    pub name: String,
    /// Its description.
    pub description: String,
    /// The JSON schema of its arguments.
    pub input_schema: Value,
    /// `annotations.readOnlyHint`.
    pub read_only: bool,
}

/// Reports a call's progress.
pub type Progress = Arc<dyn Fn(String) + Send + Sync>;

/// What the handler shares with the connection: progress listeners and whether the tool list
/// changed.
struct Shared {
    progress: Mutex<HashMap<ProgressToken, Progress>>,
    /// Counts `notifications/tools/list_changed`.
    tools_changed: AtomicU64,
    changed: tokio::sync::Notify,
}

/// Answers the server's notifications.
struct Handler(Arc<Shared>);

impl ClientHandler for Handler {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let listener = self
            .0
            .progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&params.progress_token)
            .cloned();
        if let Some(report) = listener {
            let mut line = match params.total {
                Some(total) => format!("{}/{}", params.progress, total),
                None => format!("{}", params.progress),
            };
            if let Some(m) = params.message {
                line = format!("{line} {m}");
            }
            report(line);
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.tools_changed.fetch_add(1, Ordering::AcqRel);
        self.0.changed.notify_waiters();
    }

    fn get_info(&self) -> ClientConfig {
        let mut me = Implementation::new("tether", env!("CARGO_PKG_VERSION"));
        me.title = Some("tether".into());
        ClientConfig::new(Default::default(), me)
    }
}

/// A live connection (cheap to clone: the peer is a handle).
#[derive(Clone)]
pub struct Connection {
    peer: Peer<RoleClient>,
    shared: Arc<Shared>,
}

/// The running service: awaiting it tells when the connection ended.
pub struct Running(RunningService<RoleClient, Handler>);

/// Closes a connection (and stops a child process) while another task waits on it.
pub struct Closer(rmcp::service::RunningServiceCancellationToken);

impl Closer {
    /// Closes it.
    pub fn close(self) {
        self.0.cancel();
    }
}

impl Running {
    /// What closes the connection.
    pub fn closer(&self) -> Closer {
        Closer(self.0.cancellation_token())
    }

    /// Waits until the connection ends.
    pub async fn closed(self) {
        let _ = self.0.waiting().await;
    }
}

/// Starts the server and does the handshake.
pub async fn connect(
    server: &str,
    transport: &Transport,
    cwd: &Path,
) -> Result<(Running, Connection), McpError> {
    let shared = Arc::new(Shared {
        progress: Mutex::new(HashMap::new()),
        tools_changed: AtomicU64::new(0),
        changed: tokio::sync::Notify::new(),
    });
    let handler = Handler(shared.clone());
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::LATEST],
        legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
    };
    let service = match transport {
        Transport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            // The daemon's credentials stay out; the server's own `env` is passed as configured.
            crate::child_env::scrub(&mut cmd);
            cmd.args(args).envs(env).current_dir(cwd);
            // Its own process group, so stopping it stops what it started; and it dies with
            // the daemon even when the daemon is killed outright.
            let mut wrapped = process_wrap::tokio::CommandWrap::from(cmd);
            wrapped.wrap(process_wrap::tokio::ProcessGroup::leader());
            wrapped.wrap(DieWithDaemon);
            let (child, stderr) = rmcp::transport::TokioChildProcess::builder(wrapped)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| McpError::Spawn(format!("{command}: {e}")))?;
            if let Some(stderr) = stderr {
                log_stderr(server.to_owned(), stderr);
            }
            serve_client_with_lifecycle(handler, child, lifecycle).await
        }
        Transport::Http { url, headers } => {
            let custom: HashMap<_, _> = super::sse::header_map(headers)
                .map_err(McpError::Spawn)?
                .into_iter()
                .filter_map(|(name, value)| Some((name?, value)))
                .collect();
            let config =
                rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                    url.as_str(),
                )
                .custom_headers(custom);
            let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
            serve_client_with_lifecycle(handler, transport, lifecycle).await
        }
        Transport::Sse { url, headers } => {
            let transport = super::sse::connect(url, headers)
                .await
                .map_err(|e| match e {
                    super::sse::SseError::NoEndpoint(why) => McpError::Handshake(why),
                    other => McpError::Spawn(other.to_string()),
                })?;
            serve_client_with_lifecycle(handler, transport, lifecycle).await
        }
    }
    .map_err(|e| McpError::Handshake(e.to_string()))?;
    let peer = service.peer().clone();
    Ok((Running(service), Connection { peer, shared }))
}

/// Does the handshake over a transport of the caller's making (an in-process server's relay).
pub async fn connect_over<T, E, A>(transport: T) -> Result<(Running, Connection), McpError>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let shared = Arc::new(Shared {
        progress: Mutex::new(HashMap::new()),
        tools_changed: AtomicU64::new(0),
        changed: tokio::sync::Notify::new(),
    });
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::LATEST],
        legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
    };
    let service = serve_client_with_lifecycle(Handler(shared.clone()), transport, lifecycle)
        .await
        .map_err(|e| McpError::Handshake(e.to_string()))?;
    let peer = service.peer().clone();
    Ok((Running(service), Connection { peer, shared }))
}

/// The child's stderr lines go to the daemon log under the server's name.
fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncBufReadExt;
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::info!(target: "mcp", server = %server, "{line}");
        }
    });
}

impl Connection {
    /// How many times the server said its tools changed: a listing made after reading `n`
    /// is current until this passes `n`.
    pub fn tools_generation(&self) -> u64 {
        self.shared.tools_changed.load(Ordering::Acquire)
    }

    /// Waits for the next `notifications/tools/list_changed`.
    pub async fn tools_changed(&self) {
        self.shared.changed.notified().await
    }

    /// Every tool of the server (all pages).
    pub async fn list_tools(&self, timeout: Duration) -> Result<Vec<ListedTool>, McpError> {
        let tools = tokio::time::timeout(timeout, self.peer.list_all_tools())
            .await
            .map_err(|_| McpError::Timeout(timeout))??;
        Ok(tools
            .into_iter()
            .map(|t| ListedTool {
                name: t.name.to_string(),
                description: t.description.map(|d| d.to_string()).unwrap_or_default(),
                input_schema: Value::Object((*t.input_schema).clone()),
                read_only: t
                    .annotations
                    .as_ref()
                    .and_then(|a| a.read_only_hint)
                    .unwrap_or(false),
            })
            .collect())
    }

    /// Calls `tool`; the result as the server sent it (`content`, `structuredContent`,
    /// `isError`). Cancelling sends `notifications/cancelled`; so does a timeout.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Value,
        progress: Progress,
        cancel: &CancellationToken,
        timeout: Option<Duration>,
    ) -> Result<Value, McpError> {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = match arguments {
            Value::Object(o) => Some(o),
            Value::Null => None,
            other => {
                return Err(McpError::Protocol(format!(
                    "arguments must be an object, not {other}"
                )));
            }
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let mut handle = self
            .peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await?;
        let token = handle.progress_token.clone();
        self.shared
            .progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(token.clone(), progress);
        let deadline = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        let outcome = tokio::select! {
            answer = &mut handle.rx => Ok(answer),
            _ = cancel.cancelled() => Err(McpError::Cancelled),
            _ = deadline => Err(McpError::Timeout(timeout.unwrap_or_default())),
        };
        self.shared
            .progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&token);
        match outcome {
            Ok(Ok(Ok(result))) => serde_json::to_value(result)
                .map_err(|e| McpError::Protocol(format!("unreadable result: {e}"))),
            Ok(Ok(Err(e))) => Err(e.into()),
            Ok(Err(_)) => Err(McpError::Closed),
            Err(stop) => {
                let reason = match &stop {
                    McpError::Cancelled => "the user cancelled the turn".to_owned(),
                    other => other.to_string(),
                };
                let _ = handle.cancel(Some(reason)).await;
                Err(stop)
            }
        }
    }
}

/// Makes a stdio server die with the daemon, even when the daemon is killed with SIGKILL (no
/// handler runs then): the kernel sends the child SIGKILL when the thread that spawned it
/// ends. Servers are spawned from the runtime's worker threads, which live as long as the
/// daemon.
#[derive(Clone, Copy, Debug)]
struct DieWithDaemon;

impl process_wrap::tokio::CommandWrapper for DieWithDaemon {
    fn pre_spawn(
        &mut self,
        command: &mut tokio::process::Command,
        _core: &process_wrap::tokio::CommandWrap,
    ) -> std::io::Result<()> {
        let daemon = nix::unistd::getpid();
        #[allow(unsafe_code)]
        // SAFETY: the closure runs in the forked child before exec and makes only
        // async-signal-safe system calls (prctl, getppid, _exit); it allocates nothing.
        unsafe {
            command.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)?;
                // The daemon died before the request took: go now.
                if nix::unistd::getppid() != daemon {
                    nix::libc::_exit(1);
                }
                Ok(())
            });
        }
        Ok(())
    }
}
