//! The translation of tether's events into ACP updates, event by event.

use super::*;
use serde_json::json;

fn ev(ty: &str, data: Value) -> Value {
    json!({"sessionId": "s", "seq": 1, "type": ty, "data": data})
}

fn kinds(updates: &[SessionUpdate]) -> Vec<String> {
    updates
        .iter()
        .map(|u| {
            serde_json::to_value(u).expect("an update serializes")["sessionUpdate"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

fn all(t: &mut Translator, events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .flat_map(|e| t.event(e).0)
        .map(|u| serde_json::to_value(u).expect("an update serializes"))
        .collect()
}

#[test]
fn streamed_text_is_not_sent_again_when_its_block_completes() {
    let mut t = Translator::default();
    let out = all(
        &mut t,
        &[
            ev("turn_started", json!({"input": []})),
            ev("text_delta", json!({"index": 0, "text": "Hel"})),
            ev("text_delta", json!({"index": 0, "text": "lo"})),
            ev(
                "assistant_block_completed",
                json!({"index": 0, "block": {"type": "text", "text": "Hello"}}),
            ),
        ],
    );
    let texts: Vec<&str> = out
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert_eq!(texts, ["Hel", "lo"]);
}

#[test]
fn a_pruned_replay_sends_completed_blocks_whole() {
    let mut t = Translator::default();
    let out = all(
        &mut t,
        &[
            ev(
                "assistant_block_completed",
                json!({"index": 0, "block": {"type": "thinking", "thinking": "hmm"}}),
            ),
            ev(
                "assistant_block_completed",
                json!({"index": 1, "block": {"type": "text", "text": "Answer"}}),
            ),
        ],
    );
    assert_eq!(out[0]["sessionUpdate"], "agent_thought_chunk");
    assert_eq!(out[1]["sessionUpdate"], "agent_message_chunk");
    assert_eq!(out[1]["content"]["text"], "Answer");
}

#[test]
fn an_edit_is_announced_with_its_diff_and_completes_without_repeating_it() {
    let mut t = Translator::default();
    let input = json!({"file_path": "/w/a.rs", "old_string": "a", "new_string": "b"});
    let started = t.event(&ev(
        "assistant_block_started",
        json!({"index": 0, "kind": "tool_use", "block": {"type": "tool_use", "id": "t1", "name": "Edit"}}),
    ));
    assert_eq!(kinds(&started.0), ["tool_call"]);
    let out = all(
        &mut t,
        &[
            ev(
                "assistant_block_completed",
                json!({"index": 0, "block": {"type": "tool_use", "id": "t1", "name": "Edit", "input": input}}),
            ),
            ev(
                "tool_call",
                json!({"toolCallId": "t1", "name": "Edit", "input": input}),
            ),
            ev(
                "tool_result",
                json!({"toolCallId": "t1", "content": "ok", "isError": false}),
            ),
        ],
    );
    assert_eq!(out[0]["sessionUpdate"], "tool_call_update");
    assert_eq!(out[0]["title"], "Edit /w/a.rs");
    assert_eq!(out[0]["kind"], "edit");
    assert_eq!(
        out[0]["content"][0],
        json!({"type": "diff", "path": "/w/a.rs", "oldText": "a", "newText": "b"})
    );
    assert_eq!(out[0]["locations"][0]["path"], "/w/a.rs");
    // Announced pending (the daemon logs a call before it checks it), running once anything
    // else follows.
    assert_eq!(out[1]["status"], "pending");
    assert_eq!(out[2]["status"], "in_progress");
    assert_eq!(out[3]["status"], "completed");
    assert!(out[3].get("content").is_none(), "{}", out[3]);
}

#[test]
fn a_call_waiting_for_permission_runs_only_once_allowed() {
    let mut t = Translator::default();
    let call = ev(
        "tool_call",
        json!({"toolCallId": "w", "name": "Write", "input": {"file_path": "/w/new.txt", "content": "x"}}),
    );
    let out = all(
        &mut t,
        &[
            call.clone(),
            ev("hook_started", json!({})),
            ev(
                "permission_requested",
                json!({"requestId": "r1", "toolCallId": "w", "tool": "Write"}),
            ),
        ],
    );
    assert!(out.iter().all(|u| u["status"] != "in_progress"), "{out:?}");
    let out = all(
        &mut t,
        &[ev(
            "permission_resolved",
            json!({"requestId": "r1", "decision": "allow_once"}),
        )],
    );
    assert_eq!(out[0]["toolCallId"], "w");
    assert_eq!(out[0]["status"], "in_progress");
    // A denied one never runs.
    let out = all(
        &mut t,
        &[
            ev(
                "tool_call",
                json!({"toolCallId": "d", "name": "Bash", "input": {"command": "rm x"}}),
            ),
            ev(
                "permission_requested",
                json!({"requestId": "r2", "toolCallId": "d", "tool": "Bash"}),
            ),
            ev(
                "permission_resolved",
                json!({"requestId": "r2", "decision": "deny"}),
            ),
        ],
    );
    assert!(out.iter().all(|u| u["status"] != "in_progress"), "{out:?}");
}

#[test]
fn bash_output_streams_into_its_call_and_failures_show_their_text() {
    let mut t = Translator::default();
    let out = all(
        &mut t,
        &[
            ev(
                "tool_call",
                json!({"toolCallId": "b", "name": "Bash", "input": {"command": "make"}}),
            ),
            ev(
                "tool_progress",
                json!({"toolCallId": "b", "chunk": "one\n"}),
            ),
            ev(
                "tool_progress",
                json!({"toolCallId": "b", "chunk": "two\n"}),
            ),
            ev(
                "tool_result",
                json!({"toolCallId": "b", "content": "one\ntwo\nexit 2", "isError": true}),
            ),
        ],
    );
    assert_eq!(out[0]["sessionUpdate"], "tool_call");
    assert_eq!(out[0]["title"], "`make`");
    assert_eq!(out[0]["kind"], "execute");
    assert_eq!(out[1]["status"], "in_progress");
    assert_eq!(
        out[3]["content"][0]["content"]["text"],
        "```\none\ntwo\n```"
    );
    assert_eq!(out[4]["status"], "failed");
    assert!(
        out[4]["content"][0]["content"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("exit 2"))
    );
}

#[test]
fn todos_become_the_plan_and_settings_follow_the_log() {
    let mut t = Translator::new([("sonnet".to_owned(), 200_000)]);
    let out = all(
        &mut t,
        &[
            ev(
                "session_created",
                json!({"cwd": "/w", "model": "sonnet", "permissionMode": "default"}),
            ),
            ev(
                "plan_updated",
                json!({"todos": [
                    {"content": "a", "status": "completed", "activeForm": "A"},
                    {"content": "b", "status": "in_progress", "activeForm": "B"},
                ]}),
            ),
            ev(
                "assistant_message_completed",
                json!({"model": "m", "usage": {"inputTokens": 10, "outputTokens": 5, "cacheReadInputTokens": 100, "cacheCreationInputTokens": 0}}),
            ),
            ev(
                "usage_updated",
                json!({"session": {}, "sessionCostUsd": 0.5}),
            ),
            ev("session_configured", json!({"permissionMode": "plan"})),
        ],
    );
    assert_eq!(out[0]["sessionUpdate"], "plan");
    assert_eq!(out[0]["entries"][0]["status"], "completed");
    assert_eq!(out[0]["entries"][1]["status"], "in_progress");
    assert_eq!(out[1]["sessionUpdate"], "usage_update");
    assert_eq!(out[1]["used"], 115);
    assert_eq!(out[1]["size"], 200_000);
    assert_eq!(out[1]["cost"]["amount"], 0.5);
    assert_eq!(out[2]["sessionUpdate"], "current_mode_update");
    assert_eq!(t.settings.mode, "plan");
    let (_, changed) = t.event(&ev("session_configured", json!({"effort": "high"})));
    assert!(changed.options);
    assert_eq!(t.settings.effort, "high");
}
