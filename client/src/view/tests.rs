//! View snapshots and checks: events in, terminal text out, at several widths, with and without colour.

use super::*;
use serde_json::json;
use tether_proto::{ClientKind, ClientRef, TokenUsage, TurnId};

fn at(seq: u64, ts: &str, kind: EventKind) -> Event {
    Event {
        session_id: "s".into(),
        seq: Some(seq),
        epoch: 1,
        ts: ts.into(),
        turn_id: Some(TurnId("t1".into())),
        kind,
    }
}

fn other() -> ClientRef {
    ClientRef {
        client_id: ConnectionId(9),
        kind: ClientKind::Editor,
        name: Some("zed".into()),
        node: None,
        principal: None,
        channel: None,
    }
}

/// A turn started by another client: thinking, a streamed Markdown reply, an Edit and a Bash
/// call, then the end.
fn turn() -> Vec<Event> {
    let text = "# Plan\n\nThe **build** fails because `make all` is *missing*; see [the docs](https://example.com/make).\n\n- add the target\n- rerun it\n\n| file | change |\n|---|---|\n| Makefile | add `all` |\n\n```rust\nfn main() {\n    println!(\"hi\");\n}\n```\nDone.";
    let mut events = vec![
        at(
            1,
            "2026-12-01T10:00:00.000Z",
            EventKind::TurnStarted {
                input: vec![tether_proto::InputItem::Text {
                    text: "fix the build".into(),
                }],
                content: vec![],
                by: Some(other()),
                client_turn_id: None,
            },
        ),
        at(
            2,
            "2026-12-01T10:00:00.100Z",
            EventKind::AssistantBlockStarted {
                index: 0,
                kind: "thinking".into(),
                block: json!({"type": "thinking", "thinking": ""}),
            },
        ),
        at(
            3,
            "2026-12-01T10:00:00.200Z",
            EventKind::AssistantBlockCompleted {
                index: 0,
                block: json!({"type": "thinking", "thinking": "Check the Makefile.", "signature": "s"}),
            },
        ),
    ];
    // Streamed in uneven pieces, splitting lines and markup.
    let pieces: Vec<String> = text
        .chars()
        .collect::<Vec<_>>()
        .chunks(7)
        .map(|c| c.iter().collect())
        .collect();
    for (i, p) in pieces.iter().enumerate() {
        events.push(at(
            10 + i as u64,
            "2026-12-01T10:00:01.000Z",
            EventKind::TextDelta {
                index: 1,
                text: p.clone(),
            },
        ));
    }
    events.extend([
        at(
            200,
            "2026-12-01T10:00:02.000Z",
            EventKind::AssistantBlockCompleted {
                index: 1,
                block: json!({"type": "text", "text": text}),
            },
        ),
        at(
            201,
            "2026-12-01T10:00:02.000Z",
            EventKind::ToolCall {
                tool_call_id: "e1".into(),
                name: "Edit".into(),
                input: json!({"file_path": "/p/Makefile", "old_string": "x", "new_string": "y"}),
            },
        ),
        at(
            202,
            "2026-12-01T10:00:02.100Z",
            EventKind::ToolResult {
                tool_call_id: "e1".into(),
                content: json!("The file /p/Makefile has been edited."),
                is_error: false,
                details: Some(json!({"path": "/p/Makefile", "diff": "--- a/Makefile\n+++ b/Makefile\n@@ -1,2 +1,3 @@\n build:\n-\tcc main.c\n+\tcc -O2 main.c\n+all: build\n"})),
                snapshot: None,
            },
        ),
        at(
            203,
            "2026-12-01T10:00:02.200Z",
            EventKind::ToolCall {
                tool_call_id: "b1".into(),
                name: "Bash".into(),
                input: json!({"command": "make all && ./main"}),
            },
        ),
        at(
            204,
            "2026-12-01T10:00:02.300Z",
            EventKind::ToolProgress {
                tool_call_id: "b1".into(),
                chunk: "cc -O2 main.c\n".into(),
            },
        ),
        at(
            205,
            "2026-12-01T10:00:03.000Z",
            EventKind::ToolResult {
                tool_call_id: "b1".into(),
                content: json!("cc -O2 main.c\nline 2\nline 3\nline 4\nline 5\nline 6\n"),
                is_error: false,
                details: None,
                snapshot: None,
            },
        ),
        at(
            206,
            "2026-12-01T10:00:03.000Z",
            EventKind::Retrying {
                attempt: 1,
                delay_ms: 3500,
                error: "overloaded".into(),
                discarded: false,
            },
        ),
        at(
            207,
            "2026-12-01T10:00:04.500Z",
            EventKind::TurnEnded {
                stop_reason: tether_proto::StopReason::EndTurn,
                usage: TokenUsage {
                    input_tokens: 1200,
                    output_tokens: 340,
                    ..Default::default()
                },
                cost_usd: Some(0.0087),
                error: None,
                api_ms: None,
                cancelled_by: None,
            },
        ),
    ]);
    events
}

fn render(style: Style, thinking: bool) -> String {
    let mut view = View::new(style, Some(ConnectionId(1)));
    view.show_thinking = thinking;
    turn().iter().map(|e| view.feed(e)).collect()
}

#[test]
fn plain_transcript() {
    insta::assert_snapshot!(render(Style::plain(80), false));
}

#[test]
fn coloured_transcript_with_thinking() {
    insta::assert_snapshot!(render(
        Style {
            color: true,
            width: 80
        },
        true
    ));
}

#[test]
fn narrow_terminal_wraps_prose_and_cuts_results() {
    insta::assert_snapshot!(render(Style::plain(32), false));
}

#[test]
fn own_prompts_are_not_echoed_but_others_are_marked() {
    let mut view = View::new(Style::plain(80), Some(ConnectionId(9)));
    let out: String = turn().iter().take(1).map(|e| view.feed(e)).collect();
    assert_eq!(out, "");
    let mut view = View::new(Style::plain(80), Some(ConnectionId(1)));
    let out: String = turn().iter().take(1).map(|e| view.feed(e)).collect();
    assert!(
        out.contains("› fix the build") && out.contains("zed"),
        "{out}"
    );
}

fn time(ts: &str) -> std::time::SystemTime {
    humantime::parse_rfc3339_weak(ts.trim_end_matches('Z')).expect("a time")
}

#[test]
fn the_live_area_follows_streaming_input_running_tools_and_the_line_being_written() {
    let mut view = View::new(Style::plain(60), Some(ConnectionId(1)));
    view.live = true;
    assert!(
        view.live(time("2026-12-01T09:00:00Z")).is_empty(),
        "no turn, nothing live"
    );
    let events = turn();
    // Thinking: the turn is working.
    for e in events.iter().take(3) {
        view.feed(e);
    }
    assert_eq!(
        view.live(time("2026-12-01T10:00:03.000Z")),
        vec!["⠋ working · 3 s · Ctrl+C cancels"]
    );
    // A reply line half written shows as it is.
    let mut view = View::new(Style::plain(60), Some(ConnectionId(1)));
    view.live = true;
    for e in events.iter().take(3 + 2) {
        view.feed(e);
    }
    assert_eq!(view.live(time("2026-12-01T10:00:01.000Z")), vec!["The **"]);
    // …and rendered once its markup closes.
    let mut sent = String::from("# Plan\n\nThe **");
    for e in events.iter().skip(3 + 2) {
        if let EventKind::TextDelta { text, .. } = &e.kind {
            sent.push_str(text);
            view.feed(e);
        }
        if sent.contains("missing*;") {
            break;
        }
    }
    assert_eq!(
        view.live(time("2026-12-01T10:00:01.000Z")),
        vec!["The build fails because `make all` is missing; se"]
    );

    // Bash running: a spinner with the elapsed time and its output's tail, not in the
    // transcript.
    let mut view = View::new(Style::plain(60), Some(ConnectionId(1)));
    view.live = true;
    let printed: String = events
        .iter()
        .filter(|e| e.seq.is_some_and(|s| s <= 204))
        .map(|e| view.feed(e))
        .collect();
    assert!(!printed.contains("│ cc -O2"), "{printed}");
    assert_eq!(
        view.live(time("2026-12-01T10:01:14.300Z")),
        vec!["⠸ Bash(make all && ./main) · 1 m 12 s", "  │ cc -O2 main.c"]
    );
    // Once it returns and the turn ends, nothing is live.
    for e in events.iter().filter(|e| e.seq.is_some_and(|s| s > 204)) {
        view.feed(e);
    }
    assert!(view.live(time("2026-12-01T10:01:15Z")).is_empty());

    // A tool call whose input is still streaming.
    let mut view = View::new(Style::plain(40), Some(ConnectionId(1)));
    view.live = true;
    view.feed(&events[0]);
    view.feed(&at(
        2,
        "2026-12-01T10:00:00.100Z",
        EventKind::AssistantBlockStarted {
            index: 0,
            kind: "tool_use".into(),
            block: json!({"type": "tool_use", "id": "t", "name": "Bash", "input": {}}),
        },
    ));
    for piece in [
        "{\"comm",
        "and\": \"cargo test -p tether-client --all-features",
    ] {
        view.feed(&at(
            3,
            "2026-12-01T10:00:00.200Z",
            EventKind::ToolInputDelta {
                index: 0,
                partial_json: piece.into(),
            },
        ));
    }
    assert_eq!(
        view.live(time("2026-12-01T10:00:00.300Z")),
        vec!["● Bash(cargo test -p tether-client --a…"]
    );
}

#[test]
fn partial_tool_input_shows_its_key_argument_so_far() {
    assert_eq!(partial_key_argument(""), "");
    assert_eq!(partial_key_argument("{\"file_path\": \"/a/b"), "/a/b");
    assert_eq!(
        partial_key_argument("{\"command\":\"echo \\\"hi\\\"\\nls"),
        "echo \"hi\" ls"
    );
    assert_eq!(partial_key_argument("{\"command\": \"ls\"}"), "ls");
}

#[test]
fn tool_output_in_the_live_area_is_one_plain_row_per_line() {
    assert_eq!(
        printable("\x1b[1;32m   Compiling\x1b[0m tether\tv0.1"),
        "   Compiling tether    v0.1"
    );
    assert_eq!(printable("10%\r55%\r100% done\r"), "100% done");
    assert_eq!(
        printable("bell\x07 and \x1b]0;title\x07x\x1b]8;;u\x1b\\y"),
        "bell and xy"
    );
}

#[test]
fn reply_text_cannot_drive_the_terminal() {
    let mut view = View::new(Style::plain(80), Some(ConnectionId(1)));
    let out = view.feed(&at(
        1,
        "2026-12-01T10:00:00Z",
        EventKind::TextDelta {
            index: 0,
            text: "\u{1b}[2J\u{1b}]0;pwned\u{7}clean\r\n".into(),
        },
    ));
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
    assert!(out.contains("clean"), "{out:?}");
}

#[test]
fn ctrl_t_opens_the_latest_thinking_and_folds_it_again() {
    let mut view = View::new(Style::plain(80), Some(ConnectionId(1)));
    assert_eq!(view.toggle_thinking(), "thinking is shown\n");
    assert_eq!(view.toggle_thinking(), "thinking is folded\n");
    let folded: String = turn().iter().take(3).map(|e| view.feed(e)).collect();
    assert!(!folded.contains("Check the Makefile."), "{folded}");
    assert_eq!(
        view.toggle_thinking(),
        "thinking is shown (Ctrl+T folds it); the latest:\n✻ Thinking\n  Check the Makefile.\n"
    );
    assert_eq!(view.toggle_thinking(), "thinking is folded\n");
}

#[test]
fn opened_thinking_is_wrapped_to_the_terminal_and_indented() {
    let mut view = View::new(Style::plain(40), Some(ConnectionId(1)));
    let long = "The build fails because the Makefile has no all target, so add one.\n\nThen rerun.";
    view.feed(&at(
        1,
        "2026-01-01T00:00:00Z",
        EventKind::AssistantBlockCompleted {
            index: 0,
            block: json!({"type": "thinking", "thinking": long, "signature": "s"}),
        },
    ));
    let shown = view.toggle_thinking();
    let rows: Vec<&str> = shown.lines().skip(2).collect();
    assert_eq!(
        rows,
        [
            "  The build fails because the Makefile",
            "  has no all target, so add one.",
            "",
            "  Then rerun."
        ],
        "{shown}"
    );
}

#[test]
fn the_turn_footer_says_how_much_the_cache_served_and_an_unknown_cost() {
    let mut view = View::new(Style::plain(80), Some(ConnectionId(1)));
    let ended = |usage: TokenUsage, cost_usd: Option<f64>| {
        at(
            2,
            "2026-12-01T10:00:01.000Z",
            EventKind::TurnEnded {
                stop_reason: tether_proto::StopReason::EndTurn,
                usage,
                cost_usd,
                error: None,
                api_ms: None,
                cancelled_by: None,
            },
        )
    };
    let cached = view.feed(&ended(
        TokenUsage {
            input_tokens: 100,
            output_tokens: 10,
            cache_creation_input_tokens: 300,
            cache_read_input_tokens: 9600,
        },
        Some(0.01),
    ));
    assert!(
        cached.contains("10000 in (96% cached, 300 written) / 10 out tokens · $0.0100"),
        "{cached}"
    );
    let unknown = view.feed(&ended(
        TokenUsage {
            input_tokens: 5,
            output_tokens: 1,
            ..Default::default()
        },
        None,
    ));
    assert!(
        unknown.contains("5 in / 1 out tokens · cost unknown"),
        "{unknown}"
    );
}

#[test]
fn parallel_results_say_which_call_they_answer() {
    let mut view = View::new(Style::plain(80), Some(ConnectionId(1)));
    let call = |seq, id: &str, path: &str| {
        at(
            seq,
            "2026-12-01T10:00:01.000Z",
            EventKind::ToolCall {
                tool_call_id: id.into(),
                name: "Read".into(),
                input: json!({"file_path": path}),
            },
        )
    };
    let result = |seq, id: &str, text: &str| {
        at(
            seq,
            "2026-12-01T10:00:02.000Z",
            EventKind::ToolResult {
                tool_call_id: id.into(),
                content: json!(text),
                is_error: false,
                details: None,
                snapshot: None,
            },
        )
    };
    let out: String = [
        call(1, "a", "src/a.rs"),
        call(2, "b", "src/b.rs"),
        result(3, "b", "contents of b"),
        result(4, "a", "contents of a"),
        call(5, "c", "src/c.rs"),
        result(6, "c", "contents of c"),
    ]
    .iter()
    .map(|e| view.feed(e))
    .collect();
    let b = out.find("↳ Read(src/b.rs)").expect("b labelled");
    let a = out.find("↳ Read(src/a.rs)").expect("a labelled");
    assert!(b < out.find("contents of b").expect("b") && a < out.find("contents of a").expect("a"));
    assert!(
        !out.contains("↳ Read(src/c.rs)"),
        "a result right under its call needs no label: {out}"
    );
}

#[test]
fn the_plan_is_shown_with_each_items_state() {
    let mut view = View::new(Style::plain(80), Some(ConnectionId(1)));
    let events = [
        at(
            1,
            "2026-12-01T10:00:01.000Z",
            EventKind::ToolCall {
                tool_call_id: "t".into(),
                name: "TodoWrite".into(),
                input: json!({"todos": []}),
            },
        ),
        at(
            2,
            "2026-12-01T10:00:01.100Z",
            EventKind::PlanUpdated {
                todos: vec![
                    json!({"content": "read the parser", "status": "completed", "activeForm": "Reading"}),
                    json!({"content": "fix the bug", "status": "in_progress", "activeForm": "Fixing"}),
                    json!({"content": "run the tests", "status": "pending", "activeForm": "Running"}),
                ],
            },
        ),
        at(
            3,
            "2026-12-01T10:00:01.200Z",
            EventKind::ToolResult {
                tool_call_id: "t".into(),
                content: json!("Task list updated: 3 items, 1 completed"),
                is_error: false,
                details: None,
                snapshot: None,
            },
        ),
    ];
    let out: String = events.iter().map(|e| view.feed(e)).collect();
    assert!(
        out.contains("☒ read the parser\n  ◼ fix the bug\n  ☐ run the tests"),
        "{out}"
    );
    assert!(
        !out.contains("Task list updated"),
        "the plan is the result: {out}"
    );
}

#[test]
fn live_rows_never_wrap_so_the_redraw_leaves_no_copies() {
    for width in [120usize, 60] {
        let mut view = View::new(Style { color: true, width }, Some(ConnectionId(1)));
        let long = format!("let x = \"{}\";", "y".repeat(250));
        let events = [
            at(
                1,
                "2026-12-01T10:00:00.000Z",
                EventKind::TurnStarted {
                    input: vec![],
                    content: vec![],
                    by: None,
                    client_turn_id: None,
                },
            ),
            at(
                2,
                "2026-12-01T10:00:00.100Z",
                EventKind::TextDelta {
                    index: 0,
                    // Streaming: the long line is still being written.
                    text: format!("Here:\n\n```rust\nfn main() {{}}\n{long}"),
                },
            ),
        ];
        for e in &events {
            view.feed(e);
        }
        let lines = view.live(std::time::SystemTime::now());
        assert!(!lines.is_empty());
        for line in &lines {
            let visible = strip_escapes(line);
            assert!(
                unicode_width::UnicodeWidthStr::width(visible.as_str()) < width,
                "at {width} columns a live row wraps: {visible:?}"
            );
        }
    }
}

#[test]
fn fitting_keeps_escapes_whole_and_resets_the_style() {
    let line = format!("\x1b[1m{}\x1b[0m", "a".repeat(30));
    let cut = fit_visible(&line, 10);
    assert_eq!(strip_escapes(&cut), format!("{}…", "a".repeat(9)));
    assert!(
        cut.starts_with("\x1b[1m") && cut.ends_with("\x1b[0m"),
        "{cut:?}"
    );
    assert_eq!(fit_visible("short", 10), "short");
}

fn strip_escapes(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if ('\x40'..='\x7e').contains(&d) {
                        break;
                    }
                }
            } else {
                chars.next();
            }
            continue;
        }
        out.push(c);
    }
    out
}

#[test]
fn who_came_and_went_before_the_replay_ended_is_folded() {
    let mut view = View::new(Style::plain(80), Some(ConnectionId(1)));
    let joined = |seq| {
        at(
            seq,
            "2026-01-01T00:00:00Z",
            EventKind::ClientAttached {
                client: other(),
                role: tether_proto::Role::Controller,
            },
        )
    };
    let left = |seq| {
        at(
            seq,
            "2026-01-01T00:00:01Z",
            EventKind::ClientDetached {
                client: other(),
                role: tether_proto::Role::Controller,
                reason: tether_proto::DetachReason::Closed,
            },
        )
    };
    let replayed: String = [joined(1), left(2), joined(3)]
        .iter()
        .map(|e| view.feed(e))
        .collect();
    assert_eq!(replayed, "");
    view.feed(&Event {
        seq: None,
        ..at(
            0,
            "2026-01-01T00:00:02Z",
            EventKind::ReplayComplete { head_seq: 3 },
        )
    });
    assert_eq!(view.feed(&left(4)), "◦ zed #9 left\n");
}

#[test]
fn an_event_that_prints_nothing_does_not_split_the_streaming_paragraph() {
    let mut view = View::new(Style::plain(80), Some(ConnectionId(1)));
    let delta = |seq, text: &str| {
        at(
            seq,
            "2026-01-01T00:00:00Z",
            EventKind::TextDelta {
                index: 0,
                text: text.into(),
            },
        )
    };
    let events = [
        delta(1, "Haiku he"),
        // The generated title lands mid-paragraph.
        at(
            2,
            "2026-01-01T00:00:00Z",
            EventKind::SessionConfigured {
                title: Some("Haiku".into()),
                model: None,
                effort: None,
                permission_mode: None,
                on_no_controller: None,
                budget_usd: None,
                by: None,
            },
        ),
        delta(3, "re."),
        at(
            4,
            "2026-01-01T00:00:00Z",
            EventKind::AssistantBlockCompleted {
                index: 0,
                block: json!({"type": "text", "text": "Haiku here."}),
            },
        ),
    ];
    let shown: String = events.iter().map(|e| view.feed(e)).collect();
    assert_eq!(shown, "Haiku here.\n");
}

#[test]
fn a_notice_while_a_paragraph_streams_never_cuts_a_word_of_it() {
    let mut v = View::new(Style::plain(40), Some(ConnectionId(1)));
    v.live = true;
    let mut shown = String::new();
    let ts = "2026-12-01T10:00:00.000Z";
    for (seq, kind) in [
        (
            1,
            EventKind::AssistantBlockStarted {
                index: 0,
                kind: "text".into(),
                block: json!({"type": "text", "text": ""}),
            },
        ),
        (
            2,
            EventKind::TextDelta {
                index: 0,
                text: "alpha beta gam".into(),
            },
        ),
        (
            3,
            EventKind::ClientAttached {
                client: other(),
                role: tether_proto::Role::Observer,
            },
        ),
        (
            4,
            EventKind::TextDelta {
                index: 0,
                text: "ma delta\n".into(),
            },
        ),
        (
            5,
            EventKind::AssistantBlockCompleted {
                index: 0,
                block: json!({"type": "text", "text": "alpha beta gamma delta\n"}),
            },
        ),
    ] {
        let mut ev = at(seq, ts, kind);
        v.replaying = false;
        ev.seq = Some(seq);
        shown.push_str(&v.feed(&ev));
    }
    assert!(shown.contains("joined as observer"), "{shown}");
    assert!(shown.contains("alpha beta gamma delta"), "{shown}");
    assert!(!shown.contains("gam\n"), "{shown}");
}
