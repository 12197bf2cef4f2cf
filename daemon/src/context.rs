//! What the model is told besides the conversation: our system prompt (in the output style
//! chosen), the environment, the user's memory files (CLAUDE.md, AGENTS.md, with `@imports`)
//! and a git snapshot.
//!
//! Invariant: gathered at a session's first model turn into its prompt prefix, which is logged
//! and sent byte for byte ever after (so prompt caching hits); what changes later goes to the
//! tail of the conversation as an update. git2 runs on `spawn_blocking`.

pub mod frontmatter;
mod git;
pub use git::libgit2_version;
pub mod memory;
pub mod styles;

use crate::llm::SystemBlock;
use std::path::Path;

/// Who the agent is. With [`CODING`], stable across sessions (the first cache breakpoint).
pub const IDENTITY: &str = "You are tether, a coding agent working in the user's repository on their machine. \
You help with software engineering: reading and changing code, running commands, explaining, debugging.";

/// How the agent works on code; an output style may replace it.
pub const CODING: &str = "How you work:
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

/// What the model is told besides the conversation, gathered now: the parts a session's prompt
/// prefix is made of ([`EventKind::SystemPrompt`](tether_proto::EventKind::SystemPrompt)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// Tether's instructions.
    pub instructions: String,
    /// Working directory, platform, date.
    pub environment: String,
    /// Today's date (it is part of `environment`).
    pub date: String,
    /// The git snapshot, when `cwd` is in a repository.
    pub git: Option<String>,
    /// The memory files, when there are any.
    pub memory: Option<String>,
}

/// Gathers the context of a session in `cwd`; `project_memory` is tether's own notes file.
pub async fn gather(cwd: &Path, project_memory: Option<&Path>) -> Context {
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

    let date = today();
    let mut env = String::new();
    env.push_str("# Environment\n");
    env.push_str(&format!("Working directory: {}\n", cwd.display()));
    env.push_str(&format!(
        "Platform: {} ({})\n",
        std::env::consts::OS,
        std::env::consts::ARCH
    ));
    env.push_str(&format!("Date: {date}\n"));
    env.push_str(&format!(
        "Git repository: {}\n",
        if snapshot.is_some() { "yes" } else { "no" }
    ));
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    // The settings files are read once, for the attribution and the output style.
    let settings = crate::settings::files(cwd, home.as_deref());
    let attribution = crate::settings::attribution_of(&settings);
    if let Some(commit) = &attribution.commit {
        env.push_str(&format!(
            "\nEnd every git commit message you write with a blank line and then:\n{commit}\n"
        ));
    }
    if let Some(pr) = &attribution.pr {
        env.push_str(&format!(
            "\nEnd every pull request description you write with a blank line and then:\n{pr}\n"
        ));
    }
    let memory = (!memory.is_empty()).then(|| {
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
        text
    });
    let style = crate::settings::output_style_of(&settings)
        .and_then(|name| styles::find(&name, cwd, home.as_deref()));
    Context {
        instructions: styles::instructions(IDENTITY, CODING, style.as_ref()),
        environment: env,
        date,
        git: snapshot.map(|s| s.render()),
        memory,
    }
}

/// The system prompt blocks of a prefix: instructions, environment, git, memory.
pub fn blocks(
    instructions: &str,
    environment: &str,
    git: Option<&str>,
    memory: Option<&str>,
) -> Vec<SystemBlock> {
    [Some(instructions), Some(environment), git, memory]
        .into_iter()
        .flatten()
        .map(SystemBlock::text)
        .collect()
}

/// The text a [`ContextUpdated`](tether_proto::EventKind::ContextUpdated) adds to the next user
/// message.
pub fn update_text(date: Option<&str>, git: Option<&str>, memory: Option<&str>) -> String {
    let mut text = String::from(
        "<context-update>\nSince the start of this session the context changed; this replaces what the system prompt says about it.\n",
    );
    if let Some(d) = date {
        text.push_str(&format!("\nDate: {d}\n"));
    }
    if let Some(g) = git {
        text.push_str(&format!("\n{}\n", g.trim_end()));
    }
    if let Some(m) = memory {
        text.push_str(&format!("\n{}\n", m.trim_end()));
    }
    text.push_str("</context-update>");
    text
}

fn today() -> String {
    let now = humantime::format_rfc3339(std::time::SystemTime::now()).to_string();
    now.get(..10).unwrap_or(&now).to_owned()
}
