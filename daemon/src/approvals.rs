//! One-time approval tokens: a token answers one permission request (or question) with one of
//! the answers it allows, until it expires. It is signed (HMAC-SHA-256) with a key the daemon
//! keeps in its private data directory (`approval.key`, 64 random bytes, mode 0600), so whoever holds a token
//! can answer from any shell that reaches the daemon (`tether approve`), and nobody can make
//! one. Hooks (`PermissionRequest`, `Notification`) get the token of their request.
//!
//! Invariant: a token authorizes exactly its session, its request and its answers, before its
//! expiry, and nothing more; which answer wins is the broker's business, as for any answer.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{KeyInit, Mac};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tether_proto::{PermissionDecision, SessionId};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// How tokens start; a later format gets another prefix.
const PREFIX: &str = "tat1";
/// How long a token lasts unless configured (`approvals.token_ttl`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);

/// Mints and checks tokens with the daemon's key.
pub struct Approvals {
    /// As long as SHA-256's block, HMAC's own key size.
    key: [u8; 64],
    ttl: Duration,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals").field("ttl", &self.ttl).finish()
    }
}

/// What a valid token allows.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Grant {
    /// The session.
    #[serde(rename = "s")]
    pub session: SessionId,
    /// The request.
    #[serde(rename = "r")]
    pub request_id: String,
    /// The answers it may give.
    #[serde(rename = "a")]
    pub allowed: Vec<PermissionDecision>,
    /// Seconds since the Unix epoch after which it is refused.
    #[serde(rename = "e")]
    pub expires: u64,
}

/// Why a token is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refused {
    /// It is not a token at all (cut short, mistyped).
    #[error("this is not an approval token (it may have been cut short when copied)")]
    Malformed,
    /// Its signature is not this daemon's.
    #[error("this token was not issued by this daemon (its signature does not match)")]
    Forged,
    /// It expired.
    #[error("this token expired {0} s ago; answer from a terminal attached to the session")]
    Expired(u64),
    /// It does not allow that answer.
    #[error("this token allows {allowed}, not {asked}")]
    NotAllowed {
        /// The answer asked for.
        asked: String,
        /// What it allows.
        allowed: String,
    },
}

/// Why the key could not be read or made.
#[derive(Debug, thiserror::Error)]
#[error("cannot read or create the approval key {path}: {source}")]
pub struct KeyError {
    path: String,
    #[source]
    source: std::io::Error,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Approvals {
    /// The approvals of the daemon whose data directory is `data_dir`: its key is read from
    /// `approval.key` there, made at the first start. Tokens last `ttl`.
    pub fn open(data_dir: &Path, ttl: Duration) -> Result<Self, KeyError> {
        let path = data_dir.join("approval.key");
        let fail = |source| KeyError {
            path: path.display().to_string(),
            source,
        };
        // Made once; a key that cannot be read is an error, never silently replaced (that
        // would void every token given out).
        let key = match std::fs::read(&path) {
            Ok(bytes) if bytes.len() == 64 => bytes,
            Ok(bytes) => {
                return Err(fail(std::io::Error::other(format!(
                    "it holds {} bytes, not 64; remove it to make a new key (outstanding tokens stop working)",
                    bytes.len()
                ))));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut fresh = [0u8; 64];
                getrandom::fill(&mut fresh).map_err(|e| fail(std::io::Error::other(e)))?;
                tether_proto::private::write(&path, &fresh).map_err(fail)?;
                fresh.to_vec()
            }
            Err(e) => return Err(fail(e)),
        };
        let mut fixed = [0u8; 64];
        fixed.copy_from_slice(&key);
        Ok(Self { key: fixed, ttl })
    }

    fn mac(&self) -> HmacSha256 {
        <HmacSha256 as KeyInit>::new(&self.key.into())
    }

    /// A token for `request_id` of `session`, allowing `allowed`, for the configured time.
    pub fn mint(
        &self,
        session: &SessionId,
        request_id: &str,
        allowed: Vec<PermissionDecision>,
    ) -> String {
        self.mint_until(Grant {
            session: session.clone(),
            request_id: request_id.to_owned(),
            allowed,
            expires: now() + self.ttl.as_secs(),
        })
    }

    fn mint_until(&self, grant: Grant) -> String {
        let payload = B64.encode(serde_json::to_vec(&grant).unwrap_or_default());
        let mut mac = self.mac();
        mac.update(payload.as_bytes());
        let signature = B64.encode(mac.finalize().into_bytes());
        format!("{PREFIX}.{payload}.{signature}")
    }

    /// What `token` allows, once its signature and expiry are checked.
    pub fn check(&self, token: &str) -> Result<Grant, Refused> {
        let mut parts = token.trim().split('.');
        let (Some(PREFIX), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Refused::Malformed);
        };
        let signature = B64.decode(signature).map_err(|_| Refused::Malformed)?;
        let mut mac = self.mac();
        mac.update(payload.as_bytes());
        mac.verify_slice(&signature).map_err(|_| Refused::Forged)?;
        let bytes = B64.decode(payload).map_err(|_| Refused::Malformed)?;
        let grant: Grant = serde_json::from_slice(&bytes).map_err(|_| Refused::Malformed)?;
        let now = now();
        if now > grant.expires {
            return Err(Refused::Expired(now - grant.expires));
        }
        Ok(grant)
    }
}

impl Grant {
    /// Whether it allows `decision`.
    pub fn allows(&self, decision: PermissionDecision) -> Result<(), Refused> {
        if self.allowed.contains(&decision) {
            return Ok(());
        }
        Err(Refused::NotAllowed {
            asked: decision.as_str().to_owned(),
            allowed: self
                .allowed
                .iter()
                .map(|d| d.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_allows_its_answers_until_it_expires_and_only_this_daemon_makes_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let approvals = Approvals::open(dir.path(), DEFAULT_TTL).expect("key");
        let session = SessionId("s1".into());
        let allowed = vec![PermissionDecision::AllowOnce, PermissionDecision::Deny];
        let token = approvals.mint(&session, "perm_1", allowed.clone());
        let grant = approvals.check(&token).expect("valid");
        assert_eq!(
            (grant.session.0.as_str(), grant.request_id.as_str()),
            ("s1", "perm_1")
        );
        assert_eq!(grant.allows(PermissionDecision::Deny), Ok(()));
        assert!(matches!(
            grant.allows(PermissionDecision::AllowAlways),
            Err(Refused::NotAllowed { .. })
        ));

        // The key is kept: a restarted daemon checks the tokens it made before.
        let again = Approvals::open(dir.path(), DEFAULT_TTL).expect("key");
        assert_eq!(again.check(&token), Ok(grant));
        let mode = std::fs::metadata(dir.path().join("approval.key"))
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777);
        assert_eq!(mode.ok(), Some(0o600));

        // Another daemon's token, a changed payload, a cut one, an expired one.
        let other = tempfile::tempdir().expect("tempdir");
        let stranger = Approvals::open(other.path(), DEFAULT_TTL).expect("key");
        let theirs = stranger.mint(&session, "perm_1", allowed.clone());
        assert_eq!(approvals.check(&theirs), Err(Refused::Forged));
        let (head, signature) = token.rsplit_once('.').expect("dots");
        let widened = approvals_payload_swap(head, &session);
        assert_eq!(
            approvals.check(&format!("{widened}.{signature}")),
            Err(Refused::Forged)
        );
        assert_eq!(approvals.check(&token[..20]), Err(Refused::Malformed));
        let old = approvals.mint_until(Grant {
            session: session.clone(),
            request_id: "perm_1".into(),
            allowed,
            expires: now() - 10,
        });
        assert!(matches!(approvals.check(&old), Err(Refused::Expired(s)) if s >= 10));
    }

    /// `head` with its payload replaced by one that allows everything.
    fn approvals_payload_swap(head: &str, session: &SessionId) -> String {
        let grant = Grant {
            session: session.clone(),
            request_id: "perm_1".into(),
            allowed: vec![PermissionDecision::AllowAlways],
            expires: now() + 3600,
        };
        let payload = B64.encode(serde_json::to_vec(&grant).expect("json"));
        let prefix = head.split('.').next().expect("prefix");
        format!("{prefix}.{payload}")
    }
}
