//! Compaction: the history is summarized by the model and the conversation continues from the
//! summary. Triggered automatically near the context limit, after "prompt is too long", or by
//! `/compact`. Three failures in a row stop the automatic attempts.

use super::history::History;
use super::sink::{SinkError, TurnSink};
use crate::llm::{Message, MessagesRequest, Model, Role, SystemBlock, ToolDefinition};
use serde_json::json;
use std::sync::Arc;
use tether_proto::EventKind;
use tokio_util::sync::CancellationToken;

/// Failures in a row after which automatic compaction stops.
pub const MAX_FAILURES: u32 = 3;

const SYSTEM: &str = "You summarize a coding session so it can continue in a fresh context. \
You write for the agent that will carry on the work, not for the user.";

const INSTRUCTIONS: &str = "Summarize this conversation so the work can continue without it. Keep, precisely:
1. What the user asked for and every constraint or preference they stated, in their words where it matters.
2. Decisions made and why; approaches tried and rejected.
3. Files read, created or changed (absolute paths), with what changed and anything notable about them.
4. Commands run and what their results showed (errors verbatim when they matter).
5. Open tasks and the exact next step.
Do not call tools. Answer with the summary only.";

/// What a compaction produced.
pub struct Compacted {
    /// Tokens the summarizing request used.
    pub usage: crate::llm::Usage,
}

/// Summarizes `history`, emitting `compaction_started` and then `compaction_completed` (or an
/// `error` with code `compaction_failed`). Returns the usage on success.
#[allow(clippy::too_many_arguments)]
pub async fn compact(
    llm: &dyn Model,
    catalog: &crate::llm::ModelCatalog,
    model_id: &str,
    tools: &[ToolDefinition],
    history: &mut History,
    sink: &Arc<dyn TurnSink>,
    reason: &str,
    extra: Option<&str>,
    cancel: &CancellationToken,
) -> Result<Option<Compacted>, SinkError> {
    let started = EventKind::CompactionStarted {
        reason: reason.to_owned(),
    };
    history.apply(&started);
    sink.commit(started).await?;
    let mut messages = history.messages();
    let mut ask = INSTRUCTIONS.to_owned();
    if let Some(extra) = extra.filter(|e| !e.trim().is_empty()) {
        ask.push_str("\nAlso: ");
        ask.push_str(extra.trim());
    }
    let ask = json!({"type": "text", "text": ask});
    match messages.last_mut() {
        Some(last) if last.role == Role::User => Arc::make_mut(&mut last.content).push(ask),
        _ => messages.push(Message {
            role: Role::User,
            content: Arc::new(vec![ask]),
        }),
    }
    let mut request = MessagesRequest::new(model_id, 8192, messages);
    request.system = vec![SystemBlock::text(SYSTEM)];
    request.tools = tools.to_vec();
    if !request.tools.is_empty() {
        request.tool_choice = Some(json!({"type": "none"}));
    }
    catalog.shape(&mut request, &crate::llm::RequestPolicy::internal());
    let request = request.with_cache_breakpoints(crate::llm::CacheTtl::FiveMinutes);
    let tokens_before = history.last_context_tokens;
    let result = llm.stream(&request, &mut |_| {}, cancel).await;
    let failure = match result {
        Ok(message) => {
            let summary: String = message
                .content()
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n");
            if !summary.trim().is_empty() {
                let done = EventKind::CompactionCompleted {
                    tokens_before,
                    tokens_after: message.usage.output_tokens,
                    summary: summary.trim().to_owned(),
                };
                history.apply(&done);
                sink.commit(done).await?;
                return Ok(Some(Compacted {
                    usage: message.usage,
                }));
            }
            "the summary came back empty".to_owned()
        }
        Err(e) => e.to_string(),
    };
    let err = EventKind::Error {
        code: super::history::COMPACTION_FAILED.into(),
        message: format!("compaction failed: {failure}"),
    };
    history.apply(&err);
    sink.commit(err).await?;
    if history.compaction_failures >= MAX_FAILURES {
        sink.send(EventKind::Notice {
            level: tether_proto::NoticeLevel::Warning,
            message: format!(
                "compaction failed {MAX_FAILURES} times in a row; automatic compaction is off until one succeeds (try /compact)"
            ),
        });
    }
    Ok(None)
}
