//! The permission broker: the tool calls waiting for a controller's answer, the deadlines of the
//! `onNoController` policy, and what one call's check decides.
//!
//! Invariant: a request is answered once — the first `permission/respond` takes it out of the
//! waiting map (compare-and-swap), later answers find the decision in the history. Deadlines are
//! one queue served by the actor's loop ([`Broker::next_deadline`]); no timer task per request.

use super::SessionError;
use super::actor::SessionActor;
use crate::agent::{PermissionAsk, SinkError, Verdict};
use crate::hooks::HookEvent;
use crate::hooks::HookPermission;
use crate::permissions::{Call, Decision, RuleSet};
use std::collections::HashMap;
use tether_proto::{
    ClientRef, DecisionSource, EventKind, NoControllerAction, PermissionDecision, PermissionMode,
    PermissionResponse, SessionStatus, TurnId,
};
use tokio::sync::oneshot;
use tokio::time::{Duration, Instant};

/// The answers a controller is offered.
pub const OPTIONS: [&str; 4] = ["allow_once", "allow_session", "allow_always", "deny"];

/// What the tools that talk to the user rather than the system need from the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// `AskUserQuestion`: always asked (no rule or mode answers for the user); the answer comes
    /// back as `updatedInput`.
    Question,
    /// `ExitPlanMode` in plan mode: always asked; allowed once leaves plan mode for `default`,
    /// for the session for `acceptEdits`.
    PlanExit,
}

impl Special {
    fn of(tool: &str, mode: PermissionMode) -> Option<Self> {
        match tool {
            "AskUserQuestion" => Some(Self::Question),
            "ExitPlanMode" if mode == PermissionMode::Plan => Some(Self::PlanExit),
            _ => None,
        }
    }

    /// The answers offered: no rule can be saved for either.
    fn options(self) -> Vec<String> {
        match self {
            Self::Question => vec!["allow_once".into(), "deny".into()],
            Self::PlanExit => vec!["allow_once".into(), "allow_session".into(), "deny".into()],
        }
    }
}

/// A tool call held until its request is answered.
pub struct Waiting {
    /// The turn the call belongs to.
    pub turn_id: TurnId,
    /// The rules an `allow_session` / `allow_always` answer adds.
    pub rules: Vec<String>,
    /// Where the verdict goes.
    pub reply: oneshot::Sender<Result<Verdict, SinkError>>,
    /// When the `onNoController` policy decides, if it is armed.
    deadline: Option<Instant>,
    /// A question or a plan rather than a tool call's permission.
    pub special: Option<Special>,
}

impl Waiting {
    /// A held call with no deadline.
    pub fn new(
        turn_id: TurnId,
        rules: Vec<String>,
        reply: oneshot::Sender<Result<Verdict, SinkError>>,
    ) -> Self {
        Self {
            turn_id,
            rules,
            reply,
            deadline: None,
            special: None,
        }
    }

    /// Lets the call go on with `verdict` (the turn may have ended: then nobody listens).
    pub fn answer(self, verdict: Result<Verdict, SinkError>) {
        let _ = self.reply.send(verdict);
    }
}

/// A turn's hook callback waiting for its SDK program's answer.
pub struct Callback {
    turn_id: TurnId,
    reply: oneshot::Sender<Result<serde_json::Value, String>>,
}

/// The requests waiting for an answer, by request id.
#[derive(Default)]
pub struct Broker {
    waiting: HashMap<String, Waiting>,
    /// Hook callbacks asked of the client that started their turn, by request id.
    callbacks: HashMap<String, Callback>,
    /// Answers the store recorded for requests an earlier owner held and did not log (it
    /// died first): each applies when its request is held again.
    recorded: HashMap<String, Recorded>,
    /// Requests whose PermissionRequest hooks are running.
    hooked: std::collections::HashSet<String>,
    /// Answers that yield to those hooks (`afterHooks`), held until they have run.
    held: HashMap<String, Vec<HeldAnswer>>,
}

/// Tells the session, when dropped, that a request's PermissionRequest hooks have run, with
/// their answer if they gave one.
struct HooksRan {
    me: tokio::sync::mpsc::WeakUnboundedSender<super::actor::Command>,
    request_id: String,
    answer: Option<super::Answer>,
}

impl Drop for HooksRan {
    fn drop(&mut self) {
        if let Some(me) = self.me.upgrade() {
            let _ = me.send(super::actor::Command::PermissionHooksRan {
                request_id: std::mem::take(&mut self.request_id),
                answer: self.answer.take(),
            });
        }
    }
}

/// A request just opened, as its hooks are told of it.
#[derive(Clone, Copy)]
struct Opened<'a> {
    request_id: &'a str,
    tool: &'a str,
    input: &'a serde_json::Value,
    cwd: &'a std::path::Path,
    /// The approval token that answers it (`approval_token` in the hooks' input).
    token: &'a str,
}

/// An answer held until its request's PermissionRequest hooks have run, and who gave it.
pub struct HeldAnswer {
    answer: super::Answer,
    by: ClientRef,
}

/// An answer as the store records it before the log has it (in a cluster, so the first
/// answer outlives an owner that dies before logging it).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Recorded {
    decision: PermissionDecision,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    updated_input: Option<serde_json::Value>,
    by: ClientRef,
}

impl Recorded {
    /// `answer` given by `by`.
    pub fn new(answer: super::Answer, by: ClientRef) -> Self {
        Self {
            decision: answer.decision,
            message: answer.message,
            updated_input: answer.updated_input,
            by,
        }
    }

    /// The decision.
    pub fn decision(&self) -> PermissionDecision {
        self.decision
    }

    /// Who answered.
    pub fn by(&self) -> &ClientRef {
        &self.by
    }

    /// A deny's reason.
    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    /// The form the store keeps.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// An answer the store kept; `None` when it does not decode.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}

impl Broker {
    /// Holds a call until `request_id` is answered.
    pub fn hold(&mut self, request_id: String, waiting: Waiting) {
        self.waiting.insert(request_id, waiting);
    }

    /// Keeps the answers an earlier owner's store recorded (request id → encoded answer).
    pub fn restore(&mut self, recorded: HashMap<String, Vec<u8>>) {
        self.recorded = recorded
            .into_iter()
            .filter_map(|(id, bytes)| Recorded::decode(&bytes).map(|r| (id, r)))
            .collect();
    }

    /// Holds a hook callback until its answer comes (or its turn ends).
    pub fn hold_callback(
        &mut self,
        request_id: String,
        turn_id: TurnId,
        reply: oneshot::Sender<Result<serde_json::Value, String>>,
    ) {
        self.callbacks
            .insert(request_id, Callback { turn_id, reply });
    }

    /// Answers a hook callback; `false` when none waits under that id.
    pub fn answer_callback(
        &mut self,
        request_id: &str,
        answer: Result<serde_json::Value, String>,
    ) -> bool {
        match self.callbacks.remove(request_id) {
            Some(c) => c.reply.send(answer).is_ok(),
            None => false,
        }
    }

    /// Drops the callbacks of a turn that ended (their hooks see no answer).
    pub fn drop_callbacks(&mut self, turn_id: &TurnId) {
        self.callbacks.retain(|_, c| &c.turn_id != turn_id);
    }

    /// Keeps an answer to a logged request whose resumed turn has not asked it again yet.
    pub fn keep_recorded(&mut self, request_id: String, answer: Recorded) {
        self.recorded.insert(request_id, answer);
    }

    /// The answer kept for a request not held again yet, if any.
    pub fn peek_recorded(&self, request_id: &str) -> Option<&Recorded> {
        self.recorded.get(request_id)
    }

    /// The recorded answer to a request held again, if the store had one.
    pub fn take_recorded(&mut self, request_id: &str) -> Option<Recorded> {
        self.recorded.remove(request_id)
    }

    /// Takes a request to answer it; `None` when it was answered already (or never asked).
    pub fn take(&mut self, request_id: &str) -> Option<Waiting> {
        self.waiting.remove(request_id)
    }

    /// Whether `request_id`'s PermissionRequest hooks are running.
    pub fn hooks_running(&self, request_id: &str) -> bool {
        self.hooked.contains(request_id)
    }

    /// Holds an answer that yields to `request_id`'s running PermissionRequest hooks.
    pub fn after_hooks(
        &mut self,
        request_id: String,
        answer: super::Answer,
        by: ClientRef,
    ) -> PermissionResponse {
        let response = PermissionResponse {
            status: tether_proto::ResponseStatus::Held,
            decision: answer.decision,
            resolved_by: None,
        };
        self.held
            .entry(request_id)
            .or_default()
            .push(HeldAnswer { answer, by });
        response
    }

    /// `request_id`'s hooks have run: the answers held for them.
    fn hooks_ran(&mut self, request_id: &str) -> Vec<HeldAnswer> {
        self.hooked.remove(request_id);
        self.held.remove(request_id).unwrap_or_default()
    }

    /// Takes every request of a turn, oldest id first.
    pub fn take_turn(&mut self, turn_id: &TurnId) -> Vec<(String, Waiting)> {
        let mut ids: Vec<String> = self
            .waiting
            .iter()
            .filter(|(_, w)| &w.turn_id == turn_id)
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids.into_iter()
            .filter_map(|id| self.waiting.remove(&id).map(|w| (id, w)))
            .collect()
    }

    /// Whether no request waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Whether a request of `turn_id` waits.
    pub fn holds_turn(&self, turn_id: &TurnId) -> bool {
        self.waiting.values().any(|w| &w.turn_id == turn_id)
    }

    /// Gives every waiting request without a deadline one `after` from `now`.
    pub fn arm(&mut self, now: Instant, after: Duration) {
        for w in self.waiting.values_mut() {
            w.deadline.get_or_insert(now + after);
        }
    }

    /// Clears every deadline (a controller is attached and will answer).
    pub fn disarm(&mut self) {
        for w in self.waiting.values_mut() {
            w.deadline = None;
        }
    }

    /// The earliest deadline, for the actor's loop to sleep until.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.waiting.values().filter_map(|w| w.deadline).min()
    }

    /// The requests whose deadline has passed at `now`; their deadlines are cleared.
    pub fn expired(&mut self, now: Instant) -> Vec<String> {
        let mut ids: Vec<String> = Vec::new();
        for (id, w) in &mut self.waiting {
            if w.deadline.is_some_and(|d| d <= now) {
                w.deadline = None;
                ids.push(id.clone());
            }
        }
        ids.sort();
        ids
    }
}

/// Who decided a call without asking: the permission mode, a rule, or a PreToolUse hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The permission mode alone.
    Mode,
    /// A permission rule.
    Rule,
    /// A PreToolUse hook.
    Hook,
}

impl Source {
    /// The telemetry label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mode => "mode",
            Self::Rule => "rule",
            Self::Hook => "hook",
        }
    }
}

/// What one call's check decides under `mode` and `rules`, with a PreToolUse hook's say:
/// a deny rule wins over everything, then the hook, then the rules and mode.
pub fn decide(
    mode: PermissionMode,
    rules: &RuleSet,
    call: &Call<'_>,
    hook: Option<&HookPermission>,
) -> (Decision, Source) {
    let decision = match (crate::permissions::decide(mode, rules, call), hook) {
        (Decision::Deny(why), _) => Decision::Deny(why),
        (_, Some(HookPermission::Deny(why))) => {
            Decision::Deny(format!("denied by a PreToolUse hook: {why}"))
        }
        (_, Some(HookPermission::Allow)) => Decision::Allow,
        (Decision::Allow, Some(HookPermission::Ask)) => Decision::Ask,
        (d, _) => d,
    };
    let source = match hook {
        Some(HookPermission::Allow | HookPermission::Deny(_)) => Source::Hook,
        _ if std::mem::discriminant(&crate::permissions::decide(
            mode,
            &RuleSet::default(),
            call,
        )) == std::mem::discriminant(&decision) =>
        {
            Source::Mode
        }
        _ => Source::Rule,
    };
    (decision, source)
}

/// What a controller's answer lets the call do; a deny's message goes to the model.
pub fn verdict(
    decision: PermissionDecision,
    message: Option<String>,
    updated_input: Option<serde_json::Value>,
) -> Verdict {
    match decision {
        PermissionDecision::Deny => Verdict::Deny(match message.filter(|m| !m.trim().is_empty()) {
            Some(m) => format!("The user denied this tool call and said: {m}"),
            None => "The user denied this tool call. Do not retry it unchanged; ask the user or take another approach.".into(),
        }),
        PermissionDecision::Cancelled => Verdict::Deny(crate::agent::INTERRUPTED.to_owned()),
        _ => match updated_input {
            Some(input) => Verdict::AllowWith(input),
            None => Verdict::Allow,
        },
    }
}

impl SessionActor {
    /// A tool call's permission check (`Command::Authorize`): allowed, denied, or asked of the
    /// controllers as a durable `permission_requested`, answered later by
    /// [`Self::respond_permission`].
    pub(super) fn authorize(
        &mut self,
        turn_id: TurnId,
        ask: PermissionAsk,
        reply: oneshot::Sender<Result<Verdict, SinkError>>,
    ) {
        if let Some((request_id, rules)) = self.ledger.open_request_for(&ask.tool_call_id) {
            // A request an earlier daemon logged (the turn was resumed) stays open as it was.
            let mut waiting = Waiting::new(turn_id, rules, reply);
            waiting.special = Special::of(&ask.tool, self.journal.record.permission_mode);
            let recorded = self.broker.take_recorded(&request_id);
            self.hold(request_id.clone(), waiting);
            // Answered while an earlier owner held it, which died before logging the answer.
            if let Some(first) = recorded
                && let Some(waiting) = self.broker.take(&request_id)
                && let Err(e) = self.apply(request_id, waiting, first)
            {
                tracing::warn!("could not apply a recorded permission answer: {e}");
            }
            return;
        }
        let mut rules = self.rules();
        // The turn's sandbox, the one its Bash call will run in.
        let sandbox = self.workspace.sandbox();
        rules.sandboxed_bash =
            ask.tool == "Bash" && sandbox.as_ref().is_some_and(|s| s.auto_allows(&ask.input));
        rules.sandbox_on = sandbox.is_some();
        let roots = [std::path::PathBuf::from(&self.journal.record.cwd)];
        let cwd = self.workspace.cwd();
        let call = Call {
            tool: &ask.tool,
            input: &ask.input,
            read_only: ask.read_only,
            cwd: &cwd,
            roots: &roots,
        };
        let mode = self.journal.record.permission_mode;
        let special = Special::of(&ask.tool, mode);
        let (decision, source) = match (special, ask.tool.as_str()) {
            // Entering plan mode only narrows what runs: no one is asked.
            (_, "EnterPlanMode") => {
                if mode != PermissionMode::Plan {
                    self.switch_mode(PermissionMode::Plan);
                }
                (Decision::Allow, Source::Mode)
            }
            (None, "ExitPlanMode") => (
                Decision::Deny(format!(
                    "the session is not in plan mode (its mode is {}): there is no plan to approve, go ahead",
                    mode.as_str()
                )),
                Source::Mode,
            ),
            // A question or a plan is for the user: a hook may refuse it, nothing may allow it.
            (Some(_), _) => match ask.hook.as_ref() {
                Some(HookPermission::Deny(why)) => (
                    Decision::Deny(format!("denied by a PreToolUse hook: {why}")),
                    Source::Hook,
                ),
                _ => (Decision::Ask, Source::Mode),
            },
            (None, _) => decide(mode, &rules, &call, ask.hook.as_ref()),
        };
        let decided = |allowed: bool| {
            let mut kind = match source {
                Source::Hook => DecisionSource::Hook,
                Source::Mode => DecisionSource::Mode,
                Source::Rule => DecisionSource::Rule,
            };
            let mut rule = None;
            let mut rule_source = None;
            if kind == DecisionSource::Rule {
                let found = crate::permissions::deciding_rules(&rules, &call, allowed);
                if found.is_empty() {
                    kind = if rules.sandboxed_bash {
                        DecisionSource::Sandbox
                    } else {
                        DecisionSource::Mode
                    };
                } else {
                    let texts: Vec<&str> = found.iter().map(|r| r.text.as_str()).collect();
                    let origins: Vec<String> = found.iter().map(|r| r.origin()).collect();
                    rule = Some(texts.join(", "));
                    rule_source = Some(origins.join(", "));
                }
            }
            EventKind::PermissionDecided {
                tool_call_id: ask.tool_call_id.clone(),
                tool: ask.tool.clone(),
                decision: if allowed {
                    PermissionDecision::AllowOnce
                } else {
                    PermissionDecision::Deny
                },
                source: kind,
                rule,
                rule_source,
                mode,
                input_hash: crate::permissions::input_hash(&ask.input),
            }
        };
        match decision {
            Decision::Allow => {
                crate::telemetry::permission_decision("allow", source.as_str());
                let event = decided(true);
                match self.try_emit(event, Some(turn_id)) {
                    Ok(()) => drop(reply.send(Ok(Verdict::Allow))),
                    Err(e) => drop(reply.send(Err(SinkError::storage(e)))),
                }
            }
            Decision::Deny(why) => {
                crate::telemetry::permission_decision("deny", source.as_str());
                let event = decided(false);
                match self.try_emit(event, Some(turn_id)) {
                    Ok(()) => drop(reply.send(Ok(Verdict::Deny(why)))),
                    Err(e) => drop(reply.send(Err(SinkError::storage(e)))),
                }
            }
            Decision::Ask if ask.delegated => drop(reply.send(Ok(Verdict::Ask))),
            Decision::Ask => {
                let request_id = format!("perm_{}", uuid::Uuid::new_v4().simple());
                let suggested = match special {
                    Some(_) => Vec::new(),
                    None => crate::permissions::suggest_rules(&call, &rules),
                };
                let preview = crate::tools::preview(&ask.tool, &ask.input, &cwd);
                let tool = ask.tool.clone();
                // With no rule to save (a command decided only as it runs), "don't ask again"
                // is not offered.
                let options = special.map_or_else(
                    || {
                        OPTIONS
                            .iter()
                            .filter(|o| {
                                !suggested.is_empty()
                                    || !matches!(**o, "allow_session" | "allow_always")
                            })
                            .map(|o| (*o).to_owned())
                            .collect()
                    },
                    Special::options,
                );
                let allowed: Vec<PermissionDecision> = options
                    .iter()
                    .filter_map(|o| PermissionDecision::parse(o))
                    .collect();
                let event = EventKind::PermissionRequested {
                    request_id: request_id.clone(),
                    tool_call_id: ask.tool_call_id,
                    tool: ask.tool,
                    input: ask.input.clone(),
                    preview,
                    options,
                    rule: suggested.join(", "),
                    rules: suggested.clone(),
                };
                if let Err(e) = self.try_emit(event, Some(turn_id.clone())) {
                    let _ = reply.send(Err(SinkError::storage(e)));
                    return;
                }
                let turn = turn_id.clone();
                let mut waiting = Waiting::new(turn_id, suggested.clone(), reply);
                waiting.special = special;
                self.hold(request_id.clone(), waiting);
                // The settings are read once for both events' hooks.
                let hooks = self.hooks(Some(&turn));
                if !hooks.has(HookEvent::PermissionRequest) && !hooks.has(HookEvent::Notification) {
                    return;
                }
                // For the hooks only (never logged): whoever holds it may answer.
                let token = self
                    .env
                    .approvals
                    .mint(&self.journal.record.id, &request_id, allowed);
                let opened = Opened {
                    request_id: &request_id,
                    tool: &tool,
                    input: &ask.input,
                    cwd: &cwd,
                    token: &token,
                };
                self.permission_hooks(&hooks, &opened, &suggested);
                self.notify(hooks, &opened);
            }
        }
    }

    /// Holds the turn's call until `request_id` is answered.
    fn hold(&mut self, request_id: String, waiting: Waiting) {
        self.broker.hold(request_id, waiting);
        self.set_status(SessionStatus::AwaitingPermission);
        self.arm_no_controller();
    }

    /// The session's hooks, read now (settings edits apply at once); for `turn`, the running
    /// one, also its own (`--settings`) and its SDK program's callbacks. Their runs are
    /// logged, in `turn`'s turn when they run for one.
    pub(super) fn hooks(&self, turn: Option<&TurnId>) -> crate::hooks::Hooks {
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let mut hooks = crate::hooks::Hooks::load(
            std::path::Path::new(&self.journal.record.cwd),
            home.as_deref(),
            self.env.config_hooks.as_ref(),
        );
        if let Some(running) = turn.and_then(|t| self.turns.running(t)) {
            if let Some(settings) = &running.settings {
                hooks.add(&settings["hooks"], "--settings");
            }
            if let (Some(callbacks), Some(tx)) = (&running.hook_callbacks, self.me.upgrade()) {
                let asker = super::launch::ActorAsker {
                    tx,
                    turn_id: running.turn_id.clone(),
                };
                hooks.add_callbacks(callbacks, std::sync::Arc::new(asker));
            }
        }
        hooks.watched_by(self.hook_watcher(turn.cloned()));
        hooks
    }

    /// Runs the PermissionRequest hooks, in the background, for a request that now waits: an
    /// answer they give resolves it as a controller's would (whichever comes first wins).
    fn permission_hooks(
        &mut self,
        hooks: &crate::hooks::Hooks,
        opened: &Opened<'_>,
        suggested: &[String],
    ) {
        let Opened {
            request_id,
            tool,
            input,
            cwd,
            token,
            ..
        } = *opened;
        if !hooks.has(HookEvent::PermissionRequest) {
            return;
        }
        let hooks = hooks.clone();
        // Claude Code's shape for the rules an answer could add.
        let suggestions: Vec<serde_json::Value> = suggested
            .iter()
            .map(|rule| {
                let (tool, content) = match rule.split_once('(') {
                    Some((t, rest)) => (t, Some(rest.trim_end_matches(')'))),
                    None => (rule.as_str(), None),
                };
                serde_json::json!({"type": "addRules", "behavior": "allow",
                    "destination": "session",
                    "rules": [{"toolName": tool, "ruleContent": content}]})
            })
            .collect();
        let hook_input = serde_json::json!({
            "session_id": self.journal.record.id.0,
            "cwd": cwd,
            "permission_mode": self.journal.record.permission_mode.as_str(),
            "tool_name": tool,
            "tool_input": input,
            "permission_suggestions": suggestions,
            "request_id": request_id,
            "approval_token": token,
            "approval_url": self.approval_url(token),
        });
        let (me, request_id, tool, cwd) = (
            self.me.clone(),
            request_id.to_owned(),
            tool.to_owned(),
            cwd.to_owned(),
        );
        self.broker.hooked.insert(request_id.clone());
        self.tasks.spawn(async move {
            // Told however the task ends (a panic, an abort): answers held for it go on.
            let mut ran = HooksRan {
                me,
                request_id,
                answer: None,
            };
            let outcome = hooks
                .run(HookEvent::PermissionRequest, Some(&tool), hook_input, &cwd)
                .await;
            for n in outcome.notices {
                tracing::warn!("{n}");
            }
            ran.answer = match outcome.permission {
                Some(HookPermission::Allow) => Some(super::Answer {
                    decision: PermissionDecision::AllowOnce,
                    message: Some("by a PermissionRequest hook".into()),
                    updated_input: outcome.updated_input,
                }),
                Some(HookPermission::Deny(why)) => Some(super::Answer {
                    decision: PermissionDecision::Deny,
                    message: Some(format!("(a PermissionRequest hook answered) {why}")),
                    updated_input: None,
                }),
                _ => None,
            };
        });
    }

    /// Runs the SessionEnd hooks, detached (a deleted session's actor stops meanwhile):
    /// `reason` is `clear` or `other` (deleted).
    pub(super) fn session_end(&self, reason: &str) {
        let hooks = self.hooks(None);
        if !hooks.has(HookEvent::SessionEnd) {
            return;
        }
        let cwd = std::path::PathBuf::from(&self.journal.record.cwd);
        let input = serde_json::json!({
            "session_id": self.journal.record.id.0,
            "cwd": cwd,
            "permission_mode": self.journal.record.permission_mode.as_str(),
            "reason": reason,
        });
        let reason = reason.to_owned();
        tokio::spawn(async move {
            let outcome = hooks
                .run(HookEvent::SessionEnd, Some(&reason), input, &cwd)
                .await;
            for n in outcome.notices {
                tracing::warn!("{n}");
            }
        });
    }

    /// Whether an `afterHooks` answer from `by` may be held: it could answer now (a controller,
    /// the log writable); otherwise it is answered at once, with the reason.
    pub(super) fn may_hold(&self, by: &ClientRef) -> bool {
        !self.presence.observer_only(by) && self.journal.writable().is_ok()
    }

    /// A request's PermissionRequest hooks ran: their answer resolves it if it still waits;
    /// then the answers held for them (`afterHooks`) are given, in the order they came.
    pub(super) async fn permission_hooks_ran(
        &mut self,
        request_id: String,
        answer: Option<super::Answer>,
    ) {
        let held = self.broker.hooks_ran(&request_id);
        if let Some(answer) = answer
            && let Some(waiting) = self.broker.take(&request_id)
            && let Err(e) = self.resolve(
                request_id.clone(),
                waiting,
                answer.decision,
                answer.message,
                answer.updated_input,
                None,
            )
        {
            tracing::error!(session = %self.journal.record.id, "could not resolve a permission request: {e}");
        }
        for HeldAnswer { answer, by } in held {
            if let Err(e) = self
                .respond_permission(request_id.clone(), answer, by)
                .await
            {
                self.report(format!(
                    "an answer held for the PermissionRequest hooks could not be given: {e}"
                ));
            }
        }
    }

    /// The approval page's link for `token`, when the page is served.
    fn approval_url(&self, token: &str) -> Option<String> {
        self.env
            .approval_links
            .as_ref()
            .map(|base| format!("{base}/a/{token}"))
    }

    /// Runs the Notification hooks, in the background, for a request that now waits.
    fn notify(&mut self, hooks: crate::hooks::Hooks, opened: &Opened<'_>) {
        if !hooks.has(HookEvent::Notification) {
            return;
        }
        let cwd = opened.cwd.to_owned();
        let input = serde_json::json!({
            "session_id": self.journal.record.id.0,
            "cwd": cwd,
            "permission_mode": self.journal.record.permission_mode.as_str(),
            "message": format!("tether needs your permission to use {}", opened.tool),
            "request_id": opened.request_id,
            "approval_token": opened.token,
            "approval_url": self.approval_url(opened.token),
        });
        self.tasks.spawn(async move {
            let outcome = hooks.run(HookEvent::Notification, None, input, &cwd).await;
            for n in outcome.notices {
                tracing::warn!("{n}");
            }
        });
    }

    /// `permission/respond`: the first answer resolves the request; a later one learns how it
    /// was resolved. The answer is recorded in the store before it is logged (in a cluster, so
    /// it outlives this node); should the store hold an earlier answer, that one wins.
    pub(super) async fn respond_permission(
        &mut self,
        request_id: String,
        answer: super::Answer,
        by: ClientRef,
    ) -> Result<PermissionResponse, SessionError> {
        if self.presence.observer_only(&by) {
            return Err(SessionError::NotController);
        }
        self.journal.writable()?;
        // Open and not held: its turn, resumed after a restart or a takeover, has not asked
        // again yet; the answer is kept for when it does.
        let waiting = self.broker.take(&request_id);
        if waiting.is_none() && !self.ledger.is_open(&request_id) {
            return match self.ledger.resolution(&request_id) {
                Some((decision, resolved_by)) => Ok(PermissionResponse {
                    status: tether_proto::ResponseStatus::AlreadyResolved,
                    decision: *decision,
                    resolved_by: resolved_by.clone(),
                }),
                None => Err(SessionError::RequestNotFound(request_id)),
            };
        }
        let ours = Recorded::new(answer, by);
        let first = match self.journal.record_answer(&request_id, ours.encode()).await {
            Ok(first) => first.as_deref().and_then(Recorded::decode),
            Err(e) => {
                // Not recorded, so not answered: the request stays open.
                if let Some(waiting) = waiting {
                    self.broker.hold(request_id, waiting);
                }
                return Err(e.into());
            }
        };
        // On one machine the store records nothing: an answer kept for the resumed turn is
        // the first.
        let first = first.or_else(|| self.broker.peek_recorded(&request_id).cloned());
        let (winner, status) = match first {
            Some(first) if first != ours => (first, tether_proto::ResponseStatus::AlreadyResolved),
            _ => (ours, tether_proto::ResponseStatus::Accepted),
        };
        let response = PermissionResponse {
            status,
            decision: winner.decision,
            resolved_by: Some(winner.by.clone()),
        };
        match waiting {
            Some(waiting) => {
                let applied = self.apply(request_id, waiting, winner)?;
                Ok(match response.status {
                    tether_proto::ResponseStatus::Accepted => applied,
                    _ => response,
                })
            }
            None => {
                self.broker.keep_recorded(request_id, winner);
                Ok(response)
            }
        }
    }

    /// An answer the cluster recorded for one of this session's requests (by this node, or by
    /// the node that held the session before and lost it before logging the answer): applied
    /// to a request still waiting, kept for one whose resumed turn has not asked again.
    pub(super) fn recorded_answer(&mut self, request_id: String, bytes: &[u8]) {
        let Some(answer) = Recorded::decode(bytes) else {
            return;
        };
        if let Some(waiting) = self.broker.take(&request_id) {
            if let Err(e) = self.apply(request_id, waiting, answer) {
                tracing::warn!("could not apply a recorded permission answer: {e}");
            }
        } else if self.ledger.is_open(&request_id)
            && self.broker.peek_recorded(&request_id).is_none()
        {
            self.broker.keep_recorded(request_id, answer);
        }
    }

    /// Resolves a held request with a client's answer.
    fn apply(
        &mut self,
        request_id: String,
        waiting: Waiting,
        answer: Recorded,
    ) -> Result<PermissionResponse, SessionError> {
        self.resolve(
            request_id,
            waiting,
            answer.decision,
            answer.message,
            answer.updated_input,
            Some(answer.by),
        )
    }

    /// With no controller attached and a policy that acts, gives each waiting request a
    /// deadline; with a controller (or the `wait` policy), clears them.
    pub(super) fn arm_no_controller(&mut self) {
        let policy = self.journal.record.on_no_controller;
        if policy.action == NoControllerAction::Wait || self.presence.has_controller() {
            self.broker.disarm();
        } else {
            self.broker
                .arm(Instant::now(), Duration::from_millis(policy.timeout_ms));
        }
    }

    /// The deadlines that passed: the `onNoController` policy decides those requests.
    pub(super) fn no_controller_deadlines(&mut self) {
        let policy = self.journal.record.on_no_controller;
        let decision = match policy.action {
            NoControllerAction::Wait => return self.broker.disarm(),
            NoControllerAction::Deny => PermissionDecision::Deny,
            NoControllerAction::Allow => PermissionDecision::AllowOnce,
        };
        for request_id in self.broker.expired(Instant::now()) {
            if self.presence.has_controller() {
                break;
            }
            let Some(waiting) = self.broker.take(&request_id) else {
                continue;
            };
            let message = format!(
                "no controller was attached within {} ms; the session's onNoController policy decided",
                policy.timeout_ms
            );
            if let Err(e) = self.resolve(request_id, waiting, decision, Some(message), None, None) {
                tracing::error!(session = %self.journal.record.id, "could not resolve a permission request: {e}");
            }
        }
    }

    /// Records a decision on a waiting request and lets its tool call go on (once durable).
    fn resolve(
        &mut self,
        request_id: String,
        waiting: Waiting,
        decision: PermissionDecision,
        message: Option<String>,
        updated_input: Option<serde_json::Value>,
        by: Option<ClientRef>,
    ) -> Result<PermissionResponse, SessionError> {
        let adds_rule = waiting.special.is_none()
            && matches!(
                decision,
                PermissionDecision::AllowSession | PermissionDecision::AllowAlways
            );
        let source = if by.is_some() { "user" } else { "policy" };
        crate::telemetry::permission_decision(decision.as_str(), source);
        // Answers held for its hooks are moot now.
        self.broker.hooks_ran(&request_id);
        let event = EventKind::PermissionResolved {
            request_id,
            decision,
            resolved_by: by.clone(),
            message: message.clone(),
            rule: adds_rule.then(|| waiting.rules.join(", ")),
            rules: if adds_rule {
                waiting.rules.clone()
            } else {
                Vec::new()
            },
        };
        self.try_emit(event, Some(waiting.turn_id.clone()))?;
        if decision == PermissionDecision::AllowAlways {
            let root = std::path::PathBuf::from(&self.journal.record.cwd);
            let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
            for rule in &waiting.rules {
                let note = match crate::permissions::remember_always(&root, home.as_deref(), rule) {
                    Ok(file) => format!("{rule} is now allowed in {}", file.display()),
                    Err(e) => {
                        format!("{rule} is allowed for this session, but could not be saved: {e}")
                    }
                };
                self.emit(EventKind::Notice {
                    level: tether_proto::NoticeLevel::Info,
                    message: note,
                });
            }
        }
        if waiting.special == Some(Special::PlanExit) {
            match decision {
                PermissionDecision::AllowOnce => self.switch_mode(PermissionMode::Default),
                PermissionDecision::AllowSession | PermissionDecision::AllowAlways => {
                    self.switch_mode(PermissionMode::AcceptEdits)
                }
                _ => {}
            }
        }
        let turn_id = waiting.turn_id.clone();
        let said = |m: &Option<String>| {
            m.as_deref()
                .filter(|m| !m.trim().is_empty())
                .map(|m| format!(" They said: {m}"))
                .unwrap_or_default()
        };
        let verdict = match (waiting.special, decision) {
            (Some(Special::PlanExit), PermissionDecision::Deny) => Verdict::Deny(format!(
                "The user did not approve the plan; stay in plan mode and revise it.{}",
                said(&message)
            )),
            (Some(Special::Question), PermissionDecision::Deny) => Verdict::Deny(format!(
                "The user declined to answer the questions.{}",
                said(&message)
            )),
            _ => verdict(decision, message, updated_input),
        };
        // The tool runs only once the decision is durable.
        self.journal.after_commit(move |err| {
            waiting.answer(match err {
                Some(e) => Err(SinkError::Storage(e.clone())),
                None => Ok(verdict),
            })
        });
        if !self.broker.holds_turn(&turn_id) {
            self.set_status(SessionStatus::Running);
        }
        Ok(PermissionResponse {
            status: tether_proto::ResponseStatus::Accepted,
            decision,
            resolved_by: by,
        })
    }

    /// Resolves every request of `turn_id` as cancelled.
    pub(super) fn cancel_waiting(&mut self, turn_id: &TurnId) {
        for (request_id, w) in self.broker.take_turn(turn_id) {
            self.emit_in(
                EventKind::PermissionResolved {
                    request_id,
                    decision: PermissionDecision::Cancelled,
                    resolved_by: None,
                    message: None,
                    rule: None,
                    rules: Vec::new(),
                },
                Some(w.turn_id.clone()),
            );
            w.answer(Ok(verdict(PermissionDecision::Cancelled, None, None)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    fn turn(id: &str) -> TurnId {
        TurnId(id.into())
    }

    fn hold(
        broker: &mut Broker,
        id: &str,
        turn_id: &str,
    ) -> oneshot::Receiver<Result<Verdict, SinkError>> {
        let (tx, rx) = oneshot::channel();
        broker.hold(id.into(), Waiting::new(turn(turn_id), vec![], tx));
        rx
    }

    #[test]
    fn the_first_answer_takes_the_request() {
        let mut b = Broker::default();
        let mut rx = hold(&mut b, "perm_1", "t1");
        let w = b.take("perm_1").expect("waiting");
        assert!(b.take("perm_1").is_none(), "a second answer finds nothing");
        w.answer(Ok(Verdict::Allow));
        assert_eq!(
            rx.try_recv().expect("answered").expect("ok"),
            Verdict::Allow
        );
        assert!(b.is_empty());
    }

    #[test]
    fn a_turn_takes_only_its_own_requests() {
        let mut b = Broker::default();
        let _a = hold(&mut b, "perm_b", "t1");
        let _b = hold(&mut b, "perm_a", "t1");
        let _c = hold(&mut b, "perm_c", "t2");
        assert!(b.holds_turn(&turn("t1")));
        let ids: Vec<String> = b
            .take_turn(&turn("t1"))
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(ids, ["perm_a", "perm_b"]);
        assert!(!b.holds_turn(&turn("t1")));
        assert!(b.holds_turn(&turn("t2")));
    }

    #[test]
    fn deadlines_are_armed_once_and_expire_in_order() {
        let mut b = Broker::default();
        let now = Instant::now();
        let _a = hold(&mut b, "perm_1", "t1");
        assert_eq!(b.next_deadline(), None);
        b.arm(now, Duration::from_secs(5));
        // Arming again (another detach) keeps the first deadline.
        b.arm(now + Duration::from_secs(3), Duration::from_secs(5));
        assert_eq!(b.next_deadline(), Some(now + Duration::from_secs(5)));
        let _b = hold(&mut b, "perm_2", "t1");
        b.arm(now + Duration::from_secs(1), Duration::from_secs(5));
        assert!(b.expired(now + Duration::from_secs(4)).is_empty());
        assert_eq!(b.expired(now + Duration::from_secs(5)), ["perm_1"]);
        assert_eq!(b.next_deadline(), Some(now + Duration::from_secs(6)));
        b.disarm();
        assert_eq!(b.next_deadline(), None);
        assert!(b.expired(now + Duration::from_secs(60)).is_empty());
    }

    fn check(
        mode: PermissionMode,
        allow: &[&str],
        tool: &str,
        input: serde_json::Value,
        read_only: bool,
        hook: Option<HookPermission>,
    ) -> (Decision, Source) {
        let root = Path::new("/work/p");
        let mut rules = RuleSet::default();
        let allow: Vec<String> = allow.iter().map(|s| (*s).to_owned()).collect();
        rules.add("allow", &allow, root, None, "test");
        let roots = [root.to_path_buf()];
        let call = Call {
            tool,
            input: &input,
            read_only,
            cwd: root,
            roots: &roots,
        };
        decide(mode, &rules, &call, hook.as_ref())
    }

    #[test]
    fn decisions_and_who_made_them() {
        use PermissionMode::{BypassPermissions, Default as Ask};
        let rm = || json!({"command": "rm -rf x"});
        let bash = |mode, allow: &[&str], hook| check(mode, allow, "Bash", rm(), false, hook);
        assert_eq!(bash(Ask, &[], None), (Decision::Ask, Source::Mode));
        assert_eq!(
            bash(Ask, &["Bash(rm:*)"], None),
            (Decision::Allow, Source::Rule)
        );
        assert_eq!(
            bash(BypassPermissions, &[], None),
            (Decision::Allow, Source::Mode)
        );
        let read = check(
            Ask,
            &[],
            "Read",
            json!({"file_path": "/work/p/a"}),
            true,
            None,
        );
        assert_eq!(read, (Decision::Allow, Source::Mode));
        let hook = |h| bash(Ask, &[], Some(h));
        assert_eq!(hook(HookPermission::Allow), (Decision::Allow, Source::Hook));
        let asked = bash(BypassPermissions, &[], Some(HookPermission::Ask));
        assert_eq!(asked, (Decision::Ask, Source::Rule));
        let denied = bash(
            BypassPermissions,
            &[],
            Some(HookPermission::Deny("no".into())),
        );
        let why = "denied by a PreToolUse hook: no".to_owned();
        assert_eq!(denied, (Decision::Deny(why), Source::Hook));
    }

    #[test]
    fn a_bash_call_the_sandbox_holds_runs_unasked_unless_a_rule_says_otherwise() {
        let root = Path::new("/work/p");
        let roots = [root.to_path_buf()];
        let input = json!({"command": "rm -rf build"});
        let call = Call {
            tool: "Bash",
            input: &input,
            read_only: false,
            cwd: root,
            roots: &roots,
        };
        let decide_with = |mode, kind: &str, rule: Option<&str>, sandboxed| {
            let mut rules = RuleSet::default();
            if let Some(r) = rule {
                rules.add(kind, &[r.to_owned()], root, None, "test");
            }
            rules.sandboxed_bash = sandboxed;
            decide(mode, &rules, &call, None).0
        };
        use PermissionMode::{Default as Ask, DontAsk, Plan};
        assert_eq!(decide_with(Ask, "allow", None, false), Decision::Ask);
        assert_eq!(decide_with(Ask, "allow", None, true), Decision::Allow);
        assert_eq!(decide_with(DontAsk, "allow", None, true), Decision::Allow);
        assert_eq!(
            decide_with(Ask, "ask", Some("Bash(rm:*)"), true),
            Decision::Ask
        );
        assert!(matches!(
            decide_with(Ask, "deny", Some("Bash(rm:*)"), true),
            Decision::Deny(_)
        ));
        assert!(matches!(
            decide_with(Plan, "allow", None, true),
            Decision::Deny(_)
        ));
    }

    #[test]
    fn a_deny_rule_beats_an_allowing_hook() {
        let root = Path::new("/work/p");
        let mut rules = RuleSet::default();
        rules.add("deny", &["Bash(rm:*)".to_owned()], root, None, "test");
        let roots = [root.to_path_buf()];
        let input = json!({"command": "rm x"});
        let call = Call {
            tool: "Bash",
            input: &input,
            read_only: false,
            cwd: root,
            roots: &roots,
        };
        let (d, _) = decide(
            PermissionMode::BypassPermissions,
            &rules,
            &call,
            Some(&HookPermission::Allow),
        );
        assert!(matches!(d, Decision::Deny(why) if why.contains("Bash(rm:*)")));
    }

    #[test]
    fn a_denial_tells_the_model_what_the_user_said() {
        assert_eq!(
            verdict(PermissionDecision::AllowSession, None, None),
            Verdict::Allow
        );
        assert_eq!(
            verdict(
                PermissionDecision::AllowOnce,
                None,
                Some(serde_json::json!({"answers": {}}))
            ),
            Verdict::AllowWith(serde_json::json!({"answers": {}}))
        );
        let Verdict::Deny(plain) = verdict(PermissionDecision::Deny, Some("  ".into()), None)
        else {
            panic!("deny");
        };
        assert!(plain.contains("Do not retry it unchanged"));
        assert_eq!(
            verdict(PermissionDecision::Deny, Some("use git mv".into()), None),
            Verdict::Deny("The user denied this tool call and said: use git mv".into())
        );
    }
}
