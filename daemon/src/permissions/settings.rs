//! Rules from the settings files: `~/.claude/settings.json`, `<project>/.claude/settings.json`,
//! `<project>/.claude/settings.local.json` (`permissions.allow/ask/deny`,
//! `permissions.additionalDirectories`) and tether's own `config.toml` (`[permissions]
//! allow/ask/deny`). Malformed rules are collected as problems naming the file, never silently
//! dropped.

use super::rules::Rule;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The merged rules of a session.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    /// Allow rules.
    pub allow: Vec<Rule>,
    /// Ask rules.
    pub ask: Vec<Rule>,
    /// Deny rules.
    pub deny: Vec<Rule>,
    /// Extra working directories.
    pub additional_dirs: Vec<PathBuf>,
    /// `file: rule: why` for every rule that could not be read.
    pub problems: Vec<String>,
    /// The call is a Bash call the OS sandbox holds with `autoAllowBashIfSandboxed` on
    /// (`crate::sandbox` says which): allowed unless a deny or ask rule matches it. Set per call
    /// by the session's permission check.
    pub sandboxed_bash: bool,
}

impl RuleSet {
    /// Adds rules of one kind written in `source`, relative to `base`.
    pub fn add(
        &mut self,
        kind: &str,
        texts: &[String],
        base: &Path,
        home: Option<&Path>,
        source: &str,
    ) {
        for text in texts {
            match Rule::parse(text, base, home) {
                Ok(mut rule) => {
                    rule.source = source.to_owned();
                    match kind {
                        "allow" => self.allow.push(rule),
                        "ask" => self.ask.push(rule),
                        _ => self.deny.push(rule),
                    }
                }
                Err(why) => self
                    .problems
                    .push(format!("{source}: permission rule {text:?} ignored: {why}")),
            }
        }
    }

    fn add_file(&mut self, file: &Path, base: &Path, home: Option<&Path>) {
        let Ok(text) = std::fs::read_to_string(file) else {
            return;
        };
        let source = file.display().to_string();
        let v: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                self.problems.push(format!(
                    "{source}: not valid JSON, its permissions are ignored: {e}"
                ));
                return;
            }
        };
        self.add_settings(&v, base, home, &source);
    }

    /// Adds the `permissions` of one settings object (a file's, or `--settings`).
    pub fn add_settings(&mut self, v: &Value, base: &Path, home: Option<&Path>, source: &str) {
        let p = &v["permissions"];
        for kind in ["allow", "ask", "deny"] {
            match &p[kind] {
                Value::Null => {}
                Value::Array(items) => {
                    let texts: Vec<String> = items
                        .iter()
                        .filter_map(|i| i.as_str().map(str::to_owned))
                        .collect();
                    if texts.len() != items.len() {
                        self.problems.push(format!(
                            "{source}: permissions.{kind} holds entries that are not strings"
                        ));
                    }
                    self.add(kind, &texts, base, home, source);
                }
                _ => self.problems.push(format!(
                    "{source}: permissions.{kind} must be a list of rules"
                )),
            }
        }
        if let Some(dirs) = p["additionalDirectories"].as_array() {
            for d in dirs.iter().filter_map(Value::as_str) {
                let path = if let Some(rest) = d.strip_prefix("~/") {
                    home.map(|h| h.join(rest))
                        .unwrap_or_else(|| PathBuf::from(d))
                } else if Path::new(d).is_absolute() {
                    PathBuf::from(d)
                } else {
                    base.join(d)
                };
                self.additional_dirs.push(path);
            }
        }
    }
}

impl RuleSet {
    /// Adds the `[permissions]` table of tether's `config.toml` (paths relative to `base`).
    pub fn add_config(&mut self, file: &Path, base: &Path, home: Option<&Path>) {
        let Ok(text) = std::fs::read_to_string(file) else {
            return;
        };
        let source = file.display().to_string();
        let table: toml::Table = match toml::from_str(&text) {
            Ok(t) => t,
            Err(e) => {
                self.problems.push(format!(
                    "{source}: not valid TOML, its permissions are ignored: {e}"
                ));
                return;
            }
        };
        let Some(perms) = table.get("permissions") else {
            return;
        };
        let Some(perms) = perms.as_table() else {
            self.problems
                .push(format!("{source}: [permissions] must be a table"));
            return;
        };
        for (key, value) in perms {
            if !matches!(key.as_str(), "allow" | "ask" | "deny") {
                self.problems
                    .push(format!("{source}: unknown key permissions.{key}"));
                continue;
            }
            let texts: Option<Vec<String>> = value.as_array().map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            });
            match texts {
                Some(t) => self.add(key, &t, base, home, &source),
                None => self.problems.push(format!(
                    "{source}: permissions.{key} must be a list of rules"
                )),
            }
        }
    }
}

/// The rules for a project at `root`, with the user's rules from `home` and tether's
/// `config_file`.
pub fn load(root: &Path, home: Option<&Path>) -> RuleSet {
    let mut set = RuleSet::default();
    if let Some(config) = crate::config::default_path() {
        set.add_config(&config, root, home);
    }
    if let Some(h) = home {
        set.add_file(&h.join(".claude/settings.json"), h, home);
    }
    set.add_file(&root.join(".claude/settings.json"), root, home);
    set.add_file(&root.join(".claude/settings.local.json"), root, home);
    set
}

/// Adds `rule` to `permissions.allow` of `<root>/.claude/settings.local.json`, creating the file
/// and keeping everything else in it.
pub fn remember_always(root: &Path, rule: &str) -> Result<PathBuf, String> {
    let file = root.join(".claude/settings.local.json");
    let mut v: Value = match std::fs::read_to_string(&file) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            format!(
                "{} is not valid JSON, so the rule was not saved: {e}",
                file.display()
            )
        })?,
        Err(_) => json!({}),
    };
    if !v.is_object() {
        return Err(format!("{} is not a JSON object", file.display()));
    }
    if !v["permissions"].is_object() {
        v["permissions"] = json!({});
    }
    if !v["permissions"]["allow"].is_array() {
        v["permissions"]["allow"] = json!([]);
    }
    if let Some(allow) = v["permissions"]["allow"].as_array_mut()
        && !allow.iter().any(|r| r.as_str() == Some(rule))
    {
        allow.push(json!(rule));
    }
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())? + "\n";
    std::fs::write(&file, text).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    Ok(file)
}
