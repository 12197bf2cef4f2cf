//! Which MCP servers a session has, read exactly where Claude Code keeps them: the project's
//! `.mcp.json` (project scope, used once approved), `~/.claude.json`'s `mcpServers` (user
//! scope) and `projects["<dir>"].mcpServers` (local scope), and the servers a headless run
//! passes (`--mcp-config`, with `--strict-mcp-config` using only those). `${VAR}` and
//! `${VAR:-default}` are expanded in command, args, env, url and headers. Also the servers'
//! timeouts and limits (`Limits`), from Claude Code's environment variables.
//!
//! Invariant: a malformed file or entry is a problem naming the file, line and key; it never
//! hides the other servers.

use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::json_file::user_state_file;
use std::time::Duration;

/// Timeouts and limits, from the environment (Claude Code's names) and tether's settings.
#[derive(Debug, Clone)]
pub struct Limits {
    /// How long a server may take to start and answer the handshake (`MCP_TIMEOUT`, ms).
    pub start: Duration,
    /// How long one tool call may take (`MCP_TOOL_TIMEOUT`, ms); `None`: the turn's tool
    /// timeout alone.
    pub call: Option<Duration>,
    /// How long an unused server stays up (`TETHER_MCP_IDLE_MS`).
    pub idle: Duration,
    /// The most a tool result may hold, in tokens (`MAX_MCP_OUTPUT_TOKENS`).
    pub max_output_tokens: usize,
}

impl Limits {
    /// Claude Code's defaults, overridden by its environment variables.
    pub fn from_env() -> Self {
        let ms = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|v| *v > 0)
                .map(Duration::from_millis)
        };
        Self {
            start: ms("MCP_TIMEOUT").unwrap_or(Duration::from_secs(30)),
            call: ms("MCP_TOOL_TIMEOUT"),
            idle: ms("TETHER_MCP_IDLE_MS").unwrap_or(Duration::from_secs(600)),
            max_output_tokens: std::env::var("MAX_MCP_OUTPUT_TOKENS")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .filter(|v| *v > 0)
                .unwrap_or(25_000),
        }
    }
}

/// How tether reaches a server.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Transport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment.
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP (the current transport).
    Http {
        /// The endpoint.
        url: String,
        /// Extra headers.
        headers: BTreeMap<String, String>,
    },
    /// The older HTTP+SSE transport.
    Sse {
        /// The SSE endpoint.
        url: String,
        /// Extra headers.
        headers: BTreeMap<String, String>,
    },
}

impl Transport {
    /// Its `type` as Claude Code writes it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Stdio { .. } => "stdio",
            Self::Http { .. } => "http",
            Self::Sse { .. } => "sse",
        }
    }

    /// The command line or URL, for listings (header and env values are never shown).
    pub fn target(&self) -> String {
        match self {
            Self::Stdio { command, args, .. } => std::iter::once(command.as_str())
                .chain(args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            Self::Http { url, .. } | Self::Sse { url, .. } => url.clone(),
        }
    }
}

/// Where a server was configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// `--mcp-config` of a headless run.
    Flag,
    /// `~/.claude.json`'s `projects["<dir>"].mcpServers`: this project, this user.
    Local,
    /// The project's `.mcp.json`, shared through version control.
    Project,
    /// `~/.claude.json`'s `mcpServers`: every project of this user.
    User,
}

impl Scope {
    /// Claude Code's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Flag => "dynamic",
            Self::Local => "local",
            Self::Project => "project",
            Self::User => "user",
        }
    }
}

/// One configured server, its values expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Its name (the `<server>` of `mcp__<server>__<tool>`).
    pub name: String,
    /// How it is reached.
    pub transport: Transport,
    /// Where it was configured.
    pub scope: Scope,
    /// The file it came from (or `--mcp-config`).
    pub source: String,
}

/// What a project's MCP configuration says.
#[derive(Debug, Clone, Default)]
pub struct McpConfig {
    /// The servers to run, by name (a name in several scopes: local, then project, then user).
    pub servers: Vec<ServerConfig>,
    /// Servers of the project's `.mcp.json` nobody has approved or rejected yet.
    pub unapproved: Vec<String>,
    /// Servers of `.mcp.json` that were rejected (`disabledMcpjsonServers`).
    pub rejected: Vec<String>,
    /// `file:line: key: why` for everything that could not be read.
    pub problems: Vec<String>,
}

/// What a headless run passes: `--mcp-config` servers and `--strict-mcp-config`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extra {
    /// An object of servers in `.mcp.json`'s shape (the `mcpServers` value).
    pub servers: Option<Value>,
    /// Only these servers: none from the files.
    pub strict: bool,
}

/// The `.mcp.json` that applies to `cwd`: the nearest one in it or a directory above.
pub fn project_file(cwd: &Path) -> Option<PathBuf> {
    cwd.ancestors()
        .map(|d| d.join(".mcp.json"))
        .find(|f| f.is_file())
}

/// The servers of the project at `cwd` for a user whose home is `home`, with what a headless
/// run added. `env` looks up variables for `${VAR}`.
pub fn load(
    cwd: &Path,
    home: Option<&Path>,
    extra: &Extra,
    env: &dyn Fn(&str) -> Option<String>,
) -> McpConfig {
    let mut config = McpConfig::default();
    let mut found: BTreeMap<String, ServerConfig> = BTreeMap::new();
    // A name in several scopes: the narrower one wins.
    let add = |found: &mut BTreeMap<String, ServerConfig>, list: Vec<ServerConfig>| {
        for server in list {
            if found
                .get(&server.name)
                .is_none_or(|old| server.scope < old.scope)
            {
                found.insert(server.name.clone(), server);
            }
        }
    };
    if let Some(servers) = &extra.servers {
        let list = servers_of(servers, "--mcp-config", None, Scope::Flag, env, &mut config);
        add(&mut found, list);
    }
    if !extra.strict {
        let state_file = user_state_file(home);
        let state = state_file
            .as_deref()
            .and_then(|f| read_json(f, &mut config.problems));
        let state_source = state_file
            .as_deref()
            .map(|f| f.display().to_string())
            .unwrap_or_default();
        let project_state = state
            .as_ref()
            .and_then(|s| s.0.get("projects"))
            .and_then(|p| p.get(cwd.to_string_lossy().as_ref()));
        if let Some(parsed) = &state {
            let (v, text) = &**parsed;
            if let Some(servers) = v.get("mcpServers") {
                let list = servers_of(
                    servers,
                    &state_source,
                    Some(text),
                    Scope::User,
                    env,
                    &mut config,
                );
                add(&mut found, list);
            }
            if let Some(servers) = project_state.and_then(|p| p.get("mcpServers")) {
                let list = servers_of(
                    servers,
                    &state_source,
                    Some(text),
                    Scope::Local,
                    env,
                    &mut config,
                );
                add(&mut found, list);
            }
        }
        if let Some(file) = project_file(cwd)
            && let Some(parsed) = read_json(&file, &mut config.problems)
        {
            let (v, text) = &*parsed;
            let source = file.display().to_string();
            let servers = v.get("mcpServers").cloned().unwrap_or(Value::Null);
            if servers.is_null() {
                config.problems.push(format!(
                    "{source}: no \"mcpServers\" object, so it defines no servers"
                ));
            }
            if !crate::trust::is_trusted(cwd, home) {
                let names: Vec<&str> = servers
                    .as_object()
                    .map(|m| m.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                config.problems.push(format!(
                    "{source}: its servers ({}) do not start: {} is not trusted (run `tether trust` there to trust it)",
                    names.join(", "),
                    cwd.display()
                ));
                config.servers = found.into_values().collect();
                return config;
            }
            let approval = Approval::read(cwd, home, project_state);
            let list = servers_of(
                &servers,
                &source,
                Some(text),
                Scope::Project,
                env,
                &mut config,
            );
            let mut approved = Vec::new();
            for server in list {
                match approval.of(&server.name) {
                    Some(true) => approved.push(server),
                    Some(false) => config.rejected.push(server.name),
                    None => config.unapproved.push(server.name),
                }
            }
            add(&mut found, approved);
        }
    }
    config.servers = found.into_values().collect();
    // A name approved elsewhere (another scope) is not waiting.
    config
        .unapproved
        .retain(|n| !config.servers.iter().any(|s| &s.name == n));
    config
}

/// Whether the servers of a project's `.mcp.json` may run: Claude Code's settings keys
/// (`enableAllProjectMcpServers`, `enabledMcpjsonServers`, `disabledMcpjsonServers`) in the
/// settings files, then the answers remembered in `~/.claude.json`.
#[derive(Debug, Default)]
struct Approval {
    all: bool,
    enabled: Vec<String>,
    disabled: Vec<String>,
}

impl Approval {
    fn read(cwd: &Path, home: Option<&Path>, project_state: Option<&Value>) -> Self {
        let mut a = Self::default();
        for (_, v) in crate::settings::files(cwd, home) {
            a.absorb(&v);
        }
        if let Some(p) = project_state {
            a.absorb(p);
        }
        a
    }

    fn absorb(&mut self, v: &Value) {
        if v.get("enableAllProjectMcpServers").and_then(Value::as_bool) == Some(true) {
            self.all = true;
        }
        self.enabled.extend(names_at(v, "enabledMcpjsonServers"));
        self.disabled.extend(names_at(v, "disabledMcpjsonServers"));
    }

    /// `Some(true)` approved, `Some(false)` rejected, `None` not answered.
    fn of(&self, name: &str) -> Option<bool> {
        if self.disabled.iter().any(|n| n == name) {
            Some(false)
        } else if self.all || self.enabled.iter().any(|n| n == name) {
            Some(true)
        } else {
            None
        }
    }
}

/// The strings of the list `v[key]` (server names); anything else reads as none.
pub(super) fn names_at(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A JSON file and its text; a file that is not JSON is a problem with its line.
/// Every turn reads the configuration again, and `~/.claude.json` (Claude Code's state) can hold
/// megabytes: a file is parsed again only when its modification time or length changed.
static PARSED: std::sync::LazyLock<Mutex<HashMap<PathBuf, Seen>>> =
    std::sync::LazyLock::new(Default::default);

/// A file as last parsed, with the stamp it had then.
type Seen = (Stamp, Arc<Parsed>);

/// A file's modification time and length.
type Stamp = (Option<std::time::SystemTime>, u64);

/// A JSON object and the text it was read from (for line numbers).
type Parsed = (Value, String);

fn read_json(file: &Path, problems: &mut Vec<String>) -> Option<Arc<Parsed>> {
    let meta = std::fs::metadata(file).ok()?;
    let stamp = (meta.modified().ok(), meta.len());
    let mut parsed = PARSED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((seen, cached)) = parsed.get(file)
        && *seen == stamp
    {
        return Some(cached.clone());
    }
    let text = std::fs::read_to_string(file).ok()?;
    match serde_json::from_str::<Value>(&text) {
        Ok(v) if v.is_object() => {
            let fresh = Arc::new((v, text));
            parsed.insert(file.to_owned(), (stamp, fresh.clone()));
            Some(fresh)
        }
        Ok(_) => {
            problems.push(format!("{}: not a JSON object", file.display()));
            None
        }
        Err(e) => {
            problems.push(format!(
                "{}:{}: not valid JSON: {e}",
                file.display(),
                e.line()
            ));
            None
        }
    }
}

/// The line of `text` where `"name"` first appears as a key, for messages.
fn line_of(text: Option<&String>, name: &str) -> String {
    let Some(text) = text else {
        return String::new();
    };
    let needle = format!("\"{name}\"");
    text.lines()
        .position(|l| l.contains(&needle))
        .map(|i| format!(":{}", i + 1))
        .unwrap_or_default()
}

/// The servers of one `mcpServers` object; bad entries become problems.
fn servers_of(
    servers: &Value,
    source: &str,
    text: Option<&String>,
    scope: Scope,
    env: &dyn Fn(&str) -> Option<String>,
    config: &mut McpConfig,
) -> Vec<ServerConfig> {
    let Some(map) = servers.as_object() else {
        if !servers.is_null() {
            config.problems.push(format!(
                "{source}: mcpServers must be an object of servers by name"
            ));
        }
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, entry) in map {
        let at = format!("{source}{}: mcpServers.{name}", line_of(text, name));
        match server_of(name, entry, env) {
            Ok(transport) => out.push(ServerConfig {
                name: name.clone(),
                transport,
                scope,
                source: source.to_owned(),
            }),
            Err(why) => config.problems.push(format!("{at}: {why}")),
        }
    }
    out
}

/// One entry: its transport, values expanded.
pub fn server_of(
    name: &str,
    entry: &Value,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Transport, String> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(
            "a server name may hold only letters, digits, '_' and '-' (it becomes part of tool names)"
                .into(),
        );
    }
    let Some(o) = entry.as_object() else {
        return Err("must be an object".into());
    };
    let kind = match o.get("type") {
        None => {
            if o.contains_key("url") && !o.contains_key("command") {
                "http"
            } else {
                "stdio"
            }
        }
        Some(Value::String(t)) => t.as_str(),
        Some(_) => return Err("type must be a string".into()),
    };
    let string = |key: &str| -> Result<Option<String>, String> {
        match o.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => expand(s, env).map(Some).map_err(|e| format!("{key}: {e}")),
            Some(_) => Err(format!("{key} must be a string")),
        }
    };
    let table = |key: &str| -> Result<BTreeMap<String, String>, String> {
        match o.get(key) {
            None | Some(Value::Null) => Ok(BTreeMap::new()),
            Some(Value::Object(m)) => expand_map(m, env).map_err(|e| format!("{key}.{e}")),
            Some(_) => Err(format!("{key} must be an object of strings")),
        }
    };
    match kind {
        "stdio" => {
            let command = string("command")?.ok_or("missing \"command\"")?;
            if command.trim().is_empty() {
                return Err("command is empty".into());
            }
            let args = match o.get("args") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        Value::String(s) => expand(s, env).map_err(|e| format!("args[{i}]: {e}")),
                        _ => Err(format!("args[{i}] must be a string")),
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err("args must be a list of strings".into()),
            };
            Ok(Transport::Stdio {
                command,
                args,
                env: table("env")?,
            })
        }
        "http" | "streamable-http" | "sse" => {
            let url = string("url")?.ok_or("missing \"url\"")?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("url {url:?} is not an http(s) URL"));
            }
            let headers = table("headers")?;
            Ok(if kind == "sse" {
                Transport::Sse { url, headers }
            } else {
                Transport::Http { url, headers }
            })
        }
        other => Err(format!(
            "unknown type {other:?} (expected \"stdio\", \"http\" or \"sse\")"
        )),
    }
}

fn expand_map(
    m: &Map<String, Value>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, String> {
    m.iter()
        .map(|(k, v)| match v {
            Value::String(s) => expand(s, env)
                .map(|s| (k.clone(), s))
                .map_err(|e| format!("{k}: {e}")),
            _ => Err(format!("{k} must be a string")),
        })
        .collect()
}

/// Expands `${VAR}` and `${VAR:-default}`; a variable that is unset and has no default is an
/// error naming it.
pub fn expand(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(format!("unclosed ${{ in {text:?}"));
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        match env(name).or_else(|| default.map(str::to_owned)) {
            Some(v) => out.push_str(&v),
            None => return Err(format!("the environment variable {name} is not set")),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("t0k".into()),
            "HOME" => Some("/home/u".into()),
            _ => None,
        }
    }

    #[test]
    fn expands_variables_and_defaults() {
        assert_eq!(
            expand("Bearer ${TOKEN}", &env).expect("test setup"),
            "Bearer t0k"
        );
        assert_eq!(
            expand("${MISSING:-x}/${HOME}", &env).expect("test setup"),
            "x//home/u"
        );
        assert_eq!(expand("plain", &env).expect("test setup"), "plain");
        assert!(
            expand("${MISSING}", &env)
                .expect_err("an error")
                .contains("MISSING")
        );
        assert!(expand("${OPEN", &env).is_err());
    }

    #[test]
    fn reads_each_transport() {
        let stdio = server_of(
            "fs",
            &json!({"command": "npx", "args": ["-y", "${HOME}"], "env": {"K": "${TOKEN}"}}),
            &env,
        )
        .expect("test setup");
        assert_eq!(
            stdio,
            Transport::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "/home/u".into()],
                env: [("K".to_owned(), "t0k".to_owned())].into(),
            }
        );
        let http = server_of(
            "h",
            &json!({"type": "http", "url": "http://x/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}),
            &env,
        )
        .expect("test setup");
        assert!(
            matches!(http, Transport::Http { ref headers, .. } if headers["Authorization"] == "Bearer t0k")
        );
        assert_eq!(
            server_of("s", &json!({"type": "sse", "url": "https://x/sse"}), &env)
                .expect("test setup")
                .kind(),
            "sse"
        );
        assert!(
            server_of("bad name", &json!({"command": "x"}), &env)
                .expect_err("an error")
                .contains("name")
        );
        assert!(
            server_of("x", &json!({"type": "ws", "url": "http://x"}), &env)
                .expect_err("an error")
                .contains("unknown type")
        );
        assert!(
            server_of("x", &json!({"args": []}), &env)
                .expect_err("an error")
                .contains("command")
        );
    }

    #[test]
    fn scopes_approval_and_problems() {
        let home = tempfile::tempdir().expect("test setup");
        let project = tempfile::tempdir().expect("test setup");
        let cwd = project.path();
        std::fs::write(
            cwd.join(".mcp.json"),
            r#"{
  "mcpServers": {
    "shared": {"command": "project-shared"},
    "approved": {"command": "a"},
    "waiting": {"command": "w"},
    "broken": {"type": "http"}
  }
}"#,
        )
        .expect("test setup");
        std::fs::create_dir_all(cwd.join(".claude")).expect("test setup");
        std::fs::write(
            cwd.join(".claude/settings.json"),
            r#"{"enabledMcpjsonServers": ["approved", "shared", "broken"]}"#,
        )
        .expect("test setup");
        let state = json!({
            "mcpServers": {"shared": {"command": "user-shared"}, "mine": {"command": "m"}},
            "projects": {cwd.to_string_lossy(): {"mcpServers": {"shared": {"command": "local-shared"}}}}
        });
        std::fs::write(home.path().join(".claude.json"), state.to_string()).expect("test setup");
        crate::trust::set(cwd, Some(home.path()), true).expect("test setup");
        let c = load(cwd, Some(home.path()), &Extra::default(), &env);
        let names: Vec<(&str, Scope)> = c
            .servers
            .iter()
            .map(|s| (s.name.as_str(), s.scope))
            .collect();
        assert_eq!(
            names,
            [
                ("approved", Scope::Project),
                ("mine", Scope::User),
                ("shared", Scope::Local)
            ]
        );
        assert_eq!(c.unapproved, ["waiting"]);
        assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
        assert!(
            c.problems[0].contains(".mcp.json:6: mcpServers.broken: missing \"url\""),
            "{:?}",
            c.problems
        );

        let strict = Extra {
            servers: Some(json!({"only": {"command": "o"}})),
            strict: true,
        };
        let c = load(cwd, Some(home.path()), &strict, &env);
        assert_eq!(c.servers.len(), 1);
        assert_eq!(c.servers[0].scope, Scope::Flag);
    }

    #[test]
    fn malformed_file_names_its_line() {
        let project = tempfile::tempdir().expect("test setup");
        std::fs::write(
            project.path().join(".mcp.json"),
            "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\",}\n  }\n}\n",
        )
        .expect("test setup");
        let c = load(project.path(), None, &Extra::default(), &env);
        assert!(c.servers.is_empty());
        assert!(
            c.problems[0].contains(".mcp.json:3: not valid JSON"),
            "{:?}",
            c.problems
        );
    }
}
