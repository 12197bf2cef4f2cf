//! The `session/event` envelope and its event types.
//!
//! On the wire an event is `{sessionId, seq, epoch, ts, turnId?, type, data}`: the envelope
//! fields next to an adjacently tagged `type` + `data`. Stream-control events
//! (`replay_complete`, `lagged`, `session_deleted`, `daemon_shutdown`) carry no `seq`; every other
//! event has one, dense per session. Clients that must survive newer daemons decode the
//! envelope as JSON first and skip types they do not know. A replayed event is byte-for-byte the event as it happened.

use crate::ids::{Epoch, Seq, SessionId, TurnId};
use crate::types::{
    ClientRef, InputItem, PermissionDecision, PermissionMode, Role, SessionStatus, TokenUsage,
    TurnError, WorkspaceSnapshot,
};
use crate::vocab::{DetachReason, NoticeLevel, RecoveryAction, ShellState, StopReason};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One event of a session, as logged and as sent to subscribers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// The session it belongs to.
    pub session_id: SessionId,
    /// Its position in the session's log; absent on stream-control events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<Seq>,
    /// The daemon epoch it happened in.
    pub epoch: Epoch,
    /// RFC 3339 time it happened at (UTC, milliseconds).
    pub ts: String,
    /// The turn it belongs to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    /// Its type and data.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// The event types, tagged `type` with their payload in `data`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(
    tag = "type",
    content = "data",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum EventKind {
    /// Replay is over; what follows is live. Stream control.
    ReplayComplete {
        /// The last replayed seq (the log's head when the subscription started).
        head_seq: Seq,
    },
    /// This subscriber fell too far behind and its subscription ends; re-subscribe with
    /// `since: lastSeq`. Stream control.
    Lagged {
        /// The last seq delivered to this subscriber.
        last_seq: Seq,
    },
    /// The replay starts before `atSeq`, and the deltas of events up to `atSeq` were pruned: the
    /// session as it is now, then the kept events after `since` (completed blocks, tool calls and
    /// results, turn boundaries) with their original seqs, then everything after `atSeq` in full.
    /// Stream control.
    Snapshot {
        /// Deltas at or below this seq are gone.
        at_seq: Seq,
        /// The session's metadata when the subscription started.
        session: Box<crate::types::SessionSummary>,
    },
    /// The session was deleted; the subscription ends. Stream control.
    SessionDeleted {
        /// Who deleted it.
        #[serde(default)]
        by: Option<ClientRef>,
    },
    /// The daemon is shutting down; the subscription ends. Stream control.
    DaemonShutdown {},
    /// A JSON-RPC message for an in-process MCP server of the Agent SDK program that started
    /// the turn (`turnId`): the client that holds it answers with `mcp/respond`. Stream
    /// control, like `hook_callback`.
    McpMessage {
        /// Answer with this id.
        request_id: String,
        /// The server, as the program named it in the turn's MCP configuration.
        server: String,
        /// The JSON-RPC message.
        message: serde_json::Value,
    },
    /// A hook callback of the Agent SDK program that started the turn (`turnId`) is to run:
    /// the client that holds it answers with `hook/respond`. Stream control: not logged, and a
    /// callback not answered in time is a failed hook.
    HookCallback {
        /// Answer with this id.
        request_id: String,
        /// The callback, as the program named it in its `initialize` (`hook_0` …).
        callback_id: String,
        /// The hook's input, as a command hook gets it on stdin.
        input: serde_json::Value,
    },
    /// The session was created (always seq 1).
    SessionCreated {
        /// Working directory.
        cwd: String,
        /// Title, when given.
        #[serde(default)]
        title: Option<String>,
        /// Model alias or id.
        model: String,
        /// Permission mode.
        permission_mode: PermissionMode,
        /// Who created it.
        #[serde(default)]
        by: Option<ClientRef>,
    },
    /// Settings changed; only the changed fields are present.
    SessionConfigured {
        /// New title.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        /// New model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// New effort level (`""`: back to the model's default).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        effort: Option<String>,
        /// New permission mode.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        permission_mode: Option<PermissionMode>,
        /// New policy for permission requests while no controller is attached.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        on_no_controller: Option<crate::types::NoControllerPolicy>,
        /// New budget in USD (`0`: no cap); a session paused at its budget goes on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget_usd: Option<f64>,
        /// Who changed them.
        #[serde(default)]
        by: Option<ClientRef>,
    },
    /// The owner gave `principal` a role in the session (or changed it).
    SessionShared {
        /// Who: a Unix user name, or the name a bridge gives.
        principal: String,
        /// What they may do now.
        role: crate::vocab::SessionRole,
        /// Who shared it.
        #[serde(default)]
        by: Option<ClientRef>,
    },
    /// The owner took `principal`'s role away; their subscriptions end (`revoked`).
    SessionUnshared {
        /// Who.
        principal: String,
        /// The role they had.
        role: crate::vocab::SessionRole,
        /// Who took it away.
        #[serde(default)]
        by: Option<ClientRef>,
    },
    /// A client subscribed.
    ClientAttached {
        /// The client.
        client: ClientRef,
        /// Its role.
        role: Role,
    },
    /// A client's subscription ended.
    ClientDetached {
        /// The client.
        client: ClientRef,
        /// Its role.
        role: Role,
        /// Why: the client went away, fell behind, or its replay failed.
        reason: DetachReason,
    },
    /// What the session is doing changed.
    SessionStatus {
        /// The new status.
        status: SessionStatus,
    },
    /// A turn began; `content` is the user message sent to the model.
    TurnStarted {
        /// The input as the client gave it.
        input: Vec<InputItem>,
        /// The API content blocks built from it (text, attachments, images).
        content: Vec<Value>,
        /// Who started it.
        #[serde(default)]
        by: Option<ClientRef>,
        /// The client's id for the turn (idempotent retries).
        #[serde(default)]
        client_turn_id: Option<String>,
    },
    /// A turn ended.
    TurnEnded {
        /// The API's stop reason, or tether's (`cancelled`, `error`, `max_turns`, …).
        stop_reason: StopReason,
        /// Tokens of every request of the turn.
        usage: TokenUsage,
        /// What the turn cost; `None` when the model's price is unknown.
        #[serde(default)]
        cost_usd: Option<f64>,
        /// Why it failed, when it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<TurnError>,
        /// Milliseconds the turn spent waiting on the model's API.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_ms: Option<u64>,
        /// Who cancelled it (`turn/cancel`), when someone did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cancelled_by: Option<ClientRef>,
    },
    /// A content block of the model's reply began.
    AssistantBlockStarted {
        /// Block index within the reply.
        index: u32,
        /// Block type: `text`, `thinking`, `tool_use`, …
        kind: String,
        /// The block as it started (a tool_use carries its id and name).
        block: Value,
    },
    /// More text of a block.
    TextDelta {
        /// Block index.
        index: u32,
        /// The new text.
        text: String,
    },
    /// More thinking of a block.
    ThinkingDelta {
        /// Block index.
        index: u32,
        /// The new thinking text.
        thinking: String,
    },
    /// More of a tool call's input JSON.
    ToolInputDelta {
        /// Block index.
        index: u32,
        /// The new piece of JSON.
        partial_json: String,
    },
    /// A content block is complete: the verbatim API block.
    AssistantBlockCompleted {
        /// Block index.
        index: u32,
        /// The block.
        block: Value,
    },
    /// The model's reply is complete; its completed blocks are now part of the history.
    AssistantMessageCompleted {
        /// The model that answered.
        model: String,
        /// Tokens of this request.
        usage: TokenUsage,
        /// Why the model stopped.
        #[serde(default)]
        stop_reason: Option<StopReason>,
    },
    /// A tool call is about to run.
    ToolCall {
        /// The API's tool_use id.
        tool_call_id: String,
        /// The tool.
        name: String,
        /// Its input.
        input: Value,
    },
    /// Output of a running tool.
    ToolProgress {
        /// The call.
        tool_call_id: String,
        /// New output.
        chunk: String,
    },
    /// A tool call's result, as the model gets it.
    ToolResult {
        /// The call.
        tool_call_id: String,
        /// A string or content blocks.
        content: Value,
        /// Whether the call failed.
        is_error: bool,
        /// Extra detail for clients only (e.g. an Edit's unified diff); never sent to the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<Value>,
        /// The working tree as the call left it, for a tool that changes files (Edit, Write,
        /// MultiEdit, NotebookEdit, Bash, Task); none when snapshots are off or it could not be
        /// taken (a notice says why).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        snapshot: Option<WorkspaceSnapshot>,
    },
    /// A background shell (Bash `run_in_background`) ended: it exited, was killed, or was lost
    /// because the daemon stopped while it ran (then it is killed at the next start if it still
    /// runs).
    BackgroundShellEnded {
        /// Its id (`bash_1`).
        shell_id: String,
        /// The command it ran.
        command: String,
        /// `exited`, `killed` or `lost`.
        state: ShellState,
        /// Its exit code, when it exited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// What happened, in words.
        message: String,
    },
    /// The session was rewound to just before turn `to_turn` (numbered from 1 in the order
    /// turns started): its files (`code`), its conversation, or both. Nothing is deleted from
    /// the log; the turns after it stay in the transcript, and the model no longer sees them
    /// when the conversation was rewound.
    Rewound {
        /// The turn the session went back to the start of.
        to_turn: u64,
        /// Whether files were put back.
        code: bool,
        /// Whether the conversation went back.
        conversation: bool,
        /// Files put back as they were (or removed, where they did not exist then).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        restored: Vec<String>,
        /// Files tether changed that were also edited outside tether since: left as they are.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        kept: Vec<String>,
        /// Files edited outside tether since the last snapshot, not touched.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        outside: Vec<String>,
        /// Files that could not be put back, each with why (`path: reason`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        failed: Vec<String>,
        /// The working tree after the rewind (a snapshot commit).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        snapshot: Option<String>,
        /// Who rewound.
        #[serde(default)]
        by: Option<ClientRef>,
    },
    /// In a cluster: the node that took the session over rebuilt its working tree from the
    /// snapshots (its own directory, under its `cluster.workspaces`): the session works there
    /// from now on. The model is told with its next prompt.
    WorkspaceRestored {
        /// The node it now runs on.
        node: String,
        /// The session's directory there.
        cwd: String,
        /// The snapshot it was rebuilt from (`None`: no tool had changed a file yet, so the
        /// directory starts empty).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        snapshot: Option<String>,
        /// The tool call that left the tree in that state.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after_tool_call: Option<String>,
    },
    /// A command the user ran in the session's directory (`!command` at the prompt), without
    /// the model: what it printed goes into the conversation with the next prompt.
    ShellCommand {
        /// The command, as typed after `!`.
        command: String,
        /// What it wrote to stdout (cut to the first and last parts when long).
        stdout: String,
        /// What it wrote to stderr (likewise).
        stderr: String,
        /// Its exit code (`None`: killed, or it could not start).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
    },
    /// A tool call waits for a controller's decision.
    PermissionRequested {
        /// The request's id (answer it with `permission/respond`).
        request_id: String,
        /// The tool call it is about.
        tool_call_id: String,
        /// The tool.
        tool: String,
        /// Its input.
        input: Value,
        /// What it would do: the command, a diff, the URL.
        preview: String,
        /// The answers it takes.
        options: Vec<String>,
        /// The rule `allow_session` / `allow_always` would add (for a compound command, every
        /// rule of `rules`, comma-separated, for people).
        rule: String,
        /// Each rule those answers add: one per part of a compound command that no rule allows
        /// and that does more than read.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        rules: Vec<String>,
    },
    /// A tool call's permission was decided without asking anyone: by a rule, the mode, a
    /// hook or the sandbox. Logged before the call runs (or is refused), so `session/audit`
    /// can list every decision.
    PermissionDecided {
        /// The tool call.
        tool_call_id: String,
        /// The tool.
        tool: String,
        /// `allow_once` (it runs) or `deny`.
        decision: PermissionDecision,
        /// What decided.
        source: crate::vocab::DecisionSource,
        /// The rule that decided, as written.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
        /// Where that rule is written: `file:line`, or `session`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule_source: Option<String>,
        /// The permission mode the call was checked under.
        mode: PermissionMode,
        /// `sha256:` and the hex digest of the input checked (a PreToolUse hook may have
        /// changed the model's), its JSON with object keys sorted.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        input_hash: String,
    },
    /// A permission request was answered (or cancelled with its turn).
    PermissionResolved {
        /// The request.
        request_id: String,
        /// `allow_once`, `allow_session`, `allow_always`, `deny` or `cancelled`.
        decision: PermissionDecision,
        /// Who answered (absent when the daemon resolved it).
        #[serde(default)]
        resolved_by: Option<ClientRef>,
        /// The message given with a denial.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// The rule added (allow_session, allow_always); comma-separated when several were.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
        /// Each rule added.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        rules: Vec<String>,
    },
    /// A turn the daemon's stop cut short was repaired on restart.
    TurnRecovered {
        /// What was done, e.g. `ended`.
        action: RecoveryAction,
        /// Tool calls given an "interrupted" result.
        #[serde(default)]
        interrupted_tools: Vec<String>,
    },
    /// The agent's task list changed (TodoWrite).
    PlanUpdated {
        /// The items: `{content, status, activeForm}`.
        todos: Vec<Value>,
    },
    /// A model request failed and is retried; `discarded` deltas of the failed attempt are void.
    Retrying {
        /// Retry number, from 1.
        attempt: u32,
        /// Wait before it.
        delay_ms: u64,
        /// What failed.
        error: String,
        /// Whether deltas already streamed by the failed attempt must be dropped.
        discarded: bool,
    },
    /// The reply hit `max_tokens`; the model is asked to continue.
    Continuation {
        /// Continuation number, from 1.
        attempt: u32,
        /// The user message asking it to go on.
        prompt: String,
    },
    /// Token usage after a model request.
    UsageUpdated {
        /// Session totals.
        session: TokenUsage,
        /// Session cost so far; `None` when unknown.
        #[serde(default)]
        session_cost_usd: Option<f64>,
        /// How full the context window is (last request's input / window), in percent.
        #[serde(default)]
        context_percent: Option<f64>,
    },
    /// The conversation history was cleared (`/clear`); the log keeps it.
    HistoryCleared {},
    /// The session's prompt prefix, captured at its first model turn and sent verbatim ever
    /// after — across restarts, unloads and model changes — so the prompt cache keeps it.
    SystemPrompt {
        /// Tether's instructions.
        instructions: String,
        /// Working directory, platform, date.
        environment: String,
        /// The git snapshot (branch, status, recent commits).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        git: Option<String>,
        /// The memory files (CLAUDE.md, AGENTS.md, project notes).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memory: Option<String>,
    },
    /// What changed since the prefix (or the last update) was captured; it joins the next user
    /// message, at the tail of the conversation, so the prefix stays cached.
    ContextUpdated {
        /// Today's date, when it changed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        date: Option<String>,
        /// The git snapshot now, when it changed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        git: Option<String>,
        /// The memory files now, when they changed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memory: Option<String>,
    },
    /// The history is being summarized to free context.
    CompactionStarted {
        /// `auto`, `manual` or `prompt_too_long`.
        reason: String,
    },
    /// The history was replaced by a summary; the log keeps the original.
    CompactionCompleted {
        /// Context tokens before.
        tokens_before: u64,
        /// About how many tokens the summary takes.
        tokens_after: u64,
        /// The summary the conversation continues from.
        summary: String,
    },
    /// The model was overloaded; the turn goes on with the fallback model.
    ModelFallback {
        /// The overloaded model.
        from: String,
        /// The model used instead.
        to: String,
    },
    /// A failure a user should see (the turn may go on).
    Error {
        /// Stable code.
        code: String,
        /// What happened.
        message: String,
    },
    /// What a sub-agent did: its completed blocks and messages, its tool calls and their
    /// results, logged in the parent's turn under the `Agent` (`Task`) call that runs it. Its
    /// text also streams as that call's `tool_progress`.
    SubagentEvent {
        /// The parent's call that runs the sub-agent.
        parent_tool_call_id: String,
        /// The sub-agent's type.
        agent: String,
        /// The sub-agent's own event.
        event: Box<EventKind>,
    },
    /// The session reached its budget: the next model request would take its spend past it.
    /// The turn ends (`budget_reached`) and the session sends the model nothing more until
    /// the budget is raised; prompts already queued wait.
    BudgetReached {
        /// The cap.
        budget_usd: f64,
        /// What the session has spent.
        spent_usd: f64,
        /// What the next request's input alone would have cost (at the input price).
        next_request_usd: f64,
        /// The cap is the daemon's daily one (`daily_budget_usd`), for all sessions together:
        /// the session is not paused, and each prompt stops here until the day is over.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        daily: bool,
    },
    /// A hook began to run: a command of the settings, or a callback of the Agent SDK program
    /// that started the turn.
    HookStarted {
        /// Pairs it with its `hook_response`.
        hook_id: String,
        /// The event and what it matched, as Claude Code names it (`PreToolUse:Bash`).
        hook_name: String,
        /// The hook event (`PreToolUse` …).
        hook_event: String,
    },
    /// A hook finished: what it printed and how it ended.
    HookResponse {
        /// The `hook_started` it ends.
        hook_id: String,
        /// As in `hook_started`.
        hook_name: String,
        /// As in `hook_started`.
        hook_event: String,
        /// Its standard output (at most 64 KiB; a callback: its answer as JSON).
        stdout: String,
        /// Its standard error (at most 64 KiB), or why it did not run to its end.
        stderr: String,
        /// A command's exit code (none: a callback, or it never exited).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// How it ended.
        outcome: crate::vocab::HookOutcome,
    },
    /// Something a user should know that is not an error.
    Notice {
        /// `info` or `warning`.
        level: NoticeLevel,
        /// The text.
        message: String,
    },
}

/// A tool result's or message's `content` as text: a string as it is, content blocks as their
/// text with `[image]`-style markers for the rest, one block per line.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| match b["type"].as_str() {
                Some("text") => b["text"].as_str().unwrap_or("").to_owned(),
                Some(other) => format!("[{other}]"),
                None => String::new(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

impl EventKind {
    /// The wire `type` string.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::ReplayComplete { .. } => "replay_complete",
            Self::Lagged { .. } => "lagged",
            Self::Snapshot { .. } => "snapshot",
            Self::SessionDeleted { .. } => "session_deleted",
            Self::DaemonShutdown {} => "daemon_shutdown",
            Self::HookCallback { .. } => "hook_callback",
            Self::McpMessage { .. } => "mcp_message",
            Self::SessionCreated { .. } => "session_created",
            Self::SessionConfigured { .. } => "session_configured",
            Self::SessionShared { .. } => "session_shared",
            Self::SessionUnshared { .. } => "session_unshared",
            Self::ClientAttached { .. } => "client_attached",
            Self::ClientDetached { .. } => "client_detached",
            Self::SessionStatus { .. } => "session_status",
            Self::Notice { .. } => "notice",
            Self::SubagentEvent { .. } => "subagent_event",
            Self::BudgetReached { .. } => "budget_reached",
            Self::HookStarted { .. } => "hook_started",
            Self::HookResponse { .. } => "hook_response",
            Self::TurnStarted { .. } => "turn_started",
            Self::TurnEnded { .. } => "turn_ended",
            Self::AssistantBlockStarted { .. } => "assistant_block_started",
            Self::TextDelta { .. } => "text_delta",
            Self::ThinkingDelta { .. } => "thinking_delta",
            Self::ToolInputDelta { .. } => "tool_input_delta",
            Self::AssistantBlockCompleted { .. } => "assistant_block_completed",
            Self::AssistantMessageCompleted { .. } => "assistant_message_completed",
            Self::ToolCall { .. } => "tool_call",
            Self::ToolProgress { .. } => "tool_progress",
            Self::ToolResult { .. } => "tool_result",
            Self::BackgroundShellEnded { .. } => "background_shell_ended",
            Self::ShellCommand { .. } => "shell_command",
            Self::Rewound { .. } => "rewound",
            Self::WorkspaceRestored { .. } => "workspace_restored",
            Self::PlanUpdated { .. } => "plan_updated",
            Self::TurnRecovered { .. } => "turn_recovered",
            Self::PermissionRequested { .. } => "permission_requested",
            Self::PermissionDecided { .. } => "permission_decided",
            Self::PermissionResolved { .. } => "permission_resolved",
            Self::Retrying { .. } => "retrying",
            Self::Continuation { .. } => "continuation",
            Self::UsageUpdated { .. } => "usage_updated",
            Self::HistoryCleared {} => "history_cleared",
            Self::SystemPrompt { .. } => "system_prompt",
            Self::ContextUpdated { .. } => "context_updated",
            Self::CompactionStarted { .. } => "compaction_started",
            Self::CompactionCompleted { .. } => "compaction_completed",
            Self::ModelFallback { .. } => "model_fallback",
            Self::Error { .. } => "error",
        }
    }

    /// Whether the event is a streaming delta (superseded by a `*_completed` event).
    pub fn is_delta(&self) -> bool {
        matches!(
            self,
            Self::TextDelta { .. }
                | Self::ThinkingDelta { .. }
                | Self::ToolInputDelta { .. }
                | Self::ToolProgress { .. }
        )
    }

    /// Whether the event ends the subscription that carries it.
    pub fn ends_subscription(&self) -> bool {
        matches!(
            self,
            Self::Lagged { .. } | Self::SessionDeleted { .. } | Self::DaemonShutdown {}
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::ConnectionId;
    use crate::types::ClientKind;
    use serde_json::json;

    #[test]
    fn envelope_is_adjacently_tagged_and_camel_case() {
        let ev = Event {
            session_id: "s1".into(),
            seq: Some(3),
            epoch: 2,
            ts: "2026-01-01T00:00:00.000Z".into(),
            turn_id: None,
            kind: EventKind::ClientAttached {
                client: ClientRef {
                    client_id: ConnectionId(7),
                    kind: ClientKind::Tui,
                    name: Some("tether".into()),
                    node: None,
                    principal: None,
                    channel: None,
                },
                role: Role::Observer,
            },
        };
        let v = serde_json::to_value(&ev).expect("serializes");
        assert_eq!(
            v,
            json!({
                "sessionId": "s1", "seq": 3, "epoch": 2, "ts": "2026-01-01T00:00:00.000Z",
                "type": "client_attached",
                "data": {"client": {"clientId": 7, "kind": "tui", "name": "tether"}, "role": "observer"}
            })
        );
        let back: Event = serde_json::from_value(v).expect("deserializes");
        assert_eq!(back, ev);
    }

    #[test]
    fn stream_control_events_have_no_seq() {
        let ev = Event {
            session_id: "s1".into(),
            seq: None,
            epoch: 1,
            ts: "t".into(),
            turn_id: None,
            kind: EventKind::ReplayComplete { head_seq: 9 },
        };
        let v = serde_json::to_value(&ev).expect("serializes");
        assert!(v.get("seq").is_none());
        assert_eq!(v["data"]["headSeq"], 9);
    }
}
