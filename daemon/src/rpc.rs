//! The daemon's JSON-RPC front: the socket, the accept loop, and one `RpcModule` served two ways
//! on it — WebSocket for jsonrpsee clients, newline-delimited JSON for everything else.
//!
//! Invariant: the only module that knows JSON-RPC. A connection whose first byte is an ASCII
//! letter is HTTP (the WebSocket upgrade); anything else (`{`, `[`, whitespace) is NDJSON.

mod access;
mod attach;
mod connections;
mod forward;
mod gate;
mod identity;
mod listener;
mod methods;
mod ndjson;
mod shared;

pub use connections::{Connections, Peer};
pub use identity::user_name;
pub use listener::{BindError, Listener};
pub use methods::RpcApi;
pub use shared::{SharedSocket, is_local_user};

use jsonrpsee::RpcModule;
use jsonrpsee::core::server::Methods;
use jsonrpsee::server::middleware::rpc::RpcServiceBuilder;
use jsonrpsee::server::{Server, ServerConfig, serve_with_graceful_shutdown, stop_channel};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;
use tether_proto::{MAX_MESSAGE_BYTES, TetherRpcServer};
use tokio::io::Interest;
use tokio::net::UnixStream;
use tokio::task::JoinSet;

/// How often, at most, the heap is trimmed after connections closed.
const TRIM_EVERY: Duration = Duration::from_secs(2);
/// Connections one person other than the owner may hold open.
const MAX_GUEST_CONNECTIONS: usize = 32;
/// How long connections get to finish after shutdown begins.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(3);

/// Serves `api` on `listener` until `api.shutdown` is cancelled; then stops accepting, runs
/// `before_drain` (which ends subscriptions), and waits for connections to close.
pub async fn serve<F>(listener: &Listener, api: RpcApi, before_drain: F)
where
    F: std::future::Future<Output = ()>,
{
    let shutdown = api.shutdown.clone();
    let connections: Arc<Connections> = api.connections.clone();
    let limit = api
        .config
        .number("max_connections")
        .map(|n| n as usize)
        .unwrap_or(1024)
        .max(1);
    let store = api.sessions.store().clone();
    // Connections of other local users, once a session is shared with one.
    let mut from_others = api.shared.take_incoming();
    let module: RpcModule<RpcApi> = api.into_rpc();
    let methods: Methods = module.into();
    forward::serve(
        &store,
        methods.clone(),
        connections.clone(),
        shutdown.clone(),
    );
    let config = ServerConfig::builder()
        .max_request_body_size(MAX_MESSAGE_BYTES)
        .max_response_body_size(MAX_MESSAGE_BYTES)
        .set_message_buffer_capacity(4096)
        // A quiet attached client is never dropped for idleness.
        .set_first_request_timeout(None)
        // The limit is ours (below), the same for both transports, and it says why.
        .max_connections(u32::MAX)
        .build();
    let services = Server::builder()
        .set_config(config)
        .to_service_builder()
        .max_connections(u32::MAX);
    let (stop_handle, server_handle) = stop_channel();
    let mut tasks = JoinSet::new();
    // Memory a closed connection freed goes back to the system a little later, once per burst.
    let mut trim = tokio::time::interval(TRIM_EVERY);
    trim.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut closed_since_trim = false;

    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(_) = tasks.join_next() => {
                closed_since_trim = true;
                continue;
            }
            _ = trim.tick(), if closed_since_trim => {
                closed_since_trim = false;
                tokio::task::spawn_blocking(crate::heap::trim);
                continue;
            }
            accepted = listener.accept() => accepted,
            Some(other) = async {
                match from_others.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => Ok(other),
        };
        match accepted {
            Ok((stream, _)) if tasks.len() >= limit => {
                tracing::warn!(
                    open = tasks.len(),
                    "refused a connection: the daemon serves {limit} connections, its limit (max_connections)"
                );
                tokio::spawn(refuse_over_limit(stream, limit));
            }
            Ok((stream, uid)) => {
                let methods = methods.clone();
                let store = store.clone();
                let passing = connections.clone();
                let checking = connections.clone();
                let checking_store = store.clone();
                let services = services.clone();
                let stop = stop_handle.clone();
                let shutdown = shutdown.clone();
                let connections = connections.clone();
                tasks.spawn(async move {
                    let mut stream = stream;
                    let Some(peer) = identity::read(&mut stream, uid, connections.owner()).await
                    else {
                        return;
                    };
                    // One person's connections cannot crowd out the owner's.
                    if !peer.owner
                        && connections.guest_count(&peer.principal) >= MAX_GUEST_CONNECTIONS
                    {
                        tracing::warn!(principal = %peer.principal, "refused a connection: {MAX_GUEST_CONNECTIONS} open already");
                        let why = format!(
                            "{} has {MAX_GUEST_CONNECTIONS} connections to this daemon open already, the most one person may",
                            peer.principal
                        );
                        refuse(stream, why).await;
                        return;
                    }
                    let id = connections.connect(peer.clone());
                    match sniff(&stream).await {
                        Some(Transport::Http) => {
                            let checked_peer = peer;
                            let gate = Arc::new(gate::Gate::default());
                            let counted = gate.clone();
                            let mut svc = services
                                .set_rpc_middleware(
                                    RpcServiceBuilder::new()
                                        .layer_fn(move |s| gate::InFlight::new(s, counted.clone()))
                                        .layer_fn(move |s| {
                                            access::Checked::new(
                                                s,
                                                checking_store.clone(),
                                                checking.clone(),
                                                checked_peer.clone(),
                                            )
                                        })
                                        .layer_fn(move |s| {
                                            forward::PassOn::new(s, store.clone(), passing.clone())
                                        }),
                                )
                                .connection_id(id)
                                .build(methods, stop.clone());
                            // The WebSocket session outlives the HTTP exchange that upgraded it.
                            let closed = svc.on_session_closed();
                            let stream = gate::Throttled::new(stream, gate);
                            if let Err(e) =
                                serve_with_graceful_shutdown(stream, svc, stop.shutdown()).await
                            {
                                tracing::debug!(conn_id = id, "connection ended: {e}");
                            }
                            closed.await;
                        }
                        Some(Transport::Ndjson) => {
                            ndjson::serve(stream, methods, store, passing, id, peer, shutdown).await
                        }
                        None => {}
                    }
                    connections.disconnect(id);
                });
            }
            Err(e) => {
                // Out of descriptors or similar: say so, and give the system a moment.
                tracing::error!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    before_drain.await;
    let _ = server_handle.stop();
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("{} connections did not close in time", tasks.len());
        tasks.abort_all();
    }
}

/// Tells a client over the connection limit why it is turned away, in its own framing, and
/// closes: an HTTP 503 for a WebSocket upgrade, a JSON-RPC error line for NDJSON.
async fn refuse_over_limit(stream: UnixStream, limit: usize) {
    let why =
        format!("the daemon has {limit} connections, its limit (max_connections in config.toml)");
    refuse_with(
        stream,
        "503 Service Unavailable",
        tether_proto::ErrorCode::TooManyConnections,
        why,
    )
    .await;
}

/// Tells a local user with no session shared with them why they are turned away (HTTP 403 for
/// a WebSocket upgrade, a `-32011` line for NDJSON), and closes.
async fn refuse(stream: UnixStream, why: String) {
    refuse_with(
        stream,
        "403 Forbidden",
        tether_proto::ErrorCode::NotPermitted,
        why,
    )
    .await;
}

async fn refuse_with(
    mut stream: UnixStream,
    status: &str,
    code: tether_proto::ErrorCode,
    why: String,
) {
    use tokio::io::AsyncWriteExt;
    let reply = match tokio::time::timeout(Duration::from_secs(2), sniff(&stream)).await {
        Ok(Some(Transport::Http)) => format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{why}",
            why.len()
        ),
        Ok(Some(Transport::Ndjson)) => format!(
            "{}\n",
            serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {
                "code": code.code(), "message": why}})
        ),
        _ => return,
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        use tokio::io::AsyncReadExt;
        let _ = stream.write_all(reply.as_bytes()).await;
        let _ = stream.shutdown().await;
        // Read what the client sent, so closing does not reset the connection before it
        // has read the reason.
        let mut sink = [0u8; 4096];
        let mut left: usize = 64 * 1024;
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

enum Transport {
    Http,
    Ndjson,
}

/// Looks at the first byte without consuming it; `None` when the peer closed without a byte.
async fn sniff(stream: &UnixStream) -> Option<Transport> {
    match peek(stream).await? {
        b if b.is_ascii_alphabetic() => Some(Transport::Http),
        _ => Some(Transport::Ndjson),
    }
}

/// The next byte the peer sent, left unread; `None` when it closed without one.
async fn peek(stream: &UnixStream) -> Option<u8> {
    let fd = stream.as_raw_fd();
    let mut byte = [0u8; 1];
    let peeked = stream
        .async_io(Interest::READABLE, || {
            nix::sys::socket::recv(fd, &mut byte, nix::sys::socket::MsgFlags::MSG_PEEK)
                .map_err(std::io::Error::from)
        })
        .await;
    match peeked {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(byte[0]),
    }
}
