//! The directory walk the search tools share: ripgrep's `ignore` crate, respecting `.gitignore`
//! (also outside git repositories), `.ignore`, and skipping hidden files and `.git`, and every
//! file the user's Read deny rules name (the session's [`Fence`]).

use ignore::WalkBuilder;
use std::path::Path;
use std::sync::Arc;

/// The paths the user's Read deny rules keep from every tool.
#[derive(Clone)]
pub struct Fence(Arc<dyn Fn(&Path) -> bool + Send + Sync>);

impl Fence {
    /// A fence that keeps out the paths `hides` says.
    pub fn new(hides: impl Fn(&Path) -> bool + Send + Sync + 'static) -> Self {
        Self(Arc::new(hides))
    }

    /// Whether `path` is kept out.
    pub fn hides(&self, path: &Path) -> bool {
        (self.0)(path)
    }
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fence")
    }
}

/// A walker over `root` with the tools' defaults, never entering what `fence` keeps out.
pub fn walker(root: &Path, fence: Option<Fence>) -> WalkBuilder {
    let mut b = WalkBuilder::new(root);
    if let Some(fence) = fence {
        b.filter_entry(move |entry| !fence.hides(entry.path()));
    }
    b.hidden(true)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(true)
        .require_git(false)
        .parents(true)
        .follow_links(false);
    b
}

/// `path` relative to `root` for display, or the path itself.
pub fn relative<'a>(path: &'a Path, root: &Path) -> &'a Path {
    path.strip_prefix(root).unwrap_or(path)
}
