//! Skills as a Claude Code user writes them (`.claude/skills/<name>/SKILL.md`), loaded by the
//! model through the Skill tool and run by the user as `/name args`, the built-in prompt
//! commands (`/review`, `/security-review`, `/init`), and the instructions a file brings when
//! the model touches it (a nested CLAUDE.md, a rule with `paths:`).

use anyhow::Context;
use serde_json::{Value, json};
use std::path::Path;
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake};

/// Writes `<root>/.claude/skills/<name>/SKILL.md`.
fn skill(root: &Path, name: &str, text: &str) -> anyhow::Result<std::path::PathBuf> {
    let dir = root.join(".claude/skills").join(name);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("SKILL.md"), text)?;
    Ok(dir)
}

/// The last user message of the `index`th request the turns made (title requests left out),
/// as JSON text.
fn last_user_text(fake: &Fake, index: usize) -> anyhow::Result<String> {
    let requests = fake.turn_requests();
    let request = requests.get(index).context("the request")?;
    let messages = request.body["messages"].as_array().context("messages")?;
    Ok(messages.last().context("a message")?["content"].to_string())
}

#[test]
fn a_skill_is_loaded_by_the_model_and_run_by_the_user() -> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([
            Step::text("Loading it.").tool_use(
                "Skill",
                json!({"skill": "changelog", "args": "the parser fix"}),
            ),
            Step::text("Done."),
            Step::text("Noted."),
            Step::text("Hi."),
        ])
        .titling("Skills"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let dir = skill(
        &daemon.workdir(),
        "changelog",
        "---\ndescription: Write the changelog entry for a change\nargument-hint: [change]\n---\n\
         Add an entry for $ARGUMENTS under ## Unreleased in CHANGELOG.md, following template.md.\n",
    )?;
    std::fs::write(dir.join("template.md"), "- WHAT (#PR)\n")?;
    let home = daemon.dir.path().join("home");
    skill(
        &home,
        "standup",
        "---\ndescription: Summarize yesterday\ndisable-model-invocation: true\n---\nSummarize.\n",
    )?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_with_mode(&daemon.workdir(), "default")?;
    c.watch(&session)?;

    // The model sees the skills it may load, calls one, and gets its instructions and files.
    c.start_turn(&session, "add a changelog entry for the parser fix")?;
    let events = c.events_until("turn_ended")?;
    let first = &fake
        .server
        .message_requests()
        .into_iter()
        .find(|r| r.body["tools"].is_array())
        .context("the first request")?
        .body;
    let tool = first["tools"]
        .as_array()
        .context("tools")?
        .iter()
        .find(|t| t["name"] == "Skill")
        .context("the Skill tool")?;
    let described = tool["description"].as_str().unwrap_or_default();
    assert!(
        described.contains("- changelog: Write the changelog entry for a change"),
        "{described}"
    );
    assert!(!described.contains("standup"), "{described}");
    let result = events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .context("the skill's result")?;
    let loaded = result["data"]["content"].to_string();
    assert_eq!(result["data"]["isError"], false, "{result}");
    assert!(
        loaded.contains("Add an entry for the parser fix under ## Unreleased"),
        "{loaded}"
    );
    assert!(loaded.contains("template.md"), "{loaded}");
    assert!(loaded.contains(&dir.display().to_string()), "{loaded}");

    // The user runs it as a command, with arguments.
    c.start_turn(&session, "/changelog the cache fix")?;
    c.events_until("turn_ended")?;
    let sent = last_user_text(&fake, 2)?;
    assert!(
        sent.contains("The user ran the skill /changelog the cache fix."),
        "{sent}"
    );
    assert!(sent.contains("Add an entry for the cache fix"), "{sent}");

    // Both are listed, with the built-in prompts; scripts see the skills in `init`.
    let listed = c.call("session/commands", json!({"sessionId": session}))?;
    let find = |name: &str| -> Option<Value> {
        listed
            .as_array()
            .and_then(|l| l.iter().find(|c| c["name"] == name).cloned())
    };
    let changelog = find("changelog").context("changelog")?;
    assert_eq!(changelog["source"], "project skill");
    assert_eq!(
        changelog["description"],
        "[change]: Write the changelog entry for a change"
    );
    assert_eq!(find("standup").context("standup")?["source"], "user skill");
    for name in ["review", "security-review", "init"] {
        assert_eq!(find(name).context("prompt")?["source"], "builtin");
    }
    let out = daemon.run_tether(&["-p", "hi", "--output-format", "stream-json", "--verbose"])?;
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout)?;
    let init: Value = serde_json::from_str(stdout.lines().next().context("init")?)?;
    assert_eq!(init["skills"], json!(["changelog", "standup"]), "{init}");
    assert!(
        init["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t == "Skill")),
        "{init}"
    );
    Ok(())
}

#[test]
fn a_skills_allowed_tools_hold_for_the_user_and_for_a_trusted_project_only() -> anyhow::Result<()> {
    let touch = |file: &str| {
        Step::text("Touching.").tool_use("Bash", json!({"command": format!("touch {file}")}))
    };
    let fake = Fake::start(
        Script::of([
            touch("from-user-skill"),
            Step::text("Touched."),
            touch("from-trusted-project"),
            Step::text("Touched."),
            touch("from-untrusted-project"),
            Step::text("Asked first."),
            Step::text("Writing the guide."),
        ])
        .titling("Allowed tools"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let rules = "---\ndescription: Touch a file\nallowed-tools: Bash(touch:*)\n---\nTouch it.\n";
    skill(&daemon.dir.path().join("home"), "touch-mine", rules)?;
    skill(&daemon.workdir(), "touch-here", rules)?;
    // A folder nobody said to trust, with the same skill.
    let untrusted = daemon.dir.path().join("cloned");
    skill(&untrusted, "touch-here", rules)?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_with_mode(&daemon.workdir(), "default")?;
    c.watch(&session)?;
    let asked_in = |events: &[Value]| events.iter().any(|e| e["type"] == "permission_requested");

    // The user's own skill, and a trusted project's, run their allowed command without asking.
    c.start_turn(&session, "/touch-mine")?;
    let events = c.events_until("turn_ended")?;
    assert!(!asked_in(&events), "{events:?}");
    assert!(daemon.workdir().join("from-user-skill").exists());
    c.start_turn(&session, "/touch-here")?;
    let events = c.events_until("turn_ended")?;
    assert!(!asked_in(&events), "{events:?}");
    assert!(daemon.workdir().join("from-trusted-project").exists());

    // An untrusted project's skill widens nothing: the command is asked about.
    let mut u = daemon.ndjson()?;
    let other = u.new_session_with_mode(&untrusted, "default")?;
    u.watch(&other)?;
    u.start_turn(&other, "/touch-here")?;
    let asked = u.events_until("permission_requested")?;
    let request = &asked.last().context("request")?["data"];
    u.call(
        "permission/respond",
        json!({"sessionId": other, "requestId": request["requestId"], "decision": "deny"}),
    )?;
    u.events_until("turn_ended")?;
    assert!(!untrusted.join("from-untrusted-project").exists());

    // `/init` asks the model, in tether's words, for a CLAUDE.md.
    c.start_turn(&session, "/init")?;
    c.events_until("turn_ended")?;
    let sent = last_user_text(&fake, 6)?;
    assert!(sent.contains("Write a CLAUDE.md"), "{sent}");
    Ok(())
}

#[test]
fn a_file_in_a_folder_with_instructions_brings_them_once_and_path_rules_follow_their_files()
-> anyhow::Result<()> {
    let read = |file: &str| Step::text("Reading.").tool_use("Read", json!({"file_path": file}));
    let fake = Fake::start(
        Script::of([
            read("app/a.txt"),
            read("app/b.txt"),
            read("api/routes.rs"),
            Step::text("Read them."),
        ])
        .titling("Nested"),
    )?;
    let daemon = Daemon::start_with(fake.env())?;
    let dir = daemon.workdir();
    std::fs::create_dir_all(dir.join("app"))?;
    std::fs::create_dir_all(dir.join("api"))?;
    std::fs::create_dir_all(dir.join(".claude/rules"))?;
    std::fs::write(dir.join("app/CLAUDE.md"), "App rule: tabs, never spaces.\n")?;
    std::fs::write(dir.join("app/a.txt"), "a\n")?;
    std::fs::write(dir.join("app/b.txt"), "b\n")?;
    std::fs::write(dir.join("api/routes.rs"), "fn main() {}\n")?;
    std::fs::write(
        dir.join(".claude/rules/api.md"),
        "---\npaths: api/**\n---\nAPI rule: version every route.\n",
    )?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&dir)?;
    c.watch(&session)?;
    c.start_turn(&session, "read the files")?;
    c.events_until("turn_ended")?;
    let requests = fake.turn_requests();
    // Not at the start: the first request knows neither.
    let first = requests.first().context("a request")?.body.to_string();
    assert!(
        !first.contains("App rule") && !first.contains("API rule"),
        "{first}"
    );
    let last = requests.last().context("a request")?.body["messages"].to_string();
    assert_eq!(last.matches("App rule: tabs").count(), 1, "once: {last}");
    assert_eq!(last.matches("API rule: version").count(), 1, "{last}");
    let app = last.find("App rule").context("app rule")?;
    let api = last.find("API rule").context("api rule")?;
    assert!(app < api, "each comes with the file that brought it");
    Ok(())
}

#[test]
fn an_output_style_from_the_settings_shapes_the_prompt_and_output_style_chooses_another()
-> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("Arr, hello."),
        Step::text("Hello, learner."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    std::fs::create_dir_all(work.join(".claude/output-styles"))?;
    std::fs::write(
        work.join(".claude/output-styles/pirate.md"),
        "---\nname: Pirate\ndescription: talks like one\n---\nTalk like a pirate, always.\n",
    )?;
    std::fs::write(
        work.join(".claude/settings.json"),
        json!({"outputStyle": "pirate"}).to_string(),
    )?;
    let out = daemon.run_tether(&["-p", "hello"])?;
    assert!(out.status.success(), "{out:?}");
    let system = |i: usize| -> anyhow::Result<String> {
        let requests = fake.turn_requests();
        Ok(requests.get(i).context("a request")?.body["system"].to_string())
    };
    let first = system(0)?;
    assert!(first.contains("Talk like a pirate, always."), "{first}");
    assert!(
        !first.contains("How you work:"),
        "a custom style replaces the coding instructions: {first}"
    );

    // Headless, a command's answer is the result, as `claude -p "/cost"` prints it.
    let out = daemon.run_tether(&["-p", "/output-style"])?;
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("● Pirate"), "{printed}");
    let out = daemon.run_tether(&["-p", "/output-style", "--output-format", "json"])?;
    let result: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert!(
        result["result"]
            .as_str()
            .unwrap_or_default()
            .contains("Learning"),
        "{result}"
    );
    // The command, in a session: its answers are notices.
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&work)?;
    c.watch(&session)?;
    let said = |c: &mut tether_tests::Ndjson, text: &str| -> anyhow::Result<String> {
        c.start_turn(&session, text)?;
        let events = c.events_until("turn_ended")?;
        Ok(events
            .iter()
            .filter(|e| e["type"] == "notice" || e["type"] == "turn_ended")
            .map(|e| e["data"].to_string())
            .collect::<Vec<_>>()
            .join("\n"))
    };
    let listed = said(&mut c, "/output-style")?;
    assert!(listed.contains("● Pirate"), "{listed}");
    assert!(listed.contains("Learning"), "{listed}");
    let unknown = said(&mut c, "/output-style shanty")?;
    assert!(unknown.contains("no output style"), "{unknown}");
    let saved = said(&mut c, "/output-style learning")?;
    assert!(saved.contains("saved"), "{saved}");
    let local: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        work.join(".claude/settings.local.json"),
    )?)?;
    assert_eq!(local["outputStyle"], "learning");
    let out = daemon.run_tether(&["-p", "hello again"])?;
    assert!(out.status.success(), "{out:?}");
    let second = system(1)?;
    assert!(second.contains("TODO(human)"), "{second}");
    assert!(
        second.contains("How you work:"),
        "a built-in style keeps them: {second}"
    );
    Ok(())
}
