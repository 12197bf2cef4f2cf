//! The shared socket: how other local users reach the daemon once a session is shared with one
//! of them. It is bound on the first such share (or at start, when a session already is), never
//! before, at `share.socket` (default `/tmp/tether-shared-$UID/tetherd.sock`, a 0711 directory
//! of the daemon's user). A connection from a user with no session shared with them is told so
//! and closed; the others join the accept loop, where they are who the kernel says they are.
//!
//! Invariant: the private socket stays as it is (0600 in a 0700 directory); only users the
//! owner named in a share get past this socket's accept.

use super::Listener;
use crate::store::Store;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A connection accepted on the shared socket, with its peer's uid.
pub type Accepted = (UnixStream, u32);

/// The shared socket, bound or not yet.
pub struct SharedSocket {
    path: PathBuf,
    store: Store,
    shutdown: CancellationToken,
    bound: Mutex<bool>,
    to_serve: mpsc::Sender<Accepted>,
    incoming: Mutex<Option<mpsc::Receiver<Accepted>>>,
}

/// Whether `principal` is a local Unix user other than the daemon's own.
pub fn is_local_user(principal: &str) -> bool {
    matches!(
        nix::unistd::User::from_name(principal),
        Ok(Some(u)) if u.uid != nix::unistd::getuid()
    )
}

impl SharedSocket {
    /// The socket at `path` (not bound yet), for the daemon whose store is `store`.
    pub fn new(path: PathBuf, store: Store, shutdown: CancellationToken) -> Arc<Self> {
        let (to_serve, incoming) = mpsc::channel(64);
        Arc::new(Self {
            path,
            store,
            shutdown,
            bound: Mutex::new(false),
            to_serve,
            incoming: Mutex::new(Some(incoming)),
        })
    }

    /// The connections it accepts, for the accept loop (once).
    pub fn take_incoming(&self) -> Option<mpsc::Receiver<Accepted>> {
        self.incoming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// Binds it at start when a session is shared with a local user already.
    pub fn open_if_shared(self: &Arc<Self>) {
        let shared = self.store.sessions().is_ok_and(|records| {
            records
                .iter()
                .flat_map(|r| &r.shares)
                .any(|s| is_local_user(&s.principal))
        });
        if shared {
            let _ = self.open();
        }
    }

    /// Binds it unless it is bound, and accepts on it until the daemon stops. A failure says
    /// why (the daemon goes on without it) and is tried again at the next share.
    pub fn open(self: &Arc<Self>) -> Result<(), String> {
        let mut bound = self.bound.lock().unwrap_or_else(|p| p.into_inner());
        if *bound {
            return Ok(());
        }
        let listener = match Listener::bind_shared(&self.path) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(
                    socket = %self.path.display(),
                    "other local users cannot reach this daemon: {e}"
                );
                return Err(format!(
                    "other local users cannot reach this daemon: {e} (share.socket chooses another place)"
                ));
            }
        };
        *bound = true;
        tracing::info!(socket = %self.path.display(), "listening for the local users sessions are shared with");
        let this = self.clone();
        tokio::spawn(async move { this.accept(listener).await });
        Ok(())
    }

    async fn accept(&self, listener: Listener) {
        let own = nix::unistd::getuid().as_raw();
        loop {
            let (stream, uid) = tokio::select! {
                _ = self.shutdown.cancelled() => return,
                accepted = listener.accept_any() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::error!("accept on the shared socket failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let name = super::identity::user_name(uid);
            if uid != own && !self.shared_with(&name) {
                tracing::warn!(
                    uid,
                    "refused a connection of {name}: no session is shared with them"
                );
                let why = format!(
                    "no session of {} is shared with {name}; its owner can share one (tether share ID --with {name} --role ROLE)",
                    super::identity::user_name(own)
                );
                tokio::spawn(super::refuse(stream, why));
                continue;
            }
            if self.to_serve.send((stream, uid)).await.is_err() {
                return;
            }
        }
    }

    fn shared_with(&self, name: &str) -> bool {
        self.store.sessions().is_ok_and(|records| {
            records
                .iter()
                .any(|r| r.shares.iter().any(|s| s.principal == name))
        })
    }
}
