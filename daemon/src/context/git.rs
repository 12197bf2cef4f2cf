//! A short snapshot of the repository: branch, default branch, remotes, status, recent commits.
//! The only place that imports git2.

use std::path::{Path, PathBuf};

/// Largest status section.
const MAX_STATUS: usize = 2048;

/// What the model is told about the repository.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The work tree's root.
    pub root: PathBuf,
    branch: String,
    default_branch: Option<String>,
    remotes: Vec<String>,
    status: String,
    commits: Vec<String>,
}

impl Snapshot {
    /// The snapshot as a system prompt section.
    pub fn render(&self) -> String {
        let mut s = String::from("# Git (snapshot at session start; it does not update)\n");
        s.push_str(&format!("Repository root: {}\n", self.root.display()));
        s.push_str(&format!("Current branch: {}\n", self.branch));
        if let Some(d) = &self.default_branch {
            s.push_str(&format!(
                "Default branch (usually the target of pull requests): {d}\n"
            ));
        }
        if !self.remotes.is_empty() {
            s.push_str(&format!("Remotes: {}\n", self.remotes.join(", ")));
        }
        s.push_str("Status:\n");
        s.push_str(if self.status.is_empty() {
            "(clean)\n"
        } else {
            &self.status
        });
        if !self.commits.is_empty() {
            s.push_str("Recent commits:\n");
            for c in &self.commits {
                s.push_str(c);
                s.push('\n');
            }
        }
        s
    }
}

/// The snapshot of the repository containing `cwd`, if it is in one.
pub fn snapshot(cwd: &Path) -> Option<Snapshot> {
    let repo = git2::Repository::discover(cwd).ok()?;
    let root = repo.workdir()?.to_path_buf();
    let branch = match repo.head() {
        Ok(h) if h.is_branch() => h.shorthand().unwrap_or("HEAD").to_owned(),
        Ok(h) => format!(
            "(detached at {})",
            h.target()
                .map(|o| o.to_string()[..8].to_owned())
                .unwrap_or_default()
        ),
        Err(_) => "(no commits yet)".into(),
    };
    let default_branch = repo
        .find_reference("refs/remotes/origin/HEAD")
        .ok()
        .and_then(|r| {
            r.symbolic_target()
                .ok()
                .flatten()
                .map(|t| t.trim_start_matches("refs/remotes/origin/").to_owned())
        })
        .or_else(|| {
            ["main", "master"]
                .into_iter()
                .find(|b| repo.find_branch(b, git2::BranchType::Local).is_ok())
                .map(str::to_owned)
        });
    let remotes = repo
        .remotes()
        .map(|r| r.iter().flatten().flatten().map(str::to_owned).collect())
        .unwrap_or_default();
    let mut status = String::new();
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true).recurse_untracked_dirs(false);
    if let Ok(statuses) = repo.statuses(Some(&mut opts)) {
        let mut hidden = 0;
        for entry in statuses.iter() {
            let line = format!("{} {}\n", code(entry.status()), entry.path().unwrap_or("?"));
            if status.len() + line.len() > MAX_STATUS {
                hidden += 1;
            } else {
                status.push_str(&line);
            }
        }
        if hidden > 0 {
            status.push_str(&format!("… and {hidden} more changed paths\n"));
        }
    }
    let mut commits = Vec::new();
    if let Ok(mut walk) = repo.revwalk()
        && walk.push_head().is_ok()
    {
        for oid in walk.flatten().take(5) {
            if let Ok(c) = repo.find_commit(oid) {
                let id = oid.to_string();
                commits.push(format!(
                    "{} {}",
                    &id[..8],
                    c.summary().ok().flatten().unwrap_or("")
                ));
            }
        }
    }
    Some(Snapshot {
        root,
        branch,
        default_branch,
        remotes,
        status,
        commits,
    })
}

fn code(s: git2::Status) -> &'static str {
    if s.contains(git2::Status::WT_NEW) {
        "??"
    } else if s.intersects(git2::Status::INDEX_NEW) {
        "A "
    } else if s.intersects(git2::Status::INDEX_DELETED | git2::Status::WT_DELETED) {
        " D"
    } else if s.intersects(git2::Status::INDEX_RENAMED | git2::Status::WT_RENAMED) {
        " R"
    } else if s.intersects(git2::Status::CONFLICTED) {
        "UU"
    } else {
        " M"
    }
}

/// The linked libgit2's version, for `doctor`.
pub fn libgit2_version() -> (u32, u32, u32) {
    git2::Version::get().libgit2_version()
}
