//! The proxy's host rules, its request parsing, and one proxy on a temp socket: refusals
//! without a connection, a forwarded request, malformed and oversized heads.

use super::*;

#[test]
fn which_hosts_the_rules_allow() {
    let allowed = Allowed::new(&[
        "example.com".into(),
        "*.github.com".into(),
        "api.test:8443".into(),
        "127.0.0.1".into(),
        "0.1".into(),
        "[::1]:8080".into(),
        "*".into(),
        "bad:port".into(),
    ]);
    // (host, port, allowed)
    let table = [
        ("example.com", 443, true),
        ("EXAMPLE.com.", 80, true),
        ("www.example.com", 443, false),
        ("notexample.com", 443, false),
        ("github.com", 443, false),
        ("api.github.com", 443, true),
        ("a.b.github.com", 22, true),
        ("evilgithub.com", 443, false),
        ("api.test", 8443, true),
        ("api.test", 443, false),
        ("127.0.0.1", 80, true),
        ("127.0.0.2", 80, false),
        // An address is nobody's subdomain, and `0.1` is no rule for one.
        ("10.0.0.1", 80, false),
        ("[::1]", 8080, true),
        ("::1", 8080, true),
        ("::1", 80, false),
        ("bad", 80, false),
        ("anything.org", 80, false),
    ];
    for (host, port, want) in table {
        assert_eq!(allowed.allows(host, port), want, "{host}:{port}");
    }
    assert!(!Allowed::new(&[]).allows("example.com", 443));
}

fn parsed(head: &str) -> Result<Option<(Request, usize)>, Refusal> {
    parse(head.as_bytes())
}

#[test]
fn connect_and_absolute_requests_parse() {
    let head = "CONNECT Example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\nrest";
    let (req, len) = parsed(head).ok().flatten().expect("a tunnel");
    assert_eq!(
        req,
        Request::Tunnel {
            host: "example.com".into(),
            port: 443
        }
    );
    assert_eq!(&head[len..], "rest");

    let head = "GET http://api.test:8080/a?b=1 HTTP/1.1\r\nHost: elsewhere\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n";
    let Some((
        Request::Forward {
            host,
            port,
            head: sent,
        },
        _,
    )) = parsed(head).ok().flatten()
    else {
        panic!("a forward")
    };
    assert_eq!((host.as_str(), port), ("api.test", 8080));
    assert_eq!(
        String::from_utf8_lossy(&sent),
        "GET /a?b=1 HTTP/1.1\r\nHost: api.test:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );

    let Some((Request::Forward { port, head, .. }, _)) =
        parsed("GET http://x.test HTTP/1.0\r\n\r\n").ok().flatten()
    else {
        panic!("a forward")
    };
    assert_eq!(port, 80);
    assert!(head.starts_with(b"GET / HTTP/1.0\r\nHost: x.test\r\n"));

    // Incomplete: wait for more.
    assert_eq!(parsed("CONNECT a.test:443 HTTP/1.1\r\n"), Ok(None));
}

#[test]
fn malformed_requests_get_400_and_oversized_heads_431() {
    let status = |head: &str| parsed(head).err().map(|r| r.status);
    for head in [
        "hello\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
        "GET https://a.test/ HTTP/1.1\r\n\r\n",
        "CONNECT a.test HTTP/1.1\r\n\r\n",
        "CONNECT a.test:99999 HTTP/1.1\r\n\r\n",
        "CONNECT a%2etest:443 HTTP/1.1\r\n\r\n",
        "GET http://user@a.test/ HTTP/1.1\r\n\r\n",
        "GET http://a.test:x/ HTTP/1.1\r\n\r\n",
        "GET http:///x HTTP/1.1\r\n\r\n",
        "GET http://a.test/ HTTP/2.0\r\n\r\n",
    ] {
        assert_eq!(status(head), Some(400), "{head:?}");
    }
    let long = format!(
        "GET http://a.test/ HTTP/1.1\r\nX: {}\r\n",
        "y".repeat(HEAD_LIMIT)
    );
    assert_eq!(status(&long), Some(431));
    let many: String = (0..=MAX_HEADERS).map(|i| format!("X{i}: 1\r\n")).collect();
    assert_eq!(
        status(&format!("GET http://a.test/ HTTP/1.1\r\n{many}\r\n")),
        Some(431)
    );
    let refusal = Refusal::new(403, "a.test:443 is not allowed");
    let text = String::from_utf8_lossy(&refusal.response()).into_owned();
    assert!(text.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\ntether sandbox proxy: a.test:443 is not allowed\n"));
}

/// Sends `request` to the proxy on `socket` and reads until it closes.
async fn exchange(socket: &Path, request: &[u8]) -> String {
    let mut s = UnixStream::connect(socket).await.expect("connect");
    s.write_all(request).await.expect("write");
    // A refusal with the request unread may end in a reset after the answer.
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    let read_all = async {
        while let Ok(n @ 1..) = s.read(&mut chunk).await {
            out.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read_all)
        .await
        .expect("the proxy closed the connection");
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn the_proxy_forwards_allowed_hosts_and_refuses_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("p/s.sock");
    // An upstream that answers one request and counts them.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = upstream.local_addr().expect("addr").port();
    let server = tokio::spawn(async move {
        let (mut s, _) = upstream.accept().await.expect("accept");
        let mut buf = vec![0u8; 4096];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi")
            .await
            .expect("write");
        String::from_utf8_lossy(&got).into_owned()
    });
    let proxy = Proxy::start(socket.clone(), Allowed::new(&["localhost".into()])).expect("start");
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&socket)
            .expect("socket")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let refused = exchange(
        &socket,
        format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(refused.contains("not in sandbox.network.allowedDomains"));
    let refused = exchange(&socket, b"CONNECT elsewhere.test:443 HTTP/1.1\r\n\r\n").await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");

    let bad = exchange(&socket, b"BLAH\r\n\r\n").await;
    assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
    let mut huge = b"GET http://localhost/ HTTP/1.1\r\nX: ".to_vec();
    huge.extend(std::iter::repeat_n(b'y', HEAD_LIMIT + 10));
    let big = exchange(&socket, &huge).await;
    assert!(big.starts_with("HTTP/1.1 431"), "{big}");

    let answer = exchange(
        &socket,
        format!("GET http://localhost:{port}/x HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(answer.ends_with("\r\n\r\nhi"), "{answer}");
    let seen = server.await.expect("server");
    assert!(seen.starts_with("GET /x HTTP/1.1\r\n"), "{seen}");

    // Stopping it removes its socket.
    drop(proxy);
    assert!(!socket.exists());
}

#[test]
fn the_prelude_starts_the_relay_before_the_command() {
    let words = prelude(Path::new("/usr/bin/tetherd"), Path::new("/d/it's.sock"));
    assert_eq!(words[..2], ["bash", "-c"]);
    let script = &words[2];
    assert!(script.contains(
        "'/usr/bin/tetherd' sandbox-relay --listen 127.0.0.1:3128 --to '/d/it'\\''s.sock'"
    ));
    assert!(script.contains("https_proxy=http://127.0.0.1:3128"));
    assert!(script.ends_with("exec \"$@\""));
}

#[tokio::test]
async fn a_tunnel_carries_bytes_both_ways() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("s.sock");
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = upstream.local_addr().expect("addr").port();
    let echo = tokio::spawn(async move {
        let (mut s, _) = upstream.accept().await.expect("accept");
        let (mut r, mut w) = s.split();
        tokio::io::copy(&mut r, &mut w).await.expect("echo");
    });
    let _proxy = Proxy::start(socket.clone(), Allowed::new(&["localhost".into()])).expect("start");
    let mut s = UnixStream::connect(&socket).await.expect("connect");
    // The first bytes may come with the request.
    s.write_all(format!("CONNECT localhost:{port} HTTP/1.1\r\n\r\nping").as_bytes())
        .await
        .expect("write");
    let mut got = Vec::new();
    let mut chunk = [0u8; 256];
    let want = b"HTTP/1.1 200 Connection Established\r\n\r\nping".as_slice();
    while got.len() < want.len() {
        let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut chunk))
            .await
            .expect("in time")
            .expect("read");
        assert!(n > 0, "closed early: {got:?}");
        got.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(got, want);
    s.shutdown().await.expect("shutdown");
    tokio::time::timeout(Duration::from_secs(20), echo)
        .await
        .expect("the tunnel ended")
        .expect("echo");
}

#[tokio::test]
async fn connections_over_the_limit_get_503() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("s.sock");
    let _proxy = Proxy::start(socket.clone(), Allowed::default()).expect("start");
    // Each holds a slot: it sends no head (the proxy waits HEAD_TIMEOUT for one).
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        held.push(UnixStream::connect(&socket).await.expect("connect"));
    }
    let busy = exchange(&socket, b"CONNECT a.test:443 HTTP/1.1\r\n\r\n").await;
    assert!(busy.starts_with("HTTP/1.1 503"), "{busy}");
    // One leaves, and a slot opens.
    drop(held.pop());
    let mut answer = String::new();
    for _ in 0..200 {
        answer = exchange(&socket, b"CONNECT a.test:443 HTTP/1.1\r\n\r\n").await;
        if !answer.starts_with("HTTP/1.1 503") {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
}

#[test]
fn a_name_reaches_only_public_addresses() {
    for (ip, public) in [
        ("127.0.0.1", false),
        ("10.1.2.3", false),
        ("172.16.0.9", false),
        ("192.168.1.1", false),
        ("169.254.169.254", false),
        ("100.64.0.1", false),
        ("0.0.0.0", false),
        ("::1", false),
        ("fe80::1", false),
        ("fd00::1", false),
        ("::ffff:127.0.0.1", false),
        ("::ffff:10.0.0.1", false),
        ("93.184.216.34", true),
        ("2606:2800:220:1::1", true),
    ] {
        let addr: std::net::IpAddr = ip.parse().expect("address");
        assert_eq!(is_public(addr), public, "{ip}");
    }
}
