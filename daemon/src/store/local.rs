//! The embedded store on sled: session records, every session's event log, checkpoints and
//! daemon metadata in one database under the data directory.
//!
//! Invariant: the only module that imports sled. Values are serde_json (readable when debugging).
//! All logs share one tree, keyed by the session's id (length first, so no id is a prefix of
//! another's keys) and the big-endian seq, so a session's keys are contiguous and in the log's
//! order. (A tree per session, as schema 1 had, cost memory for every session ever created:
//! sled keeps every tree open and rewrites a catalogue of all of them for each new one.)
//! Nothing written here is durable until [`Db::flush`] returns.

use super::{SCHEMA_VERSION, SessionRecord, StoreError};
use std::path::{Path, PathBuf};
use tether_proto::{Seq, SessionId};

const META_SCHEMA: &str = "schema_version";
const META_EPOCH: &str = "epoch";
/// Schema 1's per-session log trees were named this and the session's id.
const OLD_LOG_PREFIX: &str = "log/";
/// The tree of every session's log.
const LOGS: &str = "logs";
/// What sled may keep of the database in memory. Its default (1 GiB) let the daemon grow with
/// every event it ever wrote; a replay reads from the kernel's page cache instead.
const CACHE_BYTES: u64 = 4 * 1024 * 1024;

/// What sled said when it failed (IO, corruption, a lock held by another process).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct DiskError(sled::Error);

/// The daemon's database.
#[derive(Clone)]
pub struct Db {
    db: sled::Db,
    sessions: sled::Tree,
    meta: sled::Tree,
    /// Per session: its state as of some seq of its log, so loading replays only what follows.
    checkpoints: sled::Tree,
    logs: sled::Tree,
    path: PathBuf,
    flusher: std::sync::Arc<Flusher>,
}

/// Flushes of the database, grouped: one runs at a time, and a flush asked for meanwhile waits
/// for the next, which covers every write before it. (sled's own `flush_async` blocks a thread
/// of its small IO pool per caller, and a few dozen sessions flushing at once wedged them.)
#[derive(Default)]
struct Flusher {
    state: std::sync::Mutex<FlushState>,
    done: tokio::sync::watch::Sender<Flushed>,
}

#[derive(Default)]
struct FlushState {
    /// Flushes asked for so far; each caller's ticket.
    asked: u64,
    /// A flush task is running.
    running: bool,
}

/// The last flush that ended: every ticket up to `through` is covered by it.
#[derive(Clone, Default)]
struct Flushed {
    through: u64,
    error: Option<sled::Error>,
}

/// One session's append-only event log: its keys in the shared log tree.
#[derive(Clone)]
pub struct Log {
    tree: sled::Tree,
    /// The session's id, length first: every key of this log starts with it.
    prefix: Vec<u8>,
    path: PathBuf,
}

impl Db {
    /// Opens (or creates) the database in `dir`, checking its schema version.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let path = dir.join("db");
        let err = |source| StoreError::Disk {
            path: path.clone(),
            source: DiskError(source),
        };
        let db = sled::Config::new()
            .path(&path)
            .mode(sled::Mode::LowSpace)
            .cache_capacity(CACHE_BYTES)
            .open()
            .map_err(err)?;
        let sessions = db.open_tree("sessions").map_err(err)?;
        let meta = db.open_tree("meta").map_err(err)?;
        let checkpoints = db.open_tree("checkpoints").map_err(err)?;
        let logs = db.open_tree(LOGS).map_err(err)?;
        let store = Self {
            db,
            sessions,
            meta,
            checkpoints,
            logs,
            path,
            flusher: Default::default(),
        };
        match store.meta_u64(META_SCHEMA)? {
            Some(found) if found > SCHEMA_VERSION => {
                return Err(StoreError::NewerSchema {
                    path: store.path.clone(),
                    found,
                });
            }
            Some(SCHEMA_VERSION) => {}
            Some(_) => store.migrate_logs()?,
            None => store.put_meta_u64(META_SCHEMA, SCHEMA_VERSION)?,
        }
        Ok(store)
    }

    /// Schema 1 → 2: moves each per-session log tree into the shared one. Safe to interrupt:
    /// the copies are flushed before any old tree is dropped, and the version is written last,
    /// so a second run copies again what is left (the same keys, the same values).
    fn migrate_logs(&self) -> Result<(), StoreError> {
        let old: Vec<sled::IVec> = self
            .db
            .tree_names()
            .into_iter()
            .filter(|name| name.starts_with(OLD_LOG_PREFIX.as_bytes()))
            .collect();
        for name in &old {
            let id = String::from_utf8_lossy(&name[OLD_LOG_PREFIX.len()..]).into_owned();
            let tree = self.db.open_tree(name).map_err(|e| self.sled_err(e))?;
            let log = self.log(&SessionId(id));
            let mut batch = sled::Batch::default();
            for kv in tree.iter() {
                let (key, value) = kv.map_err(|e| self.sled_err(e))?;
                batch.insert(log.key(seq_of(&key)), value);
            }
            self.logs.apply_batch(batch).map_err(|e| self.sled_err(e))?;
        }
        self.flush_blocking()?;
        for name in &old {
            self.db.drop_tree(name).map_err(|e| self.sled_err(e))?;
        }
        self.put_meta_u64(META_SCHEMA, SCHEMA_VERSION)?;
        self.flush_blocking()?;
        if !old.is_empty() {
            tracing::info!(
                sessions = old.len(),
                "moved the sessions' logs into one tree"
            );
        }
        Ok(())
    }

    fn sled_err(&self, source: sled::Error) -> StoreError {
        StoreError::Disk {
            path: self.path.clone(),
            source: DiskError(source),
        }
    }

    fn meta_u64(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let v = self.meta.get(key).map_err(|e| self.sled_err(e))?;
        v.map(|v| decode::<u64>(&v, key)).transpose()
    }

    fn put_meta_u64(&self, key: &str, value: u64) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(&value).map_err(|source| StoreError::Decode {
            what: key.to_owned(),
            source,
        })?;
        self.meta.insert(key, bytes).map_err(|e| self.sled_err(e))?;
        Ok(())
    }

    /// How far this node's copy of a session's log follows the shared one: the JetStream
    /// sequence of the last message copied (0: none).
    pub fn mark(&self, id: &SessionId) -> Result<u64, StoreError> {
        Ok(self.meta_u64(&mark_key(id))?.unwrap_or(0))
    }

    /// Records how far the copy of a session's log follows the shared one (not flushed).
    pub fn put_mark(&self, id: &SessionId, seq: u64) -> Result<(), StoreError> {
        self.put_meta_u64(&mark_key(id), seq)
    }

    /// Forgets this node's copy of a session's log (not flushed), so it is copied again whole.
    pub fn forget_log(&self, id: &SessionId) -> Result<(), StoreError> {
        self.log(id).clear()?;
        self.meta
            .remove(mark_key(id))
            .map_err(|e| self.sled_err(e))?;
        Ok(())
    }

    /// Allocates this start's epoch: one more than the last, made durable before returning.
    pub fn next_epoch(&self) -> Result<u64, StoreError> {
        let epoch = self.meta_u64(META_EPOCH)?.unwrap_or(0) + 1;
        self.put_meta_u64(META_EPOCH, epoch)?;
        self.db.flush().map_err(|e| self.sled_err(e))?;
        Ok(epoch)
    }

    /// Every stored session.
    pub fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.sessions
            .iter()
            .values()
            .map(|v| {
                let v = v.map_err(|e| self.sled_err(e))?;
                decode(&v, "session record")
            })
            .collect()
    }

    /// How many sessions are stored.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// One session's record, if it exists.
    pub fn session(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        let v = self.sessions.get(&id.0).map_err(|e| self.sled_err(e))?;
        v.map(|v| decode(&v, "session record")).transpose()
    }

    /// Writes a session's record (not flushed).
    pub fn put_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(record).map_err(|source| StoreError::Decode {
            what: "session record".into(),
            source,
        })?;
        self.sessions
            .insert(&record.id.0, bytes)
            .map_err(|e| self.sled_err(e))?;
        Ok(())
    }

    /// A session's checkpoint (opaque bytes), if it has one.
    pub fn checkpoint(&self, id: &SessionId) -> Result<Option<Vec<u8>>, StoreError> {
        let v = self.checkpoints.get(&id.0).map_err(|e| self.sled_err(e))?;
        Ok(v.map(|v| v.to_vec()))
    }

    /// Replaces a session's checkpoint (not flushed).
    pub fn put_checkpoint(&self, id: &SessionId, bytes: &[u8]) -> Result<(), StoreError> {
        self.checkpoints
            .insert(&id.0, bytes)
            .map_err(|e| self.sled_err(e))?;
        Ok(())
    }

    /// Removes a session's log, then its record and checkpoint, durably. The log goes in one
    /// atomic batch: a stop in between leaves the session listed with an empty log, never
    /// half of one.
    pub async fn delete_session(&self, id: &SessionId) -> Result<(), StoreError> {
        self.forget_log(id)?;
        self.sessions.remove(&id.0).map_err(|e| self.sled_err(e))?;
        self.checkpoints
            .remove(&id.0)
            .map_err(|e| self.sled_err(e))?;
        self.flush().await
    }

    /// The event log of a session.
    pub fn log(&self, id: &SessionId) -> Log {
        let id = id.0.as_bytes();
        let mut prefix = Vec::with_capacity(4 + id.len());
        // Ids are short; one that is not still gets a prefix no other id shares.
        prefix.extend_from_slice(&u32::try_from(id.len()).unwrap_or(u32::MAX).to_be_bytes());
        prefix.extend_from_slice(id);
        Log {
            tree: self.logs.clone(),
            prefix,
            path: self.path.clone(),
        }
    }

    /// Makes everything written so far durable (with other callers' writes, in one flush).
    pub async fn flush(&self) -> Result<(), StoreError> {
        let mut done = self.flusher.done.subscribe();
        let ticket = {
            let mut state = self.flush_state();
            state.asked += 1;
            if !state.running {
                state.running = true;
                self.spawn_flusher();
            }
            state.asked
        };
        let flushed = done
            .wait_for(|f| f.through >= ticket)
            .await
            .map_err(|_| self.sled_err(sled::Error::ReportableBug("the flush task ended".into())))?
            .clone();
        match flushed.error {
            Some(e) => Err(self.sled_err(e)),
            None => Ok(()),
        }
    }

    fn flush_state(&self) -> std::sync::MutexGuard<'_, FlushState> {
        // Two integers, each written whole: a panic elsewhere cannot leave them torn.
        self.flusher.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Flushes until no caller waits: each round covers the tickets taken before it started.
    fn spawn_flusher(&self) {
        let store = self.clone();
        tokio::spawn(async move {
            loop {
                let target = store.flush_state().asked;
                let db = store.db.clone();
                let error = match tokio::task::spawn_blocking(move || db.flush()).await {
                    Ok(Ok(_)) => None,
                    Ok(Err(e)) => Some(e),
                    Err(e) => Some(sled::Error::ReportableBug(format!("flush task: {e}"))),
                };
                store.flusher.done.send_modify(|f| {
                    f.through = target;
                    f.error = error;
                });
                let mut state = store.flush_state();
                if state.asked == target {
                    state.running = false;
                    break;
                }
            }
        });
    }

    /// Makes everything written so far durable, blocking the calling thread.
    pub fn flush_blocking(&self) -> Result<(), StoreError> {
        self.db.flush().map(|_| ()).map_err(|e| self.sled_err(e))
    }
}

impl Log {
    fn sled_err(&self, source: sled::Error) -> StoreError {
        StoreError::Disk {
            path: self.path.clone(),
            source: DiskError(source),
        }
    }

    /// The key of the event at `seq`.
    fn key(&self, seq: Seq) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.prefix.len() + 8);
        key.extend_from_slice(&self.prefix);
        key.extend_from_slice(&seq.to_be_bytes());
        key
    }

    /// The seq of the last event, 0 when empty.
    pub fn head(&self) -> Result<Seq, StoreError> {
        let last = self
            .tree
            .range(self.key(0)..=self.key(Seq::MAX))
            .next_back()
            .transpose()
            .map_err(|e| self.sled_err(e))?;
        Ok(last.map(|(k, _)| seq_of(&k)).unwrap_or(0))
    }

    /// Appends the encoded event at `seq` (not flushed).
    pub fn append(&self, seq: Seq, json: &[u8]) -> Result<(), StoreError> {
        self.tree
            .insert(self.key(seq), json)
            .map_err(|e| self.sled_err(e))?;
        Ok(())
    }

    /// Removes the events at `seqs` in one atomic batch (not flushed).
    pub fn remove(&self, seqs: &[Seq]) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for seq in seqs {
            batch.remove(self.key(*seq));
        }
        self.tree.apply_batch(batch).map_err(|e| self.sled_err(e))
    }

    /// Removes every event in one atomic batch (not flushed).
    fn clear(&self) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for key in self.tree.scan_prefix(&self.prefix).keys() {
            batch.remove(key.map_err(|e| self.sled_err(e))?);
        }
        self.tree.apply_batch(batch).map_err(|e| self.sled_err(e))
    }

    /// Every encoded event with `after < seq <= upto`, in order, read lazily.
    pub fn iter_between(
        &self,
        after: Seq,
        upto: Seq,
    ) -> impl Iterator<Item = Result<(Seq, Vec<u8>), StoreError>> + '_ {
        let range = (after < upto).then(|| self.tree.range(self.key(after + 1)..=self.key(upto)));
        range.into_iter().flatten().map(move |kv| {
            let (k, v) = kv.map_err(|e| self.sled_err(e))?;
            Ok((seq_of(&k), v.to_vec()))
        })
    }

    /// Up to `limit` encoded events with `after < seq <= upto`, in order.
    pub fn read(
        &self,
        after: Seq,
        upto: Seq,
        limit: usize,
    ) -> Result<Vec<(Seq, Vec<u8>)>, StoreError> {
        self.iter_between(after, upto).take(limit).collect()
    }
}

fn mark_key(id: &SessionId) -> String {
    format!("mark/{id}")
}

fn seq_of(key: &[u8]) -> Seq {
    let mut be = [0u8; 8];
    let n = key.len().min(8);
    be[8 - n..].copy_from_slice(&key[key.len() - n..]);
    u64::from_be_bytes(be)
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|source| StoreError::Decode {
        what: what.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Opens `dir`, waiting while a just-dropped handle's background threads still hold sled's lock.
    fn reopen(dir: &Path) -> Result<Db, StoreError> {
        for _ in 0..200 {
            match Db::open(dir) {
                Err(StoreError::Disk { .. }) => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                other => return other,
            }
        }
        Db::open(dir)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_sessions_flushing_at_once_all_get_through() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Db::open(dir.path()).expect("open");
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..64 {
            let store = store.clone();
            tasks.spawn(async move {
                let log = store.log(&SessionId(format!("s{i}")));
                for seq in 1..=20 {
                    log.append(seq, &[b'x'; 600]).expect("append");
                    store.flush().await.expect("flush");
                }
            });
        }
        let all = async {
            while let Some(done) = tasks.join_next().await {
                done.expect("task");
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(60), all)
            .await
            .expect("the flushes never finished");
        let log = store.log(&SessionId("s7".into()));
        assert_eq!(log.head().expect("head"), 20);
    }

    #[test]
    fn epochs_increase_across_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = Db::open(dir.path())
            .expect("open")
            .next_epoch()
            .expect("epoch");
        let second = reopen(dir.path())
            .expect("reopen")
            .next_epoch()
            .expect("epoch");
        assert_eq!((first, second), (1, 2));
    }

    #[test]
    fn log_reads_ranges_in_seq_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Db::open(dir.path()).expect("open");
        let log = store.log(&"s".into());
        assert_eq!(log.head().expect("head"), 0);
        // Past 255 so big-endian ordering matters.
        for seq in 1..=300u64 {
            log.append(seq, format!("{seq}").as_bytes())
                .expect("append");
        }
        assert_eq!(log.head().expect("head"), 300);
        let got: Vec<Seq> = log
            .read(250, 260, 100)
            .expect("read")
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        assert_eq!(got, (251..=260).collect::<Vec<_>>());
        assert_eq!(log.read(0, 300, 5).expect("read").len(), 5);
        assert!(log.read(300, 300, 5).expect("read").is_empty());
    }

    #[test]
    fn logs_of_ids_that_share_a_beginning_stay_apart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Db::open(dir.path()).expect("open");
        let (short, long) = (store.log(&"ab".into()), store.log(&"ab\0\0".into()));
        short.append(1, b"short").expect("append");
        long.append(1, b"long").expect("append");
        long.append(2, b"long").expect("append");
        assert_eq!(short.head().expect("head"), 1);
        assert_eq!(
            short.read(0, 9, 9).expect("read"),
            vec![(1, b"short".to_vec())]
        );
        assert_eq!(long.head().expect("head"), 2);
        assert!(
            store
                .log(&"a".into())
                .read(0, 9, 9)
                .expect("read")
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_deleted_sessions_log_is_gone_and_its_neighbours_stay() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Db::open(dir.path()).expect("open");
        for id in ["a", "b", "c"] {
            for seq in 1..=50 {
                store.log(&id.into()).append(seq, b"x").expect("append");
            }
        }
        store.delete_session(&"b".into()).await.expect("delete");
        assert_eq!(store.log(&"b".into()).head().expect("head"), 0);
        assert_eq!(store.log(&"a".into()).head().expect("head"), 50);
        assert_eq!(
            store.log(&"c".into()).read(0, 50, 99).expect("read").len(),
            50
        );
    }

    #[test]
    fn schema_1_logs_move_into_one_tree_with_nothing_lost() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let db = sled::open(dir.path().join("db")).expect("sled");
            let meta = db.open_tree("meta").expect("meta");
            meta.insert(META_SCHEMA, b"1").expect("insert");
            for (id, n) in [("one", 3u64), ("two", 300)] {
                let tree = db.open_tree(format!("{OLD_LOG_PREFIX}{id}")).expect("tree");
                for seq in 1..=n {
                    tree.insert(seq.to_be_bytes(), format!("{id}{seq}").as_bytes())
                        .expect("insert");
                }
            }
            db.flush().expect("flush");
        }
        let store = reopen(dir.path()).expect("migrated");
        assert_eq!(
            store.meta_u64(META_SCHEMA).expect("meta"),
            Some(SCHEMA_VERSION)
        );
        let two = store.log(&"two".into());
        assert_eq!(two.head().expect("head"), 300);
        let events = two.read(255, 258, 9).expect("read");
        assert_eq!(events[0], (256, b"two256".to_vec()));
        assert_eq!(events.len(), 3);
        assert_eq!(
            store.log(&"one".into()).read(0, 3, 9).expect("read").len(),
            3
        );
        assert!(
            !store
                .db
                .tree_names()
                .iter()
                .any(|n| n.starts_with(OLD_LOG_PREFIX.as_bytes())),
            "the old trees are dropped"
        );
        drop((two, store));
        let again = reopen(dir.path()).expect("reopen");
        assert_eq!(again.log(&"one".into()).head().expect("head"), 3);
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Db::open(dir.path()).expect("open");
        store
            .put_meta_u64(META_SCHEMA, SCHEMA_VERSION + 1)
            .expect("put");
        store.flush_blocking().expect("flush");
        drop(store);
        assert!(matches!(
            reopen(dir.path()),
            Err(StoreError::NewerSchema { .. })
        ));
    }
}
