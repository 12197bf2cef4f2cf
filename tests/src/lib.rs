//! The black-box test harness: spawns the real `tetherd` and `tether` binaries on a temporary
//! socket and data directory, and talks to the daemon over raw newline-delimited JSON-RPC.
//!
//! Binaries come from `$TETHER_BIN_DIR`, else the cargo target directory this test binary was
//! built into (build them first: `cargo build --workspace --bins`).

pub mod fake_anthropic;
pub mod nats;
pub mod otlp;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long any single wait in a test may take before it fails.
pub const WAIT: Duration = Duration::from_secs(15);

/// The names of the tools a Messages API request body offers.
pub fn tool_names(body: &Value) -> anyhow::Result<Vec<&str>> {
    Ok(body["tools"]
        .as_array()
        .context("the request offers no tools")?
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect())
}

/// The directory holding `tetherd` and `tether`.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TETHER_BIN_DIR") {
        return PathBuf::from(dir);
    }
    // target/<profile>/deps/<test binary> → target/<profile>; a bench binary sits in
    // target/<profile> itself.
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().expect("target directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("target directory").to_owned()
    } else {
        dir.to_owned()
    }
}

/// The cache `tests/run` installs the suites' outside components into.
pub fn test_cache() -> PathBuf {
    std::env::var_os("TETHER_TEST_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("tether-tests"))
        })
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/tether-tests")))
        .expect("a cache directory: set TETHER_TEST_CACHE")
}

/// A file `tests/run` installs into the cache, failing clearly when it is not there.
fn cached(path: PathBuf) -> PathBuf {
    assert!(
        path.is_file(),
        "{} is missing: tests/run installs it",
        path.display()
    );
    path
}

/// A program of the MCP reference servers `tests/run` installs into its cache
/// (`mcp-server-everything`, `mcp-server-filesystem`, `mcp-server-time`).
pub fn mcp_server(program: &str) -> PathBuf {
    let dir = test_cache().join("mcp-servers");
    cached(if program == "mcp-server-time" {
        dir.join("venv/bin").join(program)
    } else {
        dir.join("node_modules/.bin").join(program)
    })
}

/// Gives the project in `dir` these MCP servers (a `.mcp.json` of `{"mcpServers": servers}`)
/// and approves them (`enableAllProjectMcpServers` in its settings).
pub fn project_mcp_servers(dir: &Path, servers: Value) -> std::io::Result<()> {
    std::fs::write(
        dir.join(".mcp.json"),
        json!({ "mcpServers": servers }).to_string(),
    )?;
    std::fs::create_dir_all(dir.join(".claude"))?;
    std::fs::write(
        dir.join(".claude/settings.json"),
        json!({"enableAllProjectMcpServers": true}).to_string(),
    )
}

/// The Python of the venv holding the ACP Python SDK.
pub fn acp_python() -> PathBuf {
    cached(test_cache().join("acp/venv/bin/python"))
}

/// The Python of the venv holding the Claude Agent SDK for Python.
pub fn sdk_python() -> PathBuf {
    cached(test_cache().join("agent-sdk/venv/bin/python"))
}

/// Where `tests/run` installs the Claude Agent SDK for TypeScript (its `node_modules`).
pub fn sdk_node_dir() -> PathBuf {
    let dir = test_cache().join("agent-sdk");
    cached(dir.join("node_modules/@anthropic-ai/claude-agent-sdk/sdk.mjs"));
    dir
}

/// Where `tests/run` installs playwright-core (its `node_modules`), which drives Debian's
/// Chromium.
pub fn browser_dir() -> PathBuf {
    let dir = test_cache().join("browser");
    cached(dir.join("node_modules/playwright-core/package.json"));
    dir
}

/// The ACP v1 JSON Schema the ACP TypeScript SDK ships.
pub fn acp_schema() -> PathBuf {
    cached(test_cache().join("acp/node_modules/@agentclientprotocol/sdk/schema/v1/schema.json"))
}

/// Path of one of the project's binaries, failing clearly when it was not built.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo build --workspace --bins` first (or set TETHER_BIN_DIR)",
        path.display()
    );
    path
}

/// A running `tetherd` on its own temporary socket and data directory; killed on drop.
pub struct Daemon {
    /// Holds the socket and data directories.
    pub dir: tempfile::TempDir,
    /// The daemon process, while it runs.
    pub child: Option<Child>,
    /// Extra environment for the daemon.
    pub env: Vec<(String, String)>,
    /// The file-creation mask the daemon runs with (the test's own when `None`).
    pub umask: Option<u32>,
}

/// The fake Anthropic API on its own runtime, for synchronous tests.
pub struct Fake {
    /// The server.
    pub server: fake_anthropic::FakeAnthropic,
    _runtime: tokio::runtime::Runtime,
}

impl Fake {
    /// Starts the fake with `script`.
    pub fn start(script: fake_anthropic::Script) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let server = runtime.block_on(fake_anthropic::FakeAnthropic::start(script))?;
        Ok(Self {
            server,
            _runtime: runtime,
        })
    }

    /// Fails when the fake rejected any request (one the real API would have refused).
    pub fn no_rejections(&self) {
        for r in self.server.message_requests() {
            assert!(
                r.rejected.is_none(),
                "the fake API rejected a request: {:?}\n{}",
                r.rejected,
                r.body
            );
        }
    }

    /// The requests turns made, in order (title requests, which carry no tools, left out).
    pub fn turn_requests(&self) -> Vec<fake_anthropic::Recorded> {
        self.server
            .message_requests()
            .into_iter()
            .filter(|r| r.body["tools"].is_array())
            .collect()
    }

    /// The environment that points a daemon at this fake.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("ANTHROPIC_BASE_URL".into(), self.server.url()),
            ("ANTHROPIC_API_KEY".into(), "sk-ant-test".into()),
        ]
    }
}

/// `tether doctor`'s checks: name → (status, detail).
pub type DoctorChecks = BTreeMap<String, (String, String)>;

impl Daemon {
    /// Starts a daemon and waits until it serves.
    pub fn start() -> anyhow::Result<Self> {
        Self::start_with(Vec::new())
    }

    /// Starts a daemon with extra environment (e.g. [`Fake::env`]).
    pub fn start_with(env: Vec<(String, String)>) -> anyhow::Result<Self> {
        let mut daemon = Self::prepare(env)?;
        daemon.spawn()?;
        Ok(daemon)
    }

    /// A daemon's directories and environment, not started yet ([`Daemon::spawn`] starts it).
    pub fn prepare(env: Vec<(String, String)>) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("tether-test").tempdir()?;
        std::fs::create_dir_all(dir.path().join("home"))?;
        std::fs::create_dir_all(dir.path().join("work"))?;
        let daemon = Self {
            dir,
            child: None,
            env,
            umask: None,
        };
        // The working directory is the user's own project, as a real one would be.
        daemon.trust(&daemon.workdir())?;
        Ok(daemon)
    }

    /// Records `dir` as trusted where Claude Code (and tether) keep it: `projects.<dir>` in
    /// the daemon's `~/.claude.json`.
    pub fn trust(&self, dir: &Path) -> anyhow::Result<()> {
        let file = self.dir.path().join("home/.claude.json");
        let mut state: Value = match std::fs::read_to_string(&file) {
            Ok(text) => serde_json::from_str(&text)?,
            Err(_) => json!({}),
        };
        let key = dir.canonicalize()?.display().to_string();
        state["projects"][key.as_str()]["hasTrustDialogAccepted"] = json!(true);
        std::fs::write(&file, serde_json::to_string_pretty(&state)?)?;
        Ok(())
    }

    /// A directory sessions can use as their cwd.
    pub fn workdir(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// The configuration file the daemon (and a client's local `tetherd`) reads.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("home/.config/tether/config.toml")
    }

    /// Writes the configuration file (read at the next start).
    pub fn write_config(&self, toml: &str) -> anyhow::Result<()> {
        let path = self.config_path();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, toml)?;
        Ok(())
    }

    /// The socket path.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("run/tetherd.sock")
    }

    /// Where the daemon's stderr (its log) goes.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("tetherd.log")
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A `tetherd` command on this daemon's socket and data directory.
    pub fn command(&self) -> Command {
        let mut cmd = match self.umask {
            None => Command::new(bin("tetherd")),
            Some(mask) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!("umask {mask:03o} && exec \"$0\" \"$@\""))
                    .arg(bin("tetherd"));
                sh
            }
        };
        cmd.arg("--socket")
            .arg(self.socket())
            .arg("--data-dir")
            .arg(self.data_dir())
            .env("TETHER_LOG", "warn")
            .env("HOME", self.dir.path().join("home"))
            .env("TETHER_CONFIG", self.config_path())
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_AUTH_TOKEN")
            .env_remove("ANTHROPIC_BASE_URL")
            .env_remove("ANTHROPIC_MODEL");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Starts the daemon process (again) and waits for its ready line.
    pub fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .context("open the daemon log")?;
        let mut child = self
            .command()
            .arg("--print-ready")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .context("spawn tetherd")?;
        let stdout = child.stdout.take().context("tetherd stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(WAIT).context("tetherd did not get ready")?;
        if !line.starts_with("ready") {
            let status = child.wait()?;
            bail!("tetherd exited before it was ready: {status}");
        }
        self.child = Some(child);
        Ok(())
    }

    /// `kill -9` the daemon and reap it.
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Sends SIGTERM and waits for a clean exit; returns its status.
    pub fn terminate(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        let mut child = self.child.take().context("daemon is not running")?;
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()?;
        assert!(status.success(), "kill -TERM failed");
        wait_exit(&mut child)
    }

    /// Waits for the daemon to exit by itself (after `daemon/shutdown`).
    pub fn wait_exit(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        let mut child = self.child.take().context("daemon is not running")?;
        wait_exit(&mut child)
    }

    /// The daemon's resident memory in KiB (`VmRSS`), while it runs.
    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        let pid = self.child.as_ref().context("daemon is not running")?.id();
        rss_kib(pid)
    }

    /// The daemon's memory: resident, private and proportional.
    pub fn memory(&self) -> anyhow::Result<Memory> {
        memory(self.child.as_ref().context("daemon is not running")?.id())
    }

    /// The daemon's peak resident memory in KiB (`VmHWM`: the most it ever held).
    pub fn peak_rss_kib(&self) -> anyhow::Result<u64> {
        self.status_kib("VmHWM")
    }

    /// A size field of the daemon's `/proc/<pid>/status` in KiB (`RssAnon`, `RssFile`, …).
    pub fn status_kib(&self, field: &str) -> anyhow::Result<u64> {
        let pid = self.child.as_ref().context("daemon is not running")?.id();
        status_kib(pid, field)
    }

    /// `tether doctor --online --json`: each check's name → (status, detail), and the raw
    /// output (to check that no secret shows).
    pub fn doctor(&self) -> anyhow::Result<(DoctorChecks, String)> {
        let out = self
            .tether()
            .args(["doctor", "--online", "--json"])
            .output()?;
        let checks: Vec<Value> = serde_json::from_slice(&out.stdout)
            .with_context(|| String::from_utf8_lossy(&out.stderr).into_owned())?;
        let by_name = checks
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or("").to_owned(),
                    (
                        c["status"].as_str().unwrap_or("").to_owned(),
                        c["detail"].as_str().unwrap_or("").to_owned(),
                    ),
                )
            })
            .collect();
        Ok((by_name, String::from_utf8_lossy(&out.stdout).into_owned()))
    }

    /// A new raw NDJSON connection.
    pub fn ndjson(&self) -> anyhow::Result<Ndjson> {
        Ndjson::connect(&self.socket())
    }

    /// A `tether` client command pointed at this daemon.
    pub fn tether(&self) -> Command {
        let mut cmd = Command::new(bin("tether"));
        cmd.env("TETHER_SOCKET", self.socket())
            .env("TETHER_HOME", self.data_dir())
            .env("TETHER_CONFIG", self.config_path())
            .env("NO_COLOR", "1");
        cmd
    }

    /// `tether ARGS` in this daemon's working directory, run to its end.
    pub fn run_tether(&self, args: &[&str]) -> std::io::Result<std::process::Output> {
        self.tether()
            .current_dir(self.workdir())
            .args(args)
            .output()
    }
}

/// A process's resident memory in KiB (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    status_kib(pid, "VmRSS")
}

/// What a process's memory costs, in KiB: resident (RSS), its own alone (USS: private pages,
/// what it frees when it exits) and its share of what it maps with others (PSS: shared pages
/// divided among their users), so memory shared between processes is counted once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// Resident set.
    pub rss: u64,
    /// Unique set: private clean and dirty pages.
    pub uss: u64,
    /// Proportional set.
    pub pss: u64,
}

impl std::fmt::Display for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RSS {} KiB, private (USS) {} KiB, proportional (PSS) {} KiB",
            self.rss, self.uss, self.pss
        )
    }
}

/// `pid`'s memory, from `/proc/<pid>/smaps_rollup`.
pub fn memory(pid: u32) -> anyhow::Result<Memory> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        rollup
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .with_context(|| format!("no {name} line in smaps_rollup"))
    };
    Ok(Memory {
        rss: field("Rss")?,
        uss: field("Private_Clean")? + field("Private_Dirty")?,
        pss: field("Pss")?,
    })
}

/// A size field of `/proc/<pid>/status` in KiB.
fn status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no {field} line"))
}

fn wait_exit(child: &mut Child) -> anyhow::Result<std::process::ExitStatus> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("process {} did not exit in time", child.id());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.kill9();
    }
}

/// A raw newline-delimited JSON-RPC connection. Replies are matched by id; notifications are
/// queued for [`Ndjson::next_notification`].
pub struct Ndjson {
    writer: Box<dyn Write + Send>,
    /// The socket, shut down on drop (none for a connection through another process).
    socket: Option<UnixStream>,
    lines: mpsc::Receiver<String>,
    notifications: std::collections::VecDeque<Value>,
    next_id: u64,
}

impl Drop for Ndjson {
    /// The reader thread holds a clone of the socket: shut it down so the daemon sees the
    /// client leave.
    fn drop(&mut self) {
        if let Some(socket) = &self.socket {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Ndjson {
    /// Says this connection is a terminal (`initialize` with kind `tui`), as `tether` does:
    /// the daemon then treats its turns as interactive.
    pub fn as_terminal(mut self) -> anyhow::Result<Self> {
        self.call(
            "initialize",
            json!({"protocolVersion": 1, "clientInfo": {"name": "test", "version": "0", "kind": "tui"},
                   "capabilities": {"permissions": true}}),
        )?;
        Ok(self)
    }

    /// Connects to a socket.
    pub fn connect(socket: &Path) -> anyhow::Result<Self> {
        let stream =
            UnixStream::connect(socket).with_context(|| format!("connect {}", socket.display()))?;
        let reader = stream.try_clone()?;
        let mut conn = Self::over(reader, stream.try_clone()?);
        conn.socket = Some(stream);
        Ok(conn)
    }

    /// A connection through another process's pipes (`ssh … tether bridge`'s stdout and stdin).
    pub fn over(
        reader: impl std::io::Read + Send + 'static,
        writer: impl Write + Send + 'static,
    ) -> Self {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(reader).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            writer: Box::new(writer),
            socket: None,
            lines: rx,
            notifications: Default::default(),
            next_id: 1,
        }
    }

    /// Writes raw bytes (one or more lines, or garbage).
    pub fn send_raw(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.writer.write_all(bytes)?;
        self.writer.flush()?;
        Ok(())
    }

    /// The next line from the daemon, parsed.
    pub fn read(&mut self) -> anyhow::Result<Value> {
        let line = self
            .lines
            .recv_timeout(WAIT)
            .context("no message from tetherd in time")?;
        serde_json::from_str(&line).with_context(|| format!("not JSON: {line}"))
    }

    /// The next reply (a message with an `id`), queueing notifications that arrive first.
    pub fn reply(&mut self) -> anyhow::Result<Value> {
        loop {
            let msg = self.read()?;
            if msg.get("method").is_some() && msg.get("id").is_none() {
                self.notifications.push_back(msg);
            } else {
                return Ok(msg);
            }
        }
    }

    /// Sends a request and returns its whole reply object (`result` or `error`).
    pub fn request(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(format!("{line}\n").as_bytes())?;
        let reply = self.reply()?;
        if reply["id"] != json!(id) {
            bail!("reply to another request: {reply}");
        }
        Ok(reply)
    }

    /// Sends a request and returns its `result`, failing on an error reply.
    pub fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let reply = self.request(method, params)?;
        if let Some(err) = reply.get("error") {
            bail!("{method} failed: {err}");
        }
        Ok(reply["result"].clone())
    }

    /// The next `session/event` notification's event.
    pub fn next_event(&mut self) -> anyhow::Result<Value> {
        let msg = match self.notifications.pop_front() {
            Some(m) => m,
            None => {
                let msg = self.read()?;
                if msg.get("id").is_some() {
                    bail!("unexpected reply while waiting for an event: {msg}");
                }
                msg
            }
        };
        assert_eq!(
            msg["method"], "session/event",
            "unexpected notification {msg}"
        );
        Ok(msg["params"]["result"].clone())
    }

    /// Events until (and including) the first one of type `ty`.
    pub fn events_until(&mut self, ty: &str) -> anyhow::Result<Vec<Value>> {
        let mut out = Vec::new();
        loop {
            let ev = self.next_event()?;
            let done = ev["type"] == ty;
            out.push(ev);
            if done {
                return Ok(out);
            }
        }
    }

    /// Creates a session in a temporary-safe cwd and returns its id.
    pub fn new_session(&mut self, title: &str) -> anyhow::Result<String> {
        let r = self.call("session/new", json!({"cwd": "/tmp", "title": title}))?;
        Ok(r["sessionId"].as_str().context("sessionId")?.to_owned())
    }

    /// Creates a session in `cwd` that runs tools without asking (`bypassPermissions`), for
    /// suites that are not about permissions, and returns its id.
    pub fn new_session_in(&mut self, cwd: &Path) -> anyhow::Result<String> {
        self.new_session_with_mode(cwd, "bypassPermissions")
    }

    /// Creates a session in `cwd` with a permission mode and returns its id.
    pub fn new_session_with_mode(&mut self, cwd: &Path, mode: &str) -> anyhow::Result<String> {
        let r = self.call(
            "session/new",
            json!({"cwd": cwd, "title": "test", "permissionMode": mode}),
        )?;
        Ok(r["sessionId"].as_str().context("sessionId")?.to_owned())
    }

    /// Starts a text turn and returns its turn id.
    pub fn start_turn(&mut self, session: &str, text: &str) -> anyhow::Result<String> {
        let r = self.call(
            "turn/start",
            json!({"sessionId": session, "input": [{"type": "text", "text": text}]}),
        )?;
        Ok(r["turnId"].as_str().context("turnId")?.to_owned())
    }

    /// Subscribes from the head and waits for its own `client_attached`, so every later event
    /// is live.
    pub fn watch(&mut self, session: &str) -> anyhow::Result<()> {
        self.subscribe(session, json!("head"))?;
        self.events_until("client_attached")?;
        Ok(())
    }

    /// Subscribes from the start and reads the replay, then live events until `done` holds for
    /// everything read (e.g. after a restart, until the recovered turn has ended).
    pub fn replay_until(
        &mut self,
        session: &str,
        done: impl Fn(&[Value]) -> bool,
    ) -> anyhow::Result<Vec<Value>> {
        self.subscribe(session, json!(0))?;
        let mut seen = self.events_until("replay_complete")?;
        while !done(&seen) {
            seen.push(self.next_event()?);
        }
        Ok(seen)
    }

    /// Subscribes and returns the subscription id.
    pub fn subscribe(&mut self, session: &str, since: Value) -> anyhow::Result<Value> {
        self.call(
            "session/subscribe",
            json!({"sessionId": session, "since": since}),
        )
    }
}

/// The `seq`s of the events that have one.
pub fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().filter_map(|e| e["seq"].as_u64()).collect()
}
