//! The daemon's MCP servers: one per (name, configuration, working directory), shared by every
//! session that configures the same server in the same directory. A server starts on first
//! use, stays up while sessions use it, and stops after `idle` without use. A supervisor task
//! per server restarts one that exits, with backoff (1 s doubling to 60 s; after five failed
//! starts in a row it waits for the next use).
//!
//! Invariant: a server that is down never fails a turn: its tools are missing (never started)
//! or answer with an `is_error` result saying why (crashed, restarting).

use super::client::{Connection, McpError, connect};
use super::config::{Limits, McpConfig, ServerConfig, Transport};
use super::tool::{Source, tools_of};
use crate::tools::Tools;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Failed starts in a row before the supervisor waits for the next use.
const MAX_ATTEMPTS: u32 = 5;

/// Where a server is in its life.
#[derive(Clone)]
pub enum State {
    /// Starting (attempt `n`, counting from 0).
    Starting(u32),
    /// Connected.
    Ready(Connection),
    /// Down: why, and whether the supervisor will try again by itself.
    Failed {
        /// Why.
        error: String,
        /// Whether a restart is scheduled.
        retrying: bool,
    },
    /// Stopped (idle, or the daemon is stopping).
    Stopped,
}

impl State {
    /// Its name in listings.
    pub fn word(&self) -> &'static str {
        match self {
            Self::Starting(_) => "starting",
            Self::Ready(_) => "connected",
            Self::Failed { .. } => "failed",
            Self::Stopped => "stopped",
        }
    }
}

/// One server.
pub struct Server {
    /// Its name.
    pub name: String,
    /// How it is reached.
    pub transport: Transport,
    cwd: PathBuf,
    state: watch::Sender<State>,
    tools: Mutex<Tools>,
    /// The connection's tools generation the listing was made at.
    listed_at: std::sync::atomic::AtomicU64,
    /// Tools dropped from its listing, and why.
    dropped: Mutex<Vec<String>>,
    last_used: Mutex<Instant>,
    /// Turns using it: a server is never idle while one runs, however long.
    users: std::sync::atomic::AtomicUsize,
    supervised: Mutex<Option<CancellationToken>>,
    limits: Limits,
}

impl Server {
    /// Its limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Its state now.
    pub fn state(&self) -> State {
        self.state.borrow().clone()
    }

    /// Its tools as last listed.
    pub fn tools(&self) -> Tools {
        self.tools.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// How long it has gone unused (zero while a turn uses it).
    fn idle_for(&self) -> Duration {
        if self.users.load(std::sync::atomic::Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        self.last_used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    /// Keeps it from being stopped as idle until the lease drops.
    fn lease(self: &Arc<Self>) -> Lease {
        self.users.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Lease(self.clone())
    }

    /// The connection, waiting for a start in progress (at most the start timeout).
    pub async fn connection(self: &Arc<Self>) -> Result<Connection, String> {
        self.touch();
        self.ensure_supervised();
        let mut rx = self.state.subscribe();
        let waited = tokio::time::timeout(
            self.limits.start,
            rx.wait_for(|s| {
                !matches!(s, State::Starting(_) | State::Failed { retrying: true, .. })
            }),
        )
        .await;
        let state = match waited {
            Ok(Ok(s)) => s.clone(),
            _ => self.state(),
        };
        match state {
            State::Ready(c) => Ok(c),
            State::Starting(_) => Err(format!(
                "the MCP server {} has not started within {} s",
                self.name,
                self.limits.start.as_secs()
            )),
            State::Failed { error, retrying } => Err(format!(
                "the MCP server {} is not connected ({error}){}",
                self.name,
                if retrying {
                    "; tether is restarting it"
                } else {
                    ""
                }
            )),
            State::Stopped => Err(format!("the MCP server {} was stopped", self.name)),
        }
    }

    /// Whether a supervisor runs it (or is waiting to restart it).
    fn is_supervised(&self) -> bool {
        self.supervised
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Starts the supervisor unless one runs.
    fn ensure_supervised(self: &Arc<Self>) {
        let mut slot = self.supervised.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_some() {
            return;
        }
        let stop = CancellationToken::new();
        *slot = Some(stop.clone());
        drop(slot);
        let me = self.clone();
        tokio::spawn(async move { me.supervise(stop).await });
    }

    async fn supervise(self: Arc<Self>, stop: CancellationToken) {
        let mut attempts = 0u32;
        loop {
            self.state.send_replace(State::Starting(attempts));
            let started = Instant::now();
            let connected = tokio::select! {
                r = tokio::time::timeout(self.limits.start, connect(&self.name, &self.transport, &self.cwd)) => r,
                _ = stop.cancelled() => break,
            };
            let error = match connected {
                Ok(Ok((running, conn))) => {
                    if let Err(e) = self.list(&conn).await {
                        tracing::warn!(target: "mcp", server = %self.name, "tools/list failed: {e}");
                    }
                    tracing::info!(target: "mcp", server = %self.name, ms = started.elapsed().as_millis() as u64, "connected");
                    self.state.send_replace(State::Ready(conn.clone()));
                    attempts = 0;
                    let closer = running.closer();
                    let closed = running.closed();
                    tokio::pin!(closed);
                    tokio::select! {
                        _ = &mut closed => "the server exited".to_owned(),
                        never = self.refresh_on_change(&conn) => match never {},
                        _ = stop.cancelled() => {
                            closer.close();
                            let _ = tokio::time::timeout(Duration::from_secs(5), closed).await;
                            break;
                        }
                    }
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no handshake within {} s", self.limits.start.as_secs()),
            };
            attempts += 1;
            let retrying = attempts < MAX_ATTEMPTS;
            tracing::warn!(target: "mcp", server = %self.name, attempts, "down: {error}");
            self.state.send_replace(State::Failed { error, retrying });
            if !retrying {
                // The next use starts it again.
                *self.supervised.lock().unwrap_or_else(|p| p.into_inner()) = None;
                return;
            }
            let backoff =
                Duration::from_secs(1 << (attempts - 1).min(6)).min(Duration::from_secs(60));
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.cancelled() => break,
            }
        }
        self.state.send_replace(State::Stopped);
    }

    /// Lists the tools again whenever the server says they changed; never returns (it ends
    /// when the connection's supervisor stops waiting on it).
    async fn refresh_on_change(self: &Arc<Self>, conn: &Connection) -> std::convert::Infallible {
        loop {
            conn.tools_changed().await;
            if let Err(e) = self.list(conn).await {
                tracing::warn!(target: "mcp", server = %self.name, "tools/list failed: {e}");
            }
        }
    }

    /// Lists the server's tools and keeps them (what is wrong with one drops it, with a note).
    async fn list(self: &Arc<Self>, conn: &Connection) -> Result<(), McpError> {
        use std::sync::atomic::Ordering;
        let generation = conn.tools_generation();
        let listed = conn.list_tools(self.limits.start).await?;
        let source: Arc<dyn Source> = self.clone();
        let (tools, dropped) = tools_of(&source, listed);
        *self.tools.lock().unwrap_or_else(|p| p.into_inner()) = tools;
        *self.dropped.lock().unwrap_or_else(|p| p.into_inner()) = dropped;
        self.listed_at.store(generation, Ordering::Release);
        Ok(())
    }

    /// Lists again when the server said its tools changed since the last listing.
    async fn current(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        if let State::Ready(conn) = self.state()
            && conn.tools_generation() > self.listed_at.load(Ordering::Acquire)
            && let Err(e) = self.list(&conn).await
        {
            tracing::warn!(target: "mcp", server = %self.name, "tools/list failed: {e}");
        }
    }

    /// Stops it (the supervisor closes the connection; a child process is killed).
    fn stop(&self) {
        if let Some(stop) = self
            .supervised
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            stop.cancel();
        }
    }

    /// Tools dropped from its listing and why.
    pub fn dropped(&self) -> Vec<String> {
        self.dropped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A turn's hold on a server: while it lives the server is not stopped as idle (taken before
/// the server starts, so a slow start is not mistaken for disuse either).
pub struct Lease(Arc<Server>);

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.touch();
        self.0
            .users
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Source for Server {
    fn name(&self) -> &str {
        &self.name
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn connect(
        self: Arc<Self>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Connection, String>> + Send>>
    {
        Box::pin(async move { self.connection().await })
    }
}

type Key = (String, Transport, PathBuf);

/// What a turn gets: the tools of its servers and what its user should be told.
#[derive(Default)]
pub struct ForTurn {
    /// The servers' tools.
    pub tools: Tools,
    /// Notices not yet told to this session.
    pub notices: Vec<String>,
    /// Holds the servers up while the turn runs (drop it when the turn ends).
    pub leases: Vec<Lease>,
}

/// Every server of the daemon.
pub struct McpServers {
    servers: Mutex<HashMap<Key, Arc<Server>>>,
    /// Per session, the notices already told.
    told: Mutex<HashMap<String, HashSet<String>>>,
    limits: Limits,
}

impl McpServers {
    /// An empty registry; its reaper stops idle servers.
    pub fn new(limits: Limits) -> Arc<Self> {
        let me = Arc::new(Self {
            servers: Mutex::new(HashMap::new()),
            told: Mutex::new(HashMap::new()),
            limits,
        });
        let weak = Arc::downgrade(&me);
        let tick = (me.limits.idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(tick).await;
                let Some(me) = weak.upgrade() else { return };
                me.reap();
            }
        });
        me
    }

    fn reap(&self) {
        let idle = self.limits.idle;
        let mut servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
        servers.retain(|_, s| {
            let keep = s.idle_for() < idle;
            if !keep {
                tracing::info!(target: "mcp", server = %s.name, "stopped after {} s unused", idle.as_secs());
                s.stop();
            }
            keep
        });
    }

    /// The limits every server gets.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The server for this configuration in `cwd`, created (not started) when new.
    pub fn server(&self, config: &ServerConfig, cwd: &Path) -> Arc<Server> {
        let key = (
            config.name.clone(),
            config.transport.clone(),
            cwd.to_owned(),
        );
        let mut servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
        servers
            .entry(key)
            .or_insert_with(|| {
                Arc::new(Server {
                    name: config.name.clone(),
                    transport: config.transport.clone(),
                    cwd: cwd.to_owned(),
                    state: watch::channel(State::Starting(0)).0,
                    tools: Mutex::new(Tools::default()),
                    listed_at: std::sync::atomic::AtomicU64::new(0),
                    dropped: Mutex::new(Vec::new()),
                    last_used: Mutex::new(Instant::now()),
                    users: Default::default(),
                    supervised: Mutex::new(None),
                    limits: self.limits.clone(),
                })
            })
            .clone()
    }

    /// The tools of `config`'s servers for a turn of `session`: servers that are starting
    /// are waited for (at most the start timeout, all together); ones that are down add what
    /// happened to the notices, once per session and state.
    pub async fn for_turn(&self, session: &str, config: &McpConfig, cwd: &Path) -> ForTurn {
        let servers: Vec<Arc<Server>> =
            config.servers.iter().map(|c| self.server(c, cwd)).collect();
        let leases = servers.iter().map(Server::lease).collect();
        let waits = servers.iter().map(|s| async move {
            // A restart after a crash happens in the background; the first start is waited for.
            let fresh = matches!(s.state(), State::Starting(0)) || !s.is_supervised();
            if fresh {
                let _ = s.connection().await;
            } else {
                s.touch();
                s.ensure_supervised();
            }
            s.current().await;
        });
        futures::future::join_all(waits).await;
        let mut out = ForTurn {
            leases,
            ..ForTurn::default()
        };
        let mut notices = config.problems.clone();
        if !config.unapproved.is_empty() {
            notices.push(format!(
                "this project's .mcp.json defines MCP servers not yet approved: {} (approve with `tether mcp approve` or /mcp, or set enableAllProjectMcpServers)",
                config.unapproved.join(", ")
            ));
        }
        for s in &servers {
            out.tools = out.tools.extend(&s.tools());
            match s.state() {
                State::Failed { error, .. } => {
                    notices.push(format!("MCP server {} failed: {error}", s.name));
                }
                State::Starting(_) if s.tools().is_empty() => notices.push(format!(
                    "MCP server {} is still starting; its tools come with a later turn",
                    s.name
                )),
                _ => {}
            }
            for d in s.dropped() {
                notices.push(format!("MCP server {}: {d}", s.name));
            }
        }
        let mut told = self.told.lock().unwrap_or_else(|p| p.into_inner());
        let seen = told.entry(session.to_owned()).or_default();
        out.notices = notices
            .into_iter()
            .filter(|n| seen.insert(n.clone()))
            .collect();
        out
    }

    /// The servers of `config` in `cwd` with their state (nothing is started).
    pub fn status(
        &self,
        config: &McpConfig,
        cwd: &Path,
    ) -> Vec<(ServerConfig, Option<Arc<Server>>)> {
        let servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
        config
            .servers
            .iter()
            .map(|c| {
                let key = (c.name.clone(), c.transport.clone(), cwd.to_owned());
                (c.clone(), servers.get(&key).cloned())
            })
            .collect()
    }

    /// Stops the server `name` of `config` and starts it again.
    pub fn reconnect(&self, config: &McpConfig, cwd: &Path, name: &str) -> bool {
        let Some(c) = config.servers.iter().find(|c| c.name == name) else {
            return false;
        };
        let key = (c.name.clone(), c.transport.clone(), cwd.to_owned());
        if let Some(old) = self
            .servers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key)
        {
            old.stop();
        }
        let s = self.server(c, cwd);
        s.touch();
        s.ensure_supervised();
        true
    }

    /// Forgets what a session was told (it was unloaded or deleted).
    pub fn forget(&self, session: &str) {
        self.told
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session);
    }

    /// Stops every server and waits (at most 5 s) until they are down (the daemon is
    /// stopping).
    pub async fn stop_all(&self) {
        let servers: Vec<Arc<Server>> = self
            .servers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, s)| s)
            .collect();
        let waits = servers.iter().map(|s| {
            let was_supervised = s.is_supervised();
            s.stop();
            let mut rx = s.state.subscribe();
            async move {
                if was_supervised {
                    let _ = rx.wait_for(|st| matches!(st, State::Stopped)).await;
                }
            }
        });
        let _ =
            tokio::time::timeout(Duration::from_secs(5), futures::future::join_all(waits)).await;
    }
}
