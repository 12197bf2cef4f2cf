//! Workspace trust: whether a directory's own files (its `.claude/settings.json` and
//! `settings.local.json` hooks, allow rules, `additionalDirectories`, `env` and sandbox
//! allowances, its `.mcp.json` servers, its statusLine command) may act. Kept where Claude
//! Code keeps it — `projects["<dir>"].hasTrustDialogAccepted` in `~/.claude.json` — so trust
//! given in one tool holds in the other. A directory is trusted when the nearest answer for it
//! or a directory above it (below home: trust given to home or `/` covers nothing) says so, or
//! when it is the home directory (the user's own settings are not a project's). A directory
//! with settings, skills (whose `allowed-tools` allow) or an `.mcp.json` of its own needs its
//! own answer.
//!
//! Until a directory is trusted its deny and ask rules apply and nothing that widens what runs
//! does. `TETHER_TRUST_ALL=1` in tetherd's environment trusts every directory (CI machines that
//! only ever see their own checkouts).

use crate::json_file::{object_at, read, update, user_state_file};
use serde_json::json;
use std::path::{Path, PathBuf};

/// The key Claude Code keeps the answer under.
const KEY: &str = "hasTrustDialogAccepted";

/// The variable that trusts every directory.
pub const TRUST_ALL_VAR: &str = "TETHER_TRUST_ALL";

/// Whether `dir`'s project files may act.
pub fn is_trusted(dir: &Path, home: Option<&Path>) -> bool {
    is_trusted_in(&state(home), dir, home)
}

/// [`is_trusted`], with the user state file already read (`state`, as [`state`] reads it).
pub fn is_trusted_in(state: &serde_json::Value, dir: &Path, home: Option<&Path>) -> bool {
    std::env::var(TRUST_ALL_VAR).is_ok_and(|v| v == "1" || v == "true")
        || trusted_in(state, dir, home)
}

/// The user state file's contents (`{}` when there is none or it cannot be read).
pub fn state(home: Option<&Path>) -> serde_json::Value {
    user_state_file(home)
        .and_then(|f| read(&f).ok())
        .unwrap_or_default()
}

fn trusted_in(state: &serde_json::Value, dir: &Path, home: Option<&Path>) -> bool {
    let dir = canonical(dir);
    let home = home.map(canonical);
    if home.as_ref() == Some(&dir) {
        return true;
    }
    let projects = &state["projects"];
    // A folder with project files of its own needs its own answer: trust given to a folder
    // above does not cover settings that appeared below it later (a command can write them).
    let own_files = [
        ".claude/settings.json",
        ".claude/settings.local.json",
        ".mcp.json",
        ".claude/skills",
    ]
    .iter()
    .any(|f| dir.join(f).exists());
    for d in dir.ancestors() {
        // Trust given to the home directory or above it (or to `/`) would cover every folder
        // below: only the folder itself, or one between it and home, counts.
        if d != dir
            && (own_files
                || d.parent().is_none()
                || home.as_ref().is_some_and(|h| h.starts_with(d)))
        {
            break;
        }
        // The nearest answer decides: a folder withdrawn below a trusted one is not trusted.
        if let Some(answer) = projects[d.to_string_lossy().as_ref()][KEY].as_bool() {
            return answer;
        }
    }
    false
}

/// The directory as trust is recorded for it: resolved through symlinks when it exists.
pub fn canonical(dir: &Path) -> PathBuf {
    dir.canonicalize().unwrap_or_else(|_| dir.to_owned())
}

/// Records that `dir` is trusted (or no longer is); returns the file written.
pub fn set(dir: &Path, home: Option<&Path>, trusted: bool) -> Result<PathBuf, String> {
    let file = user_state_file(home).ok_or("no home directory for ~/.claude.json")?;
    let key = canonical(dir).to_string_lossy().into_owned();
    update(&file, |v| {
        object_at(v, &["projects".into(), key]).insert(KEY.into(), json!(trusted));
        Ok(())
    })?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_is_kept_where_claude_code_keeps_it_and_covers_subdirectories() {
        let home = tempfile::tempdir().expect("tempdir");
        let work = tempfile::tempdir().expect("tempdir");
        let project = work.path().join("proj");
        let sub = project.join("sub");
        std::fs::create_dir_all(&sub).expect("mkdir");
        let h = Some(home.path());
        std::fs::write(
            home.path().join(".claude.json"),
            r#"{"theme": "dark", "projects": {"/elsewhere": {"hasTrustDialogAccepted": true}}}"#,
        )
        .expect("write");
        assert!(!trusted_in(&state(h), &project, h));
        assert!(
            trusted_in(&state(h), home.path(), h),
            "home is the user's own"
        );
        let file = set(&project, h, true).expect("set");
        assert_eq!(file, home.path().join(".claude.json"));
        assert!(trusted_in(&state(h), &project, h));
        assert!(
            trusted_in(&state(h), &sub, h),
            "a directory below is trusted"
        );
        assert!(
            !trusted_in(&state(h), work.path(), h),
            "the one above is not"
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
        assert_eq!(v["theme"], "dark", "other keys are kept");
        let key = project.canonicalize().expect("canonical");
        assert_eq!(v["projects"][key.to_string_lossy().as_ref()][KEY], true);
        set(&project, h, false).expect("unset");
        assert!(!trusted_in(&state(h), &sub, h));
        // The nearest answer decides.
        set(&project, h, true).expect("set");
        set(&sub, h, false).expect("withdraw");
        assert!(!trusted_in(&state(h), &sub, h));
        assert!(trusted_in(&state(h), &project, h));
    }

    #[test]
    fn trust_given_to_home_or_above_covers_nothing_below() {
        let home = tempfile::tempdir().expect("tempdir");
        let project = home.path().join("src/clone");
        std::fs::create_dir_all(&project).expect("mkdir");
        let h = Some(home.path());
        set(home.path(), h, true).expect("set");
        set(Path::new("/"), h, true).expect("set");
        assert!(!trusted_in(&state(h), &project, h));
        set(&home.path().join("src"), h, true).expect("set");
        assert!(
            trusted_in(&state(h), &project, h),
            "a folder between counts"
        );
        // Project files of its own: the folder above no longer answers for it.
        std::fs::create_dir_all(project.join(".claude")).expect("mkdir");
        std::fs::write(project.join(".claude/settings.json"), "{}").expect("write");
        assert!(!trusted_in(&state(h), &project, h));
        set(&project, h, true).expect("set");
        assert!(trusted_in(&state(h), &project, h));
    }

    #[test]
    fn a_broken_state_file_trusts_nothing_and_is_not_overwritten() {
        let home = tempfile::tempdir().expect("tempdir");
        let project = tempfile::tempdir().expect("tempdir");
        let h = Some(home.path());
        std::fs::write(home.path().join(".claude.json"), "{ not json").expect("write");
        assert!(!trusted_in(&state(h), project.path(), h));
        assert!(set(project.path(), h, true).is_err());
        assert_eq!(
            std::fs::read_to_string(home.path().join(".claude.json")).expect("read"),
            "{ not json"
        );
    }
}
