//! The registry of sessions: creates them, loads them on demand (replaying the log into a new
//! actor), recovers those a stop interrupted, lists, deletes, forks and exports them.
//!
//! Invariant: at most one live actor per session; the lock on the live map is held only for
//! map lookups and inserts, never while a log is read.

use super::actor::{self, SessionHandle};
use super::recovery::{Loaded, replay};
use super::{
    ListFilter, NewSession, SessionError, TurnEnv, export, now_rfc3339, retention, summary_of,
};
use crate::store::{Claim, EventLog, SessionRecord, Store};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tether_proto::{
    ClientRef, ExportFormat, SessionId, SessionList, SessionStatus, SessionSummary,
};

/// Hands each loaded session the answers the cluster records for its requests.
async fn tell_answers(
    mut answers: tokio::sync::broadcast::Receiver<(SessionId, String, Vec<u8>)>,
    live: std::sync::Weak<Mutex<HashMap<SessionId, SessionHandle>>>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let (session, request_id, answer) = match answers.recv().await {
            Ok(recorded) => recorded,
            Err(RecvError::Lagged(n)) => {
                tracing::warn!("{n} recorded permission answers were missed");
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        let Some(live) = live.upgrade() else { return };
        if let Some(handle) = lock_live(&live).get(&session) {
            handle.recorded_answer(request_id, answer);
        }
    }
}

/// Tells each loaded session when the clients following it from other nodes change.
async fn tell_followers(
    mut changes: tokio::sync::broadcast::Receiver<SessionId>,
    store: Store,
    live: std::sync::Weak<Mutex<HashMap<SessionId, SessionHandle>>>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let changed = match changes.recv().await {
            Ok(id) => vec![id],
            // Missed some: tell every loaded session.
            Err(RecvError::Lagged(_)) => match live.upgrade() {
                Some(live) => lock_live(&live).keys().cloned().collect(),
                None => return,
            },
            Err(RecvError::Closed) => return,
        };
        let Some(live) = live.upgrade() else {
            return;
        };
        for id in changed {
            if let Some(handle) = lock_live(&live).get(&id) {
                handle.followers(store.followers(&id), false);
            }
        }
    }
}

fn lock_live(
    live: &Mutex<HashMap<SessionId, SessionHandle>>,
) -> std::sync::MutexGuard<'_, HashMap<SessionId, SessionHandle>> {
    // A panic while holding this lock cannot leave the map half-updated (single inserts and
    // removes), so a poisoned lock is still usable.
    live.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every session of the daemon: the stored ones, and the loaded ones with a running actor.
pub struct Sessions {
    store: Store,
    epoch: u64,
    env: Arc<TurnEnv>,
    /// Handles of the loaded sessions; an actor that stops removes its own.
    live: Arc<Mutex<HashMap<SessionId, SessionHandle>>>,
    /// Held while a working tree is rebuilt (rare), so two loads of a session never rebuild it
    /// at once.
    restoring: tokio::sync::Mutex<()>,
}

impl Sessions {
    /// A registry over `store`, stamping events with `epoch`.
    pub fn new(store: Store, epoch: u64, env: Arc<TurnEnv>) -> Self {
        let live = Arc::new(Mutex::new(HashMap::new()));
        if let Some(changes) = store.followers_changed() {
            tokio::spawn(tell_followers(
                changes,
                store.clone(),
                Arc::downgrade(&live),
            ));
        }
        if let Some(answers) = store.answers_recorded() {
            tokio::spawn(tell_answers(answers, Arc::downgrade(&live)));
        }
        Self {
            store,
            epoch,
            env,
            live,
            restoring: tokio::sync::Mutex::new(()),
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, SessionHandle>> {
        lock_live(&self.live)
    }

    /// Creates a session; its first event (`session_created`, seq 1) is durable on return.
    pub async fn create(
        &self,
        new: NewSession,
        by: Option<ClientRef>,
    ) -> Result<SessionId, SessionError> {
        let picked = new.id.is_some();
        let id = new
            .id
            .unwrap_or_else(|| SessionId(uuid::Uuid::new_v4().to_string()));
        let now = now_rfc3339();
        // What the creator leaves out comes from the project's settings (Claude Code's
        // `permissions.defaultMode` and `model`), then tether's configuration.
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let defaults = crate::permissions::keys::defaults(Path::new(&new.cwd), home.as_deref());
        let settings_model = defaults.model.filter(|m| {
            let known = self.env.catalog.check(m).is_ok();
            if !known {
                tracing::warn!(
                    "the settings' model {m:?} is not one tether knows; using the default"
                );
            }
            known
        });
        let record = SessionRecord {
            id: id.clone(),
            title: new.title.filter(|t| !t.trim().is_empty()),
            cwd: new.cwd,
            model: new
                .model
                .or(settings_model)
                .unwrap_or_else(|| self.env.catalog.default_model().to_owned()),
            effort: None,
            permission_mode: new
                .permission_mode
                .or(defaults.permission_mode)
                .unwrap_or(self.env.permission_mode),
            on_no_controller: Default::default(),
            budget_usd: self.env.budget_usd,
            status: SessionStatus::Idle,
            created_at: now.clone(),
            updated_at: now,
            pruned_through: 0,
            head: 0,
            shares: Vec::new(),
        };
        if picked && (self.live().contains_key(&id) || self.store.session(&id)?.is_some()) {
            return Err(SessionError::AlreadyExists(id));
        }
        let claim = self.store.claim(&id, self.epoch, Some(&record.cwd)).await?;
        let handle = {
            // Checked again and taken under one lock, so two callers cannot both take an id.
            let mut live = self.live();
            if picked && live.contains_key(&id) {
                return Err(SessionError::AlreadyExists(id));
            }
            let log = self.store.log(&id);
            let handle = self.start(record, log, Loaded::empty(), claim);
            live.insert(id.clone(), handle.clone());
            handle
        };
        handle.announce_creation(by).await?;
        crate::telemetry::session_created();
        Ok(id)
    }

    /// The handle of a session, loading it from the store if it is not live. The log is
    /// replayed without holding the registry's lock, so other sessions are served meanwhile;
    /// when two callers load the same session at once, the first to finish starts its actor and
    /// the other uses it.
    pub async fn get(&self, id: &SessionId) -> Result<SessionHandle, SessionError> {
        if let Some(h) = self.live().get(id).filter(|h| !h.is_stopped()) {
            return Ok(h.clone());
        }
        let Some(stored) = self.store.session(id)? else {
            return Err(SessionError::NotFound(id.clone()));
        };
        // A node with its own directory for working trees brings the session's there.
        let workspaces = self
            .env
            .workspaces
            .as_ref()
            .filter(|_| self.store.clustered());
        let claim = self
            .store
            .claim(
                id,
                self.epoch,
                workspaces.is_none().then_some(stored.cwd.as_str()),
            )
            .await?;
        let (mut record, log, mut loaded) = match self.load(stored) {
            Ok(loaded) => loaded,
            Err(e) => {
                self.store.release(id, &claim).await;
                return Err(e);
            }
        };
        if let Some(root) = workspaces {
            let _alone = self.restoring.lock().await;
            // Loaded meanwhile by another caller, which did what was needed.
            if let Some(h) = self.live().get(id).filter(|h| !h.is_stopped()) {
                return Ok(h.clone());
            }
            let policy = self.env.snapshots.clone();
            if super::travel::stale(root, policy.clone(), &record, &loaded).await {
                let restored = super::travel::restore(
                    root,
                    self.store.node().as_deref().unwrap_or("this node"),
                    policy,
                    self.store.packs(),
                    &mut record,
                    &loaded,
                )
                .await;
                match restored.and_then(|event| Ok((self.store.put_session(&record)?, event))) {
                    Ok(((), event)) => loaded.restored = Some(event),
                    Err(e) => {
                        tracing::error!(session = %id, "{e}");
                        self.store.release(id, &claim).await;
                        return Err(e);
                    }
                }
            }
        }
        // Answers given while an earlier owner held the session, which it did not log.
        for request_id in loaded.ledger.open_ids() {
            if let Some(answer) = self.store.recorded_answer(id, &request_id).await {
                loaded.recorded.insert(request_id, answer);
            }
        }
        let mut live = self.live();
        if let Some(h) = live.get(id).filter(|h| !h.is_stopped()) {
            return Ok(h.clone());
        }
        // Deleted while it was being read: nothing to start.
        if self.store.session(id)?.is_none() {
            return Err(SessionError::NotFound(id.clone()));
        }
        let handle = self.start(record, log, loaded, claim);
        live.insert(id.clone(), handle.clone());
        Ok(handle)
    }

    /// Starts the actor of a session whose log says `loaded`, held for this daemon by `claim`.
    fn start(
        &self,
        record: SessionRecord,
        log: EventLog,
        loaded: Loaded,
        claim: Claim,
    ) -> SessionHandle {
        let id = record.id.clone();
        let live = Arc::downgrade(&self.live);
        let store = self.store.clone();
        let held = claim.clone();
        // An unloaded session's handle would keep its channel's memory: the actor removes it
        // when it stops, unless a newer actor of the session has taken its place; and it gives
        // the session back to the store.
        let on_stop = Box::new(move || {
            if let Some(live) = live.upgrade() {
                let mut live = lock_live(&live);
                if live.get(&id).is_some_and(SessionHandle::is_stopped) {
                    live.remove(&id);
                }
            }
            tokio::spawn(store.release(&id, &held));
        });
        let handle = actor::spawn(
            record,
            self.store.clone(),
            log,
            claim.epoch,
            loaded,
            self.env.clone(),
            on_stop,
        );
        // Whoever follows it from other nodes, as the cluster knows now.
        let followers = self.store.followers(handle.id());
        if !followers.is_empty() {
            handle.followers(followers, true);
        }
        // Another node took the session over: this actor stops at once, writing nothing more.
        let lost = claim.lost;
        let fenced = handle.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = lost.cancelled() => fenced.fence().await,
                () = fenced.stopped() => {}
            }
        });
        handle
    }

    /// Replays the log of the session `record` describes (pruning old deltas first).
    fn load(
        &self,
        mut record: SessionRecord,
    ) -> Result<(SessionRecord, EventLog, Loaded), SessionError> {
        let id = &record.id;
        let log = self.store.log(id);
        if let Some(keep) = self.env.delta_retention
            && retention::apply(&log, &mut record, log.head()?, keep)?
        {
            self.store.put_session(&record)?;
        }
        let loaded = replay(&self.store, &record.id, &log)?;
        if loaded.open_turn.is_none() && record.status != SessionStatus::Idle {
            // Stopped between a turn's end and the status change that follows it.
            record.status = SessionStatus::Idle;
            self.store.put_session(&record)?;
        }
        Ok((record, log, loaded))
    }

    /// Loads every session that was busy when the daemon last stopped, so its open turn is
    /// ended (and its interrupted tools answered) now rather than when someone next opens it,
    /// and waits until each has written its recovery: a client of the daemon that just became
    /// ready replays a recovered session, never one still "running". Returns how many were
    /// loaded; one that cannot be loaded is logged and left alone.
    pub async fn recover_interrupted(&self) -> usize {
        let records = match self.store.sessions() {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("cannot scan sessions for recovery: {e}");
                return 0;
            }
        };
        // Load them all first, so their recoveries run side by side; each actor recovers
        // before anything else it is asked.
        let mut loaded = Vec::new();
        for record in records.iter().filter(|r| r.status != SessionStatus::Idle) {
            // Running on another node of the cluster: it is that node's to finish.
            if self.store.held_elsewhere(&record.id).await {
                continue;
            }
            match self.get(&record.id).await {
                Ok(handle) => loaded.push((record.id.clone(), handle)),
                // Running on another node of the cluster.
                Err(SessionError::Store(e @ crate::store::StoreError::OwnedElsewhere { .. })) => {
                    tracing::debug!("not recovering: {e}");
                }
                Err(e) => tracing::error!(session = %record.id, "cannot recover: {e}"),
            }
        }
        for (id, handle) in &loaded {
            if let Err(e) = handle.settled().await {
                tracing::error!(session = %id, "recovery did not finish: {e}");
            }
        }
        self.remove_orphaned_outputs(&records);
        loaded.len()
    }

    /// Removes saved command outputs (`scratch/<id>`) whose session no longer exists, in the
    /// background (a session deleted while the daemon was down, or by an older version).
    fn remove_orphaned_outputs(&self, records: &[SessionRecord]) {
        let scratch = self.env().data_dir.join("scratch");
        let known: std::collections::HashSet<String> =
            records.iter().map(|r| r.id.0.clone()).collect();
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            let Ok(entries) = std::fs::read_dir(&scratch) else {
                return;
            };
            for entry in entries.flatten() {
                let file_name = entry.file_name().to_string_lossy().into_owned();
                let name = file_name
                    .strip_suffix(crate::tools::HOST_SUFFIX)
                    .unwrap_or(&file_name)
                    .to_owned();
                // Asked again at the moment of removal: a session created since the scan is
                // in the store by then (ids are never reused).
                let gone = !known.contains(&name)
                    && matches!(store.session(&SessionId(name.clone())), Ok(None));
                if gone && let Err(e) = std::fs::remove_dir_all(entry.path()) {
                    tracing::warn!(dir = %entry.path().display(), "could not remove orphaned outputs: {e}");
                }
            }
        });
    }

    /// The sessions that pass `filter`, most recently active first, one page at a time.
    pub async fn list(&self, filter: &ListFilter) -> Result<SessionList, SessionError> {
        let records = self.store.sessions()?;
        let live: HashMap<SessionId, SessionHandle> = self
            .live()
            .iter()
            .filter(|(_, h)| !h.is_stopped())
            .map(|(id, h)| (id.clone(), h.clone()))
            .collect();
        let mut out = Vec::with_capacity(records.len());
        for record in records {
            if filter.cwd.as_ref().is_some_and(|c| *c != record.cwd) {
                continue;
            }
            if let Some(who) = &filter.shared_with
                && !record
                    .shares
                    .iter()
                    .any(|s| s.principal == *who && s.role.rank() > 0)
            {
                continue;
            }
            let summary = match live.get(&record.id) {
                Some(h) => match h.summary().await {
                    Ok(s) => s,
                    Err(_) => continue, // deleted meanwhile
                },
                None => {
                    // This node's copy of the log may lag what the record says.
                    let head = self.store.log(&record.id).head()?.max(record.head);
                    summary_of(&record, head, Vec::new())
                }
            };
            if filter.status.is_some_and(|s| s != summary.status) {
                continue;
            }
            out.push(summary);
        }
        out.sort_by(|a, b| (&b.updated_at, &b.session_id.0).cmp(&(&a.updated_at, &a.session_id.0)));
        // A search reads the logs, newest first, until it has enough; it has no next page.
        if let Some(query) = filter.query.clone().filter(|q| !q.trim().is_empty()) {
            let store = self.store.clone();
            let limit = filter.limit.unwrap_or(usize::MAX);
            let sessions = tokio::task::spawn_blocking(move || {
                super::search::matching(&store, out, &query, limit)
            })
            .await
            .map_err(|e| SessionError::Commit(format!("the search failed: {e}")))?;
            return Ok(SessionList {
                total: sessions.len(),
                sessions,
                next_cursor: None,
            });
        }
        let total = out.len();
        if let Some(cursor) = &filter.cursor {
            // Keyset paging: everything strictly after the cursor's (updatedAt, id) position.
            let (at, id) = cursor.split_once('|').unwrap_or((cursor.as_str(), ""));
            out.retain(|s| (s.updated_at.as_str(), s.session_id.0.as_str()) < (at, id));
        }
        let mut next_cursor = None;
        if let Some(limit) = filter.limit.filter(|l| *l < out.len()) {
            out.truncate(limit);
            next_cursor = out
                .last()
                .map(|s| format!("{}|{}", s.updated_at, s.session_id));
        }
        Ok(SessionList {
            sessions: out,
            total,
            next_cursor,
        })
    }

    /// Deletes the idle sessions nobody has used for `older_than` (Claude Code's
    /// `cleanupPeriodDays`); a session that runs or has a client attached stays. Returns how
    /// many were deleted.
    pub async fn clean_up(&self, older_than: std::time::Duration) -> usize {
        let Some(cutoff) = std::time::SystemTime::now().checked_sub(older_than) else {
            return 0;
        };
        let records = match self.store.sessions() {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("cannot scan sessions to clean up: {e}");
                return 0;
            }
        };
        let mut deleted = 0;
        for record in records {
            let Ok(updated) =
                humantime::parse_rfc3339_weak(record.updated_at.trim_end_matches('Z'))
            else {
                continue;
            };
            if updated >= cutoff || record.status != SessionStatus::Idle {
                continue;
            }
            let live = self.live().get(&record.id).cloned();
            let in_use = match live {
                Some(h) => h
                    .summary()
                    .await
                    .map_or(true, |s| !s.attached_clients.is_empty()),
                None => false,
            };
            if in_use {
                continue;
            }
            match self.delete(&record.id, None).await {
                Ok(()) => deleted += 1,
                Err(e) => tracing::warn!(session = %record.id, "cannot clean up: {e}"),
            }
        }
        deleted
    }

    /// Deletes a session; its subscribers get `session_deleted` and their subscriptions end.
    pub async fn delete(&self, id: &SessionId, by: Option<ClientRef>) -> Result<(), SessionError> {
        let handle = self.get(id).await?;
        handle.delete(by).await?;
        self.live().remove(id);
        Ok(())
    }

    /// Every durable event of a session, in order.
    async fn events(
        &self,
        id: &SessionId,
    ) -> Result<(SessionSummary, Vec<tether_proto::Event>), SessionError> {
        let summary = self.get(id).await?.summary().await?;
        let log = self.store.log(id);
        let mut events = Vec::new();
        for record in log.iter_between(0, summary.head_seq) {
            let (_, bytes) = record?;
            if let Ok(e) = serde_json::from_slice::<tether_proto::Event>(&bytes) {
                events.push(e);
            }
        }
        Ok((summary, events))
    }

    /// Every permission decision of session `id`, or of every session (oldest session first),
    /// read from the logs; `since` (RFC 3339) leaves out older ones. Reads the store: call it
    /// off the async threads.
    pub fn audit(
        &self,
        id: Option<&SessionId>,
        since: Option<String>,
    ) -> Result<Vec<tether_proto::AuditEntry>, SessionError> {
        let mut records = match id {
            Some(id) => vec![
                self.store
                    .session(id)?
                    .ok_or_else(|| SessionError::NotFound(id.clone()))?,
            ],
            None => self.store.sessions()?,
        };
        records.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        let mut entries = Vec::new();
        for record in records {
            let log = self.store.log(&record.id);
            let mut ledger = super::audit::Ledger::new(record.id.clone(), since.clone());
            for item in log.iter_between(0, tether_proto::Seq::MAX) {
                let (_, bytes) = item?;
                if let Ok(event) = serde_json::from_slice::<tether_proto::Event>(&bytes) {
                    ledger.read(event);
                }
            }
            entries.extend(ledger.entries());
        }
        Ok(entries)
    }

    /// The session as `markdown` or `jsonl`.
    pub async fn export(
        &self,
        id: &SessionId,
        format: ExportFormat,
    ) -> Result<String, SessionError> {
        let (summary, events) = self.events(id).await?;
        Ok(match format {
            ExportFormat::Jsonl => export::jsonl(&events),
            ExportFormat::Markdown => {
                let title = summary
                    .title
                    .clone()
                    .unwrap_or_else(|| format!("Session {id}"));
                export::markdown(&title, &summary.cwd, &events)
            }
        })
    }

    /// A new session holding `id`'s events up to `at` (default: its last durable event),
    /// presence and sharing events left out (a fork is shared with no one), seqs renumbered. A turn open at that point is ended as
    /// interrupted when the fork loads.
    pub async fn fork(&self, id: &SessionId, at: Option<u64>) -> Result<SessionId, SessionError> {
        let (summary, events) = self.events(id).await?;
        let record = self
            .store
            .session(id)?
            .ok_or_else(|| SessionError::NotFound(id.clone()))?;
        let at = at.unwrap_or(summary.head_seq).min(summary.head_seq);
        let new_id = SessionId(uuid::Uuid::new_v4().to_string());
        let log = self.store.log(&new_id);
        let mut copied = Vec::new();
        for mut e in events
            .into_iter()
            .filter(|e| e.seq.is_some_and(|s| s <= at))
        {
            // Who watched, and who was given a role: a fork is its owner's alone.
            if matches!(
                e.kind,
                tether_proto::EventKind::ClientAttached { .. }
                    | tether_proto::EventKind::ClientDetached { .. }
                    | tether_proto::EventKind::SessionShared { .. }
                    | tether_proto::EventKind::SessionUnshared { .. }
            ) {
                continue;
            }
            let seq = copied.len() as u64 + 1;
            e.seq = Some(seq);
            e.session_id = new_id.clone();
            let json = serde_json::to_vec(&e).map_err(|e| SessionError::Commit(e.to_string()))?;
            copied.push((seq, json));
        }
        let now = now_rfc3339();
        let forked = SessionRecord {
            id: new_id.clone(),
            title: Some(format!(
                "{} (fork)",
                record
                    .title
                    .clone()
                    .unwrap_or_else(|| id.0.chars().take(8).collect())
            )),
            status: SessionStatus::Idle,
            created_at: now.clone(),
            updated_at: now,
            head: copied.len() as u64,
            shares: Vec::new(),
            ..record
        };
        // Held before its first write: in a cluster only the holder of a session writes it.
        let claim = self
            .store
            .claim(&new_id, self.epoch, Some(&forked.cwd))
            .await?;
        let events = copied
            .iter()
            .map(|(seq, json)| (*seq, json.as_slice(), false));
        if let Err(e) = self.store.commit(&log, events, Some(&forked)).await {
            self.store.release(&new_id, &claim).await;
            return Err(e.into());
        }
        let (record, log, loaded) = self.load(forked)?;
        let handle = self.start(record, log, loaded, claim);
        self.live().insert(new_id.clone(), handle.clone());
        handle
            .note(format!("forked from session {id} at event #{at}"))
            .await?;
        Ok(new_id)
    }

    /// How many sessions are stored and how many are loaded.
    pub fn counts(&self) -> (u64, u64) {
        let loaded = self.live().values().filter(|h| !h.is_stopped()).count();
        (self.store.session_count() as u64, loaded as u64)
    }

    /// Stops every actor after committing its events; subscribers get `daemon_shutdown`.
    pub async fn shutdown(&self) {
        let handles: Vec<SessionHandle> = self.live().drain().map(|(_, h)| h).collect();
        for h in handles {
            h.shutdown().await;
        }
        self.store.release_all().await;
        self.env.mcp.stop_all().await;
    }

    /// What turns run with.
    pub fn env(&self) -> &TurnEnv {
        &self.env
    }

    /// The daemon's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The store, for final flushes.
    pub fn store(&self) -> &Store {
        &self.store
    }
}

/// Shared ownership of the registry, as the RPC layer holds it.
pub type SharedSessions = Arc<Sessions>;

#[cfg(test)]
mod tests {
    use super::*;

    fn env(dir: &std::path::Path) -> Arc<TurnEnv> {
        Arc::new(TurnEnv {
            llm: Err("no model in this test".into()),
            catalog: Default::default(),
            tools: crate::tools::builtin(),
            mcp: crate::mcp::McpServers::new(crate::mcp::Limits::from_env()),
            limits: Default::default(),
            data_dir: dir.to_owned(),
            web: Arc::new(crate::llm::WebFetcher::new().expect("http client")),
            fast_model: "haiku".into(),
            idle_unload: None,
            delta_retention: None,
            permission_mode: Default::default(),
            budget_usd: None,
            daily: None,
            approvals: Arc::new(
                crate::approvals::Approvals::open(dir, crate::approvals::DEFAULT_TTL).expect("key"),
            ),
            approval_links: None,
            log_user_prompts: false,
            policy: Default::default(),
            cache_ttl: None,
            config_hooks: None,
            snapshots: None,
            workspaces: None,
        })
    }

    #[tokio::test]
    async fn clean_up_deletes_only_the_idle_sessions_unused_for_longer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let sessions = Sessions::new(store.clone(), 1, env(dir.path()));
        let new = || NewSession {
            cwd: "/tmp".into(),
            ..Default::default()
        };
        let old = sessions.create(new(), None).await.expect("created");
        let recent = sessions.create(new(), None).await.expect("created");
        sessions.shutdown().await;
        let mut record = store.session(&old).expect("read").expect("record");
        record.updated_at = "2020-01-01T00:00:00.000Z".into();
        store.put_session(&record).expect("age it");

        let sessions = Sessions::new(store.clone(), 2, env(dir.path()));
        let day = std::time::Duration::from_secs(86_400);
        assert_eq!(sessions.clean_up(30 * day).await, 1);
        let left: Vec<SessionId> = store
            .sessions()
            .expect("list")
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(left, [recent]);
        assert_eq!(sessions.clean_up(30 * day).await, 0);
    }

    #[tokio::test]
    async fn an_unloaded_session_leaves_nothing_behind_and_loads_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let mut env = env(dir.path());
        Arc::get_mut(&mut env).expect("sole owner").idle_unload =
            Some(std::time::Duration::from_millis(20));
        let sessions = Sessions::new(store, 1, env);
        let new = NewSession {
            cwd: "/tmp".into(),
            ..Default::default()
        };
        let id = sessions.create(new, None).await.expect("created");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        // Not only stopped: gone from the map, with the channel its handle held.
        while sessions.live().contains_key(&id) {
            assert!(
                std::time::Instant::now() < deadline,
                "the idle session's handle stayed"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let again = sessions.get(&id).await.expect("loads again");
        assert!(!again.is_stopped());
        assert_eq!(sessions.counts().1, 1);
        sessions.shutdown().await;
    }

    #[tokio::test]
    async fn a_damaged_record_is_skipped_and_reported_never_an_empty_session() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let sessions = Sessions::new(store.clone(), 1, env(dir.path()));
        let new = NewSession {
            cwd: "/tmp".into(),
            title: Some("keep me".into()),
            ..Default::default()
        };
        let id = sessions.create(new, None).await.expect("created");
        sessions.shutdown().await;
        // A torn record after the good one.
        store
            .log(&id)
            .append(2, b"{\"sessionId\": \"torn")
            .expect("append");
        store.flush().await.expect("flush");

        let reloaded = Sessions::new(store.clone(), 2, env(dir.path()));
        let handle = reloaded.get(&id).await.expect("loads");
        // The first answer may come within the batch that logs the notice; the second is after.
        handle.summary().await.expect("summary");
        let summary = handle.summary().await.expect("summary");
        assert_eq!(summary.title.as_deref(), Some("keep me"));
        assert_eq!(summary.head_seq, 3, "the notice follows the damaged record");
        let notice = store.log(&id).read(2, 3, 1).expect("read");
        let text = String::from_utf8_lossy(&notice[0].1).into_owned();
        assert!(
            text.contains("damaged record(s)") && text.contains("[2]"),
            "{text}"
        );
    }
}
