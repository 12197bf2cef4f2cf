//! Grep and Glob tool timings next to ripgrep on the same tree. Usage:
//! `cargo bench -p tether-daemon --bench search -- [DIR] [PATTERN]` (default: the cargo registry
//! sources, `fn \w+_new`). Prints best-of-5 times and the ratio; asserts nothing.

use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tether_daemon::tools::{ToolContext, Workspace};

fn best_of(n: usize, mut f: impl FnMut()) -> Duration {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let default_dir = std::env::var("HOME")
        .map(|h| format!("{h}/.cargo/registry/src"))
        .unwrap_or_default();
    let dir = args.next().unwrap_or(default_dir);
    let pattern = args.next().unwrap_or_else(|| r"fn \w+_new".into());
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => return eprintln!("runtime: {e}"),
    };
    let ctx = ToolContext::detached(Arc::new(Workspace::new(
        dir.clone().into(),
        Vec::new(),
        std::env::temp_dir(),
    )));
    let tools = tether_daemon::tools::builtin();
    let (Some(grep), Some(glob)) = (tools.find("Grep"), tools.find("Glob")) else {
        return eprintln!("tools missing");
    };
    let run = |tool: &Arc<dyn tether_daemon::tools::Tool>, input: serde_json::Value| {
        rt.block_on(tool.run(input.clone(), &ctx));
    };
    let cases = [
        (
            "grep files",
            json!({"pattern": pattern, "path": dir}),
            vec!["-l", &pattern],
        ),
        (
            "grep count",
            json!({"pattern": pattern, "path": dir, "output_mode": "count"}),
            vec!["-c", &pattern],
        ),
        (
            "grep content",
            json!({"pattern": pattern, "path": dir, "output_mode": "content"}),
            vec!["-n", "--no-heading", &pattern],
        ),
    ];
    for (name, input, rg_args) in cases {
        let ours = best_of(5, || run(&grep, input.clone()));
        let theirs = best_of(5, || {
            let _ = std::process::Command::new("rg")
                .args(&rg_args)
                .arg(&dir)
                .output();
        });
        println!(
            "search/{name}: tether {:.1} ms, rg {:.1} ms, ratio {:.2}",
            ours.as_secs_f64() * 1e3,
            theirs.as_secs_f64() * 1e3,
            ours.as_secs_f64() / theirs.as_secs_f64()
        );
    }
    let ours = best_of(5, || run(&glob, json!({"pattern": "**/*.rs", "path": dir})));
    let theirs = best_of(5, || {
        let _ = std::process::Command::new("rg")
            .args(["--files", "-g", "*.rs"])
            .arg(&dir)
            .output();
    });
    println!(
        "search/glob **/*.rs: tether {:.1} ms, rg --files {:.1} ms, ratio {:.2}",
        ours.as_secs_f64() * 1e3,
        theirs.as_secs_f64() * 1e3,
        ours.as_secs_f64() / theirs.as_secs_f64()
    );
}
