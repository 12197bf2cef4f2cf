//! Models: the catalog of Claude models (ids, aliases, windows, output limits, thinking and
//! effort support, prices), what a response's usage costs, and how a request is shaped to what
//! its model takes (thinking, effort, context editing and the betas they need).

use super::request::{MessagesRequest, Thinking, ThinkingDisplay};
use serde::{Deserialize, Serialize};

/// Prices in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Input tokens.
    pub input: f64,
    /// Output tokens.
    pub output: f64,
    /// Cache writes with the 5-minute TTL.
    pub cache_write_5m: f64,
    /// Cache writes with the 1-hour TTL.
    pub cache_write_1h: f64,
    /// Cache reads.
    pub cache_read: f64,
}

impl Price {
    /// Prices as published, per million tokens.
    pub const fn new(input: f64, output: f64, write_5m: f64, write_1h: f64, read: f64) -> Self {
        Self {
            input,
            output,
            cache_write_5m: write_5m,
            cache_write_1h: write_1h,
            cache_read: read,
        }
    }

    const fn standard(input: f64, output: f64) -> Self {
        // Anthropic's published multipliers: writes 1.25× (5 min) / 2× (1 h), reads 0.1×.
        Self {
            input,
            output,
            cache_write_5m: input * 1.25,
            cache_write_1h: input * 2.0,
            cache_read: input * 0.1,
        }
    }
}

/// How a model thinks, if it can.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkingKind {
    /// `thinking: {type: adaptive}`: the model decides how much to think.
    Adaptive {
        /// Thinking cannot be turned off (the API ignores or rejects `disabled`).
        always_on: bool,
        /// It can return only the short updates between tool calls (`display: updates`).
        updates: bool,
    },
    /// `thinking: {type: enabled, budget_tokens}` only.
    Budget,
    /// No extended thinking.
    None,
}

/// `output_config.effort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Effort {
    /// Fastest, fewest tokens.
    Low,
    /// Balanced.
    Medium,
    /// Thorough.
    High,
    /// Above high (newer models).
    Xhigh,
    /// As much as it takes.
    Max,
}

impl Effort {
    /// Every level, lowest first.
    pub const ALL: &'static [Effort] = &[
        Effort::Low,
        Effort::Medium,
        Effort::High,
        Effort::Xhigh,
        Effort::Max,
    ];

    /// The API's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
            Self::Xhigh => "xhigh",
            Self::Max => "max",
        }
    }

    /// Reads an API name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|e| e.as_str() == s.trim())
    }
}

const EFFORT_4_5: &[Effort] = &[Effort::Low, Effort::Medium, Effort::High];
const EFFORT_4_6: &[Effort] = &[Effort::Low, Effort::Medium, Effort::High, Effort::Max];
const EFFORT_ALL: &[Effort] = Effort::ALL;

/// Prompts over this many tokens are billed at a model's long-prompt rate, where it has one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LongPrompt {
    /// Input tokens (uncached, cache writes and reads together) above which it applies.
    pub above_tokens: u64,
    /// Every rate of the request is multiplied by this.
    pub multiplier: f64,
}

/// What tether knows about a model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// The model id (dated ids share their family's entry); with `[1m]` when asked for.
    pub id: String,
    /// Its family, `opus`, `sonnet`, `haiku`, `fable` or `mythos` (empty when unknown).
    pub family: &'static str,
    /// Name for people (`Claude Opus 5.5`).
    pub display_name: String,
    /// Context window in tokens (the long one when `[1m]` was asked for).
    pub context_window: u64,
    /// The window with the `context-1m` beta, for models that have one.
    pub long_context: Option<u64>,
    /// Largest `max_tokens`.
    pub max_output: u32,
    /// Extended thinking.
    pub thinking: ThinkingKind,
    /// Effort levels it accepts (empty: no `effort`).
    pub efforts: &'static [Effort],
    /// The effort it uses when none is given.
    pub default_effort: Option<Effort>,
    /// Whether it supports context editing (`clear_thinking`).
    pub context_editing: bool,
    /// Prices; `None` when unknown.
    pub price: Option<Price>,
    /// A long-prompt rate.
    pub long_prompt: Option<LongPrompt>,
    /// Where this entry comes from: `built-in`, `api` (`GET /v1/models`) or `config`.
    pub source: &'static str,
}

impl ModelInfo {
    /// A model known only by id and limits: no thinking, effort or context editing is sent to
    /// it, and it has no price until config.toml gives one.
    fn plain(
        id: &str,
        display_name: String,
        context: u64,
        max_output: u32,
        source: &'static str,
    ) -> Self {
        Self {
            id: id.to_owned(),
            family: "",
            display_name,
            context_window: context,
            long_context: None,
            max_output,
            thinking: ThinkingKind::None,
            efforts: &[],
            default_effort: None,
            context_editing: false,
            price: None,
            long_prompt: None,
            source,
        }
    }
}

/// One row of the built-in table.
struct Known {
    id: &'static str,
    family: &'static str,
    name: &'static str,
    context: u64,
    long_context: Option<u64>,
    max_output: u32,
    thinking: ThinkingKind,
    efforts: &'static [Effort],
    default_effort: Option<Effort>,
    price: Price,
    long_prompt: Option<LongPrompt>,
}

const K: u64 = 1_000;
const M: u64 = 1_000_000;

const ADAPTIVE: ThinkingKind = ThinkingKind::Adaptive {
    always_on: false,
    updates: false,
};
const ADAPTIVE_UPDATES: ThinkingKind = ThinkingKind::Adaptive {
    always_on: false,
    updates: true,
};
const ALWAYS_ON: ThinkingKind = ThinkingKind::Adaptive {
    always_on: true,
    updates: true,
};

// One table row per model reads better than a struct literal of eleven lines each.
#[allow(clippy::too_many_arguments)]
const fn row(
    id: &'static str,
    family: &'static str,
    name: &'static str,
    context: u64,
    max_output: u32,
    thinking: ThinkingKind,
    efforts: &'static [Effort],
    default_effort: Option<Effort>,
    price: Price,
) -> Known {
    Known {
        id,
        family,
        name,
        context,
        long_context: None,
        max_output,
        thinking,
        efforts,
        default_effort,
        price,
        long_prompt: None,
    }
}

/// The models of Anthropic's models overview and pricing pages (platform.claude.com, checked
/// 2026-12-01): ids, windows, output limits, thinking and effort support, standard-tier prices
/// in USD per million tokens (input, output, 5-minute write, 1-hour write, cache read).
#[rustfmt::skip] // a table: one row per model
const KNOWN: &[Known] = &[
    row("claude-fable-5-2", "fable", "Claude Fable 5.2", M, 128_000, ALWAYS_ON, EFFORT_ALL, Some(Effort::High), Price::new(8.0, 40.0, 10.0, 16.0, 0.20)),
    row("claude-fable-5-1", "fable", "Claude Fable 5.1", M, 128_000, ALWAYS_ON, EFFORT_ALL, Some(Effort::High), Price::new(10.0, 50.0, 12.5, 20.0, 0.25)),
    row("claude-fable-5", "fable", "Claude Fable 5", M, 128_000, ALWAYS_ON, EFFORT_ALL, Some(Effort::High), Price::new(10.0, 50.0, 12.5, 20.0, 1.0)),
    row("claude-mythos-5-2", "mythos", "Claude Mythos 5.2", M, 128_000, ALWAYS_ON, EFFORT_ALL, Some(Effort::High), Price::new(8.0, 40.0, 10.0, 16.0, 0.20)),
    row("claude-mythos-5-1", "mythos", "Claude Mythos 5.1", M, 128_000, ALWAYS_ON, EFFORT_ALL, Some(Effort::High), Price::new(10.0, 50.0, 12.5, 20.0, 0.25)),
    row("claude-mythos-5", "mythos", "Claude Mythos 5", M, 128_000, ALWAYS_ON, EFFORT_ALL, Some(Effort::High), Price::new(10.0, 50.0, 12.5, 20.0, 1.0)),
    row("claude-opus-5-5", "opus", "Claude Opus 5.5", M, 128_000, ALWAYS_ON, EFFORT_ALL, Some(Effort::Medium), Price::new(4.0, 20.0, 5.0, 8.0, 0.20)),
    row("claude-opus-5", "opus", "Claude Opus 5", M, 128_000, ADAPTIVE, EFFORT_ALL, Some(Effort::High), Price::standard(5.0, 25.0)),
    row("claude-opus-4-8", "opus", "Claude Opus 4.8", M, 128_000, ADAPTIVE, EFFORT_ALL, Some(Effort::High), Price::standard(5.0, 25.0)),
    row("claude-opus-4-7", "opus", "Claude Opus 4.7", M, 128_000, ADAPTIVE, EFFORT_ALL, Some(Effort::High), Price::standard(5.0, 25.0)),
    row("claude-opus-4-6", "opus", "Claude Opus 4.6", M, 128_000, ADAPTIVE, EFFORT_4_6, Some(Effort::High), Price::standard(5.0, 25.0)),
    row("claude-opus-4-5", "opus", "Claude Opus 4.5", 200 * K, 64_000, ThinkingKind::Budget, EFFORT_4_5, Some(Effort::High), Price::standard(5.0, 25.0)),
    row("claude-opus-4-1", "opus", "Claude Opus 4.1", 200 * K, 32_000, ThinkingKind::Budget, &[], None, Price::standard(15.0, 75.0)),
    row("claude-opus-4-0", "opus", "Claude Opus 4", 200 * K, 32_000, ThinkingKind::Budget, &[], None, Price::standard(15.0, 75.0)),
    row("claude-opus-4", "opus", "Claude Opus 4", 200 * K, 32_000, ThinkingKind::Budget, &[], None, Price::standard(15.0, 75.0)),
    row("claude-sonnet-5-5", "sonnet", "Claude Sonnet 5.5", M, 128_000, ADAPTIVE_UPDATES, EFFORT_ALL, Some(Effort::High), Price::new(2.0, 10.0, 2.5, 4.0, 0.10)),
    row("claude-sonnet-5", "sonnet", "Claude Sonnet 5", M, 128_000, ADAPTIVE, EFFORT_ALL, Some(Effort::High), Price::new(2.0, 10.0, 2.5, 4.0, 0.20)),
    row("claude-sonnet-4-6", "sonnet", "Claude Sonnet 4.6", M, 64_000, ADAPTIVE, EFFORT_4_6, Some(Effort::High), Price::standard(3.0, 15.0)),
    Known { long_context: Some(M), ..row("claude-sonnet-4-5", "sonnet", "Claude Sonnet 4.5", 200 * K, 64_000, ThinkingKind::Budget, &[], None, Price::standard(3.0, 15.0)) },
    Known { long_context: Some(M), ..row("claude-sonnet-4-0", "sonnet", "Claude Sonnet 4", 200 * K, 64_000, ThinkingKind::Budget, &[], None, Price::standard(3.0, 15.0)) },
    Known { long_context: Some(M), ..row("claude-sonnet-4", "sonnet", "Claude Sonnet 4", 200 * K, 64_000, ThinkingKind::Budget, &[], None, Price::standard(3.0, 15.0)) },
    row("claude-3-7-sonnet", "sonnet", "Claude Sonnet 3.7", 200 * K, 64_000, ThinkingKind::Budget, &[], None, Price::standard(3.0, 15.0)),
    Known {
        long_prompt: Some(LongPrompt { above_tokens: 100 * K, multiplier: 5.0 }),
        ..row("claude-haiku-5-5", "haiku", "Claude Haiku 5.5", M, 128_000, ADAPTIVE, EFFORT_ALL, Some(Effort::Medium), Price::new(0.10, 0.50, 0.125, 0.20, 0.01))
    },
    row("claude-haiku-4-5", "haiku", "Claude Haiku 4.5", 200 * K, 64_000, ThinkingKind::Budget, &[], None, Price::standard(1.0, 5.0)),
    row("claude-3-5-haiku", "haiku", "Claude Haiku 3.5", 200 * K, 8_192, ThinkingKind::None, &[], None, Price::new(0.8, 4.0, 1.0, 1.6, 0.08)),
];

/// Built-in aliases: name, the variable that overrides it, the model it stands for.
const ALIASES: &[(&str, &str, &str)] = &[
    ("opus", "ANTHROPIC_DEFAULT_OPUS_MODEL", "claude-opus-5-5"),
    (
        "sonnet",
        "ANTHROPIC_DEFAULT_SONNET_MODEL",
        "claude-sonnet-5-5",
    ),
    ("haiku", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "claude-haiku-5-5"),
    ("fable", "ANTHROPIC_DEFAULT_FABLE_MODEL", "claude-fable-5-2"),
    (
        "mythos",
        "ANTHROPIC_DEFAULT_MYTHOS_MODEL",
        "claude-mythos-5-2",
    ),
];

/// The suffix that asks for a model's long (1M-token) context window.
pub const LONG_CONTEXT_SUFFIX: &str = "[1m]";

/// The beta that `[1m]` needs on models whose standard window is smaller.
pub const CONTEXT_1M_BETA: &str = "context-1m-2025-08-07";

/// Whether `id` is `key` or one of its dated snapshots (`key-20250929`), so a longer neighbour
/// (`claude-sonnet-5-5` for `claude-sonnet-5`) never matches.
fn covers(key: &str, id: &str) -> bool {
    id == key
        || id.strip_prefix(key).is_some_and(|rest| {
            rest == "-latest"
                || (rest.len() >= 9
                    && rest.starts_with('-')
                    && rest[1..].chars().all(|c| c.is_ascii_digit()))
        })
}

/// A model the API listed (`GET /v1/models`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListedModel {
    /// Its id.
    pub id: String,
    /// Its name for people.
    #[serde(default)]
    pub display_name: String,
    /// Context window, when the API says.
    #[serde(default)]
    pub max_input_tokens: Option<u64>,
    /// Output limit, when the API says.
    #[serde(default)]
    pub max_tokens: Option<u32>,
}

/// Token usage of one response (or a sum of them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Uncached input tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens written to the cache.
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    /// Input tokens read from the cache.
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    /// Of the cache writes, those with the 1-hour TTL (the rest are 5-minute).
    #[serde(default)]
    pub cache_write_1h_tokens: u64,
}

impl Usage {
    /// Reads a usage object as the API sends it (null fields count as 0).
    pub fn from_api(v: &serde_json::Value) -> Self {
        let n = |k: &str| v.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
        let one_hour = v
            .get("cache_creation")
            .and_then(|c| c.get("ephemeral_1h_input_tokens"))
            .and_then(|x| x.as_u64())
            .unwrap_or(0);
        Self {
            input_tokens: n("input_tokens"),
            output_tokens: n("output_tokens"),
            cache_creation_input_tokens: n("cache_creation_input_tokens"),
            cache_read_input_tokens: n("cache_read_input_tokens"),
            cache_write_1h_tokens: one_hour,
        }
    }

    /// Adds another usage to this one.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_creation_input_tokens += other.cache_creation_input_tokens;
        self.cache_read_input_tokens += other.cache_read_input_tokens;
        self.cache_write_1h_tokens += other.cache_write_1h_tokens;
    }

    /// All input tokens of the request (what fills the context window).
    pub fn context_tokens(&self) -> u64 {
        self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens
    }
}

impl From<ModelInfo> for tether_proto::ModelEntry {
    fn from(m: ModelInfo) -> Self {
        Self {
            thinking: match m.thinking {
                ThinkingKind::Adaptive {
                    always_on: true, ..
                } => "adaptive (always on)".into(),
                ThinkingKind::Adaptive { .. } => "adaptive".into(),
                ThinkingKind::Budget => "budget".into(),
                ThinkingKind::None => "none".into(),
            },
            efforts: m.efforts.iter().map(|e| e.as_str().to_owned()).collect(),
            default_effort: m.default_effort.map(|e| e.as_str().to_owned()),
            price: m.price.map(|p| {
                [
                    p.input,
                    p.output,
                    p.cache_write_5m,
                    p.cache_write_1h,
                    p.cache_read,
                ]
            }),
            source: m.source.to_owned(),
            id: m.id,
            display_name: m.display_name,
            family: m.family.to_owned(),
            context_window: m.context_window,
            long_context_window: m.long_context,
            max_output: m.max_output,
        }
    }
}

impl From<&Usage> for tether_proto::TokenUsage {
    fn from(u: &Usage) -> Self {
        Self {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_creation_input_tokens: u.cache_creation_input_tokens,
            cache_read_input_tokens: u.cache_read_input_tokens,
        }
    }
}

/// Why a model name cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// A bare word that is no alias.
    #[error(
        "unknown model {name:?}: use an alias ({aliases}) or a full model id such as claude-opus-5-5"
    )]
    UnknownAlias {
        /// What was asked for.
        name: String,
        /// The aliases there are.
        aliases: String,
    },
    /// An effort level the model does not take.
    #[error("{model} does not take effort {effort:?}{}", if .accepted.is_empty() { " (it has no effort setting)".to_owned() } else { format!(" (it takes {})", .accepted) })]
    Effort {
        /// The model id.
        model: String,
        /// What was asked for.
        effort: String,
        /// What it takes.
        accepted: String,
    },
}

impl ModelError {
    /// The turn error code a refused turn ends with.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownAlias { .. } => "unknown_model",
            Self::Effort { .. } => "invalid_effort",
        }
    }
}

/// What a turn asks of its requests — thinking, effort, context editing, betas, cache lifetime —
/// before each model's own abilities are applied ([`ModelCatalog::shape`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestPolicy {
    /// Turns thinking off where the model allows it.
    pub off: bool,
    /// Budget for models that think with a budget (`MAX_THINKING_TOKENS`); `None`: they do not
    /// think.
    pub budget: Option<u32>,
    /// The effort level; `None`: the model's default.
    pub effort: Option<Effort>,
    /// Send `display: omitted` (nobody reads the thinking: headless runs); otherwise thinking is
    /// summarized, or only its updates between tool calls on models that have them.
    pub hide_thinking: bool,
    /// Add `clear_thinking` context editing where supported.
    pub context_editing: bool,
    /// Betas added to every request (`ANTHROPIC_BETAS`, config `betas`).
    pub extra_betas: Vec<String>,
    /// How long the stable prefix (tools, system) stays cached; the moving tail always gets 5
    /// minutes.
    pub prefix_ttl: super::request::CacheTtl,
}

impl RequestPolicy {
    /// For the daemon's own requests (titles, compaction, page reading): no thinking where it
    /// can be turned off, and none shown where it cannot.
    pub fn internal() -> Self {
        Self {
            off: true,
            hide_thinking: true,
            ..Self::default()
        }
    }
}

/// Resolves aliases, knows limits and prices, and shapes requests to what each model takes.
/// Built once from the environment and configuration; models the API lists are learnt at run time.
#[derive(Debug, Clone, Default)]
pub struct ModelCatalog {
    overrides: Vec<(String, String)>,
    default_model: Option<String>,
    /// Prices from config.toml's `[models."<id>"]` tables.
    prices: Vec<(String, Price)>,
    /// Models from `GET /v1/models`.
    listed: std::sync::Arc<std::sync::RwLock<Vec<ListedModel>>>,
}

impl ModelCatalog {
    /// Reads `ANTHROPIC_DEFAULT_{OPUS,SONNET,HAIKU,FABLE,MYTHOS}_MODEL`; `default_model` is the
    /// configured model of new sessions.
    pub fn from_env(default_model: Option<String>) -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        Self {
            overrides: ALIASES
                .iter()
                .filter_map(|(alias, env, _)| var(env).map(|v| ((*alias).to_owned(), v)))
                .collect(),
            default_model,
            ..Self::default()
        }
    }

    /// Adds prices for models by id (config.toml's `[models."<id>"]`); they win over built-ins.
    pub fn with_prices(mut self, prices: Vec<(String, Price)>) -> Self {
        self.prices = prices;
        self
    }

    /// Remembers the models the API listed, so ids newer than this build are known.
    pub fn learn(&self, models: Vec<ListedModel>) {
        if let Ok(mut listed) = self.listed.write() {
            *listed = models;
        }
    }

    /// The model a turn asks for when the session's model is `name` in a session that is
    /// `planning` or not: `opusplan` plans with `opus` and works with `sonnet`; any other name
    /// is itself.
    pub fn for_mode<'a>(&self, name: &'a str, planning: bool) -> &'a str {
        match (name.trim(), planning) {
            ("opusplan", true) => "opus",
            ("opusplan", false) => "sonnet",
            _ => name,
        }
    }

    /// The model a session uses when none was chosen: the configured one, else `sonnet`.
    pub fn default_model(&self) -> &str {
        self.default_model.as_deref().unwrap_or("sonnet")
    }

    /// The API model id for an alias or id (`sonnet` → `claude-sonnet-5-5`, `opus[1m]` →
    /// `claude-opus-5-5[1m]`); ids pass through. Claude Code's names for a choice: `best` is
    /// `opus`, `default` the configured model of new sessions, `opusplan` `sonnet` (and `opus`
    /// while planning: [`Self::for_mode`]).
    pub fn resolve(&self, name: &str) -> String {
        let name = name.trim();
        match name {
            "best" => return self.resolve("opus"),
            "opusplan" => return self.resolve("sonnet"),
            "default" if self.default_model() != "default" => {
                return self.resolve(self.default_model());
            }
            _ => {}
        }
        let (base, long) = match name.strip_suffix(LONG_CONTEXT_SUFFIX) {
            Some(b) => (b, LONG_CONTEXT_SUFFIX),
            None => (name, ""),
        };
        if let Some((_, id)) = self.overrides.iter().find(|(a, _)| a == base) {
            return format!("{id}{long}");
        }
        ALIASES
            .iter()
            .find(|(alias, _, _)| *alias == base)
            .map(|(_, _, id)| format!("{id}{long}"))
            .unwrap_or_else(|| name.to_owned())
    }

    /// Checks that `name` can be sent: an alias, or something shaped like a model id (a bare word
    /// that is no alias is a typo, not a model).
    pub fn check(&self, name: &str) -> Result<(), ModelError> {
        let id = self.resolve(name);
        let bare = id.trim_end_matches(LONG_CONTEXT_SUFFIX);
        if bare.contains(['-', '.', '/', ':', '@']) || self.listed_model(bare).is_some() {
            return Ok(());
        }
        Err(ModelError::UnknownAlias {
            name: name.trim().to_owned(),
            aliases: ALIASES
                .iter()
                .map(|(a, _, _)| *a)
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    fn listed_model(&self, id: &str) -> Option<ListedModel> {
        self.listed
            .read()
            .ok()
            .and_then(|l| l.iter().find(|m| m.id == id).cloned())
    }

    /// What is known about a model id (or alias); `None` for a model neither built in, listed by
    /// the API nor priced in config.toml.
    pub fn info(&self, name: &str) -> Option<ModelInfo> {
        let id = self.resolve(name);
        let (bare, long) = match id.strip_suffix(LONG_CONTEXT_SUFFIX) {
            Some(b) => (b, true),
            None => (id.as_str(), false),
        };
        let configured = self
            .prices
            .iter()
            .find(|(key, _)| key == &id || covers(key, bare))
            .map(|(_, p)| *p);
        let mut info = if let Some(k) = KNOWN.iter().find(|k| covers(k.id, bare)) {
            ModelInfo {
                id: id.clone(),
                family: k.family,
                display_name: k.name.to_owned(),
                context_window: k.context,
                long_context: k.long_context,
                max_output: k.max_output,
                thinking: k.thinking,
                efforts: k.efforts,
                default_effort: k.default_effort,
                context_editing: true,
                price: Some(k.price),
                long_prompt: k.long_prompt,
                source: "built-in",
            }
        } else if let Some(l) = self.listed_model(bare) {
            ModelInfo::plain(
                &id,
                l.display_name.clone(),
                l.max_input_tokens.unwrap_or(200 * K),
                l.max_tokens.unwrap_or(32_000),
                "api",
            )
        } else {
            configured?;
            ModelInfo::plain(&id, bare.to_owned(), 200 * K, 32_000, "config")
        };
        if configured.is_some() {
            info.price = configured;
        }
        if long && let Some(w) = info.long_context {
            info.context_window = w;
        }
        Some(info)
    }

    /// Checks an effort level against the model.
    pub fn check_effort(&self, model: &str, effort: &str) -> Result<Effort, ModelError> {
        let id = self.resolve(model);
        let accepted = self.info(&id).map(|i| i.efforts).unwrap_or(&[]);
        let list = accepted
            .iter()
            .map(|e| e.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        match Effort::parse(effort) {
            Some(e) if accepted.contains(&e) => Ok(e),
            _ => Err(ModelError::Effort {
                model: id,
                effort: effort.trim().to_owned(),
                accepted: list,
            }),
        }
    }

    /// Every model this daemon knows: the built-in table, then models only the API listed.
    pub fn list(&self) -> Vec<ModelInfo> {
        let mut out: Vec<ModelInfo> = KNOWN.iter().filter_map(|k| self.info(k.id)).collect();
        if let Ok(listed) = self.listed.read() {
            for l in listed.iter() {
                if !out.iter().any(|m| covers(&m.id, &l.id))
                    && let Some(i) = self.info(&l.id)
                {
                    out.push(i);
                }
            }
        }
        out
    }

    /// The aliases and what each stands for now.
    pub fn aliases(&self) -> Vec<(&'static str, String)> {
        ALIASES
            .iter()
            .map(|(a, _, _)| (*a, self.resolve(a)))
            .collect()
    }

    /// Shapes `request` for its model: the bare id (no `[1m]`), `max_tokens` capped by the
    /// model's limit, thinking, effort and context editing as the model takes them, and the
    /// betas those need. `max_tokens` of 0 means the model's own limit.
    pub fn shape(&self, request: &mut MessagesRequest, policy: &RequestPolicy) {
        let info = self.info(&request.model);
        let long = request.model.ends_with(LONG_CONTEXT_SUFFIX);
        if long {
            request
                .model
                .truncate(request.model.len() - LONG_CONTEXT_SUFFIX.len());
        }
        let limit = info.as_ref().map(|i| i.max_output).unwrap_or(32_000);
        request.max_tokens = match request.max_tokens {
            0 => limit,
            n => n.min(limit),
        };
        let mut betas: Vec<String> = Vec::new();
        if long && info.as_ref().is_some_and(|i| i.long_context.is_some()) {
            betas.push(CONTEXT_1M_BETA.into());
        }
        let thinks = match info.as_ref().map(|i| i.thinking) {
            Some(ThinkingKind::Adaptive { always_on, updates }) if always_on || !policy.off => {
                let display = if policy.hide_thinking {
                    ThinkingDisplay::Omitted
                } else if updates {
                    betas.push(THINKING_UPDATES_BETA.into());
                    ThinkingDisplay::Updates
                } else {
                    ThinkingDisplay::Summarized
                };
                request.thinking = Some(Thinking::Adaptive {
                    display: Some(display),
                });
                true
            }
            Some(ThinkingKind::Budget) if !policy.off => match policy.budget {
                // The API wants 1024 ≤ budget < max_tokens.
                Some(b) if request.max_tokens > 1024 => {
                    request.thinking = Some(Thinking::Enabled {
                        budget_tokens: b.clamp(1024, request.max_tokens - 1),
                    });
                    true
                }
                _ => false,
            },
            _ => false,
        };
        if thinks {
            betas.push(INTERLEAVED_THINKING_BETA.into());
            request.temperature = None;
        }
        if let Some(i) = info.as_ref().filter(|i| !i.efforts.is_empty()) {
            let effort = policy
                .effort
                .filter(|e| i.efforts.contains(e))
                .or(i.default_effort);
            if let Some(e) = effort {
                request.output_config = Some(serde_json::json!({"effort": e.as_str()}));
                betas.push(EFFORT_BETA.into());
            }
        }
        if thinks && policy.context_editing && info.as_ref().is_some_and(|i| i.context_editing) {
            request.context_management = Some(serde_json::json!({
                "edits": [{"type": "clear_thinking_20251015", "keep": "all"}]
            }));
            betas.push(CONTEXT_MANAGEMENT_BETA.into());
        }
        for b in &policy.extra_betas {
            let b = b.trim();
            if !b.is_empty() && !betas.iter().any(|x| x == b) {
                betas.push(b.to_owned());
            }
        }
        request.betas = betas;
    }

    /// What `usage` cost on `model` in USD; `None` when the model's price is unknown.
    pub fn cost_usd(&self, model: &str, usage: &Usage) -> Option<f64> {
        let info = self.info(model)?;
        let p = info.price?;
        let scale = match info.long_prompt {
            Some(lp) if usage.context_tokens() > lp.above_tokens => lp.multiplier,
            _ => 1.0,
        };
        let write_1h = usage
            .cache_write_1h_tokens
            .min(usage.cache_creation_input_tokens);
        let write_5m = usage.cache_creation_input_tokens - write_1h;
        let per_token = |count: u64, per_million: f64| count as f64 * per_million / 1_000_000.0;
        Some(
            scale
                * (per_token(usage.input_tokens, p.input)
                    + per_token(usage.output_tokens, p.output)
                    + per_token(write_5m, p.cache_write_5m)
                    + per_token(write_1h, p.cache_write_1h)
                    + per_token(usage.cache_read_input_tokens, p.cache_read)),
        )
    }
}

/// Thinking blocks interleaved with tool use.
pub const INTERLEAVED_THINKING_BETA: &str = "interleaved-thinking-2025-05-14";
/// `context_management` edits.
pub const CONTEXT_MANAGEMENT_BETA: &str = "context-management-2025-06-27";
/// `output_config.effort`.
pub const EFFORT_BETA: &str = "effort-2025-11-24";
/// `thinking.display: updates`.
pub const THINKING_UPDATES_BETA: &str = "thinking-display-updates-2026-08-18";

/// The dated id of a catalog model that the clouds know only dated (`claude-sonnet-4-5` →
/// `claude-sonnet-4-5-20250929`), or a dated id as given; `None` for an undated model (newer
/// models are undated on both clouds). Shared by Vertex and Bedrock ids.
pub fn dated_id(model: &str) -> Option<String> {
    const DATED: &[(&str, &str)] = &[
        ("claude-3-5-haiku", "claude-3-5-haiku-20241022"),
        ("claude-3-7-sonnet", "claude-3-7-sonnet-20250219"),
        ("claude-sonnet-4", "claude-sonnet-4-20250514"),
        ("claude-sonnet-4-0", "claude-sonnet-4-20250514"),
        ("claude-opus-4", "claude-opus-4-20250514"),
        ("claude-opus-4-0", "claude-opus-4-20250514"),
        ("claude-opus-4-1", "claude-opus-4-1-20250805"),
        ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929"),
        ("claude-haiku-4-5", "claude-haiku-4-5-20251001"),
        ("claude-opus-4-5", "claude-opus-4-5-20251101"),
    ];
    if let Some((_, id)) = DATED.iter().find(|(m, _)| *m == model) {
        return Some((*id).to_owned());
    }
    let (_, date) = model.rsplit_once('-')?;
    (date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit())).then(|| model.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Message;

    fn shaped(c: &ModelCatalog, model: &str, policy: &RequestPolicy) -> serde_json::Value {
        let mut req = MessagesRequest::new(c.resolve(model), 0, vec![Message::user_text("hi")]);
        c.shape(&mut req, policy);
        let mut v = serde_json::to_value(&req).expect("serializes");
        v["betas"] = serde_json::json!(req.betas);
        v
    }

    #[test]
    fn aliases_resolve_to_todays_models_and_ids_pass_through() {
        let c = ModelCatalog::default();
        assert_eq!(c.resolve("opus"), "claude-opus-5-5");
        assert_eq!(c.resolve("sonnet"), "claude-sonnet-5-5");
        assert_eq!(c.resolve("haiku"), "claude-haiku-5-5");
        assert_eq!(c.resolve("fable"), "claude-fable-5-2");
        assert_eq!(c.resolve("sonnet[1m]"), "claude-sonnet-5-5[1m]");
        assert_eq!(
            c.resolve("claude-sonnet-4-20250514"),
            "claude-sonnet-4-20250514"
        );
        assert_eq!(
            c.info("claude-sonnet-4-20250514").map(|m| m.display_name),
            Some("Claude Sonnet 4".to_owned())
        );
        // A dated snapshot never lands on a longer neighbour.
        assert_eq!(
            c.info("claude-sonnet-5-20260630").map(|m| m.display_name),
            Some("Claude Sonnet 5".to_owned())
        );
        assert_eq!(
            c.info("claude-fable-5-20260609").map(|m| m.display_name),
            Some("Claude Fable 5".to_owned())
        );
        let o = ModelCatalog {
            overrides: vec![("haiku".into(), "my-haiku".into())],
            ..ModelCatalog::default()
        };
        assert_eq!(o.resolve("haiku"), "my-haiku");
    }

    #[test]
    fn claude_codes_names_for_a_choice_resolve() {
        let c = ModelCatalog::from_env(Some("haiku".into()));
        assert_eq!(c.resolve("best"), c.resolve("opus"));
        assert_eq!(c.resolve("default"), "claude-haiku-5-5");
        assert_eq!(c.resolve("opusplan"), c.resolve("sonnet"));
        assert_eq!(c.for_mode("opusplan", true), "opus");
        assert_eq!(c.for_mode("opusplan", false), "sonnet");
        assert_eq!(c.for_mode("haiku", true), "haiku");
        for name in ["best", "default", "opusplan"] {
            assert!(c.check(name).is_ok(), "{name}");
        }
        // A configured default that says `default` does not loop.
        let odd = ModelCatalog::from_env(Some("default".into()));
        assert_eq!(odd.resolve("default"), "default");
    }

    #[test]
    fn a_bare_word_that_is_no_alias_is_refused_with_the_aliases() {
        let c = ModelCatalog::default();
        assert!(c.check("opus").is_ok());
        assert!(c.check("claude-future-9").is_ok(), "ids pass through");
        let err = c.check("opuss").expect_err("a typo").to_string();
        assert!(err.contains("opuss") && err.contains("fable"), "{err}");
        c.learn(vec![ListedModel {
            id: "newmodel".into(),
            display_name: "New".into(),
            max_input_tokens: Some(2_000_000),
            max_tokens: Some(50_000),
        }]);
        assert!(c.check("newmodel").is_ok(), "a listed model is known");
        let info = c.info("newmodel").expect("listed");
        assert_eq!(
            (info.context_window, info.max_output, info.price),
            (2_000_000, 50_000, None)
        );
    }

    #[test]
    fn each_model_gets_the_thinking_effort_and_betas_it_takes() {
        let c = ModelCatalog::default();
        let r = RequestPolicy {
            context_editing: true,
            ..RequestPolicy::default()
        };
        let opus = shaped(&c, "opus", &r);
        assert_eq!(opus["model"], "claude-opus-5-5");
        assert_eq!(opus["max_tokens"], 128_000);
        assert_eq!(
            opus["thinking"],
            serde_json::json!({"type": "adaptive", "display": "updates"})
        );
        assert_eq!(
            opus["output_config"],
            serde_json::json!({"effort": "medium"})
        );
        assert_eq!(
            opus["context_management"]["edits"][0]["type"],
            "clear_thinking_20251015"
        );
        for beta in [
            INTERLEAVED_THINKING_BETA,
            EFFORT_BETA,
            CONTEXT_MANAGEMENT_BETA,
            THINKING_UPDATES_BETA,
        ] {
            assert!(
                opus["betas"]
                    .as_array()
                    .is_some_and(|b| b.contains(&serde_json::json!(beta))),
                "{beta}: {}",
                opus["betas"]
            );
        }
        let hidden = shaped(
            &c,
            "sonnet",
            &RequestPolicy {
                hide_thinking: true,
                effort: Some(Effort::Low),
                ..r.clone()
            },
        );
        assert_eq!(hidden["thinking"]["display"], "omitted");
        assert_eq!(hidden["output_config"]["effort"], "low");

        // Haiku 4.5 thinks only with a budget, and has no effort.
        let old = shaped(&c, "claude-haiku-4-5", &r);
        assert!(old.get("thinking").is_none() && old.get("output_config").is_none());
        assert_eq!(old["max_tokens"], 64_000);
        let budget = shaped(
            &c,
            "claude-haiku-4-5",
            &RequestPolicy {
                budget: Some(10_000),
                ..r.clone()
            },
        );
        assert_eq!(
            budget["thinking"],
            serde_json::json!({"type": "enabled", "budget_tokens": 10_000})
        );

        // Off where allowed; Opus 5.5 thinks whatever is asked.
        let off = RequestPolicy {
            off: true,
            ..r.clone()
        };
        assert!(shaped(&c, "sonnet", &off).get("thinking").is_none());
        assert!(shaped(&c, "opus", &off)["thinking"].is_object());

        // [1m] is a beta on models whose window is smaller, and never part of the id.
        let long = shaped(&c, "claude-sonnet-4-5[1m]", &r);
        assert_eq!(long["model"], "claude-sonnet-4-5");
        assert!(
            long["betas"]
                .as_array()
                .is_some_and(|b| b.contains(&serde_json::json!(CONTEXT_1M_BETA)))
        );
        assert_eq!(
            c.info("claude-sonnet-4-5[1m]").map(|i| i.context_window),
            Some(1_000_000)
        );
        assert_eq!(
            c.info("claude-sonnet-4-5").map(|i| i.context_window),
            Some(200_000)
        );
    }

    #[test]
    fn efforts_are_checked_against_the_model() {
        let c = ModelCatalog::default();
        assert_eq!(c.check_effort("opus", "xhigh").ok(), Some(Effort::Xhigh));
        let err = c
            .check_effort("claude-opus-4-6", "xhigh")
            .expect_err("4.6 has no xhigh");
        assert!(err.to_string().contains("claude-opus-4-6"), "{err}");
        let err = c
            .check_effort("claude-haiku-4-5", "low")
            .expect_err("no effort");
        assert!(err.to_string().contains("no effort setting"), "{err}");
    }

    #[test]
    fn cost_counts_cache_reads_and_writes_and_long_prompts() {
        let c = ModelCatalog::default();
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 1_000_000,
            cache_creation_input_tokens: 2_000_000,
            cache_read_input_tokens: 1_000_000,
            cache_write_1h_tokens: 1_000_000,
        };
        // Sonnet 4.5: 3 + 15 + 3.75 (5m) + 6 (1h) + 0.3
        let cost = c.cost_usd("claude-sonnet-4-5", &usage).expect("priced");
        assert!((cost - 28.05).abs() < 1e-9, "{cost}");
        // Opus 5.5: 4 + 20 + 5 + 8 + 0.2
        let cost = c.cost_usd("opus", &usage).expect("priced");
        assert!((cost - 37.2).abs() < 1e-9, "{cost}");
        // Haiku 5.5 over 100k prompt tokens: everything at 5×.
        let cost = c.cost_usd("haiku", &usage).expect("priced");
        assert!(
            (cost - 5.0 * (0.1 + 0.5 + 0.125 + 0.2 + 0.01)).abs() < 1e-9,
            "{cost}"
        );
        assert_eq!(
            c.cost_usd("some-future-model", &usage),
            None,
            "unknown is not zero"
        );
        let priced = ModelCatalog::default().with_prices(vec![(
            "some-future-model".into(),
            Price::new(1.0, 2.0, 0.0, 0.0, 0.0),
        )]);
        let cost = priced
            .cost_usd("some-future-model", &usage)
            .expect("from config");
        assert!((cost - 3.0).abs() < 1e-9, "{cost}");
    }
}
