//! Operations end to end: configuration layers and errors, `tether config show`, `tether
//! doctor`, the rotating log file.

use anyhow::Context;
use serde_json::{Value, json};
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake};

fn entry<'a>(report: &'a Value, key: &str) -> &'a Value {
    report["entries"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["key"] == key))
        .unwrap_or(&Value::Null)
}

#[test]
fn a_bad_config_stops_the_daemon_with_the_file_line_and_key() -> anyhow::Result<()> {
    let mut daemon = Daemon::start()?;
    daemon.terminate()?;
    daemon.write_config("model = \"opus\"\n\n[api]\nmax_retries = \"lots\"\n")?;
    let out = daemon.command().output()?;
    assert_eq!(out.status.code(), Some(2), "refuses to start");
    let err = String::from_utf8_lossy(&out.stderr);
    let at = format!("{}:4", daemon.config_path().display());
    assert!(
        err.contains(&at) && err.contains("api.max_retries"),
        "names the file, line and key: {err}"
    );
    assert!(!daemon.socket().exists(), "nothing was served");

    daemon.write_config("model = \"opus\"\nidle_unlod = \"1h\"\n")?;
    let out = daemon.command().output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(":2") && err.contains("\"idle_unlod\""),
        "{err}"
    );

    std::fs::remove_file(daemon.config_path())?;
    let out = daemon
        .command()
        .env("TETHER_DELTA_RETENTION", "a while")
        .arg("--set")
        .arg("model=opus")
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("TETHER_DELTA_RETENTION") && err.contains("delta_retention"),
        "{err}"
    );
    Ok(())
}

#[test]
fn config_layers_reach_sessions_and_config_show_says_where_each_came_from() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("hi")]))?;
    let mut env = fake.env();
    env.push(("TETHER_IDLE_UNLOAD".into(), "2h".into()));
    let mut daemon = Daemon::start_with(env)?;
    daemon.terminate()?;
    daemon.write_config(
        "# tether\nmodel = \"opus\"\nidle_unload = \"1h\"\npermission_mode = \"plan\"\n\n[permissions]\nallow = [\"Bash(ls:*)\"]\n",
    )?;

    // Without a daemon, `config show` asks a local tetherd (same environment as the client's).
    let out = daemon
        .tether()
        .args(["config", "show", "--json"])
        .env("TETHER_IDLE_UNLOAD", "3h")
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let local: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(entry(&local, "idle_unload")["value"], "\"3h\"");
    assert_eq!(
        entry(&local, "idle_unload")["source"],
        "env TETHER_IDLE_UNLOAD"
    );

    daemon.spawn()?;
    let out = daemon
        .tether()
        .args(["config", "show", "--json"])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout)?;
    let file = daemon.config_path().display().to_string();
    assert_eq!(entry(&report, "model")["value"], "\"opus\"");
    assert_eq!(entry(&report, "model")["source"], format!("{file}:2"));
    assert_eq!(
        entry(&report, "idle_unload")["value"],
        "\"2h\"",
        "env beats the file"
    );
    assert_eq!(
        entry(&report, "idle_unload")["source"],
        "env TETHER_IDLE_UNLOAD"
    );
    assert_eq!(entry(&report, "fast_model")["source"], "default");
    let text = daemon.tether().args(["config", "show"]).output()?;
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("model = \"opus\"") && text.contains(&format!("# {file}:2")),
        "{text}"
    );

    // New sessions get the configured model and mode.
    let mut c = daemon.ndjson()?;
    let id = c.call("session/new", json!({"cwd": daemon.workdir()}))?["sessionId"]
        .as_str()
        .context("id")?
        .to_owned();
    let got = c.call("session/get", json!({"sessionId": id}))?;
    assert_eq!(got["model"], "opus");
    assert_eq!(got["permissionMode"], "plan");
    Ok(())
}

#[test]
fn doctor_checks_the_daemon_and_the_api_without_showing_the_key() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([]))?;
    let mut env = fake.env();
    env.retain(|(k, _)| k != "ANTHROPIC_API_KEY");
    env.push(("ANTHROPIC_API_KEY".into(), "sk-doctor-secret".into()));
    let daemon = Daemon::start_with(env.clone())?;
    let out = daemon
        .tether()
        .args(["doctor", "--online", "--json"])
        .output()?;
    let checks: Vec<Value> = serde_json::from_slice(&out.stdout)
        .with_context(|| String::from_utf8_lossy(&out.stderr).into_owned())?;
    let status = |name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| {
                (
                    c["status"].clone(),
                    c["detail"].as_str().unwrap_or("").to_owned(),
                )
            })
            .unwrap_or_default()
    };
    for name in [
        "socket",
        "daemon",
        "config",
        "data directory",
        "credentials",
        "api",
    ] {
        assert_eq!(status(name).0, "ok", "{name}: {checks:?}");
    }
    assert!(status("credentials").1.contains("ANTHROPIC_API_KEY"));
    assert!(status("api").1.contains("200"), "{:?}", status("api"));
    assert!(out.status.success());
    let all = String::from_utf8_lossy(&out.stdout);
    assert!(
        !all.contains("sk-doctor-secret"),
        "the key's value never shows"
    );

    // The text form, with a daemon that has no credentials: a clear failure and exit 1.
    let mut bare = fake.env();
    bare.retain(|(k, _)| k != "ANTHROPIC_API_KEY");
    let nokey = Daemon::start_with(bare)?;
    let out = nokey.tether().args(["doctor"]).output()?;
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.starts_with('✗')
            && l.contains("credentials")
            && l.contains("ANTHROPIC_API_KEY")),
        "{text}"
    );
    Ok(())
}

#[test]
fn a_daemon_not_under_systemd_writes_a_rotating_log_in_its_data_dir() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(vec![("TETHER_LOG".into(), "info".into())])?;
    let logs = daemon.data_dir().join("logs");
    let mut text = String::new();
    for _ in 0..100 {
        text = std::fs::read_dir(&logs)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("tetherd."))
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect();
        if text.contains("serving") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        text.contains("serving"),
        "the log file has the start-up: {text:?}"
    );
    Ok(())
}

/// A span or data point attribute as a string.
fn attr(attrs: &[opentelemetry_proto::tonic::common::v1::KeyValue], key: &str) -> String {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
    attrs
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref()?.value.as_ref())
        .map(|v| match v {
            V::StringValue(s) => s.clone(),
            V::IntValue(i) => i.to_string(),
            V::DoubleValue(d) => d.to_string(),
            V::BoolValue(b) => b.to_string(),
            other => format!("{other:?}"),
        })
        .unwrap_or_default()
}

#[test]
fn a_turn_exports_its_spans_and_metrics_over_otlp() -> anyhow::Result<()> {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    let receiver = tether_tests::otlp::OtlpReceiver::start()?;
    let fake = Fake::start(Script::of([
        Step::text("Let me run it.").tool_use("Bash", json!({"command": "echo traced"})),
        Step::text("It printed traced."),
    ]))?;
    let mut env = fake.env();
    for (k, v) in [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".into()),
        ("OTEL_SERVICE_NAME", "tetherd-under-test".into()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "200".into()),
    ] {
        env.push((k.into(), v));
    }
    let mut daemon = Daemon::start_with(env)?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    c.start_turn(&session, "run the secret-prompt-words echo")?;
    c.events_until("turn_ended")?;
    daemon.terminate()?; // flushes what is queued

    let spans: Vec<_> = receiver.with(|r| {
        r.traces
            .iter()
            .flat_map(|t| &t.resource_spans)
            .flat_map(|rs| {
                let service = rs
                    .resource
                    .as_ref()
                    .map(|res| attr(&res.attributes, "service.name"))
                    .unwrap_or_default();
                rs.scope_spans
                    .iter()
                    .flat_map(|s| s.spans.clone())
                    .map(move |s| (service.clone(), s))
            })
            .collect()
    });
    let named = |n: &str| {
        spans
            .iter()
            .filter(|(_, s)| s.name == n)
            .collect::<Vec<_>>()
    };
    let turn = &named("turn").first().context("a turn span")?.1;
    assert!(
        named("turn")
            .iter()
            .all(|(svc, _)| svc == "tetherd-under-test")
    );
    assert_eq!(attr(&turn.attributes, "stop_reason"), "end_turn");
    let requests = named("api.request");
    assert_eq!(requests.len(), 2, "two model requests");
    for (_, r) in &requests {
        assert_eq!(
            r.parent_span_id, turn.span_id,
            "requests are children of the turn"
        );
        assert_eq!(r.trace_id, turn.trace_id);
        assert_eq!(attr(&r.attributes, "http.status"), "200");
        assert_eq!(attr(&r.attributes, "tokens.input"), "25");
        assert!(attr(&r.attributes, "model").starts_with("claude-"));
    }
    let tool = &named("tool").first().context("a tool span")?.1;
    assert_eq!(
        tool.parent_span_id, turn.span_id,
        "the tool call is a child of the turn"
    );
    assert_eq!(attr(&tool.attributes, "tool.name"), "Bash");
    assert_eq!(attr(&tool.attributes, "outcome"), "ok");
    assert!(
        named("rpc")
            .iter()
            .any(|(_, s)| attr(&s.attributes, "rpc.method") == "turn/start"),
        "RPC calls are spans"
    );
    let everything = format!("{spans:?}");
    assert!(
        !everything.contains("secret-prompt-words"),
        "no prompt text without OTEL_LOG_USER_PROMPTS"
    );
    assert!(!everything.contains("sk-ant-test"), "no credentials");

    // Metrics are cumulative: the last export of each has the totals.
    let metrics = receiver.with(|r| {
        let mut last = std::collections::BTreeMap::new();
        for m in r
            .metrics
            .iter()
            .flat_map(|e| &e.resource_metrics)
            .flat_map(|rm| &rm.scope_metrics)
            .flat_map(|sm| &sm.metrics)
        {
            last.insert(m.name.clone(), m.clone());
        }
        last
    });
    let sum_points = |name: &str| match metrics.get(name).and_then(|m| m.data.clone()) {
        Some(Data::Sum(s)) => s.data_points,
        _ => Vec::new(),
    };
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as N;
    let number = |p: &opentelemetry_proto::tonic::metrics::v1::NumberDataPoint| match p.value {
        Some(N::AsInt(i)) => i as f64,
        Some(N::AsDouble(d)) => d,
        None => 0.0,
    };
    let tokens = sum_points("tether.token.usage");
    let input = tokens
        .iter()
        .find(|p| attr(&p.attributes, "type") == "input")
        .context("input tokens")?;
    assert_eq!(number(input), 50.0, "25 input tokens per request");
    assert!(attr(&input.attributes, "model").starts_with("claude-"));
    let cost = sum_points("tether.cost.usage");
    assert!(cost.first().is_some_and(|p| number(p) > 0.0), "{cost:?}");
    assert_eq!(
        sum_points("tether.turn.count").first().map(number),
        Some(1.0)
    );
    assert_eq!(
        sum_points("tether.session.count").first().map(number),
        Some(1.0)
    );
    let decisions = sum_points("tether.permission.decision");
    assert!(
        decisions
            .iter()
            .any(|p| attr(&p.attributes, "decision") == "allow"
                && attr(&p.attributes, "source") == "mode"),
        "{decisions:?}"
    );
    let tool_duration = match metrics
        .get("tether.tool.duration")
        .and_then(|m| m.data.clone())
    {
        Some(Data::Histogram(h)) => h.data_points,
        _ => Vec::new(),
    };
    let bash = tool_duration
        .iter()
        .find(|p| attr(&p.attributes, "tool") == "Bash")
        .context("Bash duration")?;
    assert_eq!(
        (bash.count, attr(&bash.attributes, "outcome").as_str()),
        (1, "ok")
    );

    println!("OTLP receiver got spans:");
    for (_, s) in &spans {
        let parent = spans
            .iter()
            .find(|(_, p)| p.span_id == s.parent_span_id)
            .map(|(_, p)| p.name.as_str())
            .unwrap_or("-");
        println!(
            "  {:<12} parent {:<6} {} attributes",
            s.name,
            parent,
            s.attributes.len()
        );
    }
    println!("and metric points:");
    for (name, m) in &metrics {
        match &m.data {
            Some(Data::Sum(s)) => {
                for p in &s.data_points {
                    let attrs: Vec<String> = p
                        .attributes
                        .iter()
                        .map(|a| format!("{}={}", a.key, attr(std::slice::from_ref(a), &a.key)))
                        .collect();
                    println!("  {name} {} {{{}}}", number(p), attrs.join(", "));
                }
            }
            Some(Data::Histogram(h)) => {
                for p in &h.data_points {
                    let attrs: Vec<String> = p
                        .attributes
                        .iter()
                        .map(|a| format!("{}={}", a.key, attr(std::slice::from_ref(a), &a.key)))
                        .collect();
                    println!(
                        "  {name} count={} sum={:.1}ms {{{}}}",
                        p.count,
                        p.sum.unwrap_or(0.0),
                        attrs.join(", ")
                    );
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[test]
fn an_unreachable_collector_does_not_slow_turns() -> anyhow::Result<()> {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let fake = Fake::start(Script::of(
        (0..5).map(|i| Step::text(format!("answer {i}"))),
    ))?;
    let mut env = fake.env();
    env.push((
        "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
        format!("http://127.0.0.1:{closed}"),
    ));
    env.push(("OTEL_BSP_SCHEDULE_DELAY".into(), "10".into()));
    let mut daemon = Daemon::start_with(env)?;
    let mut c = daemon.ndjson()?;
    let session = c.new_session_in(&daemon.workdir())?;
    c.watch(&session)?;
    let started = std::time::Instant::now();
    for i in 0..5 {
        c.start_turn(&session, &format!("question {i}"))?;
        c.events_until("turn_ended")?;
    }
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(3),
        "5 turns took {took:?}"
    );
    let stop = std::time::Instant::now();
    daemon.terminate()?;
    assert!(
        stop.elapsed() < std::time::Duration::from_secs(8),
        "shutdown waits a bounded time for the collector"
    );
    Ok(())
}

/// A raw WebSocket upgrade on the daemon's socket; returns the HTTP status line.
fn ws_upgrade(
    socket: &std::path::Path,
) -> anyhow::Result<(std::os::unix::net::UnixStream, String)> {
    use std::io::{BufRead, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket)?;
    s.set_read_timeout(Some(tether_tests::WAIT))?;
    s.write_all(
        b"GET / HTTP/1.1\r\nHost: tetherd\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )?;
    let mut line = String::new();
    std::io::BufReader::new(s.try_clone()?).read_line(&mut line)?;
    Ok((s, line))
}

#[test]
fn connections_beyond_the_limit_are_refused_with_the_reason_on_both_transports()
-> anyhow::Result<()> {
    let daemon = Daemon::start_with(vec![("TETHER_MAX_CONNECTIONS".into(), "150".into())])?;
    // Far past the WebSocket library's default of 100: all accepted.
    let mut open = Vec::new();
    for i in 0..149 {
        let (s, status) = ws_upgrade(&daemon.socket())?;
        assert!(status.starts_with("HTTP/1.1 101"), "client {i}: {status}");
        open.push(s);
    }
    let mut last = daemon.ndjson()?;
    last.call("daemon/status", json!({}))?;

    // The 151st: an NDJSON client gets a JSON-RPC error line, a terminal a clear message.
    let mut refused = std::os::unix::net::UnixStream::connect(daemon.socket())?;
    std::io::Write::write_all(
        &mut refused,
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon/status\"}\n",
    )?;
    let mut reply = String::new();
    std::io::Read::read_to_string(&mut refused, &mut reply)?;
    let reply: Value = serde_json::from_str(reply.trim()).context("one error line")?;
    assert_eq!(reply["error"]["code"], -32008, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("150 connections") && m.contains("max_connections")),
        "{reply}"
    );
    let out = daemon.tether().args(["sessions"]).output()?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_connections"), "{err}");

    // One leaves: the next client is served.
    drop(open.pop());
    let deadline = std::time::Instant::now() + tether_tests::WAIT;
    loop {
        let out = daemon.tether().args(["sessions"]).output()?;
        if out.status.success() {
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "still refused: {out:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(daemon.log().contains("refused a connection"), "logged");
    Ok(())
}
