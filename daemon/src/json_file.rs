//! JSON files tether shares with Claude Code (`~/.claude.json`, `.mcp.json`, settings files):
//! where the user state file is, reading one as an object, and writing it back.
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

/// Writes `v` to `file` atomically, keeping the mode of the file it replaces.
pub fn write(file: &Path, v: &Value) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("{}: {e}", file.display());
    let text = serde_json::to_string_pretty(v).map_err(|e| e.to_string())? + "\n";
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(fail)?;
    let tmp = dir.join(format!(
        ".{}.tether-{}",
        file.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
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
