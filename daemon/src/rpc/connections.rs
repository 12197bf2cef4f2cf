//! Who is connected: one entry per open connection with who is at it (its [`Peer`], as the
//! daemon learned it when it accepted the connection) and what it said in `initialize`.
//!
//! Connection ids are allocated here for both transports, so they are unique for the daemon's
//! lifetime and a client's `connectionId` is the id other clients see in events.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use tether_proto::{
    Capabilities, Channel, ClientInfo, ClientKind, ClientRef, ConnectionId, SessionRole,
};

/// Who is at a connection, as the daemon knows them (never what the client says of itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The principal: the peer's Unix user, or the name `tether bridge --principal` gave.
    pub principal: String,
    /// How it came.
    pub channel: Channel,
    /// Whether it is the daemon's own user (the owner of every session).
    pub owner: bool,
    /// The most it may do whatever it was granted (`tether bridge --role`).
    pub cap: Option<SessionRole>,
}

impl Peer {
    /// The daemon's own user on the local socket.
    pub fn owner(name: &str) -> Self {
        Self {
            principal: name.to_owned(),
            channel: Channel::Local,
            owner: true,
            cap: None,
        }
    }

    /// Whether nothing it calls needs checking: the owner, with no cap.
    pub fn unrestricted(&self) -> bool {
        self.owner && self.cap.is_none()
    }

    /// What it may do in a session shared with it as `granted` (`None`: not shared).
    pub fn role(&self, granted: Option<SessionRole>) -> Option<SessionRole> {
        let base = if self.owner {
            SessionRole::Owner
        } else {
            granted?
        };
        Some(match &self.cap {
            Some(cap) => base.min(cap.clone()),
            None => base,
        })
    }
}

#[derive(Debug, Clone)]
struct Connection {
    info: Option<ClientInfo>,
    capabilities: Capabilities,
    peer: Peer,
}

/// The open connections.
#[derive(Default)]
pub struct Connections {
    next: AtomicU32,
    open: Mutex<HashMap<u64, Connection>>,
    subscriptions: AtomicU64,
    /// In cluster mode, this node's name: a client's id is unique on its node only.
    node: Option<String>,
    /// The daemon's own user's name.
    owner: String,
}

impl Connections {
    /// The connections of a daemon that is `node` of a cluster (`None` on one machine), run
    /// by the user `owner`.
    pub fn on_node(node: Option<String>, owner: String) -> Self {
        Self {
            node,
            owner,
            ..Self::default()
        }
    }

    /// The daemon's own user's name.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Connection>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a new connection of `peer` and returns its id (ids start at 1).
    pub fn connect(&self, peer: Peer) -> u32 {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.open().insert(
            u64::from(id),
            Connection {
                info: None,
                capabilities: Capabilities::default(),
                peer,
            },
        );
        id
    }

    /// Who is at a connection; for an id that is not open, no one: a principal that may call
    /// only what anyone may.
    pub fn peer(&self, id: ConnectionId) -> Peer {
        self.open()
            .get(&id.0)
            .map(|c| c.peer.clone())
            .unwrap_or_else(|| Peer {
                principal: format!("connection {id}"),
                channel: Channel::Local,
                owner: false,
                cap: None,
            })
    }

    /// Forgets a closed connection.
    pub fn disconnect(&self, id: u32) {
        self.open().remove(&u64::from(id));
    }

    /// Records what a connection said in `initialize`.
    pub fn initialize(
        &self,
        id: ConnectionId,
        info: Option<ClientInfo>,
        capabilities: Capabilities,
    ) {
        if let Some(c) = self.open().get_mut(&id.0) {
            c.info = info.map(|mut i| {
                i.name = printable(&i.name);
                i
            });
            c.capabilities = capabilities;
        }
    }

    /// How a connection appears in events.
    pub fn client_ref(&self, id: ConnectionId) -> ClientRef {
        let open = self.open();
        let conn = open.get(&id.0);
        let info = conn.and_then(|c| c.info.clone());
        let peer = conn
            .map(|c| c.peer.clone())
            .unwrap_or_else(|| Peer::owner(&self.owner));
        ClientRef {
            client_id: id,
            kind: info.as_ref().map(|i| i.kind).unwrap_or(ClientKind::Script),
            name: info.map(|i| i.name).filter(|n| !n.is_empty()),
            node: self.node.clone(),
            principal: Some(peer.principal),
            channel: Some(peer.channel),
        }
    }

    /// Open connections of `principal` when it is not the owner.
    pub fn guest_count(&self, principal: &str) -> usize {
        self.open()
            .values()
            .filter(|c| !c.peer.owner && c.peer.principal == principal)
            .count()
    }

    /// Open connections.
    pub fn count(&self) -> u64 {
        self.open().len() as u64
    }

    /// Counts a subscription in (`+1`) or out (`-1`).
    pub fn count_subscription(&self, delta: i64) {
        if delta >= 0 {
            self.subscriptions
                .fetch_add(delta as u64, Ordering::Relaxed);
        } else {
            self.subscriptions
                .fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
        }
    }

    /// Active subscriptions.
    pub fn subscription_count(&self) -> u64 {
        self.subscriptions.load(Ordering::Relaxed)
    }
}

/// A client's self-declared name as other people's terminals may show it: no control
/// characters (no escape sequence, no line of its own), at most 64 characters.
fn printable(name: &str) -> String {
    name.chars()
        .filter(|c| !c.is_control())
        .take(64)
        .collect::<String>()
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_cannot_draw_on_someone_elses_terminal() {
        assert_eq!(
            printable("zed\r\n\u{1b}[2Jallowed once by alice"),
            "zed[2Jallowed once by alice"
        );
        assert_eq!(printable(&"x".repeat(100)).len(), 64);
    }
}
