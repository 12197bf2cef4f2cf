//! Running the tool calls of one reply: lookup by name or alias, schema validation, the
//! permission check, read-only calls in parallel and mutating calls in order, a per-call timeout,
//! panics caught. Every outcome becomes a `tool_result`.

use super::history::History;
use super::sink::{SinkError, TurnSink};
use super::turn_context::TurnContext;
use crate::hooks::HookEvent;
use crate::tools::{Spent, SubagentRunner, ToolContext, ToolOutput};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tether_proto::{EventKind, WorkspaceSnapshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The tools whose file brings the instructions of its folder (`memory_for`).
const TOUCHES_FILES: &[&str] = &["Read", "Edit", "MultiEdit", "Write", "NotebookEdit"];

/// Result text for calls stopped by `turn/cancel`.
pub const INTERRUPTED: &str =
    "interrupted by user: the turn was cancelled before this tool call finished";

/// One `tool_use` block to run.
#[derive(Debug, Clone)]
pub struct Call {
    /// The API's tool_use id.
    pub id: String,
    /// The name the model used.
    pub name: String,
    /// Its input.
    pub input: Value,
    /// Whether its `tool_call` is in the log already (a call resumed after a restart).
    pub logged: bool,
}

fn with_note(mut out: ToolOutput, note: Option<String>) -> ToolOutput {
    if let (Some(note), serde_json::Value::String(text)) = (note, &mut out.content) {
        text.insert_str(0, &format!("{note}\n"));
    }
    out
}

/// What the calls run with.
pub struct Dispatch<'a> {
    /// The turn's context: tools, workspace, hooks, network, limits.
    pub ctx: &'a TurnContext,
    /// The turn's cancellation.
    pub cancel: &'a CancellationToken,
    /// Where events go.
    pub sink: Arc<dyn TurnSink>,
    /// Sub-agents for the Task tool.
    pub subagents: Option<Arc<dyn SubagentRunner>>,
    /// What tools spent on model requests.
    pub spent: Arc<std::sync::Mutex<Spent>>,
}

impl Dispatch<'_> {
    /// Asks the turn's permission prompt tool about `call` (Claude Code's contract): allow
    /// (maybe with new input) or deny; anything else denies, saying why.
    async fn ask_prompt_tool(
        &self,
        call: &Call,
        tool: &str,
    ) -> (super::sink::Verdict, Option<Value>) {
        use super::sink::Verdict;
        let name = self.ctx.prompt_tool.clone().unwrap_or_default();
        let Some(prompt) = self.ctx.tools.find(&name) else {
            return (
                Verdict::Deny(format!(
                    "the permission prompt tool {name} is not available (is its MCP server configured and running?)"
                )),
                None,
            );
        };
        let input = json!({"tool_name": tool, "input": call.input, "tool_use_id": call.id});
        let ctx = ToolContext {
            cancel: self.cancel.child_token(),
            ..ToolContext::detached(self.ctx.workspace.clone())
        };
        let out = prompt.run(input, &ctx).await;
        let text = tether_proto::content_text(&out.content);
        let answer: Value = match serde_json::from_str(text.trim()) {
            Ok(v) if !out.is_error => v,
            _ => {
                return (
                    Verdict::Deny(format!(
                        "the permission prompt tool {name} gave no answer: {}",
                        text.trim()
                    )),
                    None,
                );
            }
        };
        self.sink.send(EventKind::Notice {
            level: tether_proto::NoticeLevel::Info,
            message: format!(
                "{name} answered the permission request for {tool}: {}",
                answer["behavior"].as_str().unwrap_or("no behavior")
            ),
        });
        match answer["behavior"].as_str() {
            Some("allow") => (
                Verdict::Allow,
                answer
                    .get("updatedInput")
                    .filter(|u| u.is_object())
                    .cloned(),
            ),
            _ => (
                Verdict::Deny(
                    answer["message"]
                        .as_str()
                        .map_or_else(|| format!("denied by {name}"), str::to_owned),
                ),
                None,
            ),
        }
    }

    async fn record(&self, history: &mut History, event: EventKind) -> Result<(), SinkError> {
        history.apply(&event);
        self.sink.commit(event).await
    }

    async fn result(
        &self,
        history: &mut History,
        id: &str,
        out: ToolOutput,
    ) -> Result<(), SinkError> {
        self.result_with(history, id, out, None).await
    }

    async fn result_with(
        &self,
        history: &mut History,
        id: &str,
        out: ToolOutput,
        snapshot: Option<WorkspaceSnapshot>,
    ) -> Result<(), SinkError> {
        self.record(
            history,
            EventKind::ToolResult {
                tool_call_id: id.to_owned(),
                content: out.content,
                is_error: out.is_error,
                details: out.details,
                snapshot,
            },
        )
        .await
    }

    /// Runs `calls` and records a result for every one of them, in batches: consecutive read-only
    /// calls together, each mutating call alone. Returns whether the turn was cancelled.
    pub async fn run(&self, calls: Vec<Call>, history: &mut History) -> Result<bool, SinkError> {
        let mut batches: Vec<Vec<Call>> = Vec::new();
        for call in calls {
            let read_only = self
                .ctx
                .tools
                .find(&call.name)
                .is_some_and(|t| t.is_read_only());
            match batches.last_mut() {
                Some(batch)
                    if read_only
                        && batch.iter().all(|c| {
                            self.ctx
                                .tools
                                .find(&c.name)
                                .is_some_and(|t| t.is_read_only())
                        }) =>
                {
                    batch.push(call)
                }
                _ => batches.push(vec![call]),
            }
        }
        let mut cancelled = false;
        for batch in batches {
            if cancelled || self.cancel.is_cancelled() {
                cancelled = true;
                for call in batch {
                    self.result(history, &call.id, ToolOutput::error(INTERRUPTED))
                        .await?;
                }
                continue;
            }
            cancelled = self.run_batch(batch, history).await?;
        }
        Ok(cancelled)
    }

    async fn run_batch(&self, batch: Vec<Call>, history: &mut History) -> Result<bool, SinkError> {
        let mut running: JoinSet<(String, ToolOutput, Option<WorkspaceSnapshot>)> = JoinSet::new();
        let mut unanswered: Vec<String> = Vec::new();
        for mut call in batch {
            // Write-ahead: the call is durable before it runs.
            if !call.logged {
                self.record(
                    history,
                    EventKind::ToolCall {
                        tool_call_id: call.id.clone(),
                        name: call.name.clone(),
                        input: call.input.clone(),
                    },
                )
                .await?;
            }
            let Some(tool) = self.ctx.tools.find(&call.name) else {
                let msg = format!(
                    "there is no tool named {:?}; the available tools are: {}",
                    call.name,
                    self.ctx.tools.names().join(", ")
                );
                self.result(history, &call.id, ToolOutput::error(msg))
                    .await?;
                continue;
            };
            if let Err(msg) = self.ctx.tools.validate(&call.name, &call.input) {
                self.result(history, &call.id, ToolOutput::error(msg))
                    .await?;
                continue;
            }
            let cwd = self.ctx.workspace.cwd();
            // A file that must be read first is refused now, not after someone allowed it.
            if let Some(file) = tool.changes_file(&call.input)
                && let Err(msg) = self.ctx.workspace.check_fresh(&cwd.join(file))
            {
                self.result(history, &call.id, ToolOutput::error(msg))
                    .await?;
                continue;
            }
            let mut hook = None;
            if self.ctx.hooks.has(HookEvent::PreToolUse) {
                let mut input = self.ctx.hook_input_with(&cwd, history);
                input["tool_name"] = json!(tool.name());
                input["tool_input"] = call.input.clone();
                input["tool_use_id"] = json!(call.id);
                let outcome = self
                    .ctx
                    .hooks
                    .run(HookEvent::PreToolUse, Some(tool.name()), input, &cwd)
                    .await;
                for n in outcome.notices {
                    self.sink.send(EventKind::Notice {
                        level: tether_proto::NoticeLevel::Warning,
                        message: n,
                    });
                }
                if let Some(reason) = outcome.block {
                    // A decision like any other, for the audit.
                    self.sink.send(EventKind::PermissionDecided {
                        tool_call_id: call.id.clone(),
                        tool: tool.name().to_owned(),
                        decision: tether_proto::PermissionDecision::Deny,
                        source: tether_proto::DecisionSource::Hook,
                        rule: None,
                        rule_source: None,
                        mode: self.ctx.permission_mode,
                        input_hash: crate::permissions::input_hash(&call.input),
                    });
                    let msg = format!("blocked by a PreToolUse hook: {reason}");
                    self.result(history, &call.id, ToolOutput::error(msg))
                        .await?;
                    continue;
                }
                hook = outcome.permission;
                // `updatedInput`: the call runs with the hook's input, checked like the model's.
                if let Some(updated) = outcome.updated_input {
                    if let Err(msg) = self.ctx.tools.validate(&call.name, &updated) {
                        let msg = format!("a PreToolUse hook's updatedInput is invalid: {msg}");
                        self.result(history, &call.id, ToolOutput::error(msg))
                            .await?;
                        continue;
                    }
                    call.input = updated;
                }
            }
            let ask = super::sink::PermissionAsk {
                tool_call_id: call.id.clone(),
                tool: tool.name().to_owned(),
                input: call.input.clone(),
                read_only: tool.is_read_only(),
                hook,
                delegated: self.ctx.prompt_tool.is_some(),
            };
            let mut verdict = tokio::select! {
                v = self.sink.authorize(ask) => v?,
                _ = self.cancel.cancelled() => super::sink::Verdict::Deny(INTERRUPTED.to_owned()),
            };
            let mut updated = None;
            let mut from = "the permission prompt tool";
            if verdict == super::sink::Verdict::Ask {
                let answer;
                (answer, updated) = self.ask_prompt_tool(&call, tool.name()).await;
                verdict = answer;
            } else if let super::sink::Verdict::AllowWith(input) = &verdict {
                updated = Some(input.clone());
                from = "the controller";
                verdict = super::sink::Verdict::Allow;
            }
            if let Some(updated) = updated {
                match self.ctx.tools.validate(&call.name, &updated) {
                    Ok(()) => call.input = updated,
                    Err(msg) => {
                        verdict = super::sink::Verdict::Deny(format!(
                            "{from}'s updatedInput is invalid: {msg}"
                        ))
                    }
                }
            }
            if let super::sink::Verdict::Deny(msg) = verdict {
                self.result(history, &call.id, ToolOutput::error(msg))
                    .await?;
                continue;
            }
            // The working tree before the turn's first change, for /rewind.
            let snapshots = tool
                .changes_files()
                .then(|| self.ctx.snapshots.clone())
                .flatten();
            let mut before = None;
            if let Some(s) = &snapshots
                && let Some(taken) = s
                    .before(format!("before {} {}", tool.name(), call.id))
                    .await
            {
                match taken {
                    Ok(t) => before = Some(t.commit),
                    Err(e) => snapshot_failed(&*self.sink, s, &e, tool.name()),
                }
            }
            let sink = self.sink.clone();
            let emit_sink = self.sink.clone();
            let id = call.id.clone();
            let meter = self.ctx.budget.clone();
            let ctx = ToolContext {
                meter: Arc::new(move |cost| {
                    if let Some(budget) = &meter {
                        budget.spend(cost);
                    }
                }),
                call_id: call.id.clone(),
                emit: Arc::new(move |event| emit_sink.send(event)),
                subagents: self.subagents.clone(),
                net: Some(self.ctx.net.clone()),
                spent: self.spent.clone(),
                workspace: self.ctx.workspace.clone(),
                cancel: self.cancel.child_token(),
                progress: Arc::new(move |chunk: String| {
                    sink.send(EventKind::ToolProgress {
                        tool_call_id: id.clone(),
                        chunk,
                    })
                }),
            };
            let timeout = self.ctx.limits.tool_timeout;
            let name = call.name.clone();
            let id = call.id.clone();
            unanswered.push(id.clone());
            let hooks = self.ctx.hooks.clone();
            let after =
                hooks.has(HookEvent::PostToolUse) || hooks.has(HookEvent::PostToolUseFailure);
            let mut post_input = if after {
                self.ctx.hook_input_with(&self.ctx.workspace.cwd(), history)
            } else {
                self.ctx.hook_input(&self.ctx.workspace.cwd())
            };
            post_input["tool_name"] = json!(tool.name());
            post_input["tool_input"] = call.input.clone();
            post_input["tool_use_id"] = json!(call.id);
            let hook_sink = self.sink.clone();
            let given = ["file_path", "notebook_path", "path"]
                .iter()
                .find_map(|k| call.input[*k].as_str().map(str::to_owned))
                .unwrap_or_default();
            let span = tracing::info_span!(
                "tool",
                tool.name = %name,
                tool.call_id = %id,
                outcome = tracing::field::Empty,
                duration_ms = tracing::field::Empty,
            );
            let task = async move {
                let started = std::time::Instant::now();
                let note = ctx.relative_note(&given);
                let out = tokio::select! {
                    out = tool.run(call.input, &ctx) => out,
                    _ = tokio::time::sleep(timeout) => {
                        ctx.cancel.cancel();
                        ToolOutput::error(format!("{name} timed out after {}s and was stopped", timeout.as_secs()))
                    }
                };
                let mut out = with_note(out, note);
                // Claude Code's split: PostToolUse after a success, PostToolUseFailure after
                // a failure (with the error's text).
                let event = if out.is_error {
                    HookEvent::PostToolUseFailure
                } else {
                    HookEvent::PostToolUse
                };
                if hooks.has(event) {
                    let mut input = post_input;
                    if out.is_error {
                        input["error"] = json!(tether_proto::content_text(&out.content));
                        input["is_interrupt"] = json!(ctx.cancel.is_cancelled());
                    } else {
                        input["tool_response"] = crate::hooks::tool_response(
                            &name,
                            &input["tool_input"],
                            &out.content,
                            out.details.as_ref(),
                        );
                    }
                    let cwd = ctx.workspace.cwd();
                    let outcome = hooks.run(event, Some(&name), input, &cwd).await;
                    for n in outcome.notices {
                        hook_sink.send(EventKind::Notice {
                            level: tether_proto::NoticeLevel::Warning,
                            message: n,
                        });
                    }
                    let extra: Vec<String> = outcome
                        .block
                        .map(|b| format!("{event} hook: {b}"))
                        .into_iter()
                        .chain(outcome.context)
                        .collect();
                    if let (false, serde_json::Value::String(text)) =
                        (extra.is_empty(), &mut out.content)
                    {
                        text.push_str(&format!("\n\n{}", extra.join("\n")));
                    }
                }
                // A file in a folder with its own instructions, or one a path rule names,
                // brings them the first time it is touched.
                if !out.is_error && !given.is_empty() && TOUCHES_FILES.contains(&name.as_str()) {
                    let file = ctx.workspace.cwd().join(&given);
                    let workspace = ctx.workspace.clone();
                    let told = tokio::task::spawn_blocking(move || workspace.memory_for(&file))
                        .await
                        .ok()
                        .flatten();
                    if let (Some(told), serde_json::Value::String(text)) = (told, &mut out.content)
                    {
                        text.push_str(&format!("\n\n{told}"));
                    }
                }
                // Before the result is committed, so the result names the tree it left.
                let mut snapshot = None;
                if let Some(s) = &snapshots {
                    match s.take(format!("after {name} {id}")).await {
                        Ok(t) => {
                            match s.shadow.left_out(&t) {
                                Some(e) => snapshot_failed(&*hook_sink, s, &e, &name),
                                None => drop(s.shadow.tell_once(Ok(()))),
                            }
                            snapshot = Some(WorkspaceSnapshot {
                                commit: t.commit,
                                tree: t.tree,
                                before,
                            });
                        }
                        Err(e) => snapshot_failed(&*hook_sink, s, &e, &name),
                    }
                }
                let outcome = if out.is_error { "error" } else { "ok" };
                let took = started.elapsed();
                let span = tracing::Span::current();
                span.record("outcome", outcome);
                span.record("duration_ms", took.as_millis() as u64);
                crate::telemetry::tool_finished(&name, took, outcome);
                (id, out, snapshot)
            };
            running.spawn(tracing::Instrument::instrument(task, span));
        }
        let mut cancelled = false;
        while !running.is_empty() {
            let joined = tokio::select! {
                j = running.join_next() => j,
                _ = self.cancel.cancelled(), if !cancelled => {
                    cancelled = true;
                    // Tools see their child token fire; give them a moment to stop, then abort.
                    let grace = tokio::time::sleep(Duration::from_secs(2));
                    tokio::pin!(grace);
                    loop {
                        tokio::select! {
                            j = running.join_next() => match j {
                                Some(Ok((id, out, snapshot))) => {
                                    unanswered.retain(|u| *u != id);
                                    self.result_with(history, &id, out, snapshot).await?;
                                }
                                Some(Err(_)) => {}
                                None => break,
                            },
                            _ = &mut grace => { running.abort_all(); }
                        }
                    }
                    None
                }
            };
            match joined {
                Some(Ok((id, out, snapshot))) => {
                    unanswered.retain(|u| *u != id);
                    self.result_with(history, &id, out, snapshot).await?;
                }
                Some(Err(e)) if e.is_panic() => {
                    tracing::error!("a tool panicked: {e}");
                }
                Some(Err(_)) | None => {}
            }
        }
        // Calls whose task panicked or was aborted still get a result.
        for id in unanswered {
            let msg = if cancelled {
                INTERRUPTED.to_owned()
            } else {
                "the tool crashed while running; its work may be incomplete".to_owned()
            };
            self.result(history, &id, ToolOutput::error(msg)).await?;
        }
        Ok(cancelled)
    }
}

/// Tells the session once why its working tree was not recorded (the same reason is not told
/// again until a snapshot succeeds).
fn snapshot_failed(
    sink: &dyn TurnSink,
    snapshots: &crate::snapshots::TurnSnapshots,
    e: &crate::snapshots::SnapshotError,
    tool: &str,
) {
    tracing::warn!("workspace snapshot around a {tool} call: {e}");
    if let Some(why) = snapshots.shadow.tell_once(Err(e)) {
        let message = match e {
            crate::snapshots::SnapshotError::LeftOut { .. } => {
                format!("after this {tool} call, some files were {why}")
            }
            _ => format!(
                "the working tree was not recorded after this {tool} call, so /rewind cannot restore it: {why}"
            ),
        };
        sink.send(EventKind::Notice {
            level: tether_proto::NoticeLevel::Warning,
            message,
        });
    }
}
