//! Back-pressure for one connection, either transport: its socket is read only while fewer than
//! [`MAX_IN_FLIGHT`] of its calls run or wait for room in its outgoing queue, and while fewer
//! than [`MAX_QUEUED_BYTES`] of replies wait in that queue unwritten.
//!
//! A client that sends without reading its replies would otherwise grow the daemon without
//! bound (the WebSocket transport starts a task for every message it reads and never stops
//! reading on its own). A call counts from its start until its reply is queued ([`Pass`]); a
//! queued reply's bytes count until the socket takes them ([`Throttled`]'s write side). Replies
//! are never dropped: the client's requests wait in its socket until it reads.
//!
//! [`InFlight`] is the RPC middleware that does the counting for WebSocket connections; the
//! NDJSON transport takes a [`Pass`] per line itself.

use futures::task::AtomicWaker;
use jsonrpsee::ResponsePayload;
use jsonrpsee::core::server::MethodResponseError;
use jsonrpsee::server::middleware::rpc::{Batch, MethodResponse, Notification, RpcServiceT};
use jsonrpsee::types::{ErrorObject, Id, Request};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Calls one connection may have running or waiting for room in its outgoing queue.
const MAX_IN_FLIGHT: usize = 32;
/// Bytes of replies queued for one connection, and not yet written, past which it is not read.
const MAX_QUEUED_BYTES: usize = 8 << 20;

/// One connection's calls in flight and unwritten reply bytes, and the reader waiting for them
/// to fall.
#[derive(Default)]
pub(crate) struct Gate {
    in_flight: AtomicUsize,
    queued_bytes: AtomicUsize,
    reader: AtomicWaker,
}

impl Gate {
    /// A call starts.
    pub(crate) fn enter(self: &Arc<Self>) -> Pass {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Pass(self.clone())
    }

    fn is_open(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) < MAX_IN_FLIGHT
            && self.queued_bytes.load(Ordering::Acquire) < MAX_QUEUED_BYTES
    }

    fn poll_open(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_open() {
            return Poll::Ready(());
        }
        self.reader.register(cx.waker());
        // A call may have finished, or bytes gone out, between the check and the registration.
        if self.is_open() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// The socket took `n` bytes. Bytes of messages that were never counted (subscription
    /// events) only make the count fall sooner, never below zero.
    fn written(&self, n: usize) {
        let before = self
            .queued_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                Some(q.saturating_sub(n))
            })
            .unwrap_or(0);
        if before >= MAX_QUEUED_BYTES && before.saturating_sub(n) < MAX_QUEUED_BYTES {
            self.reader.wake();
        }
    }
}

/// One call in flight; dropping it lets the reader go on.
pub(crate) struct Pass(Arc<Gate>);

impl Pass {
    /// The call's reply (`bytes` long) is in the outgoing queue; the call is over.
    pub(crate) fn queued(self, bytes: usize) {
        self.0.queued_bytes.fetch_add(bytes, Ordering::AcqRel);
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.reader.wake();
    }
}

/// The connection's socket, read only while its gate is open.
pub(crate) struct Throttled<S> {
    io: S,
    gate: Arc<Gate>,
}

impl<S> Throttled<S> {
    pub(crate) fn new(io: S, gate: Arc<Gate>) -> Self {
        Throttled { io, gate }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Throttled<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        std::task::ready!(self.gate.poll_open(cx));
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Throttled<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            self.gate.written(n);
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = written {
            self.gate.written(n);
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The RPC middleware that counts a connection's calls through its [`Gate`].
#[derive(Clone)]
pub(crate) struct InFlight<S> {
    inner: S,
    gate: Arc<Gate>,
}

impl<S> InFlight<S> {
    pub(crate) fn new(inner: S, gate: Arc<Gate>) -> Self {
        InFlight { inner, gate }
    }
}

/// A reply as the method wrote it, read back without copying its result.
#[derive(Deserialize)]
struct Reply<'a> {
    #[serde(borrow)]
    id: Id<'a>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<ErrorObject<'a>>,
}

/// Holds `pass` until `response` is in the connection's outgoing buffer (or dropped unsent).
///
/// The transport reports that only for a reply built with a completion notice, which a method
/// cannot ask for through the generated server; so the reply is rebuilt here with one. Anything
/// that is not a plain method reply (a notification, a subscription, a batch) is not queued
/// behind the caller's other replies and lets `pass` go at once.
fn release_when_queued(response: MethodResponse, pass: Pass) -> MethodResponse {
    if !response.is_method_call() || response.is_subscription() {
        return response;
    }
    let Ok(reply) = serde_json::from_str::<Reply>(response.as_json().get()) else {
        return response;
    };
    // `"result": null` reads as no result.
    let result = reply.result.unwrap_or(RawValue::NULL);
    let payload = match reply.error {
        Some(error) => ResponsePayload::error(error.into_owned()),
        None => ResponsePayload::success_borrowed(&result),
    };
    let (payload, queued) = payload.notify_on_completion();
    let rebuilt = MethodResponse::response(reply.id, payload, usize::MAX)
        .with_extensions(response.extensions().clone());
    let bytes = rebuilt.as_json().get().len();
    tokio::spawn(async move {
        match queued.await {
            Ok(()) | Err(MethodResponseError::JsonRpcError) => pass.queued(bytes),
            Err(MethodResponseError::Closed) => drop(pass),
        }
    });
    rebuilt
}

impl<S> RpcServiceT for InFlight<S>
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
        let pass = self.gate.enter();
        let call = self.inner.call(request);
        async move { release_when_queued(call.await, pass) }
    }

    fn batch<'a>(&self, requests: Batch<'a>) -> impl Future<Output = MethodResponse> + Send + 'a {
        let pass = self.gate.enter();
        let batch = self.inner.batch(requests);
        async move { release_when_queued(batch.await, pass) }
    }

    fn notification<'a>(
        &self,
        n: Notification<'a>,
    ) -> impl Future<Output = MethodResponse> + Send + 'a {
        let pass = self.gate.enter();
        let notification = self.inner.notification(n);
        async move {
            let response = notification.await;
            drop(pass);
            response
        }
    }
}
