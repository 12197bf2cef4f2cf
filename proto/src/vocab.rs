//! The words the protocol uses as values: stop reasons, notice levels, detach reasons, shell
//! states, recovery actions, permission answer statuses, rule kinds, doctor verdicts, export
//! formats, the roles people have in a session, the channels they come through and where a
//! permission decision came from. Each is an enum, so neither side compares strings.
//!
//! Invariant: every enum a peer receives has an `Other` variant that keeps a value this build
//! does not know, so an older client keeps working with a newer daemon (and the value shows as
//! it was sent). Only what a client sends the daemon (`ExportFormat`) is closed: an unknown
//! value there is invalid params.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Why a turn (or one model reply) stopped: the API's reasons and tether's own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished.
    EndTurn,
    /// The reply reached its output limit.
    MaxTokens,
    /// A stop sequence matched.
    StopSequence,
    /// The model asked for tools.
    ToolUse,
    /// A server tool paused the turn.
    PauseTurn,
    /// The model refused.
    Refusal,
    /// The context window is full.
    ModelContextWindowExceeded,
    /// `turn/cancel`.
    Cancelled,
    /// The turn failed (`turn_ended.error` says why).
    Error,
    /// The daemon stopped during the turn.
    InterruptedByRestart,
    /// The turn made as many model requests as it may.
    MaxTurns,
    /// A daemon command (`/model`, `/cost`, …) was answered without the model.
    Command,
    /// `/compact` finished.
    Compacted,
    /// The session reached its budget (`budget_reached`).
    BudgetReached,
    /// A reason this build does not know, as it was sent.
    #[serde(untagged)]
    Other(String),
}

impl StopReason {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::EndTurn => "end_turn",
            Self::MaxTokens => "max_tokens",
            Self::StopSequence => "stop_sequence",
            Self::ToolUse => "tool_use",
            Self::PauseTurn => "pause_turn",
            Self::Refusal => "refusal",
            Self::ModelContextWindowExceeded => "model_context_window_exceeded",
            Self::Cancelled => "cancelled",
            Self::Error => "error",
            Self::InterruptedByRestart => "interrupted_by_restart",
            Self::MaxTurns => "max_turns",
            Self::Command => "command",
            Self::Compacted => "compacted",
            Self::BudgetReached => "budget_reached",
            Self::Other(s) => s,
        }
    }

    /// The reason named `s` (the API's `stop_reason`, say); an unknown one is kept as `Other`.
    pub fn parse(s: &str) -> Self {
        serde_json::from_value(serde_json::Value::String(s.to_owned()))
            .unwrap_or_else(|_| Self::Other(s.to_owned()))
    }

    /// Whether the turn ended as it should (the model finished, or a command was answered).
    pub fn is_normal(&self) -> bool {
        matches!(
            self,
            Self::EndTurn | Self::StopSequence | Self::Command | Self::Compacted
        )
    }
}

/// How much a notice matters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NoticeLevel {
    /// For information.
    Info,
    /// Something may be wrong.
    Warning,
    /// A level this build does not know, as it was sent.
    #[serde(untagged)]
    Other(String),
}

/// How a hook run ended (Claude Code's `hook_response.outcome`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HookOutcome {
    /// It ran and exited 0 (a callback: it answered).
    Success,
    /// It exited otherwise, could not start, or did not finish in time.
    Error,
    /// Its turn was cancelled while it ran.
    Cancelled,
    /// An outcome this build does not know, as it was sent.
    #[serde(untagged)]
    Other(String),
}

/// Why a client's subscription ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DetachReason {
    /// The client unsubscribed or its connection closed.
    Closed,
    /// It fell too far behind the live stream.
    Lagged,
    /// Its replay could not be read from the log.
    ReplayFailed,
    /// The stream ended (the session was deleted, or the daemon is shutting down).
    Ended,
    /// The session's owner took the client's principal's role away.
    Revoked,
    /// A reason this build does not know, as it was sent.
    #[serde(untagged)]
    Other(String),
}

impl DetachReason {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Closed => "closed",
            Self::Lagged => "lagged",
            Self::ReplayFailed => "replay_failed",
            Self::Ended => "ended",
            Self::Revoked => "revoked",
            Self::Other(s) => s,
        }
    }
}

/// How a background shell ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ShellState {
    /// Its command exited (`exitCode` says how).
    Exited,
    /// It was killed (KillShell, or the session ended).
    Killed,
    /// The daemon stopped while it ran; its later output is lost.
    Lost,
    /// A state this build does not know, as it was sent.
    #[serde(untagged)]
    Other(String),
}

/// What the daemon did with a turn it found open at start.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryAction {
    /// The turn waits for its permission requests again, and goes on once they are answered.
    AwaitingPermission,
    /// The turn was ended (`interrupted_by_restart`).
    Ended,
    /// An action this build does not know, as it was sent.
    #[serde(untagged)]
    Other(String),
}

/// What became of a `permission/respond`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResponseStatus {
    /// This answer decided the request.
    Accepted,
    /// Another answer (or the policy, or a cancel) decided it first.
    AlreadyResolved,
    /// An `afterHooks` answer, held while the request's PermissionRequest hooks run: it
    /// decides the request once they have run, unless they (or another answer) do first.
    Held,
    /// A status this build does not know, as it was sent.
    #[serde(untagged)]
    Other(String),
}

/// What a permission rule does.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleKind {
    /// Runs without asking.
    Allow,
    /// Asks even where the mode would allow.
    Ask,
    /// Refuses.
    Deny,
    /// A kind this build does not know, as it was sent.
    #[serde(untagged)]
    Other(String),
}

/// A `daemon/doctor` check's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// Fine.
    Ok,
    /// Works, but worth a look.
    Warn,
    /// Broken.
    Fail,
    /// A verdict this build does not know, as it was sent.
    #[serde(untagged)]
    Other(String),
}

/// What `session/export` renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExportFormat {
    /// A Markdown transcript.
    #[default]
    Markdown,
    /// One event per line, as logged.
    Jsonl,
}

macro_rules! display_as_str {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}

impl NoticeLevel {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Info => "info",
            Self::Warning => "warning",
            Self::Other(s) => s,
        }
    }
}

impl ShellState {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Exited => "exited",
            Self::Killed => "killed",
            Self::Lost => "lost",
            Self::Other(s) => s,
        }
    }
}

impl RecoveryAction {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::AwaitingPermission => "awaiting_permission",
            Self::Ended => "ended",
            Self::Other(s) => s,
        }
    }
}

impl ResponseStatus {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Accepted => "accepted",
            Self::AlreadyResolved => "already_resolved",
            Self::Held => "held",
            Self::Other(s) => s,
        }
    }
}

impl RuleKind {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Allow => "allow",
            Self::Ask => "ask",
            Self::Deny => "deny",
            Self::Other(s) => s,
        }
    }
}

impl CheckStatus {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "fail",
            Self::Other(s) => s,
        }
    }
}

impl ExportFormat {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Markdown => "markdown",
            Self::Jsonl => "jsonl",
        }
    }
}

display_as_str!(
    StopReason,
    NoticeLevel,
    DetachReason,
    ShellState,
    RecoveryAction,
    ResponseStatus,
    RuleKind,
    CheckStatus,
    ExportFormat
);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn known_words_round_trip_and_unknown_ones_are_kept() {
        for reason in [
            StopReason::EndTurn,
            StopReason::InterruptedByRestart,
            StopReason::ModelContextWindowExceeded,
        ] {
            let wire = serde_json::to_value(&reason).expect("encodes");
            assert_eq!(wire, json!(reason.as_str()));
            assert_eq!(StopReason::parse(reason.as_str()), reason);
        }
        let newer: StopReason = serde_json::from_value(json!("sleeping")).expect("decodes");
        assert_eq!(newer, StopReason::Other("sleeping".into()));
        assert_eq!(
            serde_json::to_value(&newer).expect("encodes"),
            json!("sleeping")
        );
        let status: ResponseStatus =
            serde_json::from_value(json!("already_resolved")).expect("decodes");
        assert_eq!(status, ResponseStatus::AlreadyResolved);
        assert_eq!(
            serde_json::from_value::<ShellState>(json!("paused")).expect("decodes"),
            ShellState::Other("paused".into())
        );
    }

    #[test]
    fn an_unknown_export_format_is_refused() {
        assert!(serde_json::from_value::<ExportFormat>(json!("pdf")).is_err());
        assert_eq!(
            serde_json::from_value::<ExportFormat>(json!("jsonl")).expect("decodes"),
            ExportFormat::Jsonl
        );
    }
}

/// What a person may do in a session. The owner (the daemon's own user) may do everything; the
/// others are granted by the owner (`session/share`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionRole {
    /// Everything, sharing included.
    Owner,
    /// Prompt, answer, configure, cancel, rewind.
    Controller,
    /// Answer permission requests, questions and plans; nothing else.
    Approver,
    /// Watch.
    Observer,
    /// A role this build does not know, as it was sent.
    #[serde(untagged)]
    Other(String),
}

impl SessionRole {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Owner => "owner",
            Self::Controller => "controller",
            Self::Approver => "approver",
            Self::Observer => "observer",
            Self::Other(s) => s,
        }
    }

    /// How much it allows: observer 1, approver 2, controller 3, owner 4 (an unknown role
    /// allows nothing).
    pub fn rank(&self) -> u8 {
        match self {
            Self::Owner => 4,
            Self::Controller => 3,
            Self::Approver => 2,
            Self::Observer => 1,
            Self::Other(_) => 0,
        }
    }

    /// The lesser of two roles.
    pub fn min(self, other: Self) -> Self {
        if other.rank() < self.rank() {
            other
        } else {
            self
        }
    }
}

impl std::fmt::Display for SessionRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a client reached the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// The daemon's Unix socket on its own machine.
    Local,
    /// `tether bridge` run by sshd (a forced command, or `--remote`).
    Ssh,
    /// An approval link (`permission/approve` with a token).
    Link,
    /// A channel this build does not know, as it was sent.
    #[serde(untagged)]
    Other(String),
}

impl Channel {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Local => "local",
            Self::Ssh => "ssh",
            Self::Link => "link",
            Self::Other(s) => s,
        }
    }
}

/// What decided a tool call's permission.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionSource {
    /// A permission rule from a settings file (or one added for the session).
    Rule,
    /// The permission mode alone (read-only inside the working directories, acceptEdits, …).
    Mode,
    /// A PreToolUse hook.
    Hook,
    /// The OS sandbox holds the command (`autoAllowBashIfSandboxed`).
    Sandbox,
    /// A person answered a permission request.
    Person,
    /// The daemon answered for nobody (the session's `onNoController` policy, a turn that
    /// ended).
    Daemon,
    /// A source this build does not know, as it was sent.
    #[serde(untagged)]
    Other(String),
}

impl DecisionSource {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Rule => "rule",
            Self::Mode => "mode",
            Self::Hook => "hook",
            Self::Sandbox => "sandbox",
            Self::Person => "person",
            Self::Daemon => "daemon",
            Self::Other(s) => s,
        }
    }
}
