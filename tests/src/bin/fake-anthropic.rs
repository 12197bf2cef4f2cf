//! `fake-anthropic --script FILE [--port N]`: the scripted fake Anthropic API as a standalone
//! server, for demos and benchmarks. Prints its port on stdout, then serves until killed.

use clap::Parser;
use std::io::Write;
use std::path::PathBuf;
use tether_tests::fake_anthropic::{FakeAnthropic, Script};

/// A scripted fake of the Anthropic Messages API.
#[derive(Debug, Parser)]
#[command(name = "fake-anthropic")]
struct Args {
    /// Script file (JSON): {"responses": [...], "rules": [...]}.
    #[arg(long)]
    script: PathBuf,
    /// Port on 127.0.0.1 (default: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let text = std::fs::read_to_string(&args.script)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.script.display()))?;
    let script: Script = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{} is not a valid script: {e}", args.script.display()))?;
    let server = FakeAnthropic::start_on(script, args.port).await?;
    println!("{}", server.port());
    std::io::stdout().flush()?;
    tokio::signal::ctrl_c().await?;
    for r in server.requests() {
        if let Some(why) = r.rejected {
            eprintln!("rejected request to {}: {why}", r.path);
        }
    }
    Ok(())
}
