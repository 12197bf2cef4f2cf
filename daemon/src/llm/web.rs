//! Fetching web pages for the WebFetch tool: redirects only within the same host (and http →
//! https), at most 5; 10 MB and 30 s at most; HTML converted to Markdown; a 15-minute cache per
//! URL. Lives here because this module is the daemon's one window to the network.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Largest page fetched.
pub const MAX_PAGE_BYTES: usize = 10 * 1024 * 1024;
/// How long a fetched page is reused.
pub const CACHE_TTL: Duration = Duration::from_secs(15 * 60);

/// A fetched page.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// The URL it came from after redirects.
    pub url: String,
    /// Its content type.
    pub content_type: String,
    /// Its text (Markdown for HTML).
    pub text: String,
}

/// Why a page could not be fetched.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WebError {
    /// The URL is not http(s) or does not parse.
    #[error("invalid URL {0:?}: only http and https URLs can be fetched")]
    BadUrl(String),
    /// The server redirected to another host.
    #[error("{from} redirects to another host: {to} (fetch that URL if you trust it)")]
    OtherHost {
        /// The URL asked for.
        from: String,
        /// Where it points.
        to: String,
    },
    /// DNS, connect, TLS or read failure.
    #[error("cannot fetch {url}: {reason}")]
    Network {
        /// The URL.
        url: String,
        /// What failed.
        reason: String,
    },
    /// A non-success status.
    #[error("{url} answered HTTP {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
    },
    /// Over the size limit.
    #[error("{0} is larger than 10 MB")]
    TooLarge(String),
}

/// Fetches pages, with a cache.
#[derive(Debug)]
pub struct WebFetcher {
    http: reqwest::Client,
    cache: Mutex<HashMap<String, (Instant, Page)>>,
}

impl WebFetcher {
    /// A fetcher with the limits above.
    pub fn new() -> Result<Self, WebError> {
        let policy = reqwest::redirect::Policy::custom(|attempt| {
            if attempt.previous().len() >= 5 {
                return attempt.error("more than 5 redirects");
            }
            let same_host = attempt
                .previous()
                .first()
                .is_some_and(|first| first.host_str() == attempt.url().host_str());
            if same_host {
                attempt.follow()
            } else {
                attempt.stop()
            }
        });
        let http = reqwest::Client::builder()
            .redirect(policy)
            .timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("tether/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| WebError::Network {
                url: String::new(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            http,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// Fetches `url` (an `http://` URL is upgraded to `https://` first, except on localhost).
    pub async fn fetch(&self, url: &str) -> Result<Page, WebError> {
        let mut parsed = reqwest::Url::parse(url).map_err(|_| WebError::BadUrl(url.to_owned()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(WebError::BadUrl(url.to_owned()));
        }
        let local = matches!(parsed.host_str(), Some("localhost" | "127.0.0.1" | "::1"));
        if parsed.scheme() == "http" && !local {
            let _ = parsed.set_scheme("https");
        }
        let key = parsed.to_string();
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .filter(|(at, _)| at.elapsed() < CACHE_TTL)
            .map(|(_, page)| page.clone());
        if let Some(page) = cached {
            return Ok(page);
        }
        let net = |e: reqwest::Error| WebError::Network {
            url: key.clone(),
            reason: e.without_url().to_string(),
        };
        let mut response = self.http.get(parsed.clone()).send().await.map_err(net)?;
        let status = response.status();
        if status.is_redirection() {
            let to = response
                .headers()
                .get("location")
                .and_then(|l| l.to_str().ok())
                .map(|l| {
                    parsed
                        .join(l)
                        .map(|u| u.to_string())
                        .unwrap_or_else(|_| l.to_owned())
                })
                .unwrap_or_default();
            return Err(WebError::OtherHost { from: key, to });
        }
        if !status.is_success() {
            return Err(WebError::Status {
                url: key,
                status: status.as_u16(),
            });
        }
        let final_url = response.url().to_string();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|c| c.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(net)? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_PAGE_BYTES {
                return Err(WebError::TooLarge(key));
            }
        }
        let raw = String::from_utf8_lossy(&body).into_owned();
        let text = if content_type.contains("html") || raw.trim_start().starts_with('<') {
            htmd::convert(&raw).unwrap_or(raw)
        } else {
            raw
        };
        let page = Page {
            url: final_url,
            content_type,
            text,
        };
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, (Instant::now(), page.clone()));
        Ok(page)
    }
}
