//! Models: aliases, context windows, output limits, prices, and what a response's usage costs.

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

/// What tether knows about a model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelInfo {
    /// Model id prefix this entry covers (dated ids share their family's entry).
    pub id: &'static str,
    /// Context window in tokens.
    pub context_window: u64,
    /// Largest `max_tokens`.
    pub max_output: u32,
    /// Prices.
    pub price: Price,
}

/// Prices as published on anthropic.com/pricing (standard tier, checked 2026-12-01).
/// Longest ids first so prefix matching finds the most specific entry.
const MODELS: &[ModelInfo] = &[
    ModelInfo {
        id: "claude-opus-4-5",
        context_window: 200_000,
        max_output: 64_000,
        price: Price::standard(5.0, 25.0),
    },
    ModelInfo {
        id: "claude-opus-4-1",
        context_window: 200_000,
        max_output: 32_000,
        price: Price::standard(15.0, 75.0),
    },
    ModelInfo {
        id: "claude-opus-4",
        context_window: 200_000,
        max_output: 32_000,
        price: Price::standard(15.0, 75.0),
    },
    ModelInfo {
        id: "claude-sonnet-4-5",
        context_window: 200_000,
        max_output: 64_000,
        price: Price::standard(3.0, 15.0),
    },
    ModelInfo {
        id: "claude-sonnet-4",
        context_window: 200_000,
        max_output: 64_000,
        price: Price::standard(3.0, 15.0),
    },
    ModelInfo {
        id: "claude-3-7-sonnet",
        context_window: 200_000,
        max_output: 64_000,
        price: Price::standard(3.0, 15.0),
    },
    ModelInfo {
        id: "claude-haiku-4-5",
        context_window: 200_000,
        max_output: 64_000,
        price: Price::standard(1.0, 5.0),
    },
    ModelInfo {
        id: "claude-3-5-haiku",
        context_window: 200_000,
        max_output: 8_192,
        price: Price::standard(0.8, 4.0),
    },
];

/// Built-in alias targets.
const ALIASES: &[(&str, &str, &str)] = &[
    ("opus", "ANTHROPIC_DEFAULT_OPUS_MODEL", "claude-opus-4-5"),
    (
        "sonnet",
        "ANTHROPIC_DEFAULT_SONNET_MODEL",
        "claude-sonnet-4-5",
    ),
    ("haiku", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "claude-haiku-4-5"),
];

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

/// Resolves aliases and knows prices; built once from the environment.
#[derive(Debug, Clone, Default)]
pub struct ModelCatalog {
    overrides: Vec<(String, String)>,
    default_model: Option<String>,
}

impl ModelCatalog {
    /// Reads `ANTHROPIC_DEFAULT_{OPUS,SONNET,HAIKU}_MODEL`; `default_model` is the configured
    /// model of new sessions.
    pub fn from_env(default_model: Option<String>) -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        Self {
            overrides: ALIASES
                .iter()
                .filter_map(|(alias, env, _)| var(env).map(|v| ((*alias).to_owned(), v)))
                .collect(),
            default_model,
        }
    }

    /// The model a session uses when none was chosen: the configured one, else `sonnet`.
    pub fn default_model(&self) -> &str {
        self.default_model.as_deref().unwrap_or("sonnet")
    }

    /// The API model id for an alias or id (`sonnet` → `claude-sonnet-4-5`); ids pass through.
    pub fn resolve(&self, name: &str) -> String {
        let name = name.trim();
        if let Some((_, id)) = self.overrides.iter().find(|(a, _)| a == name) {
            return id.clone();
        }
        ALIASES
            .iter()
            .find(|(alias, _, _)| *alias == name)
            .map(|(_, _, id)| (*id).to_owned())
            .unwrap_or_else(|| name.to_owned())
    }

    /// What is known about a model id (or alias); `None` for unknown models.
    pub fn info(&self, name: &str) -> Option<&'static ModelInfo> {
        let id = self.resolve(name);
        MODELS.iter().find(|m| id.starts_with(m.id))
    }

    /// What `usage` cost on `model` in USD; `None` when the model's price is unknown.
    pub fn cost_usd(&self, model: &str, usage: &Usage) -> Option<f64> {
        let p = self.info(model)?.price;
        let write_1h = usage
            .cache_write_1h_tokens
            .min(usage.cache_creation_input_tokens);
        let write_5m = usage.cache_creation_input_tokens - write_1h;
        let per_token = |count: u64, per_million: f64| count as f64 * per_million / 1_000_000.0;
        Some(
            per_token(usage.input_tokens, p.input)
                + per_token(usage.output_tokens, p.output)
                + per_token(write_5m, p.cache_write_5m)
                + per_token(write_1h, p.cache_write_1h)
                + per_token(usage.cache_read_input_tokens, p.cache_read),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_resolve_and_ids_pass_through() {
        let c = ModelCatalog::default();
        assert_eq!(c.resolve("sonnet"), "claude-sonnet-4-5");
        assert_eq!(
            c.resolve("claude-sonnet-4-20250514"),
            "claude-sonnet-4-20250514"
        );
        assert_eq!(
            c.info("claude-sonnet-4-20250514").map(|m| m.id),
            Some("claude-sonnet-4")
        );
        assert_eq!(c.info("opus").map(|m| m.id), Some("claude-opus-4-5"));
        let o = ModelCatalog {
            overrides: vec![("haiku".into(), "my-haiku".into())],
            default_model: None,
        };
        assert_eq!(o.resolve("haiku"), "my-haiku");
    }

    #[test]
    fn cost_counts_cache_reads_and_writes() {
        let c = ModelCatalog::default();
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 1_000_000,
            cache_creation_input_tokens: 2_000_000,
            cache_read_input_tokens: 1_000_000,
            cache_write_1h_tokens: 1_000_000,
        };
        // sonnet: 3 + 15 + 3.75 (5m) + 6 (1h) + 0.3
        let cost = c.cost_usd("sonnet", &usage).expect("priced");
        assert!((cost - 28.05).abs() < 1e-9, "{cost}");
        assert_eq!(
            c.cost_usd("some-future-model", &usage),
            None,
            "unknown is not zero"
        );
    }
}
