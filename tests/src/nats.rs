//! A JetStream cluster of real `nats-server` processes on loopback, for the cluster-mode suites.
//!
//! [`NatsCluster`] owns a temporary directory (each server's config, JetStream store and log)
//! and the server processes: it starts them on free 127.0.0.1 ports, waits until JetStream has a
//! meta leader, and crashes, restarts, freezes and thaws single servers. Servers are named `n0`,
//! `n1`, … after their index. The binary is the one `tests/run` installs into the test cache
//! ([`nats_server`]). Readiness and leaders come from each server's HTTP monitor: `/jsz` (meta
//! and stream leaders), `/routez` (the routes between servers) and `/healthz`.

use crate::test_cache;
use anyhow::{Context, bail, ensure};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long starting the cluster, restarting a server or [`NatsCluster::wait_ready`] may take.
pub const READY: Duration = Duration::from_secs(30);

/// The pause between two looks at the servers' monitors.
const POLL: Duration = Duration::from_millis(100);

/// How many times [`NatsCluster::start`] picks new ports after one was taken meanwhile.
const START_ATTEMPTS: usize = 5;

/// What nats-server logs when a port it was given is taken.
const PORT_TAKEN: &str = "address already in use";

/// The `nats-server` binary `tests/run` installs into the test cache.
pub fn nats_server() -> PathBuf {
    let path = test_cache().join("nats/venv/bin/nats-server");
    assert!(
        path.is_file(),
        "{} is missing: tests/run installs it",
        path.display()
    );
    path
}

/// One server of the cluster.
struct Node {
    name: String,
    client_port: u16,
    monitor_port: u16,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    /// Stopped with SIGSTOP and not continued yet.
    stopped: AtomicBool,
}

impl Node {
    /// Starts the server, its output appended to its log.
    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let child = Command::new(nats_server())
            .arg("-c")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting nats-server {}", self.name))?;
        self.child = Some(child);
        self.stopped.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// SIGKILLs the server (stopped or not) and reaps it.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Fails only when it has exited already; `wait` reaps it either way.
            let _ = child.kill();
            let _ = child.wait();
        }
        self.stopped.store(false, Ordering::SeqCst);
    }

    /// Whether it runs and is not stopped: whether its monitor can answer.
    fn live(&self) -> bool {
        self.child.is_some() && !self.stopped.load(Ordering::SeqCst)
    }

    /// How it exited, when it has.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    fn pid(&self) -> anyhow::Result<Pid> {
        let child = self
            .child
            .as_ref()
            .with_context(|| format!("nats-server {} is not running", self.name))?;
        Ok(Pid::from_raw(i32::try_from(child.id())?))
    }

    /// Its log from byte `from` on.
    fn log_from(&self, from: u64) -> String {
        match std::fs::read(&self.log) {
            Ok(bytes) => {
                let from = usize::try_from(from).unwrap_or(usize::MAX).min(bytes.len());
                String::from_utf8_lossy(&bytes[from..]).into_owned()
            }
            Err(e) => format!("(no log: {e})\n"),
        }
    }

    fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log).map_or(0, |m| m.len())
    }

    /// Its monitor's `/jsz`, with `query` (e.g. `?accounts=true&streams=true`).
    fn jsz(&self, query: &str) -> anyhow::Result<Value> {
        http_get_json(self.monitor_port, &format!("/jsz{query}"))
            .with_context(|| format!("GET /jsz{query} of nats-server {}", self.name))
    }
}

/// A JetStream cluster of `nats-server` processes on loopback (one server without a cluster
/// when started with one); every server is SIGKILLed on drop.
pub struct NatsCluster {
    nodes: Vec<Node>,
    clustered: bool,
    cluster_name: String,
    dir: tempfile::TempDir,
}

impl NatsCluster {
    /// Starts `n` servers and returns once JetStream is ready (see [`NatsCluster::wait_ready`]).
    /// One server runs without a cluster block; more form a cluster of their own name (see
    /// [`NatsCluster::cluster_name`]). Picks new ports and starts over when one was taken between
    /// choosing and binding it.
    pub fn start(n: usize) -> anyhow::Result<Self> {
        ensure!(n > 0, "a NATS cluster needs at least one server");
        let mut attempt = 1;
        loop {
            let mut cluster = Self::spawn(n)?;
            match cluster.wait_ready_until(Instant::now() + READY) {
                Ok(()) => return Ok(cluster),
                Err(_) if attempt < START_ATTEMPTS && cluster.port_taken(0) => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes the configs of `n` servers on fresh ports and starts them.
    fn spawn(n: usize) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("tether-nats-").tempdir()?;
        // A name of its own: servers of two clusters, e.g. of tests running at once, that meet
        // on a port one of them chose too (see `free_ports`) refuse each other's routes.
        let cluster_name = format!(
            "tether-test-{}",
            dir.path()
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("tether-nats-"))
                .unwrap_or_default()
        );
        let ports = free_ports(3 * n)?;
        let (clients, rest) = ports.split_at(n);
        let (clusters, monitors) = rest.split_at(n);
        let routes = clusters
            .iter()
            .map(|port| quote(&format!("nats-route://127.0.0.1:{port}")))
            .collect::<Vec<_>>()
            .join(", ");
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let name = format!("n{i}");
            let store = dir.path().join(&name);
            let mut config = format!(
                "server_name: {}\nlisten: {}\nhttp: {}\njetstream {{ store_dir: {} }}\n",
                quote(&name),
                quote(&format!("127.0.0.1:{}", clients[i])),
                quote(&format!("127.0.0.1:{}", monitors[i])),
                quote(&store.display().to_string()),
            );
            if n > 1 {
                config += &format!(
                    "cluster {{\n  name: {}\n  listen: {}\n  routes: [{routes}]\n}}\n",
                    quote(&cluster_name),
                    quote(&format!("127.0.0.1:{}", clusters[i])),
                );
            }
            let config_path = dir.path().join(format!("{name}.conf"));
            std::fs::write(&config_path, config)?;
            nodes.push(Node {
                log: dir.path().join(format!("{name}.log")),
                name,
                client_port: clients[i],
                monitor_port: monitors[i],
                config: config_path,
                child: None,
                stopped: AtomicBool::new(false),
            });
        }
        let mut cluster = Self {
            nodes,
            clustered: n > 1,
            cluster_name,
            dir,
        };
        // On an error, dropping `cluster` kills the servers started so far.
        for node in &mut cluster.nodes {
            node.spawn()?;
        }
        Ok(cluster)
    }

    /// Whether a server exited because a port was taken, as its log says after byte `from`.
    fn port_taken(&mut self, from: u64) -> bool {
        self.nodes
            .iter_mut()
            .any(|node| node.exited().is_some() && node.log_from(from).contains(PORT_TAKEN))
    }

    /// The cluster's name: `tether-test-` and a suffix unique to it (empty for one server).
    pub fn cluster_name(&self) -> &str {
        if self.clustered {
            &self.cluster_name
        } else {
            ""
        }
    }

    /// How many servers the cluster has.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no servers (never: [`NatsCluster::start`] refuses zero).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The temporary directory holding the configs (`nI.conf`), stores (`nI/`) and logs
    /// (`nI.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The client URLs of all servers, in index order.
    pub fn urls(&self) -> Vec<String> {
        (0..self.nodes.len()).map(|i| self.url(i)).collect()
    }

    /// The client URL of server `i` (`nats://127.0.0.1:PORT`).
    pub fn url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[i].client_port)
    }

    /// The `server_name` of server `i` (`n{i}`).
    pub fn name(&self, i: usize) -> &str {
        &self.nodes[i].name
    }

    /// The index of the server named `server_name`.
    pub fn index_of(&self, server_name: &str) -> Option<usize> {
        self.nodes.iter().position(|node| node.name == server_name)
    }

    /// Every server's log, each under a header naming it.
    pub fn logs(&self) -> String {
        let mut logs = String::new();
        for (i, node) in self.nodes.iter().enumerate() {
            logs += &format!("==== nats-server {} ({}) ====\n", node.name, self.url(i));
            logs += &node.log_from(0);
        }
        logs
    }

    /// SIGKILLs server `i` (stopped or not) and reaps it; nothing when it is not running.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts server `i` again (SIGKILLing it first if it runs) with the same config: the same
    /// ports and JetStream store. Returns once JetStream is ready again, the restarted server
    /// included (see [`NatsCluster::wait_ready`]).
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.nodes[i].kill();
        let deadline = Instant::now() + READY;
        loop {
            let from = self.nodes[i].log_len();
            self.nodes[i].spawn()?;
            match self.wait_ready_until(deadline) {
                Ok(()) => return Ok(()),
                // A port of its own got taken meanwhile (e.g. as a connection's local port):
                // try again until the deadline, as the other servers still route to those ports.
                Err(_)
                    if Instant::now() < deadline
                        && self.nodes[i].exited().is_some()
                        && self.nodes[i].log_from(from).contains(PORT_TAKEN) =>
                {
                    self.nodes[i].kill();
                    std::thread::sleep(Duration::from_millis(250));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Restarts every server at once (the whole cluster down, then up) and waits until
    /// JetStream is ready again: one at a time would never find a quorum.
    pub fn restart_all(&mut self) -> anyhow::Result<()> {
        for node in &mut self.nodes {
            node.kill();
        }
        for node in &mut self.nodes {
            node.spawn()?;
        }
        self.wait_ready()
    }

    /// Freezes server `i` with SIGSTOP: it keeps its ports but answers nothing.
    pub fn stop(&self, i: usize) -> anyhow::Result<()> {
        let node = &self.nodes[i];
        kill(node.pid()?, Signal::SIGSTOP).with_context(|| format!("SIGSTOP {}", node.name))?;
        node.stopped.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Thaws server `i` with SIGCONT after [`NatsCluster::stop`].
    pub fn cont(&self, i: usize) -> anyhow::Result<()> {
        let node = &self.nodes[i];
        kill(node.pid()?, Signal::SIGCONT).with_context(|| format!("SIGCONT {}", node.name))?;
        node.stopped.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Waits (up to [`READY`]) until JetStream is ready on every running, unstopped server:
    /// in a cluster, they all name the same JetStream meta leader on `/jsz`, one of them, and
    /// have their full pools of routes to one another on `/routez`; and each says it is healthy
    /// on `/healthz` (JetStream current with the meta leader, as are its streams and
    /// consumers). E.g. after [`NatsCluster::kill`] of the meta leader, until the others have
    /// elected one. Fails at once when a server exits, and with every log on a timeout.
    pub fn wait_ready(&mut self) -> anyhow::Result<()> {
        self.wait_ready_until(Instant::now() + READY)
    }

    fn wait_ready_until(&mut self, deadline: Instant) -> anyhow::Result<()> {
        loop {
            if let Some((name, status)) = self
                .nodes
                .iter_mut()
                .find_map(|node| Some((node.name.clone(), node.exited()?)))
            {
                bail!(
                    "nats-server {name} exited ({status}) before JetStream was ready\n{}",
                    self.logs()
                );
            }
            let last = match self.ready() {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                bail!(
                    "JetStream was not ready within {READY:?}: {last:#}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Whether JetStream is ready now (see [`NatsCluster::wait_ready`]); why not when not.
    fn ready(&self) -> anyhow::Result<()> {
        let live: Vec<&Node> = self.nodes.iter().filter(|node| node.live()).collect();
        ensure!(!live.is_empty(), "no nats-server is running");
        if self.clustered {
            let mut leaders = Vec::new();
            for node in &live {
                let jsz = node.jsz("")?;
                let leader = jsz["meta_cluster"]["leader"].as_str().unwrap_or_default();
                ensure!(
                    !leader.is_empty(),
                    "nats-server {} knows no JetStream meta leader yet",
                    node.name
                );
                leaders.push((node.name.as_str(), leader.to_owned()));
            }
            let leader = &leaders[0].1;
            ensure!(
                leaders.iter().all(|(_, l)| l == leader),
                "the servers name different JetStream meta leaders: {leaders:?}"
            );
            ensure!(
                live.iter().any(|node| &node.name == leader),
                "the JetStream meta leader {leader} is not running"
            );
            // Every route of the pool between every two running servers, so that no request
            // or reply is lost to a route still being set up.
            let mut pools = Vec::new();
            for node in &live {
                let routez = http_get_json(node.monitor_port, "/routez")
                    .with_context(|| format!("GET /routez of nats-server {}", node.name))?;
                let routes = routez["routes"].as_array().map_or(&[][..], Vec::as_slice);
                for peer in live.iter().filter(|peer| peer.name != node.name) {
                    let pool = routes
                        .iter()
                        .filter(|route| route["remote_name"] == peer.name.as_str())
                        .count();
                    pools.push((node.name.as_str(), peer.name.as_str(), pool));
                }
            }
            ensure!(
                pools
                    .iter()
                    .all(|&(_, _, pool)| pool > 0 && pool == pools[0].2),
                "routes between the servers are still being set up: {pools:?}"
            );
        }
        // Healthy: JetStream enabled and, in a cluster, current with the meta leader, as are
        // the server's streams and consumers.
        for node in &live {
            http_get_json(node.monitor_port, "/healthz")
                .with_context(|| format!("GET /healthz of nats-server {}", node.name))?;
        }
        Ok(())
    }

    /// The server leading the JetStream meta group, as that server itself says; `None` while no
    /// running server claims it. For one server without a cluster, always `None`.
    pub fn meta_leader(&self) -> anyhow::Result<Option<String>> {
        self.confirmed_leader("", |node, jsz| {
            jsz["meta_cluster"]["leader"]
                .as_str()
                .is_some_and(|leader| leader == node.name)
        })
    }

    /// The `server_name` of the server leading `stream` (of any account), as that server itself
    /// says on `/jsz?accounts=true&streams=true`; `None` while no running server claims it (no
    /// such stream, or an election under way). Fails when no running server answers.
    pub fn stream_leader(&self, stream: &str) -> anyhow::Result<Option<String>> {
        self.confirmed_leader("?accounts=true&streams=true", |node, jsz| {
            jsz["account_details"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|account| account["stream_detail"].as_array())
                .flatten()
                .filter(|detail| detail["name"] == stream)
                .any(|detail| detail["cluster"]["leader"] == node.name.as_str())
        })
    }

    /// The first running server whose `/jsz{query}` satisfies `leads`, asking each in turn;
    /// servers that do not answer are passed over, unless none answers.
    fn confirmed_leader(
        &self,
        query: &str,
        leads: impl Fn(&Node, &Value) -> bool,
    ) -> anyhow::Result<Option<String>> {
        let mut error = None;
        let mut answered = false;
        for node in self.nodes.iter().filter(|node| node.live()) {
            match node.jsz(query) {
                Ok(jsz) if leads(node, &jsz) => return Ok(Some(node.name.clone())),
                Ok(_) => answered = true,
                Err(e) => error = Some(e),
            }
        }
        match error {
            Some(e) if !answered => Err(e),
            None if !answered => bail!("no nats-server is running"),
            _ => Ok(None),
        }
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
    }
}

/// `n` distinct ports free on 127.0.0.1 a moment ago (all bound at once, then released).
fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|listener| Ok(listener.local_addr()?.port()))
        .collect()
}

/// `text` as a quoted string of nats-server's config format (JSON's quoting is a subset).
fn quote(text: &str) -> String {
    Value::from(text).to_string()
}

/// GETs `path` from an HTTP server on 127.0.0.1:`port` and parses its 200 body as JSON.
fn http_get_json(port: u16, path: &str) -> anyhow::Result<Value> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(3)))?;
    stream.set_write_timeout(Some(Duration::from_secs(3)))?;
    // HTTP/1.0: the server closes the connection after one plain (unchunked) response.
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let response = String::from_utf8(response).context("a response that is not UTF-8")?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("a response without an end of headers")?;
    let status = head.lines().next().unwrap_or_default();
    ensure!(
        status.split(' ').nth(1) == Some("200"),
        "answered {status}: {body}"
    );
    serde_json::from_str(body).context("a body that is not JSON")
}

impl NatsCluster {
    /// Starts a `tetherd` node of this cluster named `name`, with `env` (e.g. the fake API's),
    /// `shared` (where its sessions work) trusted, and a lease of `ttl`.
    pub fn node(
        &self,
        name: &str,
        mut env: Vec<(String, String)>,
        shared: &Path,
        ttl: &str,
    ) -> anyhow::Result<crate::Daemon> {
        env.extend([
            ("TETHER_CLUSTER_NATS".to_owned(), self.urls().join(",")),
            ("TETHER_CLUSTER_NODE".to_owned(), name.to_owned()),
            ("TETHER_CLUSTER_LEASE_TTL".to_owned(), ttl.to_owned()),
            (
                "TETHER_CLUSTER_REPLICAS".to_owned(),
                self.len().min(3).to_string(),
            ),
        ]);
        let mut daemon = crate::Daemon::prepare(env)?;
        daemon.trust(shared)?;
        daemon
            .spawn()
            .with_context(|| format!("node {name} did not start: {}", daemon.log()))?;
        Ok(daemon)
    }
}

/// A plain connection to the server at `url`, its `INFO` greeting read: the reading half
/// (buffered) and the writing half.
fn greeted(url: &str) -> anyhow::Result<(std::io::BufReader<TcpStream>, TcpStream)> {
    use std::io::BufRead;
    let addr = url.strip_prefix("nats://").context("a nats:// URL")?;
    let stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(READY))?;
    let mut reader = std::io::BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    ensure!(line.starts_with("INFO "), "greeted with {line}");
    Ok((reader, stream))
}

/// Publishes `payload` on `subject` through the server at `url`, speaking the NATS protocol
/// itself, and waits for JetStream's acknowledgement (a stream captures the subject); e.g. to
/// write a key of a KV bucket as another program would (`$KV.<bucket>.<key>`).
pub fn publish(url: &str, subject: &str, payload: &[u8]) -> anyhow::Result<Value> {
    use std::io::{BufRead, Read};
    let (mut reader, mut writer) = greeted(url)?;
    let mut line = String::new();
    write!(
        writer,
        "CONNECT {{\"verbose\":false,\"pedantic\":false}}\r\nSUB _INBOX.publish 1\r\nPING\r\n"
    )?;
    write!(writer, "PUB {subject} _INBOX.publish {}\r\n", payload.len())?;
    writer.write_all(payload)?;
    writer.write_all(b"\r\n")?;
    loop {
        line.clear();
        ensure!(reader.read_line(&mut line)? > 0, "the server hung up");
        if line.starts_with("PING") {
            writer.write_all(b"PONG\r\n")?;
        } else if line.starts_with("-ERR") {
            bail!("the server refused: {line}");
        } else if let Some(header) = line.strip_prefix("MSG ") {
            let len: usize = header
                .split_whitespace()
                .last()
                .context("a MSG without a size")?
                .parse()?;
            let mut body = vec![0; len + 2];
            reader.read_exact(&mut body)?;
            let ack: Value = serde_json::from_slice(&body[..len])?;
            ensure!(ack["error"].is_null(), "not stored: {ack}");
            return Ok(ack);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    /// Creates a file stream `name` of `replicas` replicas through the server at `url`, speaking
    /// the NATS protocol itself: a JetStream API request, its reply on an inbox. Asks again, as
    /// NATS clients do, when no reply comes (the reply can race the inbox's interest across the
    /// cluster's routes) or JetStream is briefly unavailable.
    fn create_stream(url: &str, name: &str, replicas: u32) -> anyhow::Result<Value> {
        let (mut reader, mut writer) = greeted(url)?;
        let mut line = String::new();
        let body = serde_json::json!({
            "name": name,
            "subjects": [format!("{name}.>")],
            "num_replicas": replicas,
        })
        .to_string();
        write!(
            writer,
            "CONNECT {{\"verbose\":false,\"pedantic\":false}}\r\nSUB _INBOX.test.* 1\r\nPING\r\n"
        )?;
        let deadline = Instant::now() + READY;
        for attempt in 1.. {
            let wait = deadline.saturating_duration_since(Instant::now());
            ensure!(!wait.is_zero(), "no reply within {READY:?}");
            write!(
                writer,
                "PUB $JS.API.STREAM.CREATE.{name} _INBOX.test.{attempt} {}\r\n{body}\r\n",
                body.len()
            )?;
            let reply_by = Instant::now() + wait.min(Duration::from_secs(3));
            let reply = loop {
                let left = reply_by.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break None;
                }
                reader.get_ref().set_read_timeout(Some(left))?;
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) => bail!("the server hung up"),
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break None,
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => break None,
                    Err(e) => return Err(e.into()),
                }
                if line.starts_with("PING") {
                    writer.write_all(b"PONG\r\n")?;
                } else if line.starts_with("-ERR") {
                    bail!("the server refused: {line}");
                } else if let Some(header) = line.strip_prefix("MSG ") {
                    let mut fields = header.split_whitespace();
                    let subject = fields.next().unwrap_or_default().to_owned();
                    let len: usize = fields.last().context("a MSG without a size")?.parse()?;
                    let mut payload = vec![0; len + 2];
                    reader.read_exact(&mut payload)?;
                    if subject == format!("_INBOX.test.{attempt}") {
                        break Some(serde_json::from_slice::<Value>(&payload[..len])?);
                    }
                }
            };
            match reply {
                // Not ready yet, or a meta leader that does not count every peer online yet
                // ("no suitable peers for placement"): asked again, as a daemon does.
                Some(reply)
                    if reply["error"]["code"] == 503 || reply["error"]["err_code"] == 10005 =>
                {
                    eprintln!("create_stream: {reply}; asking again");
                    std::thread::sleep(POLL);
                }
                Some(reply) => {
                    ensure!(reply["error"].is_null(), "stream not created: {reply}");
                    return Ok(reply);
                }
                None => eprintln!("create_stream: no reply to request {attempt}; asking again"),
            }
        }
        bail!("ran out of attempts")
    }

    /// Polls `what` until it gives `Some`, for at most [`READY`].
    fn eventually<T>(mut what: impl FnMut() -> anyhow::Result<Option<T>>) -> anyhow::Result<T> {
        let deadline = Instant::now() + READY;
        loop {
            let last = match what() {
                Ok(Some(value)) => return Ok(value),
                Ok(None) => anyhow::anyhow!("still none"),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(last.context(format!("nothing within {READY:?}")));
            }
            std::thread::sleep(POLL);
        }
    }

    #[test]
    fn a_cluster_elects_leaders_and_takes_back_a_killed_server() {
        let started = Instant::now();
        let mut cluster = NatsCluster::start(3).expect("a 3-server cluster starts");
        let ready = started.elapsed();
        assert_eq!(cluster.len(), 3);
        assert_eq!(
            cluster.urls(),
            (0..3).map(|i| cluster.url(i)).collect::<Vec<_>>()
        );
        assert_eq!(cluster.index_of("n2"), Some(2));
        assert_eq!(cluster.index_of("n3"), None);
        assert!(cluster.cluster_name().len() > "tether-test-".len());
        let config = std::fs::read_to_string(cluster.dir().join("n0.conf")).expect("n0's config");
        assert!(config.contains(cluster.cluster_name()), "{config}");
        let leader = eventually(|| cluster.meta_leader()).expect("a meta leader");
        assert!(cluster.index_of(&leader).is_some(), "{leader} is not ours");

        create_stream(&cluster.url(0), "TESTS", 3).expect("a stream of 3 replicas");
        let stream_leader =
            eventually(|| cluster.stream_leader("TESTS")).expect("the stream has a leader");
        assert!(cluster.index_of(&stream_leader).is_some());
        assert_eq!(cluster.stream_leader("NO-SUCH").expect("asked"), None);

        // Crash a server that leads nothing, so no election slows the test down.
        let victim = (0..3)
            .find(|&i| cluster.name(i) != leader && cluster.name(i) != stream_leader)
            .unwrap_or((cluster.index_of(&leader).expect("ours") + 1) % 3);
        cluster.kill(victim);
        cluster
            .wait_ready()
            .expect("two servers keep a meta leader");
        cluster
            .restart(victim)
            .expect("the killed server comes back");
        assert!(
            cluster
                .logs()
                .contains(&format!("==== nats-server n{victim} "))
        );

        // A frozen follower keeps nothing from being ready; thawed, it is counted again.
        cluster.stop(victim).expect("SIGSTOP");
        cluster
            .wait_ready()
            .expect("ready without the frozen server");
        cluster.cont(victim).expect("SIGCONT");
        cluster.wait_ready().expect("ready with the thawed server");
        eprintln!("ready after {ready:?}, whole test {:?}", started.elapsed());
        assert!(started.elapsed() < READY, "took {:?}", started.elapsed());
    }

    #[test]
    fn a_single_server_runs_jetstream_without_a_cluster() {
        let cluster = NatsCluster::start(1).expect("one server starts");
        assert_eq!(cluster.meta_leader().expect("asked"), None);
        create_stream(&cluster.url(0), "SOLO", 1).expect("a stream of 1 replica");
        assert_eq!(
            eventually(|| cluster.stream_leader("SOLO")).expect("led"),
            "n0"
        );
    }
}
