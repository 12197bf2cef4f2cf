//! The slash commands the daemon answers itself, without the model: `/clear`, `/model`,
//! `/effort`, `/cost`, `/budget`, `/sandbox` (`sandboxing.rs`), `# note`, `!command` (run in a
//! task; what it printed reaches the model with the next prompt), and an unknown `/name`. Each
//! ends its turn with `command` (or `error`, with the reason in an `error` event; a cancelled
//! `!command`, `cancelled`); none asks the model anything.
//!
//! `/compact` and custom commands are model turns (`turns.rs`); the parsing is `agent::commands`.

use super::actor::{Command, SessionActor};
use crate::agent::SlashCommand;
use tether_proto::{ClientRef, EventKind, TokenUsage, TurnError, TurnId};

impl SessionActor {
    /// Runs a daemon command as the turn `turn_id` and ends it.
    pub(super) fn run_command(&mut self, turn_id: TurnId, by: ClientRef, command: SlashCommand) {
        match command {
            SlashCommand::Clear => {
                self.session_end("clear");
                self.emit_in(EventKind::HistoryCleared {}, Some(turn_id.clone()));
                self.finish_command(turn_id, None)
            }
            SlashCommand::Model(None) => {
                let model = &self.journal.record.model;
                let text = format!("model: {model} ({})", self.env.catalog.resolve(model));
                self.say(&turn_id, text);
                self.finish_command(turn_id, None)
            }
            SlashCommand::Model(Some(name)) => self.set_model(turn_id, by, name),
            SlashCommand::Effort(None) => {
                let text = self.effort_text();
                self.say(&turn_id, text);
                self.finish_command(turn_id, None)
            }
            SlashCommand::Effort(Some(level)) => self.set_effort(turn_id, by, level),
            SlashCommand::Cost => {
                let text = self.cost_text();
                self.say(&turn_id, text);
                self.finish_command(turn_id, None)
            }
            SlashCommand::Context => {
                let text = self.context_text();
                self.say(&turn_id, text);
                self.finish_command(turn_id, None)
            }
            SlashCommand::Agents | SlashCommand::Hooks => self.listing(turn_id, command),
            SlashCommand::Budget(None) => {
                let text = self.budget_text();
                self.say(&turn_id, text);
                self.finish_command(turn_id, None)
            }
            SlashCommand::Budget(Some(amount)) => self.set_budget(turn_id, by, &amount),
            SlashCommand::Sandbox => self.sandbox_command(turn_id),
            SlashCommand::OutputStyle(name) => self.output_style(turn_id, name),
            SlashCommand::Note(note) => self.remember(turn_id, &note),
            SlashCommand::Shell(command) => self.shell_command(turn_id, command),
            SlashCommand::Unknown(name) => {
                let cwd = std::path::PathBuf::from(&self.journal.record.cwd);
                let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
                let all: Vec<String> = crate::agent::list_commands(&cwd, home.as_deref())
                    .into_iter()
                    .map(|c| format!("/{}", c.name))
                    .collect();
                let message = format!(
                    "unknown command /{name}; this session's commands are {} (custom ones live in .claude/commands/)",
                    all.join(" ")
                );
                self.refuse(turn_id, "unknown_command", message)
            }
            // Model turns: never handed here.
            SlashCommand::Compact(_) | SlashCommand::Custom { .. } => {
                tracing::error!("a model command reached the daemon's command handler");
                self.finish_command(turn_id, None)
            }
        }
    }

    /// `!command` (typed at a terminal): runs it in the session's directory in a task (the
    /// user's own command: no permission asked, no sandbox; a cancel kills it and what it
    /// started), then logs what it printed.
    fn shell_command(&mut self, turn_id: TurnId, command: String) {
        let cwd = std::path::PathBuf::from(&self.journal.record.cwd);
        let cancel = self.turns.running_cancel().unwrap_or_default();
        let Some(tx) = self.me.upgrade() else { return };
        self.tasks.spawn(async move {
            let run = run_shell(command, &cwd, &cancel).await;
            let _ = tx.send(Command::ShellRan { turn_id, run });
        });
    }

    /// A `!command` ran: its output is logged (what it printed before a cancel too) and its
    /// turn ends, `cancelled` when it was stopped (unless the turn ended meanwhile).
    pub(super) fn shell_ran(&mut self, turn_id: TurnId, run: ShellRun) {
        if !self.turns.is_running(&turn_id) {
            return;
        }
        self.emit_in(run.event, Some(turn_id.clone()));
        if run.cancelled {
            let outcome =
                crate::agent::TurnOutcome::without_model(tether_proto::StopReason::Cancelled, None);
            self.end_turn(turn_id, outcome);
        } else {
            self.finish_command(turn_id, None)
        }
    }

    /// A command whose answer a task worked out (`/sandbox`): said, and the turn ended.
    pub(super) fn command_answered(&mut self, turn_id: TurnId, text: String) {
        self.say(&turn_id, text);
        self.finish_command(turn_id, None)
    }

    /// An `info` notice of a command's turn.
    fn say(&mut self, turn_id: &TurnId, message: String) {
        self.emit_in(
            EventKind::Notice {
                level: tether_proto::NoticeLevel::Info,
                message,
            },
            Some(turn_id.clone()),
        );
    }

    /// `/output-style [name]`: lists the styles (the chosen one marked), or saves `name` as the
    /// project's `outputStyle` in `.claude/settings.local.json`, as Claude Code does. A style
    /// is part of a session's prompt prefix, so it applies from the next session on.
    fn output_style(&mut self, turn_id: TurnId, name: Option<String>) {
        use crate::context::styles;
        let cwd = std::path::PathBuf::from(&self.journal.record.cwd);
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let chosen = crate::settings::output_style(&cwd, home.as_deref())
            .unwrap_or_else(|| styles::DEFAULT.to_owned());
        let Some(name) = name else {
            let mark = |n: &str| {
                if n.eq_ignore_ascii_case(&chosen) {
                    "●"
                } else {
                    " "
                }
            };
            let mut text = format!(
                "{} {:<14} tether's own instructions\n",
                mark(styles::DEFAULT),
                styles::DEFAULT
            );
            for s in styles::available(&cwd, home.as_deref()) {
                text.push_str(&format!(
                    "{} {:<14} {} ({})\n",
                    mark(&s.name),
                    s.name,
                    s.description,
                    s.source
                ));
            }
            text.push_str("/output-style NAME chooses one for the next sessions here");
            self.say(&turn_id, text);
            return self.finish_command(turn_id, None);
        };
        let known = name.eq_ignore_ascii_case(styles::DEFAULT)
            || styles::find(&name, &cwd, home.as_deref()).is_some();
        if !known {
            let names: Vec<String> = std::iter::once(styles::DEFAULT.to_owned())
                .chain(
                    styles::available(&cwd, home.as_deref())
                        .into_iter()
                        .map(|s| s.name),
                )
                .collect();
            let message = format!(
                "there is no output style {name:?}; there are {} (add one in .claude/output-styles/)",
                names.join(", ")
            );
            return self.refuse(turn_id, "unknown_output_style", message);
        }
        // An untrusted project's settings are not read: saved there, the choice would do
        // nothing.
        if !crate::trust::is_trusted(&cwd, home.as_deref()) {
            let message = format!(
                "{} is not trusted, so its settings (and its own output styles) are not read; trust it first (tether trust), then choose again",
                cwd.display()
            );
            return self.refuse(turn_id, "untrusted", message);
        }
        let file = cwd.join(".claude/settings.local.json");
        let saved = crate::json_file::update(&file, |v| {
            v["outputStyle"] = serde_json::Value::String(name.clone());
            Ok(())
        });
        match saved {
            Ok(()) => {
                let text = format!(
                    "output style {name} saved to {}; new sessions here use it (this one keeps its own)",
                    file.display()
                );
                self.say(&turn_id, text);
                self.finish_command(turn_id, None)
            }
            Err(e) => self.refuse(turn_id, "settings", format!("cannot save it: {e}")),
        }
    }

    fn set_model(&mut self, turn_id: TurnId, by: ClientRef, name: String) {
        if let Err(e) = self.env.catalog.check(&name) {
            return self.refuse(turn_id, e.code(), e.to_string());
        }
        self.journal.record.model = name.clone();
        self.journal.touch();
        self.emit_in(
            EventKind::SessionConfigured {
                title: None,
                model: Some(name),
                effort: None,
                permission_mode: None,
                on_no_controller: None,
                budget_usd: None,
                by: Some(by),
            },
            Some(turn_id.clone()),
        );
        self.finish_command(turn_id, None)
    }

    fn effort_text(&self) -> String {
        let model = &self.journal.record.model;
        let info = self.env.catalog.info(model);
        let levels = info
            .as_ref()
            .map(|i| {
                i.efforts
                    .iter()
                    .map(|e| e.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .filter(|l| !l.is_empty());
        let current = self
            .journal
            .record
            .effort
            .clone()
            .or_else(|| self.env.policy.effort.map(|e| e.as_str().to_owned()))
            .or_else(|| {
                info.as_ref()
                    .and_then(|i| i.default_effort)
                    .map(|e| format!("{} (the model's default)", e.as_str()))
            });
        match (current, levels) {
            (Some(c), Some(l)) => format!("effort: {c}; {model} takes {l}"),
            _ => format!("{model} has no effort setting"),
        }
    }

    fn set_effort(&mut self, turn_id: TurnId, by: ClientRef, level: String) {
        let reset = matches!(level.as_str(), "default" | "auto");
        if !reset
            && let Err(e) = self
                .env
                .catalog
                .check_effort(&self.journal.record.model, &level)
        {
            return self.refuse(turn_id, e.code(), e.to_string());
        }
        self.journal.record.effort = (!reset).then(|| level.clone());
        self.journal.touch();
        self.emit_in(
            EventKind::SessionConfigured {
                title: None,
                model: None,
                effort: Some(if reset { String::new() } else { level }),
                permission_mode: None,
                on_no_controller: None,
                budget_usd: None,
                by: Some(by),
            },
            Some(turn_id.clone()),
        );
        self.finish_command(turn_id, None)
    }

    fn budget_text(&self) -> String {
        let spent = self
            .ledger
            .cost_usd
            .map_or_else(|| "an unknown amount".into(), |c| format!("${c:.4}"));
        let session = match self.journal.record.budget_usd {
            Some(b) if self.ledger.budget_reached => format!(
                "budget ${b:.2}, {spent} spent: reached; prompts wait until it is raised (/budget AMOUNT)"
            ),
            Some(b) => format!("budget ${b:.2}, {spent} spent"),
            None => format!("no budget ({spent} spent); set one with /budget AMOUNT"),
        };
        match &self.env.daily {
            Some(daily) => format!(
                "{session}; today all sessions spent ${:.4} of the daemon's daily ${:.2}",
                daily.spent(),
                daily.cap()
            ),
            None => session,
        }
    }

    /// `/budget AMOUNT`: sets the cap (`0` or `off`: none); a session paused at its budget
    /// goes on.
    fn set_budget(&mut self, turn_id: TurnId, by: ClientRef, amount: &str) {
        let amount = amount.trim().trim_start_matches('$');
        let budget = match amount {
            "off" | "none" => Some(0.0),
            _ => amount
                .parse::<f64>()
                .ok()
                .filter(|b| b.is_finite() && *b >= 0.0),
        };
        let Some(budget) = budget else {
            let message = format!(
                "{amount:?} is not an amount of dollars (e.g. /budget 5, /budget 0 for no cap)"
            );
            return self.refuse(turn_id, "invalid_budget", message);
        };
        self.journal.record.budget_usd = (budget > 0.0).then_some(budget);
        self.turns.set_budget(self.journal.record.budget_usd);
        self.journal.touch();
        self.emit_in(
            EventKind::SessionConfigured {
                title: None,
                model: None,
                effort: None,
                permission_mode: None,
                on_no_controller: None,
                budget_usd: Some(budget),
                by: Some(by),
            },
            Some(turn_id.clone()),
        );
        let text = self.budget_text();
        self.say(&turn_id, text);
        self.finish_command(turn_id, None)
    }

    /// `/agents` and `/hooks`: read from the session's files in a task (they may be many),
    /// then said.
    fn listing(&mut self, turn_id: TurnId, command: SlashCommand) {
        let cwd = std::path::PathBuf::from(&self.journal.record.cwd);
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let configured = self.env.config_hooks.clone();
        let Some(tx) = self.me.upgrade() else { return };
        self.tasks.spawn(async move {
            let text = tokio::task::spawn_blocking(move || match command {
                SlashCommand::Hooks => {
                    crate::hooks::Hooks::load(&cwd, home.as_deref(), configured.as_ref()).describe()
                }
                _ => {
                    let found = crate::tools::agents::load(&cwd, home.as_deref());
                    let mut lines: Vec<String> = found
                        .agents
                        .iter()
                        .map(|a| format!("{} ({}): {}", a.name, a.source, a.description))
                        .collect();
                    lines.extend(found.problems.iter().map(|p| format!("! {p}")));
                    lines.join("\n")
                }
            })
            .await
            .unwrap_or_else(|e| format!("could not read them: {e}"));
            let _ = tx.send(Command::Answered { turn_id, text });
        });
    }

    /// `/context`: the parts of what the next request sends, each as about a quarter of its
    /// bytes in tokens, against the model's window and the last request's measured size.
    fn context_text(&self) -> String {
        let tokens = |bytes: usize| bytes.div_ceil(4) as u64;
        let shown = |n: u64| {
            if n >= 1000 {
                format!("{:.1}k", n as f64 / 1000.0)
            } else {
                n.to_string()
            }
        };
        let prefix = self.history.prefix.as_ref();
        let instructions = prefix.map_or(0, |p| tokens(p.instructions.len()));
        let environment = prefix.map_or(0, |p| {
            tokens(p.environment.len() + p.git.as_deref().map_or(0, str::len))
        });
        let memory = prefix.map_or(0, |p| tokens(p.memory.as_deref().map_or(0, str::len)));
        let definitions = self.env.tools.definitions();
        let tool_bytes = serde_json::to_string(&definitions).map_or(0, |t| t.len());
        let tools = tokens(tool_bytes);
        let messages = self.history.messages();
        let message_bytes = serde_json::to_string(&messages).map_or(0, |m| m.len());
        let conversation = tokens(message_bytes);
        let total = instructions + environment + memory + tools + conversation;
        let model = &self.journal.record.model;
        let window = self.env.catalog.info(model).map(|i| i.context_window);
        let mut out = match window {
            Some(w) => format!(
                "context: about {} of {} tokens ({:.0}%)",
                shown(total),
                shown(w),
                100.0 * total as f64 / w.max(1) as f64
            ),
            None => format!("context: about {} tokens", shown(total)),
        };
        if self.history.last_context_tokens > 0 {
            out.push_str(&format!(
                "; the last request measured {}",
                shown(self.history.last_context_tokens)
            ));
        }
        let rows = [
            ("system prompt", instructions),
            ("environment and git", environment),
            ("memory files (CLAUDE.md)", memory),
            (&*format!("tools ({})", definitions.len()), tools),
            (
                &*format!("conversation ({} messages)", messages.len()),
                conversation,
            ),
        ];
        for (part, n) in rows {
            out.push_str(&format!("\n  {part:<28} {:>7}", shown(n)));
        }
        if let Some(w) = window {
            out.push_str(&format!(
                "\n  {:<28} {:>7}",
                "free",
                shown(w.saturating_sub(total))
            ));
        }
        out
    }

    fn cost_text(&self) -> String {
        let model = &self.journal.record.model;
        let u = self.ledger.usage;
        let cost = match self.ledger.cost_usd {
            Some(c) => format!("${c:.4}"),
            None if u == TokenUsage::default() => "$0.0000".into(),
            None => "unknown (a model without a price was used)".into(),
        };
        let all = u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens;
        // What the cache reads would have cost as plain input, at this model's prices.
        let saving = self
            .env
            .catalog
            .info(model)
            .and_then(|i| i.price)
            .map(|p| {
                let saved =
                    u.cache_read_input_tokens as f64 * (p.input - p.cache_read) / 1_000_000.0;
                format!(
                    ", saving about ${saved:.4} at {}'s prices",
                    self.env.catalog.resolve(model)
                )
            })
            .unwrap_or_default();
        let share = (u.cache_read_input_tokens * 100)
            .checked_div(all)
            .unwrap_or(0);
        format!(
            "session cost {cost}; tokens: {} input, {} output, {} cache writes, {} cache reads; the cache served {share}% of input{saving}",
            u.input_tokens,
            u.output_tokens,
            u.cache_creation_input_tokens,
            u.cache_read_input_tokens
        )
    }

    /// `# note`: appends to the project's memory file.
    fn remember(&mut self, turn_id: TurnId, note: &str) {
        let cwd = std::path::PathBuf::from(&self.journal.record.cwd);
        let file = crate::context::project_memory(&self.env.data_dir, &cwd);
        match crate::context::remember(&file, note) {
            Ok(()) => {
                self.say(&turn_id, format!("noted in {}", file.display()));
                self.finish_command(turn_id, None)
            }
            Err(e) => {
                let message = format!("could not write {}: {e}", file.display());
                self.emit_in(
                    EventKind::Error {
                        code: "memory".into(),
                        message: message.clone(),
                    },
                    Some(turn_id.clone()),
                );
                let error = TurnError {
                    code: "memory".into(),
                    message,
                    retryable: true,
                };
                self.finish_command(turn_id, Some(error))
            }
        }
    }
}

/// How long a `!command` may run.
const SHELL_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);
/// Bytes of each stream a `!command` keeps from its start, and again from its end; the middle
/// of a longer stream is counted, not held.
const SHELL_KEEP: usize = 15_000;
/// How long what a `!command` printed is still read once bash has ended (a process it left in
/// the background may hold its output open; it is killed then).
const SHELL_DRAIN: std::time::Duration = std::time::Duration::from_millis(300);

/// Kills a process group when dropped: a `!command` and everything it started end with its turn,
/// its cancel, its time limit, or the daemon's shutdown.
struct Group(Option<nix::unistd::Pid>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// What a `!command` ran to.
pub(super) struct ShellRun {
    /// Its `shell_command` event.
    pub event: EventKind,
    /// Whether a cancel stopped it.
    pub cancelled: bool,
}

/// Runs `command` with bash in `cwd` (the daemon's environment less its credentials) in a
/// process group of its own, until it ends, `cancel` fires or [`SHELL_LIMIT`] passes; reads its
/// output as it comes, keeping the first and last [`SHELL_KEEP`] bytes of each stream.
async fn run_shell(
    command: String,
    cwd: &std::path::Path,
    cancel: &tokio_util::sync::CancellationToken,
) -> ShellRun {
    let mut child = tokio::process::Command::new("bash");
    child
        .arg("-c")
        .arg(&command)
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    crate::child_env::scrub(&mut child);
    let event = |stdout: String, stderr: String, exit_code: Option<i32>| EventKind::ShellCommand {
        command: command.clone(),
        stdout,
        stderr,
        exit_code,
    };
    let mut child = match child.spawn() {
        Ok(c) => c,
        Err(e) => {
            return ShellRun {
                event: event(String::new(), format!("bash could not start: {e}"), None),
                cancelled: false,
            };
        }
    };
    let group = Group(
        child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(nix::unistd::Pid::from_raw),
    );
    let out = child.stdout.take().map(|p| tokio::spawn(read_kept(p)));
    let err = child.stderr.take().map(|p| tokio::spawn(read_kept(p)));
    let mut cancelled = false;
    let mut note = None;
    let exit_code = tokio::select! {
        status = child.wait() => status.ok().and_then(|s| s.code()),
        () = cancel.cancelled() => {
            cancelled = true;
            note = Some("(cancelled)".to_owned());
            None
        }
        () = tokio::time::sleep(SHELL_LIMIT) => {
            note = Some(format!("(killed after {} minutes)", SHELL_LIMIT.as_secs() / 60));
            None
        }
    };
    // What it printed up to now, then the group goes (a background process with it).
    let collect = |task: Option<tokio::task::JoinHandle<String>>| async move {
        match task {
            Some(mut task) => match tokio::time::timeout(SHELL_DRAIN, &mut task).await {
                Ok(Ok(text)) => text,
                _ => {
                    task.abort();
                    String::new()
                }
            },
            None => String::new(),
        }
    };
    drop(group);
    let _ = child.kill().await;
    let stdout = collect(out).await;
    let mut stderr = collect(err).await;
    if let Some(note) = note {
        if !stderr.is_empty() && !stderr.ends_with('\n') {
            stderr.push('\n');
        }
        stderr.push_str(&note);
    }
    ShellRun {
        event: event(stdout, stderr, exit_code),
        cancelled,
    }
}

/// Reads a stream to its end, keeping its first and last [`SHELL_KEEP`] bytes and counting
/// what lies between.
async fn read_kept(mut pipe: impl tokio::io::AsyncRead + Unpin) -> String {
    use tokio::io::AsyncReadExt;
    let mut head: Vec<u8> = Vec::new();
    let mut tail: std::collections::VecDeque<u8> = std::collections::VecDeque::new();
    let mut dropped = 0usize;
    let mut buf = [0u8; 8192];
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut piece = &buf[..n];
        if head.len() < SHELL_KEEP {
            let take = piece.len().min(SHELL_KEEP - head.len());
            head.extend_from_slice(&piece[..take]);
            piece = &piece[take..];
        }
        tail.extend(piece);
        while tail.len() > SHELL_KEEP {
            tail.pop_front();
            dropped += 1;
        }
    }
    let mut text = String::from_utf8_lossy(&head).into_owned();
    if dropped > 0 {
        text.push_str(&format!("\n… ({dropped} bytes left out) …\n"));
    }
    let (a, b) = tail.as_slices();
    text.push_str(&String::from_utf8_lossy(&[a, b].concat()));
    text
}
