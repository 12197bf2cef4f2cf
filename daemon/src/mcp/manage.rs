//! Changes to the MCP configuration, written where Claude Code keeps it: `local` and `user`
//! servers in `~/.claude.json` (`projects["<dir>"].mcpServers`, `mcpServers`), `project` ones in
//! the project's `.mcp.json`, and approvals of `.mcp.json` servers in
//! `projects["<dir>"].enabledMcpjsonServers` / `disabledMcpjsonServers`.
//!
//! Invariant: every other key of a file is kept, the file is replaced atomically (a temporary
//! file renamed over it) keeping its mode (a new file is 0600), and a file that is not valid
//! JSON is never overwritten.

use super::config::{names_at, project_file, server_of};
use crate::json_file::{object_at, user_state_file};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// A change that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    /// The request is wrong (unknown scope, bad entry, no such server).
    #[error("{0}")]
    Invalid(String),
    /// A file could not be read or written.
    #[error("{0}")]
    File(String),
}

fn scope_of(scope: Option<&str>) -> Result<&str, ManageError> {
    match scope.unwrap_or("local") {
        s @ ("local" | "project" | "user") => Ok(s),
        other => Err(ManageError::Invalid(format!(
            "unknown scope {other:?} (local, project or user)"
        ))),
    }
}

fn read(file: &Path) -> Result<Value, ManageError> {
    crate::json_file::read(file).map_err(ManageError::File)
}

fn update<T>(
    file: &Path,
    change: impl FnOnce(&mut Value) -> Result<T, String>,
) -> Result<T, ManageError> {
    crate::json_file::update(file, change).map_err(ManageError::File)
}

/// The file a scope's servers are kept in, and the JSON path of its `mcpServers` object.
fn place(
    scope: &str,
    cwd: &Path,
    home: Option<&Path>,
) -> Result<(PathBuf, Vec<String>), ManageError> {
    let state = || {
        user_state_file(home)
            .ok_or_else(|| ManageError::File("no home directory for ~/.claude.json".into()))
    };
    Ok(match scope {
        "project" => (
            project_file(cwd).unwrap_or_else(|| cwd.join(".mcp.json")),
            vec!["mcpServers".into()],
        ),
        "user" => (state()?, vec!["mcpServers".into()]),
        _ => (
            state()?,
            vec![
                "projects".into(),
                cwd.to_string_lossy().into_owned(),
                "mcpServers".into(),
            ],
        ),
    })
}

/// Adds (or replaces) the server `name` in `scope`; returns the file and a message.
pub fn add(
    cwd: &Path,
    home: Option<&Path>,
    name: &str,
    scope: Option<&str>,
    entry: &Value,
) -> Result<(PathBuf, String), ManageError> {
    let scope = scope_of(scope)?;
    // Checked as it would be read (variables need not be set yet).
    server_of(name, entry, &|_| Some(String::new())).map_err(ManageError::Invalid)?;
    let (file, path) = place(scope, cwd, home)?;
    let replaced = update(&file, |v| {
        Ok(object_at(v, &path)
            .insert(name.to_owned(), entry.clone())
            .is_some())
    })?;
    let verb = if replaced { "Replaced" } else { "Added" };
    Ok((
        file.clone(),
        format!("{verb} the {scope} MCP server {name} in {}", file.display()),
    ))
}

/// Removes the server `name` from `scope`, or from the first scope (local, project, user)
/// that has it.
pub fn remove(
    cwd: &Path,
    home: Option<&Path>,
    name: &str,
    scope: Option<&str>,
) -> Result<(PathBuf, String), ManageError> {
    let scopes: Vec<&str> = match scope {
        Some(s) => vec![scope_of(Some(s))?],
        None => vec!["local", "project", "user"],
    };
    for scope in scopes {
        let (file, path) = place(scope, cwd, home)?;
        if !file.exists() {
            continue;
        }
        // Only a file that had it changes.
        let removed = update(&file, |v| {
            let mut at = &mut *v;
            for key in &path {
                match at.get_mut(key.as_str()) {
                    Some(next) => at = next,
                    None => return Ok(false),
                }
            }
            Ok(at.as_object_mut().is_some_and(|m| m.remove(name).is_some()))
        })?;
        if removed {
            return Ok((
                file.clone(),
                format!(
                    "Removed the {scope} MCP server {name} from {}",
                    file.display()
                ),
            ));
        }
    }
    Err(ManageError::Invalid(format!("no MCP server named {name}")))
}

/// Approves (or rejects) servers of the project's `.mcp.json` (`names` empty: every one),
/// remembered in `~/.claude.json` as Claude Code remembers the answer.
pub fn approve(
    cwd: &Path,
    home: Option<&Path>,
    names: &[String],
    yes: bool,
) -> Result<(PathBuf, String), ManageError> {
    let Some(project) = project_file(cwd) else {
        return Err(ManageError::Invalid(format!(
            "no .mcp.json in {} or above",
            cwd.display()
        )));
    };
    let defined: Vec<String> = read(&project)?["mcpServers"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let names: Vec<String> = if names.is_empty() {
        defined.clone()
    } else {
        names.to_vec()
    };
    if let Some(unknown) = names.iter().find(|n| !defined.contains(n)) {
        return Err(ManageError::Invalid(format!(
            "{} defines no server named {unknown}",
            project.display()
        )));
    }
    let file = user_state_file(home)
        .ok_or_else(|| ManageError::File("no home directory for ~/.claude.json".into()))?;
    let project = cwd.to_string_lossy().into_owned();
    let (add_to, take_from) = if yes {
        ("enabledMcpjsonServers", "disabledMcpjsonServers")
    } else {
        ("disabledMcpjsonServers", "enabledMcpjsonServers")
    };
    update(&file, |v| {
        let answered = &v["projects"][project.as_str()];
        let mut adding = names_at(answered, add_to);
        let mut taking = names_at(answered, take_from);
        for n in &names {
            if !adding.contains(n) {
                adding.push(n.clone());
            }
            taking.retain(|t| t != n);
        }
        let entry = object_at(v, &["projects".into(), project]);
        entry.insert(add_to.into(), json!(adding));
        entry.insert(take_from.into(), json!(taking));
        Ok(())
    })?;
    let verb = if yes { "Approved" } else { "Rejected" };
    Ok((
        file,
        format!("{verb} the project's MCP servers: {}", names.join(", ")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::config::{Extra, Scope, load};

    #[test]
    fn add_remove_and_approve_round_trip_through_the_reader() {
        let home = tempfile::tempdir().expect("test setup");
        let project = tempfile::tempdir().expect("test setup");
        let (h, cwd) = (Some(home.path()), project.path());
        std::fs::write(home.path().join(".claude.json"), r#"{"theme": "dark"}"#)
            .expect("test setup");
        crate::trust::set(cwd, h, true).expect("test setup");
        std::fs::set_permissions(
            home.path().join(".claude.json"),
            std::os::unix::fs::PermissionsExt::from_mode(0o640),
        )
        .expect("test setup");
        let env = |_: &str| None;
        add(cwd, h, "mine", None, &json!({"command": "m"})).expect("test setup");
        add(
            cwd,
            h,
            "everywhere",
            Some("user"),
            &json!({"type": "http", "url": "http://x"}),
        )
        .expect("test setup");
        add(cwd, h, "shared", Some("project"), &json!({"command": "s"})).expect("test setup");
        assert!(add(cwd, h, "bad", None, &json!({"type": "http"})).is_err());
        assert!(add(cwd, h, "x", Some("team"), &json!({"command": "s"})).is_err());
        let c = load(cwd, h, &Extra::default(), &env);
        let scopes: Vec<(&str, Scope)> = c
            .servers
            .iter()
            .map(|s| (s.name.as_str(), s.scope))
            .collect();
        assert_eq!(
            scopes,
            [("everywhere", Scope::User), ("mine", Scope::Local)]
        );
        assert_eq!(c.unapproved, ["shared"]);

        approve(cwd, h, &[], true).expect("test setup");
        let c = load(cwd, h, &Extra::default(), &env);
        assert!(c.servers.iter().any(|s| s.name == "shared"));
        approve(cwd, h, &["shared".into()], false).expect("test setup");
        let c = load(cwd, h, &Extra::default(), &env);
        assert_eq!(c.rejected, ["shared"]);
        assert!(approve(cwd, h, &["nope".into()], true).is_err());

        remove(cwd, h, "mine", None).expect("test setup");
        assert!(remove(cwd, h, "mine", None).is_err());
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).expect("written").permissions().mode() & 0o777;
        assert_eq!(
            mode(&home.path().join(".claude.json")),
            0o640,
            "its mode kept"
        );
        assert_eq!(mode(&cwd.join(".mcp.json")), 0o600, "a new file is private");
        let state: Value = serde_json::from_str(
            &std::fs::read_to_string(home.path().join(".claude.json")).expect("test setup"),
        )
        .expect("test setup");
        assert_eq!(state["theme"], "dark", "other keys are kept");
    }

    #[test]
    fn a_broken_file_is_never_overwritten() {
        let home = tempfile::tempdir().expect("test setup");
        let project = tempfile::tempdir().expect("test setup");
        std::fs::write(home.path().join(".claude.json"), "{ not json").expect("test setup");
        let e = add(
            project.path(),
            Some(home.path()),
            "a",
            None,
            &json!({"command": "a"}),
        )
        .expect_err("an error");
        assert!(e.to_string().contains("not valid JSON"), "{e}");
        assert_eq!(
            std::fs::read_to_string(home.path().join(".claude.json")).expect("test setup"),
            "{ not json"
        );
    }
}
