//! Who is at a new connection: the peer's Unix user (`SO_PEERCRED`), or, where the daemon's
//! own user runs `tether bridge --principal NAME` (an SSH forced command), the principal that
//! bridge names in the first line it sends, before any byte of its client:
//! `#tether {"principal": "bob", "role": "approver", "channel": "ssh"}`.
//!
//! Invariant: only a first line from a process of the daemon's own user names a principal.
//! The same line from another user is read and ignored (the kernel's view wins), and nothing a
//! client sends after it can change who the connection is.

use super::Peer;
use serde::Deserialize;
use std::time::Duration;
use tether_proto::{Channel, SessionRole};
use tokio::io::AsyncReadExt;
use tokio::net::UnixStream;

/// The first byte of the bridge's line; never the first byte of a JSON-RPC message or of HTTP.
const MARK: u8 = b'#';
/// What the line starts with.
const PREFIX: &str = "#tether ";
/// The longest line read.
const MAX_LINE: usize = 1024;
/// How long the rest of the line may take once its first byte came.
const LINE_PATIENCE: Duration = Duration::from_secs(5);
/// How long another user's client may take to send its first byte.
const GUEST_PATIENCE: Duration = Duration::from_secs(10);

/// What the bridge says.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Introduction {
    #[serde(default)]
    principal: Option<String>,
    #[serde(default)]
    role: Option<SessionRole>,
    #[serde(default)]
    channel: Option<Channel>,
}

/// The name of the Unix user `uid` (`uid 1234` when it has none).
pub fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| format!("uid {uid}"))
}

/// Who is at `stream`, whose peer is `uid`; `None` when the connection is to be closed (it
/// closed, or sent a broken introduction).
pub async fn read(stream: &mut UnixStream, uid: u32, owner: &str) -> Option<Peer> {
    let ours = uid == nix::unistd::getuid().as_raw();
    let base = if ours {
        Peer::owner(owner)
    } else {
        Peer {
            principal: user_name(uid),
            channel: Channel::Local,
            owner: false,
            cap: None,
        }
    };
    // Someone else's client speaks first, and soon: an idle one would hold a connection the
    // owner's clients share.
    let first = if ours {
        super::peek(stream).await?
    } else {
        match tokio::time::timeout(GUEST_PATIENCE, super::peek(stream)).await {
            Ok(first) => first?,
            Err(_) => {
                tracing::warn!(uid, "closed a connection of another user that sent nothing");
                return None;
            }
        }
    };
    if first != MARK {
        return Some(base);
    }
    let line = match tokio::time::timeout(LINE_PATIENCE, read_line(stream)).await {
        Ok(Some(line)) => line,
        _ => {
            tracing::warn!(
                uid,
                "closed a connection whose introduction line was not complete"
            );
            return None;
        }
    };
    if !ours {
        tracing::warn!(
            uid,
            principal = %base.principal,
            "ignored the introduction of a connection from another user: it is who the kernel says"
        );
        return Some(base);
    }
    let said = line
        .strip_prefix(PREFIX)
        .and_then(|json| serde_json::from_str::<Introduction>(json).ok());
    let Some(said) = said else {
        tracing::warn!("closed a connection whose introduction line could not be read");
        return None;
    };
    let mut peer = base;
    if let Some(name) = said.principal.map(|n| n.trim().to_owned())
        && !name.is_empty()
        && name != owner
    {
        peer.principal = name;
        peer.owner = false;
    }
    if let Some(channel) = said.channel {
        peer.channel = channel;
    }
    // A role this build does not know caps nothing it could check: refused, not ignored.
    if let Some(role) = &said.role
        && role.rank() == 0
    {
        tracing::warn!(
            role = role.as_str(),
            "closed a bridge connection with a role this daemon does not know"
        );
        return None;
    }
    peer.cap = said.role;
    Some(peer)
}

/// Reads one line, byte by byte so nothing after it is taken from the client's stream.
async fn read_line(stream: &mut UnixStream) -> Option<String> {
    let mut line = Vec::new();
    loop {
        let byte = stream.read_u8().await.ok()?;
        if byte == b'\n' {
            return String::from_utf8(line).ok();
        }
        if line.len() >= MAX_LINE {
            return None;
        }
        line.push(byte);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn introduce(bytes: &[u8]) -> (Option<Peer>, Vec<u8>) {
        let (mut a, mut b) = UnixStream::pair().expect("a socket pair");
        b.write_all(bytes).await.expect("written");
        drop(b);
        let uid = nix::unistd::getuid().as_raw();
        let peer = read(&mut a, uid, "alice").await;
        let mut rest = Vec::new();
        let _ = a.read_to_end(&mut rest).await;
        (peer, rest)
    }

    #[tokio::test]
    async fn a_bridge_names_its_principal_and_the_client_keeps_its_bytes() {
        let (peer, rest) = introduce(
            b"#tether {\"principal\":\"bob\",\"role\":\"approver\",\"channel\":\"ssh\"}\n{\"id\":1}\n",
        )
        .await;
        let peer = peer.expect("accepted");
        assert_eq!(peer.principal, "bob");
        assert!(!peer.owner);
        assert_eq!(peer.channel, Channel::Ssh);
        assert_eq!(peer.cap, Some(SessionRole::Approver));
        assert_eq!(rest, b"{\"id\":1}\n");
    }

    #[tokio::test]
    async fn no_line_is_the_owner_and_a_broken_line_is_closed() {
        let (peer, rest) = introduce(b"{\"id\":1}\n").await;
        assert_eq!(peer, Some(Peer::owner("alice")));
        assert_eq!(rest, b"{\"id\":1}\n");
        let (peer, _) = introduce(b"#tether {\"principal\":\"bob\",\"admin\":true}\n").await;
        assert_eq!(peer, None, "an unknown field is refused, not skipped");
        let (peer, _) = introduce(b"#tether {\"principal\":\"bob\"").await;
        assert_eq!(peer, None, "a line that never ends");
        let (peer, _) = introduce(b"#tether {\"channel\":\"ssh\"}\n").await;
        let peer = peer.expect("the owner over ssh");
        assert!(peer.owner);
        assert_eq!(peer.channel, Channel::Ssh);
    }

    #[test]
    fn a_cap_lowers_whatever_was_granted() {
        let mut bob = Peer {
            principal: "bob".into(),
            channel: Channel::Ssh,
            owner: false,
            cap: Some(SessionRole::Approver),
        };
        assert_eq!(bob.role(None), None, "nothing shared, nothing allowed");
        assert_eq!(
            bob.role(Some(SessionRole::Controller)),
            Some(SessionRole::Approver)
        );
        assert_eq!(
            bob.role(Some(SessionRole::Observer)),
            Some(SessionRole::Observer)
        );
        bob.cap = None;
        assert_eq!(
            bob.role(Some(SessionRole::Controller)),
            Some(SessionRole::Controller)
        );
        assert_eq!(Peer::owner("alice").role(None), Some(SessionRole::Owner));
    }
}
