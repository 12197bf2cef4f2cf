//! The `tether` binary: the terminal face of the tether daemon.

mod acp;
mod bridge;
mod commands;
mod connection;
mod headless;
mod markdown;
mod mcp;
mod remote;
mod render;
mod repl;
mod sdk;
mod sharing;
mod stream_json;
mod style;
mod trust;
mod view;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// tether: a coding agent that lives in a daemon.
#[derive(Debug, Parser)]
#[command(name = "tether", version)]
struct Cli {
    /// Print machine-readable JSON instead of human output.
    #[arg(long, global = true)]
    json: bool,
    /// Daemon socket (default: $TETHER_SOCKET, $XDG_RUNTIME_DIR/tether/tetherd.sock, or
    /// /tmp/tether-$UID/tetherd.sock).
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Use the daemon USER runs on this machine, through its shared socket (default:
    /// $TETHER_SHARED_BY): the sessions USER shared with you (tether share … --with YOU).
    #[arg(long, global = true, value_name = "USER")]
    shared_by: Option<String>,
    /// Use the daemon on another machine, through `ssh HOST tether bridge` (default:
    /// $TETHER_REMOTE). New sessions start in DIR there (default: this directory's path).
    #[arg(long, global = true, value_name = "[USER@]HOST[:DIR]")]
    remote: Option<String>,
    /// Run headless: one prompt (or stdin) in a new session here, print the answer and exit.
    #[arg(short = 'p', long = "print", value_name = "PROMPT", num_args = 0..=1, default_missing_value = "")]
    print: Option<String>,
    /// With -p: text (the answer), json (one result object), stream-json (Claude Code's
    /// messages: init, assistant and user messages, then the result) or events (tether's own
    /// event stream, then the result).
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    output_format: String,
    /// With -p: text (the prompt) or stream-json (one `{"type":"user",…}` prompt per stdin line).
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    input_format: String,
    /// With -p: permission mode of the session (default, acceptEdits, plan, bypassPermissions,
    /// dontAsk). Calls that would ask are denied: nobody is there to answer.
    #[arg(long, value_name = "MODE")]
    permission_mode: Option<String>,
    /// Model alias or id of the new session (with -r/-c: switches the resumed session).
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// With -p: run every tool call without asking (the bypassPermissions mode), as with
    /// claude's flag of the same name.
    #[arg(long, conflicts_with = "permission_mode")]
    dangerously_skip_permissions: bool,
    /// With -p: the new session's title (default: the prompt's first line).
    #[arg(short = 'n', long, value_name = "NAME")]
    name: Option<String>,
    /// Accepted for claude's scripts, which pass it with stream-json (tether's stream-json is
    /// always complete).
    #[arg(long)]
    verbose: bool,
    /// With -p and stream-json: also the API's stream events as they arrive (`stream_event`
    /// lines), as claude writes them.
    #[arg(long)]
    include_partial_messages: bool,
    /// Effort of each request (low, medium, high, xhigh, max; what the model takes).
    #[arg(long, value_name = "LEVEL")]
    effort: Option<String>,
    /// Most model requests per turn.
    #[arg(long, value_name = "N")]
    max_turns: Option<u32>,
    /// Allow these without asking (permission rules: `Bash(git diff:*)`, `Edit`).
    #[arg(long = "allowedTools", alias = "allowed-tools", value_name = "RULES", num_args = 1..)]
    allowed_tools: Vec<String>,
    /// Tools the model does not get.
    #[arg(long = "disallowedTools", alias = "disallowed-tools", value_name = "TOOLS", num_args = 1..)]
    disallowed_tools: Vec<String>,
    /// Only these tools (names, comma-separated); "" for none, "default" for all.
    #[arg(long, value_name = "TOOLS")]
    tools: Option<String>,
    /// The model to go on with when the session's model stays overloaded.
    #[arg(long, value_name = "MODEL")]
    fallback_model: Option<String>,
    /// With -p: stop (cancel the turn) once the run has cost more than this many dollars.
    #[arg(long, value_name = "USD")]
    max_budget_usd: Option<f64>,
    /// MCP servers from files or JSON strings in .mcp.json's shape
    /// (`{"mcpServers": {…}}`), several allowed.
    #[arg(long = "mcp-config", value_name = "FILE|JSON", num_args = 1..)]
    mcp_config: Vec<String>,
    /// Only the servers of --mcp-config, none from the configuration files.
    #[arg(long)]
    strict_mcp_config: bool,
    /// More settings in settings.json's shape, from a file or a JSON string: its
    /// permission rules, additionalDirectories, defaultMode, model and hooks apply to this run.
    #[arg(long, value_name = "FILE|JSON")]
    settings: Option<String>,
    /// With -p: a JSON Schema (of an object) the answer must match; the result's
    /// `structured_output` holds it.
    #[arg(long, value_name = "SCHEMA")]
    json_schema: Option<String>,
    /// Run as this agent (its prompt, tools and model), one of .claude/agents/,
    /// ~/.claude/agents/, --agents or the built-in ones.
    #[arg(long, value_name = "AGENT")]
    agent: Option<String>,
    /// Sub-agent types besides the project's and the user's, as JSON:
    /// `{"reviewer": {"description": "…", "prompt": "…", "tools": ["Read"], "model": "haiku"}}`.
    #[arg(long, value_name = "JSON")]
    agents: Option<String>,
    /// With -p: the new session's id (a UUID no session has yet), as with claude.
    #[arg(long, value_name = "UUID", conflicts_with_all = ["resume", "continue_last", "session"])]
    session_id: Option<String>,
    /// Text added to the system prompt.
    #[arg(long, value_name = "TEXT")]
    append_system_prompt: Option<String>,
    /// --append-system-prompt from a file.
    #[arg(long, value_name = "FILE", conflicts_with = "append_system_prompt")]
    append_system_prompt_file: Option<PathBuf>,
    /// Instructions replacing tether's own (the environment, git snapshot and memory
    /// files still follow).
    #[arg(long, value_name = "TEXT")]
    system_prompt: Option<String>,
    /// --system-prompt from a file.
    #[arg(long, value_name = "FILE", conflicts_with = "system_prompt")]
    system_prompt_file: Option<PathBuf>,
    /// More directories the tools may use without asking (absolute, or relative to
    /// this directory).
    #[arg(long = "add-dir", value_name = "DIR", num_args = 1..)]
    add_dir: Vec<PathBuf>,
    /// With -r/-c/--session: continue in a new session forked from that one (its history up to
    /// now), leaving it as it was.
    #[arg(long)]
    fork_session: bool,
    /// With -p: a command that answers permission requests: it reads the request as JSON on
    /// stdin and prints `{"behavior":"allow"}` or `{"behavior":"deny","message":"…"}`.
    #[arg(long, value_name = "CMD")]
    permission_prompt_command: Option<String>,
    /// With -p: an MCP tool (mcp__server__tool) that answers permission requests instead of
    /// denying them, as claude calls it.
    #[arg(
        long,
        value_name = "TOOL",
        conflicts_with = "permission_prompt_command"
    )]
    permission_prompt_tool: Option<String>,
    /// With -p: continue this session (id or prefix).
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Continue the most recent session in this directory (interactive, or with -p).
    #[arg(short = 'c', long = "continue")]
    continue_last: bool,
    /// Resume a session by id or prefix; without one, pick from this directory's sessions.
    #[arg(short = 'r', long = "resume", value_name = "ID", num_args = 0..=1, default_missing_value = "")]
    resume: Option<String>,
    /// Accepted for the Agent SDKs: thinking follows the model and --effort in tether.
    #[arg(long, value_name = "N", hide_short_help = true)]
    max_thinking_tokens: Option<u64>,
    /// Accepted for the Agent SDKs (adaptive, enabled, disabled): thinking follows the model
    /// and --effort in tether.
    #[arg(long, value_name = "MODE", hide_short_help = true)]
    thinking: Option<String>,
    /// Accepted for the Agent SDKs: how thinking is shown is the client's choice in tether.
    #[arg(long, value_name = "HOW", hide_short_help = true)]
    thinking_display: Option<String>,
    /// Accepted for the Agent SDKs: the daemon picks the API's beta headers per model.
    #[arg(long, value_name = "BETAS", hide_short_help = true)]
    betas: Option<String>,
    /// Accepted for the Agent SDKs: use --max-budget-usd to cap what a run spends.
    #[arg(long, value_name = "TOKENS", hide_short_help = true)]
    task_budget: Option<String>,
    /// Accepted for the Agent SDKs: tether reads every settings source (user, project, local).
    #[arg(long, value_name = "SOURCES", hide_short_help = true)]
    setting_sources: Option<String>,
    /// With stream-json: a `system` message (`hook_started`, `hook_response`) as each hook
    /// starts and ends.
    #[arg(long, hide_short_help = true)]
    include_hook_events: bool,
    /// Accepted for the Agent SDKs: tether loads no plugins (its skills, agents and commands
    /// come from .claude/).
    #[arg(long, value_name = "DIR", hide_short_help = true)]
    plugin_dir: Vec<String>,
    /// With --resume: go on from this message of the session (the `uuid` of an assistant
    /// message tether's stream-json gave), in a new session forked there.
    #[arg(long, value_name = "UUID", hide_short_help = true)]
    resume_session_at: Option<String>,
    /// Accepted for the Agent SDKs (with --resume-session-at).
    #[arg(long, value_name = "BOOL", hide_short_help = true)]
    resume_drops_turn: Option<String>,
    /// Accepted for the Agent SDKs: the session lives in the daemon, which keeps it.
    #[arg(long, hide_short_help = true)]
    session_mirror: bool,
    /// A first prompt for a new interactive session.
    #[arg(value_name = "PROMPT")]
    prompt: Option<String>,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// List sessions, most recently updated first.
    Sessions {
        /// Only sessions created in this directory.
        #[arg(long)]
        here: bool,
        /// Only sessions in this state: idle, running or awaiting_permission.
        #[arg(long)]
        status: Option<String>,
        /// At most this many (most recently active first).
        #[arg(long, short = 'n')]
        limit: Option<usize>,
        /// Only those whose id, title or conversation (prompts and replies) holds these words,
        /// whatever the case, each with the words around them.
        #[arg(long, value_name = "WORDS")]
        search: Option<String>,
    },
    /// The models the daemon knows: aliases, windows, thinking, effort levels and prices.
    Models,
    /// Create a session in the current directory and print its id.
    New {
        /// Its title.
        #[arg(long)]
        title: Option<String>,
        /// Model alias or id (default: sonnet).
        #[arg(long)]
        model: Option<String>,
        /// Permission mode: default, acceptEdits, plan, bypassPermissions, dontAsk.
        #[arg(long, value_name = "MODE")]
        permission_mode: Option<String>,
    },
    /// Delete sessions (their history too; attached terminals are told).
    Rm {
        /// Session ids or unique prefixes.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Answer a permission request with the approval token a PermissionRequest or Notification
    /// hook was given (from any shell that reaches the daemon).
    Approve {
        /// The token (`approval_token` in the hook's input).
        token: String,
        /// allow (once), session, always or deny.
        #[arg(default_value = "allow")]
        decision: String,
        /// For a deny: what the model should do instead.
        #[arg(long)]
        message: Option<String>,
    },
    /// Show or set the most a session may spend, in USD (0: no cap). A session paused at its
    /// budget goes on once it is raised.
    Budget {
        /// Session id or a unique prefix of one.
        id: String,
        /// The new budget in USD (e.g. 5 or 2.50; 0 removes the cap).
        amount: Option<String>,
    },
    /// Rewind a session to just before one of its turns: its files (as tether's snapshots
    /// recorded them), its conversation, or both. Without --to, lists the turns.
    Rewind {
        /// Session id or a unique prefix of one.
        id: String,
        /// The turn to go back to the start of (numbered from 1, as the list shows them).
        #[arg(long)]
        to: Option<u64>,
        /// Put back the files only.
        #[arg(long, conflicts_with_all = ["conversation", "both"])]
        code: bool,
        /// Rewind the conversation only.
        #[arg(long, conflicts_with = "both")]
        conversation: bool,
        /// Both (the default).
        #[arg(long)]
        both: bool,
        /// Also put back files edited outside tether since (they are kept by default).
        #[arg(long)]
        overwrite: bool,
    },
    /// Follow a session's events as they happen (Ctrl+C detaches).
    Attach {
        /// Session id or a unique prefix of one.
        id: String,
        /// Watch only; never act on the session.
        #[arg(long)]
        observe: bool,
        /// Replay from after this seq (default 0: the whole history), or `head` for live only.
        #[arg(long, default_value = "0")]
        since: String,
    },
    /// Control the daemon.
    Daemon {
        #[command(subcommand)]
        action: DaemonCmd,
    },
    /// The daemon's configuration.
    Config {
        #[command(subcommand)]
        action: ConfigCmd,
    },
    /// MCP servers, as `claude mcp` manages them (plus approve, reject and reconnect).
    Mcp {
        #[command(subcommand)]
        action: mcp::McpCmd,
    },
    /// Serve an editor over the Agent Client Protocol on stdin/stdout (Zed, Neovim, Emacs,
    /// JetBrains): its sessions are daemon sessions any terminal can attach to.
    Acp,
    /// Relay stdin/stdout to the local daemon's socket, starting the daemon if needed: the
    /// remote end of `--remote` (run by ssh). As an SSH forced command with --principal, the
    /// person at the other end is that principal, with the roles the session's owner gave
    /// them (see "Sharing a session" in the README).
    Bridge {
        /// Who is at the other end (a name the owner shares sessions with).
        #[arg(long)]
        principal: Option<String>,
        /// The most they may do through this bridge, whatever they were given: controller,
        /// approver or observer.
        #[arg(long)]
        role: Option<String>,
    },
    /// Give someone a role in a session (controller, approver or observer), or list who has
    /// one. Grants are events in the session's log.
    Share {
        /// Session id or a unique prefix of one.
        id: String,
        /// Who: a Unix user on this machine, or the name a bridge gives (--principal).
        #[arg(long = "with")]
        with: Option<String>,
        /// controller (prompt, answer, configure, cancel), approver (answer permission
        /// requests, questions and plans) or observer (watch).
        #[arg(long, default_value = "observer")]
        role: String,
    },
    /// Take someone's role in a session away; their clients are detached.
    Unshare {
        /// Session id or a unique prefix of one.
        id: String,
        /// Who.
        #[arg(long = "with")]
        with: String,
    },
    /// Every permission decision (of one session, or all): the tool, a hash of its input,
    /// the decision and what made it — a rule with its file and line, the mode, a hook, or
    /// a person with how they reached the daemon. Read from the logs.
    Audit {
        /// Session id or a unique prefix of one (default: every session).
        id: Option<String>,
        /// Only decisions since this time (RFC 3339) or span back from now (30m, 2h, 7d).
        #[arg(long)]
        since: Option<String>,
    },
    /// Trust a directory: its own settings' hooks, allow rules, env and additional
    /// directories, its `.mcp.json` servers and statusLine command may act there (kept in
    /// ~/.claude.json, as Claude Code keeps it).
    Trust {
        /// The directory (default: the current one); directories below it are trusted too.
        dir: Option<String>,
        /// No longer trust it.
        #[arg(long)]
        revoke: bool,
    },
    /// Check the socket, the daemon, its data directory, credentials, git and configuration.
    Doctor {
        /// Also check that the API answers (a free request, no tokens).
        #[arg(long)]
        online: bool,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCmd {
    /// Print the effective configuration and where each value came from (the running daemon's,
    /// else what a daemon started now would use).
    Show,
}

#[derive(Debug, Subcommand)]
enum DaemonCmd {
    /// Is the daemon running, and what does it hold?
    Status,
    /// Stop the daemon gracefully (sessions are kept).
    Stop,
    /// Write the systemd user units (socket activation) to ~/.config/systemd/user/.
    Install {
        /// Also run `systemctl --user enable --now tetherd.socket`.
        #[arg(long)]
        enable: bool,
    },
}

/// The servers of every `--mcp-config` (a file, or JSON text), merged; later ones win.
fn mcp_servers(args: &[String]) -> anyhow::Result<Option<serde_json::Value>> {
    use anyhow::Context;
    if args.is_empty() {
        return Ok(None);
    }
    let mut servers = serde_json::Map::new();
    for arg in args {
        let (text, what) = if arg.trim_start().starts_with('{') {
            (arg.clone(), "--mcp-config JSON".to_owned())
        } else {
            let text = std::fs::read_to_string(arg)
                .with_context(|| format!("--mcp-config: cannot read {arg}"))?;
            (text, arg.clone())
        };
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{what}: not valid JSON"))?;
        let Some(map) = v.get("mcpServers").and_then(|m| m.as_object()) else {
            anyhow::bail!("{what}: expected an object with \"mcpServers\"");
        };
        servers.extend(map.clone());
    }
    Ok(Some(serde_json::Value::Object(servers)))
}

/// A flag's file, read whole.
fn read_flag_file(flag: &str, path: &std::path::Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("{flag}: cannot read {}: {e}", path.display()))
}

/// `--add-dir` paths, made absolute against the working directory (the daemon checks that
/// they are directories where it runs).
fn add_dirs(dirs: &[PathBuf]) -> anyhow::Result<Vec<String>> {
    let base = PathBuf::from(remote::work_dir()?);
    Ok(dirs
        .iter()
        .map(|d| {
            if d.is_absolute() {
                d.display().to_string()
            } else {
                base.join(d).display().to_string()
            }
        })
        .collect())
}

/// A `--settings` value the client applies itself: `model`, or `defaultMode` (in
/// `permissions`).
fn setting_of(settings: &Option<serde_json::Value>, key: &str) -> Option<String> {
    let v = settings.as_ref()?;
    let v = if key == "defaultMode" {
        &v["permissions"][key]
    } else {
        &v[key]
    };
    v.as_str().map(str::to_owned)
}

/// What every turn of this run may do, from the command line (the REPL's turns and `-p`'s).
fn turn_options(
    cli: &Cli,
    settings: &Option<serde_json::Value>,
) -> anyhow::Result<tether_proto::TurnOptions> {
    Ok(tether_proto::TurnOptions {
        max_turns: cli.max_turns,
        allowed_tools: rule_list(&cli.allowed_tools),
        disallowed_tools: rule_list(&cli.disallowed_tools),
        tools: cli.tools.as_deref().and_then(tool_list),
        fallback_model: cli.fallback_model.clone(),
        mcp_config: mcp_servers(&cli.mcp_config)?,
        strict_mcp_config: cli.strict_mcp_config,
        append_system_prompt: match &cli.append_system_prompt_file {
            Some(f) => Some(read_flag_file("--append-system-prompt-file", f)?),
            None => cli.append_system_prompt.clone(),
        },
        system_prompt: match &cli.system_prompt_file {
            Some(f) => Some(read_flag_file("--system-prompt-file", f)?),
            None => cli.system_prompt.clone(),
        },
        add_dirs: add_dirs(&cli.add_dir)?,
        effort: cli.effort.clone(),
        agents: agents_flag(cli.agents.as_deref())?,
        agent: cli.agent.clone(),
        settings: settings.clone(),
        ..Default::default()
    })
}

/// The settings keys `--settings` applies; others are named on stderr as not used.
const SETTINGS_KEYS: &[&str] = &["permissions", "hooks", "model", "$schema"];

/// `--settings`: a settings object from a file or a JSON string.
fn settings_flag(arg: Option<&str>) -> anyhow::Result<Option<serde_json::Value>> {
    let Some(arg) = arg else { return Ok(None) };
    let (text, what) = if arg.trim_start().starts_with('{') {
        (arg.to_owned(), "--settings JSON".to_owned())
    } else {
        (
            read_flag_file("--settings", std::path::Path::new(arg))?,
            arg.to_owned(),
        )
    };
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{what}: not valid JSON: {e}"))?;
    let Some(map) = v.as_object() else {
        anyhow::bail!("{what}: expected a settings object");
    };
    let unused: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|k| !SETTINGS_KEYS.contains(k))
        .collect();
    if !unused.is_empty() {
        eprintln!(
            "tether: {what}: not used by tether: {} (permissions, hooks and model are)",
            unused.join(", ")
        );
    }
    Ok(Some(v))
}

/// `--allowedTools` / `--disallowedTools` rules as claude takes them: separate arguments, or
/// one argument of rules separated by commas or spaces — never inside a rule's parentheses
/// (`"Bash(git add:*) Edit"` is two rules).
fn rule_list(values: &[String]) -> Vec<String> {
    let mut rules = Vec::new();
    for value in values {
        let mut depth = 0usize;
        let mut current = String::new();
        for c in value.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ => {}
            }
            if depth == 0 && (c == ',' || c.is_whitespace()) {
                if !current.trim().is_empty() {
                    rules.push(current.trim().to_owned());
                }
                current.clear();
            } else {
                current.push(c);
            }
        }
        if !current.trim().is_empty() {
            rules.push(current.trim().to_owned());
        }
    }
    rules
}

/// `--agents`: an object of agents by name, as JSON or a file holding it.
fn agents_flag(arg: Option<&str>) -> anyhow::Result<Option<serde_json::Value>> {
    let Some(arg) = arg else { return Ok(None) };
    let text = if arg.trim_start().starts_with(['{', '[']) {
        arg.to_owned()
    } else {
        read_flag_file("--agents", std::path::Path::new(arg))?
    };
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("--agents: not valid JSON: {e}"))?;
    if !v.is_object() {
        anyhow::bail!("--agents: expected an object of agents by name");
    }
    Ok(Some(v))
}

/// `--tools` as claude takes it: names separated by commas or spaces, `""` for none, `default`
/// for all (`None`: no restriction).
fn tool_list(arg: &str) -> Option<Vec<String>> {
    if arg.trim() == "default" {
        return None;
    }
    Some(
        arg.split([',', ' '])
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tether: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let host = match connection::share_host(cli.shared_by.as_deref()) {
        Ok(host) => host,
        Err(e) => {
            eprintln!("tether: {e}");
            return ExitCode::from(2);
        }
    };
    let socket = cli.socket.clone().unwrap_or_else(|| match host {
        // Another user's daemon: its shared socket, unless a socket was named.
        Some(host) if std::env::var_os("TETHER_SOCKET").is_none() => {
            tether_proto::paths::PathEnv::shared_socket(host.uid)
        }
        _ => connection::path_env().socket(),
    });
    let out = commands::Output { json: cli.json };
    // The bridge is always the local end (even where $TETHER_REMOTE is set); everything
    // else may be remote.
    if !matches!(cli.command, Some(Cmd::Bridge { .. }))
        && let Err(e) = remote::configure(cli.remote.as_deref())
    {
        eprintln!("tether: {e}");
        return ExitCode::from(2);
    }
    let result = runtime.block_on(async {
        // The Agent SDKs run `tether --output-format stream-json --input-format stream-json …`,
        // without -p: stream-json input is headless.
        let print = cli
            .print
            .clone()
            .or_else(|| (cli.input_format == "stream-json").then(String::new));
        if let Some(prompt) = print {
            // `tether -p --model opus "say hi"`: the prompt may follow the flags, as with claude.
            let prompt = match (prompt.is_empty(), &cli.prompt) {
                (true, Some(p)) => p.clone(),
                _ => prompt,
            };
            let named = cli
                .session
                .as_ref()
                .or(cli.resume.as_ref().filter(|r| !r.is_empty()));
            let session = match (named, cli.continue_last) {
                (Some(id), _) => Some(commands::pick_session(&socket, id).await?),
                (None, true) => repl::most_recent_here(&socket).await?,
                (None, false) => None,
            };
            let at = match cli.resume_session_at.as_deref() {
                Some(uuid) => Some(stream_json::seq_of(uuid).ok_or_else(|| {
                    anyhow::anyhow!(
                        "--resume-session-at: {uuid} is not the uuid of a message tether gave"
                    )
                })?),
                None => None,
            };
            let session = match (session, at) {
                (Some(id), Some(at)) => Some(commands::fork_at(&socket, id, Some(at)).await?),
                (None, Some(_)) => anyhow::bail!("--resume-session-at needs --resume"),
                (Some(id), None) if cli.fork_session => Some(commands::fork(&socket, id).await?),
                (other, None) => other,
            };
            let settings = settings_flag(cli.settings.as_deref())?;
            let from_settings = |key: &str| setting_of(&settings, key);
            let headless = headless::Headless {
                prompt: Some(prompt).filter(|p| !p.is_empty()),
                format: cli.output_format.clone(),
                input_format: cli.input_format.clone(),
                permission_mode: if cli.dangerously_skip_permissions {
                    Some("bypassPermissions".into())
                } else {
                    cli.permission_mode.clone().or(from_settings("defaultMode"))
                },
                model: cli.model.clone().or(from_settings("model")),
                name: cli.name.clone(),
                session,
                options: tether_proto::TurnOptions {
                    // Nobody reads a headless run's thinking; the answer starts sooner without it.
                    hide_thinking: true,
                    permission_prompt_tool: cli.permission_prompt_tool.clone(),
                    json_schema: cli
                        .json_schema
                        .as_deref()
                        .map(|s| {
                            serde_json::from_str(s)
                                .map_err(|e| anyhow::anyhow!("--json-schema: not valid JSON: {e}"))
                        })
                        .transpose()?,
                    ..turn_options(&cli, &settings)?
                },
                permission_prompt_command: cli.permission_prompt_command.clone(),
                include_partial_messages: cli.include_partial_messages,
                include_hook_events: cli.include_hook_events,
                max_budget_usd: cli.max_budget_usd,
                session_id: cli.session_id.clone().map(tether_proto::SessionId),
            };
            if headless.input_format == "stream-json" && headless.format == "stream-json" {
                return sdk::run(&socket, headless).await;
            }
            return headless::run(&socket, headless).await;
        }
        match cli.command {
            None => {
                let session = match (&cli.resume, cli.continue_last) {
                    (Some(id), _) => Some(commands::pick_session(&socket, id).await?),
                    (None, true) => match repl::most_recent_here(&socket).await? {
                        Some(id) => Some(id),
                        None => anyhow::bail!("no session in this directory yet; run tether"),
                    },
                    (None, false) => None,
                };
                let session = match session {
                    Some(id) if cli.fork_session => Some(commands::fork(&socket, id).await?),
                    other => other,
                };
                let settings = settings_flag(cli.settings.as_deref())?;
                let setting = |key: &str| setting_of(&settings, key);
                let start = repl::Start {
                    session,
                    prompt: cli.prompt.clone(),
                    observe: false,
                    model: cli.model.clone().or(setting("model")),
                    permission_mode: commands::parse_mode(
                        cli.permission_mode.clone().or(setting("defaultMode")),
                    )?,
                    name: cli.name.clone(),
                    options: turn_options(&cli, &settings)?,
                };
                repl::run(&socket, start).await
            }
            Some(Cmd::Sessions {
                here,
                status,
                limit,
                search,
            }) => commands::sessions(&socket, out, here, status, limit, search).await,
            Some(Cmd::New {
                title,
                model,
                permission_mode,
            }) => commands::new(&socket, out, title, model, permission_mode).await,
            Some(Cmd::Rm { ids }) => commands::remove(&socket, out, &ids).await,
            Some(Cmd::Approve {
                token,
                decision,
                message,
            }) => commands::approve(&socket, out, &token, &decision, message).await,
            Some(Cmd::Budget { id, amount }) => {
                commands::budget(&socket, out, &id, amount.as_deref()).await
            }
            Some(Cmd::Rewind {
                id,
                to,
                code,
                conversation,
                both: _,
                overwrite,
            }) => {
                let scope = if code {
                    tether_proto::RewindScope::Code
                } else if conversation {
                    tether_proto::RewindScope::Conversation
                } else {
                    tether_proto::RewindScope::Both
                };
                commands::rewind(&socket, out, &id, to, scope, overwrite).await
            }
            Some(Cmd::Attach { id, observe, since }) => {
                if repl::wants_interactive(out) && since == "0" {
                    let session = commands::pick_session(&socket, &id).await?;
                    let start = repl::Start {
                        session: Some(session),
                        prompt: None,
                        observe,
                        model: None,
                        permission_mode: None,
                        name: None,
                        options: Default::default(),
                    };
                    return repl::run(&socket, start).await;
                }
                commands::attach(&socket, out, &id, observe, &since).await
            }
            Some(Cmd::Daemon {
                action: DaemonCmd::Status,
            }) => commands::daemon_status(&socket, out).await,
            Some(Cmd::Config {
                action: ConfigCmd::Show,
            }) => commands::config_show(&socket, out).await,
            Some(Cmd::Doctor { online }) => commands::doctor(&socket, out, online).await,
            Some(Cmd::Trust { dir, revoke }) => trust::command(&socket, out, dir, revoke).await,
            Some(Cmd::Models) => commands::models(&socket, out).await,
            Some(Cmd::Mcp { action }) => mcp::run(&socket, out, action).await,
            Some(Cmd::Acp) => acp::run(&socket).await,
            Some(Cmd::Bridge { principal, role }) => {
                let role = role.as_deref().map(sharing::parse_role).transpose()?;
                bridge::run(&socket, principal, role).await
            }
            Some(Cmd::Share { id, with, role }) => {
                sharing::share(&socket, out, &id, with, &role).await
            }
            Some(Cmd::Unshare { id, with }) => sharing::unshare(&socket, out, &id, with).await,
            Some(Cmd::Audit { id, since }) => {
                sharing::audit(&socket, out, id.as_deref(), since.as_deref()).await
            }
            Some(Cmd::Daemon {
                action: DaemonCmd::Stop,
            }) => commands::daemon_stop(&socket, out).await,
            Some(Cmd::Daemon {
                action: DaemonCmd::Install { enable },
            }) => commands::daemon_install(enable),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tether: {}", connection::describe(&e));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rules_split_at_commas_and_spaces_but_not_inside_parentheses() {
        let given =
            |v: &[&str]| super::rule_list(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            given(&["Bash(git add:*) Edit,Read", "Bash(npm run test:*)"]),
            ["Bash(git add:*)", "Edit", "Read", "Bash(npm run test:*)"]
        );
        assert_eq!(given(&["Bash(a, b)"]), ["Bash(a, b)"]);
        assert!(given(&[" , "]).is_empty());
    }
}
