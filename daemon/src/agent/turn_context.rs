//! What a turn runs with, built once when the turn starts and shared — behind one `Arc` — by the
//! loop, the dispatcher, the tools' network access and sub-agents.
//!
//! Invariant: nothing in it changes during the turn but the budget's meter, which the turn and
//! its sub-agents share (`budget.rs`); what else changes (the history, the tally, the model
//! after a fallback) lives in the loop.

use crate::hooks::Hooks;
use crate::llm::{RequestPolicy, SystemBlock};
use crate::tools::{Net, Tools, Workspace};
use std::sync::Arc;
use std::time::Duration;
use tether_proto::{PermissionMode, TokenUsage};

/// The name of the tool that starts sub-agents (left out of a child's tools).
pub const TASK_TOOL: &str = "Agent";

/// Everything a turn runs with.
#[derive(Clone)]
pub struct TurnContext {
    /// The session's id (hooks receive it).
    pub session_id: String,
    /// Model alias or id.
    pub model: String,
    /// The system prompt.
    pub system: Vec<SystemBlock>,
    /// The tools.
    pub tools: Tools,
    /// The model client, the catalog, the web fetcher and the fast model.
    pub net: Arc<Net>,
    /// The session's directories.
    pub workspace: Arc<Workspace>,
    /// Limits.
    pub limits: TurnLimits,
    /// Thinking, effort and betas asked for (each request takes what its model supports).
    pub policy: RequestPolicy,
    /// The project's hooks.
    pub hooks: Arc<Hooks>,
    /// The session's permission mode when the turn started (hooks receive it).
    pub permission_mode: PermissionMode,
    /// What the session had spent when the turn started (tokens, cost if known), so usage
    /// updates can show the session's totals.
    pub spent_before: (TokenUsage, Option<f64>),
    /// Where hooks find the conversation (`transcript_path`), rewritten before hooks that
    /// can read it run.
    pub transcript: Option<std::path::PathBuf>,
    /// The sub-agent type this context runs, in a sub-agent.
    pub agent: Option<String>,
    /// The MCP tool that answers this turn's permission asks (`permissionPromptTool`).
    pub prompt_tool: Option<String>,
    /// The StructuredOutput tool of a run that wants a structured answer (`jsonSchema`).
    pub structured: Option<Arc<crate::tools::structured::StructuredOutput>>,
    /// The session's spending cap, if it has one.
    pub budget: Option<Arc<super::Budget>>,
    /// Where the working tree is recorded after calls that change files (none: snapshots are
    /// off, or this is a sub-agent, whose parent's Task call is snapshotted).
    pub snapshots: Option<crate::snapshots::TurnSnapshots>,
}

impl TurnContext {
    /// The fields every hook of this turn receives (Claude Code's names): `session_id`,
    /// `transcript_path`, `cwd`, `permission_mode`, and in a sub-agent `agent_type`.
    pub fn hook_input(&self, cwd: &std::path::Path) -> serde_json::Value {
        let mut input = serde_json::json!({
            "session_id": self.session_id,
            "transcript_path": self.transcript,
            "cwd": cwd,
            "permission_mode": self.permission_mode.as_str(),
        });
        if let Some(agent) = &self.agent {
            input["agent_type"] = serde_json::json!(agent);
        }
        input
    }

    /// [`hook_input`](Self::hook_input), after writing the conversation so far to
    /// `transcript_path` (one JSON line per message, `{"type", "message", "sessionId", "cwd"}`
    /// as Claude Code's transcripts have them; a sub-agent writes only its parent's file).
    pub fn hook_input_with(
        &self,
        cwd: &std::path::Path,
        history: &super::history::History,
    ) -> serde_json::Value {
        if let (Some(path), None) = (&self.transcript, &self.agent) {
            let mut text = String::new();
            for m in history.messages() {
                let role = serde_json::to_value(m.role).unwrap_or_default();
                let line = serde_json::json!({
                    "type": role,
                    "sessionId": self.session_id,
                    "cwd": cwd,
                    "message": {"role": role, "content": m.content},
                });
                text.push_str(&line.to_string());
                text.push('\n');
            }
            let written = path
                .parent()
                .map_or(Ok(()), tether_proto::private::create_dir_all)
                .and_then(|()| tether_proto::private::write(path, text.as_bytes()));
            if let Err(e) = written {
                tracing::warn!(
                    "cannot write the transcript for hooks ({}): {e}",
                    path.display()
                );
            }
        }
        self.hook_input(cwd)
    }

    /// What a sub-agent of this turn runs with: the same, without the Task tool (which bounds
    /// recursion) and the tools that talk to the user (a sub-agent reports to its caller).
    pub fn for_child(&self) -> Self {
        let names: Vec<String> = self
            .tools
            .names()
            .into_iter()
            .filter(|n| {
                ![
                    TASK_TOOL,
                    crate::tools::structured::NAME,
                    "AskUserQuestion",
                    "EnterPlanMode",
                    "ExitPlanMode",
                ]
                .contains(n)
            })
            .map(str::to_owned)
            .collect();
        Self {
            session_id: self.session_id.clone(),
            model: self.model.clone(),
            system: self.system.clone(),
            tools: self.tools.subset(&names),
            net: self.net.clone(),
            workspace: self.workspace.clone(),
            limits: self.limits.clone(),
            policy: self.policy.clone(),
            hooks: self.hooks.clone(),
            permission_mode: self.permission_mode,
            // A child's usage updates are not shown.
            spent_before: (TokenUsage::default(), Some(0.0)),
            transcript: self.transcript.clone(),
            agent: self.agent.clone(),
            prompt_tool: self.prompt_tool.clone(),
            structured: None,
            // Its requests count toward the session's cap.
            budget: self.budget.clone(),
            // The parent's Task call is snapshotted when the child is done.
            snapshots: None,
        }
    }

    /// A sub-agent type's context from [`for_child`](Self::for_child)'s: only `tools` (by
    /// name; `Bash(…)`-style rules count as their tool) when given, its own system prompt and
    /// model when given. Fails when none of the tools exist here.
    pub fn for_agent(
        &self,
        name: &str,
        tools: Option<&[String]>,
        system: Option<Vec<crate::llm::SystemBlock>>,
        model: Option<String>,
    ) -> Result<Self, String> {
        let mut child = self.clone();
        child.agent = Some(name.to_owned());
        if let Some(wanted) = tools {
            let names: Vec<String> = wanted
                .iter()
                .map(|t| t.split('(').next().unwrap_or("").trim().to_owned())
                .filter(|t| !crate::tools::names::same(t, TASK_TOOL))
                .collect();
            child.tools = self.tools.subset(&names);
            if child.tools.is_empty() && !names.is_empty() {
                return Err(format!(
                    "none of this agent's tools ({}) are available here",
                    names.join(", ")
                ));
            }
        }
        if let Some(system) = system {
            child.system = system;
        }
        if let Some(model) = model {
            child.model = model;
        }
        Ok(child)
    }
}

/// Limits of a turn.
#[derive(Debug, Clone)]
pub struct TurnLimits {
    /// `max_tokens` of each request, capped by the model's own limit; 0 is the model's limit.
    pub max_tokens: u32,
    /// Continuations after `max_tokens`.
    pub max_continuations: u32,
    /// Model requests per turn before it stops with `max_turns`.
    pub max_requests: u32,
    /// Longest a tool call may run.
    pub tool_timeout: Duration,
    /// Compact before a request once the last one filled this much of the context window
    /// (percent); `None` disables automatic compaction.
    pub auto_compact_percent: Option<f64>,
    /// Model to switch to when the model stays overloaded after every retry.
    pub fallback_model: Option<String>,
}

impl Default for TurnLimits {
    fn default() -> Self {
        Self {
            max_tokens: 0,
            max_continuations: 3,
            max_requests: 200,
            tool_timeout: Duration::from_secs(600),
            auto_compact_percent: Some(90.0),
            fallback_model: None,
        }
    }
}
