//! Prompt caching as the API documents it, simulated so tests and benches can assert hits,
//! misses and what they cost: the prefix runs tools → system → messages; a block with
//! `cache_control` is a breakpoint (at most 4); a request reads the longest cached prefix that
//! ends at one of its breakpoints or up to 20 blocks before one; it writes every breakpoint past
//! that; a prefix shorter than the model's minimum is never cached; entries live 5 minutes or an
//! hour (`ttl: "1h"`), and a read refreshes them. Tokens are estimated as a quarter of each
//! block's JSON length, rounded up.

use serde_json::Value;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

/// How far back from a breakpoint the API looks for an earlier cached prefix.
pub const LOOKBACK_BLOCKS: usize = 20;

/// What one request's input was billed as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheUsage {
    /// Uncached input tokens.
    pub input: u64,
    /// Tokens read from the cache.
    pub read: u64,
    /// Tokens written with the 5-minute lifetime.
    pub write_5m: u64,
    /// Tokens written with the 1-hour lifetime.
    pub write_1h: u64,
}

impl CacheUsage {
    /// The `usage` fields of `message_start`.
    pub fn to_json(self) -> Value {
        serde_json::json!({
            "input_tokens": self.input,
            "cache_read_input_tokens": self.read,
            "cache_creation_input_tokens": self.write_5m + self.write_1h,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.write_5m,
                "ephemeral_1h_input_tokens": self.write_1h,
            },
        })
    }
}

/// The cache of one fake server.
#[derive(Debug, Default)]
pub struct PromptCache {
    /// Prefix hash → when it expires (on the fake's clock).
    entries: HashMap<u64, Expiry>,
}

#[derive(Debug, Clone, Copy)]
struct Expiry {
    at: Duration,
    ttl: Duration,
}

/// The smallest prefix a model caches, in tokens.
pub fn minimum_tokens(model: &str) -> u64 {
    if model.contains("haiku") { 2048 } else { 1024 }
}

fn tokens(block: &Value) -> u64 {
    (block.to_string().len() as u64).div_ceil(4)
}

fn without_cache_control(block: &Value) -> (Value, Option<Duration>) {
    let mut b = block.clone();
    let ttl = b
        .as_object_mut()
        .and_then(|o| o.remove("cache_control"))
        .map(|cc| match cc.get("ttl").and_then(Value::as_str) {
            Some("1h") => Duration::from_secs(3600),
            _ => Duration::from_secs(300),
        });
    (b, ttl)
}

/// The request's blocks in prefix order, each with its breakpoint's lifetime if it is one.
fn blocks(body: &Value) -> Vec<(Value, Option<Duration>)> {
    let mut out = Vec::new();
    if let Some(tools) = body["tools"].as_array() {
        out.extend(tools.iter().map(without_cache_control));
    }
    match &body["system"] {
        Value::String(s) => out.push((Value::String(s.clone()), None)),
        Value::Array(a) => out.extend(a.iter().map(without_cache_control)),
        _ => {}
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        let role = message["role"].clone();
        match &message["content"] {
            Value::String(s) => out.push((serde_json::json!({"role": role, "text": s}), None)),
            Value::Array(a) => {
                for block in a {
                    let (b, ttl) = without_cache_control(block);
                    out.push((serde_json::json!({"role": role, "block": b}), ttl));
                }
            }
            _ => {}
        }
    }
    out
}

impl PromptCache {
    /// Bills `body` at time `now` and updates the cache.
    pub fn account(&mut self, body: &Value, now: Duration) -> CacheUsage {
        let model = body["model"].as_str().unwrap_or("");
        let blocks = blocks(body);
        let mut hashes = Vec::with_capacity(blocks.len());
        let mut ends = Vec::with_capacity(blocks.len()); // tokens up to and including block i
        let mut h = DefaultHasher::new();
        model.hash(&mut h);
        let mut total = 0u64;
        for (b, _) in &blocks {
            b.to_string().hash(&mut h);
            hashes.push(h.finish());
            total += tokens(b);
            ends.push(total);
        }
        self.entries.retain(|_, e| e.at > now);
        let breakpoints: Vec<(usize, Duration)> = blocks
            .iter()
            .enumerate()
            .filter_map(|(i, (_, ttl))| ttl.map(|t| (i, t)))
            .collect();
        // The longest live prefix at a breakpoint or within the lookback before one.
        let hit = breakpoints
            .iter()
            .flat_map(|&(b, _)| (b.saturating_sub(LOOKBACK_BLOCKS)..=b).rev())
            .filter(|&i| self.entries.contains_key(&hashes[i]))
            .max();
        let mut usage = CacheUsage::default();
        let mut covered = 0u64;
        if let Some(i) = hit {
            if let Some(e) = self.entries.get_mut(&hashes[i]) {
                e.at = now + e.ttl;
            }
            usage.read = ends[i];
            covered = ends[i];
        }
        let minimum = minimum_tokens(model);
        for &(b, ttl) in &breakpoints {
            if hit.is_some_and(|i| b <= i) || ends[b] < minimum {
                continue;
            }
            let written = ends[b] - covered;
            if ttl >= Duration::from_secs(3600) {
                usage.write_1h += written;
            } else {
                usage.write_5m += written;
            }
            covered = ends[b];
            self.entries
                .insert(hashes[b], Expiry { at: now + ttl, ttl });
        }
        usage.input = total - covered;
        usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FIVE: Duration = Duration::from_secs(300);

    /// A request with one tool of about `t` tokens, a system block of about `s` and user
    /// messages, breakpoints on the tool, the system and the last message.
    fn request(system_ttl: Option<&str>, messages: &[&str]) -> Value {
        let cc = |ttl: Option<&str>| match ttl {
            Some(t) => json!({"type": "ephemeral", "ttl": t}),
            None => json!({"type": "ephemeral"}),
        };
        let mut msgs: Vec<Value> = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            let mut block = json!({"type": "text", "text": m});
            if i + 1 == messages.len() {
                block["cache_control"] = cc(None);
            }
            msgs.push(json!({"role": role, "content": [block]}));
        }
        json!({
            "model": "claude-sonnet-5-5",
            "tools": [{"name": "Read", "description": "x".repeat(4400), "input_schema": {}, "cache_control": cc(system_ttl)}],
            "system": [{"type": "text", "text": "y".repeat(2000), "cache_control": cc(system_ttl)}],
            "messages": msgs,
        })
    }

    #[test]
    fn a_repeated_prefix_is_read_and_the_new_tail_written() {
        let mut cache = PromptCache::default();
        let first = cache.account(&request(None, &["hello"]), Duration::ZERO);
        assert_eq!(first.read, 0);
        assert!(first.write_5m > 1500, "{first:?}");
        assert_eq!(
            first.input, 0,
            "everything up to the last breakpoint is written"
        );

        let second = cache.account(
            &request(None, &["hello", "hi there", "and now?"]),
            Duration::from_secs(60),
        );
        assert_eq!(
            second.read, first.write_5m,
            "the whole first prompt is read"
        );
        assert!(second.write_5m > 0 && second.write_5m < 100, "{second:?}");
    }

    #[test]
    fn entries_expire_after_their_lifetime_and_reads_refresh_them() {
        let mut cache = PromptCache::default();
        let r = request(None, &["hello"]);
        cache.account(&r, Duration::ZERO);
        // Read at 4 minutes: refreshed to 9 minutes.
        let hit = cache.account(&r, Duration::from_secs(240));
        assert!(hit.read > 0);
        let still = cache.account(&r, Duration::from_secs(240) + FIVE - Duration::from_secs(1));
        assert!(still.read > 0, "a read refreshed the entry");
        let missed = cache.account(&r, Duration::from_secs(240) * 4);
        assert_eq!(missed.read, 0, "expired");
    }

    #[test]
    fn an_hour_long_prefix_survives_a_six_minute_pause_while_the_tail_does_not() {
        let mut cache = PromptCache::default();
        let first = cache.account(&request(Some("1h"), &["hello"]), Duration::ZERO);
        assert!(first.write_1h > 1500 && first.write_5m < 100, "{first:?}");
        let later = cache.account(
            &request(Some("1h"), &["hello", "hi", "again"]),
            Duration::from_secs(360),
        );
        assert_eq!(
            later.read, first.write_1h,
            "the prefix is read, the old tail is gone"
        );
        assert!(later.write_5m > 0);
    }

    #[test]
    fn a_prefix_below_the_minimum_is_never_cached() {
        let mut cache = PromptCache::default();
        let tiny = json!({
            "model": "claude-sonnet-5-5",
            "system": [{"type": "text", "text": "short", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "hi"}],
        });
        let u = cache.account(&tiny, Duration::ZERO);
        assert_eq!((u.read, u.write_5m), (0, 0));
        assert!(u.input > 0);
        assert_eq!(cache.account(&tiny, Duration::ZERO).read, 0);
    }

    #[test]
    fn a_changed_system_prompt_misses_everything_after_the_tools() {
        let mut cache = PromptCache::default();
        cache.account(&request(None, &["hello"]), Duration::ZERO);
        let mut changed = request(None, &["hello"]);
        changed["system"][0]["text"] = json!("z".repeat(2000));
        let u = cache.account(&changed, Duration::from_secs(10));
        // The tool's breakpoint still hits; system and messages are written again.
        assert!(u.read > 1024 && u.read < 1200, "{u:?}");
        assert!(u.write_5m > 400, "{u:?}");
    }
}
