//! WebFetch against a local page server and the fake model API.

use axum::Router;
use axum::response::{Html, Redirect};
use axum::routing::get;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tether_daemon::llm::{AnthropicClient, Auth, LlmConfig, ModelCatalog, WebError, WebFetcher};
use tether_daemon::tools::{Net, ToolContext, Workspace};
use tether_tests::fake_anthropic::{FakeAnthropic, Script, Step};

async fn pages(hits: Arc<AtomicUsize>) -> String {
    let app = Router::new()
        .route(
            "/page",
            get(move || {
                hits.fetch_add(1, Ordering::SeqCst);
                async {
                    Html("<html><body><h1>Title</h1><p>The secret is <b>7</b>.</p></body></html>")
                }
            }),
        )
        .route("/moved", get(|| async { Redirect::temporary("/page") }))
        .route(
            "/away",
            get(|| async { Redirect::temporary("http://example.invalid/x") }),
        )
        .route("/big", get(|| async { "x".repeat(11 * 1024 * 1024) }))
        .route(
            "/gone",
            get(|| async { (axum::http::StatusCode::NOT_FOUND, "no") }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://127.0.0.1:{}", addr.port())
}

#[tokio::test]
async fn fetch_rules_redirects_limits_and_cache() {
    let hits = Arc::new(AtomicUsize::new(0));
    let base = pages(hits.clone()).await;
    let web = WebFetcher::new().expect("client");
    let page = web
        .fetch(&format!("{base}/moved"))
        .await
        .expect("same-host redirect is followed");
    assert!(
        page.text.contains("# Title") && page.text.contains("**7**"),
        "{}",
        page.text
    );
    web.fetch(&format!("{base}/page")).await.expect("page");
    web.fetch(&format!("{base}/page"))
        .await
        .expect("page again");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        2,
        "a URL fetched again within 15 minutes comes from the cache"
    );
    assert!(
        matches!(web.fetch(&format!("{base}/away")).await, Err(WebError::OtherHost { to, .. }) if to == "http://example.invalid/x")
    );
    assert!(matches!(
        web.fetch(&format!("{base}/big")).await,
        Err(WebError::TooLarge(_))
    ));
    assert!(matches!(
        web.fetch(&format!("{base}/gone")).await,
        Err(WebError::Status { status: 404, .. })
    ));
    assert!(matches!(
        web.fetch("ftp://example.com/").await,
        Err(WebError::BadUrl(_))
    ));
}

#[tokio::test]
async fn web_fetch_asks_the_fast_model_about_the_page() {
    let base = pages(Arc::new(AtomicUsize::new(0))).await;
    let fake = FakeAnthropic::start(Script::of([Step::text("The secret is 7.")]))
        .await
        .expect("fake");
    let config = LlmConfig {
        base_url: fake.url(),
        ..LlmConfig::default()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut ctx = ToolContext::detached(Arc::new(Workspace::new(
        dir.path().to_owned(),
        Vec::new(),
        dir.path().join(".s"),
    )));
    ctx.net = Some(Arc::new(Net {
        llm: Arc::new(AnthropicClient::new(config, Auth::api_key("k")).expect("client")),
        catalog: ModelCatalog::default(),
        web: Arc::new(WebFetcher::new().expect("web")),
        fast_model: "haiku".into(),
    }));
    let tools = tether_daemon::tools::builtin();
    let tool = tools.find("WebFetch").expect("registered");
    let out = tool
        .run(
            json!({"url": format!("{base}/page"), "prompt": "What is the secret?"}),
            &ctx,
        )
        .await;
    assert!(!out.is_error, "{out:?}");
    assert!(
        out.content
            .as_str()
            .is_some_and(|s| s.starts_with("The secret is 7."))
    );
    let req = &fake.message_requests()[0].body;
    assert_eq!(req["model"], "claude-haiku-5-5");
    let asked = req["messages"][0]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(
        asked.contains("# Title") && asked.contains("What is the secret?"),
        "{asked}"
    );
    assert!(
        ctx.spent.lock().expect("lock").any,
        "the fast model's usage is counted"
    );
}
