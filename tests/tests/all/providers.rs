//! Cloud providers end to end: a daemon configured as a Claude Code user configures Vertex AI
//! (`CLAUDE_CODE_USE_VERTEX`, the project, the region and a per-model region, a service-account
//! key) runs a tool-using turn against the fake's Vertex endpoint, with tokens from the fake's
//! OAuth endpoint; one configured for Amazon Bedrock (`CLAUDE_CODE_USE_BEDROCK`, `AWS_REGION`,
//! access keys or a Bedrock API key) signs its requests and reads the event-stream replies;
//! `tether doctor` says which provider and credentials are in use.

use anyhow::Context;
use serde_json::{Value, json};
use tether_tests::fake_anthropic::bedrock::{ACCESS_KEY_ID, SECRET_ACCESS_KEY};
use tether_tests::fake_anthropic::vertex::{
    TOKEN_PREFIX, service_account, unknown_service_account,
};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake};

/// Runs one turn in a new `claude-sonnet-4-5` session; checks how it ended; returns its events.
fn one_turn(daemon: &Daemon, stop_reason: &str) -> anyhow::Result<Vec<Value>> {
    let mut c = daemon.ndjson()?;
    let session = c.call(
        "session/new",
        json!({"cwd": daemon.workdir(), "model": "claude-sonnet-4-5"}),
    )?["sessionId"]
        .as_str()
        .context("session id")?
        .to_owned();
    c.watch(&session)?;
    c.start_turn(&session, "run a command")?;
    let events = c.events_until("turn_ended")?;
    let last = events.last().context("events")?;
    anyhow::ensure!(
        last["data"]["stopReason"] == stop_reason,
        "the turn ended {last}, not {stop_reason}"
    );
    Ok(events)
}

#[test]
fn a_vertex_ai_session_streams_through_google_credentials() -> anyhow::Result<()> {
    let fake = Fake::start(
        Script::of([
            Step::default().tool_use("Bash", json!({"command": "echo on vertex"})),
            Step::text("The command ran on Vertex AI."),
        ])
        .titling("On Vertex"),
    )?;
    let key_dir = tempfile::tempdir()?;
    let key = key_dir.path().join("service-account.json");
    std::fs::write(&key, service_account(&fake.server.url()).to_string())?;
    let env: Vec<(String, String)> = [
        ("CLAUDE_CODE_USE_VERTEX", "1".to_owned()),
        ("ANTHROPIC_VERTEX_PROJECT_ID", "tether-test".into()),
        ("CLOUD_ML_REGION", "global".into()),
        ("VERTEX_REGION_CLAUDE_5_5_HAIKU", "europe-west1".into()),
        (
            "ANTHROPIC_VERTEX_BASE_URL",
            format!("{}/v1", fake.server.url()),
        ),
        ("GOOGLE_APPLICATION_CREDENTIALS", key.display().to_string()),
        // Nothing of the Anthropic API's is used.
        ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let daemon = Daemon::start_with(env)?;
    let events = one_turn(&daemon, "end_turn")?;
    assert!(
        events.iter().any(|e| e["type"] == "tool_result"
            && e["data"]["content"]
                .as_str()
                .is_some_and(|t| t.contains("on vertex"))),
        "{events:?}"
    );

    let requests = fake.server.requests();
    for r in &requests {
        assert_eq!(r.rejected, None, "{} {}", r.path, r.body);
    }
    let tokens: Vec<_> = requests.iter().filter(|r| r.path == "/token").collect();
    assert_eq!(tokens.len(), 1, "the token is cached: {tokens:?}");
    let vertex: Vec<_> = requests
        .iter()
        .filter(|r| r.path.ends_with(":streamRawPredict"))
        .collect();
    assert!(vertex.len() >= 2, "{requests:?}");
    for r in &vertex {
        assert!(r.body.get("model").is_none(), "{}", r.body);
        assert_eq!(r.body["anthropic_version"], "vertex-2023-10-16");
        assert_eq!(
            r.headers.get("authorization").map(String::as_str),
            Some(format!("Bearer {TOKEN_PREFIX}1").as_str())
        );
        // The fast model (titles) goes to its own region; the session's model to the default.
        let want = if r.path.contains("haiku") {
            "/v1/projects/tether-test/locations/europe-west1/publishers/anthropic/models/claude-haiku-5-5:streamRawPredict"
        } else {
            "/v1/projects/tether-test/locations/global/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"
        };
        assert_eq!(r.path, want);
    }
    assert!(
        vertex.iter().any(|r| r.path.contains("europe-west1")),
        "the title was asked of the fast model in its region: {vertex:?}"
    );

    // doctor: the provider, its region and the credential source; the key never shows.
    let (checks, raw) = daemon.doctor()?;
    let detail = |name: &str| checks.get(name).cloned().unwrap_or_default();
    let (status, credentials) = detail("credentials");
    assert_eq!(status, "ok", "{checks:?}");
    assert!(
        credentials.contains("GOOGLE_APPLICATION_CREDENTIALS"),
        "{credentials}"
    );
    let (status, api) = detail("api");
    assert_eq!(status, "ok", "{checks:?}");
    assert!(
        api.contains("Vertex AI (project tether-test, region global")
            && api.contains("access token"),
        "{api}"
    );
    assert!(!raw.contains("PRIVATE KEY"));
    Ok(())
}

#[test]
fn a_bedrock_session_signs_its_requests_and_reads_the_event_stream() -> anyhow::Result<()> {
    let script = || {
        Script::of([
            Step::default().tool_use("Bash", json!({"command": "echo on bedrock"})),
            Step::text("The command ran on Bedrock."),
        ])
        .titling("On Bedrock")
    };
    // Access keys (SigV4), then a Bedrock API key.
    for (credentials, wanted_auth, source) in [
        (
            vec![
                ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID.to_owned()),
                ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY.into()),
                ("AWS_SESSION_TOKEN", "tether-session".into()),
            ],
            "AWS4-HMAC-SHA256 Credential=AKIATETHERTEST/",
            "AWS_ACCESS_KEY_ID",
        ),
        (
            vec![(
                "AWS_BEARER_TOKEN_BEDROCK",
                "bedrock-api-key-test".to_owned(),
            )],
            "Bearer bedrock-api-key-test",
            "AWS_BEARER_TOKEN_BEDROCK",
        ),
    ] {
        let fake = Fake::start(script())?;
        let mut env = bedrock_base_env(&fake, "eu-west-1");
        env.extend(credentials.into_iter().map(|(k, v)| (k.to_owned(), v)));
        let daemon = Daemon::start_with(env)?;
        let events = one_turn(&daemon, "end_turn").context(source)?;
        assert!(
            events
                .iter()
                .any(|e| e["type"] == "assistant_block_completed"
                    && e["data"]["block"]["text"] == "The command ran on Bedrock."),
            "{events:?}"
        );
        let requests = fake.server.requests();
        for r in &requests {
            assert_eq!(r.rejected, None, "{} {}", r.path, r.body);
        }
        let bedrock: Vec<_> = requests
            .iter()
            .filter(|r| r.path.ends_with("/invoke-with-response-stream"))
            .collect();
        assert!(bedrock.len() >= 2, "{requests:?}");
        assert!(
            bedrock.iter().any(|r| r.path
                == "/model/eu.anthropic.claude-sonnet-4-5-20250929-v1:0/invoke-with-response-stream"),
            "{:?}",
            bedrock.iter().map(|r| &r.path).collect::<Vec<_>>()
        );
        for r in &bedrock {
            assert!(r.body.get("model").is_none() && r.body.get("stream").is_none());
            assert_eq!(r.body["anthropic_version"], "bedrock-2023-05-31");
            let auth = r
                .headers
                .get("authorization")
                .map(String::as_str)
                .unwrap_or("");
            assert!(auth.starts_with(wanted_auth), "{auth}");
            if source == "AWS_ACCESS_KEY_ID" {
                assert!(auth.contains("/eu-west-1/bedrock/aws4_request"), "{auth}");
                assert_eq!(
                    r.headers.get("x-amz-security-token").map(String::as_str),
                    Some("tether-session")
                );
            }
        }
        let (_, text) = daemon.doctor()?;
        assert!(
            text.contains(source) && text.contains("Amazon Bedrock (region eu-west-1"),
            "{text}"
        );
        assert!(!text.contains(SECRET_ACCESS_KEY) && !text.contains("bedrock-api-key-test"));
    }
    Ok(())
}

#[test]
fn a_service_account_the_token_endpoint_refuses_fails_the_turn_clearly() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("never")]).titling("Refused"))?;
    let key_dir = tempfile::tempdir()?;
    let key = key_dir.path().join("service-account.json");
    std::fs::write(
        &key,
        unknown_service_account(&fake.server.url()).to_string(),
    )?;
    let daemon = Daemon::start_with(vec![
        ("CLAUDE_CODE_USE_VERTEX".into(), "1".into()),
        ("ANTHROPIC_VERTEX_PROJECT_ID".into(), "tether-test".into()),
        (
            "ANTHROPIC_VERTEX_BASE_URL".into(),
            format!("{}/v1", fake.server.url()),
        ),
        (
            "GOOGLE_APPLICATION_CREDENTIALS".into(),
            key.display().to_string(),
        ),
    ])?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    c.start_turn(&session, "go")?;
    let events = c.events_until("turn_ended")?;
    let last = events.last().context("events")?;
    assert_eq!(last["data"]["stopReason"], "error", "{last}");
    let message = last["data"]["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("Vertex AI: Google refused to issue an access token")
            && message.contains("GOOGLE_APPLICATION_CREDENTIALS"),
        "{message}"
    );
    let requests = fake.server.requests();
    assert!(requests.iter().any(|r| {
        r.path == "/token"
            && r.rejected
                .as_deref()
                .is_some_and(|m| m.contains("signature does not verify"))
    }));
    assert!(
        !requests
            .iter()
            .any(|r| r.path.ends_with(":streamRawPredict")),
        "nothing is sent without a token"
    );
    // The session is intact: it answers and takes the next turn (which fails the same way).
    c.call("session/get", json!({"sessionId": session}))?;
    Ok(())
}

/// The environment of a daemon on the fake's Bedrock in `region`, without credentials: never
/// the Anthropic API, and none of the machine's AWS files or instance metadata.
fn bedrock_base_env(fake: &Fake, region: &str) -> Vec<(String, String)> {
    [
        ("CLAUDE_CODE_USE_BEDROCK", "1".to_owned()),
        ("AWS_REGION", region.into()),
        ("ANTHROPIC_BEDROCK_BASE_URL", fake.server.url()),
        ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9".into()),
        ("AWS_CONFIG_FILE", "/nonexistent/aws-config".into()),
        (
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/aws-credentials".into(),
        ),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ("TETHER_API_MAX_RETRIES", "3".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// The same with the test's access key and `secret`.
fn bedrock_env(fake: &Fake, secret: &str) -> Vec<(String, String)> {
    let mut env = bedrock_base_env(fake, "us-east-1");
    env.push(("AWS_ACCESS_KEY_ID".into(), ACCESS_KEY_ID.into()));
    env.push(("AWS_SECRET_ACCESS_KEY".into(), secret.into()));
    env
}

#[test]
fn bedrock_throttling_and_expired_credentials_are_retried_and_a_bad_signature_is_not()
-> anyhow::Result<()> {
    use tether_tests::fake_anthropic::MidStreamError;
    let mut throttled = Step::text("This reply is throttled halfway.");
    throttled.mid_stream_error = Some(MidStreamError {
        after_chunk: 3,
        error_type: "rate_limit_error".into(),
    });
    let expired = Step {
        status: Some(403),
        body: Some(json!({"message": "The security token included in the request is expired"})),
        ..Step::default()
    };
    let fake = Fake::start(
        Script::of([
            throttled,
            Step::text("Answered after the throttling."),
            expired,
            Step::text("Answered with fresh credentials."),
        ])
        .titling("Retries"),
    )?;
    let daemon = Daemon::start_with(bedrock_env(&fake, SECRET_ACCESS_KEY))?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    for want in [
        "Answered after the throttling.",
        "Answered with fresh credentials.",
    ] {
        c.start_turn(&session, "go")?;
        let events = c.events_until("turn_ended")?;
        let last = events.last().context("events")?;
        assert_eq!(last["data"]["stopReason"], "end_turn", "{last}");
        assert!(
            events
                .iter()
                .any(|e| e["type"] == "assistant_block_completed"
                    && e["data"]["block"]["text"] == want),
            "{events:?}"
        );
    }
    let rejected: Vec<_> = fake
        .server
        .requests()
        .into_iter()
        .filter(|r| r.rejected.is_some())
        .collect();
    assert!(rejected.is_empty(), "{rejected:?}");

    // A wrong secret: the signature does not match; the turn fails saying so, once re-tried
    // with reloaded credentials and never again.
    let fake = Fake::start(Script::of([Step::text("never")]).titling("Wrong key"))?;
    let daemon = Daemon::start_with(bedrock_env(&fake, "not-the-secret"))?;
    let events = one_turn(&daemon, "error")?;
    let last = events.last().context("events")?;
    assert!(last.to_string().contains("SignatureDoesNotMatch"), "{last}");
    let tries = fake
        .server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/invoke-with-response-stream") && r.body["max_tokens"] != 64)
        .count();
    assert_eq!(tries, 2, "one retry with reloaded credentials, no more");
    Ok(())
}

#[test]
fn a_provider_setup_that_lacks_something_says_what() -> anyhow::Result<()> {
    for (var, want) in [
        ("CLAUDE_CODE_USE_VERTEX", "ANTHROPIC_VERTEX_PROJECT_ID"),
        ("CLAUDE_CODE_USE_BEDROCK", "AWS_REGION"),
    ] {
        let daemon = Daemon::start_with(vec![(var.into(), "1".into())])?;
        let mut c = daemon.ndjson()?;
        let session = c.new_session_in(&daemon.workdir())?;
        c.watch(&session)?;
        c.start_turn(&session, "hello")?;
        let events = c.events_until("turn_ended")?;
        let text = serde_json::to_string(&events)?;
        assert!(text.contains(want), "{var}: {text}");
    }
    Ok(())
}
