//! The shadow repository against real git repositories: what a snapshot holds, what it never
//! touches, and what a restore puts back.

use super::*;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .expect("git runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The configuration's default deny-list, 1 MB a snapshot.
fn policy(data: &Path) -> Arc<Policy> {
    let defaults = crate::config::Config::load(None, &|_: &str| None, &[]).expect("defaults");
    let deny = defaults.list("snapshots.deny");
    Arc::new(Policy::new(data.join("snapshots"), &deny, 1).expect("policy"))
}

/// A repository with one commit, an ignored file, an untracked one and two secrets.
fn repo() -> (tempfile::TempDir, tempfile::TempDir, PathBuf) {
    let work = tempfile::tempdir().expect("tmp");
    let data = tempfile::tempdir().expect("tmp");
    let root = work.path().join("r");
    std::fs::create_dir_all(root.join("src")).expect("mkdir");
    git(&root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("src/a.rs"), "one\n").expect("write");
    std::fs::write(root.join(".gitignore"), "target/\n").expect("write");
    git(&root, &["add", "."]);
    git(&root, &["commit", "-q", "-m", "first"]);
    std::fs::create_dir_all(root.join("target")).expect("mkdir");
    std::fs::write(root.join("target/out.bin"), "built").expect("write");
    std::fs::write(root.join("notes.txt"), "untracked\n").expect("write");
    std::fs::write(root.join(".env"), "TOKEN=1").expect("write");
    std::fs::write(root.join("src/server.pem"), "KEY").expect("write");
    (work, data, root)
}

fn files(shadow: &Shadow, taken: &Taken) -> Vec<String> {
    let mut state = shadow.state();
    let open = shadow.open(&mut state).expect("open");
    let tree = open
        .repo
        .find_tree(Oid::from_str(&taken.tree).expect("oid"))
        .expect("tree");
    let mut out = Vec::new();
    tree.walk(git2::TreeWalkMode::PreOrder, |dir, e| {
        if e.kind() == Some(ObjectType::Blob) {
            out.push(format!("{dir}{}", e.name().unwrap_or("?")));
        }
        git2::TreeWalkResult::Ok
    })
    .expect("walk");
    out
}

#[test]
fn a_snapshot_holds_tracked_and_untracked_files_but_no_ignored_file_or_secret() {
    let (_w, data, root) = repo();
    let shadow = Shadow::new(policy(data.path()), "s1", root.join("src"));
    let taken = shadow.take("after Edit").expect("snapshot");
    assert_eq!(
        files(&shadow, &taken),
        [".gitignore", "notes.txt", "src/a.rs"],
        "the root is the repository's top, ignored files and secrets stay out"
    );
    // Unchanged: the same commit, no new object.
    let again = shadow.take("again").expect("snapshot");
    assert_eq!(
        (again.commit.as_str(), again.created),
        (taken.commit.as_str(), false)
    );
    std::fs::write(root.join("src/a.rs"), "two\n").expect("write");
    let next = shadow.take("after Edit").expect("snapshot");
    assert_ne!(next.tree, taken.tree);
    assert_ne!(next.commit, taken.commit);
}

#[test]
fn snapshots_never_touch_the_users_index_head_branches_or_reflog() {
    let (_w, data, root) = repo();
    std::fs::write(root.join("src/a.rs"), "staged\n").expect("write");
    git(&root, &["add", "src/a.rs"]);
    std::fs::write(root.join("src/a.rs"), "staged then changed\n").expect("write");
    let before = (
        git(&root, &["status", "--porcelain"]),
        std::fs::read(root.join(".git/index")).expect("index"),
        git(&root, &["rev-parse", "HEAD"]),
        git(&root, &["reflog"]),
        git(&root, &["branch", "-a"]),
        git(&root, &["stash", "list"]),
        git(&root, &["count-objects"]),
    );
    let shadow = Shadow::new(policy(data.path()), "s1", root.clone());
    shadow.take("one").expect("snapshot");
    std::fs::write(root.join("new.txt"), "x").expect("write");
    shadow.take("two").expect("snapshot");
    std::fs::remove_file(root.join("new.txt")).expect("rm");
    let after = (
        git(&root, &["status", "--porcelain"]),
        std::fs::read(root.join(".git/index")).expect("index"),
        git(&root, &["rev-parse", "HEAD"]),
        git(&root, &["reflog"]),
        git(&root, &["branch", "-a"]),
        git(&root, &["stash", "list"]),
        git(&root, &["count-objects"]),
    );
    assert_eq!(before, after);
}

#[test]
fn a_restore_puts_back_what_tether_changed_and_keeps_edits_made_outside() {
    let (_w, data, root) = repo();
    let shadow = Shadow::new(policy(data.path()), "s1", root.clone());
    let start = shadow.take("before").expect("snapshot");
    // What "tether" did: an edit, a new file in a new folder, a deletion, an executable.
    std::fs::write(root.join("src/a.rs"), "changed\n").expect("write");
    std::fs::create_dir_all(root.join("new/deep")).expect("mkdir");
    std::fs::write(root.join("new/deep/b.rs"), "b\n").expect("write");
    std::fs::remove_file(root.join("notes.txt")).expect("rm");
    std::fs::write(root.join("notes2.txt"), "n\n").expect("write");
    let last = shadow.take("after").expect("snapshot");
    // Someone edits notes2.txt by hand, and another file tether never touched.
    std::fs::write(root.join("notes2.txt"), "by hand\n").expect("write");
    std::fs::write(root.join("mine.txt"), "mine\n").expect("write");
    let made = HashSet::from([last.commit.clone()]);
    let done = shadow
        .restore(&start.commit, &last.commit, &made, false, "rewind")
        .expect("restore");
    assert_eq!(done.restored, ["new/deep/b.rs", "notes.txt", "src/a.rs"]);
    assert_eq!(done.kept, ["notes2.txt"]);
    assert_eq!(done.outside, ["mine.txt"]);
    assert_eq!(
        std::fs::read_to_string(root.join("src/a.rs")).expect("a"),
        "one\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("notes.txt")).expect("notes"),
        "untracked\n"
    );
    assert!(
        !root.join("new").exists(),
        "the folders the change made are gone"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("notes2.txt")).expect("n2"),
        "by hand\n"
    );
    assert!(root.join(".env").exists(), "a secret is never touched");
    // Overwriting: the hand edit goes too.
    let done = shadow
        .restore(&start.commit, &last.commit, &made, true, "rewind")
        .expect("restore");
    assert!(done.restored.contains(&"notes2.txt".to_owned()));
    assert!(!root.join("notes2.txt").exists());
}

#[test]
fn a_directory_that_is_not_a_repository_is_recorded_and_a_home_directory_is_refused() {
    let work = tempfile::tempdir().expect("tmp");
    let data = tempfile::tempdir().expect("tmp");
    std::fs::write(work.path().join("a.txt"), "a").expect("write");
    let shadow = Shadow::new(policy(data.path()), "s1", work.path().to_path_buf());
    let taken = shadow.take("one").expect("snapshot");
    assert_eq!(files(&shadow, &taken), ["a.txt"]);
    let shadow = Shadow::new(policy(data.path()), "s2", PathBuf::from("/"));
    let err = shadow.take("one").expect_err("refused");
    assert!(err.to_string().contains("not in a git repository"), "{err}");
}

#[test]
fn over_the_cap_the_largest_files_stay_out_and_are_named() {
    let (_w, data, root) = repo();
    let shadow = Shadow::new(policy(data.path()), "s1", root.clone());
    // The first snapshot over the cap too: everything but the largest file goes in.
    std::fs::write(root.join("big.bin"), vec![7u8; 2 * 1024 * 1024]).expect("write");
    let first = shadow.take("one").expect("snapshot");
    assert_eq!(first.left_out, [("big.bin".to_owned(), 2 * 1024 * 1024)]);
    assert!(files(&shadow, &first).contains(&"src/a.rs".to_owned()));
    let told = shadow.left_out(&first).expect("told").to_string();
    assert!(
        told.contains("big.bin (2.0 MB)") && told.contains("over 1 MB"),
        "{told}"
    );
    assert_eq!(
        shadow
            .tell_once(Err(&shadow.left_out(&first).expect("e")))
            .as_deref(),
        Some(told.as_str())
    );
    assert_eq!(
        shadow.tell_once(Err(&shadow.left_out(&first).expect("e"))),
        None,
        "told once"
    );
    std::fs::remove_file(root.join("big.bin")).expect("rm");
    std::fs::write(root.join("small.txt"), "s").expect("write");
    let next = shadow.take("two").expect("snapshot");
    assert!(next.left_out.is_empty());
    assert!(files(&shadow, &next).contains(&"small.txt".to_owned()));
}

#[test]
fn the_deny_list_matches_file_names_and_paths_from_the_root() {
    let p = policy(Path::new("/tmp"));
    for yes in [
        ".env",
        ".env.local",
        "a/b/.env.production",
        "keys/server.pem",
        "x.key",
        "home/id_ed25519",
        ".ssh/id_rsa.pub",
        ".claude/settings.local.json",
    ] {
        assert!(p.denied(Path::new(yes)), "{yes}");
    }
    // A name pattern is a file's name: a folder so named is not a secret.
    for no in [
        "src/env.rs",
        "a.pem.txt",
        "keys.rs",
        ".claude/settings.json",
        "src/id_map.rs",
        "id_service/main.rs",
        ".env.d/readme.md",
    ] {
        assert!(!p.denied(Path::new(no)), "{no}");
    }
}

#[test]
fn edits_made_between_tethers_changes_are_not_undone() {
    let (_w, data, root) = repo();
    let shadow = Shadow::new(policy(data.path()), "s1", root.clone());
    let start = shadow.take("before turn 1").expect("snapshot");
    // Turn 1: tether writes t1.txt.
    std::fs::write(root.join("t1.txt"), "t1\n").expect("write");
    let first = shadow.take("after Write").expect("snapshot");
    // Between turns the user edits a.rs, adds their own file, and touches t1.txt.
    std::fs::write(root.join("src/a.rs"), "by hand\n").expect("write");
    std::fs::write(root.join("mine.txt"), "mine\n").expect("write");
    std::fs::write(root.join("t1.txt"), "t1 and mine\n").expect("write");
    let gap = shadow.take("before turn 2").expect("snapshot");
    // Turn 2: tether writes t2.txt.
    std::fs::write(root.join("t2.txt"), "t2\n").expect("write");
    let second = shadow.take("after Write").expect("snapshot");
    let made = HashSet::from([first.commit.clone(), second.commit.clone()]);
    assert_ne!(gap.commit, first.commit);
    let done = shadow
        .restore(&start.commit, &second.commit, &made, false, "rewind")
        .expect("restore");
    assert_eq!(done.restored, ["t2.txt"]);
    assert_eq!(done.kept, ["t1.txt"], "tether's file the user changed too");
    assert_eq!(done.outside, ["mine.txt", "src/a.rs"]);
    assert_eq!(
        std::fs::read_to_string(root.join("src/a.rs")).expect("a"),
        "by hand\n",
        "the user's edit between turns stays"
    );
    assert!(root.join("mine.txt").exists());
    assert!(!root.join("t2.txt").exists());
}

#[test]
fn a_restore_never_writes_through_a_symlinked_folder_and_keeps_a_files_own_mode() {
    use std::os::unix::fs::PermissionsExt;
    let (_w, data, root) = repo();
    let outside = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(root.join("d")).expect("mkdir");
    std::fs::write(root.join("d/x.txt"), "x\n").expect("write");
    std::fs::write(root.join("private.txt"), "p\n").expect("write");
    std::fs::set_permissions(
        root.join("private.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    let shadow = Shadow::new(policy(data.path()), "s1", root.clone());
    let start = shadow.take("before").expect("snapshot");
    std::fs::write(root.join("d/x.txt"), "changed\n").expect("write");
    std::fs::write(root.join("private.txt"), "changed\n").expect("write");
    let last = shadow.take("after").expect("snapshot");
    // Someone swaps the folder for a link to elsewhere.
    std::fs::remove_dir_all(root.join("d")).expect("rm");
    std::os::unix::fs::symlink(outside.path(), root.join("d")).expect("link");
    let made = HashSet::from([last.commit.clone()]);
    let done = shadow
        .restore(&start.commit, &last.commit, &made, true, "rewind")
        .expect("restore");
    assert_eq!(done.restored, ["private.txt"]);
    assert_eq!(done.failed.len(), 1, "{:?}", done.failed);
    assert!(done.failed[0].starts_with("d/x.txt: "), "{:?}", done.failed);
    assert!(
        !outside.path().join("x.txt").exists(),
        "nothing written outside"
    );
    let mode = std::fs::metadata(root.join("private.txt"))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}
