//! Start-up and shutdown of the daemon: resolve paths, bind the socket, open the store, serve,
//! and on SIGTERM/SIGINT or `daemon/shutdown` end every subscription, flush and remove the socket.

use crate::agent::TurnLimits;
use crate::config::Config;
use crate::llm::{
    AnthropicClient, Auth, Bedrock, CacheTtl, LlmConfig, ModelCatalog, Provider, RequestPolicy,
    Vertex, WebFetcher,
};
use crate::rpc::{self, Connections, Listener, RpcApi};
use crate::session::{Sessions, TurnEnv};
use crate::store::{ClusterSettings, Store};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tether_proto::paths::PathEnv;
use tokio_util::sync::CancellationToken;

/// What `tetherd` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// Socket path; defaults to the protocol's discovery rules.
    pub socket: Option<PathBuf>,
    /// Data directory; defaults to `$TETHER_HOME` / XDG.
    pub data_dir: Option<PathBuf>,
    /// Print `ready <socket>` on stdout once serving (for a parent that waits on it).
    pub print_ready: bool,
    /// The effective configuration.
    pub config: Arc<Config>,
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
    /// The approval key could not be read or made.
    #[error(transparent)]
    ApprovalKey(#[from] crate::approvals::KeyError),
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
        None => Listener::bind(&socket, env.socket_dir_rule(&socket))?,
    };
    let socket = if listener.path().as_os_str().is_empty() {
        socket
    } else {
        listener.path().to_owned()
    };
    tether_proto::private::create_dir_all(&data_dir).map_err(|e| {
        DaemonError::Io(format!(
            "cannot create data directory {}: {e}",
            data_dir.display()
        ))
    })?;
    survive_file_size_limit();
    let store = match ClusterSettings::from_config(&options.config) {
        Some(cluster) => {
            tracing::info!(
                node = cluster.node,
                nats = cluster.urls.join(","),
                "joining the cluster"
            );
            Store::open_clustered(&data_dir, &cluster).await?
        }
        None => Store::open(&data_dir)?,
    };
    // The store creates its files with the process umask; they are nobody else's to read.
    tighten_data_dir(&data_dir);
    let epoch = store.next_epoch()?;
    // The approval page, when asked for: bound before the sessions, whose hooks get its links.
    let page = match options
        .config
        .string("approvals.listen")
        .filter(|a| !a.is_empty())
    {
        Some(addr) => Some(tokio::net::TcpListener::bind(&addr).await.map_err(|e| {
            DaemonError::Io(format!(
                "cannot serve the approval page on approvals.listen = {addr:?}: {e}"
            ))
        })?),
        None => None,
    };
    let mut env = turn_env(&options.config, &data_dir)?;
    env.approval_links = match (&page, options.config.string("approvals.url")) {
        (_, Some(url)) if !url.is_empty() => Some(url.trim_end_matches('/').to_owned()),
        (Some(page), _) => page.local_addr().ok().map(|a| format!("http://{a}")),
        _ => None,
    };
    let sessions = Arc::new(Sessions::new(store.clone(), epoch, Arc::new(env)));
    let recovered = sessions.recover_interrupted().await;
    if recovered > 0 {
        tracing::info!(
            sessions = recovered,
            "recovering sessions interrupted by the last stop"
        );
    }
    let shutdown = CancellationToken::new();
    tokio::spawn(watch_signals(shutdown.clone()));
    if let Some(page) = page {
        let url = sessions.env().approval_links.clone().unwrap_or_default();
        tracing::info!(url, "serving the approval page");
        tokio::spawn(crate::approve::page::serve(
            page,
            sessions.clone(),
            shutdown.clone(),
        ));
    }
    // cleanupPeriodDays: now, then once a day (the setting is read each time).
    let cleaner = {
        let sessions = sessions.clone();
        tokio::spawn(async move {
            let mut day = tokio::time::interval(std::time::Duration::from_secs(86_400));
            loop {
                day.tick().await;
                let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
                let Some(period) = home.and_then(|h| crate::settings::cleanup_period(&h)) else {
                    continue;
                };
                let deleted = sessions.clean_up(period).await;
                if deleted > 0 {
                    tracing::info!(
                        sessions = deleted,
                        days = period.as_secs() / 86_400,
                        "deleted sessions unused for longer than cleanupPeriodDays"
                    );
                }
            }
        })
    };
    // Owned here and stopped with the daemon; never in a turn's way.
    let listing = sessions.env().llm.clone().ok().map(|llm| {
        let catalog = sessions.env().catalog.clone();
        let dir = data_dir.clone();
        tokio::spawn(async move { crate::llm::listing::refresh(&llm, &catalog, &dir).await })
    });

    tracing::info!(socket = %socket.display(), data = %data_dir.display(), epoch, "tetherd serving");
    if options.print_ready {
        println!("ready {}", socket.display());
    }
    // Under systemd (Type=notify): ready, and what we serve. A no-op elsewhere.
    let _ = sd_notify::notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&format!("serving {}", socket.display())),
    ]);

    let shared = rpc::SharedSocket::new(
        options
            .config
            .string("share.socket")
            .filter(|s| !s.is_empty())
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                tether_proto::paths::PathEnv::shared_socket(nix::unistd::getuid().as_raw())
            }),
        sessions.store().clone(),
        shutdown.clone(),
    );
    // Reading every record is not start-up's work: the socket comes up a moment later.
    let opening = shared.clone();
    tokio::task::spawn_blocking(move || opening.open_if_shared());
    let api = RpcApi {
        sessions: sessions.clone(),
        connections: Arc::new(Connections::on_node(
            sessions.store().node(),
            rpc::user_name(nix::unistd::getuid().as_raw()),
        )),
        started: Instant::now(),
        socket: socket.clone(),
        data_dir,
        shutdown,
        config: options.config.clone(),
        shared,
    };
    let sessions_for_drain = sessions.clone();
    rpc::serve(&listener, api, async move {
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
        sessions_for_drain.shutdown().await
    })
    .await;

    if let Some(task) = listing {
        task.abort();
    }
    cleaner.abort();
    store.flush().await?;
    drop(listener);
    tracing::info!("tetherd stopped");
    Ok(())
}

/// The model client and tools, as configured.
pub fn turn_env(config: &Config, data_dir: &std::path::Path) -> Result<TurnEnv, DaemonError> {
    let web = WebFetcher::new().map_err(|e| DaemonError::Io(format!("cannot set up HTTP: {e}")))?;
    let llm = llm_config(config)
        .and_then(|c| {
            AnthropicClient::new(
                c,
                Auth::from_env(std::env::var("TETHER_API_KEY_HELPER").ok().or_else(|| {
                    let home = std::env::var_os("HOME").map(std::path::PathBuf::from)?;
                    crate::settings::api_key_helper(&home)
                })),
            )
        })
        .and_then(|client| Ok(client.with_provider(provider(config)?)))
        .map(Arc::new)
        .map_err(|e| e.to_string());
    if let Err(e) = &llm {
        tracing::error!("the model client is not usable: {e}");
    }
    let mut limits = TurnLimits {
        auto_compact_percent: config.number("auto_compact_percent"),
        fallback_model: config.string("fallback_model"),
        ..TurnLimits::default()
    };
    if let Some(n) = config.number("max_output_tokens") {
        limits.max_tokens = n as u32;
    }
    if let Some(t) = config.duration("tool_timeout") {
        limits.tool_timeout = t;
    }
    let snapshots = if config.flag("snapshots.enabled") {
        let deny = config.list("snapshots.deny");
        let max_mb = config.number("snapshots.max_mb").unwrap_or(100.0).max(0.0) as u64;
        Some(Arc::new(
            crate::snapshots::Policy::new(data_dir.join("snapshots"), &deny, max_mb)
                .map_err(DaemonError::Io)?,
        ))
    } else {
        None
    };
    Ok(TurnEnv {
        snapshots,
        workspaces: config
            .string("cluster.workspaces")
            .filter(|_| !config.list("cluster.nats").is_empty())
            .map(std::path::PathBuf::from),
        llm,
        catalog: ModelCatalog::from_env(config.string("model")).with_prices(
            config
                .model_prices()
                .into_iter()
                .map(|(id, [i, o, w5, w1, r])| (id, crate::llm::Price::new(i, o, w5, w1, r)))
                .collect(),
        ),
        tools: crate::tools::builtin(),
        mcp: crate::mcp::McpServers::new(crate::mcp::Limits::from_env()),
        limits,
        data_dir: data_dir.to_owned(),
        web: Arc::new(web),
        idle_unload: config.duration("idle_unload"),
        delta_retention: config.duration("delta_retention"),
        fast_model: config
            .string("fast_model")
            .unwrap_or_else(|| "haiku".into()),
        permission_mode: config.permission_mode(),
        budget_usd: config.number("budget_usd").filter(|b| *b > 0.0),
        daily: config
            .number("daily_budget_usd")
            .filter(|b| *b > 0.0)
            .map(|cap| {
                Arc::new(crate::agent::Daily::open(
                    cap,
                    data_dir.join("daily-spend.json"),
                ))
            }),
        approval_links: None,
        approvals: Arc::new(crate::approvals::Approvals::open(
            data_dir,
            config
                .duration("approvals.token_ttl")
                .unwrap_or(crate::approvals::DEFAULT_TTL),
        )?),
        log_user_prompts: config.flag("telemetry.log_user_prompts"),
        config_hooks: config.tables.get("hooks").and_then(|t| {
            let source = config
                .file
                .as_ref()
                .map(|f| f.display().to_string())
                .unwrap_or_else(|| "config.toml".into());
            serde_json::to_value(t).ok().map(|v| (v, source))
        }),
        cache_ttl: match config.string("cache_ttl").as_deref() {
            Some("1h") => Some(CacheTtl::OneHour),
            Some("5m") => Some(CacheTtl::FiveMinutes),
            _ => None,
        },
        policy: RequestPolicy {
            off: config.string("thinking").as_deref() == Some("off"),
            budget: config
                .number("thinking_budget")
                .filter(|n| *n >= 1.0)
                .map(|n| n as u32),
            effort: config
                .string("effort")
                .and_then(|e| crate::llm::Effort::parse(&e)),
            hide_thinking: false,
            context_editing: config.flag("context_editing"),
            prefix_ttl: CacheTtl::FiveMinutes,
            extra_betas: config
                .string("betas")
                .map(|b| {
                    b.split(',')
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
        },
    })
}

/// The model provider the configuration names.
fn provider(config: &Config) -> Result<Provider, crate::llm::LlmError> {
    match config.string("provider").as_deref().unwrap_or("anthropic") {
        "vertex" => {
            let project = config.string("vertex.project_id").ok_or_else(|| {
                crate::llm::LlmError::Config(
                    "Vertex AI needs a project: set ANTHROPIC_VERTEX_PROJECT_ID (or vertex.project_id in config.toml)"
                        .into(),
                )
            })?;
            Ok(Provider::Vertex(Vertex::new(
                project,
                config.string("vertex.region"),
                config.string("vertex.base_url"),
                !config.flag("vertex.skip_auth"),
            )))
        }
        "bedrock" => {
            let region = config.string("bedrock.region").ok_or_else(|| {
                crate::llm::LlmError::Config(
                    "Amazon Bedrock needs a region: set AWS_REGION (or bedrock.region in config.toml)"
                        .into(),
                )
            })?;
            Ok(Provider::Bedrock(Bedrock::new(
                region,
                config.string("bedrock.base_url"),
                !config.flag("bedrock.skip_auth"),
            )))
        }
        _ => Ok(Provider::Anthropic),
    }
}

/// The API client's settings.
fn llm_config(config: &Config) -> Result<LlmConfig, crate::llm::LlmError> {
    let mut c = LlmConfig::default();
    if let Some(base) = config.string("api.base_url") {
        c.base_url = base;
    }
    if let Some(n) = config.number("api.max_retries") {
        c.retry.max_retries = n as u32;
    }
    if let Some(t) = config.duration("api.connect_timeout") {
        c.connect_timeout = t;
    }
    if let Some(t) = config.duration("api.stream_idle_timeout") {
        c.idle_timeout = t;
    }
    if let Some(t) = config.duration("api.request_timeout") {
        c.overall_timeout = t;
    }
    if let Ok(spec) = std::env::var("ANTHROPIC_CUSTOM_HEADERS") {
        c.custom_headers = crate::llm::custom_headers(&spec)?;
    }
    Ok(c)
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

/// Installs the SIGTERM/SIGINT handlers now (before the daemon says it is ready, so a signal
/// right after never meets the default action) and returns the task that waits for them.
fn watch_signals(shutdown: CancellationToken) -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            tracing::error!(
                "cannot install signal handlers; stop tetherd with `tether daemon stop`"
            );
            return;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
        shutdown.cancel();
    }
}

/// Takes group and other permissions off everything in the data directory (an install made
/// before they were private, or files a library created with the umask), saying so in the log.
pub fn tighten_data_dir(data_dir: &std::path::Path) {
    let changed = tether_proto::private::tighten(data_dir);
    if let Some(first) = changed.first() {
        tracing::warn!(
            count = changed.len(),
            first = %first.display(),
            "files in the data directory were open to other users; now 0700 directories and 0600 files"
        );
    }
}
