//! `tether bridge`, the remote end of `--remote`: a byte relay between its stdin/stdout and the
//! local daemon's socket, starting the daemon when none runs. ssh runs it (`remote.rs` is the
//! other end).

use std::path::Path;

/// Relays stdin/stdout to the daemon's socket (started when needed) until either side closes.
pub async fn run(socket: &Path) -> anyhow::Result<std::process::ExitCode> {
    let mut daemon = crate::connection::open_local(socket, true).await?;
    let mut stdio = tokio::io::join(tokio::io::stdin(), tokio::io::stdout());
    // Either side's end ends the relay: the client went away, or the daemon closed.
    let _ = tokio::io::copy_bidirectional(&mut stdio, &mut daemon).await;
    Ok(std::process::ExitCode::SUCCESS)
}
