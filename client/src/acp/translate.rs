//! Tether's session events as ACP `session/update`s: one `Translator` per session, fed every
//! event in log order (replayed or live), answering the updates the editor gets. Pure but for
//! one read: a live permission request to write over a file shows what it would replace.

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, Cost, CurrentModeUpdate, Diff, Plan, PlanEntry, PlanEntryPriority,
    PlanEntryStatus, SessionInfoUpdate, SessionUpdate, ToolCall, ToolCallContent, ToolCallLocation,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind, UsageUpdate,
};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use tether_proto::content_text;

/// The most tool output one update carries (the tail is kept).
const OUTPUT_LIMIT: usize = 64 * 1024;

/// What the session is set to, as the events said it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// Model alias or id.
    pub model: String,
    /// Effort level (`""`: the model's default).
    pub effort: String,
    /// Permission mode (`default`, `acceptEdits`, …).
    pub mode: String,
    /// Title.
    pub title: Option<String>,
}

/// What a change of settings asks the bridge to tell the editor besides the updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Changed {
    /// The model or the effort changed: the config options are new.
    pub options: bool,
}

/// One session's event-to-update state.
#[derive(Debug, Default)]
pub struct Translator {
    /// The session's settings so far.
    pub settings: Settings,
    /// Text and thinking blocks of the current reply whose deltas were forwarded.
    streamed: HashSet<u32>,
    /// Tool calls the editor has been told about.
    announced: HashSet<String>,
    /// Each tool call's name and input.
    calls: HashMap<String, (String, Value)>,
    /// Output of running tools so far.
    output: HashMap<String, String>,
    /// Calls announced and not yet running: one runs once anything but its own hooks or
    /// permission request follows it (the daemon logs a call before it checks it).
    starting: Vec<String>,
    /// Open permission requests: request id → the call that waits for it.
    asked: HashMap<String, String>,
    /// Tokens in the context after the last request.
    context_used: Option<u64>,
    /// Context window of each model alias and id.
    windows: HashMap<String, u64>,
}

impl Translator {
    /// A translator that knows the context window of each model (`(alias or id, window)`).
    pub fn new(windows: impl IntoIterator<Item = (String, u64)>) -> Self {
        Self {
            windows: windows.into_iter().collect(),
            ..Self::default()
        }
    }

    /// The updates one event makes, and what else changed.
    pub fn event(&mut self, raw: &Value) -> (Vec<SessionUpdate>, Changed) {
        let data = &raw["data"];
        let mut changed = Changed::default();
        let kind = raw["type"].as_str().unwrap_or("");
        let mut updates = self.running(kind, data);
        updates.extend(match kind {
            "session_created" => {
                self.settings = Settings {
                    model: str_of(&data["model"]),
                    effort: String::new(),
                    mode: str_of(&data["permissionMode"]),
                    title: data["title"].as_str().map(str::to_owned),
                };
                vec![]
            }
            "session_configured" => self.configured(data, &mut changed),
            "turn_started" => {
                self.streamed.clear();
                vec![]
            }
            "assistant_block_started" => self.block_started(data),
            "text_delta" => self.delta(data, "text", SessionUpdate::AgentMessageChunk),
            "thinking_delta" => self.delta(data, "thinking", SessionUpdate::AgentThoughtChunk),
            "assistant_block_completed" => self.block_completed(data),
            "assistant_message_completed" => {
                let u = &data["usage"];
                self.context_used = Some(
                    [
                        "inputTokens",
                        "cacheReadInputTokens",
                        "cacheCreationInputTokens",
                    ]
                    .iter()
                    .chain(&["outputTokens"])
                    .map(|k| u[*k].as_u64().unwrap_or(0))
                    .sum(),
                );
                self.streamed.clear();
                vec![]
            }
            "retrying" if data["discarded"] == true => {
                self.streamed.clear();
                vec![SessionUpdate::AgentMessageChunk(chunk(
                    "\n\n*(retrying: the partial answer above is void)*\n\n",
                ))]
            }
            "tool_call" => self.tool_call(data),
            "tool_progress" => self.tool_progress(data),
            "tool_result" => self.tool_result(data),
            "plan_updated" => vec![plan(data)],
            "usage_updated" => self.usage(data).into_iter().collect(),
            // A command's answer (`/cost`, `/model`) or a warning during a turn.
            "notice" if raw.get("turnId").is_some() => {
                let text = str_of(&data["message"]);
                let text = if data["level"] == "warning" {
                    format!("\n\n> ⚠ {text}\n\n")
                } else {
                    format!("{text}\n")
                };
                vec![SessionUpdate::AgentMessageChunk(chunk(text))]
            }
            "error" if raw.get("turnId").is_some() => {
                vec![SessionUpdate::AgentMessageChunk(chunk(format!(
                    "\n\n**Error:** {}\n\n",
                    str_of(&data["message"])
                )))]
            }
            _ => vec![],
        });
        (updates, changed)
    }

    /// The user message of a `turn_started` event, as the editor shows one it did not send.
    pub fn user_message(raw: &Value) -> Vec<SessionUpdate> {
        let Some(items) = raw["data"]["input"].as_array() else {
            return vec![];
        };
        items
            .iter()
            .filter_map(|item| match item["type"].as_str() {
                Some("text") => item["text"].as_str().map(str::to_owned),
                Some("file") => item["path"].as_str().map(|p| format!("@{p}")),
                Some("image") => Some("[image]".to_owned()),
                _ => None,
            })
            .map(|text| SessionUpdate::UserMessageChunk(chunk(text)))
            .collect()
    }

    fn configured(&mut self, data: &Value, changed: &mut Changed) -> Vec<SessionUpdate> {
        let mut updates = vec![];
        if let Some(model) = data["model"].as_str() {
            self.settings.model = model.to_owned();
            changed.options = true;
        }
        if let Some(effort) = data["effort"].as_str() {
            self.settings.effort = effort.to_owned();
            changed.options = true;
        }
        if let Some(mode) = data["permissionMode"].as_str() {
            self.settings.mode = mode.to_owned();
            updates.push(SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(
                mode.to_owned(),
            )));
        }
        if let Some(title) = data["title"].as_str() {
            self.settings.title = Some(title.to_owned());
            updates.push(SessionUpdate::SessionInfoUpdate(
                SessionInfoUpdate::new().title(title.to_owned()),
            ));
        }
        updates
    }

    fn block_started(&mut self, data: &Value) -> Vec<SessionUpdate> {
        let block = &data["block"];
        if block["type"] != "tool_use" {
            return vec![];
        }
        let (Some(id), Some(name)) = (block["id"].as_str(), block["name"].as_str()) else {
            return vec![];
        };
        if !self.announced.insert(id.to_owned()) {
            return vec![];
        }
        vec![SessionUpdate::ToolCall(
            ToolCall::new(id.to_owned(), name.to_owned())
                .kind(kind_of(name))
                .status(ToolCallStatus::Pending),
        )]
    }

    fn delta(
        &mut self,
        data: &Value,
        field: &str,
        wrap: fn(ContentChunk) -> SessionUpdate,
    ) -> Vec<SessionUpdate> {
        let Some(text) = data[field].as_str().filter(|t| !t.is_empty()) else {
            return vec![];
        };
        if let Some(index) = data["index"].as_u64() {
            self.streamed.insert(index as u32);
        }
        vec![wrap(chunk(text))]
    }

    fn block_completed(&mut self, data: &Value) -> Vec<SessionUpdate> {
        let block = &data["block"];
        let index = data["index"].as_u64().unwrap_or(u64::MAX) as u32;
        match block["type"].as_str() {
            // A replay whose deltas were pruned has only the completed blocks.
            Some("text") if !self.streamed.contains(&index) => block["text"]
                .as_str()
                .map(|t| SessionUpdate::AgentMessageChunk(chunk(t)))
                .into_iter()
                .collect(),
            Some("thinking") if !self.streamed.contains(&index) => block["thinking"]
                .as_str()
                .filter(|t| !t.is_empty())
                .map(|t| SessionUpdate::AgentThoughtChunk(chunk(t)))
                .into_iter()
                .collect(),
            Some("tool_use") => {
                let (Some(id), Some(name)) = (block["id"].as_str(), block["name"].as_str()) else {
                    return vec![];
                };
                let input = block["input"].clone();
                self.calls
                    .insert(id.to_owned(), (name.to_owned(), input.clone()));
                let fields = described(name, &input).status(ToolCallStatus::Pending);
                if self.announced.insert(id.to_owned()) {
                    match ToolCall::try_from(ToolCallUpdate::new(id.to_owned(), fields)) {
                        Ok(call) => vec![SessionUpdate::ToolCall(call)],
                        Err(_) => vec![],
                    }
                } else {
                    vec![SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                        id.to_owned(),
                        fields,
                    ))]
                }
            }
            _ => vec![],
        }
    }

    /// The calls that `kind` shows to be running now: those announced before it, unless it is
    /// one of their hooks or their permission request (an allowed request runs its call).
    fn running(&mut self, kind: &str, data: &Value) -> Vec<SessionUpdate> {
        let in_progress = |id: String| {
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                id,
                ToolCallUpdateFields::new().status(ToolCallStatus::InProgress),
            ))
        };
        match kind {
            // A hook's run and what it says come before the call runs.
            "hook_started" | "hook_response" | "session_status" | "notice" => vec![],
            // Another call's output says nothing about this one (a parallel call may be
            // running while the next is still being checked).
            "tool_progress" | "tool_result" => {
                let Some(id) = data["toolCallId"].as_str() else {
                    return vec![];
                };
                match self.starting.iter().position(|c| c == id) {
                    Some(at) => vec![in_progress(self.starting.remove(at))],
                    None => vec![],
                }
            }
            "permission_requested" => {
                if let (Some(call), Some(request)) =
                    (data["toolCallId"].as_str(), data["requestId"].as_str())
                    && let Some(at) = self.starting.iter().position(|c| c == call)
                {
                    self.starting.remove(at);
                    self.asked.insert(request.to_owned(), call.to_owned());
                }
                vec![]
            }
            "permission_resolved" => {
                let request = data["requestId"].as_str().unwrap_or_default();
                let allowed = data["decision"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("allow"));
                match self.asked.remove(request) {
                    Some(call) if allowed => vec![in_progress(call)],
                    _ => vec![],
                }
            }
            _ => self.starting.drain(..).map(in_progress).collect(),
        }
    }

    fn tool_call(&mut self, data: &Value) -> Vec<SessionUpdate> {
        let Some(id) = data["toolCallId"].as_str() else {
            return vec![];
        };
        let name = str_of(&data["name"]);
        let input = data["input"].clone();
        self.calls
            .insert(id.to_owned(), (name.clone(), input.clone()));
        // Pending until it is seen to run (after its hooks and any permission request).
        let fields = described(&name, &input).status(ToolCallStatus::Pending);
        self.starting.push(id.to_owned());
        if self.announced.insert(id.to_owned()) {
            if let Ok(call) = ToolCall::try_from(ToolCallUpdate::new(id.to_owned(), fields)) {
                return vec![SessionUpdate::ToolCall(call)];
            }
            return vec![];
        }
        vec![SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            id.to_owned(),
            fields,
        ))]
    }

    fn tool_progress(&mut self, data: &Value) -> Vec<SessionUpdate> {
        let (Some(id), Some(piece)) = (data["toolCallId"].as_str(), data["chunk"].as_str()) else {
            return vec![];
        };
        let output = self.output.entry(id.to_owned()).or_default();
        output.push_str(piece);
        if output.len() > OUTPUT_LIMIT * 2 {
            let cut = floor_boundary(output, output.len() - OUTPUT_LIMIT);
            output.replace_range(..cut, "");
        }
        let shown = fenced(tail(output, OUTPUT_LIMIT));
        vec![SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            id.to_owned(),
            ToolCallUpdateFields::new().content(vec![text_content(shown)]),
        ))]
    }

    fn tool_result(&mut self, data: &Value) -> Vec<SessionUpdate> {
        let Some(id) = data["toolCallId"].as_str() else {
            return vec![];
        };
        self.output.remove(id);
        let failed = data["isError"] == true;
        let name = self
            .calls
            .remove(id)
            .map(|(name, _)| name)
            .unwrap_or_default();
        let mut fields = ToolCallUpdateFields::new()
            .status(if failed {
                ToolCallStatus::Failed
            } else {
                ToolCallStatus::Completed
            })
            .raw_output(data["content"].clone());
        // An edit's content is its diff, already shown; anything else shows what it returned.
        if failed || kind_of(&name) != ToolKind::Edit {
            let text = content_text(&data["content"]);
            let shown = if kind_of(&name) == ToolKind::Execute || failed {
                fenced(tail(&text, OUTPUT_LIMIT))
            } else {
                tail(&text, OUTPUT_LIMIT).to_owned()
            };
            fields = fields.content(vec![text_content(shown)]);
        }
        vec![SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            id.to_owned(),
            fields,
        ))]
    }

    fn usage(&self, data: &Value) -> Option<SessionUpdate> {
        let size = *self.windows.get(&self.settings.model)?;
        let used = self.context_used.unwrap_or(0);
        let mut update = UsageUpdate::new(used, size);
        if let Some(cost) = data["sessionCostUsd"].as_f64() {
            update = update.cost(Cost::new(cost, "USD"));
        }
        Some(SessionUpdate::UsageUpdate(update))
    }

    /// A note on a tool call (who answered its permission request).
    pub fn note(tool_call_id: &str, text: String) -> SessionUpdate {
        SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            tool_call_id.to_owned(),
            ToolCallUpdateFields::new().content(vec![text_content(text)]),
        ))
    }

    /// The title, kind, locations and content of a call the editor is asked about now: a
    /// Write over an existing file carries the text it replaces (read now, while the request
    /// is open, so it is what the write would change).
    pub fn described_call(&self, tool_call_id: &str, name: &str, input: &Value) -> ToolCallUpdate {
        let mut fields = described(name, input);
        if let ("Write", Some(path)) = (name, input["file_path"].as_str()) {
            let old = std::fs::metadata(path)
                .ok()
                .filter(|m| m.is_file() && m.len() <= MAX_OLD_TEXT)
                .and_then(|_| std::fs::read_to_string(path).ok());
            if let Some(old) = old {
                let diff = Diff::new(path, str_of(&input["content"])).old_text(old);
                fields = fields.content(vec![diff.into()]);
            }
        }
        ToolCallUpdate::new(tool_call_id.to_owned(), fields)
    }
}

/// The largest existing file a Write's diff carries in full.
const MAX_OLD_TEXT: u64 = 1024 * 1024;

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

fn chunk(text: impl Into<String>) -> ContentChunk {
    ContentChunk::new(ContentBlock::from(text.into()))
}

fn text_content(text: String) -> ToolCallContent {
    ToolCallContent::from(ContentBlock::from(text))
}

/// Text in a fence no line of it can close.
fn fenced(text: &str) -> String {
    let mut fence = "```".to_owned();
    while text.contains(&fence) {
        fence.push('`');
    }
    format!("{fence}\n{}\n{fence}", text.trim_end_matches('\n'))
}

/// The last `max` bytes of `text`, cut at a character boundary.
fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    &text[floor_boundary(text, text.len() - max)..]
}

fn floor_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// What kind of tool a name is, for the editor's icon.
pub fn kind_of(name: &str) -> ToolKind {
    match name {
        "Read" | "NotebookRead" => ToolKind::Read,
        "Edit" | "MultiEdit" | "Write" | "NotebookEdit" => ToolKind::Edit,
        "Bash" | "BashOutput" | "KillShell" | "KillBash" => ToolKind::Execute,
        "Glob" | "Grep" | "LS" => ToolKind::Search,
        "WebFetch" | "WebSearch" => ToolKind::Fetch,
        "TodoWrite" | "Task" | "Agent" => ToolKind::Think,
        "ExitPlanMode" | "EnterPlanMode" => ToolKind::SwitchMode,
        _ => ToolKind::Other,
    }
}

/// A call's title, kind, input, locations and (for edits) diffs.
fn described(name: &str, input: &Value) -> ToolCallUpdateFields {
    let path = ["file_path", "notebook_path", "path"]
        .iter()
        .find_map(|k| input[*k].as_str());
    let s = |k: &str| input[k].as_str().unwrap_or_default().to_owned();
    let title = match name {
        "Bash" => format!("`{}`", s("command").replace('`', "'")),
        "Read" | "Edit" | "MultiEdit" | "Write" | "NotebookEdit" => {
            format!("{name} {}", path.unwrap_or_default())
        }
        "Grep" => match path {
            Some(p) => format!("grep \"{}\" {p}", s("pattern")),
            None => format!("grep \"{}\"", s("pattern")),
        },
        "Glob" => format!("Find {}", s("pattern")),
        "WebFetch" => format!("Fetch {}", s("url")),
        "WebSearch" => format!("Search \"{}\"", s("query")),
        "TodoWrite" => "Update the plan".to_owned(),
        "Task" | "Agent" => format!("Agent: {}", s("description")),
        _ => name.to_owned(),
    };
    let mut fields = ToolCallUpdateFields::new()
        .title(title)
        .kind(kind_of(name))
        .raw_input(input.clone());
    if let Some(p) = path {
        let mut location = ToolCallLocation::new(p);
        if let Some(line) = input["offset"].as_u64().filter(|l| *l > 0) {
            location = location.line(line as u32);
        }
        fields = fields.locations(vec![location]);
    }
    let diffs: Vec<ToolCallContent> = match (name, path) {
        ("Edit", Some(p)) => vec![
            Diff::new(p, s("new_string"))
                .old_text(s("old_string"))
                .into(),
        ],
        ("MultiEdit", Some(p)) => input["edits"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                Diff::new(p, str_of(&e["new_string"]))
                    .old_text(str_of(&e["old_string"]))
                    .into()
            })
            .collect(),
        ("Write", Some(p)) => vec![Diff::new(p, s("content")).into()],
        _ => vec![],
    };
    if !diffs.is_empty() {
        fields = fields.content(diffs);
    }
    fields
}

/// TodoWrite's list as the editor's plan.
fn plan(data: &Value) -> SessionUpdate {
    let entries = data["todos"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let status = match t["status"].as_str() {
                Some("completed") => PlanEntryStatus::Completed,
                Some("in_progress") => PlanEntryStatus::InProgress,
                _ => PlanEntryStatus::Pending,
            };
            let priority = match t["priority"].as_str() {
                Some("high") => PlanEntryPriority::High,
                Some("low") => PlanEntryPriority::Low,
                _ => PlanEntryPriority::Medium,
            };
            PlanEntry::new(str_of(&t["content"]), priority, status)
        })
        .collect();
    SessionUpdate::Plan(Plan::new(entries))
}

#[cfg(test)]
mod tests;
