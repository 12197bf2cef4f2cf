//! Where the daemon listens and keeps its data, resolved the same way by daemon and clients.
//!
//! Pure functions of the environment they are given, so both sides agree and tests can pass
//! their own.

use crate::private::DirRule;
use std::path::{Path, PathBuf};

/// The environment variables that decide the paths, captured once.
#[derive(Debug, Clone, Default)]
pub struct PathEnv {
    /// `$TETHER_SOCKET`
    pub tether_socket: Option<String>,
    /// `$XDG_RUNTIME_DIR`
    pub xdg_runtime_dir: Option<String>,
    /// `$TETHER_HOME`
    pub tether_home: Option<String>,
    /// `$XDG_DATA_HOME`
    pub xdg_data_home: Option<String>,
    /// `$XDG_CONFIG_HOME`
    pub xdg_config_home: Option<String>,
    /// `$HOME`
    pub home: Option<String>,
    /// The real user id, for the `/tmp/tether-$UID` fallback.
    pub uid: u32,
}

fn non_empty(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

impl PathEnv {
    /// Reads the variables from this process's environment.
    pub fn from_process(uid: u32) -> Self {
        let var = |k: &str| non_empty(std::env::var(k).ok());
        Self {
            tether_socket: var("TETHER_SOCKET"),
            xdg_runtime_dir: var("XDG_RUNTIME_DIR"),
            tether_home: var("TETHER_HOME"),
            xdg_data_home: var("XDG_DATA_HOME"),
            xdg_config_home: var("XDG_CONFIG_HOME"),
            home: var("HOME"),
            uid,
        }
    }

    /// `$TETHER_SOCKET`, else `$XDG_RUNTIME_DIR/tether/tetherd.sock`, else
    /// `/tmp/tether-$UID/tetherd.sock`.
    pub fn socket(&self) -> PathBuf {
        if let Some(s) = &self.tether_socket {
            return PathBuf::from(s);
        }
        match &self.xdg_runtime_dir {
            Some(dir) => PathBuf::from(dir).join("tether").join("tetherd.sock"),
            None => self.fallback_runtime_dir().join("tetherd.sock"),
        }
    }

    /// The shared socket of the daemon that user `uid` runs, by which the other local users it
    /// shares sessions with reach it: `/tmp/tether-shared-$UID/tetherd.sock`.
    pub fn shared_socket(uid: u32) -> PathBuf {
        PathBuf::from(format!("/tmp/tether-shared-{uid}")).join("tetherd.sock")
    }

    /// The rule the socket's directory must pass: [`DirRule::Private`] for the directories tether
    /// chooses by itself (`$XDG_RUNTIME_DIR/tether`, `/tmp/tether-$UID`), [`DirRule::Named`] for
    /// any other the user named.
    pub fn socket_dir_rule(&self, socket: &Path) -> DirRule {
        let dir = socket.parent().unwrap_or(Path::new(""));
        let own = [
            self.xdg_runtime_dir
                .as_ref()
                .map(|d| PathBuf::from(d).join("tether")),
            Some(self.fallback_runtime_dir()),
        ];
        if own.iter().flatten().any(|d| d == dir) {
            DirRule::Private
        } else {
            DirRule::Named
        }
    }

    fn fallback_runtime_dir(&self) -> PathBuf {
        PathBuf::from(format!("/tmp/tether-{}", self.uid))
    }

    /// `$TETHER_HOME`, else `$XDG_DATA_HOME/tether`, else `~/.local/share/tether`.
    pub fn data_dir(&self) -> PathBuf {
        if let Some(h) = &self.tether_home {
            return PathBuf::from(h);
        }
        match (&self.xdg_data_home, &self.home) {
            (Some(d), _) => PathBuf::from(d).join("tether"),
            (None, Some(h)) => PathBuf::from(h).join(".local/share/tether"),
            (None, None) => PathBuf::from(format!("/tmp/tether-{}", self.uid)).join("data"),
        }
    }

    /// `$XDG_CONFIG_HOME/tether/config.toml`, else `~/.config/tether/config.toml`.
    pub fn config_file(&self) -> Option<PathBuf> {
        match (&self.xdg_config_home, &self.home) {
            (Some(d), _) => Some(PathBuf::from(d).join("tether/config.toml")),
            (None, Some(h)) => Some(PathBuf::from(h).join(".config/tether/config.toml")),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_precedence() {
        let mut env = PathEnv {
            uid: 1000,
            ..Default::default()
        };
        assert_eq!(env.socket(), PathBuf::from("/tmp/tether-1000/tetherd.sock"));
        env.xdg_runtime_dir = Some("/run/user/1000".into());
        assert_eq!(
            env.socket(),
            PathBuf::from("/run/user/1000/tether/tetherd.sock")
        );
        env.tether_socket = Some("/x/s.sock".into());
        assert_eq!(env.socket(), PathBuf::from("/x/s.sock"));
    }

    #[test]
    fn only_the_directories_tether_chooses_are_held_to_the_private_rule() {
        let mut env = PathEnv {
            uid: 1000,
            ..Default::default()
        };
        assert_eq!(env.socket_dir_rule(&env.socket()), DirRule::Private);
        env.xdg_runtime_dir = Some("/run/user/1000".into());
        assert_eq!(env.socket_dir_rule(&env.socket()), DirRule::Private);
        assert_eq!(
            env.socket_dir_rule(Path::new("/tmp/tether-1000/tetherd.sock")),
            DirRule::Private
        );
        assert_eq!(
            env.socket_dir_rule(Path::new("/srv/x/tetherd.sock")),
            DirRule::Named
        );
    }

    #[test]
    fn data_dir_precedence() {
        let mut env = PathEnv {
            uid: 7,
            home: Some("/home/u".into()),
            ..Default::default()
        };
        assert_eq!(env.data_dir(), PathBuf::from("/home/u/.local/share/tether"));
        env.xdg_data_home = Some("/d".into());
        assert_eq!(env.data_dir(), PathBuf::from("/d/tether"));
        env.tether_home = Some("/t".into());
        assert_eq!(env.data_dir(), PathBuf::from("/t"));
    }
}
