//! `StructuredOutput`: the tool a turn run with `--json-schema` (`jsonSchema`) gets, as in
//! Claude Code: its input schema is the caller's schema, the model calls it once with its
//! final answer, the call's input (validated against the schema like any tool input) is the
//! structured result clients read from the `tool_call` event, and the turn loop sends the
//! model back until it has called it.

use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};

/// The tool's name.
pub const NAME: &str = "StructuredOutput";

/// The answer as a value matching the caller's schema.
pub struct StructuredOutput {
    schema: Value,
    done: AtomicBool,
}

impl StructuredOutput {
    /// The tool for `schema` (an object schema).
    pub fn new(schema: Value) -> Self {
        Self {
            schema,
            done: AtomicBool::new(false),
        }
    }

    /// Whether the model has called it with a valid answer.
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// What the turn tells the model when it stops without calling the tool.
    pub fn reminder() -> String {
        format!(
            "You have not given the structured answer yet: call the {NAME} tool now with your \
             final answer; its input must match its schema."
        )
    }

    /// The instruction added to the system prompt of such a turn.
    pub fn instruction() -> String {
        format!(
            "This run expects a structured answer: when you have it, call the {NAME} tool exactly \
             once with the final answer as its input (it must match the tool's schema), then stop."
        )
    }
}

impl Tool for StructuredOutput {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Returns the final answer of this run as structured data matching the requested schema. \
         Call it exactly once, at the end, with the complete answer."
    }

    fn input_schema(&self) -> Value {
        self.schema.clone()
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, _input: Value, _ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            // The dispatcher validated the input against the schema before this runs.
            self.done.store(true, Ordering::Release);
            ToolOutput::text("Structured output recorded.")
        })
    }
}
