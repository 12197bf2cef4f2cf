//! Table tests of the file tools on a temporary tree: read-before-write, staleness, images,
//! binaries, ranges.

use super::{edit::Edit, read::Read, write::Write};
use crate::tools::{Tool, ToolContext, ToolOutput, Workspace};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;

fn ctx(root: &Path) -> ToolContext {
    ToolContext::detached(Arc::new(Workspace::new(
        root.to_owned(),
        Vec::new(),
        root.join(".scratch"),
    )))
}

fn text(out: &ToolOutput) -> &str {
    out.content.as_str().unwrap_or("")
}

#[tokio::test]
async fn write_and_edit_need_a_fresh_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = ctx(dir.path());
    let file = dir.path().join("a.txt");
    std::fs::write(&file, "hello world\n").expect("write");
    let f = file.to_str().expect("utf8");

    let out = Write
        .run(json!({"file_path": f, "content": "x"}), &ctx)
        .await;
    assert!(
        out.is_error && text(&out).contains("has not been read"),
        "{out:?}"
    );
    let out = Edit
        .run(
            json!({"file_path": f, "old_string": "world", "new_string": "there"}),
            &ctx,
        )
        .await;
    assert!(out.is_error && text(&out).contains("has not been read"));

    Read.run(json!({"file_path": f}), &ctx).await;
    let out = Edit
        .run(
            json!({"file_path": f, "old_string": "world", "new_string": "there"}),
            &ctx,
        )
        .await;
    assert!(!out.is_error, "{out:?}");
    assert!(
        out.details
            .as_ref()
            .and_then(|d| d["diff"].as_str())
            .is_some_and(|d| d.contains("-hello world\n+hello there"))
    );
    // Our own edit keeps the file fresh for the next one.
    let out = Edit
        .run(
            json!({"file_path": f, "old_string": "there", "new_string": "again"}),
            &ctx,
        )
        .await;
    assert!(!out.is_error, "{out:?}");

    std::fs::write(&file, "changed behind our back\n").expect("write");
    let out = Edit
        .run(
            json!({"file_path": f, "old_string": "again", "new_string": "x"}),
            &ctx,
        )
        .await;
    assert!(
        out.is_error && text(&out).contains("modified since you last read it"),
        "{out:?}"
    );

    let new = dir.path().join("sub/new.txt");
    let out = Write
        .run(json!({"file_path": new, "content": "fresh\n"}), &ctx)
        .await;
    assert!(!out.is_error && text(&out).starts_with("Created"));
    assert_eq!(std::fs::read_to_string(&new).expect("read"), "fresh\n");
}

#[tokio::test]
async fn read_ranges_images_binaries_and_directories() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = ctx(dir.path());
    let lines: String = (1..=10).map(|n| format!("line {n}\n")).collect();
    std::fs::write(dir.path().join("ten.txt"), lines).expect("write");
    let out = Read
        .run(
            json!({"file_path": dir.path().join("ten.txt"), "offset": 3, "limit": 2}),
            &ctx,
        )
        .await;
    assert_eq!(
        text(&out),
        "     3\tline 3\n     4\tline 4\n… 6 more lines (read with offset 5 to continue)\n"
    );
    let png = [0x89u8, b'P', b'N', b'G', 0, 0, 0, 0];
    std::fs::write(dir.path().join("i.png"), png).expect("write");
    let out = Read
        .run(json!({"file_path": dir.path().join("i.png")}), &ctx)
        .await;
    assert_eq!(out.content[0]["type"], "image");
    assert_eq!(out.content[0]["source"]["media_type"], "image/png");
    std::fs::write(dir.path().join("b.bin"), [1u8, 0, 2]).expect("write");
    let out = Read
        .run(json!({"file_path": dir.path().join("b.bin")}), &ctx)
        .await;
    assert!(out.is_error && text(&out).contains("binary"));
    let out = Read.run(json!({"file_path": dir.path()}), &ctx).await;
    assert!(out.is_error && text(&out).contains("directory"));
    std::fs::write(dir.path().join("empty"), "").expect("write");
    let out = Read
        .run(json!({"file_path": dir.path().join("empty")}), &ctx)
        .await;
    assert!(!out.is_error && text(&out).contains("is empty"));
}

#[tokio::test]
async fn read_streams_long_files_and_bounds_its_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = ctx(dir.path());
    // Lines longer than a read buffer, CRLF endings, no newline at the end.
    let long = "x".repeat(100_000);
    let body = format!("first\r\n{long}\nthird\nlast");
    let path = dir.path().join("mixed.txt");
    std::fs::write(&path, &body).expect("write");
    let out = Read.run(json!({"file_path": path}), &ctx).await;
    let shown = text(&out);
    assert!(shown.starts_with("     1\tfirst\n     2\txxx"), "{shown}");
    assert!(
        shown.contains("… [line cut]\n     3\tthird\n     4\tlast\n"),
        "{shown}"
    );
    assert!(!shown.contains("more lines"), "{shown}");
    let out = Read
        .run(json!({"file_path": path, "offset": 4}), &ctx)
        .await;
    assert_eq!(text(&out), "     4\tlast\n");
    let out = Read
        .run(json!({"file_path": path, "offset": 9}), &ctx)
        .await;
    assert!(out.is_error && text(&out).contains("has 4 lines; offset 9"));

    // Wide lines: the output stops at its byte bound and says where to go on.
    let wide: String = (1..=400)
        .map(|n| format!("{n} {}\n", "y".repeat(1500)))
        .collect();
    let path = dir.path().join("wide.txt");
    std::fs::write(&path, wide).expect("write");
    let out = Read.run(json!({"file_path": path}), &ctx).await;
    let shown = text(&out);
    assert!(shown.len() <= 256 * 1024 + 200, "{}", shown.len());
    let next = shown.lines().count(); // the lines shown, then the note
    assert!(
        shown.ends_with(&format!(
            "more lines (read with offset {next} to continue)\n"
        )),
        "{}",
        &shown[shown.len() - 100..]
    );
    // What was read can be edited: the stamp matches.
    assert_eq!(ctx.workspace.check_fresh(&path), Ok(()));
}

#[tokio::test]
async fn read_of_a_huge_sparse_file_reads_only_what_it_shows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = ctx(dir.path());
    let path = dir.path().join("huge.log");
    let file = std::fs::File::create(&path).expect("create");
    let head: String = (1..=5000).map(|n| format!("entry {n}\n")).collect();
    std::io::Write::write_all(&mut &file, head.as_bytes()).expect("write");
    file.set_len(3 * 1024 * 1024 * 1024).expect("sparse");
    let started = std::time::Instant::now();
    let out = Read
        .run(json!({"file_path": path, "offset": 4999, "limit": 2}), &ctx)
        .await;
    assert_eq!(
        text(&out),
        "  4999\tentry 4999\n  5000\tentry 5000\n… more lines follow in this 3072 MB file (read with offset 5001 to continue)\n"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // Stamped by size and time, so a later Edit does not hash 3 GB; Edit itself says it is
    // too large rather than loading it.
    assert_eq!(ctx.workspace.check_fresh(&path), Ok(()));
    let out = Edit
        .run(
            json!({"file_path": path, "old_string": "entry 1\n", "new_string": "first\n"}),
            &ctx,
        )
        .await;
    assert!(out.is_error && text(&out).contains("Edit changes files up to 256 MB"));
    // Its zeros are found to be binary as soon as they are reached.
    let zeros = dir.path().join("zeros.bin");
    std::fs::File::create(&zeros)
        .and_then(|f| f.set_len(2 * 1024 * 1024 * 1024))
        .expect("sparse");
    let out = Read.run(json!({"file_path": zeros}), &ctx).await;
    assert!(
        out.is_error && text(&out).contains("binary"),
        "{}",
        text(&out)
    );
    // Text that runs into the hole stops there.
    let out = Read
        .run(json!({"file_path": path, "offset": 5000}), &ctx)
        .await;
    assert_eq!(
        text(&out),
        "  5000\tentry 5000\n… binary data from line 5001 on (NUL bytes; not shown as text)\n"
    );
    let out = Read.run(json!({"file_path": "/dev/zero"}), &ctx).await;
    assert!(out.is_error && text(&out).contains("not a regular file"));
}

mod search {
    use super::super::{glob::Glob, grep::Grep, ls::Ls, todo::TodoWrite};
    use super::*;
    use std::process::Command;

    /// A small repository: sources, an ignored build dir, a hidden file, a binary.
    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let write = |rel: &str, body: &[u8]| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, body).expect("write");
        };
        git2_free_init(root);
        write(".gitignore", b"target/\n");
        write(
            "src/main.rs",
            b"fn main() {\n    let answer = 42;\n    println!(\"{answer}\");\n}\n",
        );
        write(
            "src/lib.rs",
            b"pub fn answer() -> u32 {\n    42\n}\n\n// TODO: more answers\npub fn other() {}\n",
        );
        write("src/util/helper.py", b"def answer():\n    return 42\n");
        write("target/debug/out.rs", b"fn answer() {}\n");
        write(".hidden.rs", b"fn answer() {}\n");
        write("data.bin", b"answer\0binary");
        dir
    }

    fn git2_free_init(root: &Path) {
        let _ = Command::new("git")
            .args(["init", "-q"])
            .current_dir(root)
            .status();
    }

    fn rg(root: &Path, args: &[&str]) -> Vec<String> {
        let out = Command::new("rg")
            .args(args)
            .arg(root)
            .output()
            .expect("rg is installed (tests/run installs it)");
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    }

    async fn grep(ctx: &ToolContext, input: serde_json::Value) -> Vec<String> {
        let out = Grep.run(input, ctx).await;
        assert!(!out.is_error, "{out:?}");
        let mut lines: Vec<String> = text(&out).lines().map(str::to_owned).collect();
        lines.sort();
        lines
    }

    #[tokio::test]
    async fn grep_over_a_huge_result_stays_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let ctx = ctx(root);
        // 40 files of 1 MB, every line a match, one of them minified into one long line.
        let body: String = (0..20_000).map(|n| format!("match {n:<43}\n")).collect();
        for i in 0..40 {
            std::fs::write(root.join(format!("f{i:02}.txt")), &body).expect("write");
        }
        std::fs::write(
            root.join("min.js"),
            format!("var match = {};", "1,".repeat(50_000)),
        )
        .expect("write");
        let out = Grep
            .run(
                json!({"pattern": "match", "path": root, "output_mode": "content"}),
                &ctx,
            )
            .await;
        let shown = text(&out);
        assert!(!out.is_error);
        assert!(shown.len() < 140 * 1024, "{}", shown.len());
        assert!(
            shown.contains("; use offset "),
            "{}",
            &shown[shown.len() - 300..]
        );
        assert!(
            shown.contains("the search stopped after collecting 16 MB"),
            "{}",
            &shown[shown.len() - 300..]
        );
        let out = Grep
            .run(
                json!({"pattern": "var", "path": root.join("min.js"), "output_mode": "content"}),
                &ctx,
            )
            .await;
        let shown = text(&out);
        assert!(
            shown.contains("… [line cut]") && shown.len() < 3000,
            "{}",
            shown.len()
        );
    }

    #[tokio::test]
    async fn grep_agrees_with_ripgrep() {
        let dir = tree();
        let root = dir.path();
        let ctx = ctx(root);
        let r = root.to_str().expect("utf8");
        assert_eq!(
            grep(&ctx, json!({"pattern": "answer", "path": r})).await,
            rg(root, &["-l", "answer"])
        );
        assert_eq!(
            grep(
                &ctx,
                json!({"pattern": "answer", "path": r, "output_mode": "count"})
            )
            .await,
            rg(root, &["-c", "answer"])
        );
        assert_eq!(
            grep(
                &ctx,
                json!({"pattern": "ANSWER", "-i": true, "path": r, "output_mode": "content"})
            )
            .await,
            rg(root, &["-n", "-i", "--no-heading", "ANSWER"])
        );
        assert_eq!(
            grep(
                &ctx,
                json!({"pattern": "TODO", "path": r, "output_mode": "content", "-B": 1, "-A": 1})
            )
            .await,
            rg(root, &["-n", "--no-heading", "-B1", "-A1", "TODO"])
        );
        assert_eq!(
            grep(
                &ctx,
                json!({"pattern": "42", "path": r, "type": "py", "output_mode": "content"})
            )
            .await,
            rg(root, &["-n", "--no-heading", "-tpy", "42"])
        );
        assert_eq!(
            grep(&ctx, json!({"pattern": "fn", "path": r, "glob": "*.rs"})).await,
            rg(root, &["-l", "-g", "*.rs", "fn"])
        );
        let bad = Grep
            .run(json!({"pattern": "(unclosed", "path": r}), &ctx)
            .await;
        assert!(bad.is_error && text(&bad).contains("invalid regex"));
        let paged = Grep
            .run(
                json!({"pattern": "answer", "path": r, "output_mode": "content", "head_limit": 2}),
                &ctx,
            )
            .await;
        assert!(text(&paged).contains("use offset 2 for more"), "{paged:?}");
    }

    #[tokio::test]
    async fn glob_is_newest_first_and_respects_gitignore() {
        let dir = tree();
        let root = dir.path();
        let ctx = ctx(root);
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let f = std::fs::File::options()
            .write(true)
            .open(root.join("src/main.rs"))
            .expect("open");
        f.set_modified(old).expect("mtime");
        let out = Glob.run(json!({"pattern": "**/*.rs"}), &ctx).await;
        let got: Vec<&str> = text(&out).lines().collect();
        let lib = root.join("src/lib.rs");
        let main = root.join("src/main.rs");
        assert_eq!(
            got,
            [lib.to_str().expect("utf8"), main.to_str().expect("utf8")],
            "no target/, no hidden"
        );
        let none = Glob.run(json!({"pattern": "*.go"}), &ctx).await;
        assert!(text(&none).starts_with("No files match"));
    }

    #[tokio::test]
    async fn ls_shows_a_tree_and_todo_emits_the_plan() {
        let dir = tree();
        let root = dir.path();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = seen.clone();
        let mut ctx = ctx(root);
        ctx.emit = Arc::new(move |e| sink.lock().expect("lock").push(e));
        let out = Ls
            .run(json!({"path": root, "ignore": ["*.py"]}), &ctx)
            .await;
        let listing = text(&out);
        assert!(
            listing.contains("\n  - src/\n    - lib.rs\n    - main.rs\n    - util/\n"),
            "{listing}"
        );
        assert!(
            !listing.contains("target")
                && !listing.contains("helper.py")
                && !listing.contains(".hidden")
        );
        let todos = json!([{"content": "Run tests", "activeForm": "Running tests", "status": "in_progress"}]);
        let out = TodoWrite.run(json!({"todos": todos}), &ctx).await;
        assert!(text(&out).contains("1 items"));
        assert_eq!(seen.lock().expect("lock").len(), 1);
    }
}

#[test]
fn definitions_share_each_tool_s_text_and_schema() {
    let tools = crate::tools::builtin();
    let (a, b) = (tools.definitions(), tools.definitions());
    assert!(!a.is_empty());
    for (x, y) in a.iter().zip(&b) {
        assert!(Arc::ptr_eq(&x.input_schema, &y.input_schema), "{}", x.name);
        assert!(Arc::ptr_eq(&x.description, &y.description), "{}", x.name);
        let find = tools.find(&x.name).expect("listed tools exist");
        assert_eq!(*x.input_schema, find.input_schema());
    }
}

/// A tool whose schema requires the one field it is given.
struct Needs(&'static str);

impl crate::tools::Tool for Needs {
    fn name(&self) -> &str {
        "Needs"
    }
    fn description(&self) -> &str {
        "test tool"
    }
    fn input_schema(&self) -> serde_json::Value {
        json!({"type": "object", "required": [self.0]})
    }
    fn is_read_only(&self) -> bool {
        true
    }
    fn run<'a>(&'a self, _: serde_json::Value, _: &'a ToolContext) -> crate::tools::ToolFuture<'a> {
        Box::pin(async { ToolOutput::text("ok") })
    }
}

#[test]
fn a_replaced_tool_is_validated_against_its_own_schema() {
    let tools = crate::tools::Tools::new(vec![Arc::new(Needs("a"))]);
    assert!(tools.validate("Needs", &json!({})).is_err());
    let same = tools.replace(Arc::new(Needs("a")));
    assert!(same.validate("Needs", &json!({"a": 1})).is_ok());
    assert!(same.validate("Needs", &json!({"b": 1})).is_err());
    let other = same.replace(Arc::new(Needs("b")));
    assert!(other.validate("Needs", &json!({"b": 1})).is_ok());
    let err = other
        .validate("Needs", &json!({"a": 1}))
        .expect_err("the new schema requires b");
    assert!(err.contains('b'), "{err}");
}
