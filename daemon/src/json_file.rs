//! JSON files tether shares with Claude Code (`~/.claude.json`, `.mcp.json`, settings files):
//! where the user state file is, reading one as an object, and changing it under a lock.
//!
//! Invariant: every other key of a file is kept, a file is replaced atomically (a temporary
//! file renamed over it) keeping its mode (a new file is 0600), and a file that is not valid
//! JSON is never overwritten.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Where Claude Code keeps its user state: `$CLAUDE_CONFIG_DIR/.claude.json`, else
/// `~/.claude.json`.
pub fn user_state_file(home: Option<&Path>) -> Option<PathBuf> {
    match std::env::var_os("CLAUDE_CONFIG_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => Some(PathBuf::from(dir).join(".claude.json")),
        None => home.map(|h| h.join(".claude.json")),
    }
}

/// The object in `file`; `{}` when there is no file. The error says what is wrong and that
/// the file was left alone.
pub fn read(file: &Path) -> Result<Value, String> {
    match std::fs::read_to_string(file) {
        Ok(text) => match serde_json::from_str::<Value>(&text) {
            Ok(v) if v.is_object() => Ok(v),
            Ok(_) => Err(format!(
                "{} is not a JSON object; it was left as it is",
                file.display()
            )),
            Err(e) => Err(format!(
                "{}:{}: not valid JSON ({e}); it was left as it is",
                file.display(),
                e.line()
            )),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(json!({})),
        Err(e) => Err(format!("{}: {e}", file.display())),
    }
}

/// Reads the object in `file`, lets `change` change it, and writes it back if it changed — all under an
/// exclusive lock on `<file>.tether-lock`, so two changes at once (a trust answer and an MCP
/// approval, from two requests or two daemons) never lose one another.
pub fn update<T>(
    file: &Path,
    change: impl FnOnce(&mut Value) -> Result<T, String>,
) -> Result<T, String> {
    use nix::fcntl::{Flock, FlockArg};
    let fail = |e: std::io::Error| format!("{}: {e}", file.display());
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(fail)?;
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let lock_path = dir.join(format!(".{name}.tether-lock"));
    let lock_file = tether_proto::private::open_lock(&lock_path, nix::unistd::getuid().as_raw())
        .map_err(|e| format!("{}: {e}", lock_path.display()))?;
    let _lock = Flock::lock(lock_file, FlockArg::LockExclusive)
        .map_err(|(_, e)| format!("cannot lock {}: {e}", lock_path.display()))?;
    let mut v = read(file)?;
    let before = v.clone();
    let out = change(&mut v)?;
    // Unchanged, the file is left as it was written (its own formatting).
    if v != before {
        write(file, &v)?;
    }
    Ok(out)
}

/// Writes `v` to `file` atomically, keeping the mode of the file it replaces (use [`update`]
/// for a read, change and write).
pub fn write(file: &Path, v: &Value) -> Result<(), String> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let fail = |e: std::io::Error| format!("{}: {e}", file.display());
    let text = serde_json::to_string_pretty(v).map_err(|e| e.to_string())? + "\n";
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(fail)?;
    // A name of its own for each write: two at once never share a temporary file.
    let tmp = dir.join(format!(
        ".{}.tether-{}-{}",
        file.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    // Written private (it may hold tokens in headers or env), then given the mode the file it
    // replaces had.
    tether_proto::private::write(&tmp, text.as_bytes()).map_err(fail)?;
    if let Ok(old) = std::fs::metadata(file) {
        std::fs::set_permissions(&tmp, old.permissions()).map_err(fail)?;
    }
    std::fs::rename(&tmp, file).map_err(fail)
}

/// The object at `path` in `v`, created on the way.
pub fn object_at<'a>(v: &'a mut Value, path: &[String]) -> &'a mut serde_json::Map<String, Value> {
    let mut at = v;
    for key in path {
        if !at[key.as_str()].is_object() {
            at[key.as_str()] = json!({});
        }
        at = &mut at[key.as_str()];
    }
    match at {
        Value::Object(map) => map,
        _ => unreachable!("made an object above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_at_once_are_all_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join(".claude.json");
        std::fs::write(&file, r#"{"theme": "dark"}"#).expect("write");
        std::thread::scope(|s| {
            for t in 0..8 {
                let file = &file;
                s.spawn(move || {
                    for i in 0..10 {
                        update(file, |v| {
                            object_at(v, &["projects".into(), format!("/p{t}-{i}")])
                                .insert("hasTrustDialogAccepted".into(), json!(true));
                            Ok(())
                        })
                        .expect("update");
                    }
                });
            }
        });
        let v = read(&file).expect("read");
        assert_eq!(v["theme"], "dark");
        assert_eq!(v["projects"].as_object().map(|m| m.len()), Some(80));
        // Nothing left behind but the lock.
        let left: Vec<String> = std::fs::read_dir(dir.path())
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with("tether-lock") && n != ".claude.json")
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn an_unchanged_file_keeps_its_own_formatting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join(".mcp.json");
        std::fs::write(&file, "{\"mcpServers\":{}}").expect("write");
        update(&file, |_| Ok(())).expect("update");
        assert_eq!(
            std::fs::read_to_string(&file).expect("read"),
            "{\"mcpServers\":{}}"
        );
    }
}
