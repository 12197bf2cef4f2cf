//! Workspace trust as the user meets it: `tether trust [DIR]`, the question the interactive
//! client asks before a new session's first prompt in a directory whose own files would act,
//! and what a headless run says it left out. The daemon keeps the answer (`workspace/trust`).

use crate::commands::{Output, print_json};
use crate::connection::{self, Connection};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use tether_proto::{ClientKind, TetherRpcClient, WorkspaceTrust};

/// `tether trust [DIR] [--revoke]`: records the answer and says what it lets act.
pub async fn command(
    socket: &Path,
    out: Output,
    dir: Option<String>,
    revoke: bool,
) -> anyhow::Result<ExitCode> {
    let dir = match dir {
        Some(d) => std::path::absolute(&d)?.display().to_string(),
        None => crate::remote::work_dir()?,
    };
    let conn = connection::connect(socket, true, ClientKind::Script).await?;
    let t = conn.client.workspace_trust(dir, Some(!revoke)).await?;
    if out.json {
        print_json(&t)?;
        return Ok(ExitCode::SUCCESS);
    }
    let file = t.file.as_deref().unwrap_or("~/.claude.json");
    if revoke {
        println!("{} is no longer trusted (recorded in {file})", t.dir);
        if t.trusted {
            println!("  a directory above it is still trusted, so it is too");
        }
    } else {
        println!("{} is trusted (recorded in {file})", t.dir);
        for what in &t.acts {
            println!("  now acts: {what}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What a trusted `t` would let act, one line each.
fn listing(t: &WorkspaceTrust) -> String {
    t.acts.iter().map(|a| format!("  {a}\n")).collect()
}

/// Before a new interactive session's first prompt: when `cwd` is not trusted and its own
/// files would act, says what they would do and asks once. A yes is recorded; a no (or no
/// answer) leaves them out for this session and asks again next time.
pub async fn ask(conn: &Connection, cwd: &str) -> anyhow::Result<()> {
    let t = conn.client.workspace_trust(cwd.to_owned(), None).await?;
    if t.trusted || t.acts.is_empty() {
        return Ok(());
    }
    eprint!(
        "{} is not trusted yet. Its own files would:\n{}\
         Only trust a folder whose files you or your team wrote. Until then its deny and ask \
         rules apply and nothing of it that widens what runs does.\n\
         Trust this folder? [y/N] ",
        t.dir,
        listing(&t)
    );
    std::io::stderr().flush()?;
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await??;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        let t = conn
            .client
            .workspace_trust(cwd.to_owned(), Some(true))
            .await?;
        eprintln!(
            "Trusted {} (recorded in {}).",
            t.dir,
            t.file.as_deref().unwrap_or("~/.claude.json")
        );
    } else {
        eprintln!(
            "Not trusted: its settings only narrow what runs. `tether trust` trusts it later."
        );
    }
    Ok(())
}

/// For a headless run: when `cwd` is not trusted and its own files would act, says on stderr
/// what the run leaves out (it goes on without them) and how to trust the folder.
pub async fn report_untrusted(conn: &Connection, cwd: &str) -> anyhow::Result<()> {
    let t = conn.client.workspace_trust(cwd.to_owned(), None).await?;
    if !t.trusted && !t.acts.is_empty() {
        eprintln!(
            "tether: {} is not trusted, so its own files do not act in this run (its deny and ask \
             rules still apply). Left out:\n{}Run `tether trust {}` to trust it.",
            t.dir,
            listing(&t),
            t.dir
        );
    }
    Ok(())
}

/// Whether `cwd`'s own files may act (for the statusLine command).
pub async fn is_trusted(conn: &Connection, cwd: &str) -> bool {
    conn.client
        .workspace_trust(cwd.to_owned(), None)
        .await
        .is_ok_and(|t| t.trusted)
}
