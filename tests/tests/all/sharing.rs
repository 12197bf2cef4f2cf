//! Several people on one session, end to end: the owner shares a session; Bob, let in by a
//! forced command (`tether bridge --principal bob --role approver`) through a real sshd,
//! answers the permission request the owner's prompt raised; Carol, an observer, is refused
//! when she acts; after a kill -9, `tether audit --json` lists exactly the decisions in the
//! log, with who made each and how they came.

use super::remote::Sshd;
use anyhow::Context;
use serde_json::{Value, json};
use std::process::Child;
use tether_tests::fake_anthropic::{Script, Step};
use tether_tests::{Daemon, Fake, Ndjson};

/// The code of a refusal by role.
const NOT_PERMITTED: i64 = -32011;

/// A client speaking through another process's pipes (ssh, or a bridge run as another
/// user), which dies with it.
struct Piped {
    conn: Ndjson,
    child: Child,
}

impl Drop for Piped {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Piped {
    fn of(mut child: Child) -> anyhow::Result<Self> {
        let stdout = child.stdout.take().context("its stdout")?;
        let stdin = child.stdin.take().context("its stdin")?;
        Ok(Self {
            conn: Ndjson::over(stdout, stdin),
            child,
        })
    }
}

/// A client at the other end of `ssh` with `key`.
fn through_ssh(sshd: &Sshd, key: &std::path::Path) -> anyhow::Result<Piped> {
    Piped::of(sshd.connect_with(key)?)
}

/// The error of a reply that must be a refusal by role, with its message.
fn refused(reply: &Value) -> String {
    assert_eq!(reply["error"]["code"], NOT_PERMITTED, "{reply}");
    reply["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The guest lists the one session shared with them and follows it; the owner prompts; the
/// guest sees the permission request the prompt raised, whose id this is.
fn guest_sees_the_request(
    guest: &mut Ndjson,
    owner: &mut Ndjson,
    session: &str,
) -> anyhow::Result<Value> {
    let list = guest.call("session/list", json!({}))?;
    assert_eq!(list["sessions"].as_array().map(Vec::len), Some(1), "{list}");
    guest.watch(session)?;
    owner.watch(session)?;
    owner.start_turn(session, "make the file")?;
    let asked = guest.events_until("permission_requested")?;
    Ok(asked.last().context("the request")?["data"]["requestId"].clone())
}

/// `approver` allows `request` once; the owner's events to the turn's end, and who the log
/// says answered.
fn allow_once(
    approver: &mut Ndjson,
    owner: &mut Ndjson,
    session: &str,
    request: &Value,
) -> anyhow::Result<(Vec<Value>, Value)> {
    approver.call(
        "permission/respond",
        json!({"sessionId": session, "requestId": request, "decision": "allow_once"}),
    )?;
    let events = owner.events_until("turn_ended")?;
    let resolved = events
        .iter()
        .find(|e| e["type"] == "permission_resolved")
        .context("resolved")?;
    let by = resolved["data"]["resolvedBy"].clone();
    Ok((events, by))
}

#[test]
fn an_approver_over_ssh_answers_an_observer_is_refused_and_the_audit_says_who_decided()
-> anyhow::Result<()> {
    let fake = Fake::start(Script::of([
        Step::text("Looking.").tool_use("Bash", json!({"command": "ls"})),
        Step::text("A folder.").tool_use("Bash", json!({"command": "mkdir -p built"})),
        Step::text("Making it.").tool_use("Bash", json!({"command": "touch made-with-bob"})),
        Step::text("Done."),
    ]))?;
    let mut daemon = Daemon::start_with(fake.env())?;
    let work = daemon.workdir();
    // The rule sits on line 4 of the project's settings.
    std::fs::create_dir_all(work.join(".claude"))?;
    std::fs::write(
        work.join(".claude/settings.json"),
        "{\n  \"permissions\": {\n    \"allow\": [\n      \"Bash(mkdir:*)\"\n    ]\n  }\n}\n",
    )?;
    daemon.trust(&work)?;
    let sshd = Sshd::start(&daemon, &fake)?;
    let bob_key = sshd.forced_key("bob", "bridge --principal bob --role approver")?;
    let carol_key = sshd.forced_key("carol", "bridge --principal carol")?;

    let mut alice = daemon.ndjson()?.as_terminal()?;
    let session = alice.new_session_with_mode(&work, "default")?;
    let shared = alice.call(
        "session/share",
        json!({"sessionId": session, "principal": "bob", "role": "approver"}),
    )?;
    assert_eq!(
        shared["shares"],
        json!([{"principal": "bob", "role": "approver"}])
    );
    let out = daemon.run_tether(&["share", &session, "--with", "carol", "--role", "observer"])?;
    assert!(out.status.success(), "{out:?}");

    // Bob, over ssh: nothing of the daemon's but the session shared with him.
    let mut bob = through_ssh(&sshd, &bob_key)?;
    let hello = bob.conn.call(
        "initialize",
        json!({"protocolVersion": 1, "clientInfo": {"name": "bob's editor", "version": "1", "kind": "editor"}}),
    )?;
    assert!(hello["connectionId"].is_u64(), "{hello}");
    let why = refused(&bob.conn.request("session/new", json!({"cwd": work}))?);
    assert!(why.contains("bob"), "{why}");
    let request = guest_sees_the_request(&mut bob.conn, &mut alice, &session)?;
    let why = refused(&bob.conn.request(
        "turn/start",
        json!({"sessionId": session, "input": [{"type": "text", "text": "and more"}]}),
    )?);
    assert!(why.contains("approver"), "{why}");

    // Carol watches and may do nothing else, whatever she says she is.
    let mut carol = through_ssh(&sshd, &carol_key)?;
    carol
        .conn
        .send_raw(b"#tether {\"principal\":\"alice\"}\n")?;
    let garbled = carol.conn.read()?;
    assert_eq!(garbled["error"]["code"], -32700, "{garbled}");
    let why = refused(&carol.conn.request(
        "turn/start",
        json!({"sessionId": session, "input": [{"type": "text", "text": "hi"}]}),
    )?);
    assert!(why.contains("carol is an observer"), "{why}");
    let why = refused(&carol.conn.request(
        "permission/respond",
        json!({"sessionId": session, "requestId": request, "decision": "deny"}),
    )?);
    assert!(why.contains("observer"), "{why}");

    // An approver allows or denies the call as the model asked it; the rest is the owner's.
    let why = refused(&bob.conn.request(
        "permission/respond",
        json!({"sessionId": session, "requestId": request, "decision": "allow_always"}),
    )?);
    assert!(why.contains("allow_always"), "{why}");
    let why = refused(&bob.conn.request(
        "permission/respond",
        json!({"sessionId": session, "requestId": request, "decision": "allow_once",
               "updatedInput": {"command": "touch something-else"}}),
    )?);
    assert!(why.contains("updatedInput"), "{why}");
    refused(&bob.conn.request("daemon/status", json!({}))?);

    // A controller prompts, but what would act outside the session's prompts is the owner's.
    alice.call(
        "session/share",
        json!({"sessionId": session, "principal": "carol", "role": "controller"}),
    )?;
    let why = refused(&carol.conn.request(
        "turn/start",
        json!({"sessionId": session, "input": [{"type": "text", "text": "!cat ~/.ssh/id_ed25519"}]}),
    )?);
    assert!(why.contains("shell command"), "{why}");
    let why = refused(&carol.conn.request(
        "turn/start",
        json!({"sessionId": session, "input": [{"type": "text", "text": "hi"}],
               "options": {"allowedTools": ["Bash"]}}),
    )?);
    assert!(why.contains("allowedTools"), "{why}");
    let why = refused(&carol.conn.request(
        "turn/start",
        json!({"sessionId": session, "input": [{"type": "file", "path": "/etc/shadow"}]}),
    )?);
    assert!(why.contains("/etc/shadow"), "{why}");
    let why = refused(&carol.conn.request(
        "session/configure",
        json!({"sessionId": session, "budgetUsd": 1000}),
    )?);
    assert!(why.contains("budget"), "{why}");
    alice.call(
        "session/share",
        json!({"sessionId": session, "principal": "carol", "role": "observer"}),
    )?;

    let (events, by) = allow_once(&mut bob.conn, &mut alice, &session, &request)?;
    assert_eq!(by["principal"], "bob", "{by}");
    assert_eq!(by["channel"], "ssh", "{by}");
    assert!(work.join("made-with-bob").exists());
    let started = events
        .iter()
        .find(|e| e["type"] == "turn_started")
        .context("started")?;
    assert_eq!(started["data"]["by"]["channel"], "local", "{started}");

    // Taking Bob's role away ends his subscription; coming back is refused.
    let out = daemon.run_tether(&["unshare", &session, "--with", "bob"])?;
    assert!(out.status.success(), "{out:?}");
    bob.conn.events_until("session_unshared")?;
    let why = refused(
        &bob.conn
            .request("session/get", json!({"sessionId": session}))?,
    );
    assert!(why.contains("not shared with bob"), "{why}");
    drop(bob);
    drop(carol);

    // The log, read after a kill -9, is the ledger.
    daemon.kill9()?;
    daemon.spawn()?;
    let out = daemon.run_tether(&["audit", &session, "--json"])?;
    assert!(out.status.success(), "{out:?}");
    let audit: Value = serde_json::from_slice(&out.stdout)?;
    let entries = audit["entries"].as_array().context("entries")?;
    assert_eq!(entries.len(), 3, "{audit}");
    assert_eq!(entries[0]["tool"], "Bash");
    assert_eq!(entries[0]["source"], "mode", "ls only reads: {audit}");
    assert_eq!(entries[0]["mode"], "default");
    assert_eq!(entries[1]["source"], "rule");
    assert_eq!(entries[1]["rule"], "Bash(mkdir:*)");
    let origin = entries[1]["ruleSource"].as_str().unwrap_or_default();
    assert!(origin.ends_with(".claude/settings.json:4"), "{origin}");
    assert_ne!(entries[0]["inputHash"], entries[1]["inputHash"]);
    assert_eq!(entries[2]["source"], "person");
    assert_eq!(entries[2]["decision"], "allow_once");
    assert_eq!(entries[2]["by"]["principal"], "bob");
    assert_eq!(entries[2]["by"]["channel"], "ssh");
    assert_eq!(entries[2]["requestId"], request);
    let out = daemon.run_tether(&["audit", &session])?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("allowed once by bob over ssh"), "{text}");
    assert!(text.contains("by the rule Bash(mkdir:*)"), "{text}");
    let mut c = daemon.ndjson()?;
    let export = c.call(
        "session/export",
        json!({"sessionId": session, "format": "markdown"}),
    )?;
    let transcript = export["content"].as_str().unwrap_or_default();
    assert!(
        transcript.contains("Permission: allow_once (bob over ssh)"),
        "{transcript}"
    );
    assert!(
        transcript.contains("Shared with carol as observer"),
        "{transcript}"
    );
    let log = c.replay_until(&session, |_| true)?;
    let in_log: Vec<&Value> = log
        .iter()
        .filter(|e| e["type"] == "permission_decided" || e["type"] == "permission_resolved")
        .map(|e| &e["seq"])
        .collect();
    let listed: Vec<&Value> = entries.iter().map(|e| &e["seq"]).collect();
    assert_eq!(listed, in_log, "the ledger is the log's decisions");
    Ok(())
}

/// A client run as the local user `name`, through `tether --shared-by OWNER bridge` (which
/// only relays): the bytes are the client's own from the first one.
fn as_local_user(name: &str, owner: &str, socket: &std::path::Path) -> anyhow::Result<Piped> {
    let bridge = super::access::as_user(name, tether_tests::bin("tether"))
        .args(["--shared-by", owner, "bridge"])
        .env("TETHER_SOCKET", socket)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    Piped::of(bridge)
}

/// A directory for the shared socket that other users can pass through, removed at the end.
struct SharedDir(std::path::PathBuf);

impl Drop for SharedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn another_local_user_reaches_a_shared_session_and_no_one_else_does() -> anyhow::Result<()> {
    const BOB: &str = "tether-other";
    const MALLORY: &str = "tether-victim";
    if super::access::user(BOB).is_none() {
        return Ok(());
    }
    let owner = nix::unistd::User::from_uid(nix::unistd::getuid())?
        .context("this user")?
        .name;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let shared = SharedDir(
        std::env::temp_dir().join(format!("tether-shared-test-{}-{stamp}", std::process::id())),
    );
    let socket = shared.0.join("tetherd.sock");
    let fake = Fake::start(Script::of([
        Step::text("Making it.").tool_use("Bash", json!({"command": "touch made-with-bob"})),
        Step::text("Done."),
    ]))?;
    let mut env = fake.env();
    env.push(("TETHER_SHARE_SOCKET".into(), socket.display().to_string()));
    let daemon = Daemon::start_with(env)?;
    let work = daemon.workdir();
    let mut alice = daemon.ndjson()?.as_terminal()?;
    let session = alice.new_session_with_mode(&work, "default")?;

    // Nothing is shared: there is no socket to reach, and bob is told so.
    assert!(
        !socket.exists(),
        "the shared socket exists before any share"
    );
    let out = super::access::as_user(BOB, tether_tests::bin("tether"))
        .args(["--shared-by", &owner, "sessions"])
        .env("TETHER_SOCKET", &socket)
        .output()?;
    assert!(!out.status.success());
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(why.contains("shares no session"), "{why}");

    alice.call(
        "session/share",
        json!({"sessionId": session, "principal": BOB, "role": "approver"}),
    )?;
    assert!(
        socket.exists(),
        "the first share with a local user opens the socket"
    );

    // Bob says he is the owner: the kernel says otherwise, and the daemon believes the kernel.
    let mut bob = as_local_user(BOB, &owner, &socket)?;
    bob.conn
        .send_raw(format!("#tether {{\"principal\":\"{owner}\"}}\n").as_bytes())?;
    bob.conn.call("initialize", json!({"protocolVersion": 1}))?;
    let why = refused(&bob.conn.request("session/new", json!({"cwd": work}))?);
    assert!(why.contains(BOB), "{why}");
    let request = guest_sees_the_request(&mut bob.conn, &mut alice, &session)?;
    let (_, by) = allow_once(&mut bob.conn, &mut alice, &session, &request)?;
    assert_eq!(by["principal"], BOB, "{by}");
    assert_eq!(by["channel"], "local", "{by}");
    assert!(work.join("made-with-bob").exists());

    // Someone no session is shared with is turned away with the reason.
    let mut mallory = as_local_user(MALLORY, &owner, &socket)?;
    mallory
        .conn
        .send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session/list\"}\n")?;
    let turned_away = mallory.conn.read()?;
    assert_eq!(turned_away["error"]["code"], NOT_PERMITTED, "{turned_away}");
    let why = turned_away["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains(MALLORY), "{why}");

    // Once unshared, bob is detached, and coming back is turned away the same way.
    alice.call(
        "session/unshare",
        json!({"sessionId": session, "principal": BOB}),
    )?;
    bob.conn.events_until("session_unshared")?;
    drop(bob);
    let mut again = as_local_user(BOB, &owner, &socket)?;
    again
        .conn
        .send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session/list\"}\n")?;
    let turned_away = again.conn.read()?;
    assert_eq!(turned_away["error"]["code"], NOT_PERMITTED, "{turned_away}");
    Ok(())
}

#[test]
fn share_in_the_terminal_gives_and_takes_a_role_and_the_transcript_says_so() -> anyhow::Result<()> {
    let fake = Fake::start(Script::of([Step::text("Hello.")]))?;
    let daemon = Daemon::start_with(fake.env())?;
    let mut t = super::pty::tether(&daemon, &[])?;
    t.want("› ")?;
    t.send_line("/share bob approver")?;
    t.want("(owner), bob (approver)")?;
    t.want("shared with bob as approver by")?;
    t.send_line("/share bob owner")?;
    t.want("is not a role")?;
    t.send_line("/unshare bob")?;
    t.want("bob is no longer approver")?;
    t.send([4u8])?;
    t.want("detached")?;
    Ok(())
}
