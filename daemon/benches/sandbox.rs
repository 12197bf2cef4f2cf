//! What the Bash sandbox adds to a command's start: the median wall time of `bash -c true`
//! started directly and under the sandbox's `bwrap` command line (namespaces, read-only root,
//! masks), and of a Bash tool call of `true` with and without the sandbox (the tool's spare
//! shell absorbs most of a start). With `network.allowedDomains`: what starting the network
//! relay adds to a sandboxed shell's start, and a small HTTP request's latency direct, through
//! the session's proxy, and through the relay and the proxy.
//! Usage: `cargo bench -p tether-daemon --bench sandbox -- [N]` (default 200 runs each). Prints
//! numbers; asserts nothing.

use serde_json::json;
use std::io::{Read as _, Write as _};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tether_daemon::sandbox::{Paths, Sandbox, Settings};
use tether_daemon::tools::{ToolContext, Workspace};

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

fn time_spawns(n: usize, wrap: &[std::ffi::OsString]) -> Duration {
    let times = (0..n)
        .map(|_| {
            let mut cmd = match wrap.split_first() {
                Some((bwrap, args)) => {
                    let mut c = Command::new(bwrap);
                    c.args(args).arg("bash");
                    c
                }
                None => Command::new("bash"),
            };
            cmd.args(["-c", "true"])
                .stdin(Stdio::null())
                .stdout(Stdio::null());
            let t = Instant::now();
            let ok = cmd.status().is_ok_and(|s| s.success());
            let took = t.elapsed();
            if !ok {
                eprintln!("a run failed");
            }
            took
        })
        .collect();
    median(times)
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => return eprintln!("tempdir: {e}"),
    };
    let root = dir.path().join("project");
    let scratch = dir.path().join("data/scratch/s");
    for d in [&root, &scratch] {
        if let Err(e) = std::fs::create_dir_all(d) {
            return eprintln!("mkdir: {e}");
        }
    }
    let sandbox = Sandbox::new(
        Settings {
            enabled: true,
            auto_allow: true,
            allow_unsandboxed: true,
            ..Settings::default()
        },
        Paths {
            home: std::env::var_os("HOME").map(Into::into),
            roots: vec![root.clone()],
            scratch: scratch.clone(),
            data_dir: dir.path().join("data"),
            hidden: Vec::new(),
            proxy_socket: dir.path().join("data/proxy/s.sock"),
        },
    );
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => return eprintln!("runtime: {e}"),
    };
    if let Err(why) = rt.block_on(tether_daemon::sandbox::probe(&sandbox.bwrap)) {
        return eprintln!("no sandbox here: {why}");
    }
    let plain = time_spawns(n, &[]);
    let boxed = time_spawns(n, &sandbox.wrap(None));
    println!("start of `bash -c true`, median of {n}:");
    println!("  direct         {:>8.2} ms", plain.as_secs_f64() * 1e3);
    println!("  in the sandbox {:>8.2} ms", boxed.as_secs_f64() * 1e3);
    println!(
        "  added          {:>8.2} ms",
        (boxed.as_secs_f64() - plain.as_secs_f64()) * 1e3
    );
    // Through the Bash tool: each call's spare is started in the background after the call
    // before, so the call itself mostly pays for handing over the script.
    let tool = |sandboxed: bool| {
        let ws = Workspace::new(root.clone(), Vec::new(), scratch.clone());
        if sandboxed {
            ws.set_sandbox(Some(sandbox.clone()));
        }
        let mut ctx = ToolContext::detached(Arc::new(ws));
        ctx.progress = Arc::new(|_| {});
        let Some(bash) = tether_daemon::tools::builtin().find("Bash") else {
            eprintln!("no Bash tool");
            return Duration::ZERO;
        };
        rt.block_on(async {
            let mut times = Vec::with_capacity(n);
            for _ in 0..n {
                let t = Instant::now();
                let out = bash.run(json!({"command": "true"}), &ctx).await;
                times.push(t.elapsed());
                if out.is_error {
                    eprintln!("a call failed: {:?}", out.content);
                }
                // Give the spare time to start, as the model's think time would.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            median(times)
        })
    };
    let plain = tool(false);
    let boxed = tool(true);
    println!("Bash tool call of `true` (spare shell warm), median of {n}:");
    println!("  unsandboxed    {:>8.2} ms", plain.as_secs_f64() * 1e3);
    println!("  sandboxed      {:>8.2} ms", boxed.as_secs_f64() * 1e3);

    // The network: a proxy for 127.0.0.1, a local server, the relay as the sandbox runs it.
    let _in_runtime = rt.enter();
    let mut networked = sandbox.clone();
    networked.settings.allowed_domains = vec!["127.0.0.1".into()];
    networked.relay = env!("CARGO_BIN_EXE_tetherd").into();
    let proxy = match tether_daemon::sandbox::proxy::Proxy::start(
        networked.proxy_socket.clone(),
        networked.network().unwrap_or_default(),
    ) {
        Ok(p) => p,
        Err(e) => return eprintln!("proxy: {e}"),
    };
    let plain = time_spawns(n, &sandbox.wrap(None));
    let relayed = time_spawns(n, &networked.wrap(Some(proxy.socket())));
    println!("sandboxed `bash -c true` start, median of {n}:");
    println!("  no network     {:>8.2} ms", plain.as_secs_f64() * 1e3);
    println!("  with the relay {:>8.2} ms", relayed.as_secs_f64() * 1e3);
    println!(
        "  added          {:>8.2} ms",
        (relayed.as_secs_f64() - plain.as_secs_f64()) * 1e3
    );
    let server = match std::net::TcpListener::bind("127.0.0.1:0") {
        Ok(l) => l,
        Err(e) => return eprintln!("server: {e}"),
    };
    let Ok(port) = server.local_addr().map(|a| a.port()) else {
        return eprintln!("no server address");
    };
    std::thread::spawn(move || serve(server));
    let relay_port = match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(a) => a.port(),
        Err(e) => return eprintln!("relay port: {e}"),
    };
    let relay = Command::new(env!("CARGO_BIN_EXE_tetherd"))
        .args([
            "sandbox-relay",
            "--listen",
            &format!("127.0.0.1:{relay_port}"),
            "--to",
        ])
        .arg(proxy.socket())
        .stdout(Stdio::piped())
        .spawn();
    let mut relay = match relay {
        Ok(r) => r,
        Err(e) => return eprintln!("relay: {e}"),
    };
    let mut ready = [0u8; 10];
    if relay
        .stdout
        .take()
        .map(|mut o| o.read_exact(&mut ready))
        .is_none()
    {
        return eprintln!("the relay did not start");
    }
    let origin = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    let absolute =
        format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    let direct = time_requests(
        n,
        || std::net::TcpStream::connect(("127.0.0.1", port)).map(Stream::Tcp),
        &origin,
    );
    let proxied = time_requests(
        n,
        || std::os::unix::net::UnixStream::connect(proxy.socket()).map(Stream::Unix),
        &absolute,
    );
    let relayed = time_requests(
        n,
        || std::net::TcpStream::connect(("127.0.0.1", relay_port)).map(Stream::Tcp),
        &absolute,
    );
    let _ = relay.kill();
    let _ = relay.wait();
    println!("HTTP GET to a local server (connect, request, answer, close), median of {n}:");
    println!(
        "  direct               {:>8.3} ms",
        direct.as_secs_f64() * 1e3
    );
    println!(
        "  through the proxy    {:>8.3} ms",
        proxied.as_secs_f64() * 1e3
    );
    println!(
        "  relay and proxy      {:>8.3} ms",
        relayed.as_secs_f64() * 1e3
    );
}

/// Answers every request on `server` with a short body and closes.
fn serve(server: std::net::TcpListener) {
    for stream in server.incoming() {
        let Ok(mut s) = stream else { continue };
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match s.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                _ => break,
            }
        }
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    }
}

enum Stream {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

/// The median time of `n` requests, each on a new connection from `connect`.
fn time_requests(
    n: usize,
    connect: impl Fn() -> std::io::Result<Stream>,
    request: &str,
) -> Duration {
    let once = || -> std::io::Result<Duration> {
        let t = Instant::now();
        let mut out = Vec::new();
        match connect()? {
            Stream::Tcp(mut s) => {
                s.write_all(request.as_bytes())?;
                s.read_to_end(&mut out)?;
            }
            Stream::Unix(mut s) => {
                s.write_all(request.as_bytes())?;
                s.read_to_end(&mut out)?;
            }
        }
        if !out.ends_with(b"ok") {
            eprintln!("a request failed: {}", String::from_utf8_lossy(&out));
        }
        Ok(t.elapsed())
    };
    let times = (0..n).filter_map(|_| once().ok()).collect();
    median(times)
}
