//! The one way out of the sandbox's network namespace: a filtering HTTP proxy per session,
//! listening on a Unix socket (0600, in tether's private data directory) that is bound into the
//! sandbox, and the relay that runs inside it (`tetherd sandbox-relay`) and forwards the
//! sandbox's loopback port [`RELAY_PORT`] to that socket.
//!
//! The proxy takes `CONNECT host:port` (TLS and any other tunnel) and plain HTTP requests with
//! an absolute `http://` URI; a host `sandbox.network.allowedDomains` names ([`Allowed`]) is
//! connected to, any other gets `403` with a one-line reason and is never resolved nor
//! connected to. Malformed requests get `400`, oversized heads `431`; either way the
//! connection closes. It is bounded: [`MAX_CONNECTIONS`] at once (more get `503`), a head of at
//! most [`HEAD_LIMIT`] bytes read within [`HEAD_TIMEOUT`], an upstream connect within
//! [`CONNECT_TIMEOUT`], a connection idle for [`IDLE_TIMEOUT`] closed.
//!
//! Invariant: with an empty list there is no proxy and no relay ([`Sandbox::wrap`] leaves the
//! network off); the proxy's task lives exactly as long as its [`Proxy`] (the session's
//! workspace holds it), and its socket file with it.
//!
//! [`Sandbox::wrap`]: super::Sandbox::wrap

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

/// The port the relay listens on, on the sandbox's own loopback.
pub const RELAY_PORT: u16 = 3128;
/// Connections one session's proxy serves at once.
pub const MAX_CONNECTIONS: usize = 64;
/// The largest request head (request line and headers) the proxy reads.
pub const HEAD_LIMIT: usize = 16 * 1024;
/// How long a client has to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to an allowed host may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// A connection with no bytes moving either way for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Headers a request may carry.
const MAX_HEADERS: usize = 100;
/// The line the relay prints once it listens.
pub const RELAY_READY: &str = "listening";

/// Why the proxy or the relay could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The socket's directory could not be made.
    #[error("cannot prepare {}: {source}", dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Binding or listening failed.
    #[error("cannot listen on {what}: {source}")]
    Listen {
        /// The socket path or address.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// The relay's runtime could not start.
    #[error("cannot start the relay's runtime: {0}")]
    Runtime(std::io::Error),
}

/// One `allowedDomains` entry: `example.com` (that host), `*.example.com` (its subdomains),
/// either with an optional `:port` (that port only).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    host: String,
    subdomains: bool,
    port: Option<u16>,
}

impl Rule {
    /// `None` for an entry that names no host (`*`, `a.*.com`, a bad port).
    fn parse(entry: &str) -> Option<Self> {
        let entry = entry.trim().to_ascii_lowercase();
        let (host, port) = split_port(&entry)?;
        let (host, subdomains) = match host.strip_prefix("*.") {
            Some(base) => (base, true),
            None => (host, false),
        };
        let host = host.trim_end_matches('.');
        if host.is_empty() || host.contains('*') {
            return None;
        }
        Some(Self {
            host: host.to_owned(),
            subdomains,
            port,
        })
    }

    fn matches(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        if self.subdomains {
            // An address is never anyone's subdomain.
            host.parse::<IpAddr>().is_err()
                && host.len() > self.host.len() + 1
                && host.ends_with(&self.host)
                && host.as_bytes()[host.len() - self.host.len() - 1] == b'.'
        } else {
            host == self.host
        }
    }
}

/// `host[:port]` or `[v6][:port]` split; a bare IPv6 address has no port. `None` for a port
/// that does not parse.
fn split_port(s: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(p) => Some((host, Some(p.parse().ok()?))),
            None if after.is_empty() => Some((host, None)),
            None => None,
        };
    }
    match s.split_once(':') {
        Some((host, p)) if !p.contains(':') => Some((host, Some(p.parse().ok()?))),
        _ => Some((s, None)),
    }
}

/// The hosts the sandbox may reach: `sandbox.network.allowedDomains`, as Claude Code reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Allowed(Vec<Rule>);

impl Allowed {
    /// The rules of `entries` (entries that name no host are left out).
    pub fn new(entries: &[String]) -> Self {
        Self(entries.iter().filter_map(|e| Rule::parse(e)).collect())
    }

    /// Whether `host` (a name or an address, any case, a trailing dot or IPv6 brackets
    /// allowed) on `port` may be reached.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = normal_host(host);
        self.0.iter().any(|r| r.matches(&host, port))
    }
}

fn normal_host(host: &str) -> String {
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `host` can be handed to the resolver as it is: an address, or a name of letters,
/// digits, `-`, `_` and dots.
fn plausible_host(host: &str) -> bool {
    host.parse::<IpAddr>().is_ok()
        || (!host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
}

/// An answer that ends the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The status code.
    pub status: u16,
    /// One line saying why.
    pub reason: String,
}

impl Refusal {
    fn new(status: u16, reason: impl Into<String>) -> Self {
        Self {
            status,
            reason: reason.into(),
        }
    }

    /// The whole response: status line, a few headers, the reason as a text body.
    pub fn response(&self) -> Vec<u8> {
        let text = match self.status {
            400 => "Bad Request",
            403 => "Forbidden",
            408 => "Request Timeout",
            431 => "Request Header Fields Too Large",
            502 => "Bad Gateway",
            503 => "Service Unavailable",
            504 => "Gateway Timeout",
            _ => "Error",
        };
        let body = format!("tether sandbox proxy: {}\n", self.reason);
        format!(
            "HTTP/1.1 {} {text}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.status,
            body.len()
        )
        .into_bytes()
    }
}

/// What a request asks the proxy to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `CONNECT host:port`: a tunnel.
    Tunnel {
        /// The host (no brackets).
        host: String,
        /// The port.
        port: u16,
    },
    /// A plain HTTP request: `head` (origin-form, `Host` set from the URI, `Connection:
    /// close`) goes to the host, the rest of the stream follows it.
    Forward {
        /// The host (no brackets).
        host: String,
        /// The port (80 unless the URI says).
        port: u16,
        /// The rewritten request head.
        head: Vec<u8>,
    },
}

impl Request {
    fn host(&self) -> (&str, u16) {
        match self {
            Self::Tunnel { host, port } | Self::Forward { host, port, .. } => (host, *port),
        }
    }
}

/// Parses the request head at the start of `buf`: `Ok(None)` while it is incomplete, else the
/// request and the head's length (what follows is the body or the tunnel's first bytes).
pub fn parse(buf: &[u8]) -> Result<Option<(Request, usize)>, Refusal> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= HEAD_LIMIT => {
            return Err(too_large());
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(too_large()),
        Err(e) => return Err(Refusal::new(400, format!("malformed request ({e})"))),
    };
    if len > HEAD_LIMIT {
        return Err(too_large());
    }
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return Err(Refusal::new(400, "malformed request"));
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = match split_port(target) {
            Some((h, Some(p))) => (normal_host(h), p),
            _ => return Err(Refusal::new(400, "CONNECT needs host:port")),
        };
        check_host(&host)?;
        return Ok(Some((Request::Tunnel { host, port }, len)));
    }
    let Some(rest) = target
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case("http://"))
        .map(|_| &target[7..])
    else {
        return Err(Refusal::new(
            400,
            "only CONNECT and http:// requests with an absolute URI are proxied (use CONNECT for https)",
        ));
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains('@') {
        return Err(Refusal::new(400, "user information in the URI is refused"));
    }
    let (host, port) = match split_port(authority) {
        Some((h, p)) => (normal_host(h), p.unwrap_or(80)),
        None => return Err(Refusal::new(400, "malformed host in the URI")),
    };
    check_host(&host)?;
    let path = match path.split('#').next() {
        Some(p) if p.starts_with('/') => p.to_owned(),
        Some(p) => format!("/{p}"),
        None => "/".to_owned(),
    };
    let mut head = format!(
        "{method} {path} HTTP/1.{}\r\nHost: {authority}\r\n",
        req.version.unwrap_or(1)
    )
    .into_bytes();
    for h in req.headers.iter() {
        let hop = [
            "host",
            "connection",
            "proxy-connection",
            "proxy-authorization",
            "keep-alive",
        ];
        if hop.iter().any(|n| h.name.eq_ignore_ascii_case(n)) {
            continue;
        }
        head.extend_from_slice(h.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(h.value);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Some((Request::Forward { host, port, head }, len)))
}

fn too_large() -> Refusal {
    Refusal::new(
        431,
        format!("the request head is over {HEAD_LIMIT} bytes or {MAX_HEADERS} headers"),
    )
}

fn check_host(host: &str) -> Result<(), Refusal> {
    if plausible_host(host) {
        Ok(())
    } else {
        Err(Refusal::new(400, "malformed host"))
    }
}

/// A session's running proxy; dropping it stops it and removes its socket.
#[derive(Debug)]
pub struct Proxy {
    socket: PathBuf,
    allowed: watch::Sender<Allowed>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on `socket` (its directory made private, a file left there replaced) and
    /// serves in a task of the current runtime.
    pub fn start(socket: PathBuf, allowed: Allowed) -> Result<Self, ProxyError> {
        if let Some(dir) = socket.parent() {
            tether_proto::private::create_dir_all(dir).map_err(|source| ProxyError::Dir {
                dir: dir.to_owned(),
                source,
            })?;
        }
        let listen_err = |source| ProxyError::Listen {
            what: socket.display().to_string(),
            source,
        };
        match std::fs::remove_file(&socket) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(listen_err(e)),
            _ => {}
        }
        let listener = UnixListener::bind(&socket).map_err(listen_err)?;
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
                .map_err(listen_err)?;
        }
        let (tx, rx) = watch::channel(allowed);
        let task = tokio::spawn(accept(listener, rx));
        Ok(Self {
            socket,
            allowed: tx,
            task,
        })
    }

    /// The socket it listens on.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Whether it still serves on its socket.
    pub fn running(&self) -> bool {
        !self.task.is_finished() && self.socket.exists()
    }

    /// Uses `allowed` for the requests to come.
    pub fn allow(&self, allowed: Allowed) {
        self.allowed.send_if_modified(|now| {
            let changed = *now != allowed;
            *now = allowed;
            changed
        });
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// The accept loop: at most [`MAX_CONNECTIONS`] served at once, the connections owned here.
async fn accept(listener: UnixListener, allowed: watch::Receiver<Allowed>) {
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut served = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => match limit.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let allowed = allowed.clone();
                        served.spawn(async move {
                            serve(stream, &allowed).await;
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        let busy = Refusal::new(503, format!("over {MAX_CONNECTIONS} connections"));
                        let _ = stream.try_write(&busy.response());
                    }
                },
                Err(e) => {
                    // Out of descriptors, most likely: wait instead of spinning.
                    tracing::warn!("sandbox proxy: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = served.join_next() => {}
        }
    }
}

/// Connects to an allowed host. A name is resolved first and only its public addresses are
/// used: a listed name that resolves to the host's own or a private network (a wildcard record,
/// DNS rebinding) does not open those to the sandbox. `localhost` and address literals, which
/// say what they reach, are taken as given.
async fn connect_vetted(host: &str, port: u16) -> Result<TcpStream, Refusal> {
    let literal = host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok();
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| Refusal::new(502, format!("cannot resolve {host}: {e}")))?
        .filter(|a| literal || is_public(a.ip()))
        .collect();
    if addrs.is_empty() {
        return Err(Refusal::new(
            403,
            format!("{host} resolves only to local or private addresses"),
        ));
    }
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(Refusal::new(
        502,
        format!(
            "cannot connect to {host}:{port}: {}",
            last.map(|e| e.to_string()).unwrap_or_default()
        ),
    ))
}

/// Whether `ip` is on the public internet: not loopback, private, link-local, unique-local,
/// unspecified, multicast, nor one of those behind an IPv4-mapped IPv6 address.
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64)
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public(IpAddr::V4(v4)),
            None => {
                !(v6.is_loopback()
                    || v6.is_unspecified()
                    || v6.is_multicast()
                    || v6.is_unique_local()
                    || v6.is_unicast_link_local())
            }
        },
    }
}

/// Serves one connection: reads the head, refuses or connects, then moves bytes both ways.
async fn serve(mut client: UnixStream, allowed: &watch::Receiver<Allowed>) {
    let mut buf = Vec::with_capacity(2048);
    let parsed = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client, &mut buf)).await {
        Ok(Ok(Some(p))) => Ok(p),
        Ok(Ok(None)) => return,
        Ok(Err(refusal)) => Err(refusal),
        Err(_) => Err(Refusal::new(408, "no request head in time")),
    };
    let (request, len) = match parsed {
        Ok(p) => p,
        Err(refusal) => return refuse(client, &refusal).await,
    };
    let (host, port) = request.host();
    if !allowed.borrow().allows(host, port) {
        tracing::info!(host, port, "sandbox proxy: refused");
        let refusal = Refusal::new(
            403,
            format!("{host}:{port} is not in sandbox.network.allowedDomains"),
        );
        return refuse(client, &refusal).await;
    }
    let upstream = match tokio::time::timeout(CONNECT_TIMEOUT, connect_vetted(host, port)).await {
        Ok(Ok(s)) => s,
        Ok(Err(refusal)) => return refuse(client, &refusal).await,
        Err(_) => {
            let refusal = Refusal::new(504, format!("connecting to {host}:{port} timed out"));
            return refuse(client, &refusal).await;
        }
    };
    let mut upstream = upstream;
    let first = match &request {
        Request::Tunnel { .. } => {
            if client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
            Vec::new()
        }
        Request::Forward { head, .. } => head.clone(),
    };
    let mut first = first;
    first.extend_from_slice(&buf[len..]);
    if upstream.write_all(&first).await.is_err() {
        return;
    }
    let _ = pump(client, upstream, IDLE_TIMEOUT).await;
}

/// Reads until `buf` holds a whole head (`None`: the client left first).
async fn read_head(
    client: &mut UnixStream,
    buf: &mut Vec<u8>,
) -> Result<Option<(Request, usize)>, Refusal> {
    let mut chunk = [0u8; 2048];
    loop {
        let n = match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = parse(buf)? {
            return Ok(Some(p));
        }
    }
}

async fn refuse(mut client: UnixStream, refusal: &Refusal) {
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        let _ = client.write_all(&refusal.response()).await;
        let _ = client.shutdown().await;
    })
    .await;
}

/// Copies both ways until both sides are done, or nothing moved for `idle`.
async fn pump<A, B>(a: A, b: B, idle: Duration) -> std::io::Result<()>
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let moved = AtomicU64::new(0);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    // Both directions run to their end: a side that fails to write (the peer stopped reading,
    // as after a refusal) does not cut off what the other side still has to say.
    let both = async {
        let (there, back) = tokio::join!(copy(ar, bw, &moved), copy(br, aw, &moved));
        there.and(back)
    };
    tokio::pin!(both);
    loop {
        let seen = moved.load(Ordering::Relaxed);
        tokio::select! {
            done = &mut both => return done,
            () = tokio::time::sleep(idle) => {
                if moved.load(Ordering::Relaxed) == seen {
                    return Ok(());
                }
            }
        }
    }
}

async fn copy<R, W>(mut from: R, mut to: W, moved: &AtomicU64) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut chunk).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        to.write_all(&chunk[..n]).await?;
        moved.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// The relay (`tetherd sandbox-relay`): listens on `listen`, prints [`RELAY_READY`] on stdout,
/// then forwards each connection to the Unix socket `to`. Returns only when it cannot listen.
pub fn relay(listen: SocketAddr, to: &Path) -> Result<(), ProxyError> {
    use std::io::Write as _;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ProxyError::Runtime)?;
    let listen_err = |source| ProxyError::Listen {
        what: listen.to_string(),
        source,
    };
    let std_listener = std::net::TcpListener::bind(listen).map_err(listen_err)?;
    std_listener.set_nonblocking(true).map_err(listen_err)?;
    let to = to.to_owned();
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(std_listener).map_err(listen_err)?;
        // The wrapper reads this line, then closes its end: nothing is written after it.
        let mut out = std::io::stdout();
        let _ = writeln!(out, "{RELAY_READY}").and_then(|()| out.flush());
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((client, _)) = accepted else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    let to = to.clone();
                    conns.spawn(async move {
                        if let Ok(proxy) = UnixStream::connect(&to).await {
                            let _ = pump(client, proxy, IDLE_TIMEOUT).await;
                        }
                    });
                }
                Some(_) = conns.join_next() => {}
            }
        }
    })
}

/// The shell words that start the relay inside the sandbox, wait until it listens, set the
/// proxy variables and run the rest of the command line (`bash -c PRELUDE tether-net PROGRAM…`).
pub fn prelude(relay: &Path, socket: &Path) -> Vec<String> {
    let url = format!("http://127.0.0.1:{RELAY_PORT}");
    let script = format!(
        "IFS= read -r __tether_relay < <(exec {exe} sandbox-relay --listen 127.0.0.1:{RELAY_PORT} --to {sock} </dev/null 2>&1)\n\
         [ \"$__tether_relay\" = {RELAY_READY} ] || {{ echo \"tether: the sandbox's network relay did not start: $__tether_relay\" >&2; exit 126; }}\n\
         unset __tether_relay\n\
         export HTTP_PROXY={url} HTTPS_PROXY={url} ALL_PROXY={url} http_proxy={url} https_proxy={url} all_proxy={url} NO_PROXY= no_proxy=\n\
         exec \"$@\"",
        exe = quote(relay),
        sock = quote(socket),
    );
    vec!["bash".into(), "-c".into(), script, "tether-net".into()]
}

/// `path` as one single-quoted shell word.
fn quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests;
