//! Table tests of the file tools on a temporary tree: read-before-write, staleness, images,
//! binaries, ranges.

use super::{edit::Edit, read::Read, write::Write};
use crate::agent::{Tool, ToolContext, ToolOutput, Workspace};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

fn ctx(root: &Path) -> ToolContext {
    ToolContext {
        workspace: Arc::new(Workspace::new(
            root.to_owned(),
            Vec::new(),
            root.join(".scratch"),
        )),
        cancel: CancellationToken::new(),
        progress: Arc::new(|_| {}),
    }
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
