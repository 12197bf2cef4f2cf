//! What a turn does before its first model request, in the turn's own task rather than on the
//! session's writer: reading the input (slash commands, `@mentions`, images), the project's
//! prompt hooks (SessionStart, UserPromptSubmit), and the context the model is told (the prompt
//! prefix at a session's first turn, what changed since at later ones).
//!
//! Invariant: nothing here waits on the session; a cancel during a slow hook ends the wait at
//! once (the hook's process is killed with it).

use super::commands::SlashCommand;
use super::history::History;
use super::sink::{SinkError, TurnSink};
use crate::hooks::HookEvent;
use crate::hooks::Hooks;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tether_proto::{EventKind, InputItem};
use tokio_util::sync::CancellationToken;

/// What [`prepare`] starts from.
pub struct Request {
    /// The session's id (hooks receive it).
    pub session_id: String,
    /// The session's directory.
    pub cwd: PathBuf,
    /// The user's home (settings, commands, memory).
    pub home: Option<PathBuf>,
    /// config.toml's `[hooks]` table and its file name.
    pub config_hooks: Option<(Value, String)>,
    /// The turn's own settings (`--settings`), whose hooks run too.
    pub settings: Option<Value>,
    /// What the user sent.
    pub input: Vec<InputItem>,
    /// A command the caller already knows (`session/compact`): the input is not parsed.
    pub command: Option<SlashCommand>,
    /// Whether SessionStart hooks are due (the session's first prompt since it was loaded).
    pub session_start: bool,
    /// The session's permission mode (hooks receive it).
    pub permission_mode: tether_proto::PermissionMode,
    /// The hook callbacks of the Agent SDK program starting the turn, and who asks them.
    pub callbacks: Option<(Value, Arc<dyn crate::hooks::Asker>)>,
    /// Who logs the turn's hook runs once it has started.
    pub watcher: Arc<dyn crate::hooks::Watcher>,
    /// Whether `!command` runs a command (only as typed at a terminal's prompt); otherwise
    /// such a line is a prompt like any other.
    pub shell: bool,
}

/// Keeps the runs of the prompt hooks, which run before the turn has started, for the session
/// to log after `turn_started`.
#[derive(Debug, Default)]
struct Kept(std::sync::Mutex<Vec<EventKind>>);

impl crate::hooks::Watcher for Kept {
    fn tell(&self, event: EventKind) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(event);
    }
}

/// A turn's input, read and passed through the prompt hooks.
pub struct Prepared {
    /// The slash command the input is, if it is one.
    pub command: Option<SlashCommand>,
    /// The user message's content blocks (hook context included); empty when blocked.
    pub content: Vec<Value>,
    /// What the user should know (mentions not attached, hook messages).
    pub notices: Vec<String>,
    /// The project's hooks, loaded once for the whole turn.
    pub hooks: Arc<Hooks>,
    /// The prompt hooks' runs (`hook_started`, `hook_response`), to log in the turn.
    pub hook_events: Vec<EventKind>,
    /// The sub-agent types of the project and the user.
    pub agents: crate::tools::agents::Found,
    /// The skills of the project and the user.
    pub skills: crate::tools::skills::Skills,
    /// A UserPromptSubmit hook refused the prompt, with its reason.
    pub blocked: Option<String>,
    /// Whether SessionStart hooks ran.
    pub session_started: bool,
}

impl Prepared {
    /// Whether the input goes to the model as a prompt (plain text or a custom command).
    pub fn is_prompt(&self) -> bool {
        matches!(self.command, None | Some(SlashCommand::Custom { .. }))
    }
}

/// Reads the input and runs the prompt hooks; `None` when `cancel` fired first.
pub async fn prepare(request: Request, cancel: &CancellationToken) -> Option<Prepared> {
    tokio::select! {
        prepared = run(request) => Some(prepared),
        () = cancel.cancelled() => None,
    }
}

async fn run(request: Request) -> Prepared {
    let Request {
        session_id,
        cwd,
        home,
        config_hooks,
        settings,
        input,
        command,
        session_start,
        permission_mode,
        callbacks,
        watcher,
        shell,
    } = request;
    let kept = Arc::new(Kept::default());
    // Files: the command directories, mentioned files, settings.
    let read = {
        let cwd = cwd.clone();
        let kept = kept.clone();
        tokio::task::spawn_blocking(move || {
            let command = command
                .or_else(|| super::commands::parse(&cwd, home.as_deref(), &input))
                .filter(|c| shell || !matches!(c, SlashCommand::Shell(_)));
            let processed = match &command {
                Some(SlashCommand::Custom { prompt, .. }) => super::input::process(
                    &cwd,
                    &[InputItem::Text {
                        text: prompt.clone(),
                    }],
                ),
                Some(_) => Default::default(),
                None => super::input::process(&cwd, &input),
            };
            let mut hooks = Hooks::load(&cwd, home.as_deref(), config_hooks.as_ref());
            hooks.watched_by(kept.clone());
            if let Some(settings) = &settings {
                hooks.add(&settings["hooks"], "--settings");
            }
            // The SDK program's callbacks run beside the settings files' hooks; what cannot
            // run is told.
            let known = hooks.problems.len();
            if let Some((v, asker)) = callbacks {
                hooks.add_callbacks(&v, asker);
            }
            // Told with this turn's notices; not again with the settings' problems.
            let unrun = hooks.problems.split_off(known);
            let agents = crate::tools::agents::load(&cwd, home.as_deref());
            let skills = crate::tools::skills::load(&cwd, home.as_deref());
            (command, processed, hooks, (agents, skills), unrun)
        })
        .await
    };
    let (command, processed, hooks, (agents, skills), unrun) = match read {
        Ok(read) => read,
        Err(e) => {
            // Only a panic while reading gets here; the turn goes on without the input.
            tracing::error!("reading a turn's input failed: {e}");
            let notice = format!("the input could not be read: {e}");
            return Prepared {
                command: None,
                content: Vec::new(),
                notices: vec![notice],
                hooks: Arc::default(),
                hook_events: Vec::new(),
                agents: crate::tools::agents::Found::builtin(),
                skills: Default::default(),
                blocked: Some("the input could not be read".into()),
                session_started: false,
            };
        }
    };
    let mut notices = processed.notices;
    notices.extend(unrun);
    let mut prepared = Prepared {
        command,
        content: processed.content,
        notices,
        hooks: Arc::new(hooks),
        hook_events: Vec::new(),
        agents,
        skills,
        blocked: None,
        session_started: false,
    };
    if prepared.is_prompt() {
        prompt_hooks(
            &mut prepared,
            &session_id,
            &cwd,
            session_start,
            permission_mode,
        )
        .await;
    }
    // From now on the turn has started: its hooks' runs are logged as they happen.
    Arc::make_mut(&mut prepared.hooks).watched_by(watcher);
    prepared.hook_events = std::mem::take(&mut *kept.0.lock().unwrap_or_else(|p| p.into_inner()));
    prepared
}

/// Runs the SessionStart (when due) and UserPromptSubmit hooks on a prompt's content.
async fn prompt_hooks(
    prepared: &mut Prepared,
    session_id: &str,
    cwd: &Path,
    session_start: bool,
    permission_mode: tether_proto::PermissionMode,
) {
    let hooks = prepared.hooks.clone();
    if session_start && hooks.has(HookEvent::SessionStart) {
        prepared.session_started = true;
        let input = json!({"session_id": session_id, "cwd": cwd, "permission_mode": permission_mode.as_str(), "source": "startup"});
        let outcome = hooks
            .run(HookEvent::SessionStart, Some("startup"), input, cwd)
            .await;
        prepared.notices.extend(outcome.notices);
        prepared
            .content
            .extend(outcome.context.into_iter().map(text_block));
    }
    if hooks.has(HookEvent::UserPromptSubmit) {
        let prompt: Vec<&str> = prepared
            .content
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect();
        let input = json!({"session_id": session_id, "cwd": cwd, "permission_mode": permission_mode.as_str(), "prompt": prompt.join("\n")});
        let outcome = hooks
            .run(HookEvent::UserPromptSubmit, None, input, cwd)
            .await;
        prepared.notices.extend(outcome.notices);
        prepared.blocked = outcome.block.or(outcome.stop);
        prepared
            .content
            .extend(outcome.context.into_iter().map(text_block));
    }
    if prepared.blocked.is_some() {
        prepared.content.clear();
    }
}

fn text_block(text: String) -> Value {
    json!({"type": "text", "text": text})
}

/// Fixes the session's prompt prefix at its first model turn (`system_prompt`); at a later
/// fresh turn (`tail`), tells the model what changed since — date, git, memory — at the tail of
/// the conversation (`context_updated`), never in the prefix. A resumed turn gets no update: its
/// next message must start with tool results. The event is durable, and in `history`, on return.
pub async fn settle_context(
    history: &mut History,
    sink: &dyn TurnSink,
    cwd: &Path,
    notes: &Path,
    tail: bool,
) -> Result<(), SinkError> {
    if history.prefix.is_some() && !tail {
        return Ok(());
    }
    let now = crate::context::gather(cwd, Some(notes)).await;
    let Some(kind) = context_event(history, now) else {
        return Ok(());
    };
    history.apply(&kind);
    sink.commit(kind).await
}

/// The event that brings the model up to date with `now`, if anything changed.
fn context_event(history: &History, now: crate::context::Context) -> Option<EventKind> {
    if history.prefix.is_none() {
        return Some(EventKind::SystemPrompt {
            instructions: now.instructions,
            environment: now.environment,
            git: now.git,
            memory: now.memory,
        });
    }
    let told = &history.told;
    // A part that went away is said to be gone, not left as it was.
    let changed = |was: &Option<String>, is: Option<String>, gone: &str| {
        (was.as_ref() != is.as_ref()).then(|| is.unwrap_or_else(|| gone.to_owned()))
    };
    let date = (told.date.as_deref() != Some(now.date.as_str())).then(|| now.date.clone());
    let git = changed(&told.git, now.git, "# Git\n(not a git repository any more)");
    let memory = changed(&told.memory, now.memory, "# Memory\n(no memory files now)");
    if date.is_none() && git.is_none() && memory.is_none() {
        return None;
    }
    Some(EventKind::ContextUpdated { date, git, memory })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(cwd: &Path, text: &str) -> Request {
        Request {
            session_id: "s".into(),
            cwd: cwd.to_owned(),
            home: None,
            config_hooks: None,
            settings: None,
            input: vec![InputItem::Text { text: text.into() }],
            command: None,
            session_start: true,
            permission_mode: Default::default(),
            callbacks: None,
            watcher: Arc::new(Kept::default()),
            shell: false,
        }
    }

    #[tokio::test]
    async fn a_bang_line_runs_only_from_a_terminal_and_is_a_prompt_otherwise() {
        let dir = tempfile::tempdir().expect("tempdir");
        let from_a_script = run(request(dir.path(), "!rm -rf ~")).await;
        assert!(from_a_script.command.is_none());
        assert!(from_a_script.is_prompt());
        let typed = run(Request {
            shell: true,
            ..request(dir.path(), "!ls")
        })
        .await;
        assert_eq!(typed.command, Some(SlashCommand::Shell("ls".into())));
    }

    fn hooks(event: &str, command: &str) -> Option<(Value, String)> {
        Some((
            json!({event: [{"hooks": [{"type": "command", "command": command}]}]}),
            "config.toml".into(),
        ))
    }

    #[tokio::test]
    async fn a_prompt_passes_through_its_hooks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut r = request(dir.path(), "hello");
        r.config_hooks = hooks("UserPromptSubmit", "echo 'from the hook'");
        let p = prepare(r, &CancellationToken::new())
            .await
            .expect("prepared");
        assert!(p.is_prompt());
        let texts: Vec<&str> = p
            .content
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect();
        assert_eq!(texts, ["hello", "from the hook"]);
        assert_eq!(p.blocked, None);
        // The hook's run is kept for the turn to log once it has started.
        let told: Vec<&str> = p.hook_events.iter().map(EventKind::type_name).collect();
        assert_eq!(told, ["hook_started", "hook_response"]);
    }

    #[tokio::test]
    async fn a_blocking_hook_empties_the_prompt() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut r = request(dir.path(), "secret");
        r.config_hooks = hooks("UserPromptSubmit", "echo nope >&2; exit 2");
        let p = prepare(r, &CancellationToken::new())
            .await
            .expect("prepared");
        assert_eq!(p.blocked.as_deref(), Some("nope"));
        assert!(p.content.is_empty());
    }

    #[tokio::test]
    async fn commands_skip_the_hooks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut r = request(dir.path(), "/cost");
        r.config_hooks = hooks("UserPromptSubmit", "exit 2");
        let p = prepare(r, &CancellationToken::new())
            .await
            .expect("prepared");
        assert_eq!(p.command, Some(SlashCommand::Cost));
        assert_eq!(p.blocked, None);
        let mut r = request(dir.path(), "ignored");
        r.command = Some(SlashCommand::Compact(Some("keep the plan".into())));
        let p = prepare(r, &CancellationToken::new())
            .await
            .expect("prepared");
        assert_eq!(
            p.command,
            Some(SlashCommand::Compact(Some("keep the plan".into())))
        );
    }

    #[tokio::test]
    async fn a_cancel_ends_a_slow_hook_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut r = request(dir.path(), "hello");
        r.config_hooks = hooks("UserPromptSubmit", "sleep 30");
        let cancel = CancellationToken::new();
        let started = std::time::Instant::now();
        let canceller = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            canceller.cancel();
        });
        assert!(prepare(r, &cancel).await.is_none());
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn later_turns_hear_only_what_changed() {
        let now = |git: Option<&str>| crate::context::Context {
            instructions: "i".into(),
            environment: "# Environment\nDate: 2026-12-03\n".into(),
            date: "2026-12-03".into(),
            git: git.map(str::to_owned),
            memory: None,
        };
        let mut history = History::default();
        let first = context_event(&history, now(Some("# Git\nclean"))).expect("prefix");
        assert!(matches!(first, EventKind::SystemPrompt { .. }));
        history.apply(&first);
        assert_eq!(context_event(&history, now(Some("# Git\nclean"))), None);
        match context_event(&history, now(None)) {
            Some(EventKind::ContextUpdated { date, git, memory }) => {
                assert_eq!(date, None);
                assert_eq!(
                    git.as_deref(),
                    Some("# Git\n(not a git repository any more)")
                );
                assert_eq!(memory, None);
            }
            other => panic!("expected an update, got {other:?}"),
        }
    }
}
