//! Sub-agents: the query loop run on a child conversation with its own history, the agent
//! type's system prompt, tools and model (never the Task tool itself, which bounds recursion);
//! the tools reach it through [`SubagentRunner`]. The child's progress streams as the parent
//! call's `tool_progress`, and what it did (completed blocks and messages, tool calls and
//! results) is logged as the parent's `subagent_event`s; its usage counts toward the session.

use super::history::History;
use super::sink::{SinkError, TurnSink};
use super::turn::Turn;
use super::turn_context::TurnContext;
use crate::hooks::HookEvent;
use crate::llm::SystemBlock;
use crate::tools::{AgentJob, SubagentFuture, SubagentRunner, ToolContext, ToolOutput};
use serde_json::json;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tether_proto::{EventKind, StopReason, TokenUsage};

/// Runs child turns for the Task tool of one parent turn.
pub struct Subagents {
    /// What the children run with (the parent's context without the Task tool).
    pub ctx: Arc<TurnContext>,
    /// The session's environment block (working directory, platform, date), which an agent
    /// type with its own prompt gets after it.
    pub environment: Option<String>,
    /// The parent's outlet, which answers the children's permission checks.
    pub authorizer: Arc<dyn TurnSink>,
}

/// Collects a child's final answer, turns its events into progress text, and logs what it did
/// under the parent's call.
struct ChildSink {
    authorizer: Arc<dyn TurnSink>,
    progress: Arc<dyn Fn(String) + Send + Sync>,
    /// Sends an event in the parent's turn.
    emit: Arc<dyn Fn(EventKind) + Send + Sync>,
    /// The parent's call that runs the child.
    parent: String,
    /// The child's agent type.
    agent: String,
    text: Mutex<(String, String)>,
}

impl ChildSink {
    fn observe(&self, event: &EventKind) {
        if matches!(
            event,
            EventKind::AssistantBlockCompleted { .. }
                | EventKind::AssistantMessageCompleted { .. }
                | EventKind::ToolCall { .. }
                | EventKind::ToolResult { .. }
                | EventKind::Retrying { .. }
        ) {
            (self.emit)(EventKind::SubagentEvent {
                parent_tool_call_id: self.parent.clone(),
                agent: self.agent.clone(),
                event: Box::new(event.clone()),
            });
        }
        let mut text = self.text.lock().unwrap_or_else(|p| p.into_inner());
        match event {
            EventKind::TextDelta { text: t, .. } => (self.progress)(t.clone()),
            EventKind::ToolCall { name, input, .. } => {
                let mut arg = input.to_string();
                if arg.len() > 200 {
                    arg = arg.chars().take(200).collect::<String>() + "…";
                }
                (self.progress)(format!("\n[{name} {arg}]\n"));
            }
            EventKind::AssistantBlockCompleted { block, .. } => {
                if let Some(t) = block["text"].as_str() {
                    text.0.push_str(t);
                }
            }
            EventKind::Retrying { .. } => text.0.clear(),
            EventKind::AssistantMessageCompleted { .. } => {
                let current = std::mem::take(&mut text.0);
                if !current.trim().is_empty() {
                    text.1 = current;
                }
            }
            _ => {}
        }
    }
}

impl TurnSink for ChildSink {
    fn authorize(
        &self,
        ask: super::sink::PermissionAsk,
    ) -> Pin<Box<dyn Future<Output = Result<super::sink::Verdict, SinkError>> + Send + '_>> {
        self.authorizer.authorize(ask)
    }

    fn send(&self, event: EventKind) {
        self.observe(&event);
    }

    fn commit(
        &self,
        event: EventKind,
    ) -> Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send + '_>> {
        self.observe(&event);
        Box::pin(async { Ok(()) })
    }
}

impl SubagentRunner for Subagents {
    fn run<'a>(&'a self, job: AgentJob<'a>, ctx: &'a ToolContext) -> SubagentFuture<'a> {
        Box::pin(self.run_child(job, ctx))
    }
}

impl Subagents {
    /// Runs `job` as a child conversation of its type; returns its final answer and what it
    /// spent.
    async fn run_child(
        &self,
        job: AgentJob<'_>,
        ctx: &ToolContext,
    ) -> (ToolOutput, TokenUsage, Option<f64>) {
        let AgentJob {
            agent,
            model,
            effort,
            name,
            description,
            prompt,
        } = job;
        let system = agent.prompt.as_ref().map(|p| {
            std::iter::once(p.as_str())
                .chain(self.environment.as_deref())
                .map(SystemBlock::text)
                .collect()
        });
        let model = model.or(agent.model.as_deref()).map(str::to_owned);
        let child = match self
            .ctx
            .for_agent(&agent.name, agent.tools.as_deref(), system, model)
        {
            Ok(mut c) => {
                if effort.is_some() {
                    c.policy.effort = effort;
                }
                Arc::new(c)
            }
            Err(e) => return (ToolOutput::error(e), TokenUsage::default(), Some(0.0)),
        };
        let turn = Turn {
            ctx: child.clone(),
            cancel: ctx.cancel.child_token(),
            subagents: None,
        };
        let mut content = vec![json!({"type": "text", "text": prompt})];
        if child.hooks.has(HookEvent::SubagentStart) {
            let cwd = child.workspace.cwd();
            let mut input = child.hook_input(&cwd);
            input["agent_id"] = json!(uuid::Uuid::new_v4().to_string());
            let started = child
                .hooks
                .run(HookEvent::SubagentStart, Some(&agent.name), input, &cwd)
                .await;
            for n in started.notices {
                (ctx.progress)(format!("[{n}]\n"));
            }
            content.extend(
                started
                    .context
                    .into_iter()
                    .map(|c| json!({"type": "text", "text": c})),
            );
        }
        let mut history = History::default();
        history.apply(&EventKind::TurnStarted {
            input: Vec::new(),
            content,
            by: None,
            client_turn_id: None,
        });
        let sink = Arc::new(ChildSink {
            authorizer: self.authorizer.clone(),
            progress: ctx.progress.clone(),
            emit: ctx.emit.clone(),
            parent: ctx.call_id.clone(),
            agent: agent.name.clone(),
            text: Mutex::new((String::new(), String::new())),
        });
        let label = match name {
            Some(name) => format!("{name} ({})", agent.name),
            None => agent.name.clone(),
        };
        (ctx.progress)(format!("[sub-agent {label}: {description}]\n"));
        let outcome = turn.run(history, sink.clone()).await;
        let answer = sink
            .text
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone();
        let out = match (&outcome.error, &outcome.stop_reason) {
            (Some(e), _) => {
                ToolOutput::error(format!("the sub-agent failed ({}): {}", e.code, e.message))
            }
            (None, StopReason::Cancelled) => {
                ToolOutput::error("the sub-agent was interrupted before it finished")
            }
            (None, StopReason::BudgetReached) => ToolOutput::error(
                "the sub-agent stopped before it finished: the session reached its budget",
            ),
            (None, _) if answer.trim().is_empty() => {
                ToolOutput::error("the sub-agent finished without an answer")
            }
            (None, _) => ToolOutput::text(answer),
        };
        (out, outcome.usage, outcome.cost_usd)
    }
}
