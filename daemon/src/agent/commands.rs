//! Slash commands the daemon owns (`/clear`, `/compact`, `/model`, `/cost`, `/budget`,
//! `/sandbox`, `/output-style`; the prompts `/review`, `/security-review`, `/init`; custom commands from
//! `.claude/commands/*.md`; skills run as `/name`), `#` memory notes and `!command` lines.

use crate::tools::skills::with_arguments;
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
    /// `/context`: what fills the context window, by part.
    Context,
    /// `/agents`: the sub-agent types the Agent tool offers.
    Agents,
    /// `/hooks`: the hooks in effect and where each comes from.
    Hooks,
    /// `/budget [amount]`: show or set the session's budget in USD (`0` or `off`: no cap).
    Budget(Option<String>),
    /// `/sandbox`: whether Bash runs in the OS sandbox, and how.
    Sandbox,
    /// `/output-style [name]`: the output styles there are, or choose one (saved to the
    /// project's `.claude/settings.local.json`, for the next sessions).
    OutputStyle(Option<String>),
    /// A custom command, a skill run as `/name` or a built-in prompt (`/review`): its prompt
    /// (arguments substituted) and settings.
    Custom {
        /// The prompt to send.
        prompt: String,
        /// Model for this turn.
        model: Option<String>,
        /// Tools this turn may use (a command's `allowed-tools`).
        allowed_tools: Option<Vec<String>>,
        /// Permission rules allowed without asking in this turn (a skill's `allowed-tools`).
        allow: Vec<String>,
    },
    /// `# note`: remember this for the project.
    Note(String),
    /// `!command`: run it in the session's directory; what it prints goes to the model with
    /// the next prompt.
    Shell(String),
    /// `/name` that matches nothing.
    Unknown(String),
}

/// The built-in commands, for error messages and completion.
pub const BUILTIN: &[&str] = &[
    "clear",
    "compact",
    "model",
    "effort",
    "cost",
    "context",
    "agents",
    "hooks",
    "budget",
    "sandbox",
    "output-style",
];

/// Reads the command in `input`, if its first text item is one. Custom commands are looked up
/// in `<cwd>/.claude/commands/` and then `<home>/.claude/commands/` (`a:b` → `a/b.md`).
pub fn parse(cwd: &Path, home: Option<&Path>, input: &[InputItem]) -> Option<SlashCommand> {
    let text = input.iter().find_map(|i| match i {
        InputItem::Text { text } => Some(text.trim()),
        _ => None,
    })?;
    if let Some(command) = text.strip_prefix('!') {
        let command = command.trim();
        return (!command.is_empty()).then(|| SlashCommand::Shell(command.to_owned()));
    }
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
        "context" => SlashCommand::Context,
        "agents" => SlashCommand::Agents,
        "hooks" => SlashCommand::Hooks,
        "budget" => SlashCommand::Budget(arg),
        "sandbox" => SlashCommand::Sandbox,
        "output-style" => SlashCommand::OutputStyle(arg),
        // A project's or user's command of the same name wins over a built-in prompt.
        _ => match custom(cwd, home, name, args)
            .or_else(|| prompt_command(name, args))
            .or_else(|| skill(cwd, home, name, args))
        {
            Some(c) => c,
            None => SlashCommand::Unknown(name.to_owned()),
        },
    })
}

/// The built-in commands that are prompts to the model, in tether's words: `(name, what it
/// does, the prompt)`; `$ARGUMENTS` is what follows the name.
const PROMPTS: &[(&str, &str, &str)] = &[
    (
        "review",
        "[what]: review the changes in this repository (or what you name)",
        "Review the changes in this repository as a careful senior reviewer would. Unless told \
         otherwise below, look at what is not yet committed (git status, git diff, and git diff \
         --staged), or, when the tree is clean, at the commits on this branch that its upstream \
         lacks. Read enough of the surrounding code to judge each change. Report, most serious \
         first: bugs and wrong behaviour, missing error handling, unsafe or insecure code, \
         missing or weak tests, and places that are hard to read; for each, the file and line, \
         why it matters and a concrete fix. Say plainly when something looks right. Change no \
         files.\n\nWhat to review: $ARGUMENTS",
    ),
    (
        "security-review",
        "[what]: look for security problems in the pending changes",
        "Do a security review of the changes in this repository (what is not yet committed, or, \
         when the tree is clean, the commits on this branch that its upstream lacks). Look for \
         what an attacker could use: injection (shell, SQL, paths, templates), missing or wrong \
         authentication and authorization, secrets in code or logs, unsafe deserialization, \
         unchecked input reaching the file system or the network, weak cryptography, races \
         around files and permissions, and dependencies added without need. For each finding \
         give the file and line, how it could be exploited, how severe it is, and the fix. \
         Report only what you can show from the code; say which areas you checked and found \
         sound. Change no files.\n\nFocus: $ARGUMENTS",
    ),
    (
        "init",
        "write a CLAUDE.md that tells the model how this repository works",
        "Write a CLAUDE.md at the root of this repository for the coding agents that will work \
         in it. Look around first: the README, the build and package files, the CI \
         configuration, the layout of the source tree, and any existing CLAUDE.md, AGENTS.md, \
         .cursorrules or contributing guide (keep what they say that still holds). Then write, \
         briefly: how to build, test (a whole suite and one test), lint and run it; the \
         architecture in a few lines (the main parts and where they live); and the conventions \
         a newcomer would get wrong. Leave out what anyone can see from a file listing, generic \
         advice and anything you are not sure of. If a CLAUDE.md exists, improve it rather \
         than starting over.\n\n$ARGUMENTS",
    ),
];

/// A built-in prompt command (`/review`, `/security-review`, `/init`).
fn prompt_command(name: &str, args: &str) -> Option<SlashCommand> {
    let (_, _, prompt) = PROMPTS.iter().find(|(n, _, _)| *n == name)?;
    Some(SlashCommand::Custom {
        prompt: with_arguments(prompt, args),
        model: None,
        allowed_tools: None,
        allow: Vec::new(),
    })
}

/// A skill run as `/name args`: its instructions as the prompt, its model, and its
/// `allowed-tools` allowed without asking — those of a project skill only once the project is
/// trusted.
fn skill(cwd: &Path, home: Option<&Path>, name: &str, args: &str) -> Option<SlashCommand> {
    let skills = crate::tools::skills::load(cwd, home);
    let skill = skills.get(name)?;
    let trusted = skill.source == "user" || crate::trust::is_trusted(cwd, home);
    Some(SlashCommand::Custom {
        prompt: format!(
            "The user ran the skill /{}{}. Follow its instructions.\n\n{}",
            skill.name,
            if args.is_empty() {
                String::new()
            } else {
                format!(" {args}")
            },
            skill.render(args)
        ),
        model: skill.model.clone(),
        allowed_tools: None,
        allow: if trusted {
            skill.allowed_tools.clone()
        } else {
            Vec::new()
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
    Some(SlashCommand::Custom {
        allow: Vec::new(),
        prompt: with_arguments(body, args),
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
        ("context", "what fills the context window, by part"),
        (
            "agents",
            "the sub-agent types the Agent tool offers, and where each is defined",
        ),
        ("hooks", "the hooks in effect, and where each is configured"),
        (
            "budget",
            "[amount]: show or set the most this session may spend, in USD (0: no cap)",
        ),
        (
            "sandbox",
            "whether Bash runs in the OS sandbox, and what it may touch",
        ),
        (
            "output-style",
            "[name]: the output styles, or choose one for the next sessions here",
        ),
    ];
    let mut out: Vec<tether_proto::CommandInfo> = builtin
        .iter()
        .copied()
        .map(|(name, description)| tether_proto::CommandInfo {
            name: name.to_owned(),
            description: description.to_owned(),
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
    // The built-in prompts a command file does not replace.
    for (name, what, _) in PROMPTS {
        if !custom.iter().any(|c| c.name == *name) {
            out.push(tether_proto::CommandInfo {
                name: (*name).to_owned(),
                description: (*what).to_owned(),
                source: "builtin".into(),
            });
        }
    }
    // Skills run as commands too (a command file of the same name wins).
    for skill in crate::tools::skills::load(cwd, home).skills {
        if out.iter().chain(&custom).any(|c| c.name == skill.name) {
            continue;
        }
        let description = match &skill.argument_hint {
            Some(hint) => format!("{hint}: {}", skill.description),
            None => skill.description.clone(),
        };
        custom.push(tether_proto::CommandInfo {
            name: skill.name,
            description,
            source: format!("{} skill", skill.source),
        });
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
            "---\ndescription: Review a branch\nallowed-tools: Read, Bash(git diff:*)\nmodel: opus\n---\nReview $0 against $ARGUMENTS[1].\nAll: $ARGUMENTS\n",
        )
        .expect("write");
        let got = parse(dir.path(), None, &text("/git:review feature main"));
        assert_eq!(
            got,
            Some(SlashCommand::Custom {
                prompt: "Review feature against main.\nAll: feature main".into(),
                model: Some("opus".into()),
                allowed_tools: Some(vec!["Read".into(), "Bash".into()]),
                allow: Vec::new(),
            })
        );
    }

    #[test]
    fn built_in_prompts_and_skills_run_as_commands() {
        let project = tempfile::tempdir().expect("tempdir");
        let home = tempfile::tempdir().expect("tempdir");
        let (p, h) = (project.path(), Some(home.path()));
        let prompt = |command: Option<SlashCommand>| match command {
            Some(SlashCommand::Custom { prompt, allow, .. }) => (prompt, allow),
            other => panic!("not a prompt: {other:?}"),
        };
        let (review, _) = prompt(parse(p, h, &text("/review the parser")));
        assert!(review.contains("Change no files"), "{review}");
        assert!(review.ends_with("What to review: the parser"), "{review}");
        // The project's own /review replaces the built-in one.
        std::fs::create_dir_all(p.join(".claude/commands")).expect("mkdir");
        std::fs::write(p.join(".claude/commands/review.md"), "Our way.").expect("write");
        assert_eq!(prompt(parse(p, h, &text("/review"))).0, "Our way.");
        // A skill's allowed-tools hold for a user skill, and for a project one only once the
        // project is trusted.
        for (root, name) in [(p, "tag"), (home.path(), "mine")] {
            let dir = root.join(".claude/skills").join(name);
            std::fs::create_dir_all(&dir).expect("mkdir");
            std::fs::write(
                dir.join("SKILL.md"),
                "---\ndescription: Tag a release\nallowed-tools: Bash(git tag:*)\n---\nTag $0.\n",
            )
            .expect("write");
        }
        let (tag, allow) = prompt(parse(p, h, &text("/tag v2")));
        assert!(tag.contains("The user ran the skill /tag v2."), "{tag}");
        assert!(tag.contains("Tag v2."), "{tag}");
        assert!(allow.is_empty(), "an untrusted project's skill: {allow:?}");
        assert_eq!(prompt(parse(p, h, &text("/mine"))).1, ["Bash(git tag:*)"]);
        let listed = list(p, h);
        let skill = listed.iter().find(|c| c.name == "tag").expect("listed");
        assert_eq!(skill.source, "project skill");
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
                    "context",
                    "what fills the context window, by part",
                    "builtin"
                ),
                (
                    "agents",
                    "the sub-agent types the Agent tool offers, and where each is defined",
                    "builtin"
                ),
                (
                    "hooks",
                    "the hooks in effect, and where each is configured",
                    "builtin"
                ),
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
                    "output-style",
                    "[name]: the output styles, or choose one for the next sessions here",
                    "builtin"
                ),
                (
                    "review",
                    "[what]: review the changes in this repository (or what you name)",
                    "builtin"
                ),
                (
                    "security-review",
                    "[what]: look for security problems in the pending changes",
                    "builtin"
                ),
                (
                    "init",
                    "write a CLAUDE.md that tells the model how this repository works",
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
