//! What tether does with each key of Claude Code's settings files (`~/.claude/settings.json`,
//! `<project>/.claude/settings.json`, `<project>/.claude/settings.local.json`): the defaults a
//! new session takes from them (`permissions.defaultMode`, `model`; local over project over
//! user), the report `/config` shows — every key, used or not used by tether, so nothing
//! is dropped silently — and what an untrusted project's files would do once trusted.

use crate::settings::{all_files, is_project_file};
use serde_json::Value;
use std::path::Path;
use tether_proto::{PermissionMode, SettingsKey};

/// The keys tether reads, and what for.
const USED: &[(&str, &str)] = &[
    ("$schema", "ignored (the file's schema)"),
    (
        "permissions",
        "allow/ask/deny rules, additionalDirectories, defaultMode",
    ),
    ("hooks", "hooks"),
    ("model", "the model of new sessions"),
    ("env", "environment of Bash commands and hooks"),
    (
        "cleanupPeriodDays",
        "idle sessions unused for longer are deleted (read from ~/.claude/settings.json, daily)",
    ),
    (
        "attribution",
        "the lines the model ends commits and pull requests with",
    ),
    (
        "includeCoAuthoredBy",
        "a Co-Authored-By trailer on commits (attribution.commit wins)",
    ),
    (
        "statusLine",
        "the terminal client's status line (the command's first line)",
    ),
    (
        "apiKeyHelper",
        "the command that prints the API key (read when tetherd starts)",
    ),
    (
        "sandbox",
        "the OS sandbox Bash commands run in (bubblewrap; see /sandbox)",
    ),
    (
        "outputStyle",
        "how the agent talks (see /output-style), from the next session",
    ),
    ("enableAllProjectMcpServers", "MCP server approval"),
    ("enabledMcpjsonServers", "MCP server approval"),
    ("disabledMcpjsonServers", "MCP server approval"),
];

/// The `permissions` keys tether reads.
const USED_PERMISSIONS: &[&str] = &[
    "allow",
    "ask",
    "deny",
    "additionalDirectories",
    "defaultMode",
];

/// What a new session in `root` starts with when its creator does not say.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Defaults {
    /// `permissions.defaultMode`.
    pub permission_mode: Option<PermissionMode>,
    /// `model`.
    pub model: Option<String>,
}

/// The defaults of the most specific file that sets each. An untrusted project's file may set
/// the model, and plan mode, but no mode that runs more without asking.
pub fn defaults(root: &Path, home: Option<&Path>) -> Defaults {
    let mut out = Defaults::default();
    let trusted = crate::trust::is_trusted(root, home);
    for (path, v) in all_files(root, home) {
        let project = is_project_file(&path, root);
        if let Some(mode) = v["permissions"]["defaultMode"].as_str() {
            match serde_json::from_value::<PermissionMode>(Value::String(mode.to_owned())) {
                Ok(m) if trusted || !project || m == PermissionMode::Plan => {
                    out.permission_mode = Some(m)
                }
                Ok(_) => {}
                Err(_) => tracing::warn!(
                    "{}: permissions.defaultMode {mode:?} is not a mode tether has",
                    path.display()
                ),
            }
        }
        if let Some(model) = v["model"].as_str().filter(|m| !m.trim().is_empty()) {
            out.model = Some(model.to_owned());
        }
    }
    out
}

/// The parts of one project settings file that widen what runs, as a person reads them
/// (`2 allow rules`, `SessionStart hooks`, `env`): what trust would let act.
pub fn widening(v: &Value) -> Vec<String> {
    let mut parts = Vec::new();
    let allow = v["permissions"]["allow"].as_array().map_or(0, Vec::len);
    if allow > 0 {
        parts.push(format!(
            "{allow} allow rule{}",
            if allow == 1 { "" } else { "s" }
        ));
    }
    if v["permissions"].get("additionalDirectories").is_some() {
        parts.push("additionalDirectories".to_owned());
    }
    if let Some(hooks) = v["hooks"].as_object().filter(|h| !h.is_empty()) {
        let events: Vec<&str> = hooks.keys().map(String::as_str).collect();
        parts.push(format!("{} hooks", events.join("/")));
    }
    for key in ["env", "statusLine", "enableAllProjectMcpServers"] {
        if v.get(key).is_some() {
            parts.push(key.to_owned());
        }
    }
    if matches!(
        v["permissions"]["defaultMode"].as_str(),
        Some("acceptEdits" | "bypassPermissions" | "dontAsk")
    ) {
        parts.push("defaultMode".to_owned());
    }
    // The sandbox: turning it on only narrows; anything else it says widens.
    if v["sandbox"]
        .as_object()
        .is_some_and(|s| s.iter().any(|(k, val)| !(k == "enabled" && *val == true)))
    {
        parts.push("sandbox allowances".to_owned());
    }
    parts
}

/// What of `dir`'s own would act once it is trusted ([`crate::trust`]): per settings file, the
/// parts that widen what runs ([`widening`]); the `.mcp.json` servers. Empty when there is
/// nothing to trust.
pub fn acts(dir: &Path, home: Option<&Path>) -> Vec<String> {
    let mut out = Vec::new();
    for (file, v) in all_files(dir, home) {
        let parts = widening(&v);
        if is_project_file(&file, dir) && !parts.is_empty() {
            out.push(format!("{}: {}", file.display(), parts.join(", ")));
        }
    }
    if let Some(file) = crate::mcp::config::project_file(dir)
        && let Ok(v) = crate::json_file::read(&file)
        && let Some(servers) = v["mcpServers"].as_object().filter(|s| !s.is_empty())
    {
        let names: Vec<&str> = servers.keys().map(String::as_str).collect();
        out.push(format!(
            "{}: MCP servers {}",
            file.display(),
            names.join(", ")
        ));
    }
    out
}

/// Every key of the settings files, and whether tether uses it.
pub fn report(root: &Path, home: Option<&Path>) -> Vec<SettingsKey> {
    let mut keys = Vec::new();
    let user_file = home.map(|h| h.join(".claude/settings.json"));
    for (path, v) in all_files(root, home) {
        let source = path.display().to_string();
        let Some(map) = v.as_object() else { continue };
        for (key, value) in map {
            if key == "apiKeyHelper" && Some(&path) != user_file.as_ref() {
                keys.push(SettingsKey {
                    source: source.clone(),
                    key: key.clone(),
                    used: false,
                    note: "not used by tether here: one key serves the daemon, so only ~/.claude/settings.json's is read".into(),
                });
                continue;
            }
            match USED.iter().find(|(k, _)| k == key) {
                Some((_, what)) => keys.push(SettingsKey {
                    source: source.clone(),
                    key: key.clone(),
                    used: true,
                    note: (*what).to_owned(),
                }),
                None => keys.push(SettingsKey {
                    source: source.clone(),
                    key: key.clone(),
                    used: false,
                    note: "not used by tether".into(),
                }),
            }
            if key == "permissions"
                && let Some(inner) = value.as_object()
            {
                for k in inner
                    .keys()
                    .filter(|k| !USED_PERMISSIONS.contains(&k.as_str()))
                {
                    keys.push(SettingsKey {
                        source: source.clone(),
                        key: format!("permissions.{k}"),
                        used: false,
                        note: "not used by tether".into(),
                    });
                }
            }
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{Attribution, CO_AUTHORED_BY, attribution_of, env, files};

    #[test]
    fn local_settings_win_and_every_key_is_reported() {
        let home = tempfile::tempdir().expect("tempdir");
        let root = tempfile::tempdir().expect("tempdir");
        crate::trust::set(root.path(), Some(home.path()), true).expect("trust");
        std::fs::create_dir_all(home.path().join(".claude")).expect("mkdir");
        std::fs::create_dir_all(root.path().join(".claude")).expect("mkdir");
        std::fs::write(
            home.path().join(".claude/settings.json"),
            r#"{"model": "haiku", "permissions": {"defaultMode": "plan"}, "statusLine": {}, "env": {"A": "user", "B": "user", "N": 1}}"#,
        )
        .expect("write");
        std::fs::write(
            root.path().join(".claude/settings.local.json"),
            r#"{"permissions": {"defaultMode": "acceptEdits", "disableBypassPermissionsMode": "disable"}, "env": {"B": "local", "=x": "no"}}"#,
        )
        .expect("write");
        let d = defaults(root.path(), Some(home.path()));
        assert_eq!(d.permission_mode, Some(PermissionMode::AcceptEdits));
        assert_eq!(d.model.as_deref(), Some("haiku"));
        assert_eq!(
            attribution_of(&files(root.path(), Some(home.path()))),
            Attribution::default()
        );
        std::fs::write(
            root.path().join(".claude/settings.json"),
            r#"{"includeCoAuthoredBy": true, "attribution": {"pr": "Made with tether"}}"#,
        )
        .expect("write");
        assert_eq!(
            attribution_of(&files(root.path(), Some(home.path()))),
            Attribution {
                commit: Some(CO_AUTHORED_BY.into()),
                pr: Some("Made with tether".into())
            }
        );
        let vars = env(root.path(), Some(home.path()));
        let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(pairs, [("A", "user"), ("B", "local"), ("N", "1")]);
        let report = report(root.path(), Some(home.path()));
        let find = |k: &str| report.iter().find(|r| r.key == k).cloned();
        assert!(find("model").expect("model").used);
        assert!(find("statusLine").expect("statusLine").used);
        assert!(
            !find("permissions.disableBypassPermissionsMode")
                .expect("nested")
                .used
        );
    }
}
