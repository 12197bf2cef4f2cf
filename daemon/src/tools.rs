//! The built-in tools, one file each. Each follows Claude Code's name and input fields, so
//! prompts and habits carry over. `tool.rs` is the `Tool` trait, `ToolContext` and the `Tools`
//! registry; `workspace.rs` the session's directories; `jobs.rs` its background shells;
//! `names.rs` the one table of tool names and aliases;
//! `agents.rs` the sub-agent types the Task tool offers; `skills.rs` the skills the Skill tool
//! loads; `structured.rs` the tool of runs that want a structured answer.
//!
//! Invariant: tools know nothing of the query loop; sub-agents reach it through the
//! [`SubagentRunner`] trait the loop implements.

pub mod agents;
mod ask;
mod bash;
mod capture;
pub(crate) mod edit;
mod glob;
mod grep;
mod jobs;
mod ls;
pub mod names;
mod notebook;
mod pdf;
mod plan;
mod read;
mod shell;
mod skill;
pub mod skills;
pub mod structured;
mod task;
mod todo;
mod tool;
pub mod walk;
mod web_fetch;
mod web_search;
mod workspace;
mod write;

pub use bash::reap_orphan;
pub use jobs::{Job, JobEnd, Jobs};
pub use read::MAX_IMAGE_BYTES;
pub use skill::Skill;
pub use task::Task;
pub use tool::{
    AgentJob, Net, Spent, SubagentFuture, SubagentRunner, Tool, ToolContext, ToolFuture,
    ToolOutput, Tools,
};
pub use workspace::{FileStamp, HOST_SUFFIX, Workspace, normalize};

use std::sync::Arc;

/// Every built-in tool.
pub fn builtin() -> Tools {
    let tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(bash::Bash::default()),
        Arc::new(bash::BashOutput),
        Arc::new(bash::KillShell),
        Arc::new(read::Read),
        Arc::new(write::Write),
        Arc::new(edit::Edit),
        Arc::new(edit::MultiEdit),
        Arc::new(glob::Glob),
        Arc::new(grep::Grep),
        Arc::new(ls::Ls),
        Arc::new(notebook::NotebookEdit),
        Arc::new(todo::TodoWrite),
        Arc::new(task::Task::new(agents::Found::builtin())),
        Arc::new(skill::Skill::new(skills::Skills::default())),
        Arc::new(web_fetch::WebFetch),
        Arc::new(web_search::WebSearch),
        Arc::new(ask::AskUserQuestion),
        Arc::new(plan::EnterPlanMode),
        Arc::new(plan::ExitPlanMode),
    ];
    Tools::new(tools)
}

#[cfg(test)]
mod tests;

/// What a call would do, for a permission prompt: the command, a diff, the URL.
pub fn preview(tool: &str, input: &serde_json::Value, cwd: &std::path::Path) -> String {
    let path = |k: &str| {
        let p = std::path::PathBuf::from(input[k].as_str().unwrap_or_default());
        if p.is_absolute() { p } else { cwd.join(p) }
    };
    match tool {
        "Bash" => input["command"].as_str().unwrap_or_default().to_owned(),
        "WebFetch" => input["url"].as_str().unwrap_or_default().to_owned(),
        "ExitPlanMode" => input["plan"].as_str().unwrap_or_default().to_owned(),
        "AskUserQuestion" => questions_preview(input),
        "Edit" | "MultiEdit" => {
            let file = path("file_path");
            let changes: Vec<edit::Change> = match input["edits"].as_array() {
                Some(edits) => edits.iter().map(edit::Change::from_json).collect(),
                None => vec![edit::Change::from_json(input)],
            };
            match std::fs::read_to_string(&file) {
                Ok(before) => match edit::apply(&before, &changes, &file.display().to_string()) {
                    Ok((after, _)) => edit::unified_diff(&file, &before, &after),
                    Err(e) => format!("{}: {e}", file.display()),
                },
                Err(e) => format!("{}: {e}", file.display()),
            }
        }
        "Write" => {
            let file = path("file_path");
            let before = std::fs::read_to_string(&file).unwrap_or_default();
            edit::unified_diff(
                &file,
                &before,
                input["content"].as_str().unwrap_or_default(),
            )
        }
        _ => serde_json::to_string_pretty(input).unwrap_or_default(),
    }
}

/// An `AskUserQuestion` call as text: each question, then its numbered options.
fn questions_preview(input: &serde_json::Value) -> String {
    let mut out = String::new();
    for q in input["questions"].as_array().into_iter().flatten() {
        out.push_str(q["question"].as_str().unwrap_or_default());
        if q["multiSelect"] == true {
            out.push_str(" (choose any)");
        }
        out.push('\n');
        for (i, o) in q["options"].as_array().into_iter().flatten().enumerate() {
            let label = o["label"].as_str().unwrap_or_default();
            match o["description"].as_str().filter(|d| !d.is_empty()) {
                Some(d) => out.push_str(&format!("  {}. {label} — {d}\n", i + 1)),
                None => out.push_str(&format!("  {}. {label}\n", i + 1)),
            }
        }
    }
    out
}
