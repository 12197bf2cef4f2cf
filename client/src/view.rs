//! The interactive transcript: events in, terminal text out — a pure function of the events
//! (and the style), so it is snapshot-tested. Reply text is rendered as Markdown line by line as
//! it streams; thinking is one dim line; a tool call is one line with its key argument, its
//! progress a dim tail, its result folded; Edit results are a coloured diff; errors and retries
//! stand out; a turn ends with its duration, tokens and cost.
//!
//! Besides what is printed for good, [`View::live`] is the transient area under it while a turn
//! runs: the tool call whose input is streaming, a spinner with the elapsed time of each running
//! tool and the tail of its output, the reply line still being written.

use crate::markdown::Markdown;
use crate::render;
use crate::style::Style;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use tether_proto::{ConnectionId, Event, EventKind, InputItem, NoticeLevel, StopReason};

/// Lines of a tool result shown before folding.
const RESULT_LINES: usize = 4;
/// Folded tool results kept for `/expand`.
const KEPT_FOLDS: usize = 20;
/// Lines of a diff shown before folding.
const DIFF_LINES: usize = 24;
/// Lines of a running tool's output kept in the live area.
const TAIL_LINES: usize = 5;
/// Most lines the live area takes.
const LIVE_LINES: usize = 12;
/// Spinner frames, one per 100 ms.
const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// A tool call that has started and not yet returned.
struct RunningTool {
    id: String,
    name: String,
    argument: String,
    /// When it started running: its `tool_call` event, or the answer to its permission request
    /// (the wait for the answer is not its running time).
    since: Option<std::time::SystemTime>,
    /// Its permission request is open.
    asking: bool,
    /// The last lines of its output.
    tail: std::collections::VecDeque<String>,
}

/// The state of a rendered transcript.
pub struct View {
    style: Style,
    /// This client's connection: its own prompts and presence are not echoed.
    me: Option<ConnectionId>,
    /// Whether thinking is shown in full.
    pub show_thinking: bool,
    markdown: Option<Markdown>,
    /// Streamed paragraphs are printed row by row (the terminal's prompt is up, so there is no
    /// live area to preview them in).
    pub rows: bool,
    /// Text blocks that streamed (their completed event is not printed again).
    streamed: HashSet<(Option<String>, u32)>,
    /// Tool call id → tool name.
    tools: HashMap<String, String>,
    /// Each call's header (`Read(src/a.rs)`), to label a result that does not follow it.
    headers: HashMap<String, String>,
    /// The call whose header was printed last, if nothing was printed since.
    last_header: Option<String>,
    /// When the current turn started.
    turn_started: Option<String>,
    /// An `error` event was shown for the current turn (its end does not repeat it).
    errored: bool,
    /// Whether a live area is drawn (a terminal): tool output goes there instead of the
    /// transcript.
    pub live: bool,
    /// Tool calls whose input is streaming: block index → (tool, partial JSON).
    inputs: HashMap<u32, (String, String)>,
    running: Vec<RunningTool>,
    /// When the running turn started, if one runs.
    turn_since: Option<std::time::SystemTime>,
    /// The latest thinking block, shown when thinking is expanded.
    last_thinking: Option<String>,
    /// Tool calls whose diff this terminal's permission prompt already showed.
    previewed: HashSet<String>,
    /// Open permission requests: request id → tool.
    asked: HashMap<String, String>,
    /// Open permission requests: request id → the call that waits for it.
    waiting: HashMap<String, String>,
    /// The text the model wrote in the latest turn (what `/copy` copies).
    reply: String,
    /// The latest folded tool results: the call's header and every line.
    folds: std::collections::VecDeque<(String, Vec<String>)>,
    /// A subscription's replay is being shown (until its `replay_complete`): who came and went
    /// back then is not news.
    pub replaying: bool,
}

/// Input fields worth showing for a tool call, in order of preference.
const KEY_FIELDS: [&str; 9] = [
    "command",
    "file_path",
    "notebook_path",
    "pattern",
    "url",
    "path",
    "description",
    "bash_id",
    "shell_id",
];

/// The argument worth showing for a tool call.
pub fn key_argument(input: &Value) -> String {
    let key = KEY_FIELDS
        .iter()
        .find_map(|k| input[*k].as_str())
        .unwrap_or("");
    let line = key.lines().next().unwrap_or("");
    if line.chars().count() > 80 {
        format!("{}…", line.chars().take(79).collect::<String>())
    } else {
        line.to_owned()
    }
}

/// The key argument of a tool call whose input JSON is still streaming: the value (so far) of
/// the first key [`key_argument`] knows.
pub fn partial_key_argument(partial: &str) -> String {
    if let Ok(input) = serde_json::from_str::<Value>(partial) {
        return key_argument(&input);
    }
    for key in KEY_FIELDS {
        let Some(at) = partial.find(&format!("\"{key}\"")) else {
            continue;
        };
        let rest = partial[at + key.len() + 2..].trim_start();
        let Some(rest) = rest.strip_prefix(':').map(str::trim_start) else {
            continue;
        };
        let Some(rest) = rest.strip_prefix('"') else {
            continue;
        };
        let mut value = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') | Some('r') | Some('t') => value.push(' '),
                    Some(other) => value.push(other),
                    None => break,
                },
                c => value.push(c),
            }
        }
        return key_argument(&serde_json::json!({ key: value }));
    }
    String::new()
}

/// Text the client prints itself (notices, help, hints) word-wrapped to a terminal of `width`
/// columns, never taking its last one: a wrapped line keeps its indentation.
pub fn wrap_text(text: &str, width: usize) -> Vec<String> {
    let room = width.saturating_sub(1).max(20);
    let mut out = Vec::new();
    for line in text.lines() {
        if textwrap::core::display_width(line) <= room {
            out.push(line.to_owned());
            continue;
        }
        let indent: String = line.chars().take_while(|c| c.is_whitespace()).collect();
        let options = textwrap::Options::new(room).subsequent_indent(&indent);
        out.extend(
            textwrap::wrap(line, options)
                .into_iter()
                .map(|l| l.into_owned()),
        );
    }
    out
}

/// Whether `kind` prints a line aside from the reply being streamed (it leaves its paragraph
/// open).
fn aside(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::ClientAttached { .. }
            | EventKind::ClientDetached { .. }
            | EventKind::SessionConfigured { .. }
            | EventKind::Notice { .. }
            | EventKind::BackgroundShellEnded { .. }
    )
}

/// A line of a program's output as one terminal row shows it: what follows the last `\r` (a
/// progress bar's latest state), without escape sequences or control characters, tabs as
/// spaces — so the live area's height is what it counts.
/// `line` cut to `width` visible columns (with `…`), its escape sequences kept and not counted;
/// a cut line ends with a style reset so the colour does not run on.
pub fn fit_visible(line: &str, width: usize) -> String {
    let mut out = String::with_capacity(line.len());
    let mut used = 0;
    let mut styled = false;
    // Where `out` ended after each visible character that leaves room for the ellipsis.
    let mut room_at = 0;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: ESC [ parameters final-byte; other escapes: ESC and one more character.
            out.push(c);
            styled = true;
            if chars.peek() == Some(&'[') {
                out.extend(chars.next());
                for d in chars.by_ref() {
                    out.push(d);
                    if ('\x40'..='\x7e').contains(&d) {
                        break;
                    }
                }
            } else {
                out.extend(chars.next());
            }
            continue;
        }
        let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used + w > width {
            out.truncate(room_at);
            out.push('…');
            if styled {
                out.push_str("\x1b[0m");
            }
            return out;
        }
        used += w;
        out.push(c);
        if used < width {
            room_at = out.len();
        }
    }
    out
}

pub fn printable(line: &str) -> String {
    let line = line.rsplit('\r').find(|l| !l.is_empty()).unwrap_or("");
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                // CSI: ESC [ params final-byte; OSC: ESC ] … BEL or ESC \; other escapes: ESC
                // and one more character.
                if chars.next_if_eq(&'[').is_some() {
                    for p in chars.by_ref() {
                        if ('@'..='~').contains(&p) {
                            break;
                        }
                    }
                } else if chars.next_if_eq(&']').is_some() {
                    while let Some(p) = chars.next() {
                        if p == '\x07' || (p == '\x1b' && chars.next_if_eq(&'\\').is_some()) {
                            break;
                        }
                    }
                } else {
                    chars.next();
                }
            }
            '\t' => out.push_str("    "),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// `text`'s first `max` lines, indented, printable and painted by `paint`, then how many more.
pub fn indented(text: &str, max: usize, style: Style, paint: impl Fn(&str) -> String) -> String {
    let lines: Vec<String> = text.lines().map(printable).collect();
    let mut out = String::new();
    for line in lines.iter().take(max) {
        out.push_str(&format!("    {}\n", paint(line)));
    }
    if lines.len() > max {
        let more = lines.len() - max;
        out.push_str(&format!(
            "    {}\n",
            style.dim(&format!("… {more} more lines"))
        ));
    }
    out
}

/// One line of a unified diff in colour: headers bold, additions and removals in their colours,
/// hunk markers dim.
pub fn diff_line(style: Style, line: &str) -> String {
    if line.starts_with("+++") || line.starts_with("---") {
        style.bold(line)
    } else if line.starts_with('+') {
        style.added(line)
    } else if line.starts_with('-') {
        style.removed(line)
    } else if line.starts_with("@@") {
        style.dim(line)
    } else {
        line.to_owned()
    }
}

/// `4 s`, `1 m 05 s`.
fn elapsed(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    if secs < 60 {
        format!("{secs} s")
    } else {
        format!("{} m {:02} s", secs / 60, secs % 60)
    }
}

fn seconds_between(from: &str, to: &str) -> Option<f64> {
    let a = humantime::parse_rfc3339_weak(from.trim_end_matches('Z')).ok()?;
    let b = humantime::parse_rfc3339_weak(to.trim_end_matches('Z')).ok()?;
    Some(b.duration_since(a).ok()?.as_secs_f64())
}

impl View {
    /// An empty transcript for the client `me`.
    pub fn new(style: Style, me: Option<ConnectionId>) -> Self {
        Self {
            style,
            me,
            show_thinking: false,
            markdown: None,
            rows: false,
            streamed: HashSet::new(),
            tools: HashMap::new(),
            headers: HashMap::new(),
            last_header: None,
            turn_started: None,
            errored: false,
            live: false,
            inputs: HashMap::new(),
            running: Vec::new(),
            turn_since: None,
            last_thinking: None,
            previewed: HashSet::new(),
            asked: HashMap::new(),
            waiting: HashMap::new(),
            reply: String::new(),
            folds: Default::default(),
            replaying: true,
        }
    }

    /// The permission prompt showed `tool_call_id`'s diff: its result says only what changed.
    pub fn previewed(&mut self, tool_call_id: &str) {
        self.previewed.insert(tool_call_id.to_owned());
    }

    /// Shows or folds thinking; returns what to print: when it opens, the latest thinking
    /// block, else one line saying the state.
    pub fn toggle_thinking(&mut self) -> String {
        let s = self.style;
        self.show_thinking = !self.show_thinking;
        if !self.show_thinking {
            return format!("{}\n", s.dim("thinking is folded"));
        }
        match self
            .last_thinking
            .as_deref()
            .filter(|t| !t.trim().is_empty())
        {
            Some(t) => format!(
                "{}\n{}",
                s.dim("thinking is shown (Ctrl+T folds it); the latest:"),
                self.thinking_lines(t)
            ),
            None => format!("{}\n", s.dim("thinking is shown")),
        }
    }

    /// A thinking block: a `✻ Thinking` header, then its text wrapped to the terminal and
    /// indented under it, dim and italic (nothing like a prompt or a reply).
    fn thinking_lines(&self, thinking: &str) -> String {
        let s = self.style;
        let width = s.width.saturating_sub(4).max(20);
        let mut out = format!("{}\n", s.dim("✻ Thinking"));
        for line in thinking.trim_end().lines().map(printable) {
            if line.trim().is_empty() {
                out.push('\n');
                continue;
            }
            for row in textwrap::wrap(&line, width) {
                out.push_str(&format!("  {}\n", s.dim(&s.italic(&row))));
            }
        }
        out
    }

    /// The terminal was resized: what is printed from now on fits `width` columns.
    pub fn set_width(&mut self, width: usize) {
        self.style.width = width;
        if let Some(md) = self.markdown.as_mut() {
            md.set_width(width);
        }
    }

    /// This client's connection changed (a reconnect); the transcript goes on.
    pub fn set_me(&mut self, me: ConnectionId) {
        self.me = Some(me);
    }

    /// The live area at `now`: lines to draw under the transcript (none when nothing runs).
    pub fn live(&self, now: std::time::SystemTime) -> Vec<String> {
        let s = self.style;
        let Some(turn_since) = self.turn_since else {
            return Vec::new();
        };
        let millis = now
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let spin = SPINNER[(millis / 100) as usize % SPINNER.len()];
        let fit = |line: String| -> String {
            let width = s.width.saturating_sub(1).max(10);
            if unicode_width::UnicodeWidthStr::width(line.as_str()) <= width {
                return line;
            }
            let mut out = String::new();
            let mut used = 0;
            for c in line.chars() {
                let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
                if used + w + 1 > width {
                    break;
                }
                used += w;
                out.push(c);
            }
            out.push('…');
            out
        };
        let mut lines = Vec::new();
        let mut inputs: Vec<_> = self.inputs.iter().collect();
        inputs.sort_by_key(|(i, _)| **i);
        for (_, (name, partial)) in inputs {
            let arg = partial_key_argument(partial);
            lines.push(s.tool(&fit(format!("● {name}({arg}…"))));
        }
        for tool in &self.running {
            let took = if tool.asking {
                " · waiting for permission".to_owned()
            } else {
                tool.since
                    .and_then(|t| now.duration_since(t).ok())
                    .map(|d| format!(" · {}", elapsed(d)))
                    .unwrap_or_default()
            };
            lines.push(fit(format!(
                "{spin} {}({}){took}",
                tool.name, tool.argument
            )));
            for line in &tool.tail {
                lines.push(s.dim(&fit(format!("  │ {line}"))));
            }
        }
        lines.truncate(LIVE_LINES);
        if lines.is_empty() {
            let preview = self
                .markdown
                .as_ref()
                .map(|m| m.preview())
                .unwrap_or_default();
            if preview.is_empty() {
                let took = now
                    .duration_since(turn_since)
                    .map(|d| format!(" · {}", elapsed(d)))
                    .unwrap_or_default();
                lines.push(s.dim(&format!("{spin} working{took} · Ctrl+C cancels")));
            } else {
                // The last rows of a long paragraph.
                let skip = preview.len().saturating_sub(LIVE_LINES);
                lines.extend(preview.into_iter().skip(skip));
            }
        }
        // Every row must fit: the REPL erases the live area by counting its lines, and a line
        // the terminal wrapped would leave a copy behind (long code lines, at any width).
        let width = s.width.saturating_sub(1).max(10);
        lines.into_iter().map(|l| fit_visible(&l, width)).collect()
    }

    /// The text the model wrote in the latest turn, its blocks a blank line apart.
    pub fn last_reply(&self) -> &str {
        &self.reply
    }

    /// Keeps track of what the live area shows.
    fn track(&mut self, ev: &Event) {
        let ts = humantime::parse_rfc3339_weak(ev.ts.trim_end_matches('Z')).ok();
        match &ev.kind {
            EventKind::TurnStarted { .. } => {
                self.turn_since = ts.or_else(|| Some(std::time::SystemTime::now()));
                self.reply.clear();
            }
            EventKind::AssistantBlockCompleted { block, .. } if block["type"] == "text" => {
                if !self.reply.is_empty() {
                    self.reply.push_str("\n\n");
                }
                self.reply
                    .push_str(block["text"].as_str().unwrap_or_default());
            }
            EventKind::TurnEnded { .. } => {
                self.turn_since = None;
                self.inputs.clear();
                self.running.clear();
            }
            EventKind::AssistantBlockStarted { index, kind, block } if kind == "tool_use" => {
                let name = block["name"].as_str().unwrap_or("tool").to_owned();
                self.inputs.insert(*index, (name, String::new()));
            }
            EventKind::ToolInputDelta {
                index,
                partial_json,
            } => {
                if let Some((_, json)) = self.inputs.get_mut(index) {
                    json.push_str(partial_json);
                }
            }
            EventKind::AssistantBlockCompleted { index, .. } => {
                self.inputs.remove(index);
            }
            EventKind::ToolCall {
                tool_call_id,
                name,
                input,
            } => self.running.push(RunningTool {
                id: tool_call_id.clone(),
                name: name.clone(),
                argument: key_argument(input),
                since: ts,
                asking: false,
                tail: Default::default(),
            }),
            EventKind::ToolProgress {
                tool_call_id,
                chunk,
            } => {
                if let Some(tool) = self.running.iter_mut().find(|t| &t.id == tool_call_id) {
                    for line in chunk.lines().map(printable) {
                        if line.trim().is_empty() {
                            continue;
                        }
                        if tool.tail.len() == TAIL_LINES {
                            tool.tail.pop_front();
                        }
                        tool.tail.push_back(line);
                    }
                }
            }
            EventKind::ToolResult { tool_call_id, .. } => {
                self.running.retain(|t| &t.id != tool_call_id);
            }
            EventKind::PermissionRequested {
                request_id,
                tool_call_id,
                ..
            } => {
                self.waiting
                    .insert(request_id.clone(), tool_call_id.clone());
                if let Some(tool) = self.running.iter_mut().find(|t| &t.id == tool_call_id) {
                    tool.asking = true;
                }
            }
            EventKind::PermissionResolved { request_id, .. } => {
                if let Some(call) = self.waiting.remove(request_id)
                    && let Some(tool) = self.running.iter_mut().find(|t| t.id == call)
                {
                    tool.asking = false;
                    tool.since = ts.or_else(|| Some(std::time::SystemTime::now()));
                }
            }
            _ => {}
        }
    }

    fn mine(&self, by: &Option<tether_proto::ClientRef>) -> bool {
        matches!((by, &self.me), (Some(b), Some(me)) if &b.client_id == me)
    }

    /// Ends streamed text that is still open (before any other output).
    fn close_text(&mut self) -> String {
        self.markdown
            .take()
            .map(|mut m| m.finish())
            .unwrap_or_default()
    }

    /// What to print for `ev`.
    pub fn feed(&mut self, ev: &Event) -> String {
        self.track(ev);
        if let EventKind::ReplayComplete { .. } = ev.kind {
            self.replaying = false;
        }
        let s = self.style;
        let turn = ev.turn_id.as_ref().map(|t| t.0.clone());
        if let EventKind::TextDelta { index, text } = &ev.kind {
            self.streamed.insert((turn, *index));
            let md = self.markdown.get_or_insert_with(|| Markdown::new(s));
            let mut out = md.push(text);
            if self.rows {
                out.push_str(&md.take_rows());
            }
            return out;
        }
        match &ev.kind {
            EventKind::ThinkingDelta { .. }
            | EventKind::ToolInputDelta { .. }
            | EventKind::UsageUpdated { .. }
            | EventKind::SessionStatus { .. }
            | EventKind::AssistantMessageCompleted { .. }
            | EventKind::ReplayComplete { .. } => return String::new(),
            // A completed text block closes its own paragraph.
            EventKind::AssistantBlockCompleted { block, .. } if block["type"] == "text" => {
                return self.event_text(ev, turn);
            }
            _ => {}
        }
        // The paragraph being streamed ends only before something that prints: an event that
        // shows nothing (a generated title, say) leaves it open, and so does a line aside from
        // the reply (who came or went, a setting changed, a notice), printed above it: a word
        // in the middle of its row is never cut by it.
        let out = self.event_text(ev, turn);
        if out.is_empty() || aside(&ev.kind) {
            return out;
        }
        let mut closed = self.close_text();
        closed.push_str(&out);
        closed
    }

    /// What `ev` prints by itself.
    fn event_text(&mut self, ev: &Event, turn: Option<String>) -> String {
        let s = self.style;
        let mut out = String::new();
        match &ev.kind {
            EventKind::TurnStarted { input, by, .. } => {
                self.turn_started = Some(ev.ts.clone());
                self.errored = false;
                if self.mine(by) {
                    return out;
                }
                let text: Vec<String> = input
                    .iter()
                    .map(|i| match i {
                        InputItem::Text { text } => text.clone(),
                        InputItem::File { path } => format!("@{path}"),
                        InputItem::Image { .. } => "[image]".to_owned(),
                        InputItem::Document { title, .. } => match title {
                            Some(t) => format!("[document: {t}]"),
                            None => "[document]".to_owned(),
                        },
                        InputItem::Unknown => "[attachment]".to_owned(),
                    })
                    .collect();
                let from = by
                    .as_ref()
                    .map(|b| s.dim(&format!("  — {}", render::client(b))))
                    .unwrap_or_default();
                out.push_str(&format!("\n{} {}{from}\n", s.bold("›"), text.join(" ")));
            }
            EventKind::AssistantBlockStarted { kind, .. }
                if kind == "thinking" && !self.show_thinking =>
            {
                out.push_str(&format!(
                    "{}\n",
                    s.dim("✻ Thinking… (Ctrl+T or /thinking shows it)")
                ));
            }
            EventKind::AssistantBlockCompleted { index, block } => match block["type"].as_str() {
                Some("text") => {
                    if self.streamed.remove(&(turn, *index)) {
                        out.push_str(&self.close_text());
                    } else {
                        let mut md = Markdown::new(s);
                        out.push_str(&md.push(block["text"].as_str().unwrap_or("")));
                        out.push_str(&md.finish());
                    }
                }
                Some("thinking") => {
                    let thinking = block["thinking"].as_str().unwrap_or("").to_owned();
                    if self.show_thinking {
                        out.push_str(&self.thinking_lines(&thinking));
                    }
                    self.last_thinking = Some(thinking);
                }
                _ => {}
            },
            EventKind::ToolCall {
                tool_call_id,
                name,
                input,
            } => {
                self.tools.insert(tool_call_id.clone(), name.clone());
                // The plan it writes is shown under its own heading.
                if name == "TodoWrite" {
                    return out;
                }
                let argument = key_argument(input);
                self.headers
                    .insert(tool_call_id.clone(), format!("{name}({argument})"));
                self.last_header = Some(tool_call_id.clone());
                out.push_str(&format!(
                    "{} {}{}\n",
                    s.tool("●"),
                    s.tool(name),
                    s.dim(&format!("({argument})"))
                ));
            }
            EventKind::ToolProgress { chunk, .. } if !self.live => {
                for line in chunk.lines().filter(|l| !l.trim().is_empty()) {
                    out.push_str(&format!("{}\n", s.dim(&format!("  │ {line}"))));
                }
            }
            EventKind::ToolResult {
                tool_call_id,
                content,
                is_error,
                details,
                ..
            } => {
                // Parallel calls finish in any order: a result that does not follow its own
                // header says whose it is.
                let others_open = self.headers.len() > 1;
                if (self.last_header.take().as_ref() != Some(tool_call_id) || others_open)
                    && let Some(header) = self.headers.get(tool_call_id)
                {
                    out.push_str(&format!("{} {}\n", s.dim("↳"), s.dim(header)));
                }
                let header = self.headers.remove(tool_call_id);
                let plan = self
                    .tools
                    .get(tool_call_id)
                    .is_some_and(|n| n == "TodoWrite");
                let diff = details
                    .as_ref()
                    .and_then(|d| d["diff"].as_str())
                    .filter(|_| !is_error);
                let previewed = self.previewed.remove(tool_call_id);
                match diff {
                    Some(diff) if previewed => out.push_str(&self.diff_summary(diff)),
                    Some(diff) => out.push_str(&self.diff(diff)),
                    // The plan above is the result; only a failure needs saying.
                    None if plan && !is_error => {}
                    None => out.push_str(&self.folded(
                        header.unwrap_or_default(),
                        &tether_proto::content_text(content),
                        *is_error,
                    )),
                }
            }
            EventKind::PlanUpdated { todos } => {
                out.push_str(&format!("{} {}\n", s.tool("●"), s.bold("Plan")));
                for item in todos {
                    let text = printable(item["content"].as_str().unwrap_or(""));
                    let line = match item["status"].as_str() {
                        Some("completed") => format!("  ☒ {}", s.dim(&text)),
                        Some("in_progress") => format!("  ◼ {}", s.bold(&text)),
                        _ => format!("  ☐ {text}"),
                    };
                    out.push_str(&format!("{line}\n"));
                }
            }
            EventKind::PermissionRequested {
                request_id,
                tool,
                preview,
                ..
            } => {
                self.asked.insert(request_id.clone(), tool.clone());
                let what = match tool.as_str() {
                    "AskUserQuestion" => "The model asks:".to_owned(),
                    "ExitPlanMode" => "The model presents a plan for approval:".to_owned(),
                    tool => format!("{tool} needs permission:"),
                };
                out.push_str(&format!(
                    "{} {} {}\n",
                    s.warn("?"),
                    s.bold(&what),
                    preview.lines().next().unwrap_or("")
                ));
            }
            EventKind::PermissionResolved {
                request_id,
                decision,
                resolved_by,
                message,
                ..
            } => {
                use tether_proto::PermissionDecision as D;
                let allowed = matches!(decision, D::AllowOnce | D::AllowSession | D::AllowAlways);
                let tool = self.asked.remove(request_id).unwrap_or_default();
                let d = match (tool.as_str(), decision) {
                    ("AskUserQuestion", D::AllowOnce) => "answered",
                    ("AskUserQuestion", D::Deny) => "not answered",
                    ("ExitPlanMode", D::AllowOnce) => "plan approved (each edit asks)",
                    ("ExitPlanMode", D::AllowSession | D::AllowAlways) => {
                        "plan approved (edits run without asking)"
                    }
                    ("ExitPlanMode", D::Deny) => "plan not approved: planning goes on",
                    (_, D::AllowOnce) => "allowed once",
                    (_, D::AllowSession) => "allowed for this session",
                    (_, D::AllowAlways) => "always allowed",
                    (_, D::Deny) => "denied",
                    _ => "withdrawn (the turn ended)",
                };
                let who = resolved_by
                    .as_ref()
                    .map(|b| format!(" by {}", render::person(b)))
                    .unwrap_or_default();
                let why = message
                    .as_ref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default();
                let line = format!("  {d}{who}{why}");
                out.push_str(&format!(
                    "{}\n",
                    if allowed { s.ok(&line) } else { s.warn(&line) }
                ));
            }
            EventKind::Retrying {
                attempt,
                delay_ms,
                error,
                ..
            } => out.push_str(&format!(
                "{}\n",
                s.warn(&format!(
                    "↻ {error} — retrying in {:.0} s (attempt {attempt})",
                    (*delay_ms as f64 / 1000.0).ceil()
                ))
            )),
            EventKind::Error { message, .. } => {
                self.errored = true;
                out.push_str(&format!("{}\n", s.error(&format!("✗ {message}"))))
            }
            EventKind::Notice { level, message } => {
                let text = if *level == NoticeLevel::Warning {
                    format!("! {message}")
                } else {
                    format!("· {message}")
                };
                for line in wrap_text(&text, s.width) {
                    out.push_str(&format!(
                        "{}\n",
                        if *level == NoticeLevel::Warning {
                            s.warn(&line)
                        } else {
                            s.dim(&line)
                        }
                    ));
                }
            }
            EventKind::BudgetReached {
                budget_usd,
                spent_usd,
                daily,
                ..
            } => out.push_str(&format!(
                "{}\n",
                s.warn(&if *daily {
                    format!(
                        "$ the daemon's daily budget is spent (${spent_usd:.4} of ${budget_usd:.2} today); no model requests until midnight UTC"
                    )
                } else {
                    format!(
                        "$ budget reached: ${spent_usd:.4} of ${budget_usd:.2} spent; paused until it is raised (/budget AMOUNT)"
                    )
                })
            )),
            EventKind::CompactionStarted { .. } => {
                out.push_str(&format!("{}\n", s.dim("⟳ compacting the conversation…")))
            }
            EventKind::CompactionCompleted {
                tokens_before,
                tokens_after,
                ..
            } => out.push_str(&format!(
                "{}\n",
                s.dim(&format!(
                    "⟳ compacted: {tokens_before} → about {tokens_after} tokens"
                ))
            )),
            EventKind::ModelFallback { from, to } => out.push_str(&format!(
                "{}\n",
                s.warn(&format!("{from} is overloaded; continuing with {to}"))
            )),
            EventKind::Continuation { .. } => {
                out.push_str(&format!("{}\n", s.dim("… the reply was long; continuing")))
            }
            EventKind::BackgroundShellEnded { message, .. } => {
                out.push_str(&format!("{}\n", s.dim(&format!("◆ {message}"))))
            }
            EventKind::Rewound {
                to_turn,
                code,
                conversation,
                restored,
                kept,
                failed,
                by,
                ..
            } => {
                let mine = self.mine(by);
                let who = by
                    .as_ref()
                    .filter(|_| !mine)
                    .map(|b| format!(" — by {}", render::client(b)))
                    .unwrap_or_default();
                let line = render::rewound(*to_turn, *code, *conversation, restored, kept, failed);
                out.push_str(&format!("{}\n", s.warn(&format!("{line}{who}"))));
            }
            EventKind::WorkspaceRestored {
                node,
                cwd,
                snapshot,
                after_tool_call,
            } => out.push_str(&format!(
                "{}\n",
                s.warn(&render::restored(
                    node,
                    cwd,
                    snapshot.as_deref(),
                    after_tool_call.as_deref()
                ))
            )),
            // `!command`: what it printed, folded as a tool's output is.
            EventKind::ShellCommand {
                command,
                stdout,
                stderr,
                exit_code,
            } => {
                let mut text = render::printed(stdout, stderr);
                if text.is_empty() {
                    text = "(no output)".into();
                }
                let failed = *exit_code != Some(0);
                if failed && let Some(code) = exit_code {
                    text.push_str(&format!("\nexit code {code}"));
                }
                out.push_str(&self.folded(format!("!{command}"), &text, failed));
            }
            EventKind::SessionConfigured {
                model,
                effort,
                permission_mode,
                budget_usd,
                by,
                ..
            } => {
                // What changed and who changed it (a change this client made through its own
                // command line, the mode or the budget, says so itself).
                let mine = self.mine(by);
                let parts = render::changes(
                    model,
                    effort,
                    permission_mode.filter(|_| !mine),
                    budget_usd.filter(|_| !mine),
                );
                if !parts.is_empty() {
                    let who = by
                        .as_ref()
                        .filter(|_| !mine)
                        .map(|b| format!(" — by {}", render::client(b)))
                        .unwrap_or_default();
                    out.push_str(&format!(
                        "{}\n",
                        s.dim(&format!("◦ {}{who}", parts.join(", ")))
                    ));
                }
            }
            EventKind::ClientAttached { client, role }
                if Some(&client.client_id) != self.me.as_ref() && !self.replaying =>
            {
                let role = serde_json::to_value(role)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                out.push_str(&format!(
                    "{}\n",
                    s.dim(&format!("◦ {} joined as {role}", render::client(client)))
                ));
            }
            EventKind::ClientDetached { client, .. }
                if Some(&client.client_id) != self.me.as_ref() && !self.replaying =>
            {
                out.push_str(&format!(
                    "{}\n",
                    s.dim(&format!("◦ {} left", render::client(client)))
                ));
            }
            EventKind::TurnEnded {
                stop_reason,
                usage,
                cost_usd,
                error,
                cancelled_by,
                ..
            } => {
                // A call cut off without a result labels nothing later.
                self.headers.clear();
                self.last_header = None;
                let took = self
                    .turn_started
                    .take()
                    .and_then(|t| seconds_between(&t, &ev.ts))
                    .map(|d| format!(" · {d:.1} s"))
                    .unwrap_or_default();
                let cost = cost_usd
                    .map(|c| format!(" · ${c:.4}"))
                    .unwrap_or_else(|| " · cost unknown".into());
                let tokens = usage.input_tokens
                    + usage.cache_read_input_tokens
                    + usage.cache_creation_input_tokens;
                // How much of the input the prompt cache served (and wrote), when it did.
                let cached = match (
                    usage.cache_read_input_tokens,
                    usage.cache_creation_input_tokens,
                ) {
                    (0, 0) => String::new(),
                    (read, written) => format!(
                        " ({}% cached, {written} written)",
                        (read * 100).checked_div(tokens).unwrap_or(0)
                    ),
                };
                // A command the daemon answered (/cost, /model, …) needs no footer.
                if *stop_reason == StopReason::Command
                    && error.is_none()
                    && tokens == 0
                    && usage.output_tokens == 0
                {
                    return out;
                }
                let interrupted;
                let stop_reason = match stop_reason {
                    StopReason::EndTurn | StopReason::StopSequence | StopReason::Command => "done",
                    StopReason::Compacted => "compacted",
                    StopReason::Cancelled => match cancelled_by {
                        Some(by) if !self.mine(&Some(by.clone())) => {
                            interrupted = format!("interrupted by {}", render::person(by));
                            &interrupted
                        }
                        _ => "interrupted",
                    },
                    StopReason::InterruptedByRestart => "interrupted by a daemon restart",
                    StopReason::MaxTokens => "stopped at the output limit",
                    StopReason::MaxTurns => "stopped at the turn's request limit",
                    StopReason::Refusal => "the model declined",
                    StopReason::Error => "failed",
                    other => other.as_str(),
                };
                let line = format!(
                    "─ {stop_reason}{took} · {tokens} in{cached} / {} out tokens{cost}",
                    usage.output_tokens
                );
                if let Some(e) = error
                    .as_ref()
                    .filter(|_| !std::mem::take(&mut self.errored))
                {
                    out.push_str(&format!("{}\n", s.error(&format!("✗ {}", e.message))));
                }
                out.push_str(&format!("{}\n", s.dim(&line)));
            }
            EventKind::SessionShared {
                principal,
                role,
                by,
            } => out.push_str(&shared_line(
                s,
                format!("shared with {principal} as {role}"),
                by,
            )),
            EventKind::SessionUnshared {
                principal,
                role,
                by,
            } => out.push_str(&shared_line(
                s,
                format!("{principal} is no longer {role}"),
                by,
            )),
            EventKind::SessionDeleted { .. } => {
                out.push_str(&format!("{}\n", s.warn("the session was deleted")))
            }
            EventKind::DaemonShutdown {} => {
                out.push_str(&format!("{}\n", s.warn("tetherd is shutting down")))
            }
            _ => {}
        }
        out
    }

    /// A tool result: its first lines, then how many more (kept for [`Self::expand`]).
    fn folded(&mut self, header: String, text: &str, is_error: bool) -> String {
        let s = self.style;
        // Tool output never drives the terminal: escapes and control characters are dropped.
        let lines: Vec<String> = text.lines().map(printable).collect();
        let mut out = String::new();
        for (i, line) in lines.iter().take(RESULT_LINES).enumerate() {
            let lead = if i == 0 { "  ⎿ " } else { "    " };
            let width = s.width.saturating_sub(4).max(20);
            let shown: String = if unicode_width::UnicodeWidthStr::width(line.as_str()) > width {
                let cut: String = line.chars().take(width.saturating_sub(1)).collect();
                format!("{cut}…")
            } else {
                line.clone()
            };
            let shown = if is_error { s.error(&shown) } else { shown };
            out.push_str(&format!("{lead}{shown}\n"));
        }
        if lines.is_empty() {
            out.push_str(&format!("  ⎿ {}\n", s.dim("(no output)")));
        }
        if lines.len() > RESULT_LINES {
            out.push_str(&format!(
                "    {}\n",
                s.dim(&format!(
                    "… {} more lines (Ctrl+O or /expand shows them)",
                    lines.len() - RESULT_LINES
                ))
            ));
            if self.folds.len() == KEPT_FOLDS {
                self.folds.pop_front();
            }
            self.folds.push_back((header, lines));
        }
        out
    }

    /// The `n`th latest folded tool result (1: the last) in full, or why there is none.
    pub fn expand(&self, n: usize) -> String {
        let s = self.style;
        let Some((header, lines)) = self
            .folds
            .len()
            .checked_sub(n.max(1))
            .and_then(|i| self.folds.get(i))
        else {
            return format!(
                "{}\n",
                s.dim(&match self.folds.len() {
                    0 => "no folded output to show".to_owned(),
                    kept => format!("only {kept} folded outputs are kept"),
                })
            );
        };
        let mut out = format!(
            "{} {}\n",
            s.dim("⎿"),
            s.dim(&format!("{header} — all {} lines", lines.len()))
        );
        for line in lines {
            out.push_str(&format!("    {line}\n"));
        }
        out
    }

    /// An Edit whose diff the permission prompt showed: one line with what changed.
    fn diff_summary(&self, diff: &str) -> String {
        let s = self.style;
        let count = |sign: char, header: &str| {
            diff.lines()
                .filter(|l| l.starts_with(sign) && !l.starts_with(header))
                .count()
        };
        let (added, removed) = (count('+', "+++"), count('-', "---"));
        let plural = |n: usize| if n == 1 { "line" } else { "lines" };
        format!(
            "  ⎿ {}\n",
            s.dim(&format!(
                "applied as shown above: {added} {} added, {removed} {} removed",
                plural(added),
                plural(removed)
            ))
        )
    }

    /// An Edit's unified diff, coloured.
    fn diff(&self, diff: &str) -> String {
        let s = self.style;
        indented(diff, DIFF_LINES, s, |line| diff_line(s, line))
    }
}

#[cfg(test)]
mod tests;

/// A grant's line: what changed, and who changed it.
fn shared_line(s: Style, what: String, by: &Option<tether_proto::ClientRef>) -> String {
    let who = by
        .as_ref()
        .map(|b| format!(" by {}", render::person(b)))
        .unwrap_or_default();
    format!("{}\n", s.dim(&format!("  {what}{who}")))
}
