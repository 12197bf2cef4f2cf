//! Skills, as Claude Code reads them: `.claude/skills/<name>/SKILL.md` of the project and of the
//! user (a project skill hides a user skill of the same name). SKILL.md is Markdown with YAML
//! frontmatter — `name` (default: its directory's name), `description`, `allowed-tools`,
//! `model`, `argument-hint`, `disable-model-invocation` — and its body is the instructions. The
//! model loads one with the Skill tool (`skill.rs`), the user with `/name args`; either way the
//! instructions come with their directory and the files beside them.

use crate::context::frontmatter;
use std::path::{Path, PathBuf};

/// One skill.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillDef {
    /// What `/name` and the Skill tool call it.
    pub name: String,
    /// When to use it (shown to the model in the Skill tool's description).
    pub description: String,
    /// Permission rules it runs with, without asking, when the user runs it (`Bash(git:*)`).
    pub allowed_tools: Vec<String>,
    /// Its model (`None`: the session's).
    pub model: Option<String>,
    /// What its arguments are, for `/help` (`[file]`).
    pub argument_hint: Option<String>,
    /// Whether the model may load it (`disable-model-invocation: true` leaves it to the user).
    pub model_invocable: bool,
    /// Its directory.
    pub dir: PathBuf,
    /// The instructions.
    pub body: String,
    /// Where it was found: `project` or `user`.
    pub source: &'static str,
}

/// The skills a session has, and what could not be read.
#[derive(Debug, Clone, Default)]
pub struct Skills {
    /// Each name once, project skills first.
    pub skills: Vec<SkillDef>,
    /// `path:line: problem` for each SKILL.md that could not be used.
    pub problems: Vec<String>,
}

/// Files beside SKILL.md named in a loaded skill, at most.
const MAX_FILES: usize = 50;

impl Skills {
    /// The skill called `name` (a leading `/` ignored).
    pub fn get(&self, name: &str) -> Option<&SkillDef> {
        let name = name.trim().trim_start_matches('/');
        self.skills.iter().find(|s| s.name == name)
    }

    /// The skills the model may load.
    pub fn for_model(&self) -> impl Iterator<Item = &SkillDef> {
        self.skills.iter().filter(|s| s.model_invocable)
    }
}

/// The skills of a session in `cwd`: the project's, then the user's under `home`.
pub fn load(cwd: &Path, home: Option<&Path>) -> Skills {
    let mut found = Skills::default();
    let roots = [
        (Some(cwd.join(".claude/skills")), "project"),
        (home.map(|h| h.join(".claude/skills")), "user"),
    ];
    for (root, source) in roots {
        let Some(root) = root else { continue };
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        // Neither a skill's folder nor its SKILL.md may be a link: a committed link could
        // otherwise hand the model any file the daemon can read.
        let plain = |p: &Path, dir: bool| {
            std::fs::symlink_metadata(p).is_ok_and(|m| {
                let t = m.file_type();
                !t.is_symlink() && if dir { t.is_dir() } else { t.is_file() }
            })
        };
        let mut dirs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| plain(p, true) && plain(&p.join("SKILL.md"), false))
            .collect();
        dirs.sort();
        for dir in dirs {
            match read(&dir, source) {
                Ok(skill) if found.get(&skill.name).is_none() => found.skills.push(skill),
                Ok(_) => {}
                Err(problem) => found
                    .problems
                    .push(format!("{}:{problem}", dir.join("SKILL.md").display())),
            }
        }
    }
    found
}

/// Whether `name` can be a skill's name: lowercase letters, digits and hyphens, as Claude Code
/// asks.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// One skill's directory.
fn read(dir: &Path, source: &'static str) -> Result<SkillDef, String> {
    let path = dir.join("SKILL.md");
    let text = std::fs::read_to_string(&path).map_err(|e| format!(" cannot read it: {e}"))?;
    let (front, body) = frontmatter::split(&text).map_err(|e| e.to_string())?;
    let folder = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = front.text("name").unwrap_or(folder);
    if !valid_name(&name) {
        return Err(format!(
            "1: the skill name {name:?} is not lowercase letters, digits and hyphens"
        ));
    }
    let description = front
        .text("description")
        .or_else(|| {
            body.lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with('#'))
                .map(|l| l.chars().take(120).collect())
        })
        .unwrap_or_default();
    Ok(SkillDef {
        name,
        description,
        allowed_tools: front.list("allowed-tools").unwrap_or_default(),
        model: front.text("model").filter(|m| m != "inherit"),
        // `argument-hint: [file]` is a YAML list, as most files write it.
        argument_hint: front.text("argument-hint").or_else(|| {
            front
                .list("argument-hint")
                .map(|parts| format!("[{}]", parts.join(", ")))
        }),
        model_invocable: front.text("disable-model-invocation").as_deref() != Some("true"),
        dir: dir.to_owned(),
        body: body.trim().to_owned(),
        source,
    })
}

impl SkillDef {
    /// What loading it gives the model: its directory, the instructions with `args` in place
    /// (`$ARGUMENTS`, `$0`…), and the files beside SKILL.md, to read when the instructions call
    /// for them.
    pub fn render(&self, args: &str) -> String {
        let dir = self.dir.display().to_string();
        let body = self.body.replace("${CLAUDE_SKILL_DIR}", &dir);
        let mut out = format!(
            "Base directory for this skill: {dir}\n\n{}\n",
            with_arguments(&body, args)
        );
        let mut files = Vec::new();
        list_files(&self.dir, &self.dir, 0, &mut files);
        files.sort();
        if !files.is_empty() {
            let more = files.len().saturating_sub(MAX_FILES);
            files.truncate(MAX_FILES);
            out.push_str(&format!(
                "\nFiles in this skill's directory (paths relative to it): {}",
                files.join(", ")
            ));
            if more > 0 {
                out.push_str(&format!(" and {more} more"));
            }
            out.push('\n');
        }
        out
    }
}

/// The files under `dir` but SKILL.md, relative to `root`, a few levels deep.
fn list_files(root: &Path, dir: &Path, depth: usize, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if out.len() > MAX_FILES * 2 {
            return;
        }
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() && depth < 3 {
            list_files(root, &path, depth + 1, out);
        } else if kind.is_file()
            && path != root.join("SKILL.md")
            && let Ok(rel) = path.strip_prefix(root)
        {
            out.push(rel.display().to_string());
        }
    }
}

/// A skill's or a custom command's text with its arguments in place, as Claude Code does it:
/// the arguments are split as a shell splits words (`"two words"` is one); `$ARGUMENTS[N]` and
/// its shorthand `$N` are the words from 0 (`/idx Alice Bob`: `$0` is Alice), `$ARGUMENTS` all
/// of them. A number past the last word stays as written (a shell snippet's `$1` too). A text
/// with no placeholder at all gets the arguments after it, as `ARGUMENTS: …`.
pub fn with_arguments(body: &str, args: &str) -> String {
    let args = args.trim();
    let words: Vec<String> =
        shlex::split(args).unwrap_or_else(|| args.split_whitespace().map(str::to_owned).collect());
    let word = |n: &str| n.parse::<usize>().ok().and_then(|n| words.get(n));
    let mut placed = false;
    let mut out = String::with_capacity(body.len() + args.len());
    let mut rest = body;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        if let Some(indexed) = after.strip_prefix("ARGUMENTS[")
            && let Some(end) = indexed.find(']')
            && end > 0
            && let Some(w) = word(&indexed[..end])
        {
            out.push_str(w);
            placed = true;
            rest = &indexed[end + 1..];
        } else if let Some(tail) = after
            .strip_prefix("ARGUMENTS")
            .filter(|t| !t.starts_with('['))
        {
            out.push_str(args);
            placed = true;
            rest = tail;
        } else if let Some(w) = (digits > 0).then(|| word(&after[..digits])).flatten() {
            out.push_str(w);
            placed = true;
            rest = &after[digits..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    let mut out = out.trim().to_owned();
    if !placed && !args.is_empty() && !body.contains("$ARGUMENTS") {
        out.push_str(&format!("\n\nARGUMENTS: {args}"));
    }
    out
}

/// The skills as the Skill tool's description lists them: `- name: description`.
pub fn describe<'a>(skills: impl Iterator<Item = &'a SkillDef>) -> String {
    skills
        .map(|s| format!("- {}: {}", s.name, s.description))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(root: &Path, dir: &str, text: &str) {
        let dir = root.join(".claude/skills").join(dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("SKILL.md"), text).expect("write");
    }

    #[test]
    fn arguments_are_numbered_from_zero_as_claude_code_does() {
        assert_eq!(
            with_arguments("Hi $0 and $1.", "Alice Bob"),
            "Hi Alice and Bob."
        );
        assert_eq!(
            with_arguments("$ARGUMENTS[1] then $ARGUMENTS[0]; all: $ARGUMENTS", "a b"),
            "b then a; all: a b"
        );
        // Quoted words stay one; a number past the last word, and shell text, stay as written.
        assert_eq!(
            with_arguments("Greet $0, then $1.", "\"Ada Lovelace\" Bob"),
            "Greet Ada Lovelace, then Bob."
        );
        assert_eq!(
            with_arguments(
                "Sum with awk '{s += $1}' over $0 and $ARGUMENTS[3]; $HOME",
                "f.txt"
            ),
            "Sum with awk '{s += $1}' over f.txt and $ARGUMENTS[3]; $HOME"
        );
        // No placeholder: the arguments follow the text.
        assert_eq!(
            with_arguments("Review the branch.", "main"),
            "Review the branch.\n\nARGUMENTS: main"
        );
        assert_eq!(
            with_arguments("Review the branch.", ""),
            "Review the branch."
        );
    }

    #[test]
    fn project_skills_hide_user_ones_and_bad_ones_are_reported() {
        let project = tempfile::tempdir().expect("tempdir");
        let home = tempfile::tempdir().expect("tempdir");
        skill(
            project.path(),
            "release",
            "---\ndescription: Cut a release\nallowed-tools: Bash(git tag:*), Read\nargument-hint: [version]\n---\nTag $0 and push it.\n",
        );
        std::fs::write(
            project.path().join(".claude/skills/release/checklist.md"),
            "- tests",
        )
        .expect("write");
        skill(
            home.path(),
            "release",
            "---\ndescription: the user's own\n---\nOther.\n",
        );
        skill(
            home.path(),
            "notes",
            "---\nname: notes\ndisable-model-invocation: true\n---\nWrite notes.\n",
        );
        skill(home.path(), "Bad Name", "---\nname: Bad Name\n---\nx\n");
        let found = load(project.path(), Some(home.path()));
        let names: Vec<(&str, &str)> = found
            .skills
            .iter()
            .map(|s| (s.name.as_str(), s.source))
            .collect();
        assert_eq!(names, [("release", "project"), ("notes", "user")]);
        assert_eq!(found.problems.len(), 1, "{:?}", found.problems);
        let release = found.get("/release").expect("release");
        assert_eq!(release.allowed_tools, ["Bash(git tag:*)", "Read"]);
        assert_eq!(release.argument_hint.as_deref(), Some("[version]"));
        let loaded = release.render("v1.2");
        assert!(loaded.contains("Tag v1.2 and push it."), "{loaded}");
        assert!(loaded.contains("checklist.md"), "{loaded}");
        assert!(!loaded.contains("SKILL.md"), "{loaded}");
        assert_eq!(
            found
                .for_model()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>(),
            ["release"]
        );
    }
}
