//! What keeps a user safe, end to end: an untrusted clone's hooks and allow rules do not act
//! until `tether trust` (its deny rules do); a deny rule or hook that names a tool by its other
//! name (`Agent` for `Task`) holds; a command's saved output is capped and leaves with its
//! session.

use anyhow::Context;
use serde_json::{Value, json};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake};

/// The text of every `tool_result` a headless run's events hold.
fn tool_results(events: &str) -> Vec<String> {
    events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "tool_result")
        .map(|e| e["data"]["content"].to_string())
        .collect()
}

#[test]
fn an_untrusted_clone_acts_only_once_trusted() -> anyhow::Result<()> {
    let turn = || {
        [
            Step::default().tool_use("Bash", json!({"command": "touch made-by-allowed-rule"})),
            Step::default().tool_use("Bash", json!({"command": "rm -rf important"})),
            Step::text("done"),
        ]
    };
    let fake = Fake::start(Script::of(turn().into_iter().chain(turn())))?;
    let daemon = Daemon::start_with(fake.env())?;
    // A repository someone else wrote, cloned next to the user's own project.
    let clone = daemon.dir.path().join("clone");
    std::fs::create_dir_all(clone.join(".claude"))?;
    std::fs::create_dir_all(clone.join("important"))?;
    std::fs::write(
        clone.join(".claude/settings.json"),
        json!({
            "permissions": {"allow": ["Bash(touch:*)"], "deny": ["Bash(rm:*)"]},
            "hooks": {"SessionStart": [{"hooks": [
                {"type": "command", "command": "touch session-start-ran"}]}]},
            "env": {"CLONE_SAYS": "hi"},
        })
        .to_string(),
    )?;
    let run = || {
        daemon
            .tether()
            .current_dir(&clone)
            .args(["-p", "go", "--output-format", "events"])
            .output()
    };

    let out = run()?;
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for what in [
        "is not trusted",
        "SessionStart hooks",
        "1 allow rule",
        "env",
        "tether trust",
    ] {
        assert!(stderr.contains(what), "{what}: {stderr}");
    }
    assert!(
        !clone.join("session-start-ran").exists(),
        "the clone's SessionStart hook ran before it was trusted"
    );
    assert!(
        !clone.join("made-by-allowed-rule").exists(),
        "the clone's allow rule let a command run before it was trusted"
    );
    let results = tool_results(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        results[1].contains("denied by the permission rule Bash(rm:*)"),
        "its deny rule holds all along: {results:?}"
    );
    assert!(clone.join("important").exists());

    let trusted = daemon
        .tether()
        .current_dir(&clone)
        .args(["trust", "--json"])
        .output()?;
    assert!(trusted.status.success(), "{trusted:?}");
    let t: Value = serde_json::from_slice(&trusted.stdout)?;
    assert_eq!(t["trusted"], true);
    assert!(
        t["file"]
            .as_str()
            .is_some_and(|f| f.ends_with(".claude.json")),
        "{t}"
    );
    // Kept where Claude Code keeps it.
    let state: Value = serde_json::from_str(&std::fs::read_to_string(
        daemon.dir.path().join("home/.claude.json"),
    )?)?;
    let key = clone.canonicalize()?.display().to_string();
    assert_eq!(
        state["projects"][key.as_str()]["hasTrustDialogAccepted"],
        true
    );

    let out = run()?;
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("is not trusted"), "{stderr}");
    assert!(
        clone.join("session-start-ran").exists(),
        "trusted, its SessionStart hook runs"
    );
    assert!(
        clone.join("made-by-allowed-rule").exists(),
        "trusted, its allow rule applies"
    );
    assert!(
        clone.join("important").exists(),
        "and its deny rule still holds"
    );
    Ok(())
}

#[test]
fn a_rule_or_a_hook_that_names_a_tool_by_its_other_name_holds() -> anyhow::Result<()> {
    // The model calls the sub-agent tool by its Claude Code name; the settings name it too.
    let fake = Fake::start(Script::of([
        Step::default().tool_use(
            "Agent",
            json!({"description": "look", "prompt": "look around", "subagent_type": "general-purpose"}),
        ),
        Step::default().tool_use("TaskOutput", json!({"bash_id": "nope"})),
        Step::text("done"),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    std::fs::create_dir_all(work.join(".claude"))?;
    std::fs::write(
        work.join(".claude/settings.json"),
        json!({
            "permissions": {"deny": ["Agent"], "allow": ["BashOutput"]},
            "hooks": {"PreToolUse": [{"matcher": "TaskOutput", "hooks": [
                {"type": "command", "command": "touch task-output-hook-ran"}]}]},
        })
        .to_string(),
    )?;
    let out = daemon.run_tether(&["-p", "go", "--output-format", "events"])?;
    assert!(out.status.success(), "{out:?}");
    let results = tool_results(&String::from_utf8_lossy(&out.stdout));
    assert!(
        results
            .first()
            .is_some_and(|r| r.contains("denied by the permission rule Agent")),
        "deny Agent denies the Task tool: {results:?}"
    );
    assert!(
        work.join("task-output-hook-ran").exists(),
        "a TaskOutput matcher fires for BashOutput"
    );
    let requests = fake.server.message_requests();
    assert_eq!(
        requests.len(),
        3,
        "no sub-agent ran (it would have asked the model itself)"
    );
    let _ = requests.last().context("requests")?;
    Ok(())
}

#[test]
fn a_commands_saved_output_leaves_with_its_session() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use(
            "Bash",
            json!({"command": "head -c 400000 /dev/zero | tr '\\0' y"}),
        ),
        Step::text("done"),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let out = daemon.run_tether(&[
        "-p",
        "go",
        "--output-format",
        "json",
        "--allowedTools",
        "Bash",
    ])?;
    assert!(out.status.success(), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout)?;
    let id = result["session_id"].as_str().context("session id")?;
    let scratch = daemon.data_dir().join("scratch").join(id);
    let saved: Vec<_> = std::fs::read_dir(&scratch)?.collect();
    assert!(
        !saved.is_empty(),
        "the long output was saved in {}",
        scratch.display()
    );
    let rm = daemon.run_tether(&["rm", id])?;
    assert!(rm.status.success(), "{rm:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while scratch.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        !scratch.exists(),
        "{} outlived its session",
        scratch.display()
    );
    Ok(())
}
