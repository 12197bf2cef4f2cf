//! The tools that reach the user rather than the system, end to end: `AskUserQuestion`
//! answered by another client (as Claude Code's `answers`), plan mode entered by the model and
//! left once a controller approves the plan, and what a headless run does with both.

use anyhow::Context;
use serde_json::{Value, json};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake, Ndjson};

fn questions() -> Value {
    json!([
        {"question": "Which database?", "header": "Database", "multiSelect": false,
         "options": [{"label": "Postgres", "description": "the server one"}, {"label": "SQLite", "description": "a file"}]},
        {"question": "Which checks?", "header": "Checks", "multiSelect": true,
         "options": [{"label": "lint"}, {"label": "test"}, {"label": "fmt"}]}
    ])
}

fn attach(daemon: &Daemon, session: &str) -> anyhow::Result<Ndjson> {
    let mut c = daemon.ndjson()?;
    c.call(
        "session/subscribe",
        json!({"sessionId": session, "since": "head", "role": "controller"}),
    )?;
    c.events_until("client_attached")?;
    Ok(c)
}

/// The `tool_result` blocks the model was sent, as text.
fn results_sent(fake: &Fake) -> Vec<String> {
    fake.server
        .message_requests()
        .iter()
        .flat_map(|r| {
            r.body["messages"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
                .filter(|b| b["type"] == "tool_result")
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn a_question_is_answered_by_another_client_and_the_model_reads_the_answers() -> anyhow::Result<()>
{
    let fake = Fake::start(Script::of([
        Step::text("Two questions first.")
            .tool_use("AskUserQuestion", json!({"questions": questions()})),
        Step::text("SQLite with lint and fmt, then."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = daemon.ndjson()?;
    // Even a session that runs every tool without asking asks the user its questions.
    let session = a.new_session_with_mode(&daemon.workdir(), "bypassPermissions")?;
    a.watch(&session)?;
    let mut b = attach(&daemon, &session)?;
    a.start_turn(&session, "set up the project")?;
    let asked = b.events_until("permission_requested")?;
    let request = asked.last().context("the question")?["data"].clone();
    assert_eq!(request["tool"], "AskUserQuestion");
    assert_eq!(request["options"], json!(["allow_once", "deny"]));
    assert_eq!(request["rule"], "");
    let preview = request["preview"].as_str().unwrap_or_default();
    assert!(
        preview.contains("Which database?") && preview.contains("  2. SQLite — a file"),
        "{preview}"
    );
    let mut input = request["input"].clone();
    input["answers"] = json!({"Which database?": "SQLite", "Which checks?": "lint, fmt"});
    let answered = b.call(
        "permission/respond",
        json!({"sessionId": session, "requestId": request["requestId"], "decision": "allow_once", "updatedInput": input}),
    )?;
    assert_eq!(answered["status"], "accepted");
    let events = a.events_until("turn_ended")?;
    let result = events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .context("the result")?;
    assert_eq!(result["data"]["isError"], false, "{result}");
    let sent = results_sent(&fake).join("\n");
    assert!(
        sent.contains(r#"\"Which database?\" = \"SQLite\""#)
            && sent.contains(r#"\"Which checks?\" = \"lint, fmt\""#),
        "{sent}"
    );
    Ok(())
}

#[test]
fn declining_a_question_tells_the_model_and_a_bad_answer_is_refused() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use("AskUserQuestion", json!({"questions": questions()})),
        Step::text("I will choose myself."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = daemon.ndjson()?;
    let session = a.new_session_with_mode(&daemon.workdir(), "default")?;
    a.watch(&session)?;
    a.start_turn(&session, "set up")?;
    let request = a
        .events_until("permission_requested")?
        .last()
        .context("asked")?["data"]
        .clone();
    let bad = a.request(
        "permission/respond",
        json!({"sessionId": session, "requestId": request["requestId"], "decision": "allow_once", "updatedInput": "SQLite"}),
    )?;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    a.call(
        "permission/respond",
        json!({"sessionId": session, "requestId": request["requestId"], "decision": "deny", "message": "pick for me"}),
    )?;
    a.events_until("turn_ended")?;
    let sent = results_sent(&fake).join("\n");
    assert!(
        sent.contains("declined to answer") && sent.contains("pick for me"),
        "{sent}"
    );
    Ok(())
}

#[test]
fn plan_mode_is_entered_by_the_model_and_left_when_a_controller_approves() -> anyhow::Result<()> {
    let plan = "1. Write notes.txt\n2. Say so";
    let fake = Fake::start(Script::of([
        Step::text("Planning first.").tool_use("EnterPlanMode", json!({})),
        // In plan mode a change is refused without asking.
        Step::default().tool_use(
            "Write",
            json!({"file_path": "early.txt", "content": "too soon"}),
        ),
        Step::default().tool_use("ExitPlanMode", json!({"plan": plan})),
        // Not approved: the feedback reaches the model; it tries again.
        Step::default().tool_use("ExitPlanMode", json!({"plan": plan})),
        // Approved for the session: edits run without asking.
        Step::default().tool_use(
            "Write",
            json!({"file_path": "notes.txt", "content": "planned\n"}),
        ),
        Step::text("Done as planned."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = daemon.ndjson()?;
    let session = a.new_session_with_mode(&daemon.workdir(), "default")?;
    a.watch(&session)?;
    let mut b = attach(&daemon, &session)?;
    a.start_turn(&session, "add notes")?;

    let first = b
        .events_until("permission_requested")?
        .last()
        .context("the plan")?["data"]
        .clone();
    assert_eq!(first["tool"], "ExitPlanMode");
    assert_eq!(first["preview"], plan);
    let snapshot = b.call("session/get", json!({"sessionId": session}))?;
    assert_eq!(snapshot["permissionMode"], "plan", "{snapshot}");
    b.call(
        "permission/respond",
        json!({"sessionId": session, "requestId": first["requestId"], "decision": "deny", "message": "also say when"}),
    )?;
    let second = b
        .events_until("permission_requested")?
        .last()
        .context("the plan again")?["data"]
        .clone();
    b.call(
        "permission/respond",
        json!({"sessionId": session, "requestId": second["requestId"], "decision": "allow_session"}),
    )?;
    let events = a.events_until("turn_ended")?;
    let modes: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "session_configured")
        .map(|e| &e["data"]["permissionMode"])
        .collect();
    assert_eq!(modes, [&json!("plan"), &json!("acceptEdits")], "{events:?}");
    assert!(
        events
            .iter()
            .filter(|e| e["type"] == "permission_requested")
            .all(|e| e["data"]["tool"] == "ExitPlanMode"),
        "no Write asks: refused in plan mode, then accepted"
    );
    assert!(!daemon.workdir().join("early.txt").exists());
    assert_eq!(
        std::fs::read_to_string(daemon.workdir().join("notes.txt"))?,
        "planned\n"
    );
    let sent = results_sent(&fake).join("\n");
    assert!(
        sent.contains("did not approve the plan") && sent.contains("also say when"),
        "{sent}"
    );
    assert!(sent.contains("approved your plan"), "{sent}");
    let snapshot = b.call("session/get", json!({"sessionId": session}))?;
    assert_eq!(snapshot["permissionMode"], "acceptEdits");
    Ok(())
}

#[test]
fn exit_plan_mode_outside_plan_mode_says_there_is_nothing_to_approve() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::default().tool_use("ExitPlanMode", json!({"plan": "1. go"})),
        Step::text("Going."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut a = daemon.ndjson()?;
    let session = a.new_session_with_mode(&daemon.workdir(), "default")?;
    a.watch(&session)?;
    a.start_turn(&session, "go")?;
    let events = a.events_until("turn_ended")?;
    assert!(events.iter().all(|e| e["type"] != "permission_requested"));
    let sent = results_sent(&fake).join("\n");
    assert!(sent.contains("not in plan mode"), "{sent}");
    Ok(())
}

#[test]
fn a_headless_run_answers_questions_through_its_prompt_command_or_says_it_cannot()
-> anyhow::Result<()> {
    let ask = || {
        Step::default().tool_use(
            "AskUserQuestion",
            json!({"questions": [{"question": "Which database?", "header": "Database",
                "options": [{"label": "Postgres"}, {"label": "SQLite"}]}]}),
        )
    };
    let fake = Fake::start(Script::of([
        ask(),
        Step::text("SQLite it is."),
        ask(),
        Step::text("I chose Postgres myself."),
    ]))?;
    let daemon = Daemon::start_with(fake.env())?;
    // The command gets the request on stdin and answers as Claude Code's permission prompt
    // tool does: allow, with the input and its answers.
    let answer = daemon.dir.path().join("answer.sh");
    let reply = json!({"behavior": "allow", "updatedInput": {
        "questions": [{"question": "Which database?", "header": "Database",
            "options": [{"label": "Postgres"}, {"label": "SQLite"}]}],
        "answers": {"Which database?": "SQLite"}
    }});
    std::fs::write(
        &answer,
        format!("#!/bin/sh\ncat > /dev/null\necho '{reply}'\n"),
    )?;
    let out = daemon.run_tether(&[
        "-p",
        "set up",
        "--permission-prompt-command",
        &format!("sh {}", answer.display()),
    ])?;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout)?, "SQLite it is.\n");
    let sent = results_sent(&fake).join("\n");
    assert!(
        sent.contains(r#"\"Which database?\" = \"SQLite\""#),
        "{sent}"
    );

    let out = daemon.run_tether(&["-p", "set up again"])?;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout)?, "I chose Postgres myself.\n");
    let sent = results_sent(&fake).join("\n");
    assert!(sent.contains("nobody can answer questions"), "{sent}");
    Ok(())
}
