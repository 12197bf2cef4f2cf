//! Launching a turn: the task that runs it (context settled, system prompt built, the loop run
//! on one `TurnContext`), panics caught and turned into an `error` end, and `ActorSink`, the
//! outlet through which the task's events and permission checks reach the session's actor.
//!
//! Invariant: the task never touches session state; everything it does reaches the actor as a
//! command, in order, and its end is always a `TurnFinished`.

use super::actor::{Command, SessionActor};
use crate::agent::{Call, PermissionAsk, SinkError, Turn, TurnOutcome, TurnSink, Verdict};
use futures::FutureExt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use tether_proto::{EventKind, SessionStatus, TokenUsage, TurnError, TurnId, TurnOptions};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// What a launched turn does.
pub(super) enum TurnJob {
    /// A model turn.
    Run,
    /// `/compact [instructions]`.
    Compact(Option<String>),
    /// Goes on with these tool calls of a turn an earlier daemon left waiting for permission.
    Resume(Vec<Call>),
}

/// Everything [`SessionActor::launch`] needs besides the turn id.
pub(super) struct Launch {
    pub model: String,
    pub tools: crate::tools::Tools,
    pub hooks: Arc<crate::hooks::Hooks>,
    pub job: TurnJob,
    pub cancel: CancellationToken,
    /// The user's prompt text, recorded on the turn span when prompts may be logged.
    pub prompt: Option<String>,
    pub options: TurnOptions,
    /// Started by a person's client (not a script): pauses are likely, so a long-lived cache
    /// pays.
    pub interactive: bool,
}

/// The turn's outlet into its session actor.
struct ActorSink {
    tx: mpsc::UnboundedSender<Command>,
    turn_id: TurnId,
}

impl TurnSink for ActorSink {
    fn authorize(
        &self,
        ask: PermissionAsk,
    ) -> Pin<Box<dyn Future<Output = Result<Verdict, SinkError>> + Send + '_>> {
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            self.tx
                .send(Command::Authorize {
                    turn_id: self.turn_id.clone(),
                    ask,
                    reply,
                })
                .map_err(|_| SinkError::Stopped)?;
            answer.await.map_err(|_| SinkError::Stopped)?
        })
    }

    fn send(&self, event: EventKind) {
        let _ = self.tx.send(Command::TurnEvent {
            turn_id: self.turn_id.clone(),
            event,
            ack: None,
        });
    }

    fn commit(
        &self,
        event: EventKind,
    ) -> Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send + '_>> {
        Box::pin(async move {
            let (ack, done) = oneshot::channel();
            self.tx
                .send(Command::TurnEvent {
                    turn_id: self.turn_id.clone(),
                    event,
                    ack: Some(ack),
                })
                .map_err(|_| SinkError::Stopped)?;
            done.await.map_err(|_| SinkError::Stopped)?
        })
    }
}

/// Logs each hook run (`hook_started`, `hook_response`) in the session, in its turn when it
/// runs for one.
#[derive(Debug)]
pub(super) struct ActorWatcher {
    tx: mpsc::WeakUnboundedSender<Command>,
    turn_id: Option<TurnId>,
}

impl crate::hooks::Watcher for ActorWatcher {
    fn tell(&self, event: EventKind) {
        if let Some(tx) = self.tx.upgrade() {
            let _ = tx.send(Command::HookRan {
                turn_id: self.turn_id.clone(),
                event,
            });
        }
    }
}

impl SessionActor {
    /// What logs the runs of hooks that run for `turn` (or for none).
    pub(super) fn hook_watcher(&self, turn: Option<TurnId>) -> Arc<dyn crate::hooks::Watcher> {
        Arc::new(ActorWatcher {
            tx: self.me.clone(),
            turn_id: turn,
        })
    }
}

/// Asks the turn's SDK program through the session: a hook callback (`hook_callback`), a
/// message for one of its in-process MCP servers (`mcp_message`).
#[derive(Debug, Clone)]
pub(super) struct ActorAsker {
    pub tx: mpsc::UnboundedSender<Command>,
    pub turn_id: TurnId,
}

/// What the program answered, or why it did not.
type Answer = Pin<Box<dyn Future<Output = Result<serde_json::Value, String>> + Send + 'static>>;

impl ActorAsker {
    /// Sends the session the command `make` builds around the answer's sender; the answer.
    fn ask_through(
        &self,
        make: impl FnOnce(TurnId, oneshot::Sender<Result<serde_json::Value, String>>) -> Command,
    ) -> Answer {
        let (reply, answer) = oneshot::channel();
        let sent = self.tx.send(make(self.turn_id.clone(), reply));
        Box::pin(async move {
            sent.map_err(|_| "the session stopped".to_owned())?;
            answer
                .await
                .map_err(|_| "the turn ended before it was answered".to_owned())?
        })
    }
}

impl crate::hooks::Asker for ActorAsker {
    fn ask(
        &self,
        id: &str,
        input: &serde_json::Value,
    ) -> Pin<Box<dyn Future<Output = Result<serde_json::Value, String>> + Send + '_>> {
        let (callback_id, input) = (id.to_owned(), input.clone());
        self.ask_through(|turn_id, reply| Command::HookCallback {
            turn_id,
            callback_id,
            input,
            reply,
        })
    }
}

impl crate::mcp::Relay for ActorAsker {
    fn relay(&self, server: &str, message: serde_json::Value) -> Answer {
        let server = server.to_owned();
        self.ask_through(|turn_id, reply| Command::McpRelay {
            turn_id,
            server,
            message,
            reply,
        })
    }
}

/// What a panic said.
pub(super) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

impl SessionActor {
    /// Runs a turn's work in its own task; its events come back through an [`ActorSink`].
    pub(super) fn launch(&mut self, turn_id: TurnId, plan: Launch) {
        let Launch {
            model,
            tools,
            hooks,
            job,
            cancel,
            prompt,
            options,
            interactive,
        } = plan;
        if !self.turns.is_running(&turn_id) {
            // A turn resumed after a restart was never prepared here.
            self.turns.adopt(turn_id.clone(), cancel.clone(), &options);
        }
        let tools = narrow(tools, &options);
        let mut limits = self.env.limits.clone();
        if let Some(n) = options.max_turns {
            limits.max_requests = n;
        }
        if let Some(model) = &options.fallback_model {
            limits.fallback_model = Some(model.clone());
        }
        self.set_status(SessionStatus::Running);
        let llm = match &self.env.llm {
            Ok(llm) => llm.clone(),
            Err(message) => {
                let error = TurnError {
                    code: "config".into(),
                    message: message.clone(),
                    retryable: false,
                };
                return self.finish_command(turn_id, Some(error));
            }
        };
        let Some(tx) = self.me.upgrade() else { return };
        let mut policy = self.env.policy.clone();
        policy.hide_thinking = options.hide_thinking;
        policy.prefix_ttl = self.env.cache_ttl.unwrap_or(if interactive {
            crate::llm::CacheTtl::OneHour
        } else {
            crate::llm::CacheTtl::FiveMinutes
        });
        // The turn's own level, else the session's (`/effort`), else the configured one.
        if let Some(e) = options
            .effort
            .as_deref()
            .or(self.journal.record.effort.as_deref())
            .and_then(crate::llm::Effort::parse)
        {
            policy.effort = Some(e);
        }
        // What the search tools' walks skip, and the sandbox this turn's Bash calls run in.
        self.guard_workspace();
        let budget = crate::agent::Budget::of(
            self.journal.record.budget_usd,
            self.ledger.cost_usd,
            self.env.daily.clone(),
        )
        .map(|meter| {
            let meter = Arc::new(meter);
            self.turns.metered(&turn_id, meter.clone());
            meter
        });
        let record = &self.journal.record;
        let cwd = std::path::PathBuf::from(&record.cwd);
        let span = tracing::info_span!(
            "turn",
            session.id = %record.id,
            turn.id = %turn_id,
            model = %self.env.catalog.resolve(&model),
            job = match &job {
                TurnJob::Run => "run",
                TurnJob::Compact(_) => "compact",
                TurnJob::Resume(_) => "resume",
            },
            prompt = tracing::field::Empty,
            stop_reason = tracing::field::Empty,
            tokens.input = tracing::field::Empty,
            tokens.output = tracing::field::Empty,
            cost_usd = tracing::field::Empty,
        );
        if let Some(p) = prompt.filter(|_| self.env.log_user_prompts) {
            span.record("prompt", p);
        }
        let task = TurnTask {
            // The system prompt is known once the task has settled the context.
            ctx: crate::agent::TurnContext {
                session_id: record.id.0.clone(),
                model,
                system: Vec::new(),
                tools,
                net: Arc::new(crate::tools::Net {
                    llm,
                    catalog: self.env.catalog.clone(),
                    web: self.env.web.clone(),
                    fast_model: self.env.fast_model.clone(),
                }),
                workspace: self.workspace.clone(),
                limits,
                policy,
                hooks,
                permission_mode: record.permission_mode,
                spent_before: self.ledger.spent(),
                transcript: Some(
                    self.env
                        .data_dir
                        .join("transcripts")
                        .join(format!("{}.jsonl", record.id.0)),
                ),
                agent: None,
                prompt_tool: options.permission_prompt_tool.clone(),
                structured: None,
                budget,
                snapshots: self
                    .shadow
                    .clone()
                    .map(|shadow| crate::snapshots::TurnSnapshots {
                        shadow,
                        turn: turn_id.0.clone(),
                        packs: self.journal.store().packs(),
                    }),
            },
            notes: crate::context::project_memory(&self.env.data_dir, &cwd),
            mcp: Mcp {
                asker: ActorAsker {
                    tx: tx.clone(),
                    turn_id: turn_id.clone(),
                },
                servers: self.env.mcp.clone(),
                extra: crate::mcp::Extra {
                    servers: options.mcp_config.clone(),
                    strict: options.strict_mcp_config,
                },
                options: options.clone(),
            },
            cwd,
            structured: options
                .json_schema
                .clone()
                .map(|schema| Arc::new(crate::tools::structured::StructuredOutput::new(schema))),
            system_prompt: options.system_prompt.clone(),
            append_system_prompt: options.append_system_prompt,
            history: self.history.clone(),
            sink: Arc::new(ActorSink {
                tx: tx.clone(),
                turn_id: turn_id.clone(),
            }),
            job,
            cancel,
        };
        self.tasks.spawn(tracing::Instrument::instrument(
            async move {
                let outcome = task.run().await;
                let _ = tx.send(Command::TurnFinished { turn_id, outcome });
            },
            span,
        ));
    }
}

/// The tools a turn's options leave: without those `disallowedTools` names (by any of their
/// names; an entry with a specifier, such as `Bash(rm:*)`, is a deny rule instead), and only
/// `tools` when given.
fn narrow(tools: crate::tools::Tools, options: &TurnOptions) -> crate::tools::Tools {
    let removed: Vec<&String> = options
        .disallowed_tools
        .iter()
        .filter(|d| !d.contains('('))
        .collect();
    let tools = if removed.is_empty() {
        tools
    } else {
        let keep: Vec<String> = tools
            .names()
            .into_iter()
            .filter(|n| !removed.iter().any(|d| crate::tools::names::same(d, n)))
            .map(str::to_owned)
            .collect();
        tools.subset(&keep)
    };
    // `--tools`: only these, by name or alias.
    match &options.tools {
        Some(names) => tools.subset(names),
        None => tools,
    }
}

/// The MCP servers a turn's task asks for its tools.
struct Mcp {
    /// Reaches the SDK program's in-process servers (`"type": "sdk"`).
    asker: ActorAsker,
    servers: Arc<crate::mcp::McpServers>,
    extra: crate::mcp::Extra,
    options: TurnOptions,
}

impl Mcp {
    /// Adds the tools of the project's MCP servers to `tools` and tells the user what is
    /// wrong with them (once per session); waits for servers that are starting unless the
    /// turn is cancelled. The leases it returns keep the servers up until they drop. An SDK
    /// program's in-process servers are connected through the session for this turn alone.
    async fn add_tools(
        mut self,
        session: &str,
        cwd: &std::path::Path,
        tools: &mut crate::tools::Tools,
        sink: &ActorSink,
        cancel: &CancellationToken,
    ) -> (Vec<crate::mcp::Lease>, Vec<Arc<crate::mcp::SdkServer>>) {
        let in_process = self.in_process(session, tools, sink, cancel).await;
        let config = crate::mcp::configuration(cwd, &self.extra);
        if config.servers.is_empty() && config.problems.is_empty() && config.unapproved.is_empty() {
            return (Vec::new(), in_process);
        }
        let found = tokio::select! {
            found = self.servers.for_turn(session, &config, cwd) => found,
            _ = cancel.cancelled() => return (Vec::new(), in_process),
        };
        for message in found.notices {
            sink.send(EventKind::Notice {
                level: tether_proto::NoticeLevel::Warning,
                message,
            });
        }
        if !found.tools.is_empty() {
            // The built-in tools were narrowed at launch; the servers' tools the same way.
            *tools = tools.extend(&narrow(found.tools, &self.options));
        }
        (found.leases, in_process)
    }

    /// Takes the SDK program's in-process servers out of the turn's MCP configuration and
    /// connects them through the session, adding their tools.
    async fn in_process(
        &mut self,
        session: &str,
        tools: &mut crate::tools::Tools,
        sink: &ActorSink,
        cancel: &CancellationToken,
    ) -> Vec<Arc<crate::mcp::SdkServer>> {
        let Some(servers) = self.extra.servers.as_mut().and_then(|s| s.as_object_mut()) else {
            return Vec::new();
        };
        let names: Vec<String> = servers
            .iter()
            .filter(|(_, v)| v["type"] == "sdk")
            .map(|(name, _)| name.clone())
            .collect();
        for name in &names {
            servers.remove(name);
        }
        let mut held = Vec::new();
        for name in names {
            // It becomes part of tool names, as a configured server's name does.
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                sink.send(EventKind::Notice {
                    level: tether_proto::NoticeLevel::Warning,
                    message: format!(
                        "the SDK program's MCP server {name:?} is left out: a server name may hold only letters, digits, '_' and '-'"
                    ),
                });
                continue;
            }
            let relay: Arc<dyn crate::mcp::Relay> = Arc::new(self.asker.clone());
            let limits = self.servers.limits().clone();
            let connected = tokio::select! {
                c = crate::mcp::connect_sdk(&name, relay, limits) => c,
                _ = cancel.cancelled() => return held,
            };
            match connected {
                Ok((server, found, dropped)) => {
                    *tools = tools.extend(&narrow(found, &self.options));
                    for d in dropped {
                        sink.send(EventKind::Notice {
                            level: tether_proto::NoticeLevel::Warning,
                            message: format!("MCP server {name}: {d}"),
                        });
                    }
                    held.push(server);
                }
                Err(e) => {
                    tracing::info!(session, server = %name, "the SDK program's MCP server failed: {e}");
                    sink.send(EventKind::Notice {
                        level: tether_proto::NoticeLevel::Warning,
                        message: format!("the SDK program's MCP server {name} failed: {e}"),
                    });
                }
            }
        }
        held
    }
}

/// What a launched turn's task owns.
struct TurnTask {
    /// The turn's context, all but its system prompt.
    ctx: crate::agent::TurnContext,
    cwd: std::path::PathBuf,
    /// The project's notes file (part of the context).
    notes: std::path::PathBuf,
    mcp: Mcp,
    /// The StructuredOutput tool, when the turn wants a structured answer.
    structured: Option<Arc<crate::tools::structured::StructuredOutput>>,
    system_prompt: Option<String>,
    append_system_prompt: Option<String>,
    history: crate::agent::History,
    sink: Arc<ActorSink>,
    job: TurnJob,
    cancel: CancellationToken,
}

impl TurnTask {
    /// Runs the turn to its outcome; a panic becomes an `error` outcome, never a lost turn.
    async fn run(self) -> TurnOutcome {
        let outcome = match AssertUnwindSafe(self.work()).catch_unwind().await {
            Ok(outcome) => outcome,
            Err(panic) => {
                let what = panic_text(&*panic);
                tracing::error!("a turn panicked: {what}");
                TurnOutcome {
                    stop_reason: tether_proto::StopReason::Error,
                    usage: TokenUsage::default(),
                    cost_usd: None,
                    error: Some(TurnError {
                        code: "internal".into(),
                        message: format!("the turn crashed: {what}"),
                        retryable: false,
                    }),
                    api: Default::default(),
                }
            }
        };
        let span = tracing::Span::current();
        span.record("stop_reason", outcome.stop_reason.as_str());
        span.record("tokens.input", outcome.usage.input_tokens);
        span.record("tokens.output", outcome.usage.output_tokens);
        if let Some(c) = outcome.cost_usd {
            span.record("cost_usd", c);
        }
        outcome
    }

    async fn work(self) -> TurnOutcome {
        let Self {
            mut ctx,
            cwd,
            notes,
            mcp,
            structured,
            system_prompt,
            append_system_prompt,
            mut history,
            sink,
            job,
            cancel,
        } = self;
        // The prompt prefix at the session's first turn; what changed, at a later fresh one.
        let tail = matches!(job, TurnJob::Run);
        if let Err(e) = crate::agent::settle_context(&mut history, &*sink, &cwd, &notes, tail).await
        {
            tracing::error!("could not log the session's context: {e}");
        }
        // Held until the turn ends, so its servers are not stopped as idle under it.
        let _leases = if matches!(job, TurnJob::Run | TurnJob::Resume(_)) {
            let session = ctx.session_id.clone();
            mcp.add_tools(&session, &cwd, &mut ctx.tools, &sink, &cancel)
                .await
        } else {
            (Vec::new(), Vec::new())
        };
        ctx.system = history
            .prefix
            .as_ref()
            .map(|p| p.blocks())
            .unwrap_or_default();
        // `--system-prompt`: other instructions, before the same context.
        if let Some(own) = system_prompt.filter(|s| !s.trim().is_empty())
            && let Some(first) = ctx.system.first_mut()
        {
            *first = crate::llm::SystemBlock::text(own);
        }
        if let Some(extra) = append_system_prompt.filter(|e| !e.trim().is_empty()) {
            ctx.system.push(crate::llm::SystemBlock::text(extra));
        }
        if let Some(tool) = structured {
            let dynamic: Arc<dyn crate::tools::Tool> = tool.clone();
            ctx.tools = ctx.tools.extend(&crate::tools::Tools::new(vec![dynamic]));
            ctx.system.push(crate::llm::SystemBlock::text(
                crate::tools::structured::StructuredOutput::instruction(),
            ));
            ctx.structured = Some(tool);
        }
        let ctx = Arc::new(ctx);
        let subagents = crate::agent::Subagents {
            ctx: Arc::new(ctx.for_child()),
            environment: history.prefix.as_ref().map(|p| p.environment.clone()),
            authorizer: sink.clone(),
        };
        let turn = Turn {
            ctx,
            cancel,
            subagents: Some(Arc::new(subagents)),
        };
        match job {
            TurnJob::Run => turn.run(history, sink).await,
            TurnJob::Compact(instructions) => turn.compact_only(history, sink, instructions).await,
            TurnJob::Resume(calls) => turn.resume(history, calls, sink).await,
        }
    }
}
