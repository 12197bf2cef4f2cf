//! A session's spending cap as one turn sees it: the cap, what the session had spent when the
//! turn started, and what the turn, its sub-agents and its compactions spend, counted as each
//! model request ends. Before each request the turn asks whether the spend so far plus what
//! that request's input alone would cost stays under the cap; a reply's output cannot be known
//! in advance, so the cap is passed by at most one reply.
//!
//! Invariant: the meter only grows, and every request of the turn (its sub-agents' included)
//! is counted on the one meter the turn's context shares.

use std::sync::Mutex;

/// The cap and the meter of one turn.
#[derive(Debug)]
pub struct Budget {
    /// The cap in dollars (infinite once removed mid-turn).
    cap: Mutex<f64>,
    spent: Mutex<f64>,
}

/// The next request would take the spend past the cap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reached {
    /// The cap.
    pub budget_usd: f64,
    /// What was spent.
    pub spent_usd: f64,
    /// What the next request's input would have cost.
    pub next_request_usd: f64,
}

impl Budget {
    /// A cap of `cap` dollars for a session that had spent `spent` (unknown: counted as
    /// nothing, the known part of the spend being lost with it).
    pub fn new(cap: f64, spent: Option<f64>) -> Self {
        Self {
            cap: Mutex::new(cap),
            spent: Mutex::new(spent.unwrap_or(0.0)),
        }
    }

    /// A new cap for the rest of the turn (`None`: no cap), as the session was configured.
    pub fn set_cap(&self, cap: Option<f64>) {
        *self.cap.lock().unwrap_or_else(|p| p.into_inner()) = cap.unwrap_or(f64::INFINITY);
    }

    fn spent(&self) -> f64 {
        *self.spent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts what a request cost (nothing when its price is unknown).
    pub fn spend(&self, cost: Option<f64>) {
        if let Some(cost) = cost {
            *self.spent.lock().unwrap_or_else(|p| p.into_inner()) += cost;
        }
    }

    /// Whether a request whose input costs `next` may be sent (an unknown price cannot be
    /// held to the cap, and is let through).
    pub fn check(&self, next: Option<f64>) -> Result<(), Reached> {
        let spent = self.spent();
        let next = next.unwrap_or(0.0);
        let cap = *self.cap.lock().unwrap_or_else(|p| p.into_inner());
        if spent + next > cap {
            return Err(Reached {
                budget_usd: cap,
                spent_usd: spent,
                next_request_usd: next,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_let_through_only_while_it_fits_under_the_cap() {
        let budget = Budget::new(0.05, Some(0.01));
        assert_eq!(budget.check(Some(0.04)), Ok(()));
        budget.spend(Some(0.03));
        let reached = budget.check(Some(0.02)).expect_err("0.04 + 0.02 > 0.05");
        assert_eq!(reached.budget_usd, 0.05);
        assert!((reached.spent_usd - 0.04).abs() < 1e-12);
        assert_eq!(reached.next_request_usd, 0.02);
        // A price that is not known is let through, and counts as nothing.
        assert_eq!(budget.check(None), Ok(()));
        budget.spend(None);
        assert!((budget.spent() - 0.04).abs() < 1e-12);
        // Raised or removed during the turn, the cap holds from the next check.
        budget.set_cap(Some(0.07));
        assert_eq!(budget.check(Some(0.02)), Ok(()));
        budget.set_cap(None);
        assert_eq!(budget.check(Some(100.0)), Ok(()));
    }
}
