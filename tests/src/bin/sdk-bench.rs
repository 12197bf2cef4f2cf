//! `sdk-bench [--runs N] [--claude PATH]`: times an Agent SDK program (the Python SDK's
//! `query()`, `tests/sdk/first_event.py`) from its call to the reply's first streamed event and
//! to its result, with tether as the SDK's CLI (a daemon on the fake API), and with `--claude`
//! also another CLI (Claude Code) on the same fake API. Prints median and p90 per CLI. Needs the
//! SDK `tests/run` installs.

use clap::Parser;
use std::path::{Path, PathBuf};
use std::process::Command;
use tether_tests::fake_anthropic::{Rule, Script, Step};
use tether_tests::{Daemon, Fake, bin, sdk_python};

/// Times the Agent SDK through tether (and another CLI).
#[derive(Debug, Parser)]
struct Args {
    /// Runs per CLI (after one warm-up).
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Another CLI to time on the same fake API (e.g. the SDK's bundled Claude Code).
    #[arg(long)]
    claude: Option<PathBuf>,
}

fn time(cli: &Path, env: &[(String, String)], cwd: &Path, runs: usize) -> anyhow::Result<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("sdk/first_event.py");
    let (mut first, mut total) = (Vec::new(), Vec::new());
    for i in 0..=runs {
        let out = Command::new(sdk_python())
            .arg(&script)
            .arg(cli)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(cwd)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "{} failed: {}",
            cli.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        if i > 0 {
            first.push(v["first"].as_f64().unwrap_or(f64::NAN) * 1000.0);
            total.push(v["total"].as_f64().unwrap_or(f64::NAN) * 1000.0);
        }
    }
    let pct = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() as f64 - 1.0) * p).round() as usize]
    };
    println!(
        "{}: first event median {:.0} ms (p90 {:.0}), result median {:.0} ms (p90 {:.0}), n={runs}",
        cli.display(),
        pct(&mut first, 0.5),
        pct(&mut first, 0.9),
        pct(&mut total, 0.5),
        pct(&mut total, 0.9),
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut script = Script::of(Vec::<Step>::new());
    script.rules.push(Rule {
        last_user_matches: None,
        has_tool_result: None,
        times: None,
        step: Step::text("Hi! How can I help?"),
    });
    let fake = Fake::start(script)?;
    let daemon = Daemon::start_with(fake.env())?;
    let probe = daemon.tether();
    let tether_env: Vec<(String, String)> = probe
        .get_envs()
        .filter_map(|(k, v)| {
            Some((
                k.to_string_lossy().into_owned(),
                v?.to_string_lossy().into_owned(),
            ))
        })
        .collect();
    time(&bin("tether"), &tether_env, &daemon.workdir(), args.runs)?;
    if let Some(claude) = &args.claude {
        let home = tempfile::tempdir()?;
        let mut env = fake.env();
        env.push(("HOME".into(), home.path().display().to_string()));
        env.push((
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
            "1".into(),
        ));
        time(claude, &env, &daemon.workdir(), args.runs)?;
    }
    Ok(())
}
