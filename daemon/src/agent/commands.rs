//! Slash commands the daemon owns (`/clear`, `/compact`, `/model`, `/cost`, `/budget`, `/sandbox`, custom commands from
//! `.claude/commands/*.md`) and `#` memory notes.

use std::path::{Path, PathBuf};
use tether_proto::InputItem;

/// What a turn's input asks for besides a plain prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum SlashCommand {
    /// `/clear`: start the conversation over (the log keeps the old one).
    Clear,
    /// `/compact [instructions]`.
    Compact(Option<String>),
    /// `/model [name]`: show or change the model.
    Model(Option<String>),
    /// `/effort [level]`: show or set the session's effort level (`default` resets it).
    Effort(Option<String>),
    /// `/cost`: the session's usage and cost.
    Cost,
    /// `/budget [amount]`: show or set the session's budget in USD (`0` or `off`: no cap).
    Budget(Option<String>),
    /// `/sandbox`: whether Bash runs in the OS sandbox, and how.
    Sandbox,
    /// A custom command: its prompt (arguments substituted) and settings.
    Custom {
        /// The prompt to send.
        prompt: String,
        /// Model for this turn.
        model: Option<String>,
        /// Tools this turn may use.
        allowed_tools: Option<Vec<String>>,
    },
    /// `# note`: remember this for the project.
    Note(String),
    /// `/name` that matches nothing.
    Unknown(String),
}

/// The built-in commands, for error messages and completion.
pub const BUILTIN: &[&str] = &[
    "clear", "compact", "model", "effort", "cost", "budget", "sandbox",
];

/// Reads the command in `input`, if its first text item is one. Custom commands are looked up
/// in `<cwd>/.claude/commands/` and then `<home>/.claude/commands/` (`a:b` → `a/b.md`).
pub fn parse(cwd: &Path, home: Option<&Path>, input: &[InputItem]) -> Option<SlashCommand> {
    let text = input.iter().find_map(|i| match i {
        InputItem::Text { text } => Some(text.trim()),
        _ => None,
    })?;
    if let Some(note) = text.strip_prefix('#') {
        let note = note.trim();
        return (!note.is_empty() && !note.starts_with('#'))
            .then(|| SlashCommand::Note(note.to_owned()));
    }
    let body = text.strip_prefix('/')?;
    if body.starts_with('/') || body.is_empty() {
        return None;
    }
    let (name, args) = match body.split_once(char::is_whitespace) {
        Some((n, a)) => (n, a.trim()),
        None => (body, ""),
    };
    let arg = (!args.is_empty()).then(|| args.to_owned());
    Some(match name {
        "clear" => SlashCommand::Clear,
        "compact" => SlashCommand::Compact(arg),
        "model" => SlashCommand::Model(arg),
        "effort" => SlashCommand::Effort(arg),
        "cost" => SlashCommand::Cost,
        "budget" => SlashCommand::Budget(arg),
        "sandbox" => SlashCommand::Sandbox,
        _ => match custom(cwd, home, name, args) {
            Some(c) => c,
            None => SlashCommand::Unknown(name.to_owned()),
        },
    })
}

fn custom(cwd: &Path, home: Option<&Path>, name: &str, args: &str) -> Option<SlashCommand> {
    if name.contains("..") || name.contains('/') {
        return None;
    }
    let rel: PathBuf = name.split(':').collect::<PathBuf>().with_extension("md");
    let candidates = [
        Some(cwd.join(".claude/commands").join(&rel)),
        home.map(|h| h.join(".claude/commands").join(&rel)),
    ];
    let text = candidates
        .into_iter()
        .flatten()
        .find_map(|p| std::fs::read_to_string(p).ok())?;
    let (front, body) = crate::context::frontmatter::split_lenient(&text);
    let positional: Vec<&str> = args.split_whitespace().collect();
    let mut prompt = body.replace("$ARGUMENTS", args);
    for n in (1..=9).rev() {
        prompt = prompt.replace(
            &format!("${n}"),
            positional.get(n - 1).copied().unwrap_or(""),
        );
    }
    Some(SlashCommand::Custom {
        prompt: prompt.trim().to_owned(),
        model: front.text("model"),
        allowed_tools: front.list("allowed-tools").map(|tools| {
            tools
                .iter()
                .map(|s| s.split('(').next().unwrap_or("").trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        }),
    })
}

/// The slash commands a session in `cwd` has: the built-in ones, then the custom ones of the
/// project and of the user (a project command hides a user command of the same name), by name.
pub fn list(cwd: &Path, home: Option<&Path>) -> Vec<tether_proto::CommandInfo> {
    let builtin = [
        ("clear", "start the conversation over"),
        ("compact", "[instructions]: summarize to free context"),
        ("model", "[name]: show or set the model"),
        (
            "effort",
            "[level]: show or set the effort (low … max, default)",
        ),
        ("cost", "tokens and cost of this session"),
        (
            "budget",
            "[amount]: show or set the most this session may spend, in USD (0: no cap)",
        ),
        (
            "sandbox",
            "whether Bash runs in the OS sandbox, and what it may touch",
        ),
    ];
    let mut out: Vec<tether_proto::CommandInfo> = builtin
        .iter()
        .map(|(name, description)| tether_proto::CommandInfo {
            name: (*name).to_owned(),
            description: (*description).to_owned(),
            source: "builtin".into(),
        })
        .collect();
    let mut custom: Vec<tether_proto::CommandInfo> = Vec::new();
    let roots = [
        (Some(cwd.join(".claude/commands")), "project"),
        (home.map(|h| h.join(".claude/commands")), "user"),
    ];
    for (root, source) in roots {
        let Some(root) = root else { continue };
        let mut found = Vec::new();
        collect(&root, &root, 0, &mut found);
        for (name, path) in found {
            if out.iter().chain(&custom).any(|c| c.name == name) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let (front, body) = crate::context::frontmatter::split_lenient(&text);
            let description = front
                .text("description")
                .or_else(|| {
                    body.lines()
                        .map(str::trim)
                        .find(|l| !l.is_empty())
                        .map(|l| l.chars().take(60).collect())
                })
                .unwrap_or_default();
            custom.push(tether_proto::CommandInfo {
                name,
                description,
                source: source.into(),
            });
        }
    }
    custom.sort_by(|a, b| a.name.cmp(&b.name));
    out.extend(custom);
    out
}

/// `*.md` under `dir` as command names (`a/b.md` → `a:b`), a few levels deep.
fn collect(root: &Path, dir: &Path, depth: usize, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && depth < 3 {
            collect(root, &path, depth + 1, out);
        } else if path.extension().is_some_and(|e| e == "md")
            && let Ok(rel) = path.with_extension("").strip_prefix(root)
        {
            let name: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let name = name.join(":");
            if !name.contains(char::is_whitespace) {
                out.push((name, path));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> Vec<InputItem> {
        vec![InputItem::Text { text: t.into() }]
    }

    #[test]
    fn builtins_notes_and_plain_text() {
        let cwd = Path::new("/nonexistent");
        assert_eq!(parse(cwd, None, &text("/clear")), Some(SlashCommand::Clear));
        assert_eq!(
            parse(cwd, None, &text("/compact keep the API design")),
            Some(SlashCommand::Compact(Some("keep the API design".into())))
        );
        assert_eq!(
            parse(cwd, None, &text("/model opus")),
            Some(SlashCommand::Model(Some("opus".into())))
        );
        assert_eq!(parse(cwd, None, &text("/cost")), Some(SlashCommand::Cost));
        assert_eq!(
            parse(cwd, None, &text("/nope x")),
            Some(SlashCommand::Unknown("nope".into()))
        );
        assert_eq!(
            parse(cwd, None, &text("# use tabs")),
            Some(SlashCommand::Note("use tabs".into()))
        );
        assert_eq!(parse(cwd, None, &text("## heading")), None);
        assert_eq!(parse(cwd, None, &text("fix /usr/bin path")), None);
        assert_eq!(parse(cwd, None, &text("//comment")), None);
    }

    #[test]
    fn custom_commands_with_frontmatter_and_arguments() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cmds = dir.path().join(".claude/commands/git");
        std::fs::create_dir_all(&cmds).expect("mkdir");
        std::fs::write(
            cmds.join("review.md"),
            "---\ndescription: Review a branch\nallowed-tools: Read, Bash(git diff:*)\nmodel: opus\n---\nReview $1 against $2.\nAll: $ARGUMENTS\n",
        )
        .expect("write");
        let got = parse(dir.path(), None, &text("/git:review feature main"));
        assert_eq!(
            got,
            Some(SlashCommand::Custom {
                prompt: "Review feature against main.\nAll: feature main".into(),
                model: Some("opus".into()),
                allowed_tools: Some(vec!["Read".into(), "Bash".into()]),
            })
        );
    }

    #[test]
    fn the_list_has_builtins_then_project_commands_hiding_user_ones() {
        let project = tempfile::tempdir().expect("tempdir");
        let home = tempfile::tempdir().expect("tempdir");
        let write = |root: &Path, rel: &str, text: &str| {
            let path = root.join(".claude/commands").join(rel);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        };
        write(
            project.path(),
            "git/review.md",
            "---\ndescription: Review a branch\n---\nReview $1.\n",
        );
        write(
            project.path(),
            "deploy.md",
            "\n  Deploy to staging, then check the health page.\n",
        );
        write(
            home.path(),
            "deploy.md",
            "---\ndescription: the user's deploy\n---\nx\n",
        );
        write(
            home.path(),
            "standup.md",
            "Summarize yesterday's commits.\n",
        );
        write(home.path(), "notes.txt", "not a command");
        let list = list(project.path(), Some(home.path()));
        let got: Vec<(&str, &str, &str)> = list
            .iter()
            .map(|c| (c.name.as_str(), c.description.as_str(), c.source.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("clear", "start the conversation over", "builtin"),
                (
                    "compact",
                    "[instructions]: summarize to free context",
                    "builtin"
                ),
                ("model", "[name]: show or set the model", "builtin"),
                (
                    "effort",
                    "[level]: show or set the effort (low … max, default)",
                    "builtin"
                ),
                ("cost", "tokens and cost of this session", "builtin"),
                (
                    "budget",
                    "[amount]: show or set the most this session may spend, in USD (0: no cap)",
                    "builtin"
                ),
                (
                    "sandbox",
                    "whether Bash runs in the OS sandbox, and what it may touch",
                    "builtin"
                ),
                (
                    "deploy",
                    "Deploy to staging, then check the health page.",
                    "project"
                ),
                ("git:review", "Review a branch", "project"),
                ("standup", "Summarize yesterday's commits.", "user"),
            ]
        );
    }
}
