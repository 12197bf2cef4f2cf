//! The query loop: a turn streams the model's reply, runs the tool calls it asks for, feeds the
//! results back, and repeats until the model stops; it recovers from `max_tokens` and retryable
//! errors and keeps the history valid through cancellation.
//!
//! Invariant: knows nothing of sockets, RPC or sled. Events leave through a [`TurnSink`]; the
//! history is derived from events by [`History`], the same way the session derives it from its
//! log.

mod budget;
mod commands;
mod compact;
mod dispatch;
mod history;
mod input;
mod prepare;
mod sink;
mod subagent;
mod title;
mod turn;
mod turn_context;

pub use budget::{Budget, Daily};
pub use commands::{
    BUILTIN as BUILTIN_COMMANDS, SlashCommand, list as list_commands, parse as parse_command,
};
pub use dispatch::{Call, INTERRUPTED};
pub use history::{History, MISSING_RESULT, SUMMARY_PREFIX};
pub use input::{Processed, mentions, process as process_input};
pub use prepare::{Prepared, Request as PrepareRequest, prepare, settle_context};
pub use sink::{PermissionAsk, SinkError, TurnSink, Verdict};
pub use subagent::Subagents;
pub use title::{TITLE_INSTRUCTION, generate as generate_title};
pub use turn::{CONTINUE_PROMPT, Turn, TurnOutcome};
pub use turn_context::{TASK_TOOL, TurnContext, TurnLimits};
