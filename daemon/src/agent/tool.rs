//! The `Tool` trait and the registry the query loop looks tools up in.
//!
//! Invariant: a tool failure is an `is_error` [`ToolOutput`] the model can act on, never a
//! daemon error.

use crate::llm::ToolDefinition;
use serde_json::Value;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What a tool hands back to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// A string, or content blocks (text, image).
    pub content: Value,
    /// Whether the call failed.
    pub is_error: bool,
    /// Detail for clients only (e.g. a diff); the model never sees it.
    pub details: Option<Value>,
}

impl ToolOutput {
    /// A successful text result.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: Value::String(text.into()),
            is_error: false,
            details: None,
        }
    }

    /// A failure the model should read.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            content: Value::String(message.into()),
            is_error: true,
            details: None,
        }
    }

    /// Content blocks (e.g. an image).
    pub fn blocks(blocks: Vec<Value>) -> Self {
        Self {
            content: Value::Array(blocks),
            is_error: false,
            details: None,
        }
    }

    /// Adds client-only detail.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

/// What a file looked like when a tool last read or wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    modified: Option<std::time::SystemTime>,
    hash: u64,
}

impl FileStamp {
    /// The stamp of `bytes` read from a file with `modified` time.
    pub fn of(bytes: &[u8], modified: Option<std::time::SystemTime>) -> Self {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        bytes.hash(&mut h);
        Self {
            modified,
            hash: h.finish(),
        }
    }
}

/// A session's working directories and current directory, shared by its tools across turns.
///
/// Invariant: the current directory always stays inside one of the roots; this is the one check
/// of path containment the permission layer builds on.
#[derive(Debug)]
pub struct Workspace {
    roots: Vec<PathBuf>,
    cwd: std::sync::Mutex<PathBuf>,
    scratch: PathBuf,
    stamps: std::sync::Mutex<std::collections::HashMap<PathBuf, FileStamp>>,
    /// Background jobs (shells started with `run_in_background`).
    pub jobs: super::jobs::Jobs,
}

impl Workspace {
    /// A workspace rooted at `root` (plus `extra` directories), with `scratch` for tool output files.
    pub fn new(root: PathBuf, extra: Vec<PathBuf>, scratch: PathBuf) -> Self {
        let mut roots = vec![root.clone()];
        roots.extend(extra);
        Self {
            roots,
            cwd: std::sync::Mutex::new(root),
            scratch,
            stamps: Default::default(),
            jobs: Default::default(),
        }
    }

    /// Remembers what a file looked like when it was read or written.
    pub fn remember(&self, path: &std::path::Path, stamp: FileStamp) {
        self.stamps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(normalize(path), stamp);
    }

    /// Checks that an existing file was read in this session and has not changed since; a file
    /// that does not exist needs no reading.
    pub fn check_fresh(&self, path: &std::path::Path) -> Result<(), String> {
        let Ok(bytes) = std::fs::read(path) else {
            return Ok(());
        };
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let known = self
            .stamps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&normalize(path))
            .copied();
        match known {
            None => Err(format!(
                "{} exists but has not been read in this session; Read it first so you change what is really there",
                path.display()
            )),
            Some(s) if s.hash != FileStamp::of(&bytes, modified).hash => Err(format!(
                "{} was modified since you last read it (by the user or another program); Read it again before changing it",
                path.display()
            )),
            Some(_) => Ok(()),
        }
    }

    /// The current directory.
    pub fn cwd(&self) -> PathBuf {
        self.cwd.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether `path` is inside the working directories.
    pub fn contains(&self, path: &std::path::Path) -> bool {
        let path = normalize(path);
        self.roots.iter().any(|r| path.starts_with(normalize(r)))
    }

    /// Moves the current directory; refused outside the working directories.
    pub fn set_cwd(&self, dir: PathBuf) -> Result<(), String> {
        if !self.contains(&dir) {
            return Err(format!(
                "{} is outside the session's working directories ({}); the current directory stays {}",
                dir.display(),
                self.roots
                    .iter()
                    .map(|r| r.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                self.cwd().display()
            ));
        }
        *self.cwd.lock().unwrap_or_else(|p| p.into_inner()) = dir;
        Ok(())
    }

    /// A directory for files tools hand back by path (full outputs).
    pub fn scratch(&self) -> &std::path::Path {
        &self.scratch
    }
}

/// `path` with `.` and `..` resolved lexically (symlinks are not followed).
pub fn normalize(path: &std::path::Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Where a tool runs and how it reports.
#[derive(Clone)]
pub struct ToolContext {
    /// The session's directories.
    pub workspace: Arc<Workspace>,
    /// Fires when the call must stop (turn cancelled, timeout).
    pub cancel: CancellationToken,
    /// Streams output while the tool runs.
    pub progress: Arc<dyn Fn(String) + Send + Sync>,
    /// Sends an event of the tool's own (e.g. `plan_updated`).
    pub emit: Arc<dyn Fn(tether_proto::EventKind) + Send + Sync>,
    /// The network: the model client and the web fetcher (for WebFetch).
    pub net: Option<Arc<Net>>,
    /// Runs sub-agents (absent inside a sub-agent).
    pub subagents: Option<Arc<super::subagent::Subagents>>,
    /// Tokens and cost spent by the tool itself (a sub-agent's model requests).
    pub spent: Arc<std::sync::Mutex<Spent>>,
}

/// What tools that talk to the network use.
pub struct Net {
    /// The model client.
    pub llm: Arc<crate::llm::AnthropicClient>,
    /// Aliases and prices.
    pub catalog: crate::llm::ModelCatalog,
    /// Web pages.
    pub web: Arc<crate::llm::WebFetcher>,
    /// The small fast model (`ANTHROPIC_SMALL_FAST_MODEL`, default haiku).
    pub fast_model: String,
}

/// Model usage a tool incurred, added to the turn's.
#[derive(Debug, Clone, Default)]
pub struct Spent {
    /// Tokens.
    pub usage: tether_proto::TokenUsage,
    /// Cost; `None` once any part was unknown.
    pub cost_usd: Option<f64>,
    /// Whether anything was spent.
    pub any: bool,
}

impl ToolContext {
    /// A context on `workspace` with no network, no sub-agents, and progress and events
    /// dropped (benchmarks, tests, tools run outside a turn).
    pub fn detached(workspace: Arc<Workspace>) -> Self {
        Self {
            workspace,
            cancel: CancellationToken::new(),
            progress: Arc::new(|_| {}),
            emit: Arc::new(|_| {}),
            net: None,
            subagents: None,
            spent: Default::default(),
        }
    }

    /// Adds model usage a tool incurred to the turn.
    pub fn spend(&self, usage: tether_proto::TokenUsage, cost: Option<f64>) {
        let mut s = self.spent.lock().unwrap_or_else(|p| p.into_inner());
        s.usage.add(&usage);
        s.cost_usd = match (s.any, s.cost_usd, cost) {
            (false, _, c) => c,
            (true, Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        s.any = true;
    }
}

impl ToolContext {
    /// A note for results of calls that gave a relative path, saying where it resolved.
    pub fn relative_note(&self, given: &str) -> Option<String> {
        (!given.is_empty() && !std::path::Path::new(given).is_absolute()).then(|| {
            format!(
                "(the relative path {given} was resolved to {})",
                self.resolve(given).display()
            )
        })
    }

    /// The directory a search tool's optional `path` names, else the current directory.
    pub fn dir_or_cwd(&self, path: &Value) -> PathBuf {
        path.as_str()
            .map(|p| self.resolve(p))
            .unwrap_or_else(|| self.workspace.cwd())
    }

    /// Resolves a path the model gave against the session's directory.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let p = PathBuf::from(path);
        if p.is_absolute() {
            p
        } else {
            self.workspace.cwd().join(p)
        }
    }
}

/// A boxed tool future.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = ToolOutput> + Send + 'a>>;

/// A tool the model can call.
pub trait Tool: Send + Sync + 'static {
    /// Its name, as the model calls it.
    fn name(&self) -> &'static str;
    /// Other names it answers to.
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }
    /// What it does, for the model.
    fn description(&self) -> &'static str;
    /// JSON schema of its input.
    fn input_schema(&self) -> Value;
    /// Whether it only reads (read-only calls of one reply run in parallel).
    fn is_read_only(&self) -> bool;
    /// Runs one call with input already validated against the schema.
    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> ToolFuture<'a>;
}

struct Entry {
    tool: Arc<dyn Tool>,
    validator: Option<jsonschema::Validator>,
}

/// The tools of a session (or a sub-agent's subset).
#[derive(Clone, Default)]
pub struct Tools {
    entries: Arc<Vec<Entry>>,
}

impl Tools {
    /// A registry of these tools.
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        let entries = tools
            .into_iter()
            .map(|tool| {
                let validator = match jsonschema::validator_for(&tool.input_schema()) {
                    Ok(v) => Some(v),
                    Err(e) => {
                        tracing::error!(
                            tool = tool.name(),
                            "invalid input schema, input is not validated: {e}"
                        );
                        None
                    }
                };
                Entry { tool, validator }
            })
            .collect();
        Self {
            entries: Arc::new(entries),
        }
    }

    /// Only the tools named in `names` (by name or alias).
    pub fn subset(&self, names: &[String]) -> Self {
        let tools: Vec<Arc<dyn Tool>> = self
            .entries
            .iter()
            .filter(|e| {
                names
                    .iter()
                    .any(|n| n == e.tool.name() || e.tool.aliases().contains(&n.as_str()))
            })
            .map(|e| e.tool.clone())
            .collect();
        Self::new(tools)
    }

    /// The tool called `name` (or one of its aliases).
    pub fn find(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.entries
            .iter()
            .find(|e| e.tool.name() == name || e.tool.aliases().contains(&name))
            .map(|e| e.tool.clone())
    }

    /// Every tool's name.
    pub fn names(&self) -> Vec<&'static str> {
        self.entries.iter().map(|e| e.tool.name()).collect()
    }

    /// The definitions sent to the API, in a stable order.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.entries
            .iter()
            .map(|e| ToolDefinition {
                name: e.tool.name().to_owned(),
                description: e.tool.description().to_owned(),
                input_schema: e.tool.input_schema(),
                cache_control: None,
            })
            .collect()
    }

    /// Checks `input` against the tool's schema; the error names the offending field.
    pub fn validate(&self, name: &str, input: &Value) -> Result<(), String> {
        let Some(entry) = self
            .entries
            .iter()
            .find(|e| e.tool.name() == name || e.tool.aliases().contains(&name))
        else {
            return Ok(());
        };
        let Some(validator) = &entry.validator else {
            return Ok(());
        };
        let problems: Vec<String> = validator
            .iter_errors(input)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("{}: {e}", at.trim_start_matches('/'))
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "invalid input for {name}: {}. Fix the input and call the tool again.",
                problems.join("; ")
            ))
        }
    }
}
