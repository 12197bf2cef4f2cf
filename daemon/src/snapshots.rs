//! Workspace snapshots: the working tree recorded as a git commit after every call of a tool
//! that changes files, and put back by `/rewind`.
//!
//! Each workspace root (a repository's top, or the session's directory when it is not in one)
//! has a shadow repository under the daemon's data directory, shared by the sessions that work
//! there (so a file is stored once); each session has its own index file in it (the stat cache
//! that keeps an unchanged large tree cheap) and its own ref, `refs/sessions/<id>`, whose
//! commits chain one snapshot to the next. What goes in: tracked files and untracked files
//! that are not ignored (the tree's `.gitignore` files, the repository's `info/exclude`, the
//! user's global excludes), minus the deny-list (secrets, whatever `.gitignore` says).
//!
//! Invariant: nothing here writes to the user's repository: not its index, HEAD, branches,
//! stash, reflog or objects. A snapshot that cannot be taken is an error the caller turns into
//! a notice; it never fails the tool call it follows.

use git2::{IndexAddOption, ObjectType, Oid, Repository, Signature};
use globset::{Glob, GlobSet, GlobSetBuilder};
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Why a snapshot or a restore could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Files left out of a snapshot to keep it under the cap (told as a notice; the snapshot
    /// itself was taken).
    #[error(
        "left out of the snapshot, as the changed files were over {cap} MB (snapshots.max_mb): {files}; /rewind cannot restore them"
    )]
    LeftOut {
        /// The cap, in MB.
        cap: u64,
        /// The files, each with its size.
        files: String,
    },
    /// The directory is one tether does not record (a home or root directory outside a
    /// repository).
    #[error("{0}")]
    Refused(String),
    /// git could not read or write something.
    #[error("{what}: {source}")]
    Git {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: git2::Error,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The cluster's store did not take the snapshot.
    #[error("the cluster's store did not take the snapshot: {0}")]
    Upload(String),
    /// A snapshot named in the log is not in the shadow repository.
    #[error("snapshot {0} is not in this machine's snapshot store")]
    Missing(String),
}

fn git(what: impl Into<String>) -> impl FnOnce(git2::Error) -> SnapshotError {
    let what = what.into();
    move |source| SnapshotError::Git { what, source }
}

/// What every snapshot of this daemon follows: where shadow repositories live, what is kept
/// out, how much one snapshot may add.
#[derive(Debug)]
pub struct Policy {
    dir: PathBuf,
    names: GlobSet,
    paths: GlobSet,
    max_bytes: u64,
}

impl Policy {
    /// Shadow repositories under `dir`; `deny` globs (a pattern without `/` matches a file's
    /// name anywhere, one with `/` its path from the root); at most `max_mb` of changed files
    /// per snapshot. A pattern that is not a glob is an error naming it.
    pub fn new(dir: PathBuf, deny: &[String], max_mb: u64) -> Result<Self, String> {
        let mut names = GlobSetBuilder::new();
        let mut paths = GlobSetBuilder::new();
        for pattern in deny {
            let glob = Glob::new(pattern)
                .map_err(|e| format!("snapshots.deny: {pattern:?} is not a glob: {e}"))?;
            if pattern.contains('/') {
                paths.add(glob);
            } else {
                names.add(glob);
            }
        }
        let build = |b: GlobSetBuilder| b.build().map_err(|e| format!("snapshots.deny: {e}"));
        Ok(Self {
            dir,
            names: build(names)?,
            paths: build(paths)?,
            max_bytes: max_mb.saturating_mul(1024 * 1024),
        })
    }

    /// Whether `path` (relative to the root) is kept out of every snapshot: its file name
    /// matches a name pattern, or its whole path a path pattern.
    pub fn denied(&self, path: &Path) -> bool {
        self.paths.is_match(path) || path.file_name().is_some_and(|n| self.names.is_match(n))
    }
}

/// One snapshot: a commit of the shadow repository and its tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The commit.
    pub commit: String,
    /// Its tree (equal trees: equal working trees).
    pub tree: String,
    /// The snapshot before it, when this one is new (`None`: unchanged, or the first).
    pub parent: Option<String>,
    /// Whether this call made it (not the previous snapshot again).
    pub created: bool,
    /// The largest changed files, left out to keep it under the cap, with their sizes.
    pub left_out: Vec<(String, u64)>,
}

impl Shadow {
    /// What to tell about the files `taken` left out, if it left any out.
    pub fn left_out(&self, taken: &Taken) -> Option<SnapshotError> {
        let cap_bytes = self.policy.max_bytes;
        if taken.left_out.is_empty() {
            return None;
        }
        let files = taken
            .left_out
            .iter()
            .map(|(f, n)| format!("{f} ({:.1} MB)", *n as f64 / (1024.0 * 1024.0)))
            .collect::<Vec<_>>()
            .join(", ");
        Some(SnapshotError::LeftOut {
            cap: cap_bytes / (1024 * 1024),
            files,
        })
    }
}

/// What a restore did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    /// Files put back as they were (or removed, where they did not exist then).
    pub restored: Vec<String>,
    /// Files tether changed that were also edited outside tether since, left as they are.
    pub kept: Vec<String>,
    /// Files changed by someone else since, not touched.
    pub outside: Vec<String>,
    /// Files that could not be put back, each with why.
    pub failed: Vec<String>,
    /// The snapshot of the tree after the restore.
    pub after: Option<Taken>,
}

/// A session's snapshots: its shadow repository, index and ref, opened on first use.
#[derive(Debug)]
pub struct Shadow {
    policy: Arc<Policy>,
    session: String,
    start: PathBuf,
    state: Mutex<State>,
    /// The newest snapshot known to be in the cluster's store (apart from `state`, which a
    /// scan holds for long: an async task reads this).
    uploaded: Mutex<Option<String>>,
}

#[derive(Default)]
struct State {
    open: Option<Open>,
    /// The turn whose first snapshot-before has been taken.
    before_for: Option<String>,
    /// The last failure told, so the same one is told once.
    told: Option<String>,
    /// Why this directory is not snapshotted, once that is known.
    refused: Option<String>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("root", &self.open.as_ref().map(|o| &o.root))
            .field("before_for", &self.before_for)
            .finish()
    }
}

struct Open {
    repo: Repository,
    root: PathBuf,
    refname: String,
    /// Whether the root is a repository's top (else a plain directory).
    repository: bool,
}

/// The most files a plain directory (not a repository) may have changed at once: more, and it
/// is not snapshotted (a download folder, a whole disk).
const PLAIN_DIRECTORY_FILES: usize = 20_000;

impl Shadow {
    /// The snapshots of session `session`, whose directory is `start`.
    pub fn new(policy: Arc<Policy>, session: &str, start: PathBuf) -> Self {
        Self {
            policy,
            session: session.to_owned(),
            start,
            state: Mutex::new(State::default()),
            uploaded: Mutex::new(None),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn uploaded(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.uploaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the snapshot before the first change of turn `turn` is still to take (and marks
    /// it taken).
    pub fn first_of_turn(&self, turn: &str) -> bool {
        let mut state = self.state();
        if state.before_for.as_deref() == Some(turn) {
            return false;
        }
        state.before_for = Some(turn.to_owned());
        true
    }

    /// `message`, unless it is the failure told last (then `None`); a success clears it.
    pub fn tell_once(&self, outcome: Result<(), &SnapshotError>) -> Option<String> {
        let mut state = self.state();
        match outcome {
            Ok(()) => {
                state.told = None;
                None
            }
            Err(e) => {
                let text = e.to_string();
                (state.told.as_deref() != Some(&text)).then(|| {
                    state.told = Some(text.clone());
                    text
                })
            }
        }
    }

    fn open<'s>(&self, state: &'s mut State) -> Result<&'s Open, SnapshotError> {
        if let Some(why) = &state.refused {
            return Err(SnapshotError::Refused(why.clone()));
        }
        if state.open.is_none() {
            match self.open_now() {
                Ok(open) => state.open = Some(open),
                // Refused for good: not asked again for every call.
                Err(SnapshotError::Refused(why)) => {
                    state.refused = Some(why.clone());
                    return Err(SnapshotError::Refused(why));
                }
                Err(e) => return Err(e),
            }
        }
        state
            .open
            .as_ref()
            .ok_or_else(|| SnapshotError::Refused("the snapshot store is not open".into()))
    }

    fn open_now(&self) -> Result<Open, SnapshotError> {
        let user = Repository::discover(&self.start).ok();
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let root = match user.as_ref().and_then(|r| r.workdir()) {
            Some(top) => {
                // A repository of dotfiles at home hides everything else it holds.
                let hidden = user
                    .as_ref()
                    .and_then(|u| u.config().ok())
                    .and_then(|c| c.get_string("status.showUntrackedFiles").ok())
                    .is_some_and(|v| v == "no");
                if hidden {
                    return Err(SnapshotError::Refused(format!(
                        "the repository at {} hides untracked files (status.showUntrackedFiles = no), so a snapshot would take in everything under it: tether does not snapshot it (so /rewind cannot restore files here)",
                        top.display()
                    )));
                }
                top.to_path_buf()
            }
            None => {
                let start = self
                    .start
                    .canonicalize()
                    .unwrap_or_else(|_| self.start.clone());
                let shared = [
                    Some(PathBuf::from("/")),
                    home.clone(),
                    Some(std::env::temp_dir()),
                    Some(PathBuf::from("/tmp")),
                ];
                if shared
                    .iter()
                    .flatten()
                    .any(|d| d.canonicalize().unwrap_or_else(|_| d.clone()) == start)
                {
                    return Err(SnapshotError::Refused(format!(
                        "{} is not in a git repository and is a home, temporary or root directory: tether does not snapshot it (so /rewind cannot restore files here)",
                        self.start.display()
                    )));
                }
                self.start.clone()
            }
        };
        let repository = user.as_ref().is_some_and(|u| u.workdir().is_some());
        let root = root.canonicalize().map_err(|source| SnapshotError::Io {
            path: root.clone(),
            source,
        })?;
        let key = Oid::hash_object(ObjectType::Blob, root.as_os_str().as_encoded_bytes())
            .map_err(git("naming the snapshot store"))?;
        let dir = self.policy.dir.join(&key.to_string()[..16]);
        let repo = match Repository::open_bare(&dir) {
            Ok(repo) => repo,
            Err(_) => Repository::init_bare(&dir).map_err(git(format!(
                "creating the snapshot store {}",
                dir.display()
            )))?,
        };
        repo.set_workdir(&root, false)
            .map_err(git("pointing the snapshot store at the workspace"))?;
        // The user's own excludes, as git status would honour them.
        let mut rules = String::from(".git\n");
        if let Some(info) = user.as_ref().map(|u| u.path().join("info").join("exclude"))
            && let Ok(text) = std::fs::read_to_string(info)
        {
            rules.push_str(&text);
            rules.push('\n');
        }
        // Never the daemon's own files, should they lie under the root.
        if let Ok(inside) = self
            .policy
            .dir
            .canonicalize()
            .unwrap_or_else(|_| self.policy.dir.clone())
            .strip_prefix(&root)
        {
            rules.push_str(&format!("/{}\n", inside.display()));
        }
        repo.add_ignore_rule(&rules)
            .map_err(git("reading the ignore rules"))?;
        let index_path = dir.join(format!("index-{}", self.session));
        // Locks a killed daemon left would refuse every write: only this daemon writes these.
        for lock in [
            dir.join(format!("index-{}.lock", self.session)),
            dir.join(format!("refs/sessions/{}.lock", self.session)),
        ] {
            let _ = std::fs::remove_file(lock);
        }
        if !index_path.exists() {
            seed_index(&dir, &index_path);
        }
        let mut index =
            git2::Index::open(&index_path).map_err(git("opening the session's snapshot index"))?;
        repo.set_index(&mut index)
            .map_err(git("opening the session's snapshot index"))?;
        // What the deny-list names now is never kept, whatever an earlier list let in.
        let denied: Vec<PathBuf> = index
            .iter()
            .map(|e| PathBuf::from(String::from_utf8_lossy(&e.path).into_owned()))
            .filter(|p| self.policy.denied(p))
            .collect();
        if !denied.is_empty() {
            for path in &denied {
                let _ = index.remove_path(path);
            }
            let _ = index.write();
        }
        Ok(Open {
            repo,
            root,
            refname: format!("refs/sessions/{}", self.session),
            repository,
        })
    }

    /// Records the working tree now, with `message`: a new commit whose parent is the
    /// session's previous snapshot, or that snapshot itself when nothing changed.
    pub fn take(&self, message: &str) -> Result<Taken, SnapshotError> {
        let mut state = self.state();
        let open = self.open(&mut state)?;
        let taken = take(open, &self.policy, message);
        if let Err(SnapshotError::Refused(why)) = &taken {
            state.refused = Some(why.clone());
        }
        taken
    }

    /// Puts back the files tether changed since snapshot `to` as they were there. What tether
    /// changed is what the snapshots in `made` (those its tool calls and rewinds recorded)
    /// changed over their parents, on the chain from `to` to `last` (the last one the log
    /// names); what changed between them (edits made between turns) and since `last` was
    /// someone else's. A file someone else changed too is kept as it is, unless `overwrite`.
    /// Then records the result.
    pub fn restore(
        &self,
        to: &str,
        last: &str,
        made: &HashSet<String>,
        overwrite: bool,
        message: &str,
    ) -> Result<Restored, SnapshotError> {
        let mut state = self.state();
        let open = self.open(&mut state)?;
        let repo = &open.repo;
        let target = find_commit(repo, to)?;
        let target_id = target.id();
        let target = target.tree().map_err(git("reading a snapshot"))?;
        let tip = find_commit(repo, last)?;
        let (mut ours, mut theirs) = (BTreeSet::new(), BTreeSet::new());
        let mut at = tip.clone();
        let mut reached = at.id() == target_id;
        while !reached {
            let Ok(parent) = at.parent(0) else { break };
            let changed = changed_paths(
                repo,
                &parent.tree().map_err(git("reading a snapshot"))?,
                &at.tree().map_err(git("reading a snapshot"))?,
            )?;
            if made.contains(&at.id().to_string()) {
                ours.extend(changed);
            } else {
                theirs.extend(changed);
            }
            reached = parent.id() == target_id;
            at = parent;
        }
        if !reached {
            // Not on one chain (snapshots of another node): all the difference counts.
            ours = changed_paths(
                repo,
                &target,
                &tip.tree().map_err(git("reading a snapshot"))?,
            )?;
            theirs.clear();
        }
        let now = take(open, &self.policy, "before a rewind")?;
        let now = repo
            .find_tree(Oid::from_str(&now.tree).map_err(git("reading a snapshot"))?)
            .map_err(git("reading a snapshot"))?;
        theirs.extend(changed_paths(
            repo,
            &tip.tree().map_err(git("reading a snapshot"))?,
            &now,
        )?);
        let mut done = Restored::default();
        for path in &ours {
            if theirs.contains(path) && !overwrite {
                done.kept.push(path.clone());
                continue;
            }
            match put_back(repo, &open.root, &target, path) {
                Ok(()) => done.restored.push(path.clone()),
                Err(e) => done.failed.push(format!("{path}: {e}")),
            }
        }
        done.outside = theirs.difference(&ours).cloned().collect();
        // The files are back whatever happens now; a failed record only leaves the next
        // rewind counting them as changed by someone else.
        done.after = take(open, &self.policy, message).ok();
        Ok(done)
    }
}

/// How long a tool's result may wait for its snapshot to reach the cluster's store.
const UPLOAD_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// A turn's handle on its session's snapshots.
#[derive(Debug, Clone)]
pub struct TurnSnapshots {
    /// The session's snapshots.
    pub shadow: Arc<Shadow>,
    /// The turn's id (the snapshot before its first change is taken once).
    pub turn: String,
    /// Where new snapshots go for other nodes (cluster mode).
    pub packs: Option<Arc<dyn PackStore>>,
}

impl TurnSnapshots {
    /// The snapshot before the turn's first call that changes files; `None` for later calls.
    pub async fn before(&self, label: String) -> Option<Result<Taken, SnapshotError>> {
        if !self.shadow.first_of_turn(&self.turn) {
            return None;
        }
        let taken = self.take(label).await;
        if taken.is_err() {
            // Tried again before the turn's next change.
            self.shadow.state().before_for = None;
        }
        Some(taken)
    }

    /// Records the working tree now (off the async threads: it reads the whole tree); in a
    /// cluster, a new snapshot counts once its objects are in the cluster's store.
    pub async fn take(&self, label: String) -> Result<Taken, SnapshotError> {
        let shadow = self.shadow.clone();
        let taken = tokio::task::spawn_blocking(move || shadow.take(&label))
            .await
            .unwrap_or_else(|e| {
                Err(SnapshotError::Refused(format!("the snapshot stopped: {e}")))
            })?;
        self.share(&taken).await?;
        Ok(taken)
    }

    /// Makes a snapshot count in the cluster (its own, or a rewind's): a cluster that does not
    /// answer holds no tool result back for long, the snapshot then does not count, and the
    /// next one's pack carries its objects. Nothing to do on one machine.
    pub async fn share(&self, taken: &Taken) -> Result<(), SnapshotError> {
        let Some(packs) = &self.packs else {
            return Ok(());
        };
        tokio::time::timeout(UPLOAD_PATIENCE, self.upload(packs.as_ref(), taken))
            .await
            .map_err(|_| {
                SnapshotError::Upload(format!("no answer within {}s", UPLOAD_PATIENCE.as_secs()))
            })?
    }

    /// Sends the objects of `taken` the cluster's store lacks, as one pack named after it
    /// whose base is the newest snapshot the store has.
    async fn upload(&self, packs: &dyn PackStore, taken: &Taken) -> Result<(), SnapshotError> {
        let known = self.shadow.uploaded().clone();
        if known.as_deref() == Some(taken.commit.as_str()) {
            return Ok(());
        }
        if !taken.created && packs.has(taken.commit.clone()).await {
            *self.shadow.uploaded() = Some(taken.commit.clone());
            return Ok(());
        }
        let base = match (&taken.parent, known) {
            (Some(parent), Some(known)) if *parent == known => Some(known),
            (Some(parent), known) => {
                if packs.has(parent.clone()).await {
                    Some(parent.clone())
                } else {
                    known
                }
            }
            (None, known) => known,
        };
        let shadow = self.shadow.clone();
        let (commit, from) = (taken.commit.clone(), base.clone());
        let pack = tokio::task::spawn_blocking(move || shadow.pack(&commit, from.as_deref()))
            .await
            .unwrap_or_else(|e| Err(SnapshotError::Refused(format!("packing stopped: {e}"))))?;
        packs
            .put(taken.commit.clone(), base, pack)
            .await
            .map_err(SnapshotError::Upload)?;
        *self.shadow.uploaded() = Some(taken.commit.clone());
        Ok(())
    }
}

/// Where the cluster keeps snapshots: one pack per snapshot, holding its objects beyond its
/// base's.
pub trait PackStore: Send + Sync + std::fmt::Debug {
    /// Stores the pack of `commit`, whose objects beyond those of `base` it holds.
    fn put(
        &self,
        commit: String,
        base: Option<String>,
        pack: Vec<u8>,
    ) -> futures::future::BoxFuture<'static, Result<(), String>>;
    /// Whether the pack of `commit` is stored.
    fn has(&self, commit: String) -> futures::future::BoxFuture<'static, bool>;
    /// The pack of `commit` and its base; `Ok(None)` when it is not stored.
    #[allow(clippy::type_complexity)]
    fn get(
        &self,
        commit: String,
    ) -> futures::future::BoxFuture<'static, Result<Option<(Vec<u8>, Option<String>)>, String>>;
}

/// Starts a session's index as a copy of the newest one in the store, so its first snapshot
/// finds the stat cache warm (a large tree is not read whole again). Any index is a valid start:
/// the scan brings it to the working tree.
fn seed_index(dir: &Path, to: &Path) {
    let newest = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("index-") && !name.ends_with(".lock")
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max();
    if let Some((_, from)) = newest {
        let _ = std::fs::copy(from, to);
    }
}

fn find_commit<'r>(repo: &'r Repository, id: &str) -> Result<git2::Commit<'r>, SnapshotError> {
    Oid::from_str(id)
        .ok()
        .and_then(|oid| repo.find_commit(oid).ok())
        .ok_or_else(|| SnapshotError::Missing(id.to_owned()))
}

fn take(open: &Open, policy: &Policy, message: &str) -> Result<Taken, SnapshotError> {
    let repo = &open.repo;
    let mut index = repo.index().map_err(git("opening the snapshot index"))?;
    // First what changed, and how much: nothing is added yet.
    let mut changed: Vec<(PathBuf, u64)> = Vec::new();
    let mut denied: Vec<PathBuf> = Vec::new();
    let mut look = |path: &Path, _spec: &[u8]| -> i32 {
        if policy.denied(path) {
            denied.push(path.to_path_buf());
        } else {
            let size = std::fs::symlink_metadata(open.root.join(path)).map_or(0, |m| m.len());
            changed.push((path.to_path_buf(), size));
        }
        1
    };
    index
        .add_all(["*"], IndexAddOption::DEFAULT, Some(&mut look))
        .map_err(git("reading the working tree"))?;
    if !open.repository && changed.len() > PLAIN_DIRECTORY_FILES {
        return Err(SnapshotError::Refused(format!(
            "{} is not a git repository and holds over {PLAIN_DIRECTORY_FILES} files: tether does not snapshot it (so /rewind cannot restore files here)",
            open.root.display()
        )));
    }
    // Over the cap, the largest files stay out until the rest fits.
    let mut left_out: Vec<(String, u64)> = Vec::new();
    let mut total: u64 = changed.iter().map(|(_, n)| n).sum();
    if total > policy.max_bytes {
        let mut by_size: Vec<&(PathBuf, u64)> = changed.iter().collect();
        by_size.sort_by_key(|b| std::cmp::Reverse(b.1));
        for (path, size) in by_size {
            if total <= policy.max_bytes {
                break;
            }
            total -= size;
            left_out.push((path.to_string_lossy().into_owned(), *size));
        }
    }
    let skip: HashSet<&str> = left_out.iter().map(|(p, _)| p.as_str()).collect();
    // Then only those paths: the tree is not walked again.
    let wanted: Vec<&Path> = changed
        .iter()
        .map(|(p, _)| p.as_path())
        .filter(|p| !skip.contains(p.to_string_lossy().as_ref()))
        .collect();
    for path in wanted {
        let present = std::fs::symlink_metadata(open.root.join(path)).is_ok();
        let done = if present {
            index.add_path(path)
        } else {
            index.remove_path(path)
        };
        if let Err(e) = done {
            // Forget what this snapshot put in the index.
            let _ = index.read(true);
            return Err(SnapshotError::Git {
                what: format!("reading {}", path.display()),
                source: e,
            });
        }
    }
    // A file the deny-list covers is never kept, even if an earlier list let it in.
    for path in denied {
        let _ = index.remove_path(&path);
    }
    let tree = index
        .write_tree()
        .map_err(git("writing the snapshot's tree"))?;
    index.write().map_err(git("saving the snapshot index"))?;
    let parent = repo
        .refname_to_id(&open.refname)
        .ok()
        .and_then(|id| repo.find_commit(id).ok());
    if let Some(parent) = &parent
        && parent.tree_id() == tree
    {
        return Ok(Taken {
            commit: parent.id().to_string(),
            tree: tree.to_string(),
            parent: None,
            created: false,
            left_out,
        });
    }
    let tree_obj = repo.find_tree(tree).map_err(git("reading the tree"))?;
    let who = Signature::now("tether", "tether@localhost").map_err(git("signing"))?;
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    let commit = repo
        .commit(
            Some(&open.refname),
            &who,
            &who,
            message,
            &tree_obj,
            &parents,
        )
        .map_err(git("writing the snapshot"))?;
    Ok(Taken {
        commit: commit.to_string(),
        tree: tree.to_string(),
        parent: parent.map(|p| p.id().to_string()),
        created: true,
        left_out,
    })
}

/// The paths that differ between two trees.
fn changed_paths(
    repo: &Repository,
    from: &git2::Tree<'_>,
    to: &git2::Tree<'_>,
) -> Result<BTreeSet<String>, SnapshotError> {
    let diff = repo
        .diff_tree_to_tree(Some(from), Some(to), None)
        .map_err(git("comparing snapshots"))?;
    Ok(diff
        .deltas()
        .flat_map(|d| [d.old_file().path(), d.new_file().path()])
        .flatten()
        .map(|p| p.to_string_lossy().into_owned())
        .collect())
}

/// Makes `path` under `root` what it is in `tree`: its contents and mode, or no file. A path
/// whose folder now leads outside the root (a symlink), or where a folder now stands, is left
/// alone with an error.
fn put_back(
    repo: &Repository,
    root: &Path,
    tree: &git2::Tree<'_>,
    path: &str,
) -> Result<(), SnapshotError> {
    let file = root.join(path);
    let io = |source| SnapshotError::Io {
        path: file.clone(),
        source,
    };
    let refuse = |why: &str| io(std::io::Error::other(why.to_owned()));
    // The deepest existing folder on the way must still be inside the root.
    let mut existing = file.parent();
    while let Some(dir) = existing.filter(|d| !d.exists()) {
        existing = dir.parent();
    }
    if let Some(dir) = existing
        && !dir.canonicalize().is_ok_and(|d| d.starts_with(root))
    {
        return Err(refuse("its folder now leads outside the working tree"));
    }
    let now = std::fs::symlink_metadata(&file).ok();
    if now.as_ref().is_some_and(|m| m.is_dir()) {
        return Err(refuse("a folder stands there now"));
    }
    let entry = match tree.get_path(Path::new(path)) {
        Ok(entry) => entry,
        Err(e) if e.code() == git2::ErrorCode::NotFound => {
            match std::fs::remove_file(&file) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(e)),
            }
            // Folders the change made, now empty, go too.
            let mut dir = file.parent();
            while let Some(d) = dir.filter(|d| d.starts_with(root) && *d != root) {
                if std::fs::remove_dir(d).is_err() {
                    break;
                }
                dir = d.parent();
            }
            return Ok(());
        }
        Err(e) => return Err(git(format!("reading {path} from a snapshot"))(e)),
    };
    // A submodule's commit is not a file tether can write back.
    if entry.kind() != Some(ObjectType::Blob) {
        return Err(refuse("a submodule is not put back"));
    }
    let blob = repo
        .find_blob(entry.id())
        .map_err(git(format!("reading {path} from a snapshot")))?;
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    use std::os::unix::fs::PermissionsExt;
    match entry.filemode() {
        0o120000 => {
            use std::os::unix::ffi::OsStrExt;
            let target = std::ffi::OsStr::from_bytes(blob.content());
            if now.is_some() {
                std::fs::remove_file(&file).map_err(io)?;
            }
            std::os::unix::fs::symlink(target, &file).map_err(io)?;
        }
        mode => {
            // A symlink there now is replaced, never written through.
            if now.as_ref().is_some_and(|m| m.file_type().is_symlink()) {
                std::fs::remove_file(&file).map_err(io)?;
            }
            let had = now
                .filter(|m| m.is_file())
                .map(|m| m.permissions().mode() & 0o7777);
            std::fs::write(&file, blob.content()).map_err(io)?;
            // The file's own permissions, with the executable bits the snapshot says.
            let base = had.unwrap_or(0o644) & !0o111;
            let perm = if mode == 0o100755 {
                base | ((base & 0o444) >> 2)
            } else {
                base
            };
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(perm)).map_err(io)?;
        }
    }
    Ok(())
}

mod packs;
#[cfg(test)]
mod tests;
