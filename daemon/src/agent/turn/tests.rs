//! The query loop against a scripted model and a recording sink: no socket, no store, no HTTP.

use super::*;
use crate::agent::TurnLimits;
use crate::agent::sink::{PermissionAsk, Verdict};
use crate::llm::{AssembledMessage, Model, Streaming};
use crate::tools::{Net, Workspace};
use serde_json::json;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

/// One scripted reply: its content blocks and stop reason, or an error.
type Reply = Result<(Vec<Value>, &'static str), LlmError>;

/// A model that answers from a script and keeps every request it got.
#[derive(Default)]
struct Scripted {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Value>>,
}

impl Scripted {
    fn new(replies: Vec<Reply>) -> Arc<Self> {
        Arc::new(Self {
            replies: Mutex::new(replies.into()),
            requests: Mutex::default(),
        })
    }

    fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("lock").clone()
    }
}

impl Model for Scripted {
    fn stream<'a>(
        &'a self,
        request: &'a MessagesRequest,
        on_update: &'a mut (dyn FnMut(StreamUpdate) + Send),
        _cancel: &'a CancellationToken,
    ) -> Streaming<'a> {
        Box::pin(async move {
            let body = serde_json::to_value(request).expect("request encodes");
            self.requests.lock().expect("lock").push(body);
            let reply = self.replies.lock().expect("lock").pop_front();
            let (content, stop) =
                reply.unwrap_or(Ok((vec![text("(script ended)")], "end_turn")))?;
            for (index, block) in content.iter().enumerate() {
                on_update(StreamUpdate::BlockStarted {
                    index,
                    block: block.clone(),
                });
                on_update(StreamUpdate::BlockCompleted {
                    index,
                    block: block.clone(),
                });
            }
            let usage = Usage {
                input_tokens: 10,
                output_tokens: 5,
                ..Usage::default()
            };
            Ok(AssembledMessage {
                message: json!({"model": request.model, "content": content, "stop_reason": stop}),
                stop_reason: Some(stop.to_owned()),
                usage,
                truncated_tool_inputs: Vec::new(),
            })
        })
    }
}

/// A sink that keeps every event and answers every permission check with `verdict`.
struct Recorder {
    events: Mutex<Vec<EventKind>>,
    verdict: Verdict,
}

impl Recorder {
    fn new(verdict: Verdict) -> Arc<Self> {
        Arc::new(Self {
            events: Mutex::default(),
            verdict,
        })
    }

    fn events(&self) -> Vec<EventKind> {
        self.events.lock().expect("lock").clone()
    }

    fn results(&self) -> Vec<(Value, bool)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                EventKind::ToolResult {
                    content, is_error, ..
                } => Some((content, is_error)),
                _ => None,
            })
            .collect()
    }
}

impl TurnSink for Recorder {
    fn authorize(
        &self,
        _ask: PermissionAsk,
    ) -> Pin<Box<dyn Future<Output = Result<Verdict, SinkError>> + Send + '_>> {
        let verdict = self.verdict.clone();
        Box::pin(async move { Ok(verdict) })
    }

    fn send(&self, event: EventKind) {
        self.events.lock().expect("lock").push(event);
    }

    fn commit(
        &self,
        event: EventKind,
    ) -> Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send + '_>> {
        self.send(event);
        Box::pin(async { Ok(()) })
    }
}

fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

fn tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input})
}

struct Setup {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    model: Arc<Scripted>,
}

impl Setup {
    fn new(replies: Vec<Reply>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_owned();
        Self {
            _dir: dir,
            root,
            model: Scripted::new(replies),
        }
    }

    fn turn(&self, limits: TurnLimits) -> Turn {
        let net = Arc::new(Net {
            llm: self.model.clone(),
            catalog: Default::default(),
            web: Arc::new(crate::llm::WebFetcher::new().expect("http client")),
            fast_model: "haiku".into(),
        });
        let workspace = Arc::new(Workspace::new(
            self.root.clone(),
            Vec::new(),
            self.root.join(".scratch"),
        ));
        Turn {
            ctx: Arc::new(TurnContext {
                session_id: "s".into(),
                model: "sonnet".into(),
                system: Vec::new(),
                tools: crate::tools::builtin(),
                net,
                workspace,
                limits,
                policy: Default::default(),
                hooks: Default::default(),
                permission_mode: Default::default(),
                spent_before: Default::default(),
                transcript: None,
                agent: None,
                prompt_tool: None,
                structured: None,
                budget: None,
                snapshots: None,
            }),
            cancel: CancellationToken::new(),
            subagents: None,
        }
    }
}

fn asked(prompt: &str) -> History {
    let mut history = History::default();
    history.apply(&EventKind::TurnStarted {
        input: Vec::new(),
        content: vec![text(prompt)],
        by: None,
        client_turn_id: None,
    });
    history
}

#[tokio::test]
async fn a_tool_call_runs_and_its_result_goes_back_to_the_model() {
    let s = Setup::new(vec![
        Ok((
            vec![
                text("let me look"),
                tool_use("t1", "Read", json!({"file_path": "notes.txt"})),
            ],
            "tool_use",
        )),
        Ok((vec![text("it says hello")], "end_turn")),
    ]);
    std::fs::write(s.root.join("notes.txt"), "hello from the file\n").expect("write");
    let sink = Recorder::new(Verdict::Allow);
    let outcome = s
        .turn(TurnLimits::default())
        .run(asked("what is in notes.txt?"), sink.clone())
        .await;
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    assert_eq!(outcome.usage.input_tokens, 20, "both requests are counted");
    let results = sink.results();
    assert_eq!(results.len(), 1);
    assert!(!results[0].1);
    assert!(results[0].0.to_string().contains("hello from the file"));
    let requests = s.model.requests();
    assert_eq!(requests.len(), 2);
    let second = &requests[1]["messages"];
    let last = &second[second.as_array().map_or(0, Vec::len) - 1];
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"][0]["type"], "tool_result");
    assert_eq!(last["content"][0]["tool_use_id"], "t1");
}

#[tokio::test]
async fn a_denied_call_is_not_run_and_the_model_hears_why() {
    let s = Setup::new(vec![
        Ok((
            vec![tool_use(
                "t1",
                "Write",
                json!({"file_path": "out.txt", "content": "x"}),
            )],
            "tool_use",
        )),
        Ok((vec![text("understood")], "end_turn")),
    ]);
    let sink = Recorder::new(Verdict::Deny("not today".into()));
    let outcome = s
        .turn(TurnLimits::default())
        .run(asked("write it"), sink.clone())
        .await;
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    assert!(!s.root.join("out.txt").exists(), "a denied Write ran");
    assert_eq!(sink.results(), vec![(json!("not today"), true)]);
}

#[tokio::test]
async fn invalid_input_and_unknown_tools_become_error_results() {
    let s = Setup::new(vec![
        Ok((
            vec![
                tool_use("t1", "Read", json!({"path": "no file_path"})),
                tool_use("t2", "Teleport", json!({})),
            ],
            "tool_use",
        )),
        Ok((vec![text("sorry")], "end_turn")),
    ]);
    let sink = Recorder::new(Verdict::Allow);
    let outcome = s
        .turn(TurnLimits::default())
        .run(asked("go"), sink.clone())
        .await;
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    let results = sink.results();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|(_, is_error)| *is_error));
    assert!(results[0].0.to_string().contains("file_path"));
    assert!(results[1].0.to_string().contains("no tool named"));
}

#[tokio::test]
async fn max_tokens_continues_and_a_request_limit_stops_the_loop() {
    let s = Setup::new(vec![
        Ok((vec![text("the first half")], "max_tokens")),
        Ok((vec![text("and the rest")], "end_turn")),
    ]);
    let sink = Recorder::new(Verdict::Allow);
    let outcome = s
        .turn(TurnLimits::default())
        .run(asked("long answer"), sink.clone())
        .await;
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    assert!(
        sink.events()
            .iter()
            .any(|e| matches!(e, EventKind::Continuation { attempt: 1, .. }))
    );
    let requests = s.model.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].to_string().contains(CONTINUE_PROMPT));

    let looping: Vec<Reply> = (0..5)
        .map(|i| {
            Ok((
                vec![tool_use(&format!("t{i}"), "LS", json!({"path": "."}))],
                "tool_use",
            ))
        })
        .collect();
    let s = Setup::new(looping);
    let limits = TurnLimits {
        max_requests: 2,
        ..TurnLimits::default()
    };
    let outcome = s
        .turn(limits)
        .run(asked("loop"), Recorder::new(Verdict::Allow))
        .await;
    assert_eq!(outcome.stop_reason, StopReason::MaxTurns);
    assert_eq!(s.model.requests().len(), 2);
}

#[tokio::test]
async fn an_overloaded_model_falls_back_and_other_errors_end_the_turn() {
    let overloaded = || LlmError::Stream {
        error_type: "overloaded_error".into(),
        message: "busy".into(),
    };
    let s = Setup::new(vec![Err(overloaded()), Ok((vec![text("hi")], "end_turn"))]);
    let limits = TurnLimits {
        fallback_model: Some("haiku".into()),
        ..TurnLimits::default()
    };
    let sink = Recorder::new(Verdict::Allow);
    let outcome = s.turn(limits).run(asked("hi"), sink.clone()).await;
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    let fell_back = sink.events().into_iter().find_map(|e| match e {
        EventKind::ModelFallback { to, .. } => Some(to),
        _ => None,
    });
    let requests = s.model.requests();
    assert_eq!(fell_back.as_deref(), requests[1]["model"].as_str());
    assert_ne!(requests[0]["model"], requests[1]["model"]);

    let s = Setup::new(vec![Err(LlmError::Truncated)]);
    let sink = Recorder::new(Verdict::Allow);
    let outcome = s
        .turn(TurnLimits::default())
        .run(asked("hi"), sink.clone())
        .await;
    assert_eq!(outcome.stop_reason, StopReason::Error);
    assert!(outcome.error.is_some());
    assert!(
        sink.events()
            .iter()
            .any(|e| matches!(e, EventKind::Error { .. }))
    );
}

#[tokio::test]
async fn a_cancelled_turn_asks_the_model_nothing() {
    let s = Setup::new(vec![Ok((vec![text("never")], "end_turn"))]);
    let turn = s.turn(TurnLimits::default());
    turn.cancel.cancel();
    let outcome = turn.run(asked("hi"), Recorder::new(Verdict::Allow)).await;
    assert_eq!(outcome.stop_reason, StopReason::Cancelled);
    assert!(s.model.requests().is_empty());
}
