//! `Agent {description, prompt, subagent_type?, model?, effort?, name?}` (once `Task`, still an
//! alias): hands a self-contained job to a sub-agent of the type asked for (`agents.rs`) with
//! its own conversation, and returns its final answer.

use super::agents::{self, AgentDef, Found};
use crate::tools::{AgentJob, Tool, ToolContext, ToolFuture, ToolOutput};
use serde_json::{Value, json};

/// The type used when the call names none.
const DEFAULT_TYPE: &str = "general-purpose";

/// Starts a sub-agent of one of the types it knows.
pub struct Task {
    found: Found,
    description: String,
}

impl Task {
    /// A Task tool offering these types (their list is part of its description).
    pub fn new(found: Found) -> Self {
        let description = format!(
            "Hands a self-contained job (a search across the code base, a focused investigation, a \
             review) to a sub-agent with a fresh context. The prompt must say everything the \
             sub-agent needs and what to report back; you get its final answer only. Several \
             Agent calls in one reply run in parallel. subagent_type picks the kind of agent \
             (default {DEFAULT_TYPE}); model overrides its model (sonnet, opus, haiku), effort \
             how hard it thinks; name labels it while it works.\n\n\
             Available agent types:\n{}",
            agents::describe(&found.agents)
        );
        Self { found, description }
    }

    /// The types it offers.
    pub fn agents(&self) -> &[AgentDef] {
        &self.found.agents
    }
}

impl Tool for Task {
    fn name(&self) -> &str {
        "Agent"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "description": {"type": "string", "minLength": 1, "description": "The job in 3-5 words"},
                "prompt": {"type": "string", "minLength": 1, "description": "Everything the sub-agent needs to know and do"},
                "subagent_type": {"type": "string", "description": "The kind of agent (one of the available agent types)"},
                "model": {"type": "string", "description": "Model for this agent instead of its own (sonnet, opus, haiku)"},
                "effort": {"type": "string", "enum": ["low", "medium", "high", "xhigh", "max"], "description": "How hard this agent thinks instead of the session's effort"},
                "name": {"type": "string", "description": "A short name for this agent, shown while it works"}
            },
            "required": ["description", "prompt"],
            "additionalProperties": false
        })
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn changes_files(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let Some(runner) = ctx.subagents.clone() else {
                return ToolOutput::error(
                    "sub-agents cannot start further sub-agents; do this work yourself",
                );
            };
            let wanted = input["subagent_type"]
                .as_str()
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .unwrap_or(DEFAULT_TYPE);
            let Some(agent) = self.found.get(wanted) else {
                let known: Vec<&str> = self.found.agents.iter().map(|a| a.name.as_str()).collect();
                return ToolOutput::error(format!(
                    "there is no agent type {wanted:?}; the available types are: {}",
                    known.join(", ")
                ));
            };
            let description = input["description"].as_str().unwrap_or("task");
            let prompt = input["prompt"].as_str().unwrap_or_default();
            let model = input["model"].as_str().filter(|m| !m.trim().is_empty());
            let effort = input["effort"].as_str().and_then(crate::llm::Effort::parse);
            let name = input["name"]
                .as_str()
                .map(str::trim)
                .filter(|n| !n.is_empty());
            let job = AgentJob {
                agent,
                model,
                effort,
                name,
                description,
                prompt,
            };
            let (out, usage, cost) = runner.run(job, ctx).await;
            // Its requests are on the budget already, counted as they were made.
            ctx.tally(usage, cost);
            out
        })
    }
}
