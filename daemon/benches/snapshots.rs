//! What a workspace snapshot costs a tool call, on a small repository and on a 10,000-file one:
//! the first snapshot (every file stored), another session's first in the same tree, one with nothing changed (the stat cache), one after
//! a one-file edit, a restore of ten edited files, and the bytes each adds to the store. Usage:
//! `cargo bench -p tether-daemon --bench snapshots -- [FILES...]` (default: 20 and 10000).
//! Prints the figures; asserts nothing.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tether_daemon::snapshots::{Policy, Shadow};

fn git(dir: &Path, args: &[&str]) {
    let _ = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@b")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@b")
        .output();
}

fn size_of(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => size_of(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed())
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn kb(b: u64) -> String {
    format!("{:.1} KB", b as f64 / 1024.0)
}

fn run(files: usize) -> Result<(), String> {
    let work = tempfile::tempdir().map_err(|e| e.to_string())?;
    let data = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = work.path().join("repo");
    // Ten files a folder, about a kilobyte each, committed.
    for i in 0..files {
        let dir = root.join(format!("d{:04}", i / 10));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let text = format!("file {i}\n{}\n", "x".repeat(1000));
        std::fs::write(dir.join(format!("f{i}.txt")), text).map_err(|e| e.to_string())?;
    }
    git(&root, &["init", "-q"]);
    git(&root, &["add", "."]);
    git(&root, &["commit", "-q", "-m", "files"]);
    let store = data.path().join("snapshots");
    let policy = Arc::new(Policy::new(store.clone(), &[".env*".into()], 100)?);
    let shadow = Shadow::new(policy, "bench", root.clone());
    let (first, cold) = timed(|| shadow.take("first"));
    let first = first.map_err(|e| e.to_string())?;
    let after_first = size_of(&store);
    let mut unchanged = Vec::new();
    for _ in 0..5 {
        let (taken, t) = timed(|| shadow.take("same"));
        if taken.map_err(|e| e.to_string())?.commit != first.commit {
            return Err("an unchanged tree made a new snapshot".into());
        }
        unchanged.push(t);
    }
    let before_edit = size_of(&store);
    let mut edited = Vec::new();
    let mut last = first.clone();
    for n in 0..5 {
        std::fs::write(root.join("d0000/f0.txt"), format!("edit {n}\n"))
            .map_err(|e| e.to_string())?;
        let (taken, t) = timed(|| shadow.take("edit"));
        last = taken.map_err(|e| e.to_string())?;
        edited.push(t);
    }
    let per_edit = (size_of(&store) - before_edit) / 5;
    for i in 0..10 {
        std::fs::write(
            root.join(format!("d{:04}/f{i}.txt", i / 10)),
            format!("change {i}\n"),
        )
        .map_err(|e| e.to_string())?;
    }
    let ten = shadow.take("ten").map_err(|e| e.to_string())?;
    let made = std::collections::HashSet::from([ten.commit.clone()]);
    let (restored, restore) =
        timed(|| shadow.restore(&last.commit, &ten.commit, &made, false, "rewind"));
    let restored = restored.map_err(|e| e.to_string())?;
    // Another session in the same tree starts from the store's newest index.
    let policy = Arc::new(Policy::new(store.clone(), &[".env*".into()], 100)?);
    let other = Shadow::new(policy, "bench2", root.clone());
    let (taken, second_session) = timed(|| other.take("first of another session"));
    taken.map_err(|e| e.to_string())?;
    let best = |v: &[Duration]| v.iter().min().copied().unwrap_or_default();
    println!(
        "{files:>6} files  first {:>9} ({} stored; another session's first {})  unchanged {:>8}  one-file edit {:>8} (+{} each)  rewind of {} files {:>8}",
        ms(cold),
        kb(after_first),
        ms(second_session),
        ms(best(&unchanged)),
        ms(best(&edited)),
        kb(per_edit),
        restored.restored.len(),
        ms(restore),
    );
    Ok(())
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![20, 10_000]
    } else {
        sizes
    };
    for files in sizes {
        if let Err(e) = run(files) {
            eprintln!("{files} files: {e}");
        }
    }
}
