//! Cluster mode: a call about a session another node runs is answered by that node. A method
//! that finds the session elsewhere answers `-32009` naming the node; this passes the call on
//! to it (NATS request-reply, through the store) and answers with its reply, so a client never
//! needs to know which node runs a session. The other half serves the calls other nodes pass
//! on, through this daemon's own methods.
//!
//! Invariant: a call is passed on once; the node that runs the session answers it with its
//! methods directly (no middleware, so never passed on again). A subscription is never passed
//! on (a node follows a session it does not run itself).

use super::{Connections, Peer};
use crate::store::Store;
use jsonrpsee::Extensions;
use jsonrpsee::core::server::{MethodCallback, MethodResponse};
use jsonrpsee::server::middleware::rpc::{Batch, Notification, RpcServiceT};
use jsonrpsee::types::{ErrorObject, Id, Params, Request};
use jsonrpsee::{Methods, ResponsePayload};
use serde_json::Value;
use serde_json::value::RawValue;
use std::future::Future;
use std::sync::Arc;
use tether_proto::{ClientRef, ErrorCode, SessionRole};
use tokio_util::sync::CancellationToken;

/// The methods a node passes on: those about one session that answer `-32009` when another
/// node runs it. Nothing else is run for another node (not the daemon's, MCP's or trust's
/// methods, nor subscriptions).
const PASSED_ON: &[&str] = &[
    "session/get",
    "session/configure",
    "session/delete",
    "session/fork",
    "session/compact",
    "session/export",
    "session/commands",
    "session/checkpoints",
    "session/rewind",
    "turn/start",
    "turn/cancel",
    "permission/respond",
    "permission/list",
    "hook/respond",
    "mcp/respond",
    "permission/rules",
];
/// The largest reply passed back between nodes (a NATS message holds 1 MiB by default).
const MAX_PASSED_REPLY: usize = 900 * 1024;

fn error_reply(code: i32, message: String) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": 1, "error": {"code": code, "message": message}})
        .to_string()
}

/// Serves the calls other nodes pass on to this one with `methods`, until `shutdown`. Each is
/// checked again here against the session's grants as this node holds them (who made it, and
/// their cap, come with the call).
pub fn serve(
    store: &Store,
    methods: Methods,
    connections: Arc<Connections>,
    shutdown: CancellationToken,
) {
    let checking = store.clone();
    let handler = Arc::new(move |request: String| {
        let methods = methods.clone();
        let shutdown = shutdown.clone();
        let connections = connections.clone();
        let store = checking.clone();
        let reply: std::pin::Pin<Box<dyn Future<Output = String> + Send>> = Box::pin(async move {
            let passed: Value = serde_json::from_str(&request).unwrap_or_default();
            let call = &passed["call"];
            let method = call["method"].as_str().unwrap_or_default();
            if !PASSED_ON.contains(&method) {
                return error_reply(-32601, format!("{method:?} is not passed between nodes"));
            }
            if shutdown.is_cancelled() {
                return error_reply(
                    ErrorCode::DaemonShuttingDown.code(),
                    "the node that runs the session is shutting down; try again".into(),
                );
            }
            let by = serde_json::from_value::<ClientRef>(passed["by"].clone()).ok();
            let cap = serde_json::from_value::<Option<SessionRole>>(passed["cap"].clone())
                .ok()
                .flatten();
            let owner = connections.owner();
            let peer = match by.as_ref().and_then(|b| b.principal.as_deref()) {
                Some(principal) if principal != owner => Peer {
                    principal: principal.to_owned(),
                    channel: by
                        .as_ref()
                        .and_then(|b| b.channel.clone())
                        .unwrap_or(tether_proto::Channel::Local),
                    owner: false,
                    cap,
                },
                _ => Peer {
                    cap,
                    ..Peer::owner(owner)
                },
            };
            let params = call.get("params").map(|p| p.to_string());
            if let Err(e) = super::access::check(&store, owner, &peer, method, params.as_deref()) {
                return error_reply(e.code(), e.message().to_owned());
            }
            let reply = run(&methods, method, call.get("params"), by, peer).await;
            if reply.len() > MAX_PASSED_REPLY {
                return error_reply(
                    -32603,
                    format!(
                        "the reply ({} bytes) is too big to pass between nodes; ask the node that runs the session",
                        reply.len()
                    ),
                );
            }
            reply
        });
        reply
    });
    store.serve_passed_on(handler);
}

/// Who made a call another node passed on: the methods attribute it to them.
#[derive(Debug, Clone)]
pub struct PassedOnBy(pub ClientRef);

/// Runs a passed-on call through `methods` (never a subscription), as `by`, who is `peer`.
async fn run(
    methods: &Methods,
    method: &str,
    params: Option<&Value>,
    by: Option<ClientRef>,
    peer: Peer,
) -> String {
    let params = params.map(|p| p.to_string());
    let params = Params::new(params.as_deref());
    let mut extensions = Extensions::new();
    if let Some(by) = by {
        extensions.insert(PassedOnBy(by));
    }
    extensions.insert(peer);
    let id = Id::Number(1);
    let max = tether_proto::MAX_MESSAGE_BYTES as usize;
    let response = match methods.method_with_name(method) {
        Some((_, MethodCallback::Async(cb))) => {
            cb(
                id,
                params.into_owned(),
                jsonrpsee::ConnectionId(0),
                max,
                extensions,
            )
            .await
        }
        Some((_, MethodCallback::Sync(cb))) => cb(id, params, max, extensions),
        _ => return error_reply(-32601, format!("{method:?} is not passed between nodes")),
    };
    response.to_json().get().to_owned()
}

/// `response` as it is, or, when it says another node runs the session, that node's answer
/// to the same call.
pub async fn elsewhere(
    store: &Store,
    by: ClientRef,
    cap: Option<SessionRole>,
    method: &str,
    params: Option<&RawValue>,
    id: Id<'static>,
    response: MethodResponse,
) -> MethodResponse {
    if response.as_error_code() != Some(ErrorCode::SessionElsewhere.code())
        || !PASSED_ON.contains(&method)
    {
        return response;
    }
    let reply: Value = serde_json::from_str(response.to_json().get()).unwrap_or_default();
    let Some(node) = reply["error"]["data"]["node"].as_str() else {
        return response;
    };
    let call = serde_json::json!({
        "call": {"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        "by": by,
        "cap": cap,
    });
    let answer = match store.pass_on(node, call.to_string()).await {
        Ok(answer) => answer,
        // It may have run there: saying "elsewhere" would invite running it twice.
        Err(e @ crate::store::StoreError::NoAnswer { .. }) => {
            return MethodResponse::error(
                id,
                ErrorObject::owned::<()>(-32603, e.to_string(), None),
            );
        }
        Err(e) => {
            let message = reply["error"]["message"].as_str().unwrap_or_default();
            return MethodResponse::error(
                id,
                ErrorObject::owned(
                    ErrorCode::SessionElsewhere.code(),
                    format!("{message}; node {node} did not answer: {e}"),
                    Some(serde_json::json!({"node": node})),
                ),
            );
        }
    };
    let answer: Value = serde_json::from_str(&answer).unwrap_or_default();
    match (answer.get("result"), answer.get("error")) {
        (Some(result), _) => MethodResponse::response(
            id,
            ResponsePayload::success(result.clone()),
            tether_proto::MAX_MESSAGE_BYTES as usize,
        ),
        (None, Some(error)) => MethodResponse::error(
            id,
            ErrorObject::owned(
                error["code"].as_i64().unwrap_or(-32603) as i32,
                error["message"].as_str().unwrap_or("error").to_owned(),
                error.get("data").cloned(),
            ),
        ),
        (None, None) => response,
    }
}

/// The WebSocket transport's middleware: [`elsewhere`] for every method call.
#[derive(Clone)]
pub struct PassOn<S> {
    inner: S,
    store: Store,
    connections: Arc<Connections>,
}

impl<S> PassOn<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, store: Store, connections: Arc<Connections>) -> Self {
        Self {
            inner,
            store,
            connections,
        }
    }
}

impl<S> RpcServiceT for PassOn<S>
where
    S: RpcServiceT<
            MethodResponse = MethodResponse,
            BatchResponse = MethodResponse,
            NotificationResponse = MethodResponse,
        > + Send
        + Sync,
{
    type MethodResponse = MethodResponse;
    type NotificationResponse = MethodResponse;
    type BatchResponse = MethodResponse;

    fn call<'a>(&self, request: Request<'a>) -> impl Future<Output = MethodResponse> + Send + 'a {
        // Only in a cluster, and only for the methods passed on, is anything kept of the call.
        let kept =
            (self.store.clustered() && PASSED_ON.contains(&request.method_name())).then(|| {
                (
                    request.method_name().to_owned(),
                    request.params.as_ref().map(|p| p.clone().into_owned()),
                    request.id().into_owned(),
                    self.store.clone(),
                    {
                        let id = tether_proto::ConnectionId(
                            request
                                .extensions()
                                .get::<jsonrpsee::ConnectionId>()
                                .map_or(0, |c| c.0 as u64),
                        );
                        (
                            self.connections.client_ref(id),
                            self.connections.peer(id).cap,
                        )
                    },
                )
            });
        let call = self.inner.call(request);
        async move {
            let response = call.await;
            match kept {
                Some((method, params, id, store, (by, cap))) => {
                    elsewhere(&store, by, cap, &method, params.as_deref(), id, response).await
                }
                None => response,
            }
        }
    }

    fn batch<'a>(&self, requests: Batch<'a>) -> impl Future<Output = MethodResponse> + Send + 'a {
        self.inner.batch(requests)
    }

    fn notification<'a>(
        &self,
        n: Notification<'a>,
    ) -> impl Future<Output = MethodResponse> + Send + 'a {
        self.inner.notification(n)
    }
}
