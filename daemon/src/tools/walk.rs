//! The directory walk the search tools share: ripgrep's `ignore` crate, respecting `.gitignore`
//! (also outside git repositories), `.ignore`, and skipping hidden files and `.git`.

use ignore::WalkBuilder;
use std::path::Path;

/// A walker over `root` with the tools' defaults.
pub fn walker(root: &Path) -> WalkBuilder {
    let mut b = WalkBuilder::new(root);
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
