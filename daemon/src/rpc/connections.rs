//! Who is connected: one entry per open connection with what it said in `initialize`.
//!
//! Connection ids are allocated here for both transports, so they are unique for the daemon's
//! lifetime and a client's `connectionId` is the id other clients see in events.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use tether_proto::{Capabilities, ClientInfo, ClientKind, ClientRef, ConnectionId};

#[derive(Debug, Clone, Default)]
struct Connection {
    info: Option<ClientInfo>,
    capabilities: Capabilities,
}

/// The open connections.
#[derive(Default)]
pub struct Connections {
    next: AtomicU32,
    open: Mutex<HashMap<u64, Connection>>,
    subscriptions: AtomicU64,
    /// In cluster mode, this node's name: a client's id is unique on its node only.
    node: Option<String>,
}

impl Connections {
    /// The connections of a daemon that is `node` of a cluster (`None` on one machine).
    pub fn on_node(node: Option<String>) -> Self {
        Self {
            node,
            ..Self::default()
        }
    }

    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Connection>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a new connection and returns its id (ids start at 1).
    pub fn connect(&self) -> u32 {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.open().insert(u64::from(id), Connection::default());
        id
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
            c.info = info;
            c.capabilities = capabilities;
        }
    }

    /// How a connection appears in events.
    pub fn client_ref(&self, id: ConnectionId) -> ClientRef {
        let open = self.open();
        let info = open.get(&id.0).and_then(|c| c.info.clone());
        ClientRef {
            client_id: id,
            kind: info.as_ref().map(|i| i.kind).unwrap_or(ClientKind::Script),
            name: info.map(|i| i.name).filter(|n| !n.is_empty()),
            node: self.node.clone(),
        }
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
