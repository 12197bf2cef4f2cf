//! Fuzz harnesses for every parser that reads outside input in-process: the SSE decoder and
//! message accumulator, permission rules, the shell splitter, settings, `config.toml` and
//! `.mcp.json` entries, and the Edit matcher. (NDJSON framing has its own in `rpc::ndjson`; the
//! wire, dispatch and WebSocket upgrade are fuzzed against the real daemon in `tests/`.)
//!
//! Each harness is a test: it first runs its seeds (inputs taken from the unit tests), then
//! random inputs for one second — or for `BOLERO_RANDOM_TEST_TIME_MS` when `tests/fuzz` runs it
//! for longer. A random input either stands alone or, more often, is a mutation script applied
//! to a seed, so most inputs are near-valid and reach deep into the parser. An input that
//! crashed once becomes a seed here, so it is checked on every run.

use crate::llm::{LlmError, assemble};
use crate::permissions::rules::Rule;
use crate::permissions::settings::RuleSet;
use crate::permissions::shell;
use crate::tools::edit;
use serde_json::{Value, json};
use std::path::Path;

/// Mutations stop growing an input past this (a 64 KiB input already reaches every path).
const MAX_MUTATED: usize = 64 * 1024;

/// Bytes that matter to most of these grammars.
const SPECIAL: &[u8] = b"\"\\{}[]:,*() \n\r\t$`'|;&<>/.~@#=-%\0";

/// `seeds[script[0]]` edited by the rest of `script` in (op, position, byte) triples, or —
/// when the first byte's top bit is set — the rest of `script` itself.
fn mutated(seeds: &[&str], script: &[u8]) -> Vec<u8> {
    let Some((&pick, ops)) = script.split_first() else {
        return seeds
            .first()
            .map(|s| s.as_bytes().to_vec())
            .unwrap_or_default();
    };
    if pick & 0x80 != 0 || seeds.is_empty() {
        return ops.to_vec();
    }
    let mut out = seeds[pick as usize % seeds.len()].as_bytes().to_vec();
    for op in ops.chunks_exact(3) {
        let at = if out.is_empty() {
            0
        } else {
            op[1] as usize * out.len() / 256
        };
        match op[0] % 5 {
            0 if at < out.len() => out[at] = op[2],
            1 if out.len() < MAX_MUTATED => out.insert(at, op[2]),
            2 if at < out.len() => {
                out.remove(at);
            }
            // Repeat a short run: long tokens, deep nesting.
            3 if out.len() < MAX_MUTATED => {
                let end = (at + 1 + op[2] as usize % 8).min(out.len());
                let run = out[at..end].to_vec();
                for _ in 0..op[2] % 32 {
                    out.splice(at..at, run.iter().copied());
                }
            }
            4 if out.len() < MAX_MUTATED => out.insert(at, SPECIAL[op[2] as usize % SPECIAL.len()]),
            _ => {}
        }
    }
    out
}

/// Runs `target` on each seed, then on random inputs (mutated seeds or raw bytes).
fn fuzz(seeds: &[&str], target: impl Fn(&[u8]) + std::panic::RefUnwindSafe) {
    for seed in seeds {
        target(seed.as_bytes());
    }
    bolero::check!().for_each(|script: &[u8]| target(&mutated(seeds, script)));
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const SSE_SEEDS: &[&str] = &[
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":5}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hm\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"c2ln\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"Bash\",\"input\":{}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"command\\\": \\\"ls\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"}\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":9}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    ": ping\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
];

#[test]
fn sse_decoder_and_accumulator() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    fuzz(SSE_SEEDS, |bytes| {
        // Network-sized pieces, cut where the input says, so events straddle chunks.
        let cut = bytes.first().map_or(7, |b| *b as usize % 64 + 1);
        let chunks: Vec<Result<Vec<u8>, LlmError>> =
            bytes.chunks(cut).map(|c| Ok(c.to_vec())).collect();
        let _ = rt.block_on(assemble(futures::stream::iter(chunks), |_| {}));
    });
}

const RULE_SEEDS: &[&str] = &[
    "Bash(git diff:*)",
    "Bash(npm run test *)",
    "Read(./src/**)",
    "Edit(//etc/passwd)",
    "Read(~/.ssh/*)",
    "WebFetch(domain:example.com)",
    "mcp__github__*",
    "Write(/docs/*.md)",
    "Bash",
    "Read(**/.env)",
];

#[test]
fn permission_rules() {
    let base = Path::new("/work/project");
    let home = Some(Path::new("/home/u"));
    fuzz(RULE_SEEDS, |bytes| {
        let input = text(bytes);
        // The rule is the first line; what it is matched against, the rest.
        let (rule, probe) = input.split_once('\n').unwrap_or((&input, "ls -la"));
        if let Ok(rule) = Rule::parse(rule, base, home) {
            let _ = rule.covers("Bash");
            let _ = rule.matches_command(probe);
            let _ = rule.matches_path(&base.join(probe));
            let _ = rule.matches_path(Path::new(probe));
            let _ = rule.matches_url(probe);
            let _ = rule.matches_other(&json!({"command": probe, "file_path": probe}));
        }
        let _ = crate::permissions::rules::host_of(probe);
    });
}

const SHELL_SEEDS: &[&str] = &[
    "git status && git diff HEAD~1 -- src/",
    "echo x > f && cat f | grep -v y; ls -la",
    "FOO=1 bash -c 'rm -rf /' || true",
    "find . -name '*.rs' -exec rm {} \\;",
    "echo $(whoami) `id` \"$HOME\" 'single' \\\"",
    "cat <<EOF\nhello\nEOF",
    "xargs -0 rm < list & sleep 1 ; wait",
    "git -c core.pager='sh -c id' log",
];

#[test]
fn shell_splitter() {
    fuzz(SHELL_SEEDS, |bytes| {
        let command = text(bytes);
        for part in shell::split(&command) {
            let _ = shell::is_read_only(&part, &|_| true);
        }
        let _ = shell::is_read_only(&command, &|p| p.starts_with('.'));
    });
}

const SETTINGS_SEEDS: &[&str] = &[
    r#"{"permissions":{"allow":["Bash(git diff:*)","Read(./src/**)"],"deny":["Read(./.env)"],"ask":["WebFetch"],"defaultMode":"acceptEdits","additionalDirectories":["../other"]}}"#,
    r#"{"mcpServers":{"files":{"command":"npx","args":["-y","server","${HOME}"],"env":{"K":"${KEY:-default}"}},"web":{"type":"http","url":"https://x/${PATH_PART}","headers":{"Authorization":"Bearer ${TOKEN}"}},"old":{"type":"sse","url":"http://localhost:1/sse"}}}"#,
    r#"{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"echo hi","timeout":5}]}]},"env":{"A":"b"},"model":"opus"}"#,
];

#[test]
fn settings_and_mcp_entries() {
    let base = Path::new("/work/project");
    let home = Some(Path::new("/home/u"));
    let env = |name: &str| (name == "HOME").then(|| "/home/u".to_owned());
    fuzz(SETTINGS_SEEDS, |bytes| {
        let Ok(value) = serde_json::from_slice::<Value>(bytes) else {
            let _ = crate::mcp::config::expand(&text(bytes), &env);
            return;
        };
        let mut rules = RuleSet::default();
        rules.add_settings(&value, base, home, "fuzz");
        if let Some(servers) = value.get("mcpServers").and_then(Value::as_object) {
            for (name, entry) in servers {
                let _ = crate::mcp::config::server_of(name, entry, &env);
            }
        }
    });
}

const CONFIG_SEEDS: &[&str] = &[
    "model = \"claude-sonnet-4-5\"\nmax_connections = 64\nidle_unload = \"10m\"\n",
    "provider = \"anthropic\"\ncache_ttl = \"1h\"\n[models.\"my-model\"]\ninput = 3.0\noutput = 15.0\n",
    "permission_mode = \"plan\"\ntelemetry = true\notlp_endpoint = \"http://localhost:4317\"\n",
];

#[test]
fn config_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.toml");
    fuzz(CONFIG_SEEDS, |bytes| {
        std::fs::write(&path, bytes).expect("write the config");
        let _ = crate::config::Config::load(Some(&path), &|_| None, &[]);
    });
}

const EDIT_SEEDS: &[&str] = &[
    "fn main() {\n    println!(\"héllo\");\n}\n\0héllo\0wörld\0\0",
    "a\r\nb\r\nc\r\n\0b\r\n\0B\nB\0x",
    "one two one two\0one\0three\0x\0two\0ü\0x",
    // Found by this harness: the snippet after a multi-edit cut a character in two.
    "αβγ αβγ\0β\0ββ\0x\0α\0a\0x",
];

/// `text\0old\0new\0flags[\0old\0new\0flags…]`: the file and its changes (flags: `x` =
/// replace_all).
#[test]
fn edit_matcher() {
    fuzz(EDIT_SEEDS, |bytes| {
        let input = text(bytes);
        let mut parts = input.split('\0');
        let file = parts.next().unwrap_or_default().to_owned();
        let rest: Vec<&str> = parts.collect();
        let changes: Vec<edit::Change> = rest
            .chunks(3)
            .map(|c| {
                edit::Change::from_json(&json!({
                    "old_string": c.first().copied().unwrap_or_default(),
                    "new_string": c.get(1).copied().unwrap_or_default(),
                    "replace_all": c.get(2).is_some_and(|f| f.contains('x')),
                }))
            })
            .collect();
        if let Ok((updated, at)) = edit::apply(&file, &changes, "f") {
            let new_len = changes.first().map(|c| c.new.len()).unwrap_or(0);
            let _ = edit::snippet(&updated, at, new_len);
            let _ = edit::unified_diff(Path::new("f"), &file, &updated);
            if let [only] = changes.as_slice()
                && !file.contains('\r')
                && !only.replace_all
            {
                assert_eq!(updated, file.replacen(&only.old, &only.new, 1));
            }
        }
    });
}

/// Found by `edit_matcher`: a `replace_all` of a short string by a long one took the daemon's
/// memory (gigabytes from a 64 KiB input).
#[test]
fn an_edit_that_would_grow_a_file_by_gigabytes_is_refused() {
    let text = "a".repeat(100_000);
    let change = edit::Change::from_json(&json!({
        "old_string": "a", "new_string": "b".repeat(1000), "replace_all": true,
    }));
    let err = edit::apply(&text, &[change], "f").expect_err("refused");
    assert!(err.contains("MiB"), "{err}");
}
