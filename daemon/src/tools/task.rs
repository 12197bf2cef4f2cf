//! `Task {description, prompt, subagent_type?}`: hands a self-contained job to a sub-agent with
//! its own conversation and returns its final answer.

use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use serde_json::{Value, json};

/// Starts a sub-agent.
pub struct Task;

impl Tool for Task {
    fn name(&self) -> &'static str {
        "Task"
    }

    /// Claude Code's current name.
    fn aliases(&self) -> &'static [&'static str] {
        &["Agent"]
    }

    fn description(&self) -> &'static str {
        "Hands a self-contained job (a search across the code base, a focused investigation) to a sub-agent with a \
         fresh context and the same tools except Task. The prompt must say everything the sub-agent needs and what \
         to report back; you get its final answer only. Several Task calls in one reply run in parallel."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "description": {"type": "string", "minLength": 1, "description": "The job in 3-5 words"},
                "prompt": {"type": "string", "minLength": 1, "description": "Everything the sub-agent needs to know and do"},
                "subagent_type": {"type": "string", "description": "Kind of agent (general-purpose)"}
            },
            "required": ["description", "prompt"],
            "additionalProperties": false
        })
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let Some(agents) = ctx.subagents.clone() else {
                return ToolOutput::error(
                    "sub-agents cannot start further sub-agents; do this work yourself",
                );
            };
            let description = input["description"].as_str().unwrap_or("task");
            let prompt = input["prompt"].as_str().unwrap_or_default();
            let (out, usage, cost) = agents.run(description, prompt, ctx).await;
            ctx.spend(usage, cost);
            out
        })
    }
}
