//! When to retry and how long to wait: exponential backoff with jitter, or what the server asked.

use super::error::LlmError;
use std::time::Duration;

/// Retry policy for one model request.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// First backoff.
    pub base: Duration,
    /// Largest backoff.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 10,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(8),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based): the server's `retry-after` when it gave
    /// one, else `min(base·2ⁿ, cap) × (1 − 0.25·rand)`.
    pub fn delay(&self, retry: u32, error: &LlmError) -> Duration {
        if let Some(d) = error.api().and_then(|e| e.retry_after) {
            return d;
        }
        let exp = self.base.saturating_mul(2u32.saturating_pow(retry.min(20)));
        let capped = exp.min(self.cap);
        capped.mul_f64(1.0 - 0.25 * fastrand::f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter_below() {
        let p = RetryPolicy::default();
        let e = LlmError::Connection("x".into());
        for (n, full) in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)] {
            let d = p.delay(n, &e).as_secs_f64();
            assert!(d <= full && d >= full * 0.75, "retry {n}: {d}");
        }
    }
}
