//! Private files and directories: the modes and ownership rules that daemon and client apply
//! identically, so neither can be tricked into the other's blind spot.
//!
//! - Everything tether creates for itself (data, logs, the runtime directory, caches, config it
//!   writes) is a directory of mode 0700 or a file of mode 0600, whatever the umask.
//! - A socket directory tether chose by itself (`$XDG_RUNTIME_DIR/tether`, `/tmp/tether-$UID`)
//!   must be a real directory (never a symlink) owned by the user with mode 0700; one the user
//!   named with `TETHER_SOCKET` must be the user's own (not writable by others) or a shared
//!   sticky directory such as `/tmp`, where nobody can replace another user's files.
//! - Lock files are opened without following symlinks.
//!
//! These are the only filesystem calls of the wire crate; they touch nothing but the paths given.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of every directory tether creates.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file tether creates.
pub const FILE_MODE: u32 = 0o600;

/// Why a directory cannot be trusted to hold the daemon's socket.
#[derive(Debug, thiserror::Error)]
pub enum UnsafeDir {
    /// The path is a symbolic link.
    #[error(
        "{dir} is a symbolic link, not a directory; {fix}",
        dir = .0.display(),
        fix = FIX
    )]
    Symlink(PathBuf),
    /// The path is not a directory.
    #[error("{dir} is not a directory; {fix}", dir = .0.display(), fix = FIX)]
    NotADirectory(PathBuf),
    /// Another user owns it.
    #[error(
        "{dir} belongs to uid {owner}, not to you (uid {uid}): another user may have created it to intercept tether; {fix}",
        dir = .dir.display(),
        fix = FIX
    )]
    Owner {
        /// The directory.
        dir: PathBuf,
        /// Its owner.
        owner: u32,
        /// This user.
        uid: u32,
    },
    /// Others can enter it (a private directory) or write into it (a named one, not sticky).
    #[error(
        "{dir} has mode {mode:04o}: other users can reach or replace files in it; run `chmod 700 {dir}` or {fix}",
        dir = .dir.display(),
        fix = FIX
    )]
    Writable {
        /// The directory.
        dir: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// It could not be examined or created.
    #[error("cannot use {dir}: {source}", dir = .dir.display())]
    Io {
        /// The directory.
        dir: PathBuf,
        /// The error.
        source: io::Error,
    },
}

const FIX: &str =
    "set XDG_RUNTIME_DIR (a directory of your own) or TETHER_SOCKET to choose another socket";

/// A socket is refused because it is not served by this user.
#[derive(Debug, thiserror::Error)]
#[error(
    "the daemon on {socket} runs as uid {peer}, not as you (uid {uid}); refusing to talk to it",
    socket = .socket.display()
)]
pub struct ForeignPeer {
    /// The socket.
    pub socket: PathBuf,
    /// The uid of the process serving it.
    pub peer: u32,
    /// This user.
    pub uid: u32,
}

/// What to require of a socket directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirRule {
    /// A directory tether chose: owned by the user, mode 0700.
    Private,
    /// A directory the user named: the user's own and not writable by others, or sticky.
    Named,
    /// The directory of a daemon's shared socket, the one other local users reach it by
    /// (`/tmp/tether-shared-$UID`): a real directory owned by the daemon's user (`uid` in the
    /// check), writable by nobody else.
    Shared,
}

/// Checks `dir` under `rule` without following a symlink at its last component; changes nothing.
pub fn verify_socket_dir(dir: &Path, rule: DirRule, uid: u32) -> Result<(), UnsafeDir> {
    let meta = std::fs::symlink_metadata(dir).map_err(|source| UnsafeDir::Io {
        dir: dir.to_owned(),
        source,
    })?;
    if meta.file_type().is_symlink() {
        return Err(UnsafeDir::Symlink(dir.to_owned()));
    }
    if !meta.is_dir() {
        return Err(UnsafeDir::NotADirectory(dir.to_owned()));
    }
    let mode = meta.mode() & 0o7777;
    let owner = meta.uid();
    match rule {
        DirRule::Private if owner != uid => Err(UnsafeDir::Owner {
            dir: dir.to_owned(),
            owner,
            uid,
        }),
        DirRule::Private if mode & 0o077 != 0 => Err(UnsafeDir::Writable {
            dir: dir.to_owned(),
            mode,
        }),
        DirRule::Private => Ok(()),
        DirRule::Shared if owner != uid => Err(UnsafeDir::Owner {
            dir: dir.to_owned(),
            owner,
            uid,
        }),
        DirRule::Shared if mode & 0o022 != 0 => Err(UnsafeDir::Writable {
            dir: dir.to_owned(),
            mode,
        }),
        DirRule::Shared => Ok(()),
        DirRule::Named => {
            let sticky = mode & 0o1000 != 0;
            let others_write = mode & 0o022 != 0;
            if owner != uid && owner != 0 {
                Err(UnsafeDir::Owner {
                    dir: dir.to_owned(),
                    owner,
                    uid,
                })
            } else if others_write && !sticky {
                Err(UnsafeDir::Writable {
                    dir: dir.to_owned(),
                    mode,
                })
            } else {
                Ok(())
            }
        }
    }
}

/// [`verify_socket_dir`], except that a private directory of the user's own whose mode is
/// looser than 0700 (only its owner can have made it so) is tightened; the returned flag says
/// so, for a log line.
pub fn secure_socket_dir(dir: &Path, rule: DirRule, uid: u32) -> Result<bool, UnsafeDir> {
    match verify_socket_dir(dir, rule, uid) {
        Err(UnsafeDir::Writable { .. }) if rule == DirRule::Private => {
            set_mode(dir, DIR_MODE).map_err(|source| UnsafeDir::Io {
                dir: dir.to_owned(),
                source,
            })?;
            verify_socket_dir(dir, rule, uid).map(|()| true)
        }
        other => other.map(|()| false),
    }
}

/// Creates the socket directory `dir` (its missing parents too, each 0700) unless it exists, then
/// secures it as [`secure_socket_dir`] does. A directory someone else created first, between our
/// look and our `mkdir`, fails the check like any other.
pub fn ensure_socket_dir(dir: &Path, rule: DirRule, uid: u32) -> Result<bool, UnsafeDir> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            create_dir_all(dir).map_err(|source| UnsafeDir::Io {
                dir: dir.to_owned(),
                source,
            })?;
        }
        _ => {}
    }
    secure_socket_dir(dir, rule, uid)
}

/// `mkdir -p` with mode 0700 on every directory it creates, whatever the umask; directories that
/// exist are left as they are.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(DIR_MODE).create(dir) {
        Ok(()) => set_mode(dir, DIR_MODE),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Options that create a file 0600 and never open through a symlink.
fn private_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options
        .create(true)
        .mode(FILE_MODE)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC);
    options
}

/// Opens `path` for appending, creating it 0600; never through a symlink.
pub fn open_append(path: &Path) -> io::Result<File> {
    let file = private_options().append(true).open(path)?;
    tighten_open(&file)?;
    Ok(file)
}

/// Opens (creating it 0600 if missing) a lock file for reading and writing; never through a
/// symlink, and only a regular file of the user's own.
pub fn open_lock(path: &Path, uid: u32) -> io::Result<File> {
    let file = private_options()
        .read(true)
        .write(true)
        .truncate(false)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() || meta.uid() != uid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a regular file of yours (owner uid {})",
                path.display(),
                meta.uid()
            ),
        ));
    }
    tighten_open(&file)?;
    Ok(file)
}

/// Creates (or empties) `path` as a 0600 file open for writing; never through a symlink.
pub fn create(path: &Path) -> io::Result<File> {
    let file = private_options().write(true).truncate(true).open(path)?;
    tighten_open(&file)?;
    Ok(file)
}

/// Writes `bytes` to `path` (replacing it) as a 0600 file.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    create(path)?.write_all(bytes)
}

fn tighten_open(file: &File) -> io::Result<()> {
    let mode = file.metadata()?.mode() & 0o7777;
    if mode & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(mode & 0o700))?;
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Visits `root` and everything under it, never through a symlink, with each entry's
/// permission bits, until `visit` returns `false`. Entries that cannot be read are skipped.
fn walk(root: &Path, mut visit: impl FnMut(&Path, &std::fs::Metadata, u32) -> bool) {
    let mut stack = vec![root.to_owned()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            continue;
        }
        if !visit(&path, &meta, meta.mode() & 0o7777) {
            return;
        }
        if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(&path)
        {
            stack.extend(entries.flatten().map(|e| e.path()));
        }
    }
}

/// Takes group and other permissions off `root` and everything under it (directories 0700,
/// files at most 0600, keeping an owner's execute bit), without following symlinks. Returns the
/// paths it changed; errors on single entries are skipped, so one odd file cannot stop the rest.
pub fn tighten(root: &Path) -> Vec<PathBuf> {
    let mut changed = Vec::new();
    walk(root, |path, meta, mode| {
        let wanted = if meta.is_dir() {
            DIR_MODE
        } else {
            mode & 0o700
        };
        if mode & 0o077 != 0 && set_mode(path, wanted).is_ok() {
            changed.push(path.to_owned());
        }
        true
    });
    changed
}

/// The first entry under `root` (itself included) that other users could read or enter, with
/// its mode; `None` when everything is private.
pub fn first_open_entry(root: &Path) -> Option<(PathBuf, u32)> {
    let mut found = None;
    walk(root, |path, _, mode| {
        if mode & 0o077 != 0 {
            found = Some((path.to_owned(), mode));
        }
        found.is_none()
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).expect("stat").mode() & 0o7777
    }

    fn uid() -> u32 {
        nix::unistd::getuid().as_raw()
    }

    #[test]
    fn created_directories_and_files_are_private_whatever_the_umask() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::empty());
        let dir = tmp.path().join("a/b/c");
        let made = create_dir_all(&dir);
        let file = dir.join("log");
        let opened = open_append(&file);
        let written = write(&dir.join("w"), b"x");
        nix::sys::stat::umask(old);
        made.expect("mkdir");
        opened.expect("open");
        written.expect("write");
        for d in ["a", "a/b", "a/b/c"] {
            assert_eq!(mode(&tmp.path().join(d)), 0o700, "{d}");
        }
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&dir.join("w")), 0o600);
    }

    #[test]
    fn tighten_takes_group_and_other_bits_off_everything() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("data");
        std::fs::create_dir_all(root.join("db")).expect("mkdir");
        std::fs::write(root.join("db/db"), b"x").expect("write");
        std::fs::write(root.join("run.sh"), b"x").expect("write");
        set_mode(&root, 0o755).expect("chmod");
        set_mode(&root.join("db"), 0o775).expect("chmod");
        set_mode(&root.join("db/db"), 0o644).expect("chmod");
        set_mode(&root.join("run.sh"), 0o755).expect("chmod");
        assert!(first_open_entry(&root).is_some());
        let changed = tighten(&root);
        assert_eq!(changed.len(), 4);
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(&root.join("db")), 0o700);
        assert_eq!(mode(&root.join("db/db")), 0o600);
        assert_eq!(mode(&root.join("run.sh")), 0o700);
        assert_eq!(first_open_entry(&root), None);
        assert!(tighten(&root).is_empty(), "a second pass changes nothing");
    }

    #[test]
    fn socket_directories_are_checked_by_their_rule() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("run");
        assert!(!ensure_socket_dir(&dir, DirRule::Private, uid()).expect("create"));
        assert_eq!(mode(&dir), 0o700);

        set_mode(&dir, 0o755).expect("chmod");
        assert!(matches!(
            verify_socket_dir(&dir, DirRule::Private, uid()),
            Err(UnsafeDir::Writable { mode: 0o755, .. })
        ));
        assert_eq!(mode(&dir), 0o755, "verifying changes nothing");
        assert!(
            secure_socket_dir(&dir, DirRule::Private, uid()).expect("own dir"),
            "a loose private dir of ours is tightened"
        );
        assert_eq!(mode(&dir), 0o700);

        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).expect("symlink");
        assert!(matches!(
            verify_socket_dir(&link, DirRule::Private, uid()),
            Err(UnsafeDir::Symlink(_))
        ));
        assert!(matches!(
            verify_socket_dir(&dir, DirRule::Private, uid() + 1),
            Err(UnsafeDir::Owner { .. })
        ));

        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared).expect("mkdir");
        set_mode(&shared, 0o777).expect("chmod");
        let err = verify_socket_dir(&shared, DirRule::Named, uid()).expect_err("writable");
        assert!(err.to_string().contains("chmod 700"), "{err}");
        set_mode(&shared, 0o1777).expect("chmod");
        assert!(verify_socket_dir(&shared, DirRule::Named, uid()).is_ok());
    }

    #[test]
    fn a_lock_file_planted_as_a_symlink_is_not_followed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let target = tmp.path().join("precious");
        std::fs::write(&target, b"keep me").expect("write");
        let lock = tmp.path().join("tetherd.sock.lock");
        std::os::unix::fs::symlink(&target, &lock).expect("symlink");
        assert!(open_lock(&lock, uid()).is_err());
        assert!(open_append(&lock).is_err());
        assert!(write(&lock, b"x").is_err());
        assert_eq!(std::fs::read(&target).expect("read"), b"keep me");
    }
}
