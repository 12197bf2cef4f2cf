//! Plan mode's tools. `EnterPlanMode {}` puts the session in plan mode (only reading runs);
//! `ExitPlanMode {plan}` presents the plan for approval. The session's permission check does
//! the work (it switches the mode, and asks the controllers about the plan like a permission
//! request: allowed once → `default`, for the session → `acceptEdits`, denied → stay and
//! revise); these tools only tell the model where it stands.

use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use serde_json::{Value, json};

/// Enters plan mode.
pub struct EnterPlanMode;

impl Tool for EnterPlanMode {
    fn name(&self) -> &'static str {
        "EnterPlanMode"
    }

    fn description(&self) -> &'static str {
        "Switches the session to plan mode before a non-trivial change: you may read and search \
         but not change anything until the user approves a plan you present with ExitPlanMode."
    }

    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, _input: Value, _ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            ToolOutput::text(
                "The session is in plan mode. Explore and read what you need, then present your \
                 plan with ExitPlanMode; make no changes until the user approves it.",
            )
        })
    }
}

/// Presents the plan and leaves plan mode once the user approves it.
pub struct ExitPlanMode;

impl Tool for ExitPlanMode {
    fn name(&self) -> &'static str {
        "ExitPlanMode"
    }

    fn description(&self) -> &'static str {
        "In plan mode, presents your plan (Markdown, concise, the steps you will take) to the \
         user for approval. If they approve, the session leaves plan mode and you carry the plan \
         out; if not, revise it. Use it only for plans of changes to make, not for research."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "plan": {"type": "string", "description": "The plan, in Markdown."}
            }
        })
    }

    fn is_read_only(&self) -> bool {
        false
    }

    fn run<'a>(&'a self, _input: Value, _ctx: &'a ToolContext) -> ToolFuture<'a> {
        // Reached only once the user approved (the permission check refuses it otherwise).
        Box::pin(async move {
            ToolOutput::text(
                "The user approved your plan and the session has left plan mode. Carry it out \
                 now, starting with the first step.",
            )
        })
    }
}
