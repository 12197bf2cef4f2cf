//! Rules from the settings files: `~/.claude/settings.json`, `<project>/.claude/settings.json`,
//! `<project>/.claude/settings.local.json` (`permissions.allow/ask/deny`,
//! `permissions.additionalDirectories`) and tether's own `config.toml` (`[permissions]
//! allow/ask/deny`). Malformed rules are collected as problems naming the file, never silently
//! dropped. An untrusted project's files add their deny and ask rules only ([`crate::trust`]).

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
    /// A settings file's rules could not be read at all: its deny rules may be missing, so no
    /// call runs without asking.
    pub unreadable: bool,
    /// `file: what` for each untrusted project file whose widening parts were left out.
    pub untrusted: Vec<String>,
    /// The session's directory, which `./path` and `path` rules resolve against, whichever file
    /// they are in (Claude Code's reading); unset, the rules' own base.
    pub cwd: Option<PathBuf>,
    /// The call is a Bash call the OS sandbox holds with `autoAllowBashIfSandboxed` on
    /// (`crate::sandbox` says which): allowed unless a deny or ask rule matches it. Set per call
    /// by the session's permission check.
    pub sandboxed_bash: bool,
    /// The session's OS sandbox is on: a Bash call that asks to leave it
    /// (`dangerouslyDisableSandbox`) is always asked about. Set per call like `sandboxed_bash`.
    pub sandbox_on: bool,
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
            match Rule::parse_in(text, base, self.cwd.as_deref().unwrap_or(base), home) {
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

    /// Adds the rules of one settings file. A file that is not there adds nothing; any other
    /// failure — unreadable, a directory, not JSON, `permissions` not an object — is a problem,
    /// and the set is marked [`RuleSet::unreadable`] so nothing runs unasked while a deny rule
    /// may be missing. A byte that is not UTF-8 is reported and read as U+FFFD: the rest of
    /// the file, its deny rules included, still applies.
    fn add_file(&mut self, file: &Path, base: &Path, home: Option<&Path>, trusted: bool) {
        let source = file.display().to_string();
        let bytes = match std::fs::read(file) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                self.fail(format!("{source}: cannot be read ({e})"));
                return;
            }
        };
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => {
                self.problems.push(format!(
                    "{source}: not valid UTF-8 at byte {}; read with the bad bytes replaced",
                    e.utf8_error().valid_up_to()
                ));
                String::from_utf8_lossy(e.as_bytes()).into_owned()
            }
        };
        let v: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                self.fail(format!("{source}: not valid JSON ({e})"));
                return;
            }
        };
        if !v.is_object() {
            self.fail(format!("{source}: not a JSON object"));
            return;
        }
        if !matches!(v["permissions"], Value::Null | Value::Object(_)) {
            self.fail(format!("{source}: \"permissions\" must be an object"));
            return;
        }
        if trusted {
            self.add_settings(&v, base, home, &source);
        } else {
            self.add_narrowing(&v, base, home, &source);
        }
        self.place(&source, &text);
    }

    /// Sets the line of each rule read from `source`, whose text is `text`: the first line
    /// that holds the rule as a JSON string (after the last rule placed of the same list).
    fn place(&mut self, source: &str, text: &str) {
        for list in [&mut self.allow, &mut self.ask, &mut self.deny] {
            let mut from = 0;
            for rule in list
                .iter_mut()
                .filter(|r| r.source == source && r.line.is_none())
            {
                let Ok(quoted) = serde_json::to_string(&rule.text) else {
                    continue;
                };
                let at = text
                    .get(from..)
                    .and_then(|rest| rest.find(&quoted))
                    .map(|i| i + from)
                    .or_else(|| text.find(&quoted));
                if let Some(at) = at {
                    rule.line = Some(text[..at].matches('\n').count() + 1);
                    from = at + quoted.len();
                }
            }
        }
    }

    /// Adds only the deny and ask rules of an untrusted project's settings, and says what was
    /// left out.
    fn add_narrowing(&mut self, v: &Value, base: &Path, home: Option<&Path>, source: &str) {
        let mut narrowing = v.clone();
        if let Some(p) = narrowing["permissions"].as_object_mut() {
            p.remove("allow");
            p.remove("additionalDirectories");
        }
        let left_out = super::keys::widening(v);
        self.add_settings(&narrowing, base, home, source);
        if !left_out.is_empty() {
            self.untrusted
                .push(format!("{source}: {}", left_out.join(", ")));
        }
    }

    /// Records a settings file whose rules could not be read at all.
    fn fail(&mut self, why: String) {
        self.unreadable = true;
        self.problems.push(format!(
            "{why}; its permission rules are unknown, so every tool call asks until it is fixed"
        ));
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
                // Deny or ask rules that cannot be read: nothing may run unasked.
                _ if kind != "allow" => self.fail(format!(
                    "{source}: permissions.{kind} must be a list of rules"
                )),
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
        let source = file.display().to_string();
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                self.fail(format!("{source}: cannot be read ({e})"));
                return;
            }
        };
        let table: toml::Table = match toml::from_str(&text) {
            Ok(t) => t,
            Err(e) => {
                self.fail(format!("{source}: not valid TOML ({e})"));
                return;
            }
        };
        let Some(perms) = table.get("permissions") else {
            return;
        };
        let Some(perms) = perms.as_table() else {
            self.fail(format!("{source}: [permissions] must be a table"));
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
                None if key != "allow" => self.fail(format!(
                    "{source}: permissions.{key} must be a list of rules"
                )),
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
    let mut set = RuleSet {
        cwd: Some(root.to_owned()),
        ..RuleSet::default()
    };
    if let Some(config) = crate::config::default_path() {
        set.add_config(&config, root, home);
    }
    if let Some(h) = home {
        set.add_file(&h.join(".claude/settings.json"), h, home, true);
    }
    // The user state file, read once: "always" answers given while the project was not
    // trusted (the user's own), and the project's trust.
    let state = crate::trust::state(home);
    let always: Vec<String> = state["projects"][root.to_string_lossy().as_ref()]["allowedTools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str().map(str::to_owned))
        .collect();
    if let Some(file) = crate::json_file::user_state_file(home) {
        set.add("allow", &always, root, home, &file.display().to_string());
    }
    let trusted = crate::trust::is_trusted_in(&state, root, home);
    set.add_file(&root.join(".claude/settings.json"), root, home, trusted);
    set.add_file(
        &root.join(".claude/settings.local.json"),
        root,
        home,
        trusted,
    );
    if !set.untrusted.is_empty() {
        set.problems.push(format!(
            "{} is not trusted, so its settings apply only where they narrow what runs (deny and ask rules); \
             left out: {}. Run `tether trust` there to trust it",
            root.display(),
            set.untrusted.join("; ")
        ));
    }
    set
}

/// Remembers an "always" answer: in `permissions.allow` of
/// `<root>/.claude/settings.local.json` (created, everything else in it kept) when the project
/// is trusted; otherwise — its own settings files do not widen anything yet — in the user's
/// `~/.claude.json`, `projects["<root>"].allowedTools`, where Claude Code kept such answers and
/// which [`load`] reads as the user's own. Returns the file written.
pub fn remember_always(root: &Path, home: Option<&Path>, rule: &str) -> Result<PathBuf, String> {
    if !crate::trust::is_trusted(root, home) {
        let file = crate::json_file::user_state_file(home)
            .ok_or("no home directory for ~/.claude.json")?;
        let key = root.to_string_lossy().into_owned();
        crate::json_file::update(&file, |v| {
            let entry = crate::json_file::object_at(v, &["projects".into(), key]);
            let list = entry.entry("allowedTools").or_insert_with(|| json!([]));
            if !list.is_array() {
                *list = json!([]);
            }
            if let Some(list) = list.as_array_mut()
                && !list.iter().any(|r| r.as_str() == Some(rule))
            {
                list.push(json!(rule));
            }
            Ok(())
        })?;
        return Ok(file);
    }
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
