//! Params and results of the JSON-RPC methods, and the small enums they share.

use crate::ids::{ConnectionId, Epoch, Seq, SessionId};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What kind of program a client is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ClientKind {
    /// The terminal client.
    Tui,
    /// An editor plugin.
    Editor,
    /// A script or headless run (the kind of a connection that never calls `initialize`).
    #[default]
    Script,
    /// A protocol bridge such as ACP.
    Bridge,
    /// An answer given with an approval token (`permission/approve`), whoever carried it.
    /// Only the daemon gives it; `initialize` refuses it.
    Link,
    /// A kind this build does not know.
    #[serde(other)]
    Other,
}

/// How a subscriber takes part in a session.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// May start turns and answer permission prompts.
    #[default]
    Controller,
    /// Watches only.
    Observer,
}

/// How tool calls are authorised in a session.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum PermissionMode {
    /// Ask for anything not allowed by a rule.
    #[default]
    Default,
    /// File edits in the working directories are allowed without asking.
    AcceptEdits,
    /// Only read-only tools run.
    Plan,
    /// Everything is allowed except `deny` rules.
    BypassPermissions,
    /// Anything not pre-allowed is denied without asking.
    DontAsk,
}

impl PermissionMode {
    /// The wire name, e.g. `acceptEdits`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::AcceptEdits => "acceptEdits",
            Self::Plan => "plan",
            Self::BypassPermissions => "bypassPermissions",
            Self::DontAsk => "dontAsk",
        }
    }

    /// The mode with this wire name (or `manual`, Claude Code's newer name for the default).
    pub fn parse(name: &str) -> Option<Self> {
        if name == "manual" {
            return Some(Self::Default);
        }
        [
            Self::Default,
            Self::AcceptEdits,
            Self::Plan,
            Self::BypassPermissions,
            Self::DontAsk,
        ]
        .into_iter()
        .find(|m| m.as_str() == name)
    }
}

/// Options of one turn (what headless runs ask for).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TurnOptions {
    /// Most model requests the turn may make before it stops with `max_turns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Permission rules that allow without asking, for this turn (`Bash(git diff:*)`, `Edit`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_tools: Vec<String>,
    /// Tools the model does not get in this turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disallowed_tools: Vec<String>,
    /// Text added to the end of the system prompt for this turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append_system_prompt: Option<String>,
    /// Effort level for this turn (`low`, `medium`, `high`, `xhigh`, `max`; what the model takes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// Ask the API for no thinking text (`display: omitted`): nobody will read it, and the answer
    /// starts sooner. Headless runs set it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hide_thinking: bool,
    /// Only these tools (names or aliases) for this turn; an empty list gives the model none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// The model to go on with when the session's model stays overloaded after every retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_model: Option<String>,
    /// MCP servers for this turn, in `.mcp.json`'s `mcpServers` shape (`--mcp-config`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_config: Option<serde_json::Value>,
    /// Only the servers of `mcpConfig`, none from the configuration files
    /// (`--strict-mcp-config`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict_mcp_config: bool,
    /// Directories besides the session's that this turn's tools may use without asking
    /// (`--add-dir`); absolute paths of existing directories.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add_dirs: Vec<String>,
    /// Instructions replacing tether's own for this turn (`--system-prompt`); the environment,
    /// git snapshot and memory files still follow them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// A settings object in Claude Code's `settings.json` shape applied to this turn on top of
    /// the files (`--settings`): its `permissions` rules and `additionalDirectories`, and its
    /// `hooks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<serde_json::Value>,
    /// An MCP tool (`mcp__server__tool`) that answers this turn's permission requests instead
    /// of a person (`--permission-prompt-tool`), as Claude Code calls it: input `{tool_name,
    /// input, tool_use_id}`, answer `{"behavior": "allow", "updatedInput"?}` or `{"behavior":
    /// "deny", "message"}` as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_prompt_tool: Option<String>,
    /// A JSON Schema (of an object) the turn's answer must match (`--json-schema`): the model
    /// gets a `StructuredOutput` tool with it and is sent back until it has called it; the
    /// call's input is the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<serde_json::Value>,
    /// The agent type the turn runs as (`--agent`): its prompt replaces tether's
    /// instructions, and its tools and model apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Sub-agent types for this turn besides the project's and the user's (`--agents`):
    /// `{"name": {"description", "prompt", "tools"?, "model"?}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<serde_json::Value>,
    /// The hook callbacks of the Agent SDK program starting the turn, as its `initialize`
    /// gives them (`{"PreToolUse": [{"matcher": "Bash", "hookCallbackIds": ["hook_0"],
    /// "timeout": 30}]}`): each runs as a `hook_callback` event the client answers with
    /// `hook/respond`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_callbacks: Option<serde_json::Value>,
}

/// What `models/list` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelList {
    /// The model of new sessions (alias or id).
    pub default_model: String,
    /// Aliases and the model each stands for.
    pub aliases: Vec<ModelAlias>,
    /// Every known model.
    pub models: Vec<ModelEntry>,
}

/// An alias (`opus`) and the id it resolves to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelAlias {
    /// The alias.
    pub alias: String,
    /// The model id.
    pub model: String,
}

/// One model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelEntry {
    /// The API id.
    pub id: String,
    /// Name for people.
    pub display_name: String,
    /// `opus`, `sonnet`, `haiku`, `fable`, `mythos`, or empty.
    pub family: String,
    /// Context window in tokens.
    pub context_window: u64,
    /// The window with `[1m]`, where the model has a longer one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_context_window: Option<u64>,
    /// Largest `max_tokens`.
    pub max_output: u32,
    /// `adaptive`, `adaptive (always on)`, `budget` or `none`.
    pub thinking: String,
    /// Effort levels it takes.
    pub efforts: Vec<String>,
    /// Its default effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_effort: Option<String>,
    /// USD per million tokens: input, output, 5-minute and 1-hour cache writes, cache reads;
    /// `None` when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<[f64; 5]>,
    /// `built-in`, `api` or `config`.
    pub source: String,
}

/// One configuration key as `daemon/config` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigEntry {
    /// Dotted key, as in config.toml (`api.max_retries`).
    pub key: String,
    /// Its effective value, as TOML.
    pub value: String,
    /// Where it came from: `default`, `file:line`, `env VAR` or `command line`.
    pub source: String,
    /// The environment variable that sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// What it does.
    pub doc: String,
}

/// One line of `daemon/doctor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// The verdict.
    pub status: crate::vocab::CheckStatus,
    /// What was found.
    pub detail: String,
}

/// Result of `daemon/config`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigReport {
    /// The configuration file read, if any.
    #[serde(default)]
    pub file: Option<String>,
    /// Every key.
    pub entries: Vec<ConfigEntry>,
}

impl ConfigReport {
    /// As aligned text: one `key = value   # source` line per key.
    pub fn render(&self) -> String {
        let mut out = match &self.file {
            Some(f) => format!("# from {f}, the environment and the command line\n"),
            None => "# no config file; defaults, the environment and the command line\n".into(),
        };
        let width = self
            .entries
            .iter()
            .map(|e| e.key.len() + e.value.len() + 3)
            .max()
            .unwrap_or(0);
        for e in &self.entries {
            let line = format!("{} = {}", e.key, e.value);
            out.push_str(&format!("{line:<width$}  # {}\n", e.source));
        }
        out
    }
}

/// What a session is doing.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// No turn is running.
    #[default]
    Idle,
    /// A turn is running.
    Running,
    /// A turn waits for a permission decision.
    AwaitingPermission,
}

impl SessionStatus {
    /// The wire name, e.g. `awaiting_permission`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Running => "running",
            Self::AwaitingPermission => "awaiting_permission",
        }
    }

    /// In words, for people: `waiting for permission`.
    pub fn words(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Running => "running",
            Self::AwaitingPermission => "waiting for permission",
        }
    }
}

/// Where a subscription starts: after a seq (0 = from the start), or at the head (live only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// Everything after this seq.
    Seq(Seq),
    /// Live events only.
    Head,
}

impl Serialize for Since {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Since::Seq(n) => s.serialize_u64(*n),
            Since::Head => s.serialize_str("head"),
        }
    }
}

impl<'de> Deserialize<'de> for Since {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Since;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a non-negative integer seq or \"head\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Since, E> {
                Ok(Since::Seq(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Since, E> {
                u64::try_from(v)
                    .map(Since::Seq)
                    .map_err(|_| E::custom("since must not be negative"))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Since, E> {
                if v == "head" {
                    Ok(Since::Head)
                } else {
                    Err(E::custom(format!(
                        "since must be an integer or \"head\", got {v:?}"
                    )))
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// Who a client says it is in `initialize`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientInfo {
    /// Program name, e.g. `tether`.
    pub name: String,
    /// Program version.
    #[serde(default)]
    pub version: String,
    /// Kind of client.
    #[serde(default)]
    pub kind: ClientKind,
}

/// What a client can do. On the wire an object (`{"permissions": true}`); anything else —
/// an array, a number — is invalid params, and unknown keys are ignored for newer clients.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(
    rename_all = "camelCase",
    try_from = "serde_json::Map<String, serde_json::Value>"
)]
pub struct Capabilities {
    /// Whether it answers permission prompts.
    #[serde(default)]
    pub permissions: bool,
}

impl TryFrom<serde_json::Map<String, serde_json::Value>> for Capabilities {
    type Error = String;

    fn try_from(map: serde_json::Map<String, serde_json::Value>) -> Result<Self, String> {
        let permissions = match map.get("permissions") {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::Bool(b)) => *b,
            Some(other) => {
                return Err(format!(
                    "capabilities.permissions must be true or false, not {other}"
                ));
            }
        };
        Ok(Self { permissions })
    }
}

/// The daemon's identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaemonInfo {
    /// The daemon's version.
    pub version: String,
    /// Its process id.
    pub pid: u32,
}

/// Result of `initialize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// The protocol version the daemon speaks.
    pub protocol_version: u32,
    /// The daemon.
    pub daemon: DaemonInfo,
    /// The daemon's epoch (changes on every start).
    pub epoch: Epoch,
    /// This connection's id, as it appears in `resolvedBy` and presence events.
    pub connection_id: ConnectionId,
}

/// A client as it appears in events (`by`, `resolvedBy`, presence).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientRef {
    /// The connection's id.
    pub client_id: ConnectionId,
    /// Its kind.
    pub kind: ClientKind,
    /// Its self-declared name, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// In cluster mode: the node the client is connected to (connection ids are per node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Who is at it, as the daemon knows them: the peer's Unix user on the local socket, the
    /// name `tether bridge --principal` gives over SSH. Never what the client says of itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// How it reached the daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<crate::vocab::Channel>,
}

impl ClientRef {
    /// Whether `other` is the same connection (same id on the same node).
    pub fn same(&self, other: &ClientRef) -> bool {
        self.client_id == other.client_id && self.node == other.node
    }
}

/// A client attached to a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttachedClient {
    /// The client.
    pub client: ClientRef,
    /// Its role.
    pub role: Role,
}

/// Result of `daemon/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaemonStatus {
    /// The daemon.
    pub daemon: DaemonInfo,
    /// Its epoch.
    pub epoch: Epoch,
    /// Milliseconds since it started.
    pub uptime_ms: u64,
    /// The socket it listens on.
    pub socket: String,
    /// Its data directory.
    pub data_dir: String,
    /// Sessions stored.
    pub sessions: u64,
    /// Sessions loaded in memory.
    pub loaded_sessions: u64,
    /// Open connections.
    pub connections: u64,
    /// Active subscriptions.
    pub subscriptions: u64,
    /// Whether it is draining.
    pub shutting_down: bool,
    /// The tools a session's model is offered, by name.
    #[serde(default)]
    pub tools: Vec<String>,
    /// The cluster this daemon is a node of (absent on one machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterInfo>,
}

/// A node's view of its cluster (`daemon/status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInfo {
    /// This node's name.
    pub node: String,
    /// The NATS servers it was given.
    pub servers: Vec<String>,
    /// Whether its connection to NATS is up.
    pub connected: bool,
    /// The nodes that announced themselves recently (this one included when connected).
    pub nodes: Vec<String>,
    /// The sessions this node runs, with the age of each lease's last renewal.
    pub held: Vec<HeldSession>,
}

/// A session a node runs, in [`ClusterInfo`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeldSession {
    /// The session.
    pub session_id: SessionId,
    /// Milliseconds since its lease was last renewed.
    pub lease_age_ms: u64,
}

/// Result of `daemon/shutdown`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShutdownResult {
    /// Always true: the daemon drains and exits after answering.
    pub stopping: bool,
}

/// One key of a Claude Code settings file, and what tether does with it (`settings/list`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettingsKey {
    /// The file.
    pub source: String,
    /// The key (`permissions.x` for a key inside `permissions`).
    pub key: String,
    /// Whether tether uses it.
    pub used: bool,
    /// What for, or "not used by tether".
    pub note: String,
}

/// Whether a directory's own files may act (`workspace/trust`): its settings' hooks, allow
/// rules, `env` and additional directories, its `.mcp.json` servers, its statusLine command.
/// Kept where Claude Code keeps it (`~/.claude.json`, `projects.<dir>.hasTrustDialogAccepted`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceTrust {
    /// The directory, resolved.
    pub dir: String,
    /// Whether it (or a directory above it) is trusted.
    pub trusted: bool,
    /// What of its own would act once trusted (`.claude/settings.json: hooks, 2 allow rules`,
    /// `.mcp.json: servers a, b`); empty when it has nothing to trust.
    pub acts: Vec<String>,
    /// The file the answer was written to, when this call changed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// Result of `session/new`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionNewResult {
    /// The new session's id.
    pub session_id: SessionId,
}

/// A session's metadata as `session/list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    /// Its id.
    pub session_id: SessionId,
    /// Its title, once it has one.
    #[serde(default)]
    pub title: Option<String>,
    /// The working directory it was created in.
    pub cwd: String,
    /// Model alias or id.
    pub model: String,
    /// Permission mode.
    pub permission_mode: PermissionMode,
    /// What permission requests do while no controller is attached.
    #[serde(default)]
    pub on_no_controller: NoControllerPolicy,
    /// What it is doing.
    pub status: SessionStatus,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// RFC 3339 time of its last event.
    pub updated_at: String,
    /// Seq of its last event.
    pub head_seq: Seq,
    /// The deltas of events at or below this seq may have been pruned (0: none were).
    #[serde(default)]
    pub pruned_through: Seq,
    /// Clients attached now.
    #[serde(default)]
    pub attached_clients: Vec<AttachedClient>,
    /// The people the owner gave a role in the session.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<Share>,
    /// In a search (`session/list` with `query`): the words around the first match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<String>,
}

/// Result of `session/list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionList {
    /// Most recently updated first.
    pub sessions: Vec<SessionSummary>,
    /// How many sessions match the filters, over all pages.
    #[serde(default)]
    pub total: usize,
    /// Pass as `cursor` for the next page; absent on the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Result of `session/get`: the full snapshot of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSnapshot {
    /// Its metadata.
    #[serde(flatten)]
    pub summary: SessionSummary,
    /// Permission requests waiting for an answer.
    #[serde(default)]
    pub pending_permissions: Vec<serde_json::Value>,
    /// Tokens used by every turn of the session.
    #[serde(default)]
    pub usage: TokenUsage,
    /// What the session cost so far; `None` when a model's price is unknown.
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// The most the session may spend (USD), if it has a cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    /// It reached its budget and sends the model nothing until the budget is raised.
    #[serde(default)]
    pub budget_reached: bool,
    /// The running turn, if any.
    #[serde(default)]
    pub running_turn: Option<crate::ids::TurnId>,
}

/// Token counts, as events and `session/get` report them.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    /// Uncached input tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens written to the prompt cache.
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    /// Input tokens read from the prompt cache.
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

impl TokenUsage {
    /// Adds another usage to this one.
    pub fn add(&mut self, o: &TokenUsage) {
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.cache_creation_input_tokens += o.cache_creation_input_tokens;
        self.cache_read_input_tokens += o.cache_read_input_tokens;
    }
}

/// Why a turn failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnError {
    /// Stable code, e.g. `auth`, `overloaded`, `prompt_too_long`.
    pub code: String,
    /// What happened.
    pub message: String,
    /// Whether trying again later may work.
    pub retryable: bool,
}

/// One item of a turn's input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum InputItem {
    /// Text (may contain `@path` mentions and start with a `/command`).
    Text {
        /// The text.
        text: String,
    },
    /// A file or directory attached by path.
    File {
        /// Its path (relative to the session's cwd, or absolute).
        path: String,
    },
    /// An image, by path or inline base64.
    Image {
        /// Its path.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        /// Base64 data.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        /// e.g. `image/png`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        media_type: Option<String>,
    },
    /// A document, inline: a PDF as base64, or plain text.
    Document {
        /// Base64 data (a PDF), or the text itself (`text/plain`).
        data: String,
        /// `application/pdf` or `text/plain`.
        media_type: String,
        /// Its title, when it has one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
    },
    /// An item of a type this build does not know (in a newer daemon's `turn_started`);
    /// `turn/start` refuses it.
    #[serde(other)]
    Unknown,
}

/// An answer to a permission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PermissionDecision {
    /// Run this call.
    AllowOnce,
    /// Run it and allow calls like it for the rest of the session.
    AllowSession,
    /// Run it and allow calls like it from now on (saved to `.claude/settings.local.json`).
    AllowAlways,
    /// Do not run it (the message, if any, goes to the model).
    Deny,
    /// The turn ended before anyone answered (never sent by clients).
    Cancelled,
}

impl PermissionDecision {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AllowOnce => "allow_once",
            Self::AllowSession => "allow_session",
            Self::AllowAlways => "allow_always",
            Self::Deny => "deny",
            Self::Cancelled => "cancelled",
        }
    }

    /// The decision a wire name names (never `cancelled`, which no client gives).
    pub fn parse(name: &str) -> Option<Self> {
        [
            Self::AllowOnce,
            Self::AllowSession,
            Self::AllowAlways,
            Self::Deny,
        ]
        .into_iter()
        .find(|d| d.as_str() == name)
    }
}

/// What happens to a permission request while no controller is attached.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct NoControllerPolicy {
    /// `wait` (the default), `deny` or `allow`.
    pub action: NoControllerAction,
    /// How long to wait for a controller before acting (milliseconds; 0 = at once).
    #[serde(default)]
    pub timeout_ms: u64,
}

/// The action of a [`NoControllerPolicy`].
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum NoControllerAction {
    /// Keep waiting for a controller.
    #[default]
    Wait,
    /// Deny the call.
    Deny,
    /// Allow the call once.
    Allow,
}

/// A slash command a session understands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommandInfo {
    /// Its name without the slash (`a:b` for `.claude/commands/a/b.md`).
    pub name: String,
    /// What it does (a custom command's `description`, else its first line).
    pub description: String,
    /// `builtin`, `project` or `user`.
    pub source: String,
}

/// One permission rule in effect, and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleEntry {
    /// What the rule does.
    pub kind: crate::vocab::RuleKind,
    /// As written, e.g. `Bash(npm run test:*)`.
    pub rule: String,
    /// A settings file's path, `session` (answered "don't ask again"), or this turn's options.
    pub source: String,
}

/// Result of `permission/rules`: what decides a session's tool calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionRules {
    /// The session's permission mode.
    pub mode: PermissionMode,
    /// Deny rules first, then ask, then allow (the order they are checked in).
    pub rules: Vec<RuleEntry>,
    /// Directories besides the session's cwd that tools may touch.
    pub additional_directories: Vec<String>,
    /// Rules that could not be read, each naming its file.
    pub problems: Vec<String>,
}

/// Result of `permission/respond`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionResponse {
    /// Whether this answer decided, or another came first.
    pub status: crate::vocab::ResponseStatus,
    /// The decision that holds.
    pub decision: PermissionDecision,
    /// Who made it.
    #[serde(default)]
    pub resolved_by: Option<ClientRef>,
}

/// What `turn/start` does while a turn runs.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum BusyMode {
    /// Refuse with `session_busy`.
    #[default]
    Reject,
    /// Run it after the current turn (and those queued before it).
    Queue,
}

/// Result of `turn/start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnStarted {
    /// The turn's id (the same for a repeated `clientTurnId`).
    pub turn_id: crate::ids::TurnId,
    /// Whether it waits behind another turn.
    pub queued: bool,
}

/// Result of `turn/cancel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnCancelled {
    /// Whether a turn was running (cancelling nothing is not an error).
    pub cancelled: bool,
}

/// Result of `session/export`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionExport {
    /// Its format.
    pub format: crate::vocab::ExportFormat,
    /// The export.
    pub content: String,
}

/// Result of `session/delete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionDeleted {
    /// The deleted session's id.
    pub session_id: SessionId,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_round_trips() {
        for (json, since) in [
            ("0", Since::Seq(0)),
            ("42", Since::Seq(42)),
            ("\"head\"", Since::Head),
        ] {
            let parsed: Since = serde_json::from_str(json).expect("parses");
            assert_eq!(parsed, since);
            assert_eq!(serde_json::to_string(&since).expect("serializes"), json);
        }
        assert!(serde_json::from_str::<Since>("-1").is_err());
        assert!(serde_json::from_str::<Since>("\"tail\"").is_err());
    }

    #[test]
    fn permission_modes_use_wire_names() {
        for mode in [
            PermissionMode::Default,
            PermissionMode::AcceptEdits,
            PermissionMode::Plan,
            PermissionMode::BypassPermissions,
            PermissionMode::DontAsk,
        ] {
            let json = serde_json::to_string(&mode).expect("serializes");
            assert_eq!(json, format!("\"{}\"", mode.as_str()));
            assert_eq!(PermissionMode::parse(mode.as_str()), Some(mode));
        }
        // Claude Code's newer name for the default mode.
        assert_eq!(
            PermissionMode::parse("manual"),
            Some(PermissionMode::Default)
        );
        assert_eq!(PermissionMode::parse("auto"), None);
    }
}

/// One MCP server as `mcp/list` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServerInfo {
    /// Its name (`mcp__<name>__<tool>`).
    pub name: String,
    /// `local`, `project`, `user` or `dynamic`.
    pub scope: String,
    /// `stdio`, `http` or `sse`.
    pub transport: String,
    /// The command line or URL (never header or environment values).
    pub target: String,
    /// The file it is configured in.
    pub source: String,
    /// `connected`, `starting`, `failed`, `stopped`, or `idle` (not started by this daemon).
    pub state: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its tools as the model sees them.
    pub tools: Vec<String>,
}

/// Result of `mcp/list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpList {
    /// The servers sessions in this directory get.
    pub servers: Vec<McpServerInfo>,
    /// Servers of the project's `.mcp.json` nobody has approved yet.
    pub unapproved: Vec<String>,
    /// Servers of the project's `.mcp.json` that were rejected.
    pub rejected: Vec<String>,
    /// What could not be read, each naming its file, line and key.
    pub problems: Vec<String>,
}

/// A change `mcp/configure` makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum McpChange {
    /// Adds (or replaces) a server.
    #[serde(rename_all = "camelCase")]
    Add {
        /// Its name.
        name: String,
        /// `local` (default), `project` or `user`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
        /// The entry, in `.mcp.json`'s shape.
        config: serde_json::Value,
    },
    /// Removes a server (from the scope given, else from the one it is found in).
    #[serde(rename_all = "camelCase")]
    Remove {
        /// Its name.
        name: String,
        /// `local`, `project` or `user`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
    },
    /// Approves or rejects servers of the project's `.mcp.json` (remembered where Claude Code
    /// remembers it).
    #[serde(rename_all = "camelCase")]
    Approve {
        /// The servers; empty for all of them.
        names: Vec<String>,
        /// Approve (`true`) or reject.
        approve: bool,
    },
}

/// Result of `mcp/configure`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpChanged {
    /// The file written.
    pub file: String,
    /// What was done, for people.
    pub message: String,
}

/// The working tree as a tool call left it: a commit of the daemon's snapshot store (never of
/// the user's repository).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkspaceSnapshot {
    /// The snapshot's commit.
    pub commit: String,
    /// Its tree: equal trees, equal working trees.
    pub tree: String,
    /// The working tree just before the call, when this is the turn's first call that changes
    /// files (what `/rewind` restores to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
}

/// A turn a session can be rewound to (`session/checkpoints`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// The turn, numbered from 1 in the order turns started.
    pub turn: u64,
    /// Its prompt, as typed (the first 200 characters).
    pub prompt: String,
    /// Whether tether changed files in it or after it (so `code` has something to restore).
    pub files: bool,
    /// Whether the conversation can go back to it (not before a `/clear` or `/compact`).
    pub conversation: bool,
}

/// What `session/rewind` puts back.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RewindScope {
    /// Files and conversation.
    #[default]
    Both,
    /// The files only.
    Code,
    /// The conversation only.
    Conversation,
}

/// Result of `session/rewind`: the `rewound` event's data, and the prompt of the turn rewound
/// to (a client offers it for editing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RewindResult {
    /// The turn the session went back to the start of.
    pub to_turn: u64,
    /// Its prompt.
    pub prompt: String,
    /// Whether files were put back.
    pub code: bool,
    /// Whether the conversation went back.
    pub conversation: bool,
    /// Files put back.
    pub restored: Vec<String>,
    /// Files tether changed that were also edited outside tether since: left as they are.
    pub kept: Vec<String>,
    /// Files edited outside tether since the last snapshot, not touched.
    pub outside: Vec<String>,
    /// Files that could not be put back, each with why (`path: reason`).
    #[serde(default)]
    pub failed: Vec<String>,
    /// The seq of the `rewound` event.
    pub seq: u64,
}

/// A role the session's owner gave someone (`session/share`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Share {
    /// The principal: a Unix user name, or the name a bridge gives.
    pub principal: String,
    /// What they may do.
    pub role: crate::vocab::SessionRole,
}

/// Result of `session/share`, `session/unshare` and `session/shares`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Shares {
    /// The session's owner (the daemon's user).
    pub owner: String,
    /// Everyone else with a role, by name.
    pub shares: Vec<Share>,
}

/// One permission decision, as `session/audit` reads it from the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// The session.
    pub session_id: SessionId,
    /// The seq of the event that records the decision.
    pub seq: crate::ids::Seq,
    /// When it was decided (RFC 3339).
    pub ts: String,
    /// The tool call.
    pub tool_call_id: String,
    /// The tool.
    pub tool: String,
    /// `sha256:` and the hex digest of the tool input's JSON (object keys sorted).
    pub input_hash: String,
    /// `allow_once`, `allow_session`, `allow_always`, `deny` or `cancelled`; an automatic
    /// allow is `allow_once`.
    pub decision: PermissionDecision,
    /// What decided.
    pub source: crate::vocab::DecisionSource,
    /// For a rule: its text, and where it is written (`file:line`, or `session`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// For a rule: the settings file and line it is written at, or `session`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_source: Option<String>,
    /// For the mode: the permission mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PermissionMode>,
    /// For a person: who answered (principal, client, kind, channel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<ClientRef>,
    /// For a person: the permission request answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// Result of `session/audit`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Audit {
    /// The decisions, oldest first (by session, then seq).
    pub entries: Vec<AuditEntry>,
}
