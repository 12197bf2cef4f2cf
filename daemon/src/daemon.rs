//! Start-up and shutdown of the daemon: resolve paths, bind the socket, open the store, serve,
//! and on SIGTERM/SIGINT or `daemon/shutdown` end every subscription, flush and remove the socket.

use crate::agent::TurnLimits;
use crate::llm::{AnthropicClient, Auth, LlmConfig, ModelCatalog, WebFetcher};
use crate::rpc::{self, Connections, Listener, RpcApi};
use crate::session::{Sessions, TurnEnv};
use crate::store::Store;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tether_proto::paths::PathEnv;
use tokio_util::sync::CancellationToken;

/// What `tetherd` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Socket path; defaults to the protocol's discovery rules.
    pub socket: Option<PathBuf>,
    /// Data directory; defaults to `$TETHER_HOME` / XDG.
    pub data_dir: Option<PathBuf>,
    /// Print `ready <socket>` on stdout once serving (for a parent that waits on it).
    pub print_ready: bool,
}

/// Why the daemon could not run.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The socket could not be bound.
    #[error(transparent)]
    Bind(#[from] rpc::BindError),
    /// The store could not be opened.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// Another IO failure.
    #[error("{0}")]
    Io(String),
}

/// Runs the daemon until it is told to stop.
pub async fn run(options: Options) -> Result<(), DaemonError> {
    let env = PathEnv::from_process(nix::unistd::getuid().as_raw());
    let socket = options.socket.unwrap_or_else(|| env.socket());
    let data_dir = options.data_dir.unwrap_or_else(|| env.data_dir());

    let listener = match Listener::inherited()? {
        Some(l) => {
            tracing::info!("serving on the socket systemd passed");
            l
        }
        None => Listener::bind(&socket)?,
    };
    let socket = if listener.path().as_os_str().is_empty() {
        socket
    } else {
        listener.path().to_owned()
    };
    std::fs::create_dir_all(&data_dir).map_err(|e| {
        DaemonError::Io(format!(
            "cannot create data directory {}: {e}",
            data_dir.display()
        ))
    })?;
    survive_file_size_limit();
    let store = Store::open(&data_dir)?;
    let epoch = store.next_epoch()?;
    let sessions = Arc::new(Sessions::new(
        store.clone(),
        epoch,
        Arc::new(turn_env(&data_dir)?),
    ));
    let recovered = sessions.recover_interrupted();
    if recovered > 0 {
        tracing::info!(
            sessions = recovered,
            "recovering sessions interrupted by the last stop"
        );
    }
    let shutdown = CancellationToken::new();
    tokio::spawn(watch_signals(shutdown.clone()));

    tracing::info!(socket = %socket.display(), data = %data_dir.display(), epoch, "tetherd serving");
    if options.print_ready {
        println!("ready {}", socket.display());
    }
    // Under systemd (Type=notify): ready, and what we serve. A no-op elsewhere.
    let _ = sd_notify::notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&format!("serving {}", socket.display())),
    ]);

    let api = RpcApi {
        sessions: sessions.clone(),
        connections: Arc::new(Connections::default()),
        started: Instant::now(),
        socket: socket.clone(),
        data_dir,
        shutdown,
    };
    let sessions_for_drain = sessions.clone();
    rpc::serve(&listener, api, async move {
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
        sessions_for_drain.shutdown().await
    })
    .await;

    store.flush().await?;
    drop(listener);
    tracing::info!("tetherd stopped");
    Ok(())
}

/// The model client and tools, configured from the environment.
fn turn_env(data_dir: &std::path::Path) -> Result<TurnEnv, DaemonError> {
    let web = WebFetcher::new().map_err(|e| DaemonError::Io(format!("cannot set up HTTP: {e}")))?;
    let llm = LlmConfig::from_env()
        .and_then(|config| {
            AnthropicClient::new(
                config,
                Auth::from_env(std::env::var("TETHER_API_KEY_HELPER").ok()),
            )
        })
        .map(Arc::new)
        .map_err(|e| e.to_string());
    if let Err(e) = &llm {
        tracing::error!("the model client is not usable: {e}");
    }
    Ok(TurnEnv {
        llm,
        catalog: ModelCatalog::from_env(),
        tools: crate::tools::builtin(),
        limits: TurnLimits::from_env(),
        data_dir: data_dir.to_owned(),
        web: Arc::new(web),
        idle_unload: match std::env::var("TETHER_IDLE_UNLOAD_MS")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            Some(0) => None,
            Some(ms) => Some(std::time::Duration::from_millis(ms)),
            None => Some(std::time::Duration::from_secs(15 * 60)),
        },
        delta_retention: match std::env::var("TETHER_DELTA_RETENTION") {
            Ok(v) if matches!(v.trim(), "off" | "never" | "forever") => None,
            Ok(v) => Some(humantime::parse_duration(v.trim()).map_err(|e| {
                DaemonError::Io(format!(
                    "TETHER_DELTA_RETENTION={v:?} is not a duration: {e}"
                ))
            })?),
            Err(_) => Some(std::time::Duration::from_secs(7 * 24 * 3600)),
        },
        fast_model: std::env::var("ANTHROPIC_SMALL_FAST_MODEL")
            .ok()
            .filter(|m| !m.trim().is_empty())
            .unwrap_or_else(|| "haiku".into()),
    })
}

/// A write past `RLIMIT_FSIZE` raises SIGXFSZ, whose default action kills the process. Handle
/// it instead, so the write fails with `EFBIG` and the daemon reports it like a full disk.
fn survive_file_size_limit() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::from_raw(
        nix::sys::signal::Signal::SIGXFSZ as i32,
    )) {
        Ok(mut xfsz) => {
            tokio::spawn(async move {
                while xfsz.recv().await.is_some() {
                    tracing::error!("a write went past the file size limit (RLIMIT_FSIZE)");
                }
            });
        }
        Err(e) => tracing::warn!("cannot handle SIGXFSZ: {e}"),
    }
}

async fn watch_signals(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop tetherd with `tether daemon stop`");
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
    shutdown.cancel();
}
