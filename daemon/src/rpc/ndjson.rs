//! Newline-delimited JSON-RPC on a connection: one JSON object per line, both ways, served from
//! the same `Methods` as the WebSocket side, subscriptions included.
//!
//! Each connection has its own jsonrpsee `ConnectionId`, `MethodSink` and subscription limit, so
//! one connection can never unsubscribe another's subscription. Calls run concurrently (replies
//! may come out of order; clients match them by `id`). At read EOF the connection waits for its
//! in-flight calls and writes their replies before closing, so `echo req | socat` works.

use super::Connections;
use super::forward;
use super::gate::{Gate, Pass, Throttled};
use crate::store::Store;
use futures::StreamExt;
use jsonrpsee::ConnectionId;
use jsonrpsee::core::server::{
    BoundedSubscriptions, MethodCallback, MethodResponse, MethodSink, Methods, SubscriptionState,
};
use jsonrpsee::server::RandomIntegerIdProvider;
use jsonrpsee::types::error::{
    ErrorCode, INVALID_REQUEST_CODE, OVERSIZED_REQUEST_CODE, PARSE_ERROR_CODE,
};
use jsonrpsee::types::{ErrorObject, ErrorObjectOwned, Id, Params, Request, Response};
use serde_json::value::RawValue;
use std::sync::Arc;
use tether_proto::MAX_MESSAGE_BYTES;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::bytes::BytesMut;
use tokio_util::codec::{Decoder, FramedRead, LinesCodec, LinesCodecError};
use tokio_util::sync::CancellationToken;

/// Messages queued for one connection before its senders wait.
const OUTBOX: usize = 4096;
/// Subscriptions one connection may hold.
const MAX_SUBSCRIPTIONS: u32 = 1024;
/// How long, at daemon shutdown, a connection waits for its subscriptions' final events.
const SHUTDOWN_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// One line of input, or why it could not be one.
enum Frame {
    Line(String),
    Oversized,
    NotUtf8,
}

/// `LinesCodec` that turns an oversized or non-UTF-8 line into a frame the connection answers,
/// instead of an error that ends the stream.
struct FrameCodec(LinesCodec);

impl FrameCodec {
    fn map(r: Result<Option<String>, LinesCodecError>) -> Result<Option<Frame>, std::io::Error> {
        match r {
            Ok(line) => Ok(line.map(Frame::Line)),
            Err(LinesCodecError::MaxLineLengthExceeded) => Ok(Some(Frame::Oversized)),
            Err(LinesCodecError::Io(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                Ok(Some(Frame::NotUtf8))
            }
            Err(LinesCodecError::Io(e)) => Err(e),
        }
    }
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        Self::map(self.0.decode(buf))
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        Self::map(self.0.decode_eof(buf))
    }
}

struct Conn {
    methods: Methods,
    /// Where a call about a session another node runs is passed on.
    store: Store,
    /// Who this connection is, for a call passed on.
    connections: Arc<Connections>,
    /// Who is at it, as it was accepted.
    peer: super::Peer,
    sink: MethodSink,
    conn_id: ConnectionId,
    subscriptions: BoundedSubscriptions,
}

/// Serves one NDJSON connection until the peer closes it or the daemon shuts down.
pub async fn serve(
    stream: UnixStream,
    methods: Methods,
    store: Store,
    connections: Arc<Connections>,
    conn_id: u32,
    peer: super::Peer,
    shutdown: CancellationToken,
) {
    let (read, write) = stream.into_split();
    let gate = Arc::new(Gate::default());
    let (tx, rx) = mpsc::channel::<Box<RawValue>>(OUTBOX);
    let closing = CancellationToken::new();
    let write = Throttled::new(write, gate.clone());
    let mut writer = tokio::spawn(write_lines(write, rx, closing.clone()));
    let conn = Arc::new(Conn {
        methods,
        store,
        connections,
        peer,
        sink: MethodSink::new_with_limit(tx, MAX_MESSAGE_BYTES),
        conn_id: ConnectionId::from(conn_id),
        subscriptions: BoundedSubscriptions::new(MAX_SUBSCRIPTIONS),
    });
    let codec = FrameCodec(LinesCodec::new_with_max_length(MAX_MESSAGE_BYTES as usize));
    let mut frames = FramedRead::new(Throttled::new(read, gate.clone()), codec);
    let mut calls = JoinSet::new();
    let daemon_stopping = loop {
        tokio::select! {
            _ = shutdown.cancelled() => break true,
            Some(_) = calls.join_next() => {}
            // A client that does not read its replies stops being read (see `gate`).
            frame = frames.next() => match frame {
                None => break false,
                Some(Ok(Frame::Line(line))) => {
                    if line.trim().is_empty() {
                        continue;
                    }
                    let conn = conn.clone();
                    let pass = gate.enter();
                    calls.spawn(async move { handle_line(&conn, line, pass).await });
                }
                Some(Ok(Frame::Oversized)) => {
                    let err = ErrorObject::owned::<()>(
                        OVERSIZED_REQUEST_CODE,
                        format!("message is larger than the limit of {MAX_MESSAGE_BYTES} bytes"),
                        None,
                    );
                    let _ = conn.sink.send_error(Id::Null, err).await;
                }
                Some(Ok(Frame::NotUtf8)) => {
                    let err = ErrorObject::owned::<()>(PARSE_ERROR_CODE, "parse error: the line is not UTF-8", None);
                    let _ = conn.sink.send_error(Id::Null, err).await;
                }
                Some(Err(e)) => {
                    tracing::debug!(conn_id, "read failed: {e}");
                    break false;
                }
            }
        }
    };
    // Let in-flight calls answer.
    while calls.join_next().await.is_some() {}
    drop(conn);
    if daemon_stopping {
        // Subscriptions end with a final event (`daemon_shutdown`); the writer ends once the
        // last of them has dropped its sink.
        if tokio::time::timeout(SHUTDOWN_FLUSH, &mut writer)
            .await
            .is_ok()
        {
            return;
        }
    }
    // At EOF, flush what is queued and close; subscriptions end when the writer goes away.
    closing.cancel();
    let _ = writer.await;
}

/// Writes queued messages as lines. Ends when the peer is gone, or — once `closing` fires —
/// when nothing is queued any more.
async fn write_lines(
    mut write: Throttled<OwnedWriteHalf>,
    mut rx: mpsc::Receiver<Box<RawValue>>,
    closing: CancellationToken,
) {
    let mut buf = Vec::with_capacity(8192);
    loop {
        let msg = tokio::select! {
            biased;
            msg = rx.recv() => msg,
            _ = closing.cancelled() => rx.try_recv().ok(),
        };
        let Some(msg) = msg else { break };
        buf.clear();
        buf.extend_from_slice(msg.get().as_bytes());
        buf.push(b'\n');
        // Batch whatever else is ready into the same write.
        while buf.len() < 64 * 1024 {
            match rx.try_recv() {
                Ok(m) => {
                    buf.extend_from_slice(m.get().as_bytes());
                    buf.push(b'\n');
                }
                Err(_) => break,
            }
        }
        if write.write_all(&buf).await.is_err() {
            break;
        }
    }
    let _ = write.shutdown().await;
}

/// Answers one line; `pass` counts it in the connection's gate until its reply is queued.
async fn handle_line(conn: &Conn, line: String, pass: Pass) {
    let trimmed = line.trim_start();
    let reply = if trimmed.starts_with('[') {
        handle_batch(conn, trimmed).await
    } else {
        handle_single(conn, trimmed).await
    };
    if let Some(reply) = reply {
        // The line and its newline.
        let bytes = reply.get().len() + 1;
        if conn.sink.send(reply).await.is_ok() {
            pass.queued(bytes);
        }
    }
}

async fn handle_batch(conn: &Conn, text: &str) -> Option<Box<RawValue>> {
    let entries: Vec<&RawValue> = match serde_json::from_str(text) {
        Ok(e) => e,
        Err(e) => return Some(error_response(Id::Null, parse_error(&e))),
    };
    if entries.is_empty() {
        return Some(error_response(
            Id::Null,
            ErrorObject::owned::<()>(INVALID_REQUEST_CODE, "empty batch", None),
        ));
    }
    let mut replies = Vec::new();
    for entry in entries {
        if let Some(r) = handle_single(conn, entry.get()).await {
            replies.push(r);
        }
    }
    if replies.is_empty() {
        return None;
    }
    let joined = format!(
        "[{}]",
        replies
            .iter()
            .map(|r| r.get())
            .collect::<Vec<_>>()
            .join(",")
    );
    RawValue::from_string(joined).ok()
}

fn parse_error(e: &serde_json::Error) -> ErrorObjectOwned {
    ErrorObject::owned::<()>(PARSE_ERROR_CODE, format!("parse error: {e}"), None)
}

fn error_response(id: Id<'_>, err: ErrorObjectOwned) -> Box<RawValue> {
    let response = Response::new(jsonrpsee::types::ResponsePayload::<()>::error(err), id);
    serde_json::value::to_raw_value(&response).unwrap_or_else(|_| {
        RawValue::from_string(
            r#"{"jsonrpc":"2.0","error":{"code":-32603,"message":"internal error"},"id":null}"#
                .to_owned(),
        )
        .unwrap_or_else(|_| Box::<RawValue>::default())
    })
}

/// Handles one request object; returns its reply, or `None` for notifications and for
/// subscriptions (whose accept/reject already went out through the sink).
async fn handle_single(conn: &Conn, text: &str) -> Option<Box<RawValue>> {
    let mut req = match serde_json::from_str::<Request<'_>>(text) {
        Ok(req) => req,
        Err(e) => {
            let value: serde_json::Value = match serde_json::from_str(text) {
                Ok(v) => v,
                Err(e) => return Some(error_response(Id::Null, parse_error(&e))),
            };
            let Some(obj) = value.as_object() else {
                let err = ErrorObject::owned::<()>(
                    INVALID_REQUEST_CODE,
                    "invalid request: expected an object",
                    None,
                );
                return Some(error_response(Id::Null, err));
            };
            match (obj.get("id"), obj.get("method").and_then(|m| m.as_str())) {
                // A notification: run it, never answer it.
                (None, Some(method)) => {
                    let params = obj
                        .get("params")
                        .and_then(|p| serde_json::value::to_raw_value(p).ok());
                    let mut req = Request::owned(method.to_owned(), params, Id::Null);
                    req.extensions.insert(conn.conn_id);
                    let _ = call(conn, req).await;
                    return None;
                }
                (id, _) => {
                    let id = match id {
                        Some(serde_json::Value::Number(n)) => {
                            n.as_u64().map(Id::Number).unwrap_or(Id::Null)
                        }
                        Some(serde_json::Value::String(s)) => Id::Str(s.clone().into()),
                        _ => Id::Null,
                    };
                    let err = ErrorObject::owned::<()>(
                        INVALID_REQUEST_CODE,
                        format!("invalid request: {e}"),
                        None,
                    );
                    return Some(error_response(id, err));
                }
            }
        }
    };
    req.extensions.insert(conn.conn_id);
    let rp = call(conn, req).await;
    if !rp.is_method_call() {
        return None;
    }
    let (json, on_close, _) = rp.into_parts();
    if let Some(n) = on_close {
        n.notify(true);
    }
    Some(json)
}

async fn call(conn: &Conn, req: Request<'_>) -> MethodResponse {
    let Request {
        id,
        method,
        params,
        extensions,
        ..
    } = req;
    let raw = params.clone();
    if let Err(e) = super::access::check(
        &conn.store,
        conn.connections.owner(),
        &conn.peer,
        &method,
        raw.as_ref().map(|p| p.get()),
    ) {
        return MethodResponse::error(id, e);
    }
    let params = Params::new(params.as_ref().map(|p| p.get()));
    let max = MAX_MESSAGE_BYTES as usize;
    match conn.methods.method_with_name(&method) {
        None => MethodResponse::error(id, ErrorObject::from(ErrorCode::MethodNotFound)),
        Some((_, MethodCallback::Sync(cb))) => cb(id, params, max, extensions),
        Some((_, MethodCallback::Async(cb))) => {
            let id = id.into_owned();
            let response = cb(
                id.clone(),
                params.into_owned(),
                conn.conn_id,
                max,
                extensions,
            )
            .await;
            if conn.store.clustered() {
                let by = conn
                    .connections
                    .client_ref(tether_proto::ConnectionId(conn.conn_id.0 as u64));
                forward::elsewhere(
                    &conn.store,
                    by,
                    conn.peer.cap.clone(),
                    &method,
                    raw.as_deref(),
                    id,
                    response,
                )
                .await
            } else {
                response
            }
        }
        Some((_, MethodCallback::Subscription(cb))) => match conn.subscriptions.acquire() {
            Some(permit) => {
                let state = SubscriptionState {
                    conn_id: conn.conn_id,
                    id_provider: &RandomIntegerIdProvider,
                    subscription_permit: permit,
                };
                cb(id, params, conn.sink.clone(), state, extensions).await
            }
            None => MethodResponse::error(
                id,
                ErrorObject::owned::<()>(
                    jsonrpsee::types::error::TOO_MANY_SUBSCRIPTIONS_CODE,
                    format!("a connection may hold at most {MAX_SUBSCRIPTIONS} subscriptions"),
                    None,
                ),
            ),
        },
        Some((_, MethodCallback::Unsubscription(cb))) => {
            cb(id, params, conn.conn_id, max, extensions)
        }
    }
}

#[cfg(test)]
mod fuzz {
    //! The line framing under arbitrary bytes, cut into arbitrary reads (dispatch and the
    //! WebSocket upgrade are fuzzed end to end in `tests/`).

    use super::{Frame, FrameCodec};
    use tokio_util::bytes::BytesMut;
    use tokio_util::codec::{Decoder, LinesCodec};

    /// No line over the limit comes through, none holds a newline, and there are never more
    /// frames than lines.
    #[test]
    fn framing_accounts_for_every_line() {
        const MAX: usize = 64;
        for seed in [
            &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon/status\"}\n"[..],
            b"\n\r\n  \n[{\"id\":1},{\"id\":2}]\n",
            b"\xff\xfe\n{\"a\":\"\xc3\xa9\"}\n",
        ] {
            decode_all(seed, 5, MAX);
        }
        bolero::check!().for_each(|bytes: &[u8]| {
            let cut = bytes.first().map_or(1, |b| *b as usize % 97 + 1);
            decode_all(bytes, cut, MAX);
        });
    }

    fn decode_all(bytes: &[u8], cut: usize, max: usize) {
        let mut codec = FrameCodec(LinesCodec::new_with_max_length(max));
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        for chunk in bytes.chunks(cut) {
            buf.extend_from_slice(chunk);
            while let Some(frame) = codec.decode(&mut buf).expect("framing never fails") {
                frames.push(frame);
            }
        }
        while let Some(frame) = codec.decode_eof(&mut buf).expect("framing never fails") {
            frames.push(frame);
        }
        let newlines = bytes.iter().filter(|b| **b == b'\n').count();
        let tail = usize::from(bytes.last().is_some_and(|b| *b != b'\n'));
        // An oversized line may be reported before its newline arrives, and once.
        assert!(frames.len() <= newlines + tail, "{} frames", frames.len());
        for frame in &frames {
            if let Frame::Line(line) = frame {
                assert!(line.len() <= max, "a line over the limit came through");
                assert!(!line.contains('\n'));
            }
        }
    }
}
