//! What the model is told besides the conversation: our system prompt, the environment, the
//! user's memory files (CLAUDE.md, AGENTS.md, with `@imports`) and a git snapshot.
//!
//! Invariant: built once per session and reused byte for byte, so prompt caching hits; git2 runs
//! on `spawn_blocking`.

mod git;
mod memory;

use crate::llm::SystemBlock;
use std::path::Path;

/// Who the agent is and how it works. Stable across sessions (the first cache breakpoint).
pub const SYSTEM_PROMPT: &str = "You are tether, a coding agent working in the user's repository on their machine. \
You help with software engineering: reading and changing code, running commands, explaining, debugging.

How you work:
- Use the tools to look before you change anything: read the files you are about to edit, search for the \
code you need to understand. Prefer small, focused changes that fit the existing style of the project.
- File paths given to tools are absolute. Relative paths resolve against the session's working directory.
- Read-only tools called together in one reply run in parallel; calls that change things run in order.
- When a tool fails, read its message: it says what to fix. Do not repeat a failing call unchanged.
- Verify your work when you can (build, tests, a quick run) and say what you could not verify.
- Be concise. Lead with the answer or the change; skip preamble. Use Markdown for code and lists.
- Never invent file contents, command output or APIs; if you do not know, look or say so.
- Do not commit, push, or delete work you did not create unless the user asks.";

/// Where tether keeps the agent's own notes for the project in `cwd` (`# note` appends there).
pub fn project_memory(data_dir: &Path, cwd: &Path) -> std::path::PathBuf {
    let key: String = cwd
        .to_string_lossy()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    data_dir.join("projects").join(key).join("MEMORY.md")
}

/// Appends a note to the project's memory file.
pub fn remember(memory_file: &Path, note: &str) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = memory_file.parent() {
        tether_proto::private::create_dir_all(dir)?;
    }
    let mut f = tether_proto::private::open_append(memory_file)?;
    writeln!(f, "- {}", note.trim())
}

/// The system prompt blocks for a session in `cwd`; `project_memory` is tether's own notes file.
pub async fn system_prompt(
    cwd: &Path,
    model: &str,
    project_memory: Option<&Path>,
) -> Vec<SystemBlock> {
    let cwd_owned = cwd.to_owned();
    let snapshot = tokio::task::spawn_blocking(move || git::snapshot(&cwd_owned))
        .await
        .ok()
        .flatten();
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let root = snapshot.as_ref().map(|s| s.root.clone());
    let cwd_owned = cwd.to_owned();
    let notes = project_memory.map(Path::to_owned);
    let memory = tokio::task::spawn_blocking(move || {
        let mut files = memory::load(&cwd_owned, root.as_deref(), home.as_deref());
        if let Some(notes) = notes.and_then(|p| memory::read_one(&p)) {
            files.push(notes);
        }
        files
    })
    .await
    .unwrap_or_default();

    let mut env = String::new();
    env.push_str("# Environment\n");
    env.push_str(&format!("Working directory: {}\n", cwd.display()));
    env.push_str(&format!(
        "Platform: {} ({})\n",
        std::env::consts::OS,
        std::env::consts::ARCH
    ));
    env.push_str(&format!("Date: {}\n", today()));
    env.push_str(&format!("Model: {model}\n"));
    env.push_str(&format!(
        "Git repository: {}\n",
        if snapshot.is_some() { "yes" } else { "no" }
    ));
    let mut blocks = vec![SystemBlock::text(SYSTEM_PROMPT), SystemBlock::text(env)];
    if let Some(s) = snapshot {
        blocks.push(SystemBlock::text(s.render()));
    }
    if !memory.is_empty() {
        let mut text = String::from(
            "# Memory\nInstructions the user keeps for you. Follow them; they override your defaults.\n",
        );
        for m in memory {
            text.push_str(&format!(
                "\n## {}\n{}\n",
                m.path.display(),
                m.text.trim_end()
            ));
        }
        blocks.push(SystemBlock::text(text));
    }
    blocks
}

fn today() -> String {
    let now = humantime::format_rfc3339(std::time::SystemTime::now()).to_string();
    now.get(..10).unwrap_or(&now).to_owned()
}
