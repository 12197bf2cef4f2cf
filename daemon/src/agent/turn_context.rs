//! What a turn runs with, built once when the turn starts and shared — behind one `Arc` — by the
//! loop, the dispatcher, the tools' network access and sub-agents.
//!
//! Invariant: nothing in it changes during the turn; what does change (the history, the tally,
//! the model after a fallback) lives in the loop.

use super::turn::TurnLimits;
use crate::hooks::Hooks;
use crate::llm::{RequestPolicy, SystemBlock};
use crate::tools::{Net, Tools, Workspace};
use std::sync::Arc;

/// The name of the tool that starts sub-agents (left out of a child's tools).
pub const TASK_TOOL: &str = "Task";

/// Everything a turn runs with.
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
}

impl TurnContext {
    /// What a sub-agent of this turn runs with: the same, without the Task tool (which bounds
    /// recursion).
    pub fn for_child(&self) -> Self {
        let names: Vec<String> = self
            .tools
            .names()
            .into_iter()
            .filter(|n| *n != TASK_TOOL)
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
        }
    }
}
