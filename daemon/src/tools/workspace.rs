//! A session's workspace: its working directories and current directory (the one check of path
//! containment the permission layer builds on), the stamps that catch stale edits, the scratch
//! directory, and its background jobs.

use std::path::PathBuf;

/// What a file looked like when a tool last read or wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    modified: Option<std::time::SystemTime>,
    len: u64,
    /// CRC-32 of the contents; `None` for a file too large to hash on every check, which is
    /// compared by length and modification time instead.
    hash: Option<u32>,
}

impl FileStamp {
    /// Files up to this size are compared by content.
    pub const HASHED_UP_TO: u64 = 64 * 1024 * 1024;

    /// The stamp of `bytes` read from a file with `modified` time.
    pub fn of(bytes: &[u8], modified: Option<std::time::SystemTime>) -> Self {
        let len = bytes.len() as u64;
        Self {
            modified,
            len,
            hash: (len <= Self::HASHED_UP_TO).then(|| crc32fast::hash(bytes)),
        }
    }

    /// The stamp of a file read in pieces: its length, modification time and (for a file that
    /// is hashed at all) the CRC of everything read.
    pub fn streamed(
        len: u64,
        modified: Option<std::time::SystemTime>,
        crc: Option<crc32fast::Hasher>,
    ) -> Self {
        Self {
            modified,
            len,
            hash: crc
                .filter(|_| len <= Self::HASHED_UP_TO)
                .map(crc32fast::Hasher::finalize),
        }
    }

    /// The stamp of the file at `path` now (reads it whole only if it is hashed).
    pub fn current(path: &std::path::Path) -> std::io::Result<Self> {
        let meta = std::fs::metadata(path)?;
        let modified = meta.modified().ok();
        if meta.len() > Self::HASHED_UP_TO {
            return Ok(Self {
                modified,
                len: meta.len(),
                hash: None,
            });
        }
        Ok(Self::of(&std::fs::read(path)?, modified))
    }

    /// Whether two stamps name the same contents.
    fn same(&self, other: &Self) -> bool {
        self.len == other.len
            && match (self.hash, other.hash) {
                (Some(a), Some(b)) => a == b,
                _ => self.modified == other.modified,
            }
    }
}

/// A session's working directories and current directory, shared by its tools across turns.
///
/// Invariant: the current directory always stays inside one of the roots; this is the one check
/// of path containment the permission layer builds on.
#[derive(Debug)]
pub struct Workspace {
    roots: Vec<PathBuf>,
    cwd: std::sync::Mutex<PathBuf>,
    scratch: PathBuf,
    stamps: std::sync::Mutex<std::collections::HashMap<PathBuf, FileStamp>>,
    /// Background jobs (shells started with `run_in_background`).
    pub jobs: super::jobs::Jobs,
    /// Variables the settings files' `env` sets for commands.
    env: Vec<(String, String)>,
    /// What the user's Read deny rules keep from the search tools (set for each turn).
    fence: std::sync::Mutex<Option<super::walk::Fence>>,
    /// The OS sandbox Bash runs in, as the current turn set it (none: Bash runs unsandboxed).
    sandbox: std::sync::Mutex<Option<std::sync::Arc<crate::sandbox::Sandbox>>>,
    /// The sandbox's network proxy, started by the first sandboxed call that needs it and
    /// stopped with the workspace (or when the allowed domains become none).
    proxy: std::sync::Mutex<Option<crate::sandbox::proxy::Proxy>>,
    /// Memory files a touched file brought, already given to the model.
    told: std::sync::Mutex<std::collections::HashSet<PathBuf>>,
}

impl Workspace {
    /// A workspace rooted at `root` (plus `extra` directories), with `scratch` for tool output files.
    pub fn new(root: PathBuf, extra: Vec<PathBuf>, scratch: PathBuf) -> Self {
        let mut roots = vec![root.clone()];
        roots.extend(extra);
        Self {
            roots,
            cwd: std::sync::Mutex::new(root),
            scratch,
            stamps: Default::default(),
            jobs: Default::default(),
            env: Vec::new(),
            fence: Default::default(),
            sandbox: Default::default(),
            proxy: Default::default(),
            told: Default::default(),
        }
    }

    /// The same, with `env` set for every command it runs.
    pub fn with_env(mut self, env: Vec<(String, String)>) -> Self {
        self.env = env;
        self
    }

    /// What touching `file` tells the model that it was not told yet: the memory files of the
    /// folders below the session's directory down to the file's, and the rules whose `paths:`
    /// match it (Claude Code's nested CLAUDE.md and path rules), as a system reminder.
    pub fn memory_for(&self, file: &std::path::Path) -> Option<String> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let found = crate::context::memory::for_file(file, &self.roots[0], home.as_deref());
        let mut told = self.told.lock().unwrap_or_else(|p| p.into_inner());
        let new: Vec<String> = found
            .into_iter()
            .filter(|m| told.insert(m.path.clone()))
            .map(|m| format!("Contents of {}:\n\n{}", m.path.display(), m.text.trim_end()))
            .collect();
        (!new.is_empty()).then(|| {
            format!(
                "<system-reminder>\nInstructions that apply to {} (follow them for files there):\n\n{}\n</system-reminder>",
                file.display(),
                new.join("\n\n")
            )
        })
    }

    /// The working directories (the session's first).
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// The variables set for commands.
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// Sets what the search tools' walks skip (the Read deny rules in effect).
    pub fn set_fence(&self, fence: Option<super::walk::Fence>) {
        *self.fence.lock().unwrap_or_else(|p| p.into_inner()) = fence;
    }

    /// What the search tools' walks skip.
    pub fn fence(&self) -> Option<super::walk::Fence> {
        self.fence.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The sandbox Bash calls run in now.
    pub fn sandbox(&self) -> Option<std::sync::Arc<crate::sandbox::Sandbox>> {
        self.sandbox
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sets the sandbox for the calls to come (a turn sets it as it starts, so its permission
    /// checks and its Bash calls see the same one).
    pub fn set_sandbox(&self, sandbox: Option<crate::sandbox::Sandbox>) {
        {
            // A running proxy follows the new list at once (background jobs included).
            let mut proxy = self.proxy.lock().unwrap_or_else(|p| p.into_inner());
            match sandbox.as_ref().and_then(|s| s.network()) {
                Some(allowed) => {
                    if let Some(p) = proxy.as_ref() {
                        p.allow(allowed);
                    }
                }
                None => *proxy = None,
            }
        }
        *self.sandbox.lock().unwrap_or_else(|p| p.into_inner()) = sandbox.map(std::sync::Arc::new);
    }

    /// The socket of the session's network proxy for `sandbox` (`None` when its network is
    /// off), started if it is not running; it serves `sandbox`'s allowed domains from now on.
    /// Needs a runtime.
    pub fn proxy(
        &self,
        sandbox: &crate::sandbox::Sandbox,
    ) -> Result<Option<PathBuf>, crate::sandbox::proxy::ProxyError> {
        let Some(allowed) = sandbox.network() else {
            return Ok(None);
        };
        let mut slot = self.proxy.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = slot
            .as_ref()
            .filter(|p| p.running() && p.socket() == sandbox.proxy_socket)
        {
            p.allow(allowed);
            return Ok(Some(p.socket().to_owned()));
        }
        // The old one (its socket file included) goes before the new one binds.
        *slot = None;
        let p = crate::sandbox::proxy::Proxy::start(sandbox.proxy_socket.clone(), allowed)?;
        let socket = p.socket().to_owned();
        *slot = Some(p);
        Ok(Some(socket))
    }

    /// Remembers what a file looked like when it was read or written.
    pub fn remember(&self, path: &std::path::Path, stamp: FileStamp) {
        self.stamps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(normalize(path), stamp);
    }

    /// Checks that an existing file was read in this session and has not changed since; a file
    /// that does not exist needs no reading.
    pub fn check_fresh(&self, path: &std::path::Path) -> Result<(), String> {
        let Ok(now) = FileStamp::current(path) else {
            return Ok(());
        };
        let known = self
            .stamps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&normalize(path))
            .copied();
        match known {
            None => Err(format!(
                "{} exists but has not been read in this session; Read it first so you change what is really there",
                path.display()
            )),
            Some(s) if !s.same(&now) => Err(format!(
                "{} was modified since you last read it (by the user or another program); Read it again before changing it",
                path.display()
            )),
            Some(_) => Ok(()),
        }
    }

    /// The current directory.
    pub fn cwd(&self) -> PathBuf {
        self.cwd.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether `path` is inside the working directories.
    pub fn contains(&self, path: &std::path::Path) -> bool {
        let path = normalize(path);
        self.roots.iter().any(|r| path.starts_with(normalize(r)))
    }

    /// Moves the current directory; refused outside the working directories.
    pub fn set_cwd(&self, dir: PathBuf) -> Result<(), String> {
        if !self.contains(&dir) {
            return Err(format!(
                "{} is outside the session's working directories ({}); the current directory stays {}",
                dir.display(),
                self.roots
                    .iter()
                    .map(|r| r.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                self.cwd().display()
            ));
        }
        *self.cwd.lock().unwrap_or_else(|p| p.into_inner()) = dir;
        Ok(())
    }

    /// A directory for files tools hand back by path (full outputs).
    pub fn scratch(&self) -> &std::path::Path {
        &self.scratch
    }

    /// Where a call that runs outside the OS sandbox keeps its script and files while the
    /// sandbox is on: beside [`Workspace::scratch`] (which sandboxed commands can write), never
    /// inside it, so a sandboxed command cannot rewrite what an unsandboxed one runs.
    pub fn host_scratch(&self) -> PathBuf {
        let mut name = self.scratch.file_name().unwrap_or_default().to_owned();
        name.push(HOST_SUFFIX);
        self.scratch.with_file_name(name)
    }
}

/// The suffix of [`Workspace::host_scratch`]'s directory name.
pub const HOST_SUFFIX: &str = ".host";

/// `path` with `.` and `..` resolved lexically (symlinks are not followed).
pub fn normalize(path: &std::path::Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
