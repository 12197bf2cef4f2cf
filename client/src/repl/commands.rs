//! What a submitted line does: client-side slash commands (`/help`, `/sessions`, `/resume`,
//! `/attach`, `/permissions`, …) run here; anything else, daemon commands included, becomes a
//! turn. The permission mode cycle of Shift+Tab lives here too.

use super::Repl;
use crate::connection;
use std::sync::Arc;
use tether_proto::{PermissionDecision, PermissionMode, Role, SessionId, TetherRpcClient};

/// The permission modes Shift+Tab cycles through.
const MODES: [PermissionMode; 4] = [
    PermissionMode::Default,
    PermissionMode::AcceptEdits,
    PermissionMode::Plan,
    PermissionMode::BypassPermissions,
];

/// Client-side slash commands (the rest go to the daemon as turns).
pub const CLIENT_COMMANDS: &[(&str, &str)] = &[
    ("/help", "this list"),
    ("/sessions", "sessions in this directory"),
    ("/new", "a new session here (this one stays)"),
    (
        "/resume",
        "/resume [id or words]: switch sessions; a picker that searches titles and conversations",
    ),
    (
        "/attach",
        "/attach <id> [--observe]: join another session (as observer: watch only)",
    ),
    (
        "/cancel",
        "stop the running turn, whoever started it (also Esc or Ctrl+C while it runs)",
    ),
    ("/mode", "/mode [mode]: show or set the permission mode"),
    (
        "/plan",
        "/plan [request]: switch to plan mode (and send the request)",
    ),
    ("/rename", "/rename <title>: rename this session"),
    (
        "/add-dir",
        "/add-dir <path>: let this terminal's turns work in another directory too",
    ),
    (
        "/diff",
        "the uncommitted changes in the session's directory (git)",
    ),
    ("/usage", "tokens and cost of this session (as /cost)"),
    (
        "/memory",
        "/memory [user]: edit the project's CLAUDE.md (or yours) in $EDITOR",
    ),
    ("/copy", "copy the model's last reply to the clipboard"),
    (
        "/doctor",
        "check the socket, the daemon, credentials and configuration",
    ),
    ("/status", "model, mode, context, cost, who is attached"),
    (
        "/permissions",
        "the mode and rules in effect, where each comes from; pending requests",
    ),
    (
        "/config",
        "the keys of the Claude Code settings files here, and which tether uses",
    ),
    (
        "/allow",
        "/allow [session|always]: answer the pending request",
    ),
    (
        "/deny",
        "/deny [message]: refuse it (the message goes to the model)",
    ),
    (
        "/answer",
        "/answer <choice or text>[; …]: answer the model's questions (a number picks an option)",
    ),
    (
        "/mcp",
        "/mcp [reconnect <name> | approve [names] | reject [names]]: MCP servers and their state",
    ),
    ("/thinking", "show or fold thinking (also Ctrl+T)"),
    (
        "/expand",
        "/expand [n]: the last folded tool output in full (also Ctrl+O); n counts back",
    ),
    ("/export", "/export [file]: Markdown transcript"),
    ("/fork", "a copy of this session to try something else"),
    (
        "/rewind",
        "/rewind [turn] [code|conversation|both]: go back to just before a turn (also Esc Esc)",
    ),
    (
        "/share",
        "/share [name role]: who has a role here, or give one (controller, approver, observer)",
    ),
    ("/unshare", "/unshare <name>: take someone's role away"),
    ("/quit", "detach (the session stays in the daemon)"),
];

/// The daemon's slash commands for the session shown (built-in and custom), for `/help` and
/// completion; read from `session/commands` when the session changes.
pub type DaemonCommands = Arc<std::sync::Mutex<Vec<tether_proto::CommandInfo>>>;

/// The models the daemon knows, as `(name, description)` for `/model` completion: aliases
/// first, then ids; read from `models/list` with the commands.
pub type ModelNames = Arc<std::sync::Mutex<Vec<(String, String)>>>;

impl Repl {
    /// Handles a submitted line; returns whether to exit. A command that fails says why and
    /// the prompt returns.
    pub(super) async fn line(&mut self, line: String) -> anyhow::Result<bool> {
        match self.run_line(line).await {
            Ok(exit) => Ok(exit),
            Err(e) => {
                self.say(&self.style.error(&format!("✗ {}", connection::describe(&e))));
                self.edit();
                Ok(false)
            }
        }
    }

    async fn run_line(&mut self, line: String) -> anyhow::Result<bool> {
        let text = line.trim().to_owned();
        if text.is_empty() {
            self.edit();
            return Ok(false);
        }
        let (cmd, arg) = match text.split_once(char::is_whitespace) {
            Some((c, a)) => (c.to_owned(), a.trim().to_owned()),
            None => (text.clone(), String::new()),
        };
        let s = self.style;
        match cmd.as_str() {
            "/quit" | "/exit" => {
                let bye = self.leave().await;
                self.say(&s.dim(&bye));
                return Ok(true);
            }
            "/cancel" => {
                self.cancel().await;
                return Ok(false);
            }
            "/help" => {
                self.refresh_commands().await;
                let daemon = self
                    .commands
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                // The description wraps under itself.
                let row = |name: &str, what: &str| {
                    let room = s.width.saturating_sub(17).max(20);
                    let lines = textwrap::wrap(what, room);
                    let mut text = String::new();
                    for (i, line) in lines.iter().enumerate() {
                        if i == 0 {
                            text.push_str(&format!(
                                "  {} {line}\n",
                                s.bold(&format!("{name:<13}"))
                            ));
                        } else {
                            text.push_str(&format!("{}{line}\n", " ".repeat(16)));
                        }
                    }
                    text
                };
                let mut out = String::from("Commands:\n");
                for (c, d) in CLIENT_COMMANDS {
                    out.push_str(&row(c, d));
                }
                for c in daemon.iter().filter(|c| c.source == "builtin") {
                    out.push_str(&row(&format!("/{}", c.name), &c.description));
                }
                out.push_str(&row("#note", "remember a note for this project"));
                let custom: Vec<_> = daemon.iter().filter(|c| c.source != "builtin").collect();
                if custom.is_empty() {
                    out.push_str("Custom commands: none (add .claude/commands/NAME.md)\n");
                } else {
                    out.push_str("Custom commands:\n");
                    for c in custom {
                        out.push_str(&row(
                            &format!("/{}", c.name),
                            &format!("{} {}", c.description, s.dim(&format!("({})", c.source))),
                        ));
                    }
                }
                let keys = "Keys: Enter sends · Alt+Enter or a trailing \\ continues the line · Tab completes / and @ \
                     · Shift+Tab cycles the permission mode · Ctrl+T shows thinking · Ctrl+O expands output \
                     · Ctrl+G edits the prompt in $EDITOR \
                     · Ctrl+V pastes a clipboard image \
                     · Esc, Ctrl+C or /cancel stops a turn · Esc Esc clears the line, or at an empty one rewinds \
                     · Ctrl+D detaches";
                for line in crate::view::wrap_text(keys, s.width) {
                    out.push_str(&line);
                    out.push('\n');
                }
                self.print(&out);
            }
            "/thinking" => {
                let text = self.view.toggle_thinking();
                self.print(&text);
            }
            "/expand" => match arg.parse::<usize>() {
                Ok(n) => self.print(&self.view.expand(n)),
                Err(_) if arg.is_empty() => self.print(&self.view.expand(1)),
                Err(_) => self.say(&s.error("/expand takes a number: 1 is the last folded output")),
            },
            "/status" => {
                self.refresh_status().await;
                let st = self
                    .status
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                let title = st
                    .title
                    .as_deref()
                    .map(|t| format!(" — {t}"))
                    .unwrap_or_default();
                self.say(&format!(
                    "session {}{title}\nmodel {} · mode {} · context {} · cost {} · {} other client(s) attached",
                    self.session.id,
                    st.model,
                    st.mode,
                    st.context_percent
                        .map(|p| format!("{p:.0}%"))
                        .unwrap_or_else(|| "?".into()),
                    st.cost.map(|c| format!("${c:.4}")).unwrap_or_else(|| "?".into()),
                    st.others
                ));
            }
            "/mode" => {
                if arg.is_empty() {
                    let mode = self
                        .status
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .mode
                        .clone();
                    self.say(&format!(
                        "mode: {mode} (default, acceptEdits, plan, bypassPermissions, dontAsk)"
                    ));
                } else {
                    match PermissionMode::parse(&arg) {
                        Some(m) => {
                            self.set_mode(m).await;
                        }
                        None => self.say(&s.error(&format!("unknown mode {arg:?}"))),
                    }
                }
            }
            "/plan" => {
                // The request goes only once the session plans.
                if self.set_mode(PermissionMode::Plan).await && !arg.is_empty() {
                    return self.send_text(&arg).await;
                }
            }
            "/rename" if arg.is_empty() => self.say(&s.error("/rename <title>")),
            "/rename" => {
                match self
                    .conn
                    .client
                    .session_configure(
                        self.session.id.clone(),
                        Some(arg.clone()),
                        None,
                        None,
                        None,
                        None,
                    )
                    .await
                {
                    Ok(_) => {
                        self.say(&s.dim(&format!("renamed to \"{arg}\"")));
                        self.refresh_status().await;
                    }
                    Err(e) => self.say(&s.error(&connection::call_error(&e))),
                }
            }
            "/add-dir" if arg.is_empty() => self.say(&s.error("/add-dir <path>")),
            "/add-dir" => {
                let path = std::path::Path::new(&self.cwd).join(&arg);
                match std::fs::canonicalize(&path) {
                    Ok(dir) if dir.is_dir() => {
                        let dir = dir.display().to_string();
                        if !self.options.add_dirs.contains(&dir) {
                            self.options.add_dirs.push(dir.clone());
                        }
                        self.say(&s.dim(&format!(
                            "{dir} is a working directory of this terminal's turns from now on"
                        )));
                    }
                    Ok(_) => self.say(&s.error(&format!("{} is not a directory", path.display()))),
                    Err(e) => self.say(&s.error(&format!("{}: {e}", path.display()))),
                }
            }
            "/usage" => return self.send_text("/cost").await,
            "/memory" => {
                let file = if arg == "user" {
                    match std::env::var_os("HOME") {
                        Some(home) => std::path::PathBuf::from(home).join(".claude/CLAUDE.md"),
                        None => {
                            self.say(&s.error("no HOME: the user's memory file has no place"));
                            self.edit();
                            return Ok(false);
                        }
                    }
                } else {
                    std::path::Path::new(&self.cwd).join("CLAUDE.md")
                };
                self.say(&memory_edited(&file, s));
            }
            "/copy" => {
                let reply = self.view.last_reply().to_owned();
                if reply.trim().is_empty() {
                    self.say(&s.dim("nothing to copy yet: the model has not written anything"));
                } else {
                    let how = copy_to_clipboard(&reply);
                    self.say(&s.dim(&format!(
                        "copied the last reply ({} characters) {how}",
                        reply.chars().count()
                    )));
                }
            }
            "/diff" => {
                let text = diff_of(&self.cwd, s);
                self.print(&text);
            }
            "/doctor" => {
                let socket = self.socket.clone();
                if let Err(e) =
                    crate::commands::doctor(&socket, crate::commands::Output { json: false }, false)
                        .await
                {
                    self.say(&s.error(&format!("✗ {e}")));
                }
            }
            "/mcp" => {
                let cwd = match self.conn.client.session_get(self.session.id.clone()).await {
                    Ok(snap) => snap.summary.cwd,
                    Err(e) => {
                        self.say(&s.error(&connection::call_error(&e)));
                        self.edit();
                        return Ok(false);
                    }
                };
                let mut words = arg.split_whitespace();
                let sub = words.next().unwrap_or("");
                let names: Vec<String> = words.map(str::to_owned).collect();
                let client = &self.conn.client;
                let said = match sub {
                    "" => client
                        .mcp_list(cwd)
                        .await
                        .map(|l| crate::mcp::render(&l, None)),
                    "reconnect" if names.len() == 1 => client
                        .mcp_reconnect(cwd, names[0].clone())
                        .await
                        .map(|_| format!("Restarting the MCP server {}.\n", names[0])),
                    "approve" | "reject" => client
                        .mcp_configure(
                            cwd,
                            tether_proto::McpChange::Approve {
                                names,
                                approve: sub == "approve",
                            },
                        )
                        .await
                        .map(|c| format!("{} (from the next turn)\n", c.message)),
                    _ => {
                        self.say(&s.error(
                            "usage: /mcp [reconnect <name> | approve [names] | reject [names]]",
                        ));
                        self.edit();
                        return Ok(false);
                    }
                };
                match said {
                    Ok(text) => self.print(&text),
                    Err(e) => self.say(&s.error(&connection::call_error(&e))),
                }
            }
            "/config" => {
                let listed = match self.conn.client.session_get(self.session.id.clone()).await {
                    Ok(snap) => self.conn.client.settings_list(snap.summary.cwd).await,
                    Err(e) => Err(e),
                };
                match listed {
                    Ok(keys) => self.print(&crate::render::settings_keys(&keys, s)),
                    Err(e) => self.say(&s.error(&format!(
                        "cannot read the settings: {}",
                        connection::call_error(&e)
                    ))),
                }
            }
            "/permissions" => {
                match self
                    .conn
                    .client
                    .permission_rules(self.session.id.clone())
                    .await
                {
                    Ok(rules) => self.print(&crate::render::rules(&rules, s)),
                    Err(e) => self.say(&s.error(&format!(
                        "cannot read the rules: {}",
                        connection::call_error(&e)
                    ))),
                }
                if self.pending.is_empty() {
                    self.say(&s.dim("no pending permission requests"));
                }
                for p in self.pending.clone() {
                    self.say(&format!(
                        "pending {}  {}: {}",
                        p.request_id, p.tool, p.preview
                    ));
                }
            }
            "/allow" | "/deny" => {
                let Some(id) = self.pending.first().map(|p| p.request_id.clone()) else {
                    self.say(&s.dim("no pending permission request"));
                    self.edit();
                    return Ok(false);
                };
                let (decision, message) = match (cmd.as_str(), arg.as_str()) {
                    ("/allow", "session") => (PermissionDecision::AllowSession, None),
                    ("/allow", "always") => (PermissionDecision::AllowAlways, None),
                    ("/allow", _) => (PermissionDecision::AllowOnce, None),
                    (_, m) => (
                        PermissionDecision::Deny,
                        Some(m.to_owned()).filter(|m| !m.is_empty()),
                    ),
                };
                let answer = super::Answer {
                    decision,
                    message,
                    updated_input: None,
                };
                self.respond(&id, answer).await;
                return Ok(false);
            }
            "/answer" => {
                let Some(question) = self
                    .pending
                    .iter()
                    .find(|p| p.tool == "AskUserQuestion")
                    .cloned()
                else {
                    self.say(&s.dim("no question is waiting for an answer"));
                    self.edit();
                    return Ok(false);
                };
                let replies: Vec<String> = arg.split(';').map(|r| r.trim().to_owned()).collect();
                let answer = super::Answer {
                    decision: PermissionDecision::AllowOnce,
                    message: None,
                    updated_input: Some(super::prompt::with_answers(&question.input, &replies)),
                };
                self.respond(&question.request_id, answer).await;
                return Ok(false);
            }
            "/sessions" => {
                let cwd = crate::remote::work_dir()?;
                let list = self
                    .conn
                    .client
                    .session_list(Some(cwd), None, Some(20), None, None)
                    .await?;
                self.print(&crate::render::sessions_table(
                    &list.sessions,
                    std::time::SystemTime::now(),
                ));
            }
            "/new" => {
                let cwd = crate::remote::work_dir()?;
                let id = self
                    .conn
                    .client
                    .session_new(cwd, None, None, None, None)
                    .await?
                    .session_id;
                self.switch(id).await?;
                return Ok(false);
            }
            "/resume" => {
                // An id or a prefix of one goes straight there; anything else is searched for.
                let known = match arg.is_empty() {
                    true => None,
                    false => crate::commands::resolve(&self.conn, &arg).await.ok(),
                };
                let picked = match known {
                    Some(summary) => Some(summary.session_id),
                    None => self.pick_session(&arg).await?,
                };
                match picked {
                    Some(id) => {
                        self.switch(id).await?;
                        return Ok(false);
                    }
                    None => self.edit(),
                }
            }
            "/attach" => {
                let observe = arg.split_whitespace().any(|a| a == "--observe");
                let Some(id) = arg.split_whitespace().find(|a| !a.starts_with("--")) else {
                    self.say(&s.dim("/attach <id or prefix> [--observe]  (/sessions lists them)"));
                    self.edit();
                    return Ok(false);
                };
                let summary = crate::commands::resolve(&self.conn, id).await?;
                let role = if observe {
                    Role::Observer
                } else {
                    Role::Controller
                };
                self.switch_as(summary.session_id, role).await?;
                return Ok(false);
            }
            "/rewind" => self.rewind(&arg).await,
            "/share" | "/unshare" => {
                let words: Vec<&str> = arg.split_whitespace().collect();
                let id = self.session.id.clone();
                let client = &self.conn.client;
                let shares = match (cmd.as_str(), words.as_slice()) {
                    ("/share", []) => client.session_shares(id).await?,
                    ("/share", [name, role]) => {
                        let role = crate::sharing::parse_role(role)?;
                        client.session_share(id, (*name).to_owned(), role).await?
                    }
                    ("/unshare", [name]) => client.session_unshare(id, (*name).to_owned()).await?,
                    _ => {
                        self.say(&s.dim("/share [name role]  ·  /unshare <name>"));
                        self.edit();
                        return Ok(false);
                    }
                };
                self.say(&s.dim(&crate::sharing::shares_text(&shares)));
            }
            "/fork" => {
                let forked = self
                    .conn
                    .client
                    .session_fork(self.session.id.clone(), None)
                    .await?
                    .session_id;
                self.say(&s.dim(&format!("forked into {forked}; switching to it")));
                self.switch(forked).await?;
                return Ok(false);
            }
            "/export" => {
                let md = self
                    .conn
                    .client
                    .session_export(
                        self.session.id.clone(),
                        Some(tether_proto::ExportFormat::Markdown),
                    )
                    .await?;
                let file = if arg.is_empty() {
                    format!(
                        "tether-{}.md",
                        &self.session.id.0[..8.min(self.session.id.0.len())]
                    )
                } else {
                    arg
                };
                match tether_proto::private::write(
                    std::path::Path::new(&file),
                    md.content.as_bytes(),
                ) {
                    Ok(()) => self.say(&s.dim(&format!("written to {file}"))),
                    Err(e) => self.say(&s.error(&format!("cannot write {file}: {e}"))),
                }
            }
            c if c.starts_with('/') && c.len() > 1 && !c[1..].contains('/') => {
                // A command neither this client nor the daemon has: say so with the one list.
                self.refresh_commands().await;
                let daemon: Vec<String> = self
                    .commands
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .map(|d| format!("/{}", d.name))
                    .collect();
                let mut all: Vec<String> = CLIENT_COMMANDS
                    .iter()
                    .map(|(n, _)| (*n).to_owned())
                    .chain(daemon)
                    .collect();
                if all.iter().any(|n| n == c) {
                    return self.send_text(&text).await;
                }
                all.sort();
                all.dedup();
                self.say(&s.error(&format!(
                    "✗ unknown command {c}; the commands are {} (/help says what each does)",
                    all.join(" ")
                )));
            }
            _ => return self.send_text(&text).await,
        }
        self.edit();
        Ok(false)
    }

    /// Sends a line as a turn (the daemon handles its own slash commands).
    async fn send_text(&mut self, text: &str) -> anyhow::Result<bool> {
        let input = self
            .pasted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .expand(text);
        self.submit(input).await;
        Ok(false)
    }

    /// Switches the session's permission mode; whether it did.
    async fn set_mode(&mut self, mode: PermissionMode) -> bool {
        match self
            .conn
            .client
            .session_configure(self.session.id.clone(), None, None, Some(mode), None, None)
            .await
        {
            Ok(_) => {
                self.status.lock().unwrap_or_else(|p| p.into_inner()).mode = mode.as_str().into();
                if mode == PermissionMode::BypassPermissions {
                    self.say(&self.style.warn(
                        "mode: bypassPermissions — every tool call runs without asking (Shift+Tab moves on)",
                    ));
                } else {
                    self.say(&self.style.dim(&format!("mode: {}", mode.as_str())));
                }
                true
            }
            Err(e) => {
                self.say(&self.style.error(&format!(
                    "could not set the mode: {}",
                    connection::call_error(&e)
                )));
                false
            }
        }
    }

    pub(super) async fn next_mode(&mut self) {
        let current = self
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .mode
            .clone();
        let at = MODES
            .iter()
            .position(|m| m.as_str() == current)
            .unwrap_or(0);
        self.set_mode(MODES[(at + 1) % MODES.len()]).await;
    }
}

/// Lines of `/diff` shown before the rest is counted.
const DIFF_LINES: usize = 400;

/// `/diff`: the uncommitted changes in `dir` — what git shows against HEAD, tracked files
/// only, then the untracked files by name — coloured as the permission prompt colours a diff.
impl Repl {
    /// `/rewind`: a picker of the conversation's turns, then of what to restore; `/rewind N
    /// [code|conversation|both]` goes straight there. A rewound conversation puts the turn's
    /// prompt back at the prompt, to change and send again.
    async fn rewind(&mut self, arg: &str) {
        use tether_proto::RewindScope;
        let s = self.style;
        if self.busy() {
            self.say(&s.error("a turn is running: stop it first (Esc or /cancel), then rewind"));
            return;
        }
        let mut words = arg.split_whitespace();
        let chosen = match words.next() {
            Some(n) => {
                let scope = match words.next() {
                    None | Some("both") => Some(RewindScope::Both),
                    Some("code") => Some(RewindScope::Code),
                    Some("conversation") => Some(RewindScope::Conversation),
                    Some(_) => None,
                };
                match (n.parse::<u64>(), scope) {
                    (Ok(turn), Some(scope)) => Some((turn, scope)),
                    _ => {
                        self.say(&s.error("/rewind [turn] [code|conversation|both]"));
                        return;
                    }
                }
            }
            None => match self.pick_rewind().await {
                Ok(chosen) => chosen,
                Err(e) => {
                    self.say(&s.error(&format!("✗ {e}")));
                    return;
                }
            },
        };
        let Some((turn, scope)) = chosen else {
            return;
        };
        let done = match self
            .conn
            .client
            .session_rewind(self.session.id.clone(), turn, Some(scope), Some(false))
            .await
        {
            Ok(done) => done,
            Err(e) => {
                self.say(&s.error(&format!("✗ {}", connection::call_error(&e))));
                return;
            }
        };
        for file in &done.outside {
            self.say(&s.dim(&format!(
                "  {file} was edited outside tether and is left as it is"
            )));
        }
        if done.conversation && !done.prompt.trim().is_empty() {
            // Back at the prompt, to change and send again (or clear with Esc Esc).
            let _ = self
                .to_editor
                .send(super::editor::Command::Prefill(done.prompt.clone()));
        }
    }

    /// `/resume` without an id: a picker of this directory's sessions that searches their
    /// titles and conversations (the daemon reads the logs) as the query is typed.
    async fn pick_session(&mut self, initial: &str) -> anyhow::Result<Option<SessionId>> {
        type Rows = Vec<(String, SessionId)>;
        let cwd = crate::remote::work_dir()?;
        let s = self.style;
        let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (ask, mut asked) =
            tokio::sync::mpsc::unbounded_channel::<(String, std::sync::mpsc::Sender<Rows>)>();
        let initial = initial.to_owned();
        let picker = tokio::task::spawn_blocking(move || {
            let search = |query: &str| -> Rows {
                let (reply, rows) = std::sync::mpsc::channel();
                if ask.send((query.to_owned(), reply)).is_err() {
                    return Vec::new();
                }
                rows.recv().unwrap_or_default()
            };
            super::prompt::search_pick("Resume a session:", &initial, search, s, &cancel)
        });
        tokio::pin!(picker);
        let now = std::time::SystemTime::now();
        loop {
            tokio::select! {
                picked = &mut picker => return Ok(picked.ok().flatten()),
                Some((query, reply)) = asked.recv() => {
                    let query = Some(query).filter(|q| !q.trim().is_empty());
                    let list = self
                        .conn
                        .client
                        .session_list(
                            Some(cwd.clone()),
                            None,
                            Some(super::prompt::SEARCH_ROWS),
                            None,
                            query,
                        )
                        .await;
                    let rows = list
                        .map(|l| l.sessions)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|summary| {
                            // What the model or a guest wrote never reaches the terminal raw.
                            let clean = |t: &str| -> String {
                                t.chars().filter(|c| !c.is_control()).collect()
                            };
                            let title = clean(summary.title.as_deref().unwrap_or("(untitled)"));
                            let found = summary
                                .found
                                .as_deref()
                                .filter(|f| !f.is_empty())
                                .map(|f| format!("  {}", s.dim(&clean(f))))
                                .unwrap_or_default();
                            let label = format!(
                                "{}  {}  {title}{found}",
                                summary.session_id.0.chars().take(8).collect::<String>(),
                                crate::render::ago(&summary.updated_at, now),
                            );
                            (label, summary.session_id)
                        })
                        .collect();
                    let _ = reply.send(rows);
                }
            }
        }
    }

    /// The two menus of `/rewind`: which turn, then what to restore.
    async fn pick_rewind(&mut self) -> anyhow::Result<Option<(u64, tether_proto::RewindScope)>> {
        use tether_proto::RewindScope;
        let s = self.style;
        let points = self
            .conn
            .client
            .session_checkpoints(self.session.id.clone())
            .await
            .map_err(|e| anyhow::anyhow!("{}", connection::call_error(&e)))?;
        if points.is_empty() {
            self.say(&s.dim("nothing to rewind to yet: this conversation has no turns"));
            return Ok(None);
        }
        // The last twenty; older ones by number.
        let shown: Vec<tether_proto::Checkpoint> = points
            .iter()
            .skip(points.len().saturating_sub(20))
            .cloned()
            .collect();
        if shown.len() < points.len() {
            self.say(&s.dim(&format!(
                "({} older turns are not listed: /rewind N goes to turn N)",
                points.len() - shown.len()
            )));
        }
        let items: Vec<String> = shown
            .iter()
            .map(|p| {
                let prompt = p.prompt.lines().next().unwrap_or("").trim();
                let prompt = if prompt.is_empty() {
                    "(no text)"
                } else {
                    prompt
                };
                let can = match (p.files, p.conversation) {
                    (true, true) => "files and conversation",
                    (true, false) => "files only",
                    (false, true) => "conversation; no file changed since",
                    (false, false) => "nothing to restore",
                };
                format!("turn {}  {prompt}  {}", p.turn, s.dim(&format!("({can})")))
            })
            .collect();
        let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let last = items.len() - 1;
        let picked = tokio::task::spawn_blocking(move || {
            super::prompt::pick("Rewind to just before:", &items, false, last, s, &cancel)
        })
        .await
        .ok()
        .flatten();
        let Some(point) = picked.and_then(|i| shown.get(i)) else {
            return Ok(None);
        };
        let mut options: Vec<(&str, RewindScope)> = Vec::new();
        if point.files && point.conversation {
            options.push(("Restore code and conversation", RewindScope::Both));
        }
        if point.conversation {
            options.push(("Restore conversation", RewindScope::Conversation));
        }
        if point.files {
            options.push(("Restore code", RewindScope::Code));
        }
        if options.is_empty() {
            self.say(&s.dim(&format!(
                "turn {} has nothing to restore: no file changed since, and the conversation was compacted after it",
                point.turn
            )));
            return Ok(None);
        }
        let mut labels: Vec<String> = options.iter().map(|(l, _)| (*l).to_owned()).collect();
        labels.push("Never mind".into());
        let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let title = format!("Turn {}: restore", point.turn);
        let picked = tokio::task::spawn_blocking(move || {
            super::prompt::pick(&title, &labels, true, 0, s, &cancel)
        })
        .await
        .ok()
        .flatten();
        Ok(picked
            .and_then(|i| options.get(i))
            .map(|(_, scope)| (point.turn, *scope)))
    }
}

fn diff_of(dir: &str, style: crate::style::Style) -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
    };
    // Against HEAD; in a repository with no commit yet, what is staged and what is not.
    let diff = match git(&["diff", "HEAD", "--no-color", "--no-ext-diff"])
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || {
                let staged = git(&["diff", "--cached", "--no-color", "--no-ext-diff"])?;
                let unstaged = git(&["diff", "--no-color", "--no-ext-diff"])?;
                let mut stdout = staged.stdout;
                stdout.extend(unstaged.stdout);
                Ok::<_, std::io::Error>(std::process::Output { stdout, ..unstaged })
            },
            Ok,
        ) {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        Ok(out) => {
            let why = String::from_utf8_lossy(&out.stderr);
            return format!(
                "{}\n",
                style.error(&format!(
                    "✗ no diff: {}",
                    why.lines().next().unwrap_or("git failed")
                ))
            );
        }
        Err(e) => return format!("{}\n", style.error(&format!("✗ git cannot run: {e}"))),
    };
    let untracked = git(&["ls-files", "--others", "--exclude-standard"])
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if diff.trim().is_empty() && untracked.trim().is_empty() {
        return format!("{}\n", style.dim("no uncommitted changes"));
    }
    let mut out = String::new();
    let lines: Vec<&str> = diff.lines().collect();
    for line in lines.iter().take(DIFF_LINES) {
        out.push_str(&crate::view::diff_line(style, line));
        out.push('\n');
    }
    if lines.len() > DIFF_LINES {
        out.push_str(&style.dim(&format!("… {} more lines", lines.len() - DIFF_LINES)));
        out.push('\n');
    }
    let new: Vec<&str> = untracked.lines().filter(|l| !l.is_empty()).collect();
    if !new.is_empty() {
        out.push_str(&style.dim(&format!("untracked: {}", new.join(", "))));
        out.push('\n');
    }
    out
}

/// `/memory`: opens `file` in the user's editor with the terminal as it started (created with
/// its folder when missing); what to say after.
fn memory_edited(file: &std::path::Path, style: crate::style::Style) -> String {
    if let Some(dir) = file.parent()
        && let Err(e) = std::fs::create_dir_all(dir)
    {
        return style.error(&format!("cannot create {}: {e}", dir.display()));
    }
    let mut editor = super::editor::external_editor();
    editor.arg(file);
    let ran = super::quiet::cooked(|| editor.status());
    match ran {
        Ok(status) if status.success() => style.dim(&format!(
            "{} saved; the model reads it from the next turn",
            file.display()
        )),
        Ok(status) => style.error(&format!("the editor ended with {status}")),
        Err(e) => style.error(&format!("the editor could not start: {e} (set $EDITOR)")),
    }
}

/// Puts `text` on the clipboard: through the terminal (OSC 52, which reaches the user's own
/// clipboard over SSH and in tmux with `set-clipboard on`), and through `wl-copy` or `xclip`
/// when one is installed; says how.
fn copy_to_clipboard(text: &str) -> &'static str {
    use base64::Engine;
    use std::io::Write;
    let encoded = base64::engine::general_purpose::STANDARD.encode(text);
    let mut out = std::io::stdout();
    let _ = write!(out, "\x1b]52;c;{encoded}\x07");
    let _ = out.flush();
    for (program, args) in [
        ("wl-copy", &[][..]),
        ("xclip", &["-selection", "clipboard"][..]),
    ] {
        let Ok(mut child) = std::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
        else {
            continue;
        };
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(text.as_bytes());
        }
        if child.wait().is_ok_and(|s| s.success()) {
            return "to the clipboard";
        }
    }
    "through the terminal (OSC 52)"
}
