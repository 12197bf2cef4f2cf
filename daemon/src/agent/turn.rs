//! One turn: model requests and tool runs, looped until the model stops asking for tools;
//! `max_tokens` continuation, `pause_turn`, refusal, cancellation, usage and cost.

use super::compact::{MAX_FAILURES, compact};
use super::dispatch::{Call, Dispatch};
use super::history::History;
use super::sink::{SinkError, TurnSink};
use super::turn_context::TurnContext;
use crate::hooks::HookEvent;
use crate::llm::{LlmError, MessagesRequest, StreamUpdate, Usage};
use crate::tools::SubagentRunner;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tether_proto::{EventKind, StopReason, TokenUsage, TurnError};
use tokio_util::sync::CancellationToken;

/// Overloaded answers in a row before a turn with a fallback model switches to it.
const OVERLOADED_BEFORE_FALLBACK: u32 = 3;

/// Counts the bytes written to it, and keeps none.
struct Counted(u64);

impl std::io::Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A turn that could not record its events ends with this error.
fn storage_failed(e: &SinkError) -> TurnError {
    TurnError {
        code: "storage".into(),
        message: e.to_string(),
        retryable: true,
    }
}

/// The user message that asks the model to go on after `max_tokens`.
pub const CONTINUE_PROMPT: &str = "Your previous reply was cut off because it reached the maximum output length. \
Continue exactly where you stopped, without repeating what you already wrote. If you were in the middle of a tool call, \
make that call again in full.";

/// Extra model calls Stop hooks may force in one turn.
pub const MAX_STOP_HOOK_CONTINUATIONS: u32 = 3;
/// How often a run that wants a structured answer reminds the model before it fails.
pub const MAX_STRUCTURED_REMINDERS: u32 = 3;

/// A turn: its context, its cancellation, and its sub-agents.
pub struct Turn {
    /// What it runs with.
    pub ctx: Arc<TurnContext>,
    /// Fires on `turn/cancel`.
    pub cancel: CancellationToken,
    /// Sub-agents for the Task tool (`None` inside a sub-agent).
    pub subagents: Option<Arc<dyn SubagentRunner>>,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// The API's stop reason or tether's (`cancelled`, `error`, `max_turns`).
    pub stop_reason: StopReason,
    /// Tokens of every request of the turn.
    pub usage: TokenUsage,
    /// What it cost; `None` when the model's price is unknown.
    pub cost_usd: Option<f64>,
    /// Why it failed.
    pub error: Option<TurnError>,
    /// Time spent waiting on the model's API (every request, retries included).
    pub api: Duration,
}

impl TurnOutcome {
    /// The outcome of a turn that ended without asking the model: nothing spent.
    pub fn without_model(stop_reason: StopReason, error: Option<TurnError>) -> Self {
        Self {
            stop_reason,
            usage: TokenUsage::default(),
            cost_usd: Some(0.0),
            error,
            api: Duration::ZERO,
        }
    }
}

struct Tally {
    usage: TokenUsage,
    cost: Option<f64>,
    api: Duration,
}

impl Tally {
    fn outcome(&self, stop_reason: StopReason, error: Option<TurnError>) -> TurnOutcome {
        TurnOutcome {
            stop_reason,
            usage: self.usage,
            cost_usd: self.cost,
            error,
            api: self.api,
        }
    }
}

fn turn_error(e: &LlmError) -> TurnError {
    TurnError {
        code: e.code().to_owned(),
        message: e.to_string(),
        retryable: e.is_retryable(),
    }
}

impl Turn {
    /// Runs the turn on `history` (which already holds its `turn_started`), sending every event to
    /// `sink`. Never fails: problems end the turn with an error outcome.
    pub async fn run(&self, mut history: History, sink: Arc<dyn TurnSink>) -> TurnOutcome {
        let mut tally = Tally {
            usage: TokenUsage::default(),
            cost: Some(0.0),
            api: Duration::ZERO,
        };
        let outcome = match self.run_loop(&mut history, sink.clone(), &mut tally).await {
            Ok(outcome) => outcome,
            Err(e) => tally.outcome(StopReason::Error, Some(storage_failed(&e))),
        };
        // StopFailure: the turn ended on an error (its output cannot change that).
        if let Some(error) = &outcome.error
            && self.ctx.agent.is_none()
            && self.ctx.hooks.has(HookEvent::StopFailure)
        {
            let cwd = self.ctx.workspace.cwd();
            let mut input = self.ctx.hook_input_with(&cwd, &history);
            input["error"] = serde_json::json!(error.code);
            input["error_message"] = serde_json::json!(error.message);
            self.hook(HookEvent::StopFailure, Some(&error.code), input, &sink)
                .await;
        }
        outcome
    }

    /// Runs the hooks of `event` and shows their notices.
    async fn hook(
        &self,
        event: HookEvent,
        target: Option<&str>,
        input: Value,
        sink: &Arc<dyn TurnSink>,
    ) -> crate::hooks::Outcome {
        let cwd = self.ctx.workspace.cwd();
        let outcome = self.ctx.hooks.run(event, target, input, &cwd).await;
        for n in &outcome.notices {
            sink.send(EventKind::Notice {
                level: tether_proto::NoticeLevel::Warning,
                message: n.clone(),
            });
        }
        outcome
    }

    /// The hook event of this turn's stopping: `SubagentStop` in a sub-agent, else `Stop`.
    fn stop_event(&self) -> HookEvent {
        if self.ctx.agent.is_some() {
            HookEvent::SubagentStop
        } else {
            HookEvent::Stop
        }
    }

    /// Runs the PreCompact hooks, compacts, then runs the PostCompact hooks.
    async fn compact(
        &self,
        model_id: &str,
        tools: &[crate::llm::ToolDefinition],
        history: &mut History,
        sink: &Arc<dyn TurnSink>,
        reason: &str,
        extra: Option<&str>,
    ) -> Result<Option<super::compact::Compacted>, SinkError> {
        if self.ctx.hooks.has(HookEvent::PreCompact) {
            let cwd = self.ctx.workspace.cwd();
            let trigger = if reason == "manual" { "manual" } else { "auto" };
            let mut input = self.ctx.hook_input_with(&cwd, history);
            input["trigger"] = serde_json::json!(trigger);
            input["custom_instructions"] = serde_json::json!(extra.unwrap_or(""));
            self.hook(HookEvent::PreCompact, Some(trigger), input, sink)
                .await;
        }
        let compacted = compact(
            &*self.ctx.net.llm,
            &self.ctx.net.catalog,
            model_id,
            tools,
            history,
            sink,
            reason,
            extra,
            &self.cancel,
        )
        .await?;
        if compacted.is_some() && self.ctx.hooks.has(HookEvent::PostCompact) {
            let cwd = self.ctx.workspace.cwd();
            let trigger = if reason == "manual" { "manual" } else { "auto" };
            let mut input = self.ctx.hook_input_with(&cwd, history);
            input["trigger"] = serde_json::json!(trigger);
            // The compacted conversation starts with the summary.
            let summary = history
                .messages()
                .first()
                .map(|m| tether_proto::content_text(&Value::Array(m.content.to_vec())))
                .unwrap_or_default();
            input["compact_summary"] = serde_json::json!(summary);
            self.hook(HookEvent::PostCompact, Some(trigger), input, sink)
                .await;
        }
        Ok(compacted)
    }

    /// Tells every client the session's totals with this turn's spending so far.
    fn usage_updated(&self, tally: &Tally, sink: &Arc<dyn TurnSink>, context_percent: Option<f64>) {
        let (mut session, before) = self.ctx.spent_before;
        session.add(&tally.usage);
        let session_cost = match (before, tally.cost) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        sink.send(EventKind::UsageUpdated {
            session,
            session_cost_usd: session_cost,
            context_percent,
        });
    }

    fn count(&self, tally: &mut Tally, model_id: &str, usage: &Usage) {
        tally.usage.add(&TokenUsage::from(usage));
        let cost = self.ctx.net.catalog.cost_usd(model_id, usage);
        if let Some(budget) = &self.ctx.budget {
            budget.spend(cost);
        }
        tally.cost = match (tally.cost, cost) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }

    /// With a budget: whether `request` may be sent, and if so its estimate held against the
    /// caps until the returned reservation is dropped. Its input (about 4 bytes of the request
    /// a token) is priced at the highest rate an input token can cost, a cache write at the
    /// prefix's lifetime, so the estimate is not below what the request's input will cost.
    fn reserve(
        &self,
        request: &MessagesRequest,
    ) -> Result<Option<super::budget::Reservation>, super::budget::Reached> {
        let Some(budget) = self.ctx.budget.as_ref() else {
            return Ok(None);
        };
        // Counted as written, never held: a request can be megabytes.
        let mut bytes = Counted(0);
        let _ = serde_json::to_writer(&mut bytes, request);
        let bytes = bytes.0;
        let tokens = bytes.div_ceil(4);
        let input = Usage {
            cache_creation_input_tokens: tokens,
            cache_write_1h_tokens: match self.ctx.policy.prefix_ttl {
                crate::llm::CacheTtl::OneHour => tokens,
                crate::llm::CacheTtl::FiveMinutes => 0,
            },
            ..Usage::default()
        };
        let next = self.ctx.net.catalog.cost_usd(&request.model, &input);
        budget.reserve(next).map(Some)
    }

    /// With a budget: whether compacting `history` (a request carrying all of it) may be sent.
    fn compaction_over_budget(
        &self,
        model_id: &str,
        history: &History,
    ) -> Option<super::budget::Reached> {
        self.ctx.budget.as_ref()?;
        let mut request = MessagesRequest::new(
            model_id.to_owned(),
            self.ctx.limits.max_tokens,
            history.messages(),
        );
        request.system = self.ctx.system.clone();
        self.reserve(&request).err()
    }

    /// Only compacts the history (`/compact`).
    pub async fn compact_only(
        &self,
        mut history: History,
        sink: Arc<dyn TurnSink>,
        instructions: Option<String>,
    ) -> TurnOutcome {
        let mut tally = Tally {
            usage: TokenUsage::default(),
            cost: Some(0.0),
            api: Duration::ZERO,
        };
        let model_id = self.ctx.net.catalog.resolve(&self.ctx.model);
        if let Some(reached) = self.compaction_over_budget(&model_id, &history) {
            return match sink.commit(reached.into()).await {
                Ok(()) => tally.outcome(StopReason::BudgetReached, None),
                Err(e) => tally.outcome(StopReason::Error, Some(storage_failed(&e))),
            };
        }
        let tools = self.ctx.tools.definitions();
        let done = self
            .compact(
                &model_id,
                &tools,
                &mut history,
                &sink,
                "manual",
                instructions.as_deref(),
            )
            .await;
        match done {
            Ok(Some(c)) => {
                self.count(&mut tally, &model_id, &c.usage);
                tally.outcome(StopReason::Compacted, None)
            }
            Ok(None) if self.cancel.is_cancelled() => tally.outcome(StopReason::Cancelled, None),
            Ok(None) => tally.outcome(
                StopReason::Error,
                Some(TurnError {
                    code: super::history::COMPACTION_FAILED.into(),
                    message: "the conversation could not be compacted".into(),
                    retryable: true,
                }),
            ),
            Err(e) => tally.outcome(StopReason::Error, Some(storage_failed(&e))),
        }
    }

    /// Goes on with a turn an earlier daemon left waiting for permission: runs `calls` (the
    /// reply's tool calls that have no result), then continues like any turn.
    pub async fn resume(
        &self,
        mut history: History,
        calls: Vec<Call>,
        sink: Arc<dyn TurnSink>,
    ) -> TurnOutcome {
        let mut tally = Tally {
            usage: TokenUsage::default(),
            cost: Some(0.0),
            api: Duration::ZERO,
        };
        let result = async {
            if self
                .run_calls(calls, &mut history, &sink, &mut tally)
                .await?
            {
                return Ok(tally.outcome(StopReason::Cancelled, None));
            }
            self.run_loop(&mut history, sink.clone(), &mut tally).await
        }
        .await;
        result.unwrap_or_else(|e: SinkError| {
            tally.outcome(StopReason::Error, Some(storage_failed(&e)))
        })
    }

    /// Runs one reply's tool calls, adding what tools spent to the tally. Returns whether the
    /// turn was cancelled.
    async fn run_calls(
        &self,
        calls: Vec<Call>,
        history: &mut History,
        sink: &Arc<dyn TurnSink>,
        tally: &mut Tally,
    ) -> Result<bool, SinkError> {
        let spent = Arc::new(std::sync::Mutex::new(crate::tools::Spent::default()));
        let dispatch = Dispatch {
            ctx: &self.ctx,
            cancel: &self.cancel,
            sink: sink.clone(),
            subagents: self.subagents.clone(),
            spent: spent.clone(),
        };
        let cancelled = dispatch.run(calls, history).await?;
        let spent = spent.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if spent.any {
            tally.usage.add(&spent.usage);
            tally.cost = match (tally.cost, spent.cost_usd) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
        }
        Ok(cancelled)
    }

    async fn run_loop(
        &self,
        history: &mut History,
        sink: Arc<dyn TurnSink>,
        tally: &mut Tally,
    ) -> Result<TurnOutcome, SinkError> {
        let mut model_id = self.ctx.net.catalog.resolve(&self.ctx.model);
        let tools = self.ctx.tools.definitions();
        let mut continuations = 0;
        let mut requests = 0;
        let mut compacted_for_length = false;
        let mut stop_hooks = 0;
        let mut reminders = 0;
        loop {
            if self.cancel.is_cancelled() {
                return Ok(tally.outcome(StopReason::Cancelled, None));
            }
            requests += 1;
            if requests > self.ctx.limits.max_requests {
                return Ok(tally.outcome(StopReason::MaxTurns, None));
            }
            let window = self
                .ctx
                .net
                .catalog
                .info(&model_id)
                .map(|m| m.context_window);
            // A compaction the budget has no room for is left out: the request's own check
            // below then pauses the session.
            if let (Some(pct), Some(w)) = (self.ctx.limits.auto_compact_percent, window)
                && history.last_context_tokens as f64 >= pct / 100.0 * w as f64
                && history.compaction_failures < MAX_FAILURES
                && self.compaction_over_budget(&model_id, history).is_none()
                && let Some(c) = self
                    .compact(&model_id, &tools, history, &sink, "auto", None)
                    .await?
            {
                self.count(tally, &model_id, &c.usage);
            }
            let mut request = MessagesRequest::new(
                model_id.clone(),
                self.ctx.limits.max_tokens,
                history.messages(),
            );
            request.system = self.ctx.system.clone();
            request.tools = tools.clone();
            self.ctx.net.catalog.shape(&mut request, &self.ctx.policy);
            // With another model to fall back to, three overloaded answers in a row are enough
            // (as in Claude Code), not the whole retry budget.
            let fallback = self.ctx.limits.fallback_model.as_deref();
            if fallback.is_some_and(|f| self.ctx.net.catalog.resolve(f) != model_id) {
                request.overloaded_limit = Some(OVERLOADED_BEFORE_FALLBACK);
            }
            let request = request.with_cache_breakpoints(self.ctx.policy.prefix_ttl);
            // Held until the reply is counted (or the attempt fails).
            let reserved = match self.reserve(&request) {
                Ok(reserved) => reserved,
                Err(reached) => {
                    sink.commit(reached.into()).await?;
                    return Ok(tally.outcome(StopReason::BudgetReached, None));
                }
            };

            let mut completed: HashSet<usize> = HashSet::new();
            // Text blocks still being written, so a cancel can keep what was said.
            let mut partial: std::collections::BTreeMap<usize, String> = Default::default();
            // The usage the stream has reported so far, and the bytes it streamed (text,
            // thinking, tool input), so a cancel can count what was spent.
            let mut seen: Option<crate::llm::Usage> = None;
            let mut streamed: usize = 0;
            let result = {
                let sink = sink.clone();
                let history = &mut *history;
                let completed = &mut completed;
                let partial = &mut partial;
                let seen = &mut seen;
                let streamed = &mut streamed;
                let mut on_update = move |update: StreamUpdate| {
                    match &update {
                        StreamUpdate::TextDelta { text, .. } => *streamed += text.len(),
                        StreamUpdate::ThinkingDelta { thinking, .. } => *streamed += thinking.len(),
                        StreamUpdate::ToolInputDelta { partial_json, .. } => {
                            *streamed += partial_json.len()
                        }
                        _ => {}
                    }
                    let event = match update {
                        StreamUpdate::MessageStarted { usage, .. }
                        | StreamUpdate::MessageDelta { usage, .. } => {
                            *seen = Some(usage);
                            return;
                        }
                        StreamUpdate::BlockStarted { index, block } => {
                            if block["type"] == "text" {
                                let start = block["text"].as_str().unwrap_or("").to_owned();
                                partial.insert(index, start);
                            }
                            EventKind::AssistantBlockStarted {
                                index: index as u32,
                                kind: block["type"].as_str().unwrap_or("unknown").to_owned(),
                                block,
                            }
                        }
                        StreamUpdate::TextDelta { index, text } => {
                            if let Some(p) = partial.get_mut(&index) {
                                p.push_str(&text);
                            }
                            EventKind::TextDelta {
                                index: index as u32,
                                text,
                            }
                        }
                        StreamUpdate::ThinkingDelta { index, thinking } => {
                            EventKind::ThinkingDelta {
                                index: index as u32,
                                thinking,
                            }
                        }
                        StreamUpdate::ToolInputDelta {
                            index,
                            partial_json,
                        } => EventKind::ToolInputDelta {
                            index: index as u32,
                            partial_json,
                        },
                        StreamUpdate::BlockCompleted { index, block } => {
                            completed.insert(index);
                            partial.remove(&index);
                            EventKind::AssistantBlockCompleted {
                                index: index as u32,
                                block,
                            }
                        }
                        StreamUpdate::Retrying {
                            attempt,
                            delay,
                            error,
                            discarded,
                        } => {
                            completed.clear();
                            partial.clear();
                            EventKind::Retrying {
                                attempt,
                                delay_ms: delay.as_millis() as u64,
                                error: error.to_string(),
                                discarded,
                            }
                        }
                    };
                    history.apply(&event);
                    sink.send(event);
                };
                let asked = std::time::Instant::now();
                let reply = self
                    .ctx
                    .net
                    .llm
                    .stream(&request, &mut on_update, &self.cancel)
                    .await;
                tally.api += asked.elapsed();
                reply
            };
            let message = match result {
                Ok(m) => m,
                Err(LlmError::Cancelled) => {
                    // The interrupted reply was paid for: its input as reported, its output at
                    // least as long as what streamed (about four bytes a token).
                    if let Some(mut usage) = seen {
                        usage.output_tokens = usage.output_tokens.max(streamed.div_ceil(4) as u64);
                        self.count(tally, &model_id, &usage);
                        let context = usage.context_tokens() as f64;
                        self.usage_updated(
                            tally,
                            &sink,
                            window.map(|w| 100.0 * context / w as f64),
                        );
                    }
                    drop(reserved);
                    // What the model already said stays in the conversation, cut where it
                    // stopped, so the next prompt does not ask it all again.
                    for (index, text) in partial {
                        if text.trim().is_empty() {
                            continue;
                        }
                        let event = EventKind::AssistantBlockCompleted {
                            index: index as u32,
                            block: serde_json::json!({"type": "text", "text": text}),
                        };
                        history.apply(&event);
                        sink.commit(event).await?;
                    }
                    return Ok(tally.outcome(StopReason::Cancelled, None));
                }
                Err(e)
                    if !compacted_for_length
                        && e.api().is_some_and(|a| {
                            matches!(a.kind, crate::llm::ApiErrorKind::PromptTooLong { .. })
                        }) =>
                {
                    compacted_for_length = true;
                    requests -= 1;
                    match self
                        .compact(&model_id, &tools, history, &sink, "prompt_too_long", None)
                        .await?
                    {
                        Some(c) => {
                            self.count(tally, &model_id, &c.usage);
                            continue;
                        }
                        None => return Ok(tally.outcome(StopReason::Error, Some(turn_error(&e)))),
                    }
                }
                Err(e)
                    if e.is_overloaded()
                        && self
                            .ctx
                            .limits
                            .fallback_model
                            .as_ref()
                            .is_some_and(|f| self.ctx.net.catalog.resolve(f) != model_id) =>
                {
                    let to = self.ctx.net.catalog.resolve(
                        self.ctx
                            .limits
                            .fallback_model
                            .as_deref()
                            .unwrap_or_default(),
                    );
                    let event = EventKind::ModelFallback {
                        from: model_id.clone(),
                        to: to.clone(),
                    };
                    history.apply(&event);
                    sink.commit(event).await?;
                    model_id = to;
                    requests -= 1;
                    continue;
                }
                Err(e) => {
                    let event = EventKind::Error {
                        code: e.code().to_owned(),
                        message: e.to_string(),
                    };
                    history.apply(&event);
                    sink.commit(event).await?;
                    return Ok(tally.outcome(StopReason::Error, Some(turn_error(&e))));
                }
            };

            // Blocks cut off before their stop (max_tokens) are kept, except unusable tool calls.
            let truncated: HashSet<usize> = message
                .truncated_tool_inputs
                .iter()
                .map(|t| t.index)
                .collect();
            for (index, block) in message.content().iter().enumerate() {
                if !completed.contains(&index) && !truncated.contains(&index) {
                    let event = EventKind::AssistantBlockCompleted {
                        index: index as u32,
                        block: block.clone(),
                    };
                    history.apply(&event);
                    sink.send(event);
                }
            }
            for t in &message.truncated_tool_inputs {
                let event = EventKind::Notice {
                    level: tether_proto::NoticeLevel::Warning,
                    message: format!(
                        "the model's call to {} was cut off before its input was complete; it was not run",
                        t.name
                    ),
                };
                sink.send(event);
            }
            let usage = TokenUsage::from(&message.usage);
            self.count(tally, &model_id, &message.usage);
            drop(reserved);
            let stop_reason =
                StopReason::parse(message.stop_reason.as_deref().unwrap_or("end_turn"));
            let done = EventKind::AssistantMessageCompleted {
                model: message.message["model"]
                    .as_str()
                    .unwrap_or(&model_id)
                    .to_owned(),
                usage,
                stop_reason: Some(stop_reason.clone()),
            };
            history.apply(&done);
            let calls: Vec<Call> = message
                .content()
                .iter()
                .enumerate()
                .filter(|(i, b)| b["type"] == "tool_use" && !truncated.contains(i))
                .map(|(_, b)| Call {
                    logged: false,
                    id: b["id"].as_str().unwrap_or_default().to_owned(),
                    name: b["name"].as_str().unwrap_or_default().to_owned(),
                    input: b
                        .get("input")
                        .cloned()
                        .unwrap_or(Value::Object(Default::default())),
                })
                .collect();
            if calls.is_empty() {
                sink.commit(done).await?;
            } else {
                // The first call's write-ahead commit makes the message durable with it: one
                // flush, not two, between a reply and its tools.
                sink.send(done);
            }
            self.usage_updated(
                tally,
                &sink,
                window.map(|w| 100.0 * message.usage.context_tokens() as f64 / w as f64),
            );

            if !calls.is_empty() && self.run_calls(calls, history, &sink, tally).await? {
                return Ok(tally.outcome(StopReason::Cancelled, None));
            }
            match &stop_reason {
                StopReason::MaxTokens if continuations < self.ctx.limits.max_continuations => {
                    continuations += 1;
                    let event = EventKind::Continuation {
                        attempt: continuations,
                        prompt: CONTINUE_PROMPT.into(),
                    };
                    history.apply(&event);
                    sink.commit(event).await?;
                }
                StopReason::PauseTurn | StopReason::ToolUse => {}
                // A run that wants a structured answer goes on until the model has given it.
                StopReason::EndTurn | StopReason::StopSequence
                    if self.ctx.structured.as_ref().is_some_and(|s| !s.is_done()) =>
                {
                    if reminders >= MAX_STRUCTURED_REMINDERS {
                        return Ok(tally.outcome(
                            StopReason::Error,
                            Some(TurnError {
                                code: "structured_output".into(),
                                message: format!(
                                    "the model did not call {} with an answer matching the schema (reminded {reminders} times)",
                                    crate::tools::structured::NAME
                                ),
                                retryable: true,
                            }),
                        ));
                    }
                    reminders += 1;
                    let event = EventKind::Continuation {
                        attempt: reminders,
                        prompt: crate::tools::structured::StructuredOutput::reminder(),
                    };
                    history.apply(&event);
                    sink.commit(event).await?;
                }
                StopReason::EndTurn | StopReason::StopSequence
                    if self.ctx.hooks.has(self.stop_event())
                        && stop_hooks < MAX_STOP_HOOK_CONTINUATIONS =>
                {
                    let cwd = self.ctx.workspace.cwd();
                    let mut input = self.ctx.hook_input_with(&cwd, history);
                    input["stop_hook_active"] = serde_json::json!(stop_hooks > 0);
                    let last: String = message
                        .content()
                        .iter()
                        .filter_map(|b| b["text"].as_str())
                        .collect();
                    input["last_assistant_message"] = serde_json::json!(last);
                    let outcome = self
                        .hook(self.stop_event(), self.ctx.agent.as_deref(), input, &sink)
                        .await;
                    let Some(reason) = outcome.block else {
                        return Ok(tally.outcome(stop_reason, None));
                    };
                    stop_hooks += 1;
                    let event = EventKind::Continuation {
                        attempt: stop_hooks,
                        prompt: format!(
                            "A {} hook asks you to continue: {reason}",
                            self.stop_event()
                        ),
                    };
                    history.apply(&event);
                    sink.commit(event).await?;
                }
                _ if message.content().iter().any(|b| b["type"] == "tool_use")
                    && stop_reason != StopReason::MaxTokens => {}
                _ => return Ok(tally.outcome(stop_reason, None)),
            }
        }
    }
}

#[cfg(test)]
mod tests;
