//! Credentials and extra headers: `ANTHROPIC_API_KEY` (`x-api-key`), `ANTHROPIC_AUTH_TOKEN`
//! (`Authorization: Bearer`), or an `apiKeyHelper` command whose stdout is the key (cached for
//! five minutes, re-run after a 401), and `ANTHROPIC_CUSTOM_HEADERS`.
//!
//! Invariant: a secret's `Debug` is redacted and no error message contains one.

use super::error::LlmError;
use std::fmt;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// How long a key from the helper is used before it is asked again.
const HELPER_TTL: Duration = Duration::from_secs(5 * 60);
/// How long the helper may take.
const HELPER_TIMEOUT: Duration = Duration::from_secs(30);

/// A secret string whose `Debug` is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A secret from the environment or a helper.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A credential, as it goes on the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// `x-api-key`.
    ApiKey(Secret),
    /// `Authorization: Bearer`.
    Bearer(Secret),
}

/// Where credentials come from.
#[derive(Debug)]
pub struct Auth {
    fixed: Option<Credential>,
    helper: Option<String>,
    cached: Mutex<Option<(Secret, Instant)>>,
}

impl Auth {
    /// `ANTHROPIC_AUTH_TOKEN`, else `ANTHROPIC_API_KEY`, else the helper command.
    pub fn from_env(helper: Option<String>) -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let fixed = var("ANTHROPIC_AUTH_TOKEN")
            .map(|t| Credential::Bearer(Secret(t)))
            .or_else(|| var("ANTHROPIC_API_KEY").map(|k| Credential::ApiKey(Secret(k))));
        Self::new(fixed, helper)
    }

    /// Explicit credentials (tests, configuration).
    pub fn new(fixed: Option<Credential>, helper: Option<String>) -> Self {
        Self {
            fixed,
            helper: helper.filter(|h| !h.trim().is_empty()),
            cached: Mutex::new(None),
        }
    }

    /// An API key credential.
    pub fn api_key(key: impl Into<String>) -> Self {
        Self::new(Some(Credential::ApiKey(Secret(key.into()))), None)
    }

    /// Which kind of credential is configured, never its value.
    pub fn describe(&self) -> Option<&'static str> {
        match (&self.fixed, &self.helper) {
            (Some(Credential::Bearer(_)), _) => Some("ANTHROPIC_AUTH_TOKEN (bearer token)"),
            (Some(Credential::ApiKey(_)), _) => Some("ANTHROPIC_API_KEY"),
            (None, Some(_)) => Some(
                "a key command (TETHER_API_KEY_HELPER or apiKeyHelper in ~/.claude/settings.json)",
            ),
            (None, None) => None,
        }
    }

    /// Whether a 401 may be cured by asking the helper again.
    pub fn has_helper(&self) -> bool {
        self.fixed.is_none() && self.helper.is_some()
    }

    /// The credential to send now.
    pub async fn credential(&self) -> Result<Credential, LlmError> {
        if let Some(c) = &self.fixed {
            return Ok(c.clone());
        }
        let Some(command) = &self.helper else {
            return Err(LlmError::NoCredentials);
        };
        let mut cached = self.cached.lock().await;
        if let Some((key, _)) = cached.as_ref().filter(|(_, at)| at.elapsed() < HELPER_TTL) {
            return Ok(Credential::ApiKey(key.clone()));
        }
        let key = run_helper(command).await?;
        *cached = Some((key.clone(), Instant::now()));
        Ok(Credential::ApiKey(key))
    }

    /// Forgets the helper's cached key (after a 401).
    pub async fn invalidate(&self) {
        *self.cached.lock().await = None;
    }
}

async fn run_helper(command: &str) -> Result<Secret, LlmError> {
    let run = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(HELPER_TIMEOUT, run)
        .await
        .map_err(|_| {
            LlmError::KeyHelper(format!(
                "it did not finish within {}s",
                HELPER_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|e| LlmError::KeyHelper(format!("cannot run it: {e}")))?;
    if !out.status.success() {
        // stderr may be useful but must not leak a key: keep only its first line, shortened.
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect::<String>();
        return Err(LlmError::KeyHelper(format!(
            "it exited with {}: {first}",
            out.status
        )));
    }
    let key = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if key.is_empty() {
        return Err(LlmError::KeyHelper("it printed nothing".into()));
    }
    Ok(Secret(key))
}

/// Parses `ANTHROPIC_CUSTOM_HEADERS`: one `Name: value` per line; malformed lines are reported.
pub fn custom_headers(spec: &str) -> Result<Vec<(String, String)>, LlmError> {
    spec.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|line| {
            let (name, value) = line.split_once(':').ok_or_else(|| {
                LlmError::Config(format!("custom header line without a colon: {line:?}"))
            })?;
            let name = name.trim();
            if name.is_empty() {
                return Err(LlmError::Config(format!(
                    "custom header line without a name: {line:?}"
                )));
            }
            Ok((name.to_owned(), value.trim().to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_in_debug() {
        let c = Credential::ApiKey(Secret("sk-ant-very-secret".into()));
        assert!(!format!("{c:?}").contains("very-secret"));
    }

    #[test]
    fn custom_headers_parse() {
        let h = custom_headers("X-One: 1\n\n  X-Two:  two words \n").expect("parses");
        assert_eq!(
            h,
            vec![
                ("X-One".into(), "1".into()),
                ("X-Two".into(), "two words".into())
            ]
        );
        assert!(custom_headers("nonsense").is_err());
    }

    #[tokio::test]
    async fn helper_output_is_the_key_and_is_cached() {
        let dir = tempfile::tempdir().expect("tempdir");
        let counter = dir.path().join("n");
        let cmd = format!("echo x >> {0}; echo key-$(wc -l < {0})", counter.display());
        let auth = Auth::new(None, Some(cmd));
        assert!(auth.has_helper());
        let first = auth.credential().await.expect("key");
        assert_eq!(first, Credential::ApiKey(Secret("key-1".into())));
        assert_eq!(auth.credential().await.expect("key"), first, "cached");
        auth.invalidate().await;
        assert_eq!(
            auth.credential().await.expect("key"),
            Credential::ApiKey(Secret("key-2".into()))
        );
        let failing = Auth::new(None, Some("exit 3".into()));
        assert!(matches!(
            failing.credential().await,
            Err(LlmError::KeyHelper(_))
        ));
        assert!(matches!(
            Auth::new(None, None).credential().await,
            Err(LlmError::NoCredentials)
        ));
    }
}
