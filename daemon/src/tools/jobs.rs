//! Background jobs of a session (shells started with `run_in_background`): their output not
//! read yet (bounded), how they ended. They belong to the session, not to a turn or a
//! client, so they outlive both.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEnd {
    /// It exited by itself, with this code (`None`: killed by a signal).
    Exited(Option<i32>),
    /// It was killed (KillShell, or the daemon stopping).
    Killed,
    /// The daemon stopped while it ran; it was killed at the next start if it still ran, and
    /// its later output is gone.
    Lost,
}

impl JobEnd {
    /// How it ended, in words (`exited with code 0`).
    pub fn describe(self) -> String {
        match self {
            Self::Exited(Some(c)) => format!("exited with code {c}"),
            Self::Exited(None) => "ended by a signal".into(),
            Self::Killed => "killed".into(),
            Self::Lost => "lost: tetherd stopped while it ran".into(),
        }
    }
}

/// Unread output a job keeps: a server that logs forever costs at most this much memory.
pub const MAX_UNREAD: usize = 1024 * 1024;

/// Output not read yet.
#[derive(Debug, Default)]
struct Unread {
    bytes: Vec<u8>,
    /// Bytes dropped from its start since the last read.
    dropped: u64,
}

/// Called once when a job ends: its id, command and how it ended.
pub type OnJobEnd = Box<dyn Fn(&str, &str, JobEnd) + Send + Sync>;

/// One background job.
#[derive(Debug)]
pub struct Job {
    /// Its id (`bash_1`).
    pub id: String,
    /// The command it runs.
    pub command: String,
    unread: Mutex<Unread>,
    end: Mutex<Option<JobEnd>>,
    /// Fires to kill it.
    pub stop: CancellationToken,
    on_end: std::sync::Weak<OnJobEnd>,
}

impl Job {
    /// Adds output; beyond twice [`MAX_UNREAD`] unread bytes the oldest are dropped down to it
    /// (and counted).
    pub fn append(&self, bytes: &[u8]) {
        let mut u = self.unread.lock().unwrap_or_else(|p| p.into_inner());
        u.bytes.extend_from_slice(bytes);
        // Trimmed in steps, so a fast writer does not move a full buffer on every append.
        if u.bytes.len() > 2 * MAX_UNREAD {
            let over = u.bytes.len() - MAX_UNREAD;
            u.bytes.drain(..over);
            u.dropped += over as u64;
        }
    }

    /// Records how it ended (the first end counts) and tells the job's owner.
    pub fn finish(&self, end: JobEnd) {
        {
            let mut e = self.end.lock().unwrap_or_else(|p| p.into_inner());
            if e.is_some() {
                return;
            }
            *e = Some(end);
        }
        if let Some(on_end) = self.on_end.upgrade() {
            on_end(&self.id, &self.command, end);
        }
    }

    /// How it ended, if it has.
    pub fn end(&self) -> Option<JobEnd> {
        *self.end.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Output since the last call, and how many bytes of it were dropped unread.
    pub fn take_new(&self) -> (Vec<u8>, u64) {
        let mut u = self.unread.lock().unwrap_or_else(|p| p.into_inner());
        (std::mem::take(&mut u.bytes), std::mem::take(&mut u.dropped))
    }
}

/// A session's background jobs.
#[derive(Default)]
pub struct Jobs {
    jobs: Mutex<BTreeMap<String, Arc<Job>>>,
    next: Mutex<u64>,
    on_end: Mutex<Option<Arc<OnJobEnd>>>,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs").field("jobs", &self.ids()).finish()
    }
}

impl Jobs {
    /// Sets what is called when a job ends (the session logs it).
    pub fn on_end(&self, f: OnJobEnd) {
        *self.on_end.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(f));
    }

    /// Registers a job for `command`; returns its id (`bash_1`, `bash_2`, …).
    pub fn start(&self, command: &str) -> (String, Arc<Job>) {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        *next += 1;
        let id = format!("bash_{}", *next);
        drop(next);
        self.insert(&id, command, None)
    }

    /// Registers a job of an earlier daemon that did not survive its stop, so its id keeps
    /// answering (`lost`) and is never reused.
    pub fn adopt_lost(&self, id: &str, command: &str) {
        if let Some(n) = id.strip_prefix("bash_").and_then(|n| n.parse::<u64>().ok()) {
            let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
            *next = (*next).max(n);
        }
        self.insert(id, command, Some(JobEnd::Lost));
    }

    fn insert(&self, id: &str, command: &str, end: Option<JobEnd>) -> (String, Arc<Job>) {
        let on_end = self
            .on_end
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(Arc::downgrade)
            .unwrap_or_default();
        let job = Arc::new(Job {
            id: id.to_owned(),
            command: command.to_owned(),
            unread: Mutex::default(),
            end: Mutex::new(end),
            stop: CancellationToken::new(),
            on_end,
        });
        let id = id.to_owned();
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), job.clone());
        (id, job)
    }

    /// The job with this id.
    pub fn get(&self, id: &str) -> Option<Arc<Job>> {
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    /// Whether any job still runs.
    pub fn any_running(&self) -> bool {
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .any(|j| j.end().is_none())
    }

    /// Every job's id.
    pub fn ids(&self) -> Vec<String> {
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Kills every job (the session is going away).
    pub fn stop_all(&self) {
        for job in self.jobs.lock().unwrap_or_else(|p| p.into_inner()).values() {
            job.stop.cancel();
        }
    }
}
