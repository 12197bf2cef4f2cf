//! Memory files: `~/.claude/CLAUDE.md` and `~/.claude/rules/*.md`, then from the repository root
//! (or only the working directory outside a repository) down to the working directory:
//! `CLAUDE.md`, `.claude/CLAUDE.md`, `CLAUDE.local.md`, `AGENTS.md`, `.claude/rules/*.md`. A rule
//! file whose frontmatter has `paths:` is for those files only and is not loaded here (its
//! frontmatter is never part of the text). `@relative/path` imports inside them are inlined up
//! to 4 hops deep; cycles are ignored.
//!
//! [`for_file`] is what a file the model touches brings with it: the memory files of the
//! folders between the working directory and the file, and the rules whose `paths:` match it.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// How deep imports are followed.
const MAX_HOPS: usize = 4;
/// Largest memory file read.
const MAX_BYTES: u64 = 64 * 1024;
/// Memory file names, in the order they are read in each directory.
const NAMES: &[&str] = &[
    "CLAUDE.md",
    ".claude/CLAUDE.md",
    "CLAUDE.local.md",
    "AGENTS.md",
];

/// One memory file with its imports inlined.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    /// Where it was read.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
}

/// The memory files for `cwd`, outermost first.
pub fn load(cwd: &Path, repo_root: Option<&Path>, home: Option<&Path>) -> Vec<Memory> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    if let Some(home) = home {
        read(&home.join(".claude/CLAUDE.md"), &mut seen, &mut out);
        rules(&home.join(".claude/rules"), &mut seen, &mut out);
    }
    let top = repo_root.filter(|r| cwd.starts_with(r)).unwrap_or(cwd);
    let mut dirs: Vec<&Path> = cwd.ancestors().take_while(|d| d.starts_with(top)).collect();
    dirs.reverse();
    for dir in dirs {
        for name in NAMES {
            read(&dir.join(name), &mut seen, &mut out);
        }
        rules(&dir.join(".claude/rules"), &mut seen, &mut out);
    }
    out
}

/// The memory a file the model touches brings with it, beyond what [`load`] read at the start:
/// the memory files and path-less rules of each folder below `cwd` down to the file's, and the
/// rule files (`~/.claude/rules`, and `.claude/rules` of `cwd` and those folders) whose
/// `paths:` globs match the file (relative to the folder that holds `.claude/`, or to `cwd`
/// for the user's).
pub fn for_file(file: &Path, cwd: &Path, home: Option<&Path>) -> Vec<Memory> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let Some(dir) = file.parent() else {
        return out;
    };
    let inside = dir.starts_with(cwd);
    if let Some(home) = home {
        path_rules(&home.join(".claude/rules"), cwd, file, &mut seen, &mut out);
    }
    path_rules(&cwd.join(".claude/rules"), cwd, file, &mut seen, &mut out);
    if !inside {
        return out;
    }
    let mut below: Vec<&Path> = dir.ancestors().take_while(|d| *d != cwd).collect();
    below.reverse();
    for d in below {
        for name in NAMES {
            read(&d.join(name), &mut seen, &mut out);
        }
        rules(&d.join(".claude/rules"), &mut seen, &mut out);
        path_rules(&d.join(".claude/rules"), d, file, &mut seen, &mut out);
    }
    out
}

/// The rule files of `dir` whose `paths:` match `file` (relative to `base`).
fn path_rules(
    dir: &Path,
    base: &Path,
    file: &Path,
    seen: &mut HashSet<PathBuf>,
    out: &mut Vec<Memory>,
) {
    let Ok(relative) = file.strip_prefix(base) else {
        return;
    };
    for path in super::frontmatter::markdown_files(dir) {
        let Some(text) = read_capped(&path) else {
            continue;
        };
        let (front, body) = super::frontmatter::split_lenient(&text);
        let Some(globs) = front.list("paths").filter(|p| !p.is_empty()) else {
            continue;
        };
        let matches = globs.iter().any(|g| {
            globset::Glob::new(g.trim())
                .map(|g| g.compile_matcher().is_match(relative))
                .unwrap_or(false)
        });
        let canonical = path.canonicalize().unwrap_or_else(|_| path.clone());
        if !matches || !seen.insert(canonical) {
            continue;
        }
        let text = inline_imports(&path, body, seen, 1);
        out.push(Memory { path, text });
    }
}

/// The `*.md` rule files of `dir`, by name, that apply everywhere (no `paths:`).
fn rules(dir: &Path, seen: &mut HashSet<PathBuf>, out: &mut Vec<Memory>) {
    for path in super::frontmatter::markdown_files(dir) {
        let Some(text) = read_capped(&path) else {
            continue;
        };
        let (front, body) = super::frontmatter::split_lenient(&text);
        if front.list("paths").is_some_and(|p| !p.is_empty()) {
            continue;
        }
        let canonical = path.canonicalize().unwrap_or_else(|_| path.clone());
        if !seen.insert(canonical) {
            continue;
        }
        let text = inline_imports(&path, body, seen, 1);
        out.push(Memory { path, text });
    }
}

/// One memory file on its own (no imports), if it exists.
pub fn read_one(path: &Path) -> Option<Memory> {
    read_capped(path).map(|text| Memory {
        path: path.to_owned(),
        text,
    })
}

fn read(path: &Path, seen: &mut HashSet<PathBuf>, out: &mut Vec<Memory>) {
    let Some(text) = read_capped(path) else {
        return;
    };
    let canonical = path.canonicalize().unwrap_or_else(|_| path.to_owned());
    if !seen.insert(canonical) {
        return;
    }
    let text = inline_imports(path, &text, seen, 1);
    out.push(Memory {
        path: path.to_owned(),
        text,
    });
}

fn read_capped(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_BYTES {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

fn inline_imports(path: &Path, text: &str, seen: &mut HashSet<PathBuf>, depth: usize) -> String {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut out = String::with_capacity(text.len());
    let mut in_code = false;
    for line in text.lines() {
        out.push_str(line);
        out.push('\n');
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        if in_code || depth > MAX_HOPS {
            continue;
        }
        for token in line.split_whitespace().filter_map(|t| t.strip_prefix('@')) {
            let target = if let Some(rest) = token.strip_prefix("~/") {
                match std::env::var_os("HOME") {
                    Some(h) => PathBuf::from(h).join(rest),
                    None => continue,
                }
            } else {
                dir.join(token)
            };
            let Some(imported) = read_capped(&target) else {
                continue;
            };
            let canonical = target.canonicalize().unwrap_or_else(|_| target.clone());
            if !seen.insert(canonical) {
                continue;
            }
            let body = inline_imports(&target, &imported, seen, depth + 1);
            out.push_str(&format!(
                "\n<!-- imported from {} -->\n{}\n",
                target.display(),
                body.trim_end()
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_from_root_to_cwd_with_imports_and_cycles() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let sub = root.join("crates/app");
        std::fs::create_dir_all(sub.join(".claude")).expect("mkdir");
        std::fs::write(root.join("CLAUDE.md"), "root rules\nsee @docs/style.md\n").expect("w");
        std::fs::create_dir_all(root.join("docs")).expect("mkdir");
        std::fs::write(
            root.join("docs/style.md"),
            "tabs not spaces\n@../CLAUDE.md\n",
        )
        .expect("w");
        std::fs::write(sub.join(".claude/CLAUDE.md"), "app rules\n").expect("w");
        std::fs::write(sub.join("AGENTS.md"), "agents\n").expect("w");
        let home = root.join("home");
        std::fs::create_dir_all(home.join(".claude")).expect("mkdir");
        std::fs::write(home.join(".claude/CLAUDE.md"), "personal\n").expect("w");
        let got = load(&sub, Some(root), Some(&home));
        let names: Vec<String> = got
            .iter()
            .map(|m| {
                m.path
                    .strip_prefix(root)
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            })
            .collect();
        assert_eq!(
            names,
            [
                "home/.claude/CLAUDE.md",
                "CLAUDE.md",
                "crates/app/.claude/CLAUDE.md",
                "crates/app/AGENTS.md"
            ]
        );
        assert!(got[1].text.contains("tabs not spaces"), "{}", got[1].text);
        // Rules: those for every file are read (without their frontmatter), path-scoped ones not.
        let rules = root.join(".claude/rules");
        std::fs::create_dir_all(&rules).expect("mkdir");
        std::fs::write(
            rules.join("b-testing.md"),
            "---\ndescription: x\n---\nrun the tests\n",
        )
        .expect("w");
        std::fs::write(
            rules.join("a-api.md"),
            "---\npaths: src/api/**\n---\napi only\n",
        )
        .expect("w");
        let with_rules = load(&sub, Some(root), Some(&home));
        let texts: Vec<&str> = with_rules.iter().map(|m| m.text.as_str()).collect();
        assert!(texts.contains(&"run the tests\n"), "{texts:?}");
        assert!(!texts.iter().any(|t| t.contains("api only")), "{texts:?}");
        assert!(
            !texts.iter().any(|t| t.contains("description")),
            "{texts:?}"
        );
        assert_eq!(
            got[1].text.matches("root rules").count(),
            1,
            "the cycle back is ignored"
        );
    }

    #[test]
    fn a_file_brings_the_memory_of_its_folders_and_the_rules_for_its_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cwd = dir.path();
        std::fs::create_dir_all(cwd.join("app/ui")).expect("mkdir");
        std::fs::create_dir_all(cwd.join(".claude/rules")).expect("mkdir");
        std::fs::write(cwd.join("CLAUDE.md"), "top\n").expect("w");
        std::fs::write(cwd.join("app/CLAUDE.md"), "app rules\n").expect("w");
        std::fs::write(cwd.join("app/ui/AGENTS.md"), "ui rules\n").expect("w");
        std::fs::write(
            cwd.join(".claude/rules/api.md"),
            "---\npaths:\n  - \"api/**/*.rs\"\n---\nversion every route\n",
        )
        .expect("w");
        std::fs::write(
            cwd.join(".claude/rules/ui.md"),
            "---\npaths: app/ui/**\n---\nno inline styles\n",
        )
        .expect("w");
        let texts = |file: &str| -> Vec<String> {
            for_file(&cwd.join(file), cwd, None)
                .into_iter()
                .map(|m| m.text.trim().to_owned())
                .collect()
        };
        assert_eq!(
            texts("app/ui/button.tsx"),
            ["no inline styles", "app rules", "ui rules"],
            "the rule for its path, then each folder's memory, outermost first"
        );
        assert_eq!(texts("app/main.rs"), ["app rules"]);
        assert_eq!(texts("api/v1/routes.rs"), ["version every route"]);
        assert!(
            texts("README.md").is_empty(),
            "the top folder's memory is loaded already"
        );
    }
}
