//! The Anthropic client against the fixtures and the scripted fake server.

use futures::stream;
use proptest::prelude::*;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tether_daemon::llm::*;
use tether_tests::fake_anthropic::{FakeAnthropic, Script, Step};
use tokio_util::sync::CancellationToken;

fn fixtures_dir() -> PathBuf {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/anthropic/streams");
    assert!(
        dir.is_dir(),
        "fixtures are read from {} (../shared next to the project)",
        dir.display()
    );
    dir
}

fn fixtures() -> Vec<(String, Vec<u8>, Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(fixtures_dir()).expect("fixtures dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "sse") {
            let expected = path.with_extension("expected.json");
            let expected: Value =
                serde_json::from_slice(&std::fs::read(&expected).expect("expected.json"))
                    .expect("json");
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            out.push((name, std::fs::read(&path).expect("sse"), expected));
        }
    }
    assert!(out.len() >= 7, "all fixtures found");
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn decode_chunks(chunks: Vec<Vec<u8>>) -> Result<AssembledMessage, LlmError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(assemble(
        stream::iter(chunks.into_iter().map(Ok::<_, LlmError>)),
        |_| {},
    ))
}

/// Checks an assembled message against a fixture's expectation.
fn check_fixture(name: &str, got: &AssembledMessage, expected: &Value) {
    let mut want = expected["message"].clone();
    let mut have = got.message.clone();
    if let Some(raw) = expected.get("raw_partial_json") {
        // The SDK parses cut tool input leniently; tether reports it as truncated instead and
        // never runs it.
        let index = raw["content_index"].as_u64().expect("index") as usize;
        assert_eq!(got.truncated_tool_inputs.len(), 1, "{name}");
        let t = &got.truncated_tool_inputs[0];
        assert_eq!(t.index, index, "{name}");
        assert_eq!(t.raw_json, raw["value"].as_str().expect("raw"), "{name}");
        want["content"][index]["input"] = Value::Null;
        have["content"][index]["input"] = Value::Null;
    } else {
        assert!(
            got.truncated_tool_inputs.is_empty(),
            "{name}: {:?}",
            got.truncated_tool_inputs
        );
    }
    assert_eq!(have, want, "{name}");
    assert_eq!(
        got.stop_reason.as_deref(),
        want["stop_reason"].as_str(),
        "{name}"
    );
}

#[test]
fn every_fixture_assembles_to_its_expected_message() {
    for (name, bytes, expected) in fixtures() {
        assert_eq!(expected["expect"], "message", "{name}");
        let got = decode_chunks(vec![bytes]).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_fixture(&name, &got, &expected);
    }
}

#[test]
fn every_fixture_decodes_the_same_split_at_every_byte() {
    for (name, bytes, expected) in fixtures() {
        let whole = decode_chunks(vec![bytes.clone()]).expect("whole");
        for at in 1..bytes.len() {
            let got = decode_chunks(vec![bytes[..at].to_vec(), bytes[at..].to_vec()])
                .unwrap_or_else(|e| panic!("{name} split at {at}: {e}"));
            assert_eq!(got, whole, "{name} split at {at}");
        }
        check_fixture(&name, &whole, &expected);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn decoding_does_not_depend_on_chunking(which in 0usize..7, cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..24)) {
        let all = fixtures();
        let (name, bytes, _) = &all[which % all.len()];
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len())).collect();
        points.sort_unstable();
        points.dedup();
        let mut chunks = Vec::new();
        let mut start = 0;
        for p in points {
            chunks.push(bytes[start..p].to_vec());
            start = p;
        }
        chunks.push(bytes[start..].to_vec());
        let got = decode_chunks(chunks).expect("decodes");
        let whole = decode_chunks(vec![bytes.clone()]).expect("whole");
        prop_assert_eq!(got, whole, "{}", name);
    }
}

#[test]
fn a_stream_cut_before_its_stop_reason_is_truncated_and_bad_tool_json_is_reported() {
    let (_, bytes, _) = fixtures()
        .into_iter()
        .find(|(n, _, _)| n == "sdk_tool_use_ping.sse")
        .expect("fixture");
    let text = String::from_utf8(bytes).expect("utf8");
    let cut = &text[..text
        .find("event: message_delta")
        .expect("has message_delta")];
    assert_eq!(
        decode_chunks(vec![cut.as_bytes().to_vec()]),
        Err(LlmError::Truncated)
    );
    assert!(LlmError::Truncated.is_retryable());

    let broken = text.replace(r#"{\"locati"#, r#"{\"locati\"\""#);
    let got = decode_chunks(vec![broken.into_bytes()]).expect("still assembles");
    assert_eq!(
        got.truncated_tool_inputs.len(),
        1,
        "invalid tool JSON is reported, not a panic"
    );
    assert_eq!(got.truncated_tool_inputs[0].name, "get_weather");
}

#[test]
fn a_block_index_far_out_of_range_is_a_malformed_stream_not_an_allocation() {
    let start = r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}"#;
    for index in [u64::MAX, 1 << 40, 4096] {
        let mut acc = Accumulator::new();
        acc.apply(start).expect("message_start");
        let block = json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""}});
        match acc.apply(&block.to_string()) {
            Err(LlmError::Malformed(why)) => assert!(why.contains("out of range"), "{why}"),
            other => panic!("index {index}: {other:?}"),
        }
    }
    let mut acc = Accumulator::new();
    acc.apply(start).expect("message_start");
    let block = json!({"type": "content_block_start", "index": 3,
        "content_block": {"type": "text", "text": ""}});
    assert!(
        acc.apply(&block.to_string()).is_ok(),
        "a gap of a few is fine"
    );
}

// ---- against the fake server ----

fn fast_config(url: &str) -> LlmConfig {
    LlmConfig {
        base_url: url.to_owned(),
        retry: RetryPolicy {
            max_retries: 4,
            base: Duration::from_millis(5),
            cap: Duration::from_millis(20),
        },
        idle_timeout: Duration::from_millis(500),
        custom_headers: vec![("X-Team".into(), "tether".into())],
        ..LlmConfig::default()
    }
}

fn hello_request() -> MessagesRequest {
    let mut req =
        MessagesRequest::new("claude-sonnet-4-5", 1024, vec![Message::user_text("hello")]);
    req.system = vec![SystemBlock::text("You are terse.")];
    req.with_cache_breakpoints(tether_daemon::llm::CacheTtl::FiveMinutes)
}

async fn run(
    fake: &FakeAnthropic,
    auth: Auth,
    req: &MessagesRequest,
) -> (Result<AssembledMessage, LlmError>, Vec<StreamUpdate>) {
    let client = AnthropicClient::new(fast_config(&fake.url()), auth).expect("client");
    let mut updates = Vec::new();
    let result = client
        .stream(req, &mut |u| updates.push(u), &CancellationToken::new())
        .await;
    (result, updates)
}

fn retries(updates: &[StreamUpdate]) -> Vec<(u32, bool, String)> {
    updates
        .iter()
        .filter_map(|u| match u {
            StreamUpdate::Retrying {
                attempt,
                discarded,
                error,
                ..
            } => Some((*attempt, *discarded, error.code().to_owned())),
            _ => None,
        })
        .collect()
}

fn text_of(m: &AssembledMessage) -> String {
    m.content()
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("")
}

#[tokio::test]
async fn overloaded_twice_then_success_reports_two_retries() {
    let fake = FakeAnthropic::start(Script::of([
        Step::error(529, "overloaded_error", "Overloaded"),
        Step::error(529, "overloaded_error", "Overloaded"),
        Step::text("hi there"),
    ]))
    .await
    .expect("fake");
    let (result, updates) = run(&fake, Auth::api_key("sk-test-secret"), &hello_request()).await;
    let message = result.expect("succeeds");
    assert_eq!(text_of(&message), "hi there");
    assert_eq!(
        retries(&updates),
        vec![
            (1, false, "overloaded".into()),
            (2, false, "overloaded".into())
        ]
    );
    let reqs = fake.message_requests();
    assert_eq!(reqs.len(), 3);
    let h = &reqs[0].headers;
    assert_eq!(
        h.get("anthropic-version").map(String::as_str),
        Some("2023-06-01")
    );
    assert_eq!(
        h.get("x-api-key").map(String::as_str),
        Some("sk-test-secret")
    );
    assert_eq!(h.get("x-team").map(String::as_str), Some("tether"));
    assert!(!h.contains_key("anthropic-beta"));
    assert!(reqs.iter().all(|r| r.rejected.is_none()));
    assert_eq!(reqs[0].body["stream"], true);
    assert!(reqs[0].body["system"][0]["cache_control"].is_object());
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let fake = FakeAnthropic::start(Script::of([
        Step::error(429, "rate_limit_error", "slow down").header("retry-after", "1"),
        Step::text("ok"),
    ]))
    .await
    .expect("fake");
    let started = Instant::now();
    let (result, updates) = run(&fake, Auth::api_key("k"), &hello_request()).await;
    assert!(result.is_ok());
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited {:?}",
        started.elapsed()
    );
    assert!(
        matches!(updates.iter().find(|u| matches!(u, StreamUpdate::Retrying { .. })),
        Some(StreamUpdate::Retrying { delay, .. }) if *delay == Duration::from_secs(1))
    );
}

#[tokio::test]
async fn unauthorized_is_not_retried_and_does_not_leak_the_key() {
    let fake = FakeAnthropic::start(Script::of([
        Step::error(401, "authentication_error", "invalid x-api-key"),
        Step::text("never"),
    ]))
    .await
    .expect("fake");
    let (result, updates) = run(
        &fake,
        Auth::api_key("sk-ant-do-not-print"),
        &hello_request(),
    )
    .await;
    let err = result.expect_err("fails");
    assert_eq!(err.code(), "auth");
    assert!(!format!("{err} {err:?}").contains("do-not-print"));
    assert!(retries(&updates).is_empty());
    assert_eq!(fake.message_requests().len(), 1);
}

#[tokio::test]
async fn no_credentials_is_a_clear_error_before_any_request() {
    let fake = FakeAnthropic::start(Script::of([Step::text("never")]))
        .await
        .expect("fake");
    let (result, _) = run(&fake, Auth::new(None, None), &hello_request()).await;
    assert_eq!(result, Err(LlmError::NoCredentials));
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn a_401_reruns_the_key_helper_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let counter = dir.path().join("calls");
    let helper = format!(
        "echo x >> {0}; echo helper-key-$(wc -l < {0})",
        counter.display()
    );
    let fake = FakeAnthropic::start(Script::of([
        Step::error(401, "authentication_error", "key expired"),
        Step::text("welcome back"),
    ]))
    .await
    .expect("fake");
    let (result, _) = run(&fake, Auth::new(None, Some(helper)), &hello_request()).await;
    assert_eq!(text_of(&result.expect("recovers")), "welcome back");
    let keys: Vec<String> = fake
        .message_requests()
        .iter()
        .filter_map(|r| r.headers.get("x-api-key").cloned())
        .collect();
    assert_eq!(keys, ["helper-key-1", "helper-key-2"]);
}

#[tokio::test]
async fn a_mid_stream_overload_retries_the_whole_request_and_voids_its_deltas() {
    let fake = FakeAnthropic::start(Script::of([
        Step::text("the first attempt").mid_stream_error(3, "overloaded_error"),
        Step::text("the second attempt"),
    ]))
    .await
    .expect("fake");
    let (result, updates) = run(&fake, Auth::api_key("k"), &hello_request()).await;
    assert_eq!(text_of(&result.expect("succeeds")), "the second attempt");
    assert_eq!(retries(&updates), vec![(1, true, "overloaded".into())]);
    // Deltas after the retry notice spell only the second attempt.
    let after: String = updates
        .iter()
        .skip_while(|u| !matches!(u, StreamUpdate::Retrying { .. }))
        .filter_map(|u| match u {
            StreamUpdate::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(after, "the second attempt");
}

#[tokio::test]
async fn a_cut_connection_and_a_stall_are_retried() {
    let fake = FakeAnthropic::start(Script::of([
        Step::text("cut short").cut_after(2),
        Step::text("stalled").stall_after(2),
        Step::text("complete"),
    ]))
    .await
    .expect("fake");
    let (result, updates) = run(&fake, Auth::api_key("k"), &hello_request()).await;
    assert_eq!(text_of(&result.expect("succeeds")), "complete");
    let codes: Vec<String> = retries(&updates).into_iter().map(|r| r.2).collect();
    assert_eq!(codes.len(), 2, "{codes:?}");
    assert!(
        codes[0] == "connection" || codes[0] == "truncated",
        "{codes:?}"
    );
    assert_eq!(codes[1], "timeout");
}

#[tokio::test]
async fn should_retry_false_wins_over_a_500() {
    let fake = FakeAnthropic::start(Script::of([
        Step::error(500, "api_error", "boom").header("x-should-retry", "false"),
        Step::text("never"),
    ]))
    .await
    .expect("fake");
    let (result, updates) = run(&fake, Auth::api_key("k"), &hello_request()).await;
    assert_eq!(result.expect_err("fails").code(), "server");
    assert!(retries(&updates).is_empty());
}

#[tokio::test]
async fn prompt_too_long_is_classified_with_its_numbers() {
    let fake = FakeAnthropic::start(Script::of([Step::error(
        400,
        "invalid_request_error",
        "prompt is too long: 212345 tokens > 200000 maximum",
    )]))
    .await
    .expect("fake");
    let (result, _) = run(&fake, Auth::api_key("k"), &hello_request()).await;
    let err = result.expect_err("fails");
    assert_eq!(
        err.api().map(|e| e.kind.clone()),
        Some(ApiErrorKind::PromptTooLong {
            tokens: Some(212_345),
            max: Some(200_000)
        })
    );
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn a_conversation_with_thinking_tools_and_results_passes_the_api_rules() {
    let fake = FakeAnthropic::start(Script::of([
        Step::text("Let me look.")
            .thinking("The user wants the file.")
            .tool_use("Read", json!({"file_path": "/tmp/a.txt"})),
        Step::text("It says hello."),
    ]))
    .await
    .expect("fake");
    let client =
        AnthropicClient::new(fast_config(&fake.url()), Auth::api_key("k")).expect("client");
    let tool = ToolDefinition {
        name: "Read".into(),
        description: "Reads a file".into(),
        input_schema: json!({"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}).into(),
        server: Default::default(),
        cache_control: None,
    };
    let mut messages = vec![Message::user_text("what is in /tmp/a.txt?")];
    let mut req = MessagesRequest::new("claude-sonnet-4-5", 4096, messages.clone());
    req.tools = vec![tool.clone()];
    req.thinking = Some(Thinking::Enabled {
        budget_tokens: 2048,
    });
    let first = client
        .stream(
            &req.clone()
                .with_cache_breakpoints(tether_daemon::llm::CacheTtl::FiveMinutes),
            &mut |_| {},
            &CancellationToken::new(),
        )
        .await
        .expect("first");
    assert_eq!(first.stop_reason.as_deref(), Some("tool_use"));
    let tool_use = first
        .content()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .expect("tool_use")
        .clone();
    assert_eq!(tool_use["input"]["file_path"], "/tmp/a.txt");
    messages.push(Message {
        role: Role::Assistant,
        content: first.content().to_vec().into(),
    });
    messages.push(Message {
        role: Role::User,
        content: vec![
            json!({"type": "tool_result", "tool_use_id": tool_use["id"], "content": "hello"}),
        ]
        .into(),
    });
    req.messages = messages;
    let second = client
        .stream(
            &req.with_cache_breakpoints(tether_daemon::llm::CacheTtl::FiveMinutes),
            &mut |_| {},
            &CancellationToken::new(),
        )
        .await
        .expect("second passes validation");
    assert_eq!(text_of(&second), "It says hello.");
    let reqs = fake.message_requests();
    assert!(
        reqs.iter().all(|r| r.rejected.is_none()),
        "{:?}",
        reqs.iter().map(|r| &r.rejected).collect::<Vec<_>>()
    );
    assert_eq!(
        reqs[1].body["messages"][1]["content"][0]["signature"],
        "sig_fake_1_0"
    );
}

#[tokio::test]
async fn cancelling_stops_a_stalled_stream() {
    let fake = FakeAnthropic::start(Script::of([Step::text("forever").stall_after(1)]))
        .await
        .expect("fake");
    let mut config = fast_config(&fake.url());
    config.idle_timeout = Duration::from_secs(60);
    let client = AnthropicClient::new(config, Auth::api_key("k")).expect("client");
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let req = hello_request();
    let mut on_update = |_: StreamUpdate| {};
    let (result, ()) = tokio::join!(client.stream(&req, &mut on_update, &cancel), async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    assert_eq!(result, Err(LlmError::Cancelled));
}
