//! A session's spending cap as one turn sees it: the cap, what the session had spent when the
//! turn started, and what the turn, its sub-agents and its compactions spend, counted as each
//! model request ends. Before each request the turn asks whether the spend so far plus what
//! that request's input alone would cost stays under the cap; a reply's output cannot be known
//! in advance, so the cap is passed by at most one reply.
//!
//! The daemon may also have a daily cap (`daily_budget_usd`): [`Daily`] counts what every
//! session spends in a UTC day, kept in the data directory so a restart does not forget it, and
//! each turn's budget asks it too.
//!
//! Requests in flight at once (parallel sub-agents, sessions under one daily cap) each reserve
//! their input's estimate until they are counted, so they cannot all pass the same check.
//!
//! Invariant: the meter only grows, and every request of the turn (its sub-agents' included)
//! is counted on the one meter the turn's context shares, and on the day's.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The cap and the meter of one turn.
#[derive(Debug)]
pub struct Budget {
    /// The session's cap in dollars (infinite when it has none, or once removed mid-turn).
    cap: Mutex<f64>,
    /// What was spent, and what the requests in flight reserved.
    spent: Mutex<(f64, f64)>,
    /// The daemon's daily cap, if it has one.
    daily: Option<Arc<Daily>>,
}

/// What all sessions spent today (UTC), against the daemon's daily cap.
#[derive(Debug)]
pub struct Daily {
    cap: f64,
    /// The day (`2026-12-07`) and what was spent in it.
    today: Mutex<(String, f64)>,
    /// What the requests in flight reserved.
    reserved: Mutex<f64>,
    /// Where the day's spend is kept (`daily-spend.json` in the data directory).
    file: PathBuf,
}

/// The UTC date of now.
fn today() -> String {
    humantime::format_rfc3339(std::time::SystemTime::now()).to_string()[..10].to_owned()
}

impl Daily {
    /// A daily cap of `cap` dollars, the day's spend read from `file` (written as it grows).
    pub fn open(cap: f64, file: PathBuf) -> Self {
        let kept: Option<(String, f64)> = std::fs::read(&file)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        let day = today();
        let spent = kept.filter(|(d, _)| *d == day).map_or(0.0, |(_, s)| s);
        Self {
            cap,
            today: Mutex::new((day, spent)),
            reserved: Mutex::new(0.0),
            file,
        }
    }

    /// The day's entry, started over when the date has changed.
    fn current(&self) -> std::sync::MutexGuard<'_, (String, f64)> {
        let mut today = self.today.lock().unwrap_or_else(|p| p.into_inner());
        let day = self::today();
        if today.0 != day {
            *today = (day, 0.0);
        }
        today
    }

    /// What was spent today.
    pub fn spent(&self) -> f64 {
        self.current().1
    }

    /// The cap.
    pub fn cap(&self) -> f64 {
        self.cap
    }

    fn spend(&self, cost: f64) {
        let mut today = self.current();
        today.1 += cost;
        // Written while held, so the file never goes back to an older total.
        let bytes = serde_json::to_vec(&*today).unwrap_or_default();
        if let Err(e) = tether_proto::private::write(&self.file, &bytes) {
            tracing::warn!(
                "cannot keep the day's spend in {}: {e}",
                self.file.display()
            );
        }
    }
}

/// The next request would take the spend past a cap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reached {
    /// The cap.
    pub budget_usd: f64,
    /// What was spent (by the session, or today by all of them).
    pub spent_usd: f64,
    /// What the next request's input would have cost.
    pub next_request_usd: f64,
    /// It is the daemon's daily cap, not the session's.
    pub daily: bool,
}

impl Budget {
    /// A cap of `cap` dollars for a session that had spent `spent` (unknown: counted as
    /// nothing, the known part of the spend being lost with it).
    pub fn new(cap: f64, spent: Option<f64>) -> Self {
        Self {
            cap: Mutex::new(cap),
            spent: Mutex::new((spent.unwrap_or(0.0), 0.0)),
            daily: None,
        }
    }

    /// A turn's budget for a session with the cap `cap` (if any) in a daemon with the daily
    /// cap `daily` (if any); `None` when there is neither.
    pub fn of(cap: Option<f64>, spent: Option<f64>, daily: Option<Arc<Daily>>) -> Option<Self> {
        if cap.is_none() && daily.is_none() {
            return None;
        }
        Some(Self {
            daily,
            ..Self::new(cap.unwrap_or(f64::INFINITY), spent)
        })
    }

    /// A new cap for the rest of the turn (`None`: no cap), as the session was configured.
    pub fn set_cap(&self, cap: Option<f64>) {
        *self.cap.lock().unwrap_or_else(|p| p.into_inner()) = cap.unwrap_or(f64::INFINITY);
    }

    #[cfg(test)]
    fn spent(&self) -> f64 {
        self.spent.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    /// Counts what a request cost (nothing when its price is unknown).
    pub fn spend(&self, cost: Option<f64>) {
        if let Some(cost) = cost {
            self.spent.lock().unwrap_or_else(|p| p.into_inner()).0 += cost;
            if let Some(daily) = &self.daily {
                daily.spend(cost);
            }
        }
    }

    /// Whether a request whose input costs `next` may be sent (an unknown price cannot be
    /// held to the cap, and is let through); if so, its estimate is reserved until the
    /// returned reservation is dropped (once the request is counted, or failed).
    pub fn reserve(self: &Arc<Self>, next: Option<f64>) -> Result<Reservation, Reached> {
        let next = next.unwrap_or(0.0);
        let cap = *self.cap.lock().unwrap_or_else(|p| p.into_inner());
        let mut meter = self.spent.lock().unwrap_or_else(|p| p.into_inner());
        let (spent, reserved) = *meter;
        if spent + reserved + next > cap {
            return Err(Reached {
                budget_usd: cap,
                spent_usd: spent,
                next_request_usd: next,
                daily: false,
            });
        }
        if let Some(daily) = &self.daily {
            let mut held = daily.reserved.lock().unwrap_or_else(|p| p.into_inner());
            let today = daily.spent();
            if today + *held + next > daily.cap {
                return Err(Reached {
                    budget_usd: daily.cap,
                    spent_usd: today,
                    next_request_usd: next,
                    daily: true,
                });
            }
            *held += next;
        }
        meter.1 += next;
        Ok(Reservation {
            budget: self.clone(),
            amount: next,
        })
    }

    /// [`reserve`](Self::reserve), released at once: whether such a request fits now.
    #[cfg(test)]
    fn check(self: &Arc<Self>, next: Option<f64>) -> Result<(), Reached> {
        self.reserve(next).map(drop)
    }
}

impl From<Reached> for tether_proto::EventKind {
    fn from(r: Reached) -> Self {
        Self::BudgetReached {
            budget_usd: r.budget_usd,
            spent_usd: r.spent_usd,
            next_request_usd: r.next_request_usd,
            daily: r.daily,
        }
    }
}

/// A request's estimate, held against the caps while it is in flight.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<Budget>,
    amount: f64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget
            .spent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1 -= self.amount;
        if let Some(daily) = &self.budget.daily {
            *daily.reserved.lock().unwrap_or_else(|p| p.into_inner()) -= self.amount;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_let_through_only_while_it_fits_under_the_cap() {
        let budget = Arc::new(Budget::new(0.05, Some(0.01)));
        assert_eq!(budget.check(Some(0.04)), Ok(()));
        budget.spend(Some(0.03));
        let reached = budget.check(Some(0.02)).expect_err("0.04 + 0.02 > 0.05");
        assert_eq!(reached.budget_usd, 0.05);
        assert!((reached.spent_usd - 0.04).abs() < 1e-12);
        assert_eq!(reached.next_request_usd, 0.02);
        assert!(!reached.daily);
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

    #[test]
    fn the_day_counts_every_session_and_outlives_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("daily-spend.json");
        let daily = Arc::new(Daily::open(0.10, file.clone()));
        let a = Arc::new(Budget::of(None, None, Some(daily.clone())).expect("a daily cap"));
        let b = Arc::new(Budget::of(Some(1.0), None, Some(daily.clone())).expect("both caps"));
        a.spend(Some(0.04));
        b.spend(Some(0.04));
        let reached = a.check(Some(0.03)).expect_err("0.08 + 0.03 > 0.10");
        assert!(reached.daily && reached.budget_usd == 0.10, "{reached:?}");
        assert_eq!(b.check(Some(0.01)), Ok(()));
        // A restarted daemon reads the day's spend back.
        let again = Daily::open(0.10, file);
        assert!((again.spent() - 0.08).abs() < 1e-12);
        assert!(Budget::of(None, None, None).is_none());
    }

    #[test]
    fn requests_in_flight_hold_their_estimate_until_they_are_counted() {
        let budget = Arc::new(Budget::new(0.10, None));
        let first = budget.reserve(Some(0.06)).expect("fits");
        // A second request at the same time cannot also count on the same room.
        assert!(budget.reserve(Some(0.06)).is_err());
        budget.spend(Some(0.01));
        drop(first);
        assert!(budget.reserve(Some(0.06)).is_ok());
    }
}
