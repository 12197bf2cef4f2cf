//! The repository's own rules, read from its sources: every Rust file says what it owns (`//!`
//! first), each heavy dependency is named only by the module that owns it (ARCHITECTURE.md),
//! the daemon's and the client's top-level modules import each other without a circle, and
//! neither do the files of any folder of either (but those `CIRCLES_LEFT` names, each with why).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_owned()
}

/// Every `.rs` file under `dir`, relative to the repository, sorted.
fn rust_files(dir: &str) -> Vec<(String, String)> {
    let root = repo();
    let mut out = Vec::new();
    let mut stack = vec![root.join(dir)];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p
                    .strip_prefix(&root)
                    .map(|r| r.display().to_string())
                    .unwrap_or_default();
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                out.push((rel, text));
            }
        }
    }
    out.sort();
    out
}

/// The lines that are code (comments left out), for looking up names.
fn code_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|l| !l.trim_start().starts_with("//"))
}

#[test]
fn every_source_file_starts_with_what_it_owns() {
    let mut missing = Vec::new();
    for dir in [
        "proto/src",
        "daemon/src",
        "daemon/tests",
        "daemon/benches",
        "client/src",
        "tests/src",
        "tests/tests",
    ] {
        for (path, text) in rust_files(dir) {
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            if !first.starts_with("//!") {
                missing.push(path);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "these files do not start with a //! line saying what they own: {missing:?}"
    );
}

#[test]
fn each_heavy_dependency_is_named_only_by_its_owner() {
    // The crate's name in code, and the files or folders that may name it.
    let owners: &[(&str, &[&str])] = &[
        ("sled", &["daemon/src/store/local.rs"]),
        (
            "async_nats",
            &[
                "daemon/src/store/jetstream.rs",
                "daemon/src/store/jetstream/",
            ],
        ),
        (
            "reqwest",
            &[
                "daemon/src/llm/",
                "daemon/src/llm.rs",
                "daemon/src/mcp/sse.rs",
            ],
        ),
        (
            "rmcp",
            &[
                "daemon/src/mcp/client.rs",
                "daemon/src/mcp/sse.rs",
                "daemon/src/mcp/relay.rs",
            ],
        ),
        (
            "git2",
            &[
                "daemon/src/context/git.rs",
                "daemon/src/snapshots.rs",
                "daemon/src/snapshots/",
            ],
        ),
        ("gcp_auth", &["daemon/src/llm/provider.rs"]),
        ("lopdf", &["daemon/src/tools/pdf.rs"]),
        ("aws_config", &["daemon/src/llm/bedrock.rs"]),
        ("aws_sigv4", &["daemon/src/llm/bedrock.rs"]),
        ("aws_smithy_eventstream", &["daemon/src/llm/bedrock.rs"]),
        (
            "jsonrpsee",
            &[
                "proto/src/",
                "daemon/src/rpc/",
                "daemon/src/rpc.rs",
                "client/src/connection.rs",
            ],
        ),
        ("opentelemetry", &["daemon/src/telemetry.rs"]),
        ("opentelemetry_sdk", &["daemon/src/telemetry.rs"]),
        ("opentelemetry_otlp", &["daemon/src/telemetry.rs"]),
        ("tracing_opentelemetry", &["daemon/src/telemetry.rs"]),
        ("reedline", &["client/src/repl/", "client/src/repl.rs"]),
        (
            "agent_client_protocol",
            &["client/src/acp.rs", "client/src/acp/"],
        ),
        ("axum", &["daemon/src/approve/page.rs"]),
        ("hmac", &["daemon/src/approvals.rs"]),
    ];
    let mut wrong = Vec::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for dir in ["proto/src", "daemon/src", "client/src"] {
        for (path, text) in rust_files(dir) {
            for (krate, allowed) in owners {
                let named = code_lines(&text).any(|l| {
                    l.contains(&format!("{krate}::"))
                        && !l.contains(&format!("_{krate}::"))
                        && !l.contains(&format!("{krate}_"))
                        || l.trim_start().starts_with(&format!("use {krate}"))
                });
                if !named {
                    continue;
                }
                if allowed.iter().any(|a| path.starts_with(a)) {
                    seen.insert(krate);
                } else {
                    wrong.push(format!("{path} names {krate}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "outside their owners: {wrong:?}");
    // The rule can fail: each owner really does use its crate.
    for krate in [
        "sled",
        "reqwest",
        "git2",
        "jsonrpsee",
        "reedline",
        "rmcp",
        "gcp_auth",
        "lopdf",
        "aws_config",
        "aws_sigv4",
    ] {
        assert!(
            seen.contains(krate),
            "nobody uses {krate} any more: update this list"
        );
    }
}

/// A crate's top-level modules (`<src>/<module>.rs` and `<src>/<module>/…`) and the ones each
/// names as `crate::<module>`.
fn module_graph(src: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, text) in rust_files(src) {
        let rel = path.trim_start_matches(&format!("{src}/")).to_owned();
        let rel = rel.as_str();
        let module = rel
            .split('/')
            .next()
            .unwrap_or(rel)
            .trim_end_matches(".rs")
            .to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let entry = graph.entry(module.clone()).or_default();
        for line in code_lines(&text) {
            for (i, _) in line.match_indices("crate::") {
                let name: String = line[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != module {
                    entry.insert(name);
                }
            }
        }
    }
    graph
}

/// A path from `to` back to `from`, if the graph has one.
fn path_back(
    graph: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    to: &str,
) -> Option<Vec<String>> {
    let mut stack = vec![(to.to_owned(), vec![from.to_owned(), to.to_owned()])];
    let mut visited = BTreeSet::new();
    while let Some((node, path)) = stack.pop() {
        if node == from {
            return Some(path);
        }
        if !visited.insert(node.clone()) {
            continue;
        }
        for next in graph.get(&node).into_iter().flatten() {
            let mut p = path.clone();
            p.push(next.clone());
            stack.push((next.clone(), p));
        }
    }
    None
}

#[test]
fn the_daemons_modules_import_each_other_without_a_circle() {
    let graph = module_graph("daemon/src");
    assert!(graph.len() > 8, "the graph was read: {graph:?}");
    assert!(
        graph.get("session").is_some_and(|s| s.contains("agent")),
        "the graph has edges: {graph:?}"
    );
    let mut circles = Vec::new();
    for (from, targets) in &graph {
        for to in targets {
            if let Some(path) = path_back(&graph, from, to) {
                circles.push(path.join(" → "));
            }
        }
    }
    assert!(circles.is_empty(), "import circles: {circles:?}");
}

/// The files of one folder (`<dir>/<file>.rs`, tests left out) and the siblings each names as
/// `super::<file>`.
fn file_graph(dir: &str) -> BTreeMap<String, BTreeSet<String>> {
    let files: Vec<(String, String)> = rust_files(dir)
        .into_iter()
        .filter(|(path, _)| !path.ends_with("tests.rs"))
        .map(|(path, text)| {
            let name = path
                .trim_start_matches(&format!("{dir}/"))
                .split('/')
                .next()
                .unwrap_or_default()
                .trim_end_matches(".rs")
                .to_owned();
            (name, text)
        })
        .collect();
    let names: BTreeSet<String> = files.iter().map(|(n, _)| n.clone()).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, text) in &files {
        let entry = graph.entry(name.clone()).or_default();
        for line in code_lines(text) {
            for (i, _) in line.match_indices("super::") {
                let other: String = line[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if other != *name && names.contains(&other) {
                    entry.insert(other);
                }
            }
        }
    }
    graph
}

/// The circles of a graph, each as the path that closes it.
fn circles_of(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut circles = Vec::new();
    for (from, targets) in graph {
        for to in targets {
            if let Some(path) = path_back(graph, from, to) {
                circles.push(path.join(" → "));
            }
        }
    }
    circles
}

/// Folders whose files still import each other in a circle, and why; an entry whose circle is
/// gone must go too.
const CIRCLES_LEFT: &[(&str, &str)] = &[(
    "daemon/src/session",
    "the actor's behaviour is still spread over files that reach back into the actor",
)];

#[test]
fn no_folder_of_the_daemon_or_the_client_imports_itself_in_a_circle() {
    let mut folders = Vec::new();
    for base in ["daemon/src", "client/src"] {
        for entry in std::fs::read_dir(repo().join(base)).expect("source folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                let name = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default();
                folders.push(format!("{base}/{name}"));
            }
        }
    }
    assert!(folders.len() > 10, "the folders were found: {folders:?}");
    assert!(
        file_graph("daemon/src/agent")
            .values()
            .any(|targets| !targets.is_empty()),
        "the graphs have edges"
    );
    for dir in &folders {
        let circles = circles_of(&file_graph(dir));
        match CIRCLES_LEFT.iter().find(|(d, _)| d == dir) {
            Some((_, why)) => assert!(
                !circles.is_empty(),
                "{dir}/ has no circle any more ({why}): take it off CIRCLES_LEFT"
            ),
            None => assert!(circles.is_empty(), "import circles in {dir}/: {circles:?}"),
        }
    }
}

#[test]
fn the_clients_modules_import_each_other_without_a_circle() {
    let graph = module_graph("client/src");
    assert!(
        graph.get("repl").is_some_and(|s| s.contains("connection")),
        "the graph has edges: {graph:?}"
    );
    let circles = circles_of(&graph);
    assert!(circles.is_empty(), "import circles: {circles:?}");
}
