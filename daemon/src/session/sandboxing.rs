//! The session's OS sandbox (and the search tools' fence, from the same reading of the rules):
//! built from the settings files (with the project's trust), the session's working
//! directories, the files its Read deny rules name and tether's own paths, and set on the
//! workspace as each turn starts — so a turn's permission checks and its Bash calls
//! (sub-agents' and background shells' included) see the same one (and the session's network
//! proxy, when one runs, the same allowed domains). Also `/sandbox`, which says what it is.

use super::actor::{Command, SessionActor};
use crate::sandbox::{Paths, Sandbox, Settings};
use std::path::PathBuf;
use tether_proto::TurnId;

impl SessionActor {
    /// The sandbox the session's settings (and its `rules`) ask for now.
    fn sandbox_now(&self, rules: &crate::permissions::RuleSet) -> Sandbox {
        let root = PathBuf::from(&self.journal.record.cwd);
        let home = std::env::var_os("HOME").map(PathBuf::from);
        // Every file: an untrusted project may still turn the sandbox on (`Settings::read`
        // takes only what narrows from it).
        let files = crate::settings::all_files(&root, home.as_deref());
        let user_file = home.as_ref().map(|h| h.join(".claude/settings.json"));
        let trusted = crate::trust::is_trusted(&root, home.as_deref());
        let settings = Settings::read(&files, user_file.as_deref(), trusted);
        let mut roots = vec![root];
        roots.extend(rules.additional_dirs.iter().cloned());
        let env = tether_proto::paths::PathEnv::from_process(nix::unistd::getuid().as_raw());
        let mut hidden = vec![env.socket()];
        // What the Read deny rules name is hidden from Bash too, whatever reads it.
        hidden.extend(crate::permissions::read_denied_paths(rules));
        if let Some(config) = env.config_file().as_ref().and_then(|f| f.parent()) {
            hidden.push(config.to_owned());
        }
        Sandbox::new(
            settings,
            Paths {
                home,
                roots,
                scratch: self.workspace.scratch().to_owned(),
                data_dir: self.env.data_dir.clone(),
                hidden,
                proxy_socket: self
                    .env
                    .data_dir
                    .join("proxy")
                    .join(format!("{}.sock", self.journal.record.id.0)),
            },
        )
    }

    /// Sets on the workspace what guards the turn about to run, from one reading of the
    /// rules: the fence the search tools' walks keep out of (the Read deny rules), and the
    /// sandbox its Bash calls run in (none when it is off), which its permission checks see.
    pub(super) fn guard_workspace(&mut self) {
        let rules = self.rules();
        self.workspace
            .set_fence(crate::permissions::read_fence(&rules));
        let sandbox = self.sandbox_now(&rules);
        self.workspace
            .set_sandbox(sandbox.settings.enabled.then_some(sandbox));
    }

    /// `/sandbox`: whether Bash runs sandboxed in this session, what is writable, the network
    /// rule, and why not when bubblewrap cannot start. The check runs bubblewrap, so it runs in
    /// a task of the session and its answer comes back as [`Command::Answered`].
    pub(super) fn sandbox_command(&mut self, turn_id: TurnId) {
        let rules = self.rules();
        let sandbox = self.sandbox_now(&rules);
        let Some(tx) = self.me.upgrade() else { return };
        self.tasks.spawn(async move {
            let ready = if sandbox.settings.enabled {
                crate::sandbox::ready(&sandbox.bwrap).await
            } else {
                Ok(())
            };
            let text = sandbox.describe(ready.as_ref().map(|_| ()));
            let _ = tx.send(Command::Answered { turn_id, text });
        });
    }
}
