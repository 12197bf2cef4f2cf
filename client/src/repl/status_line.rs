//! Claude Code's `statusLine` setting: a command whose first line of output replaces the
//! status shown right of the prompt. It reads the session's state as JSON on stdin (Claude
//! Code's fields: `session_id`, `cwd`, `model`, `workspace`, `cost`, …) and runs in the
//! session's directory each time the status changes, for at most two seconds.

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

/// How long the command may take.
const TIMEOUT: Duration = Duration::from_secs(2);

/// The configured command.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusLine {
    command: String,
}

impl StatusLine {
    /// `statusLine` of the settings files (local over project over user), when it is a
    /// command; the project's files count only when `cwd` is `trusted` (its command is the
    /// project author's choice).
    pub fn load(cwd: &Path, home: Option<&Path>, trusted: bool) -> Option<Self> {
        let mut files = Vec::new();
        if let Some(h) = home {
            files.push(h.join(".claude/settings.json"));
        }
        if trusted {
            files.push(cwd.join(".claude/settings.json"));
            files.push(cwd.join(".claude/settings.local.json"));
        }
        let mut found = None;
        for file in files {
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            let line = &v["statusLine"];
            if let Some(command) = line["command"].as_str().filter(|c| !c.trim().is_empty())
                && line["type"].as_str().is_none_or(|t| t == "command")
            {
                found = Some(Self {
                    command: command.to_owned(),
                });
            }
        }
        found
    }

    /// Runs the command with `input` on stdin: its first line, without control characters,
    /// or `None` when it fails, prints nothing or takes too long.
    pub async fn run(&self, input: &Value, cwd: &Path) -> Option<String> {
        use tokio::io::AsyncWriteExt;
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .current_dir(cwd)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .ok()?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(input.to_string().as_bytes()).await;
        }
        let out = tokio::time::timeout(TIMEOUT, child.wait_with_output())
            .await
            .ok()?
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = crate::view::printable(text.lines().next()?);
        (!line.trim().is_empty()).then(|| line.trim_end().to_owned())
    }
}

/// What the command reads: the session as Claude Code describes it to its status line.
pub fn input(
    snapshot: &tether_proto::SessionSnapshot,
    model_name: &str,
    context_percent: Option<f64>,
) -> Value {
    let s = &snapshot.summary;
    json!({
        "hook_event_name": "Status",
        "session_id": s.session_id.0,
        "session_name": s.title,
        "cwd": s.cwd,
        "model": {"id": s.model, "display_name": model_name},
        "workspace": {"current_dir": s.cwd, "project_dir": s.cwd},
        "version": env!("CARGO_PKG_VERSION"),
        "output_style": {"name": "default"},
        "permission_mode": s.permission_mode.as_str(),
        "cost": {"total_cost_usd": snapshot.cost_usd.unwrap_or(0.0)},
        "context_window": {"used_percentage": context_percent},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_specific_file_names_the_command() {
        let home = tempfile::tempdir().expect("tempdir");
        let cwd = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(home.path().join(".claude")).expect("mkdir");
        std::fs::create_dir_all(cwd.path().join(".claude")).expect("mkdir");
        std::fs::write(
            home.path().join(".claude/settings.json"),
            r#"{"statusLine": {"type": "command", "command": "echo user"}}"#,
        )
        .expect("write");
        assert_eq!(
            StatusLine::load(cwd.path(), Some(home.path()), true),
            Some(StatusLine {
                command: "echo user".into()
            })
        );
        std::fs::write(
            cwd.path().join(".claude/settings.local.json"),
            r#"{"statusLine": {"type": "command", "command": "echo local"}}"#,
        )
        .expect("write");
        assert_eq!(
            StatusLine::load(cwd.path(), Some(home.path()), true).map(|s| s.command),
            Some("echo local".into())
        );
        assert_eq!(
            StatusLine::load(cwd.path(), Some(home.path()), false).map(|s| s.command),
            Some("echo user".into()),
            "an untrusted project's command is not run"
        );
    }

    #[tokio::test]
    async fn the_first_line_is_shown_without_escapes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let line = StatusLine {
            command: r#"read -r input; printf '\033[1m%s\033[0m · ok\nsecond\n' "$(echo "$input" | cut -c1-5)""#.into(),
        };
        let shown = line.run(&json!({"a": 1}), dir.path()).await;
        assert_eq!(shown.as_deref(), Some(r#"{"a": · ok"#));
        let silent = StatusLine {
            command: "exit 3".into(),
        };
        assert_eq!(silent.run(&json!({}), dir.path()).await, None);
    }
}
