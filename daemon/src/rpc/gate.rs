//! Back-pressure for a WebSocket connection: at most [`MAX_IN_FLIGHT`] of its calls run or wait
//! to be queued at once, and while that many do the connection's socket is not read.
//!
//! The WebSocket transport starts a task for every message it reads and never stops reading on
//! its own, so a client that sends without reading its replies would grow the daemon without
//! bound. [`InFlight`] (an RPC middleware) counts a call from its start until its reply is in the
//! connection's outgoing buffer (itself bounded); [`Throttled`] (the socket) reads only while
//! the count is under the limit. The NDJSON transport bounds its own reader the same way.

use futures::task::AtomicWaker;
use jsonrpsee::ResponsePayload;
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

/// Calls one connection may have running or waiting for room in its outgoing buffer.
pub(crate) const MAX_IN_FLIGHT: usize = 64;

/// The count of one connection's calls in flight, and the reader waiting for it to fall.
#[derive(Default)]
pub(crate) struct Gate {
    in_flight: AtomicUsize,
    reader: AtomicWaker,
}

impl Gate {
    fn enter(self: &Arc<Self>) -> Pass {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Pass(self.clone())
    }

    fn poll_open(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.in_flight.load(Ordering::Acquire) < MAX_IN_FLIGHT {
            return Poll::Ready(());
        }
        self.reader.register(cx.waker());
        // A call may have finished between the load and the registration.
        if self.in_flight.load(Ordering::Acquire) < MAX_IN_FLIGHT {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// One call in flight; dropping it lets the reader go on.
struct Pass(Arc<Gate>);

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
        Pin::new(&mut self.io).poll_write(cx, buf)
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
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
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
    tokio::spawn(async move {
        let _ = queued.await;
        drop(pass);
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
