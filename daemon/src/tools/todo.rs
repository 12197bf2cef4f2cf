//! `TodoWrite {todos}`: the agent's task list for the session. Each call replaces the list; the
//! list reaches clients as a `plan_updated` event (and so is kept in the session's log).

use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use serde_json::{Value, json};
use tether_proto::EventKind;

/// Keeps the task list.
pub struct TodoWrite;

impl Tool for TodoWrite {
    fn name(&self) -> &'static str {
        "TodoWrite"
    }

    fn description(&self) -> &'static str {
        "Keeps your task list for multi-step work, shown to the user. Send the whole list each time: each item has \
         content (imperative, e.g. \"Run the tests\"), activeForm (present continuous, e.g. \"Running the tests\") and \
         status (pending, in_progress, completed). Keep exactly one item in_progress while working."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "content": {"type": "string", "minLength": 1},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                            "activeForm": {"type": "string", "minLength": 1},
                            "id": {"type": "string"}
                        },
                        "required": ["content", "status", "activeForm"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["todos"],
            "additionalProperties": false
        })
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let todos = input["todos"].as_array().cloned().unwrap_or_default();
            let done = todos.iter().filter(|t| t["status"] == "completed").count();
            let active = todos
                .iter()
                .filter(|t| t["status"] == "in_progress")
                .count();
            (ctx.emit)(EventKind::PlanUpdated {
                todos: todos.clone(),
            });
            let mut text = format!(
                "Task list updated: {} items, {done} completed.",
                todos.len()
            );
            if active > 1 {
                text.push_str(" Note: keep only one item in_progress at a time.");
            }
            ToolOutput::text(text)
        })
    }
}
