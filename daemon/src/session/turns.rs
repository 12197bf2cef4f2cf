//! Turn scheduling: the running turn and the queue behind it ([`Turns`]), and the actor's turn
//! commands — start (or queue), prepare, launch, finish, cancel.
//!
//! A turn goes through two tasks the actor owns, never blocking its loop: the preparation
//! (input, prompt hooks: `agent::prepare`), whose result comes back as `Command::Prepared`, then
//! the turn itself (context, model, tools), whose events come back through an [`ActorSink`] and
//! whose end is `Command::TurnFinished`. From `turn/start` to its end the turn is `running`, so
//! it can be cancelled, and a repeated `clientTurnId` finds it, at every step.

use super::SessionError;
use super::actor::{Command, SessionActor};
use super::launch::{Launch, TurnJob, panic_text};
use crate::agent::{Prepared, SlashCommand, TurnOutcome};
use futures::FutureExt;
use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tether_proto::{
    BusyMode, ClientRef, EventKind, InputItem, SessionStatus, TurnError, TurnId, TurnOptions,
    TurnStarted,
};
use tokio_util::sync::CancellationToken;

/// What `turn/start` (or `session/compact`) asks for.
pub struct TurnRequest {
    /// The user's input.
    pub input: Vec<InputItem>,
    /// The client's idempotency key.
    pub client_turn_id: Option<String>,
    /// What to do when a turn is running.
    pub mode: BusyMode,
    /// Per-turn options.
    pub options: TurnOptions,
    /// Who asked.
    pub by: ClientRef,
    /// The command this is, when the caller knows it (the input is then only what is logged).
    pub command: Option<SlashCommand>,
}

/// A turn waiting for its start, or being prepared.
pub(super) struct Queued {
    turn_id: TurnId,
    request: TurnRequest,
}

/// The turn in progress.
pub(super) struct Running {
    pub turn_id: TurnId,
    pub cancel: CancellationToken,
    /// Permission rules that allow without asking during this turn only (`allowedTools`).
    pub allow: Vec<String>,
    /// Permission rules that refuse during this turn only (`disallowedTools`).
    pub deny: Vec<String>,
    /// Directories this turn may use besides the session's (`addDirs`).
    pub dirs: Vec<std::path::PathBuf>,
    /// The turn's own settings (`--settings`).
    pub settings: Option<serde_json::Value>,
    /// The hook callbacks of the Agent SDK program that started it.
    pub hook_callbacks: Option<serde_json::Value>,
    /// Its budget meter, once launched with a cap: a change of budget reaches it.
    pub budget: Option<Arc<crate::agent::Budget>>,
    /// Its idempotency key (its `turn_started` may not be logged yet).
    client_turn_id: Option<String>,
    /// Who cancelled it, for its `turn_ended`.
    pub cancelled_by: Option<ClientRef>,
}

impl Running {
    /// The running turn `turn_id` with what its options say.
    fn of(
        turn_id: TurnId,
        cancel: CancellationToken,
        options: &tether_proto::TurnOptions,
        client_turn_id: Option<String>,
    ) -> Self {
        Self {
            turn_id,
            cancel,
            allow: options.allowed_tools.clone(),
            deny: options.disallowed_tools.clone(),
            dirs: options
                .add_dirs
                .iter()
                .map(std::path::PathBuf::from)
                .collect(),
            settings: options.settings.clone(),
            hook_callbacks: options.hook_callbacks.clone(),
            budget: None,
            client_turn_id,
            cancelled_by: None,
        }
    }
}

/// The running turn and the queue behind it.
#[derive(Default)]
pub(super) struct Turns {
    running: Option<Running>,
    queue: VecDeque<Queued>,
    /// A rewind is putting files back: prompts wait for it as for a running turn.
    rewinding: bool,
}

impl Turns {
    /// The turn a client's idempotency key already names, while it runs or waits.
    fn started(&self, client_turn_id: &str) -> Option<TurnStarted> {
        let key = Some(client_turn_id);
        if let Some(r) = self
            .running
            .as_ref()
            .filter(|r| r.client_turn_id.as_deref() == key)
        {
            return Some(TurnStarted {
                turn_id: r.turn_id.clone(),
                queued: false,
            });
        }
        self.queue
            .iter()
            .find(|q| q.request.client_turn_id.as_deref() == key)
            .map(|q| TurnStarted {
                turn_id: q.turn_id.clone(),
                queued: true,
            })
    }

    /// Whether no turn runs or waits (and no rewind is under way).
    pub fn is_idle(&self) -> bool {
        self.running.is_none() && self.queue.is_empty() && !self.rewinding
    }

    /// Whether a rewind is under way.
    pub fn is_rewinding(&self) -> bool {
        self.rewinding
    }

    /// Marks a rewind under way (prompts queue behind it) or done.
    pub fn set_rewinding(&mut self, rewinding: bool) {
        self.rewinding = rewinding;
    }

    /// The running turn's id.
    pub fn running_id(&self) -> Option<&TurnId> {
        self.running.as_ref().map(|r| &r.turn_id)
    }

    /// The running turn, when it is `turn_id`.
    pub fn running(&self, turn_id: &TurnId) -> Option<&Running> {
        self.running.as_ref().filter(|r| &r.turn_id == turn_id)
    }

    /// Gives the running turn `turn_id` its budget meter.
    pub fn metered(&mut self, turn_id: &TurnId, budget: Arc<crate::agent::Budget>) {
        if let Some(running) = self.running.as_mut().filter(|r| &r.turn_id == turn_id) {
            running.budget = Some(budget);
        }
    }

    /// The new budget reaches the running turn's meter (`None`: no cap).
    pub fn set_budget(&self, budget: Option<f64>) {
        if let Some(meter) = self.running.as_ref().and_then(|r| r.budget.as_ref()) {
            meter.set_cap(budget);
        }
    }

    /// Whether `turn_id` is the running turn.
    pub fn is_running(&self, turn_id: &TurnId) -> bool {
        self.running_id() == Some(turn_id)
    }

    /// The running turn's cancellation.
    pub fn running_cancel(&self) -> Option<CancellationToken> {
        self.running.as_ref().map(|r| r.cancel.clone())
    }

    /// More allow rules for the running turn `turn_id` (a skill's `allowed-tools`).
    pub fn allow_also(&mut self, turn_id: &TurnId, rules: Vec<String>) {
        if let Some(running) = self.running.as_mut().filter(|r| &r.turn_id == turn_id) {
            running.allow.extend(rules);
        }
    }

    /// The running turn's own allow rules (`allowedTools`).
    pub fn allow(&self) -> &[String] {
        self.running.as_ref().map_or(&[], |r| &r.allow)
    }

    /// The running turn's own deny rules (`disallowedTools`).
    pub fn deny(&self) -> &[String] {
        self.running.as_ref().map_or(&[], |r| &r.deny)
    }

    /// The running turn's own settings (`settings`).
    pub fn settings(&self) -> Option<&serde_json::Value> {
        self.running.as_ref().and_then(|r| r.settings.as_ref())
    }

    /// The running turn's own extra directories (`addDirs`).
    pub fn dirs(&self) -> &[std::path::PathBuf] {
        self.running.as_ref().map_or(&[], |r| &r.dirs)
    }

    /// Forgets the running turn.
    pub fn take_running(&mut self) -> Option<Running> {
        self.running.take()
    }

    /// Drops every waiting turn; returns how many there were.
    pub fn clear_queue(&mut self) -> usize {
        std::mem::take(&mut self.queue).len()
    }

    /// Makes `turn_id` (a turn resumed after a restart) the running turn.
    pub fn adopt(
        &mut self,
        turn_id: TurnId,
        cancel: CancellationToken,
        options: &tether_proto::TurnOptions,
    ) {
        self.running = Some(Running::of(turn_id, cancel, options, None));
    }

    /// Makes `queued` the running turn.
    fn run(&mut self, queued: &Queued) -> CancellationToken {
        let cancel = CancellationToken::new();
        self.running = Some(Running::of(
            queued.turn_id.clone(),
            cancel.clone(),
            &queued.request.options,
            queued.request.client_turn_id.clone(),
        ));
        cancel
    }
}

/// How a turn's preparation ended.
pub enum Preparation {
    /// Ready for the model or a command.
    Ready(Box<Prepared>),
    /// Cancelled while a hook ran.
    Cancelled,
    /// The preparation crashed, with what it said.
    Failed(String),
}

pub(super) fn text_of(input: &[InputItem]) -> String {
    input
        .iter()
        .filter_map(|i| match i {
            InputItem::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether a turn's input is a command the daemon answers without the model (`/budget`,
/// `/cost` …, a `# note`): what a session paused at its budget still runs. `/compact` and
/// custom commands are model turns, and wait.
fn looks_like_command(input: &[tether_proto::InputItem]) -> bool {
    let Some(text) = input.iter().find_map(|i| match i {
        tether_proto::InputItem::Text { text } => Some(text.trim()),
        _ => None,
    }) else {
        return false;
    };
    if let Some(note) = text.strip_prefix('#') {
        return !note.starts_with('#') && !note.trim().is_empty();
    }
    let name = text
        .strip_prefix('/')
        .and_then(|body| body.split_whitespace().next())
        .unwrap_or_default();
    name != "compact" && crate::agent::BUILTIN_COMMANDS.contains(&name)
}

impl SessionActor {
    /// `turn/start`: starts the turn, or queues it behind the running one.
    pub(super) fn request_turn(
        &mut self,
        request: TurnRequest,
    ) -> Result<TurnStarted, SessionError> {
        if let Some(c) = &request.client_turn_id {
            if let Some(turn_id) = self.ledger.turn_for(c) {
                return Ok(TurnStarted {
                    turn_id: turn_id.clone(),
                    queued: false,
                });
            }
            if let Some(started) = self.turns.started(c) {
                return Ok(started);
            }
        }
        if self.presence.observer_only(&request.by) {
            return Err(SessionError::NotController);
        }
        self.journal.writable()?;
        // At its budget the session takes commands (`/budget` among them), not prompts.
        if self.ledger.budget_reached && !looks_like_command(&request.input) {
            return Err(SessionError::BudgetReached {
                budget: self.journal.record.budget_usd.unwrap_or(0.0),
                spent: self.ledger.cost_usd.unwrap_or(0.0),
            });
        }
        if request.by.client_id.0 != 0 {
            self.wakeups = 0;
        }
        let turn_id = TurnId(uuid::Uuid::new_v4().to_string());
        let busy = self.turns.running.is_some() || self.turns.rewinding;
        if busy && request.mode == BusyMode::Reject {
            return Err(SessionError::Busy);
        }
        let queued = Queued {
            turn_id: turn_id.clone(),
            request,
        };
        if busy {
            self.turns.queue.push_back(queued);
        } else {
            self.start_turn(queued);
        }
        Ok(TurnStarted {
            turn_id,
            queued: busy,
        })
    }

    /// Starts the next queued turns while none runs; at the budget, only the commands among
    /// them (the prompts wait for the budget to be raised).
    pub(super) fn start_next(&mut self) {
        while self.turns.running.is_none() && !self.turns.rewinding {
            let next = if self.ledger.budget_reached {
                let command = self
                    .turns
                    .queue
                    .iter()
                    .position(|q| looks_like_command(&q.request.input));
                command.and_then(|i| self.turns.queue.remove(i))
            } else {
                self.turns.queue.pop_front()
            };
            let Some(next) = next else { return };
            self.start_turn(next);
        }
    }

    /// Makes `queued` the running turn and prepares it in its own task.
    fn start_turn(&mut self, queued: Queued) {
        let cancel = self.turns.run(&queued);
        let Some(tx) = self.me.upgrade() else { return };
        let record = &self.journal.record;
        let request = crate::agent::PrepareRequest {
            session_id: record.id.0.clone(),
            cwd: std::path::PathBuf::from(&record.cwd),
            home: std::env::var_os("HOME").map(std::path::PathBuf::from),
            config_hooks: self.env.config_hooks.clone(),
            settings: queued.request.options.settings.clone(),
            input: queued.request.input.clone(),
            command: queued.request.command.clone(),
            session_start: !self.session_started,
            permission_mode: record.permission_mode,
            shell: queued.request.by.kind == tether_proto::ClientKind::Tui,
            callbacks: queued.request.options.hook_callbacks.clone().map(|v| {
                let asker = super::launch::ActorAsker {
                    tx: tx.clone(),
                    turn_id: queued.turn_id.clone(),
                };
                (v, Arc::new(asker) as Arc<dyn crate::hooks::Asker>)
            }),
            watcher: self.hook_watcher(Some(queued.turn_id.clone())),
        };
        self.tasks.spawn(async move {
            let work = crate::agent::prepare(request, &cancel);
            let preparation = match AssertUnwindSafe(work).catch_unwind().await {
                Ok(Some(prepared)) => Preparation::Ready(Box::new(prepared)),
                Ok(None) => Preparation::Cancelled,
                Err(panic) => Preparation::Failed(panic_text(&*panic)),
            };
            let _ = tx.send(Command::Prepared {
                queued: Box::new(queued),
                preparation,
            });
        });
    }

    /// The turn's input is ready: logs `turn_started`, then runs the command or launches the
    /// model turn.
    pub(super) fn prepared(&mut self, queued: Queued, preparation: Preparation) {
        let Queued {
            turn_id,
            mut request,
        } = queued;
        if !self.turns.is_running(&turn_id) {
            // Cancelled while being prepared, and ended since (a delete or shutdown).
            return;
        }
        let (prepared, failure) = match preparation {
            Preparation::Ready(p) => (Some(*p), None),
            Preparation::Cancelled => (None, None),
            Preparation::Failed(why) => (None, Some(why)),
        };
        if let Some(p) = &prepared {
            self.session_started |= p.session_started;
            for problem in p.hooks.problems.clone() {
                self.report(problem);
            }
        }
        let input = request.input.clone();
        let content = prepared
            .as_ref()
            .map(|p| p.content.clone())
            .unwrap_or_default();
        let started = EventKind::TurnStarted {
            input,
            content,
            by: Some(request.by.clone()),
            client_turn_id: request.client_turn_id.clone(),
        };
        if let Err(e) = self.try_emit(started, Some(turn_id.clone())) {
            tracing::error!(session = %self.journal.record.id, "could not log turn_started: {e}");
            self.turns.running = None;
            return self.start_next();
        }
        let Some(mut prepared) = prepared else {
            let outcome = match failure {
                Some(why) => {
                    tracing::error!("a turn's preparation panicked: {why}");
                    return self.refuse(
                        turn_id,
                        "internal",
                        format!("the turn's input could not be prepared: {why}"),
                    );
                }
                None => TurnOutcome::without_model(tether_proto::StopReason::Cancelled, None),
            };
            return self.end_turn(turn_id, outcome);
        };
        for event in std::mem::take(&mut prepared.hook_events) {
            self.emit_in(event, Some(turn_id.clone()));
        }
        for notice in &prepared.notices {
            self.emit_in(
                EventKind::Notice {
                    level: tether_proto::NoticeLevel::Warning,
                    message: notice.clone(),
                },
                Some(turn_id.clone()),
            );
        }
        if let Some(reason) = &prepared.blocked {
            let message = format!("the prompt was blocked by a UserPromptSubmit hook: {reason}");
            return self.refuse(turn_id, "prompt_blocked", message);
        }
        // `opusplan`: opus for a turn that starts planning, sonnet otherwise.
        let planning = self.journal.record.permission_mode == tether_proto::PermissionMode::Plan;
        let mut model = self
            .env
            .catalog
            .for_mode(&self.journal.record.model, planning)
            .to_owned();
        // The Task tool offers the project's and the user's agent types, and the turn's own.
        let agents = prepared.agents.with_flag(request.options.agents.as_ref());
        for problem in agents.problems.clone() {
            self.report(problem);
        }
        // `--agent`: the main conversation runs as that agent type (its prompt, tools, model).
        let main_agent = match request.options.agent.as_deref() {
            Some(name) => match agents.get(name) {
                Some(def) => Some(def.clone()),
                None => {
                    let known: Vec<&str> = agents.agents.iter().map(|a| a.name.as_str()).collect();
                    let message = format!(
                        "there is no agent {name:?}; the agents are {}",
                        known.join(", ")
                    );
                    return self.refuse(turn_id, "unknown_agent", message);
                }
            },
            None => None,
        };
        let mut tools = self
            .env
            .tools
            .replace(Arc::new(crate::tools::Task::new(agents)));
        // The Skill tool offers the project's and the user's skills (none: no Skill tool).
        for problem in prepared.skills.problems.clone() {
            self.report(problem);
        }
        let skill = crate::tools::Skill::new(prepared.skills);
        tools = if skill.offers_any() {
            tools.replace(Arc::new(skill))
        } else {
            tools.without("Skill")
        };
        if let Some(def) = &main_agent {
            if let Some(names) = &def.tools {
                tools = tools.subset(names);
            }
            if let Some(m) = &def.model {
                model = m.clone();
            }
            if request.options.system_prompt.is_none() {
                request.options.system_prompt = def.prompt.clone();
            }
        }
        let job = match prepared.command {
            None => {
                self.name_session(&request.input);
                TurnJob::Run
            }
            Some(SlashCommand::Compact(instructions)) => TurnJob::Compact(instructions),
            Some(SlashCommand::Custom {
                model: m,
                allowed_tools,
                allow,
                ..
            }) => {
                if let Some(m) = m {
                    model = m;
                }
                self.turns.allow_also(&turn_id, allow);
                if let Some(names) = allowed_tools {
                    tools = tools.subset(&names);
                }
                TurnJob::Run
            }
            Some(command) => {
                return self.run_command(turn_id, request.by, command);
            }
        };
        let effort = request
            .options
            .effort
            .as_deref()
            .filter(|e| !e.trim().is_empty());
        let checked = self.env.catalog.check(&model).and_then(|()| match effort {
            Some(e) => self.env.catalog.check_effort(&model, e).map(|_| ()),
            None => Ok(()),
        });
        if let Err(e) = checked {
            return self.refuse(turn_id, e.code(), e.to_string());
        }
        let cancel = self.turns.running_cancel().unwrap_or_default();
        let plan = Launch {
            model,
            tools,
            hooks: prepared.hooks,
            job,
            cancel,
            prompt: Some(text_of(&request.input)),
            interactive: request.by.kind != tether_proto::ClientKind::Script,
            options: request.options,
        };
        self.launch(turn_id, plan);
    }

    /// The turn's task ended.
    pub(super) fn turn_finished(&mut self, turn_id: TurnId, outcome: TurnOutcome) {
        if self.turns.is_running(&turn_id) {
            self.end_turn(turn_id, outcome);
        }
    }

    /// `turn/cancel`: cancels the running turn (its task ends it) and its permission requests;
    /// `false` when none runs.
    pub(super) fn cancel_turn(&mut self, by: Option<ClientRef>) -> bool {
        let Some(running) = &mut self.turns.running else {
            return false;
        };
        if running.cancelled_by.is_none() {
            running.cancelled_by = by;
        }
        let turn_id = running.turn_id.clone();
        running.cancel.cancel();
        self.cancel_waiting(&turn_id);
        true
    }

    /// Logs a turn's end (it is no longer running) and starts the next queued one.
    pub(super) fn end_turn(&mut self, turn_id: TurnId, outcome: TurnOutcome) {
        let cancelled_by = match self.turns.is_running(&turn_id) {
            true => self.turns.take_running().and_then(|r| r.cancelled_by),
            false => None,
        }
        .filter(|_| outcome.stop_reason == tether_proto::StopReason::Cancelled);
        self.broker.drop_callbacks(&turn_id);
        crate::telemetry::turn_ended(
            &self.env.catalog.resolve(&self.journal.record.model),
            &outcome.usage,
            outcome.cost_usd,
        );
        let event = EventKind::TurnEnded {
            stop_reason: outcome.stop_reason,
            usage: outcome.usage,
            cost_usd: outcome.cost_usd,
            error: outcome.error,
            api_ms: (!outcome.api.is_zero()).then_some(outcome.api.as_millis() as u64),
            cancelled_by,
        };
        self.emit_in(event, Some(turn_id));
        self.prune_due = true;
        self.start_next();
        // Prompts held at the budget do not keep the session busy.
        if self.turns.running_id().is_none() && (self.turns.is_idle() || self.ledger.budget_reached)
        {
            self.set_status(SessionStatus::Idle);
        }
    }

    /// Ends a turn the daemon refused before any model call: an `error` event, then the end.
    pub(super) fn refuse(&mut self, turn_id: TurnId, code: &str, message: String) {
        self.emit_in(
            EventKind::Error {
                code: code.into(),
                message: message.clone(),
            },
            Some(turn_id.clone()),
        );
        let error = TurnError {
            code: code.into(),
            message,
            retryable: false,
        };
        self.finish_command(turn_id, Some(error))
    }

    /// Ends a turn that was handled without the model (a command).
    pub(super) fn finish_command(&mut self, turn_id: TurnId, error: Option<TurnError>) {
        let stop_reason = match error {
            Some(_) => tether_proto::StopReason::Error,
            None => tether_proto::StopReason::Command,
        };
        let outcome = TurnOutcome::without_model(stop_reason, error);
        self.end_turn(turn_id, outcome);
    }

    /// Names an untitled session after its first prompt, in the background.
    fn name_session(&mut self, input: &[InputItem]) {
        if self.journal.record.title.is_some() || self.titling {
            return;
        }
        let prompt = text_of(input);
        if prompt.trim().is_empty() {
            return;
        }
        let Some(tx) = self.me.upgrade() else { return };
        self.titling = true;
        let env = self.env.clone();
        let session = self.journal.record.id.clone();
        self.tasks.spawn(async move {
            let llm = env.llm.as_deref().map_err(String::as_str);
            let title = match crate::agent::generate_title(
                llm,
                &env.catalog,
                &env.fast_model,
                &prompt,
            )
            .await
            {
                Ok(t) => t,
                Err((fallback, why)) => {
                    tracing::info!(%session, "titled from the prompt; the model was not asked or failed: {why}");
                    fallback
                }
            };
            let _ = tx.send(Command::Titled { title });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_proto::{ClientKind, ConnectionId};

    fn queued(id: &str, key: Option<&str>) -> Queued {
        Queued {
            turn_id: TurnId(id.into()),
            request: TurnRequest {
                input: Vec::new(),
                client_turn_id: key.map(str::to_owned),
                mode: BusyMode::Queue,
                options: TurnOptions::default(),
                by: ClientRef {
                    client_id: ConnectionId(1),
                    kind: ClientKind::Script,
                    name: None,
                    node: None,
                    principal: None,
                    channel: None,
                },
                command: None,
            },
        }
    }

    #[test]
    fn a_client_turn_id_finds_its_turn_while_it_runs_or_waits() {
        let mut t = Turns::default();
        assert!(t.is_idle());
        let first = queued("t1", Some("k1"));
        let cancel = t.run(&first);
        t.queue.push_back(queued("t2", Some("k2")));
        assert_eq!(
            t.started("k1"),
            Some(TurnStarted {
                turn_id: TurnId("t1".into()),
                queued: false
            })
        );
        assert_eq!(
            t.started("k2"),
            Some(TurnStarted {
                turn_id: TurnId("t2".into()),
                queued: true
            })
        );
        assert_eq!(t.started("k3"), None);
        assert!(t.is_running(&TurnId("t1".into())));
        t.running_cancel().expect("running").cancel();
        assert!(cancel.is_cancelled());
        assert_eq!(t.clear_queue(), 1);
        assert!(t.take_running().is_some());
        assert!(t.is_idle());
    }
}
