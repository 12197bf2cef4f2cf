//! Reaching the daemon: socket discovery, autostart of `tetherd` when nothing listens, the
//! typed JSON-RPC client over the socket (WebSocket framing), and a word when this command's
//! environment names one of the daemon's settings with another value.

use jsonrpsee::client_transport::ws::{Url, WsTransportClientBuilder};
use jsonrpsee::core::client::{Client, ClientBuilder};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tether_proto::paths::PathEnv;
use tether_proto::private::{self, ForeignPeer, UnsafeDir};
use tether_proto::{
    Capabilities, ClientInfo, ClientKind, InitializeResult, MAX_MESSAGE_BYTES, PROTOCOL_VERSION,
    TetherRpcClient,
};
use tokio::net::UnixStream;

/// How long an autostarted daemon gets to report that it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Errors reaching the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Nothing listens on the socket and autostart was not allowed.
    #[error("tetherd is not running (no daemon listens on {0})")]
    NotRunning(PathBuf),
    /// The daemon binary could not be started.
    #[error("cannot start tetherd ({binary}): {reason}")]
    Start {
        /// What was run.
        binary: String,
        /// Why it failed.
        reason: String,
    },
    /// Connecting or the handshake failed.
    #[error("cannot talk to tetherd on {path}: {reason}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The socket's directory cannot be trusted.
    #[error(transparent)]
    UnsafeDir(#[from] UnsafeDir),
    /// Another user serves the socket.
    #[error(transparent)]
    ForeignPeer(#[from] ForeignPeer),
    /// `--shared-by`: that user's daemon has no shared socket (no session is shared with
    /// anyone on this machine).
    #[error(
        "{0}'s daemon shares no session with users of this machine (nothing at {path}); ask {0} to run tether share ID --with YOUR_NAME",
        path = .1.display()
    )]
    NotShared(String, PathBuf),
    /// The daemon answered `initialize` with an error.
    #[error("tetherd refused the connection: {0}")]
    Initialize(String),
}

/// A connected, initialized client.
pub struct Connection {
    /// The typed JSON-RPC client.
    pub client: Client,
    /// What the daemon said in `initialize`.
    pub hello: InitializeResult,
    /// The ssh process carrying a remote connection (killed with it).
    _ssh: Option<tokio::process::Child>,
}

/// Where the client looks for the daemon and its data.
pub fn path_env() -> PathEnv {
    PathEnv::from_process(nix::unistd::getuid().as_raw())
}

/// The user whose daemon this process uses through its shared socket (`--shared-by`).
#[derive(Debug, Clone)]
pub struct Host {
    /// Their name.
    pub name: String,
    /// Their uid: the only one that may serve the socket.
    pub uid: u32,
}

static SHARED_BY: std::sync::OnceLock<Option<Host>> = std::sync::OnceLock::new();

/// Sets whose daemon this process uses: `--shared-by USER`, else `$TETHER_SHARED_BY`, else
/// this user's own.
pub fn share_host(flag: Option<&str>) -> anyhow::Result<Option<&'static Host>> {
    let name = flag
        .map(str::to_owned)
        .or_else(|| std::env::var("TETHER_SHARED_BY").ok())
        .filter(|s| !s.trim().is_empty());
    let host = match name {
        None => None,
        Some(name) => {
            let user = nix::unistd::User::from_name(&name)?
                .ok_or_else(|| anyhow::anyhow!("--shared-by {name}: there is no such user here"))?;
            Some(Host {
                name,
                uid: user.uid.as_raw(),
            })
        }
    };
    let _ = SHARED_BY.set(host);
    Ok(SHARED_BY.get().and_then(Option::as_ref))
}

fn shared_by() -> Option<&'static Host> {
    SHARED_BY.get().and_then(Option::as_ref)
}

/// A failed call to the daemon.
pub type CallError = jsonrpsee::core::client::Error;

/// A session's event stream (`session/subscribe`'s notifications, as JSON).
pub type Events = jsonrpsee::core::client::Subscription<serde_json::Value>;

/// Subscribes to a session's events: replay after `since`, then live.
pub async fn subscribe(
    conn: &Connection,
    id: &tether_proto::SessionId,
    role: tether_proto::Role,
    since: tether_proto::Since,
) -> anyhow::Result<Events> {
    use anyhow::Context;
    use jsonrpsee::core::client::SubscriptionClientT;
    let mut params = jsonrpsee::core::params::ObjectParams::new();
    params.insert("sessionId", id)?;
    params.insert("role", role)?;
    params.insert("since", since)?;
    conn.client
        .subscribe("session/subscribe", params, "session/unsubscribe")
        .await
        .context("cannot subscribe to the session")
}

/// Connects to the daemon on `socket`, starting it first if nothing listens and `autostart`.
pub async fn connect(
    socket: &Path,
    autostart: bool,
    kind: ClientKind,
) -> Result<Connection, ConnectError> {
    connect_as(socket, autostart, kind, "tether".into()).await
}

/// [`connect`] with the name other clients see (`tether on host pts/3`). With `--remote`, the
/// daemon is reached through ssh instead (`remote.rs`) and `socket` is not used.
pub async fn connect_as(
    socket: &Path,
    autostart: bool,
    kind: ClientKind,
    name: String,
) -> Result<Connection, ConnectError> {
    if let Some(remote) = crate::remote::current() {
        let place = PathBuf::from(format!("{}: (over ssh)", remote.destination));
        let pipe = crate::remote::open(remote).map_err(|e| ConnectError::Connect {
            path: place.clone(),
            reason: e.to_string(),
        })?;
        let mut ssh = pipe.ssh;
        return match handshake(&place, pipe.stream, kind, name).await {
            Ok(mut conn) => {
                conn._ssh = Some(ssh);
                Ok(conn)
            }
            Err(ConnectError::Connect { path, .. }) => Err(ConnectError::Connect {
                path,
                reason: crate::remote::ssh_verdict(&mut ssh).await,
            }),
            Err(e) => Err(e),
        };
    }
    let stream = open_local(socket, autostart).await?;
    handshake(socket, stream, kind, name).await
}

/// A stream to the daemon on `socket`, started first if nothing listens and `autostart`;
/// nothing is sent before the socket's directory and the serving process are known to be
/// this user's.
pub async fn open_local(socket: &Path, autostart: bool) -> Result<UnixStream, ConnectError> {
    // Another user's daemon, reached by its shared socket: theirs must serve it, from a
    // directory of theirs nobody else can write; it is never started from here.
    let (uid, autostart) = match shared_by() {
        Some(host) => {
            if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
                private::verify_socket_dir(dir, private::DirRule::Shared, host.uid).map_err(
                    |e| match &e {
                        UnsafeDir::Io { source, .. }
                            if source.kind() == std::io::ErrorKind::NotFound =>
                        {
                            ConnectError::NotShared(host.name.clone(), socket.to_owned())
                        }
                        _ => ConnectError::UnsafeDir(e),
                    },
                )?;
            }
            (host.uid, false)
        }
        None => {
            let uid = nix::unistd::getuid().as_raw();
            check_socket_dir(socket, uid)?;
            (uid, autostart)
        }
    };
    let stream = match UnixStream::connect(socket).await {
        Ok(s) => s,
        Err(e) if is_absent(&e) && autostart => {
            start_daemon(socket)?;
            check_socket_dir(socket, uid)?;
            UnixStream::connect(socket)
                .await
                .map_err(|e| ConnectError::Connect {
                    path: socket.to_owned(),
                    reason: e.to_string(),
                })?
        }
        Err(e) if is_absent(&e) => return Err(ConnectError::NotRunning(socket.to_owned())),
        Err(e) => {
            return Err(ConnectError::Connect {
                path: socket.to_owned(),
                reason: e.to_string(),
            });
        }
    };
    let peer = stream
        .peer_cred()
        .map_err(|e| ConnectError::Connect {
            path: socket.to_owned(),
            reason: format!("cannot tell who serves the socket: {e}"),
        })?
        .uid();
    if peer != uid {
        return Err(ForeignPeer {
            socket: socket.to_owned(),
            peer,
            uid,
        }
        .into());
    }
    Ok(stream)
}

/// The WebSocket handshake and `initialize` over any byte stream to the daemon (`place` names
/// it in errors).
async fn handshake<S>(
    place: &Path,
    stream: S,
    kind: ClientKind,
    name: String,
) -> Result<Connection, ConnectError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let connect_err = |reason: String| ConnectError::Connect {
        path: place.to_owned(),
        reason,
    };
    let url = Url::parse("ws://tetherd/").map_err(|e| connect_err(e.to_string()))?;
    let (tx, rx) = WsTransportClientBuilder::default()
        .max_request_size(MAX_MESSAGE_BYTES)
        .max_response_size(MAX_MESSAGE_BYTES)
        .build_with_stream(url, stream)
        .await
        .map_err(|e| match e {
            jsonrpsee::client_transport::ws::WsHandshakeError::Rejected { status_code: 403 } => {
                connect_err(
                    "the daemon shares no session with you (its owner can: tether share ID --with YOUR_NAME)"
                        .into(),
                )
            }
            jsonrpsee::client_transport::ws::WsHandshakeError::Rejected { status_code: 503 } => {
                connect_err(
                    "the daemon is serving as many connections as it allows (max_connections in its config.toml; its log says how many)"
                        .into(),
                )
            }
            e => connect_err(e.to_string()),
        })?;
    let client = ClientBuilder::default()
        .max_buffer_capacity_per_subscription(16 * 1024)
        .request_timeout(Duration::from_secs(120))
        .build_with_tokio(tx, rx);
    let info = ClientInfo {
        name,
        version: env!("CARGO_PKG_VERSION").into(),
        kind,
    };
    let capabilities = Capabilities {
        permissions: kind == ClientKind::Tui,
    };
    let hello = client
        .initialize(PROTOCOL_VERSION, Some(info), Some(capabilities))
        .await
        .map_err(|e| ConnectError::Initialize(e.to_string()))?;
    Ok(Connection {
        client,
        hello,
        _ssh: None,
    })
}

/// The socket's directory, when it exists, must pass the rule both sides apply
/// ([`tether_proto::private`]); a missing one means no daemon runs yet.
fn check_socket_dir(socket: &Path, uid: u32) -> Result<(), UnsafeDir> {
    let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        _ => private::secure_socket_dir(dir, path_env().socket_dir_rule(socket), uid).map(|_| ()),
    }
}

fn is_absent(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
    )
}

/// The `tetherd` next to this executable, else the one on `PATH`.
pub fn daemon_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("tetherd")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("tetherd"))
}

/// Starts a detached daemon on `socket` and waits until it says it is ready (it prints one line
/// once the socket accepts connections). Its log goes to `tetherd.log` in the data directory.
fn start_daemon(socket: &Path) -> Result<(), ConnectError> {
    let binary = daemon_binary();
    let start_err = |reason: String| ConnectError::Start {
        binary: binary.display().to_string(),
        reason,
    };
    let data_dir = path_env().data_dir();
    private::create_dir_all(&data_dir)
        .map_err(|e| start_err(format!("cannot create {}: {e}", data_dir.display())))?;
    let log_path = data_dir.join("tetherd.log");
    let log = private::open_append(&log_path)
        .map_err(|e| start_err(format!("cannot open {}: {e}", log_path.display())))?;
    let mut child = Command::new(&binary)
        .arg("--detach")
        .arg("--print-ready")
        .arg("--socket")
        .arg(socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .map_err(|e| start_err(e.to_string()))?;
    let Some(stdout) = child.stdout.take() else {
        return Err(start_err("no stdout pipe".into()));
    };
    // The ready line, or EOF if the daemon exits first (e.g. another daemon won a race).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(START_TIMEOUT) {
        // The daemon keeps running; init reaps it once we exit.
        Ok(line) if line.starts_with("ready") => Ok(()),
        // It closed stdout without the ready line: it is exiting.
        Ok(_) => {
            let status = child.wait().map_err(|e| start_err(e.to_string()))?;
            if std::os::unix::net::UnixStream::connect(socket).is_ok() {
                return Ok(()); // another daemon won a start race and serves the socket
            }
            Err(start_err(format!(
                "it exited with {status}; see {}",
                log_path.display()
            )))
        }
        Err(_) => Err(start_err(format!(
            "it did not become ready within {}s; see {}",
            START_TIMEOUT.as_secs(),
            log_path.display()
        ))),
    }
}

/// A failed call, for people: the daemon's own message for a refused call (with its details),
/// else what went wrong with the connection.
pub fn call_error(e: &jsonrpsee::core::client::Error) -> String {
    match e {
        jsonrpsee::core::client::Error::Call(obj) => {
            let data = obj
                .data()
                .map(|d| format!(" ({})", d.get().trim_matches('"')))
                .unwrap_or_default();
            format!("{}{data}", obj.message())
        }
        other => other.to_string(),
    }
}

/// An error for people: [`call_error`] for a failed call anywhere in the chain, else the chain.
pub fn describe(e: &anyhow::Error) -> String {
    e.chain()
        .find_map(|cause| cause.downcast_ref::<jsonrpsee::core::client::Error>())
        .map(call_error)
        .unwrap_or_else(|| format!("{e:#}"))
}

/// Says on stderr, one line each, which of the daemon's settings this command's environment
/// names with another value (`ANTHROPIC_MODEL`, `ANTHROPIC_BASE_URL`, …): the daemon decides
/// them, so a value set for one command would otherwise be ignored without a word. Asks the
/// daemon only when such a variable is set; `model_chosen` (a `--model`) leaves the model out.
pub async fn note_ignored_env(conn: &Connection, model_chosen: bool) {
    const ENV: [&str; 10] = [
        "ANTHROPIC_MODEL",
        "ANTHROPIC_SMALL_FAST_MODEL",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_BETAS",
        "ANTHROPIC_BEDROCK_BASE_URL",
        "ANTHROPIC_VERTEX_BASE_URL",
        "ANTHROPIC_VERTEX_PROJECT_ID",
        "CLOUD_ML_REGION",
        "MAX_THINKING_TOKENS",
        "AWS_REGION",
    ];
    let set: Vec<(&str, String)> = ENV
        .iter()
        .filter_map(|v| std::env::var(v).ok().map(|value| (*v, value)))
        .filter(|(var, value)| {
            let chosen = model_chosen && *var == "ANTHROPIC_MODEL";
            !value.trim().is_empty() && !chosen
        })
        .collect();
    if set.is_empty() {
        return;
    }
    let Ok(report) = conn.client.daemon_config().await else {
        return;
    };
    for (var, value) in set {
        let Some(entry) = report
            .entries
            .iter()
            .find(|e| e.env.as_deref() == Some(var))
        else {
            continue;
        };
        let daemons =
            serde_json::from_str::<String>(&entry.value).unwrap_or_else(|_| entry.value.clone());
        if daemons.trim() == value.trim() {
            continue;
        }
        let how = if entry.key == "model" {
            "choose a session's model with --model or /model, or set model in the daemon's config"
                .to_owned()
        } else {
            format!("set {} in the daemon's config or environment", entry.key)
        };
        eprintln!(
            "tether: {var} here is not used: tetherd decides {} (it uses {daemons}, from {}); {how} (tether config show)",
            entry.key, entry.source
        );
    }
}
