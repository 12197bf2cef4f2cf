//! Background jobs of a session (shells started with `run_in_background`): their output so far,
//! how much of it was read, how they ended. They belong to the session, not to a turn or a
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
}

/// One background job.
#[derive(Debug)]
pub struct Job {
    /// The command it runs.
    pub command: String,
    output: Mutex<Vec<u8>>,
    read: Mutex<usize>,
    end: Mutex<Option<JobEnd>>,
    /// Fires to kill it.
    pub stop: CancellationToken,
}

impl Job {
    /// Adds output.
    pub fn append(&self, bytes: &[u8]) {
        self.output
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(bytes);
    }

    /// Records how it ended.
    pub fn finish(&self, end: JobEnd) {
        let mut e = self.end.lock().unwrap_or_else(|p| p.into_inner());
        if e.is_none() {
            *e = Some(end);
        }
    }

    /// How it ended, if it has.
    pub fn end(&self) -> Option<JobEnd> {
        *self.end.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Output since the last call.
    pub fn take_new(&self) -> Vec<u8> {
        let out = self.output.lock().unwrap_or_else(|p| p.into_inner());
        let mut read = self.read.lock().unwrap_or_else(|p| p.into_inner());
        let new = out[(*read).min(out.len())..].to_vec();
        *read = out.len();
        new
    }
}

/// A session's background jobs.
#[derive(Debug, Default)]
pub struct Jobs {
    jobs: Mutex<BTreeMap<String, Arc<Job>>>,
    next: Mutex<u64>,
}

impl Jobs {
    /// Registers a job for `command`; returns its id (`bash_1`, `bash_2`, …).
    pub fn start(&self, command: &str) -> (String, Arc<Job>) {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        *next += 1;
        let id = format!("bash_{}", *next);
        let job = Arc::new(Job {
            command: command.to_owned(),
            output: Mutex::default(),
            read: Mutex::default(),
            end: Mutex::default(),
            stop: CancellationToken::new(),
        });
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
