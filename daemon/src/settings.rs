//! Claude Code's settings files (`~/.claude/settings.json`, `<project>/.claude/settings.json`,
//! `<project>/.claude/settings.local.json`) and the keys tether reads from them outside the
//! permission rules and hooks: `env`, `attribution`/`includeCoAuthoredBy`, `apiKeyHelper`,
//! `cleanupPeriodDays`, `outputStyle`. (`permissions/keys.rs` says which keys are used; the rules and hooks
//! read their own.) A project's own files count only once its directory is trusted
//! ([`crate::trust`]); until then [`files`] leaves them out.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// The settings files, most general first, with their parsed contents (files that are missing
/// or not JSON are left out; the rules' loader reports the latter), the project's only when
/// `root` is trusted.
pub fn files(root: &Path, home: Option<&Path>) -> Vec<(PathBuf, Value)> {
    let trusted = crate::trust::is_trusted(root, home);
    all_files(root, home)
        .into_iter()
        .filter(|(p, _)| trusted || !is_project_file(p, root))
        .collect()
}

/// Whether `file` is one of the project's own settings files (under `<root>/.claude`), not the
/// user's.
pub fn is_project_file(file: &Path, root: &Path) -> bool {
    file.starts_with(root.join(".claude"))
}

/// Every settings file, trusted or not (for reports, and for the rules that only narrow).
pub fn all_files(root: &Path, home: Option<&Path>) -> Vec<(PathBuf, Value)> {
    let mut paths = Vec::new();
    if let Some(h) = home {
        paths.push(h.join(".claude/settings.json"));
    }
    paths.push(root.join(".claude/settings.json"));
    paths.push(root.join(".claude/settings.local.json"));
    paths
        .into_iter()
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            let v = serde_json::from_str::<Value>(&text).ok()?;
            v.is_object().then_some((p, v))
        })
        .collect()
}

/// The `env` of the settings files (local over project over user): variables set for the
/// session's Bash commands and hooks. Values that are not strings are written as JSON
/// (`1`, `true`), as Claude Code's users write them by mistake.
pub fn env(root: &Path, home: Option<&Path>) -> Vec<(String, String)> {
    env_of(&files(root, home))
}

/// [`env`] of files already read by [`files`].
pub fn env_of(files: &[(PathBuf, Value)]) -> Vec<(String, String)> {
    let mut vars = std::collections::BTreeMap::new();
    for (_, v) in files {
        for (k, value) in v["env"].as_object().into_iter().flatten() {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                continue;
            }
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Null => continue,
                other => other.to_string(),
            };
            if !text.contains('\0') {
                vars.insert(k.clone(), text);
            }
        }
    }
    vars.into_iter().collect()
}

/// What the model adds to the commits and pull requests it writes, from `attribution`
/// (`commit`, `pr`: the text, empty for none) or the older `includeCoAuthoredBy`. Tether adds
/// nothing unless a settings file asks.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Attribution {
    /// Lines that end a commit message.
    pub commit: Option<String>,
    /// Lines that end a pull request description.
    pub pr: Option<String>,
}

/// `outputStyle` of the most specific settings file that sets it.
pub fn output_style(root: &Path, home: Option<&Path>) -> Option<String> {
    output_style_of(&files(root, home))
}

/// [`output_style`] of settings files already read ([`files`]).
pub fn output_style_of(files: &[(PathBuf, Value)]) -> Option<String> {
    files
        .iter()
        .filter_map(|(_, v)| v["outputStyle"].as_str().map(str::to_owned))
        .rfind(|s| !s.trim().is_empty())
}

/// The trailer `includeCoAuthoredBy: true` means.
pub const CO_AUTHORED_BY: &str = "Co-Authored-By: Claude <noreply@anthropic.com>";

/// The attribution of the most specific file that sets each part, in settings files already
/// read ([`files`]).
pub fn attribution_of(files: &[(PathBuf, Value)]) -> Attribution {
    let mut out = Attribution::default();
    let text = |v: &str| (!v.trim().is_empty()).then(|| v.trim_end().to_owned());
    for (_, v) in files {
        if let Some(on) = v["includeCoAuthoredBy"].as_bool() {
            out.commit = on.then(|| CO_AUTHORED_BY.to_owned());
        }
        if let Some(commit) = v["attribution"]["commit"].as_str() {
            out.commit = text(commit);
        }
        if let Some(pr) = v["attribution"]["pr"].as_str() {
            out.pr = text(pr);
        }
    }
    out
}

/// `cleanupPeriodDays` of `~/.claude/settings.json`: idle sessions unused for longer are
/// deleted. Only the user's file counts (the daemon's sessions are the user's); `0`, which
/// in Claude Code turns persistence off, is refused: tether's sessions are what it keeps.
pub fn cleanup_period(home: &Path) -> Option<std::time::Duration> {
    let text = std::fs::read_to_string(home.join(".claude/settings.json")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    match v["cleanupPeriodDays"].as_u64()? {
        0 => {
            tracing::warn!(
                "cleanupPeriodDays 0 is not used: tether keeps its sessions (delete them with tether rm)"
            );
            None
        }
        days => Some(std::time::Duration::from_secs(days.min(36_500) * 86_400)),
    }
}

/// `apiKeyHelper` of `~/.claude/settings.json`: one API key serves every session of the
/// daemon, so a project's settings cannot choose it.
pub fn api_key_helper(home: &Path) -> Option<String> {
    let text = std::fs::read_to_string(home.join(".claude/settings.json")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v["apiKeyHelper"]
        .as_str()
        .filter(|c| !c.trim().is_empty())
        .map(str::to_owned)
}
