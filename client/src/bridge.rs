//! `tether bridge`, the remote end of `--remote` and of an SSH forced command: a byte relay
//! between its stdin/stdout and the local daemon's socket, starting the daemon when none runs.
//! ssh runs it (`remote.rs` is the other end). Before any byte of its client it tells the
//! daemon who is at the other end — the `--principal` its forced command names, the most
//! `--role` allows, and that they came over ssh — in one `#tether {…}` line, which the daemon
//! takes only from its own user and only first.

use std::path::Path;
use tether_proto::{Channel, SessionRole};
use tokio::io::AsyncWriteExt;

/// The line that introduces the bridge's client, if there is anything to say.
fn introduction(
    principal: Option<&str>,
    role: Option<&SessionRole>,
    over_ssh: bool,
) -> Option<String> {
    if principal.is_none() && role.is_none() && !over_ssh {
        return None;
    }
    #[derive(serde::Serialize)]
    struct Introduction<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        principal: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        role: Option<&'a SessionRole>,
        #[serde(skip_serializing_if = "Option::is_none")]
        channel: Option<Channel>,
    }
    let said = Introduction {
        principal,
        role,
        channel: over_ssh.then_some(Channel::Ssh),
    };
    serde_json::to_string(&said)
        .ok()
        .map(|json| format!("#tether {json}\n"))
}

/// Relays stdin/stdout to the daemon's socket (started when needed) until either side closes.
pub async fn run(
    socket: &Path,
    principal: Option<String>,
    role: Option<SessionRole>,
) -> anyhow::Result<std::process::ExitCode> {
    let principal = principal
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty());
    let over_ssh = std::env::var_os("SSH_CONNECTION").is_some();
    let mut daemon = crate::connection::open_local(socket, true).await?;
    if let Some(line) = introduction(principal.as_deref(), role.as_ref(), over_ssh) {
        daemon.write_all(line.as_bytes()).await?;
    }
    let mut stdio = tokio::io::join(tokio::io::stdin(), tokio::io::stdout());
    // Either side's end ends the relay: the client went away, or the daemon closed.
    let _ = tokio::io::copy_bidirectional(&mut stdio, &mut daemon).await;
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_introduction_says_only_what_was_given() {
        assert_eq!(introduction(None, None, false), None);
        assert_eq!(
            introduction(Some("bob"), Some(&SessionRole::Approver), true).as_deref(),
            Some("#tether {\"principal\":\"bob\",\"role\":\"approver\",\"channel\":\"ssh\"}\n")
        );
        assert_eq!(
            introduction(None, None, true).as_deref(),
            Some("#tether {\"channel\":\"ssh\"}\n")
        );
    }
}
