//! The `Tool` trait, what a call runs with (`ToolContext`), and the registry the query loop
//! looks tools up in (`Tools`: input validators compiled once, when the daemon starts).
//!
//! Invariant: a tool failure is an `is_error` [`ToolOutput`] the model can act on, never a
//! daemon error.

use super::workspace::Workspace;
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
    pub subagents: Option<Arc<dyn SubagentRunner>>,
    /// Tokens and cost spent by the tool itself (a sub-agent's model requests).
    pub spent: Arc<std::sync::Mutex<Spent>>,
    /// The call's id (empty outside a turn).
    pub call_id: String,
    /// Counts what a model request the tool made itself cost on the turn's budget.
    pub meter: Arc<dyn Fn(Option<f64>) + Send + Sync>,
}

/// What tools that talk to the network use.
pub struct Net {
    /// The model client.
    pub llm: Arc<dyn crate::llm::Model>,
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
            call_id: String::new(),
            meter: Arc::new(|_| {}),
        }
    }

    /// Adds a model request the tool made itself (WebFetch's, WebSearch's) to the turn: its
    /// usage to the turn's, its cost to the turn's and to the budget's.
    pub fn spend(&self, usage: tether_proto::TokenUsage, cost: Option<f64>) {
        (self.meter)(cost);
        self.tally(usage, cost);
    }

    /// Adds usage the budget has counted already (a sub-agent's requests) to the turn's.
    pub fn tally(&self, usage: tether_proto::TokenUsage, cost: Option<f64>) {
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

/// A sub-agent's run: its final answer, the tokens it used and what they cost.
pub type SubagentFuture<'a> =
    Pin<Box<dyn Future<Output = (ToolOutput, tether_proto::TokenUsage, Option<f64>)> + Send + 'a>>;

/// Runs sub-agents for the Task tool: a child conversation with the agent type's prompt, tools
/// and model, its progress streamed through the calling tool's context. The query loop
/// implements it.
pub trait SubagentRunner: Send + Sync {
    /// Runs `job` as a child conversation; returns its final answer and what it spent.
    fn run<'a>(&'a self, job: AgentJob<'a>, ctx: &'a ToolContext) -> SubagentFuture<'a>;
}

/// What one Agent call asks of a sub-agent.
pub struct AgentJob<'a> {
    /// Its type.
    pub agent: &'a super::agents::AgentDef,
    /// The model instead of the type's own.
    pub model: Option<&'a str>,
    /// How hard it thinks instead of the session's effort.
    pub effort: Option<crate::llm::Effort>,
    /// The name it goes by while it works (`name`), beside its type.
    pub name: Option<&'a str>,
    /// The job in a few words.
    pub description: &'a str,
    /// Everything it is told.
    pub prompt: &'a str,
}

/// A boxed tool future.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = ToolOutput> + Send + 'a>>;

/// A tool the model can call.
pub trait Tool: Send + Sync + 'static {
    /// Its name, as the model calls it.
    fn name(&self) -> &str;
    /// Other names it answers to (from [`super::names`], the one table of them).
    fn aliases(&self) -> &'static [&'static str] {
        super::names::aliases(self.name())
    }
    /// What it does, for the model.
    fn description(&self) -> &str;
    /// JSON schema of its input.
    fn input_schema(&self) -> Value;
    /// Whether it only reads (read-only calls of one reply run in parallel).
    fn is_read_only(&self) -> bool;
    /// Whether a call may change files in the workspace: the working tree is snapshotted
    /// after it (and before the turn's first such call).
    fn changes_files(&self) -> bool {
        false
    }
    /// The existing file a call would change, which must have been read first: checked before
    /// anyone is asked to allow the call, and again as it runs.
    fn changes_file<'a>(&self, _input: &'a Value) -> Option<&'a str> {
        None
    }
    /// Runs one call with input already validated against the schema.
    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> ToolFuture<'a>;
}

struct Entry {
    tool: Arc<dyn Tool>,
    /// Shared by registries that hold the same schema (a compiled schema is a few dozen
    /// allocations; a turn's registry is rebuilt for each turn).
    validator: Option<Arc<jsonschema::Validator>>,
    /// What the API is told about it, built once: requests share its text and schema.
    definition: ToolDefinition,
}

impl Entry {
    fn new(
        tool: Arc<dyn Tool>,
        schema: Value,
        validator: Option<Arc<jsonschema::Validator>>,
    ) -> Self {
        let definition = ToolDefinition {
            name: tool.name().to_owned(),
            description: Arc::from(tool.description()),
            input_schema: Arc::new(schema),
            server: Default::default(),
            cache_control: None,
        };
        Self {
            tool,
            validator,
            definition,
        }
    }
}

/// The tools of a session (or a sub-agent's subset).
#[derive(Clone, Default)]
pub struct Tools {
    entries: Vec<Arc<Entry>>,
}

impl Tools {
    /// A registry of these tools (one whose schema does not compile is kept, unvalidated,
    /// and logged).
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        let entries = tools
            .into_iter()
            .map(|tool| {
                let schema = tool.input_schema();
                let validator = match jsonschema::validator_for(&schema) {
                    Ok(v) => Some(Arc::new(v)),
                    Err(e) => {
                        tracing::error!(
                            tool = tool.name(),
                            "invalid input schema, input is not validated: {e}"
                        );
                        None
                    }
                };
                Arc::new(Entry::new(tool, schema, validator))
            })
            .collect();
        Self { entries }
    }

    /// A registry of the tools whose input schema compiles, and the others' names with why
    /// (tools from outside, such as an MCP server's, are left out rather than run
    /// unvalidated).
    pub fn checked(tools: Vec<Arc<dyn Tool>>) -> (Self, Vec<(String, String)>) {
        let mut entries = Vec::new();
        let mut refused = Vec::new();
        for tool in tools {
            let schema = tool.input_schema();
            match jsonschema::validator_for(&schema) {
                Ok(v) => entries.push(Arc::new(Entry::new(tool, schema, Some(Arc::new(v))))),
                Err(e) => refused.push((tool.name().to_owned(), e.to_string())),
            }
        }
        (Self { entries }, refused)
    }

    /// Only the tools named in `names` (by name or alias); their validators are shared, not
    /// compiled again.
    pub fn subset(&self, names: &[String]) -> Self {
        let entries = self
            .entries
            .iter()
            .filter(|e| {
                names
                    .iter()
                    .any(|n| n == e.tool.name() || e.tool.aliases().contains(&n.as_str()))
            })
            .cloned()
            .collect();
        Self { entries }
    }

    /// These tools but the one called `name`.
    pub fn without(&self, name: &str) -> Self {
        let entries = self
            .entries
            .iter()
            .filter(|e| e.tool.name() != name)
            .cloned()
            .collect();
        Self { entries }
    }

    /// The tool called `name` (or one of its aliases).
    pub fn find(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.entries
            .iter()
            .find(|e| e.tool.name() == name || e.tool.aliases().contains(&name))
            .map(|e| e.tool.clone())
    }

    /// Every tool's name.
    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.tool.name()).collect()
    }

    /// Whether it holds no tool.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// These tools and then `more`'s (validators shared, not compiled again); a name already
    /// here keeps the first.
    pub fn extend(&self, more: &Tools) -> Self {
        let mut entries = self.entries.clone();
        for e in &more.entries {
            if !entries.iter().any(|k| k.tool.name() == e.tool.name()) {
                entries.push(e.clone());
            }
        }
        Self { entries }
    }

    /// These tools with `tool` in place of the one of the same name (in its place, so the
    /// order stays stable); unchanged when there is none (it was narrowed out). The old
    /// validator is kept when the schema is the same, so it is compiled once, not per turn.
    pub fn replace(&self, tool: Arc<dyn Tool>) -> Self {
        let entries = self
            .entries
            .iter()
            .map(|e| {
                if e.tool.name() == tool.name() {
                    let schema = tool.input_schema();
                    let validator = if *e.definition.input_schema == schema {
                        e.validator.clone()
                    } else {
                        jsonschema::validator_for(&schema).ok().map(Arc::new)
                    };
                    Arc::new(Entry::new(tool.clone(), schema, validator))
                } else {
                    e.clone()
                }
            })
            .collect();
        Self { entries }
    }

    /// The definitions sent to the API, in a stable order.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.entries.iter().map(|e| e.definition.clone()).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tools_own_requests_reach_the_budget_and_a_sub_agents_only_the_tally() {
        let metered = Arc::new(std::sync::Mutex::new(0.0));
        let seen = metered.clone();
        let ctx = ToolContext {
            meter: Arc::new(move |cost| *seen.lock().expect("lock") += cost.unwrap_or(0.0)),
            ..ToolContext::detached(Arc::new(Workspace::new(
                PathBuf::from("/tmp"),
                Vec::new(),
                PathBuf::from("/tmp/.scratch"),
            )))
        };
        ctx.spend(tether_proto::TokenUsage::default(), Some(0.02));
        ctx.tally(tether_proto::TokenUsage::default(), Some(0.5));
        assert_eq!(*metered.lock().expect("lock"), 0.02);
        let spent = ctx.spent.lock().expect("lock");
        assert!(spent.any && (spent.cost_usd.unwrap_or(0.0) - 0.52).abs() < 1e-12);
    }
}
