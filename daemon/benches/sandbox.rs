//! What the Bash sandbox adds to a command's start: the median wall time of `bash -c true`
//! started directly and under the sandbox's `bwrap` command line (namespaces, read-only root,
//! masks), and of a Bash tool call of `true` with and without the sandbox (the tool's spare
//! shell absorbs most of a start). Usage: `cargo bench -p tether-daemon --bench sandbox -- [N]`
//! (default 200 runs each). Prints numbers; asserts nothing.

use serde_json::json;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tether_daemon::sandbox::{Paths, Sandbox, Settings};
use tether_daemon::tools::{ToolContext, Workspace};

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

fn time_spawns(n: usize, wrap: &[std::ffi::OsString]) -> Duration {
    let times = (0..n)
        .map(|_| {
            let mut cmd = match wrap.split_first() {
                Some((bwrap, args)) => {
                    let mut c = Command::new(bwrap);
                    c.args(args).arg("bash");
                    c
                }
                None => Command::new("bash"),
            };
            cmd.args(["-c", "true"])
                .stdin(Stdio::null())
                .stdout(Stdio::null());
            let t = Instant::now();
            let ok = cmd.status().is_ok_and(|s| s.success());
            let took = t.elapsed();
            if !ok {
                eprintln!("a run failed");
            }
            took
        })
        .collect();
    median(times)
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => return eprintln!("tempdir: {e}"),
    };
    let root = dir.path().join("project");
    let scratch = dir.path().join("data/scratch/s");
    for d in [&root, &scratch] {
        if let Err(e) = std::fs::create_dir_all(d) {
            return eprintln!("mkdir: {e}");
        }
    }
    let sandbox = Sandbox::new(
        Settings {
            enabled: true,
            auto_allow: true,
            allow_unsandboxed: true,
            ..Settings::default()
        },
        Paths {
            home: std::env::var_os("HOME").map(Into::into),
            roots: vec![root.clone()],
            scratch: scratch.clone(),
            data_dir: dir.path().join("data"),
            hidden: Vec::new(),
            proxy_socket: dir.path().join("data/proxy/s.sock"),
        },
    );
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => return eprintln!("runtime: {e}"),
    };
    if let Err(why) = rt.block_on(tether_daemon::sandbox::probe(&sandbox.bwrap)) {
        return eprintln!("no sandbox here: {why}");
    }
    let plain = time_spawns(n, &[]);
    let boxed = time_spawns(n, &sandbox.wrap(None));
    println!("start of `bash -c true`, median of {n}:");
    println!("  direct         {:>8.2} ms", plain.as_secs_f64() * 1e3);
    println!("  in the sandbox {:>8.2} ms", boxed.as_secs_f64() * 1e3);
    println!(
        "  added          {:>8.2} ms",
        (boxed.as_secs_f64() - plain.as_secs_f64()) * 1e3
    );
    // Through the Bash tool: each call's spare is started in the background after the call
    // before, so the call itself mostly pays for handing over the script.
    let tool = |sandboxed: bool| {
        let ws = Workspace::new(root.clone(), Vec::new(), scratch.clone());
        if sandboxed {
            ws.set_sandbox(Some(sandbox.clone()));
        }
        let mut ctx = ToolContext::detached(Arc::new(ws));
        ctx.progress = Arc::new(|_| {});
        let Some(bash) = tether_daemon::tools::builtin().find("Bash") else {
            eprintln!("no Bash tool");
            return Duration::ZERO;
        };
        rt.block_on(async {
            let mut times = Vec::with_capacity(n);
            for _ in 0..n {
                let t = Instant::now();
                let out = bash.run(json!({"command": "true"}), &ctx).await;
                times.push(t.elapsed());
                if out.is_error {
                    eprintln!("a call failed: {:?}", out.content);
                }
                // Give the spare time to start, as the model's think time would.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            median(times)
        })
    };
    let plain = tool(false);
    let boxed = tool(true);
    println!("Bash tool call of `true` (spare shell warm), median of {n}:");
    println!("  unsandboxed    {:>8.2} ms", plain.as_secs_f64() * 1e3);
    println!("  sandboxed      {:>8.2} ms", boxed.as_secs_f64() * 1e3);
}
