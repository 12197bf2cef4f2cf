//! The daemon's Unix sockets: the private one (a 0700 directory, a lock that makes one daemon
//! per socket, stale socket files replaced, a peer-UID check on every connection), and the
//! shared one other local users reach it by once a session is shared with them.

use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tether_proto::private::{self, DirRule};
use tokio::net::{UnixListener, UnixStream};

/// Why the socket could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Another daemon holds this socket.
    #[error("another tetherd (pid {pid}) is already serving {socket}")]
    AlreadyRunning {
        /// The socket path.
        socket: PathBuf,
        /// The other daemon's pid, as written in the lock file ("unknown" if unreadable).
        pid: String,
    },
    /// The socket's directory cannot be trusted.
    #[error(transparent)]
    UnsafeDir(#[from] tether_proto::private::UnsafeDir),
    /// An IO step failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn io_err<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> BindError + 'a {
    move |source| BindError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// The bound socket; dropping it removes the socket file and releases the lock.
pub struct Listener {
    listener: UnixListener,
    path: PathBuf,
    /// Held while we own the socket file; `None` for a socket inherited from systemd.
    lock: Option<Flock<File>>,
}

impl Listener {
    /// Binds `path`: creates its directory (0700) if missing and checks it under `rule` (never
    /// a symlink, never another user's), takes the daemon lock (`<path>.lock`, not followed
    /// through a symlink), replaces a stale socket file, binds with mode 0600.
    pub fn bind(path: &Path, rule: DirRule) -> Result<Self, BindError> {
        let uid = nix::unistd::getuid().as_raw();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && private::ensure_socket_dir(dir, rule, uid)?
        {
            tracing::warn!(
                dir = %dir.display(),
                "the socket directory was open to other users; its mode is now 0700"
            );
        }
        Self::bind_in(path, 0o600)
    }

    /// Binds the shared socket `path`, the one other local users reach the daemon by: its
    /// directory is ours and writable by nobody else, mode 0711 (others may pass, not list);
    /// the socket 0666 (whoever connects is told apart by [`Listener::accept_any`]'s uid).
    pub fn bind_shared(path: &Path) -> Result<Self, BindError> {
        let uid = nix::unistd::getuid().as_raw();
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        private::ensure_socket_dir(dir, DirRule::Shared, uid)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))
            .map_err(io_err("cannot set permissions on", dir))?;
        Self::bind_in(path, 0o666)
    }

    fn bind_in(path: &Path, mode: u32) -> Result<Self, BindError> {
        let uid = nix::unistd::getuid().as_raw();
        let lock_path = lock_path(path);
        let lock_file = private::open_lock(&lock_path, uid)
            .map_err(io_err("cannot open lock file", &lock_path))?;
        let mut lock = match Flock::lock(lock_file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((mut file, _)) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = pid.trim().to_owned();
                return Err(BindError::AlreadyRunning {
                    socket: path.to_owned(),
                    pid: if pid.is_empty() {
                        "unknown".into()
                    } else {
                        pid
                    },
                });
            }
        };
        lock.set_len(0)
            .and_then(|_| lock.rewind())
            .and_then(|_| write!(lock, "{}", std::process::id()))
            .map_err(io_err("cannot write lock file", &lock_path))?;

        // We hold the lock, so a socket left here belongs to a daemon that died. Anything else
        // by that name (a symlink, a file) is not ours to delete.
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_socket() && meta.uid() == uid => {
                std::fs::remove_file(path).map_err(io_err("cannot remove stale socket", path))?;
            }
            Ok(_) => {
                return Err(BindError::Io {
                    action: "refusing to replace",
                    path: path.to_owned(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::AlreadyExists,
                        "it is not a socket of yours; remove it if it should not be there",
                    ),
                });
            }
            Err(_) => {}
        }
        // Bind with a restrictive umask so the socket is never reachable by others, even briefly.
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
        let bound = std::os::unix::net::UnixListener::bind(path);
        nix::sys::stat::umask(old);
        let std_listener = bound.map_err(io_err("cannot bind", path))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(io_err("cannot set permissions on", path))?;
        std_listener
            .set_nonblocking(true)
            .map_err(io_err("cannot configure", path))?;
        let listener =
            UnixListener::from_std(std_listener).map_err(io_err("cannot listen on", path))?;
        Ok(Self {
            listener,
            path: path.to_owned(),
            lock: Some(lock),
        })
    }

    /// The listening socket systemd passed (`LISTEN_FDS`), if any. systemd owns that socket file:
    /// it is neither locked nor removed by us.
    pub fn inherited() -> Result<Option<Self>, BindError> {
        let mut fds = listenfd::ListenFd::from_env();
        let io = |source| BindError::Io {
            action: "cannot use the socket systemd passed",
            path: PathBuf::from("LISTEN_FDS"),
            source,
        };
        let Some(std_listener) = fds.take_unix_listener(0).map_err(io)? else {
            return Ok(None);
        };
        std_listener.set_nonblocking(true).map_err(io)?;
        let path = std_listener
            .local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(Path::to_owned))
            .unwrap_or_default();
        let listener = UnixListener::from_std(std_listener).map_err(io)?;
        Ok(Some(Self {
            listener,
            path,
            lock: None,
        }))
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts the next connection from this user, with the peer's uid; connections from
    /// other users are closed.
    pub async fn accept(&self) -> std::io::Result<(UnixStream, u32)> {
        loop {
            let (stream, _) = self.listener.accept().await?;
            match stream.peer_cred() {
                Ok(cred) if cred.uid() == nix::unistd::getuid().as_raw() => {
                    return Ok((stream, cred.uid()));
                }
                Ok(cred) => {
                    tracing::warn!(uid = cred.uid(), "closed a connection from another user")
                }
                Err(e) => tracing::warn!("closed a connection whose peer is unknown: {e}"),
            }
        }
    }
}

impl Listener {
    /// Accepts the next connection from anyone, with the peer's uid (the shared socket's
    /// callers decide who may stay).
    pub async fn accept_any(&self) -> std::io::Result<(UnixStream, u32)> {
        loop {
            let (stream, _) = self.listener.accept().await?;
            match stream.peer_cred() {
                Ok(cred) => return Ok((stream, cred.uid())),
                Err(e) => tracing::warn!("closed a connection whose peer is unknown: {e}"),
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // The lock file stays: deleting it could let two daemons lock different inodes.
        if self.lock.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn lock_path(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}
