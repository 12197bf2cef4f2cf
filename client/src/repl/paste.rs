//! Pastes: long pasted text is folded to a `[pasted N lines #k]` placeholder in the input line
//! and expanded when the line is sent; Ctrl+V takes an image (or text) from the clipboard with
//! `wl-paste` or `xclip` and leaves an `[image #k]` placeholder that becomes an image item.
//!
//! [`Keys`] wraps reedline's Emacs mode so pastes are seen before they reach the buffer;
//! [`Pasted`] holds what the placeholders stand for until the line is sent; [`Expanded`] keeps
//! the history with the pasted text in full.

use base64::Engine;
use reedline::{
    EditCommand, EditMode, Emacs, KeyCode, KeyModifiers, PromptEditMode, ReedlineEvent,
    ReedlineRawEvent,
};
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tether_proto::InputItem;

/// Pasted text with more lines than this is folded.
const FOLD_LINES: usize = 4;
/// …as is pasted text longer than this.
const FOLD_CHARS: usize = 800;
/// Largest clipboard image taken (the API's limit).
const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;
/// How long a clipboard tool may take.
const CLIPBOARD_TIMEOUT: Duration = Duration::from_secs(3);
/// Image types the API takes, in order of preference.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// An image taken from the clipboard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// e.g. `image/png`.
    pub media_type: String,
    /// Base64 of the bytes.
    pub data: String,
}

/// What the placeholders in the line being edited stand for.
#[derive(Debug, Default)]
pub struct Pasted {
    texts: Vec<String>,
    images: Vec<Image>,
}

impl Pasted {
    /// What to insert for pasted `body`: the text itself when short, else a placeholder.
    pub fn fold(&mut self, body: &str) -> String {
        let body = body.replace("\r\n", "\n").replace('\r', "\n");
        let lines = body.lines().count();
        if lines <= FOLD_LINES && body.chars().count() <= FOLD_CHARS {
            return body;
        }
        self.texts.push(body);
        let unit = if lines == 1 { "line" } else { "lines" };
        format!("[pasted {lines} {unit} #{}]", self.texts.len())
    }

    /// Keeps `image` and returns its placeholder.
    pub fn add_image(&mut self, image: Image) -> String {
        self.images.push(image);
        format!("[image #{}]", self.images.len())
    }

    /// `line` with the placeholders of pasted text replaced by the text.
    fn unfold(&self, line: &str) -> String {
        let mut text = String::with_capacity(line.len());
        let mut rest = line;
        while let Some(at) = rest.find("[pasted ") {
            text.push_str(&rest[..at]);
            let tail = &rest[at..];
            let pasted = tail.find(']').and_then(|end| {
                let inner = &tail[1..end];
                let (_, k) = inner.rsplit_once(" #")?;
                let k: usize = k.parse().ok()?;
                Some((end, self.texts.get(k.checked_sub(1)?)?))
            });
            match pasted {
                Some((end, body)) => {
                    text.push_str(body);
                    rest = &tail[end + 1..];
                }
                None => {
                    text.push_str("[pasted ");
                    rest = &tail["[pasted ".len()..];
                }
            }
        }
        text.push_str(rest);
        text
    }

    /// The turn input for a sent `line`: placeholders of pasted text replaced by the text, and
    /// an image item for each image placeholder still in the line. Forgets what was pasted.
    pub fn expand(&mut self, line: &str) -> Vec<InputItem> {
        let text = self.unfold(line);
        self.texts.clear();
        let images = std::mem::take(&mut self.images);
        let mut items = vec![InputItem::Text { text: text.clone() }];
        for (i, image) in images.into_iter().enumerate() {
            if text.contains(&format!("[image #{}]", i + 1)) {
                items.push(InputItem::Image {
                    path: None,
                    data: Some(image.data),
                    media_type: Some(image.media_type),
                });
            }
        }
        items
    }
}

/// The prompt history with pasted text kept in full: a line recalled later (this run or the
/// next) sends what was pasted, not its placeholder.
pub struct Expanded {
    inner: reedline::FileBackedHistory,
    pasted: Arc<Mutex<Pasted>>,
}

impl Expanded {
    /// Wraps `inner`; placeholders are looked up in `pasted` as lines are saved.
    pub fn new(inner: reedline::FileBackedHistory, pasted: Arc<Mutex<Pasted>>) -> Self {
        Self { inner, pasted }
    }
}

impl reedline::History for Expanded {
    fn save(&mut self, mut h: reedline::HistoryItem) -> reedline::Result<reedline::HistoryItem> {
        h.command_line = self
            .pasted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unfold(&h.command_line);
        self.inner.save(h)
    }
    fn load(&self, id: reedline::HistoryItemId) -> reedline::Result<reedline::HistoryItem> {
        self.inner.load(id)
    }
    fn count(&self, query: reedline::SearchQuery) -> reedline::Result<i64> {
        self.inner.count(query)
    }
    fn search(&self, query: reedline::SearchQuery) -> reedline::Result<Vec<reedline::HistoryItem>> {
        self.inner.search(query)
    }
    fn update(
        &mut self,
        id: reedline::HistoryItemId,
        updater: &dyn Fn(reedline::HistoryItem) -> reedline::HistoryItem,
    ) -> reedline::Result<()> {
        self.inner.update(id, updater)
    }
    fn clear(&mut self) -> reedline::Result<()> {
        self.inner.clear()
    }
    fn delete(&mut self, h: reedline::HistoryItemId) -> reedline::Result<()> {
        self.inner.delete(h)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.inner.sync()
    }
    fn session(&self) -> Option<reedline::HistorySessionId> {
        self.inner.session()
    }
}

/// Reedline's Emacs mode with folded pastes and Ctrl+V from the clipboard.
pub struct Keys {
    emacs: Emacs,
    pasted: Arc<Mutex<Pasted>>,
    printer: std::sync::mpsc::SyncSender<String>,
}

impl Keys {
    /// Wraps `emacs`; placeholders are recorded in `pasted`, problems printed with `printer`.
    pub fn new(
        emacs: Emacs,
        pasted: Arc<Mutex<Pasted>>,
        printer: std::sync::mpsc::SyncSender<String>,
    ) -> Self {
        Self {
            emacs,
            pasted,
            printer,
        }
    }

    fn insert(&self, body: &str) -> ReedlineEvent {
        let text = self
            .pasted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .fold(body);
        ReedlineEvent::Edit(vec![EditCommand::InsertString(text)])
    }

    fn paste_clipboard(&self) -> ReedlineEvent {
        match clipboard() {
            Ok(Clip::Image(image)) => {
                let placeholder = self
                    .pasted
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .add_image(image);
                ReedlineEvent::Edit(vec![EditCommand::InsertString(format!("{placeholder} "))])
            }
            Ok(Clip::Text(text)) => self.insert(&text),
            Err(why) => {
                // The editor's own thread drains this channel: never wait on it here.
                let _ = self
                    .printer
                    .try_send(format!("{}(Ctrl+V: {why})", super::prompt::OVER_STATUS));
                ReedlineEvent::None
            }
        }
    }
}

impl EditMode for Keys {
    fn parse_event(&mut self, event: ReedlineRawEvent) -> ReedlineEvent {
        use crossterm::event::{Event, KeyEvent, KeyEventKind};
        let raw: Event = event.into();
        match &raw {
            Event::Paste(body) => return self.insert(body),
            Event::Key(KeyEvent {
                code: KeyCode::Char('v'),
                modifiers: KeyModifiers::CONTROL,
                kind: KeyEventKind::Press,
                ..
            }) => return self.paste_clipboard(),
            _ => {}
        }
        match ReedlineRawEvent::try_from(raw) {
            Ok(event) => self.emacs.parse_event(event),
            Err(()) => ReedlineEvent::None,
        }
    }

    fn edit_mode(&self) -> PromptEditMode {
        self.emacs.edit_mode()
    }
}

/// What the clipboard held.
enum Clip {
    Image(Image),
    Text(String),
}

/// The clipboard tool in use.
#[derive(Clone, Copy)]
enum Tool {
    Wayland,
    X11,
}

impl Tool {
    /// The command that lists the types the clipboard offers.
    fn list(self) -> Vec<String> {
        let argv: &[&str] = match self {
            Tool::Wayland => &["wl-paste", "--list-types"],
            Tool::X11 => &["xclip", "-selection", "clipboard", "-t", "TARGETS", "-o"],
        };
        argv.iter().map(|a| (*a).to_owned()).collect()
    }

    /// The command that prints the clipboard as `media_type`.
    fn get(self, media_type: &str) -> Vec<String> {
        let argv: &[&str] = match self {
            Tool::Wayland => &["wl-paste", "--no-newline", "--type", media_type],
            Tool::X11 => &["xclip", "-selection", "clipboard", "-t", media_type, "-o"],
        };
        argv.iter().map(|a| (*a).to_owned()).collect()
    }
}

/// Reads the clipboard: an image when it offers one, else its text.
fn clipboard() -> Result<Clip, String> {
    let wayland = std::env::var_os("WAYLAND_DISPLAY").is_some() && on_path("wl-paste");
    let x11 = std::env::var_os("DISPLAY").is_some() && on_path("xclip");
    let tool = if wayland {
        Tool::Wayland
    } else if x11 {
        Tool::X11
    } else {
        return Err("reading the clipboard needs wl-paste (Wayland) or xclip (X11)".into());
    };
    let (list, get) = (tool.list(), |t: &str| tool.get(t));
    let types = String::from_utf8_lossy(&run(&list)?).into_owned();
    let offered: Vec<&str> = types.lines().map(str::trim).collect();
    if let Some(media) = IMAGE_TYPES.iter().find(|t| offered.contains(t)) {
        let bytes = run(&get(media))?;
        if bytes.is_empty() {
            return Err("the clipboard's image is empty".into());
        }
        if bytes.len() > MAX_IMAGE_BYTES {
            return Err(format!(
                "the clipboard's image is {} KB, over the API's {} KB",
                bytes.len() / 1024,
                MAX_IMAGE_BYTES / 1024
            ));
        }
        return Ok(Clip::Image(Image {
            media_type: (*media).to_owned(),
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
        }));
    }
    let text_type = [
        "text/plain;charset=utf-8",
        "UTF8_STRING",
        "text/plain",
        "STRING",
    ]
    .into_iter()
    .find(|t| offered.contains(t))
    .ok_or("the clipboard holds neither an image nor text")?;
    let text = String::from_utf8_lossy(&run(&get(text_type))?).into_owned();
    Ok(Clip::Text(text))
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Runs a clipboard tool and returns its stdout; gives up after [`CLIPBOARD_TIMEOUT`].
fn run<S: AsRef<str>>(argv: &[S]) -> Result<Vec<u8>, String> {
    let program = argv[0].as_ref();
    let mut child = Command::new(program)
        .args(argv[1..].iter().map(AsRef::as_ref))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout
            .by_ref()
            .take(MAX_IMAGE_BYTES as u64 + 1)
            .read_to_end(&mut out);
        out
    });
    let deadline = Instant::now() + CLIPBOARD_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{program} did not answer"));
            }
            Err(e) => return Err(format!("{program}: {e}")),
        }
    };
    let out = reader
        .join()
        .map_err(|_| format!("{program}: read failed"))?;
    if !status.success() {
        return Err(format!("{program} failed ({status})"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_pastes_go_in_as_they_are() {
        let mut p = Pasted::default();
        assert_eq!(p.fold("one\r\ntwo"), "one\ntwo");
        assert_eq!(
            p.expand("say one\ntwo"),
            vec![InputItem::Text {
                text: "say one\ntwo".into()
            }]
        );
    }

    #[test]
    fn long_pastes_fold_and_expand_where_their_placeholder_stands() {
        let mut p = Pasted::default();
        let log: String = (1..=12).map(|i| format!("line {i}\n")).collect();
        let first = p.fold(&log);
        assert_eq!(first, "[pasted 12 lines #1]");
        let second = p.fold(&"x".repeat(900));
        assert_eq!(second, "[pasted 1 line #2]");
        let items = p.expand(&format!("why? {first} and [pasted bogus] {second}"));
        assert_eq!(
            items,
            vec![InputItem::Text {
                text: format!("why? {log} and [pasted bogus] {}", "x".repeat(900))
            }]
        );
        // Forgotten once sent.
        assert_eq!(
            p.expand("[pasted 12 lines #1]"),
            vec![InputItem::Text {
                text: "[pasted 12 lines #1]".into()
            }]
        );
    }

    #[test]
    fn images_become_items_unless_their_placeholder_was_deleted() {
        let mut p = Pasted::default();
        let png = Image {
            media_type: "image/png".into(),
            data: "iVBORw0KGgo=".into(),
        };
        assert_eq!(p.add_image(png.clone()), "[image #1]");
        assert_eq!(p.add_image(png.clone()), "[image #2]");
        let items = p.expand("what is in [image #2]?");
        assert_eq!(items.len(), 2);
        assert_eq!(
            items[1],
            InputItem::Image {
                path: None,
                data: Some(png.data),
                media_type: Some(png.media_type)
            }
        );
    }
}
