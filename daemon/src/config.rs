//! tetherd's configuration: built-in defaults, then `~/.config/tether/config.toml`, then
//! environment variables, then command-line flags (`--set key=value`), each layer overriding the
//! one before. Every value remembers where it came from, for `tether config show`.
//!
//! Invariant: the one place that reads tetherd's settings from the environment. A bad value in
//! any layer is an error naming the file and line, or the variable or flag, and the key; the
//! daemon refuses to start rather than guess.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tether_proto::{ConfigEntry, PermissionMode};

/// One configuration key: its dotted name, the environment variables that set it (first wins),
/// its default as TOML, and what it does.
struct Key {
    name: &'static str,
    env: &'static [&'static str],
    default: &'static str,
    doc: &'static str,
}

/// Every key, in the order `config show` lists them.
const KEYS: &[Key] = &[
    Key {
        name: "model",
        env: &["ANTHROPIC_MODEL"],
        default: "\"sonnet\"",
        doc: "model of new sessions (alias or id)",
    },
    Key {
        name: "fallback_model",
        env: &["TETHER_FALLBACK_MODEL"],
        default: "\"\"",
        doc: "model used when the model stays overloaded (empty: none)",
    },
    Key {
        name: "fast_model",
        env: &["ANTHROPIC_SMALL_FAST_MODEL"],
        default: "\"haiku\"",
        doc: "small model for titles and WebFetch",
    },
    Key {
        name: "permission_mode",
        env: &["TETHER_PERMISSION_MODE"],
        default: "\"default\"",
        doc: "permission mode of new sessions",
    },
    Key {
        name: "budget_usd",
        env: &["TETHER_BUDGET_USD"],
        default: "0",
        doc: "the most a new session may spend, in USD; at it the session pauses (0: no cap)",
    },
    Key {
        name: "daily_budget_usd",
        env: &["TETHER_DAILY_BUDGET_USD"],
        default: "0",
        doc: "the most all sessions together may spend in a UTC day, in USD (0: no cap)",
    },
    Key {
        name: "max_output_tokens",
        env: &["TETHER_MAX_OUTPUT_TOKENS", "CLAUDE_CODE_MAX_OUTPUT_TOKENS"],
        default: "0",
        doc: "max_tokens of each request, capped by the model's limit (0: the model's limit)",
    },
    Key {
        name: "effort",
        env: &["TETHER_EFFORT", "CLAUDE_CODE_EFFORT_LEVEL"],
        default: "\"\"",
        doc: "effort of each request: low, medium, high, xhigh or max, as the model takes (empty: the model's default)",
    },
    Key {
        name: "thinking",
        env: &["TETHER_THINKING"],
        default: "\"auto\"",
        doc: "extended thinking: auto (adaptive where the model has it) or off (where the model allows)",
    },
    Key {
        name: "thinking_budget",
        env: &["MAX_THINKING_TOKENS"],
        default: "0",
        doc: "thinking budget in tokens for models without adaptive thinking (0: they do not think)",
    },
    Key {
        name: "context_editing",
        env: &["TETHER_CONTEXT_EDITING"],
        default: "true",
        doc: "send clear_thinking context edits where the model supports them",
    },
    Key {
        name: "cache_ttl",
        env: &["TETHER_CACHE_TTL"],
        default: "\"auto\"",
        doc: "prompt-cache lifetime of the stable prefix: auto (1h for interactive turns, 5m for scripts), 5m or 1h",
    },
    Key {
        name: "betas",
        env: &["ANTHROPIC_BETAS"],
        default: "\"\"",
        doc: "extra anthropic-beta features for every request, comma-separated",
    },
    Key {
        name: "tool_timeout",
        env: &["TETHER_TOOL_TIMEOUT"],
        default: "\"10m\"",
        doc: "longest a tool call may run",
    },
    Key {
        name: "auto_compact_percent",
        env: &["TETHER_AUTO_COMPACT_PERCENT"],
        default: "90",
        doc: "compact when the context is this full (percent); \"off\" disables",
    },
    Key {
        name: "max_connections",
        env: &["TETHER_MAX_CONNECTIONS"],
        default: "1024",
        doc: "most client connections at once, WebSocket and NDJSON together; more are refused with a message",
    },
    Key {
        name: "idle_unload",
        env: &["TETHER_IDLE_UNLOAD"],
        default: "\"15m\"",
        doc: "unload idle sessions from memory after this long; \"off\" keeps them",
    },
    Key {
        name: "delta_retention",
        env: &["TETHER_DELTA_RETENTION"],
        default: "\"7d\"",
        doc: "keep the streaming deltas of finished turns this long; \"off\" keeps them forever",
    },
    Key {
        name: "provider",
        env: &["TETHER_PROVIDER"],
        default: "\"anthropic\"",
        doc: "model provider: anthropic, vertex (Google Vertex AI) or bedrock (Amazon Bedrock); CLAUDE_CODE_USE_VERTEX=1 / CLAUDE_CODE_USE_BEDROCK=1 choose them too",
    },
    Key {
        name: "vertex.project_id",
        env: &["ANTHROPIC_VERTEX_PROJECT_ID"],
        default: "\"\"",
        doc: "Google Cloud project for Vertex AI",
    },
    Key {
        name: "vertex.region",
        env: &["CLOUD_ML_REGION"],
        default: "\"us-east5\"",
        doc: "Vertex AI region (global allowed); VERTEX_REGION_CLAUDE_4_5_SONNET-style variables set one model's",
    },
    Key {
        name: "vertex.base_url",
        env: &["ANTHROPIC_VERTEX_BASE_URL"],
        default: "\"\"",
        doc: "a Vertex AI gateway's base URL, ending in /v1 (default: Google's endpoint of the region)",
    },
    Key {
        name: "vertex.skip_auth",
        env: &["CLAUDE_CODE_SKIP_VERTEX_AUTH"],
        default: "false",
        doc: "send no Google credentials (for a gateway that authenticates itself)",
    },
    Key {
        name: "bedrock.region",
        env: &["AWS_REGION", "AWS_DEFAULT_REGION"],
        default: "\"\"",
        doc: "AWS region for Amazon Bedrock (us- eu- and ap- regions use their cross-region inference profiles)",
    },
    Key {
        name: "bedrock.base_url",
        env: &["ANTHROPIC_BEDROCK_BASE_URL"],
        default: "\"\"",
        doc: "a Bedrock gateway's base URL (default: https://bedrock-runtime.<region>.amazonaws.com)",
    },
    Key {
        name: "bedrock.skip_auth",
        env: &["CLAUDE_CODE_SKIP_BEDROCK_AUTH"],
        default: "false",
        doc: "send no AWS signature (for a gateway that authenticates itself)",
    },
    Key {
        name: "api.base_url",
        env: &["ANTHROPIC_BASE_URL"],
        default: "\"https://api.anthropic.com\"",
        doc: "Messages API base URL",
    },
    Key {
        name: "api.max_retries",
        env: &["TETHER_API_MAX_RETRIES"],
        default: "10",
        doc: "retries of a failed request (with backoff)",
    },
    Key {
        name: "api.connect_timeout",
        env: &["TETHER_API_CONNECT_TIMEOUT"],
        default: "\"5s\"",
        doc: "connect timeout",
    },
    Key {
        name: "api.stream_idle_timeout",
        env: &["TETHER_API_STREAM_IDLE_TIMEOUT"],
        default: "\"90s\"",
        doc: "longest silence inside a streamed reply",
    },
    Key {
        name: "api.request_timeout",
        env: &["TETHER_API_REQUEST_TIMEOUT"],
        default: "\"10m\"",
        doc: "longest whole request",
    },
    Key {
        name: "approvals.token_ttl",
        env: &["TETHER_APPROVAL_TOKEN_TTL"],
        default: "\"24h\"",
        doc: "how long an approval token (given to PermissionRequest and Notification hooks) can answer its request",
    },
    Key {
        name: "approvals.listen",
        env: &["TETHER_APPROVALS_LISTEN"],
        default: "\"\"",
        doc: "address of the approval page, e.g. \"127.0.0.1:7433\" (empty: no page)",
    },
    Key {
        name: "approvals.url",
        env: &["TETHER_APPROVALS_URL"],
        default: "\"\"",
        doc: "the page's address as a phone reaches it (a tunnel, a tailnet); links start with it (empty: http://<approvals.listen>)",
    },
    Key {
        name: "telemetry.enabled",
        env: &["TETHER_TELEMETRY"],
        default: "true",
        doc: "export traces and metrics over OTLP when an endpoint is set",
    },
    Key {
        name: "telemetry.endpoint",
        env: &["OTEL_EXPORTER_OTLP_ENDPOINT"],
        default: "\"\"",
        doc: "OTLP endpoint (empty: no export)",
    },
    Key {
        name: "telemetry.log_user_prompts",
        env: &["OTEL_LOG_USER_PROMPTS"],
        default: "false",
        doc: "include prompt text in spans",
    },
    Key {
        name: "log.level",
        env: &["TETHER_LOG", "RUST_LOG"],
        default: "\"info\"",
        doc: "log filter (tracing EnvFilter syntax)",
    },
    Key {
        name: "log.format",
        env: &["TETHER_LOG_FORMAT"],
        default: "\"text\"",
        doc: "stderr log format: text or json",
    },
    Key {
        name: "log.file",
        env: &["TETHER_LOG_FILE"],
        default: "\"auto\"",
        doc: "daily-rotated log in the data directory: auto (when not under systemd), on, off",
    },
    Key {
        name: "log.keep_days",
        env: &["TETHER_LOG_KEEP_DAYS"],
        default: "7",
        doc: "rotated log files kept",
    },
    Key {
        name: "share.socket",
        env: &["TETHER_SHARE_SOCKET"],
        default: "\"\"",
        doc: "the socket other local users reach this daemon by once a session is shared with them (empty: /tmp/tether-shared-$UID/tetherd.sock); not bound until then",
    },
    Key {
        name: "snapshots.enabled",
        env: &["TETHER_SNAPSHOTS"],
        default: "true",
        doc: "record the working tree after each tool call that changes files, for /rewind (kept under the data directory, never in the project's .git)",
    },
    Key {
        name: "snapshots.max_mb",
        env: &["TETHER_SNAPSHOTS_MAX_MB"],
        default: "100",
        doc: "the most one snapshot may add, in MB of changed files; over it that state is not recorded (a notice says so)",
    },
    Key {
        name: "snapshots.deny",
        env: &["TETHER_SNAPSHOTS_DENY"],
        default: "[\".env*\", \"*.pem\", \"*.key\", \"id_rsa*\", \"id_dsa*\", \"id_ecdsa*\", \"id_ed25519*\", \".claude/settings.local.json\"]",
        doc: "files kept out of every snapshot whatever .gitignore says: globs matching a file's name, or its path from the root when they hold a /",
    },
    Key {
        name: "cluster.nats",
        env: &["TETHER_CLUSTER_NATS"],
        default: "\"\"",
        doc: "NATS servers of the JetStream cluster that holds the sessions, comma-separated or a list (empty: no cluster, sessions stay on this machine)",
    },
    Key {
        name: "cluster.node",
        env: &["TETHER_CLUSTER_NODE"],
        default: "\"\"",
        doc: "this node's name in the cluster (empty: the host name)",
    },
    Key {
        name: "cluster.lease_ttl",
        env: &["TETHER_CLUSTER_LEASE_TTL"],
        default: "\"10s\"",
        doc: "how long a session's owner may go silent before another node takes the session over",
    },
    Key {
        name: "cluster.replicas",
        env: &["TETHER_CLUSTER_REPLICAS"],
        default: "3",
        doc: "copies JetStream keeps of each log and record (at most the number of NATS servers)",
    },
    Key {
        name: "cluster.workspaces",
        env: &["TETHER_CLUSTER_WORKSPACES"],
        default: "\"\"",
        doc: "this node's own directory for working trees: a session whose directory lies elsewhere is rebuilt under it from the cluster's snapshots when this node takes it (empty: sessions use their directory as it is, e.g. on a shared filesystem)",
    },
    Key {
        name: "cluster.creds",
        env: &["TETHER_CLUSTER_CREDS"],
        default: "\"\"",
        doc: "NATS credentials file (.creds) to connect with",
    },
    Key {
        name: "cluster.tls_ca",
        env: &["TETHER_CLUSTER_TLS_CA"],
        default: "\"\"",
        doc: "PEM file of the CA that signed the NATS servers' certificates (requires TLS)",
    },
];

/// Keys whose value is a duration (`30s`, `10m`, `7d`).
const DURATIONS: &[&str] = &[
    "tool_timeout",
    "idle_unload",
    "delta_retention",
    "api.connect_timeout",
    "api.stream_idle_timeout",
    "api.request_timeout",
    "cluster.lease_ttl",
    "approvals.token_ttl",
];

/// Tables that hold lists rather than keys of [`KEYS`]; read by the permission and hook code
/// for each session, checked here at start.
const LIST_TABLES: &[&str] = &["permissions", "hooks", "models"];

/// Reads `[models."<id>"]` price tables: `input` and `output` are required, cache rates default
/// to Anthropic's multipliers (1.25× and 2× for writes, 0.1× for reads).
fn model_prices(table: &toml::Table) -> Result<Vec<(String, [f64; 5])>, String> {
    let mut out = Vec::new();
    for (id, v) in table {
        let Some(t) = v.as_table() else {
            return Err(format!("models.{id:?} must be a table of prices"));
        };
        let rate = |k: &str| -> Result<Option<f64>, String> {
            match t.get(k) {
                None => Ok(None),
                Some(toml::Value::Float(f)) if *f >= 0.0 => Ok(Some(*f)),
                Some(toml::Value::Integer(i)) if *i >= 0 => Ok(Some(*i as f64)),
                Some(_) => Err(format!(
                    "models.{id:?}.{k} must be a price in USD per million tokens"
                )),
            }
        };
        for k in t.keys() {
            if !matches!(
                k.as_str(),
                "input" | "output" | "cache_write_5m" | "cache_write_1h" | "cache_read"
            ) {
                return Err(format!(
                    "unknown key models.{id:?}.{k} (input, output, cache_write_5m, cache_write_1h, cache_read)"
                ));
            }
        }
        let (Some(input), Some(output)) = (rate("input")?, rate("output")?) else {
            return Err(format!("models.{id:?} needs input and output prices"));
        };
        out.push((
            id.clone(),
            [
                input,
                output,
                rate("cache_write_5m")?.unwrap_or(input * 1.25),
                rate("cache_write_1h")?.unwrap_or(input * 2.0),
                rate("cache_read")?.unwrap_or(input * 0.1),
            ],
        ));
    }
    Ok(out)
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The built-in default.
    Default,
    /// The configuration file, at this line.
    File(PathBuf, usize),
    /// An environment variable.
    Env(&'static str),
    /// A `--set` flag (or a dedicated flag such as `--log-format`).
    Flag,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Default => write!(f, "default"),
            Self::File(p, line) => write!(f, "{}:{line}", p.display()),
            Self::Env(v) => write!(f, "env {v}"),
            Self::Flag => write!(f, "command line"),
        }
    }
}

/// A configuration that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A value, key or the syntax is wrong.
    #[error("{at}: {message}")]
    Invalid {
        /// Where: `file:line`, `env VAR` or `--set key`.
        at: String,
        /// What is wrong, naming the key.
        message: String,
    },
}

/// The effective configuration.
#[derive(Debug, Clone)]
pub struct Config {
    values: BTreeMap<&'static str, (toml::Value, Source)>,
    /// The file it was read from, if one exists.
    pub file: Option<PathBuf>,
    /// The file's `[permissions]` and `[hooks]` tables, as written.
    pub tables: toml::Table,
}

fn invalid(at: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        at: at.into(),
        message: message.into(),
    }
}

fn key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// A scalar as written in the environment or on the command line: TOML if it parses as a
/// TOML value, else the text itself.
fn scalar(text: &str) -> toml::Value {
    let trimmed = text.trim();
    toml::from_str::<toml::Table>(&format!("v = {trimmed}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(trimmed.to_owned()))
}

/// A value as TOML would write it.
fn show(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => serde_json::Value::String(s.clone()).to_string(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Array(a) => format!("[{}]", a.iter().map(show).collect::<Vec<_>>().join(", ")),
        toml::Value::Table(t) => format!(
            "{{ {} }}",
            t.iter()
                .map(|(k, v)| format!("{k} = {}", show(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Checks that `value` suits `key`; returns what is wrong.
fn check(key: &Key, value: &toml::Value) -> Result<(), String> {
    let default = scalar(key.default);
    let off_ok = matches!(
        key.name,
        "auto_compact_percent" | "idle_unload" | "delta_retention"
    );
    match (&default, value) {
        (_, toml::Value::String(s)) if off_ok && s == "off" => Ok(()),
        // A list may also be written as one comma-separated string.
        (toml::Value::Array(_), toml::Value::String(_)) => Ok(()),
        (_, toml::Value::Array(urls)) if matches!(key.name, "cluster.nats" | "snapshots.deny") => {
            if urls.iter().all(toml::Value::is_str) {
                Ok(())
            } else {
                Err("expected a list of server URLs".into())
            }
        }
        (toml::Value::String(_), toml::Value::String(s)) => match key.name {
            "permission_mode" => PermissionMode::parse(s)
                .map(|_| ())
                .ok_or_else(|| format!("{s:?} is not a permission mode (default, acceptEdits, plan, bypassPermissions, dontAsk)")),
            // The API's levels (llm::Effort knows which model takes which).
            "effort"
                if !s.is_empty()
                    && !matches!(s.as_str(), "low" | "medium" | "high" | "xhigh" | "max") =>
            {
                Err(format!(
                    "{s:?} is not an effort level (low, medium, high, xhigh, max)"
                ))
            }
            "provider" if !matches!(s.as_str(), "anthropic" | "vertex" | "bedrock") => {
                Err(format!("{s:?} is not a provider (anthropic, vertex or bedrock)"))
            }
            "cache_ttl" if !matches!(s.as_str(), "auto" | "5m" | "1h") => {
                Err(format!("{s:?} must be auto, 5m or 1h"))
            }
            "thinking" if !matches!(s.as_str(), "auto" | "off") => {
                Err(format!("{s:?} must be auto or off"))
            }
            "log.format" if !matches!(s.as_str(), "text" | "json") => {
                Err(format!("{s:?} is not a log format (text or json)"))
            }
            "log.file" if !matches!(s.as_str(), "auto" | "on" | "off") => {
                Err(format!("{s:?} must be auto, on or off"))
            }
            "log.level" => tracing_subscriber::EnvFilter::try_new(s)
                .map(|_| ())
                .map_err(|e| format!("{s:?} is not a log filter: {e}")),
            "cluster.lease_ttl"
                if humantime::parse_duration(s).is_ok_and(|d| d < Duration::from_secs(1)) =>
            {
                Err(format!("{s:?} is too short: a lease lasts at least 1s"))
            }
            _ if DURATIONS.contains(&key.name) => {
                humantime::parse_duration(s)
                    .map(|_| ())
                    .map_err(|e| format!("{s:?} is not a duration (like 30s, 10m, 7d): {e}"))
            }
            _ => Ok(()),
        },
        (toml::Value::Integer(_), toml::Value::Integer(i)) if *i >= 0 => {
            if key.name == "auto_compact_percent" && !(1..=100).contains(i) {
                return Err(format!("{i} is not a percentage between 1 and 100"));
            }
            Ok(())
        }
        (toml::Value::Integer(_), toml::Value::Float(f))
            if key.name == "auto_compact_percent" && (1.0..=100.0).contains(f) =>
        {
            Ok(())
        }
        // Dollars take cents.
        (toml::Value::Integer(_), toml::Value::Float(f))
            if matches!(key.name, "budget_usd" | "daily_budget_usd") =>
        {
            if f.is_finite() && *f >= 0.0 {
                Ok(())
            } else {
                Err(format!("{f} is not an amount of dollars (0 or more)"))
            }
        }
        (toml::Value::Boolean(_), toml::Value::Boolean(_)) => Ok(()),
        (toml::Value::Boolean(_), toml::Value::String(s)) if matches!(s.as_str(), "1" | "0") => {
            Ok(())
        }
        (toml::Value::Boolean(_), toml::Value::Integer(0 | 1)) => Ok(()),
        (d, v) => Err(format!(
            "expected {}{}, found {}",
            d.type_str(),
            if off_ok { " or \"off\"" } else { "" },
            v.type_str()
        )),
    }
}

impl Config {
    /// Defaults, then `file` (when it exists), then `env`, then `flags` (`key=value`).
    pub fn load(
        file: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
        flags: &[String],
    ) -> Result<Self, ConfigError> {
        let mut values: BTreeMap<&'static str, (toml::Value, Source)> = KEYS
            .iter()
            .map(|k| (k.name, (scalar(k.default), Source::Default)))
            .collect();
        let mut tables = toml::Table::new();
        let mut used_file = None;
        if let Some(path) = file {
            match std::fs::read_to_string(path) {
                Ok(text) => {
                    Self::read_file(path, &text, &mut values, &mut tables)?;
                    used_file = Some(path.to_owned());
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(ConfigError::Read {
                        path: path.to_owned(),
                        source,
                    });
                }
            }
        }
        for k in KEYS {
            let found = k
                .env
                .iter()
                .find_map(|v| env(v).filter(|s| !s.trim().is_empty()).map(|s| (*v, s)));
            if let Some((var, text)) = found {
                let value = scalar(&text);
                check(k, &value)
                    .map_err(|m| invalid(format!("env {var}"), format!("{}: {m}", k.name)))?;
                values.insert(k.name, (value, Source::Env(var)));
            }
        }
        // Older spellings that still work.
        if let Some(ms) =
            env("TETHER_IDLE_UNLOAD_MS").filter(|_| env("TETHER_IDLE_UNLOAD").is_none())
        {
            let value = match ms.trim().parse::<u64>() {
                Ok(0) => toml::Value::String("off".into()),
                Ok(n) => toml::Value::String(format!("{n}ms")),
                Err(_) => {
                    return Err(invalid(
                        "env TETHER_IDLE_UNLOAD_MS",
                        format!("idle_unload: {ms:?} is not a number of milliseconds"),
                    ));
                }
            };
            values.insert("idle_unload", (value, Source::Env("TETHER_IDLE_UNLOAD_MS")));
        }
        // Claude Code's provider switches.
        for (var, provider) in [
            ("CLAUDE_CODE_USE_VERTEX", "vertex"),
            ("CLAUDE_CODE_USE_BEDROCK", "bedrock"),
        ] {
            if env(var).is_some_and(|v| !matches!(v.trim(), "" | "0" | "false")) {
                values.insert(
                    "provider",
                    (toml::Value::String(provider.into()), Source::Env(var)),
                );
            }
        }
        if env("DISABLE_AUTO_COMPACT").is_some_and(|v| !matches!(v.trim(), "" | "0" | "false")) {
            values.insert(
                "auto_compact_percent",
                (
                    toml::Value::String("off".into()),
                    Source::Env("DISABLE_AUTO_COMPACT"),
                ),
            );
        }
        for flag in flags {
            let Some((name, text)) = flag.split_once('=') else {
                return Err(invalid(
                    format!("--set {flag}"),
                    "expected key=value, e.g. --set idle_unload=1h",
                ));
            };
            let name = name.trim();
            let Some(k) = key(name) else {
                return Err(invalid(
                    format!("--set {flag}"),
                    format!("unknown key {name:?}"),
                ));
            };
            let value = scalar(text);
            check(k, &value)
                .map_err(|m| invalid(format!("--set {flag}"), format!("{name}: {m}")))?;
            values.insert(k.name, (value, Source::Flag));
        }
        Ok(Self {
            values,
            file: used_file,
            tables,
        })
    }

    fn read_file(
        path: &Path,
        text: &str,
        values: &mut BTreeMap<&'static str, (toml::Value, Source)>,
        tables: &mut toml::Table,
    ) -> Result<(), ConfigError> {
        let at = |offset: usize| format!("{}:{}", path.display(), line_of(text, offset));
        let doc = toml::de::DeTable::parse(text).map_err(|e| {
            let offset = e.span().map(|s| s.start).unwrap_or(0);
            invalid(at(offset), e.message().to_owned())
        })?;
        for (name, item) in doc.get_ref() {
            let section = name.get_ref().as_ref();
            if LIST_TABLES.contains(&section) {
                let value: toml::Value =
                    toml::Value::deserialize(toml::de::ValueDeserializer::from(item.clone()))
                        .map_err(|e| invalid(at(item.span().start), format!("[{section}]: {e}")))?;
                Self::check_table(section, &value)
                    .map_err(|m| invalid(at(item.span().start), m))?;
                tables.insert(section.to_owned(), value);
                continue;
            }
            match item.get_ref() {
                toml::de::DeValue::Table(inner)
                    if KEYS
                        .iter()
                        .any(|k| k.name.starts_with(&format!("{section}."))) =>
                {
                    for (sub, value) in inner.clone() {
                        let dotted = format!("{section}.{}", sub.get_ref());
                        Self::put(values, &dotted, &value, path, text, &at)?;
                    }
                }
                _ => Self::put(values, section, item, path, text, &at)?,
            }
        }
        Ok(())
    }

    fn put(
        values: &mut BTreeMap<&'static str, (toml::Value, Source)>,
        name: &str,
        item: &toml::Spanned<toml::de::DeValue<'_>>,
        path: &Path,
        text: &str,
        at: &dyn Fn(usize) -> String,
    ) -> Result<(), ConfigError> {
        let offset = item.span().start;
        let Some(k) = key(name) else {
            let known: Vec<&str> = KEYS
                .iter()
                .map(|k| k.name)
                .chain(LIST_TABLES.iter().copied())
                .collect();
            return Err(invalid(
                at(offset),
                format!("unknown key {name:?} (known keys: {})", known.join(", ")),
            ));
        };
        let value = toml::Value::deserialize(toml::de::ValueDeserializer::from(item.clone()))
            .map_err(|e| invalid(at(offset), format!("{name}: {e}")))?;
        check(k, &value).map_err(|m| invalid(at(offset), format!("{name}: {m}")))?;
        values.insert(
            k.name,
            (value, Source::File(path.to_owned(), line_of(text, offset))),
        );
        Ok(())
    }

    /// Checks the shape of `[permissions]` (lists of rule strings) and `[hooks]` (events).
    fn check_table(section: &str, value: &toml::Value) -> Result<(), String> {
        let Some(table) = value.as_table() else {
            return Err(format!("[{section}] must be a table"));
        };
        if section == "permissions" {
            for (k, v) in table {
                if !matches!(k.as_str(), "allow" | "ask" | "deny") {
                    return Err(format!("unknown key permissions.{k} (allow, ask or deny)"));
                }
                let strings = v.as_array().is_some_and(|a| a.iter().all(|r| r.is_str()));
                if !strings {
                    return Err(format!("permissions.{k} must be a list of rule strings"));
                }
            }
            return Ok(());
        }
        if section == "models" {
            return model_prices(table).map(|_| ());
        }
        let json = serde_json::to_value(table).map_err(|e| e.to_string())?;
        let mut hooks = crate::hooks::Hooks::default();
        hooks.add(&json, "[hooks]");
        match hooks.problems.first() {
            Some(p) => Err(p.clone()),
            None => Ok(()),
        }
    }

    /// Prices of `[models."<id>"]` tables (USD per million tokens: input, output, 5-minute and
    /// 1-hour cache writes, cache reads), for models the built-in catalog does not price or
    /// prices differently for this account.
    pub fn model_prices(&self) -> Vec<(String, [f64; 5])> {
        self.tables
            .get("models")
            .and_then(|t| t.as_table())
            .and_then(|t| model_prices(t).ok())
            .unwrap_or_default()
    }

    fn get(&self, name: &str) -> Option<&toml::Value> {
        self.values.get(name).map(|(v, _)| v)
    }

    /// A string value (empty strings are `None`).
    pub fn string(&self, name: &str) -> Option<String> {
        match self.get(name)? {
            toml::Value::String(s) if s.trim().is_empty() => None,
            toml::Value::String(s) => Some(s.trim().to_owned()),
            other => Some(show(other)),
        }
    }

    /// A list, written as a TOML list or as one comma-separated string (empty items dropped).
    pub fn list(&self, name: &str) -> Vec<String> {
        let items: Vec<String> = match self.get(name) {
            Some(toml::Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            Some(toml::Value::String(s)) => s.split(',').map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        items
            .into_iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// A duration value; `None` for "off".
    pub fn duration(&self, name: &str) -> Option<Duration> {
        self.string(name)
            .filter(|s| s != "off")
            .and_then(|s| humantime::parse_duration(&s).ok())
    }

    /// A number; `None` for "off".
    pub fn number(&self, name: &str) -> Option<f64> {
        match self.get(name)? {
            toml::Value::Integer(i) => Some(*i as f64),
            toml::Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// A boolean (also from "1"/"0").
    pub fn flag(&self, name: &str) -> bool {
        match self.get(name) {
            Some(toml::Value::Boolean(b)) => *b,
            Some(toml::Value::Integer(i)) => *i != 0,
            Some(toml::Value::String(s)) => s == "1",
            _ => false,
        }
    }

    /// The permission mode of new sessions.
    pub fn permission_mode(&self) -> PermissionMode {
        self.string("permission_mode")
            .and_then(|m| PermissionMode::parse(&m))
            .unwrap_or_default()
    }

    /// Every key with its value and where it came from.
    pub fn entries(&self) -> Vec<ConfigEntry> {
        KEYS.iter()
            .filter_map(|k| {
                let (value, source) = self.values.get(k.name)?;
                Some(ConfigEntry {
                    key: k.name.to_owned(),
                    value: show(value),
                    source: source.to_string(),
                    env: k.env.first().map(|e| (*e).to_owned()),
                    doc: k.doc.to_owned(),
                })
            })
            .collect()
    }
}

/// The configuration file: `$TETHER_CONFIG`, else the XDG path.
pub fn default_path() -> Option<PathBuf> {
    std::env::var_os("TETHER_CONFIG")
        .map(PathBuf::from)
        .or_else(|| {
            tether_proto::paths::PathEnv::from_process(nix::unistd::getuid().as_raw()).config_file()
        })
}

/// The process environment, for [`Config::load`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

use serde::Deserialize as _;

#[cfg(test)]
mod tests;
