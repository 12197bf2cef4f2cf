//! Output styles, as Claude Code has them: how the agent talks, chosen with `outputStyle` in the
//! settings files (or `/output-style`). Two are built in (Explanatory, Learning, in tether's
//! own words); a trusted project's `.claude/output-styles/*.md` and the user's
//! `~/.claude/output-styles/*.md` add more (frontmatter `name`, `description`,
//! `keep-coding-instructions`; the body is the style). A style joins the instructions when a
//! session's prompt prefix is fixed, so it applies from the next session on; a custom one
//! replaces tether's coding instructions unless it keeps them.

use super::frontmatter;
use std::path::Path;

/// The largest style file read.
const MAX_STYLE_BYTES: u64 = 64 * 1024;

/// The style the agent talks in when none is chosen.
pub const DEFAULT: &str = "default";

/// One output style.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputStyle {
    /// Its name, as `outputStyle` names it.
    pub name: String,
    /// What it is for.
    pub description: String,
    /// How the agent is to talk.
    pub prompt: String,
    /// Whether tether's coding instructions stay beside it.
    pub keep_coding_instructions: bool,
    /// Where it is written (`built-in`, or the file).
    pub source: String,
}

const EXPLANATORY: &str = "Besides doing the work, teach as you go. When you make a choice that is \
not obvious — a design, a library, an approach to a bug — add a short note on why, and on what \
the code base does that led you there. Put these notes in blocks that start with `★ Insight` and \
keep each to two or three points. Explain the code you touch, not programming in general.";

const LEARNING: &str = "Work with the user so that they learn by doing. Do the routine parts \
yourself, but when a piece of code carries a real decision (a bit of logic, an error case, a \
design choice) and is 2 to 10 lines long, leave it to them: write the surrounding code, put a \
`TODO(human)` where their part goes, say what it must do and what to weigh, and stop until they \
have written it. Share short `★ Insight` notes on why the code is as it is.";

fn builtin() -> Vec<OutputStyle> {
    let style = |name: &str, description: &str, prompt: &str| OutputStyle {
        name: name.into(),
        description: description.into(),
        prompt: prompt.into(),
        keep_coding_instructions: true,
        source: "built-in".into(),
    };
    vec![
        style(
            "Explanatory",
            "does the work and explains its choices as it goes",
            EXPLANATORY,
        ),
        style(
            "Learning",
            "leaves the meaningful pieces to you, with TODO(human) markers",
            LEARNING,
        ),
    ]
}

/// Every style there is for a session in `cwd`: the built-in ones, then the project's, then
/// the user's (a later one of the same name wins, as a project's command wins over a
/// built-in). Files that cannot be read are left out.
pub fn available(cwd: &Path, home: Option<&Path>) -> Vec<OutputStyle> {
    let mut styles = builtin();
    // A project's own styles speak for it only once it is trusted, as its settings do.
    let trusted = crate::trust::is_trusted(cwd, home);
    let dirs = [
        home.map(|h| h.join(".claude/output-styles")),
        trusted.then(|| cwd.join(".claude/output-styles")),
    ];
    for dir in dirs.into_iter().flatten() {
        for path in frontmatter::markdown_files(&dir) {
            // A regular file of a sensible size (not a FIFO, not /dev/zero behind a link).
            let regular =
                std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() <= MAX_STYLE_BYTES);
            let Some(text) = regular
                .then(|| std::fs::read_to_string(&path).ok())
                .flatten()
            else {
                continue;
            };
            let (front, body) = frontmatter::split_lenient(&text);
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let style = OutputStyle {
                name: front.text("name").unwrap_or(stem),
                description: front.text("description").unwrap_or_default(),
                prompt: body.trim().to_owned(),
                keep_coding_instructions: front
                    .text("keep-coding-instructions")
                    .is_some_and(|v| v == "true"),
                source: path.display().to_string(),
            };
            styles.retain(|s| !s.name.eq_ignore_ascii_case(&style.name));
            styles.push(style);
        }
    }
    styles
}

/// The style `name` names (case does not matter); `None` for the default or an unknown name.
pub fn find(name: &str, cwd: &Path, home: Option<&Path>) -> Option<OutputStyle> {
    if name.eq_ignore_ascii_case(DEFAULT) {
        return None;
    }
    available(cwd, home)
        .into_iter()
        .find(|s| s.name.eq_ignore_ascii_case(name))
}

/// Tether's instructions in `style`: the style after them, or in place of their coding part.
pub fn instructions(identity: &str, coding: &str, style: Option<&OutputStyle>) -> String {
    match style {
        None => format!("{identity}\n\n{coding}"),
        Some(s) if s.keep_coding_instructions => format!(
            "{identity}\n\n{coding}\n\n# Output style: {}\n{}",
            s.name, s.prompt
        ),
        Some(s) => format!("{identity}\n\n# Output style: {}\n{}", s.name, s.prompt),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_projects_style_is_found_by_name_and_replaces_the_coding_part() {
        let dir = tempfile::tempdir().expect("tempdir");
        let styles = dir.path().join(".claude/output-styles");
        std::fs::create_dir_all(&styles).expect("mkdir");
        std::fs::write(
            styles.join("pirate.md"),
            "---\nname: Pirate\ndescription: talks like one\n---\nSay arr.\n",
        )
        .expect("write");
        std::fs::write(
            styles.join("terse.md"),
            "---\nkeep-coding-instructions: true\n---\nOne line answers.\n",
        )
        .expect("write");
        let home = tempfile::tempdir().expect("tempdir");
        let names = || -> Vec<String> {
            available(dir.path(), Some(home.path()))
                .into_iter()
                .map(|s| s.name)
                .collect()
        };
        assert_eq!(
            names(),
            ["Explanatory", "Learning"],
            "not until it is trusted"
        );
        let trusted = serde_json::json!({"projects": {
            dir.path().display().to_string(): {"hasTrustDialogAccepted": true}}});
        std::fs::write(home.path().join(".claude.json"), trusted.to_string()).expect("write");
        assert_eq!(names(), ["Explanatory", "Learning", "Pirate", "terse"]);
        let home = Some(home.path());
        let pirate = find("pirate", dir.path(), home).expect("found whatever the case");
        let text = instructions("I am.", "Code well.", Some(&pirate));
        assert!(
            text.contains("Say arr.") && !text.contains("Code well."),
            "{text}"
        );
        let terse = find("terse", dir.path(), home).expect("named after its file");
        let text = instructions("I am.", "Code well.", Some(&terse));
        assert!(
            text.contains("One line answers.") && text.contains("Code well."),
            "{text}"
        );
        assert_eq!(find("default", dir.path(), home), None);
        assert_eq!(
            instructions("I am.", "Code well.", None),
            "I am.\n\nCode well."
        );
    }
}
