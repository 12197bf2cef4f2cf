//! The built-in tools, one file each. Each follows Claude Code's name and input fields, so
//! prompts and habits carry over.

mod bash;
mod edit;
mod glob;
mod grep;
mod ls;
mod notebook;
mod read;
mod task;
mod todo;
mod walk;
mod web_fetch;
mod write;

use crate::agent::{Tool, Tools};
use std::sync::Arc;

/// Every built-in tool.
pub fn builtin() -> Tools {
    let tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(bash::Bash),
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
        Arc::new(task::Task),
        Arc::new(web_fetch::WebFetch),
    ];
    Tools::new(tools)
}

#[cfg(test)]
mod tests;
