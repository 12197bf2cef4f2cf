//! The settings reader under trust, the call placement, the `bwrap` command line, and (where
//! bubblewrap starts here) what a command inside really can and cannot do.

use super::*;
use serde_json::json;

const USER: &str = "/home/u/.claude/settings.json";
const PROJECT: &str = "/p/.claude/settings.json";
const LOCAL: &str = "/p/.claude/settings.local.json";

fn read(files: &[(&str, Value)], trusted: bool) -> Settings {
    let files: Vec<(PathBuf, Value)> = files
        .iter()
        .map(|(p, v)| (PathBuf::from(p), v.clone()))
        .collect();
    Settings::read(&files, Some(Path::new(USER)), trusted)
}

#[test]
fn the_user_file_always_applies_and_enables_auto_allow() {
    let s = read(
        &[(
            USER,
            json!({"sandbox": {"enabled": true, "excludedCommands": ["docker"],
                "network": {"allowedDomains": ["Example.COM."], "allowLocalBinding": true}}}),
        )],
        false,
    );
    assert!(s.enabled && s.auto_allow && s.allow_unsandboxed);
    assert_eq!(s.excluded, ["docker"]);
    assert_eq!(s.allowed_domains, ["example.com"]);
    assert!(s.local_binding);
    assert!(s.skipped.is_empty());
    assert_eq!(
        read(&[(USER, json!({"model": "x"}))], true),
        Settings {
            allow_unsandboxed: true,
            ..Settings::default()
        }
    );
}

#[test]
fn an_untrusted_project_may_only_narrow() {
    // (files, trusted) → (enabled, auto_allow, allow_unsandboxed, excluded, domains)
    type Row = (
        Vec<(&'static str, Value)>,
        bool,
        (bool, bool, bool, usize, usize),
    );
    let table: Vec<Row> = vec![
        // A project turning it on: on, but nothing runs unasked because of it.
        (
            vec![(PROJECT, json!({"sandbox": {"enabled": true}}))],
            false,
            (true, false, true, 0, 0),
        ),
        // Trusted: on, with the default auto-allow.
        (
            vec![(PROJECT, json!({"sandbox": {"enabled": true}}))],
            true,
            (true, true, true, 0, 0),
        ),
        // Untrusted cannot turn the user's sandbox off, nor widen it.
        (
            vec![
                (USER, json!({"sandbox": {"enabled": true}})),
                (
                    LOCAL,
                    json!({"sandbox": {"enabled": false, "excludedCommands": ["rm"],
                        "allowUnsandboxedCommands": true, "autoAllowBashIfSandboxed": true,
                        "network": {"allowedDomains": ["evil.example"], "allowAllUnixSockets": true}}}),
                ),
            ],
            false,
            (true, true, true, 0, 0),
        ),
        // Trusted, it can.
        (
            vec![
                (USER, json!({"sandbox": {"enabled": true}})),
                (PROJECT, json!({"sandbox": {"enabled": false}})),
            ],
            true,
            (false, false, true, 0, 0),
        ),
        (
            vec![
                (USER, json!({"sandbox": {"enabled": true}})),
                (
                    PROJECT,
                    json!({"sandbox": {"excludedCommands": ["docker"],
                        "network": {"allowedDomains": ["a.example"]}}}),
                ),
            ],
            true,
            (true, true, true, 1, 1),
        ),
        // Narrowing keys apply untrusted.
        (
            vec![
                (USER, json!({"sandbox": {"enabled": true}})),
                (
                    PROJECT,
                    json!({"sandbox": {"autoAllowBashIfSandboxed": false,
                        "allowUnsandboxedCommands": false}}),
                ),
            ],
            false,
            (true, false, false, 0, 0),
        ),
        // An untrusted project cannot switch auto-allow on for itself.
        (
            vec![(
                PROJECT,
                json!({"sandbox": {"enabled": true, "autoAllowBashIfSandboxed": true}}),
            )],
            false,
            (true, false, true, 0, 0),
        ),
    ];
    for (i, (files, trusted, want)) in table.into_iter().enumerate() {
        let s = read(&files, trusted);
        let got = (
            s.enabled,
            s.auto_allow,
            s.allow_unsandboxed,
            s.excluded.len(),
            s.allowed_domains.len(),
        );
        assert_eq!(got, want, "row {i}: {s:?}");
        if !trusted
            && files
                .iter()
                .any(|(p, v)| *p != USER && v["sandbox"]["enabled"] == false)
        {
            assert!(
                s.skipped
                    .iter()
                    .any(|k| k.contains("sandbox.enabled ignored")),
                "row {i}: {:?}",
                s.skipped
            );
        }
    }
}

fn sandbox(settings: Settings, paths: Paths) -> Sandbox {
    Sandbox::new(settings, paths)
}

fn on() -> Settings {
    Settings {
        enabled: true,
        auto_allow: true,
        allow_unsandboxed: true,
        ..Settings::default()
    }
}

#[test]
fn which_calls_the_sandbox_holds() {
    let mut s = on();
    s.excluded = vec!["docker".into(), "npm run:*".into()];
    let b = sandbox(s, Paths::default());
    let place = |input: Value| b.place(&input);
    assert_eq!(place(json!({"command": "ls"})), Placement::Inside);
    assert_eq!(place(json!({"command": "docker ps"})), Placement::Outside);
    assert_eq!(place(json!({"command": "dockerd"})), Placement::Inside);
    assert_eq!(
        place(json!({"command": "npm run build"})),
        Placement::Outside
    );
    assert_eq!(place(json!({"command": "npm test"})), Placement::Inside);
    let leave = json!({"command": "ls", "dangerouslyDisableSandbox": true});
    assert_eq!(place(leave.clone()), Placement::Outside);
    assert!(b.auto_allows(&json!({"command": "rm -rf build"})));
    assert!(
        !b.auto_allows(&leave),
        "leaving the sandbox is never allowed by it"
    );
    assert!(!b.auto_allows(&json!({"command": "docker ps"})));
    // With allowUnsandboxedCommands off the flag is ignored: the call stays inside.
    let mut strict = on();
    strict.allow_unsandboxed = false;
    let b = sandbox(strict, Paths::default());
    assert_eq!(b.place(&leave), Placement::Inside);
    // Off: nothing is held, nothing allowed.
    let b = sandbox(Settings::default(), Paths::default());
    assert_eq!(b.place(&json!({"command": "ls"})), Placement::Outside);
    assert!(!b.auto_allows(&json!({"command": "ls"})));
}

/// The positions of `flag value…` in `args`.
fn find(args: &[OsString], seq: &[&str]) -> Option<usize> {
    args.windows(seq.len())
        .position(|w| w.iter().zip(seq).all(|(a, b)| a == b))
}

#[test]
fn the_command_line_binds_the_roots_then_masks_then_the_scratch_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let project = dir.path().join("project");
    let data = dir.path().join("data");
    let scratch = data.join("scratch/s1");
    for d in [&home.join(".ssh"), &project, &scratch] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    std::fs::write(home.join(".netrc"), "machine x password y").expect("write");
    let b = sandbox(
        on(),
        Paths {
            home: Some(home.clone()),
            roots: vec![project.clone(), dir.path().join("missing")],
            scratch: scratch.clone(),
            data_dir: data.clone(),
            hidden: Vec::new(),
            proxy_socket: PathBuf::new(),
        },
    );
    let args = b.wrap(None);
    let s = |p: &Path| p.to_str().expect("utf8").to_owned();
    assert_eq!(
        args.first().map(OsString::as_os_str),
        Some(b.bwrap.as_os_str())
    );
    assert_eq!(args.last().map(|a| a.as_os_str()), Some("--".as_ref()));
    for seq in [
        &["--unshare-net"][..],
        &["--cap-drop", "ALL"],
        &["--ro-bind", "/", "/"],
        &["--tmpfs", "/tmp"],
    ] {
        assert!(find(&args, seq).is_some(), "{seq:?} in {args:?}");
    }
    let root = find(&args, &["--bind", &s(&project), &s(&project)]).expect("project bound");
    let ssh = find(&args, &["--tmpfs", &s(&home.join(".ssh"))]).expect("~/.ssh masked");
    let netrc = find(&args, &["--ro-bind", "/dev/null", &s(&home.join(".netrc"))])
        .expect("~/.netrc emptied");
    let data_mask = find(&args, &["--tmpfs", &s(&data)]).expect("data directory masked");
    let scratch_bind = find(&args, &["--bind", &s(&scratch), &s(&scratch)]).expect("scratch bound");
    assert!(
        root < ssh && root < netrc,
        "a root bound later would uncover a mask"
    );
    assert!(
        data_mask < scratch_bind,
        "the scratch directory is reopened in the data mask"
    );
    assert!(
        find(&args, &[&s(&home.join(".aws"))]).is_none(),
        "a path that does not exist is not mounted (bwrap would create it)"
    );
    assert!(find(&args, &[&s(&dir.path().join("missing"))]).is_none());
}

/// Runs `script` with bash inside `b`, in `cwd`; its exit status and output.
fn run_inside(b: &Sandbox, cwd: &Path, script: &str) -> (bool, String) {
    let args = b.wrap(None);
    let out = std::process::Command::new(&args[0])
        .args(&args[1..])
        .args(["bash", "-c", script])
        .current_dir(cwd)
        .output()
        .expect("bwrap runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test]
async fn inside_only_the_roots_are_writable_secrets_are_hidden_and_there_is_no_network() {
    if let Err(why) = probe(&bwrap_path()).await {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().canonicalize().expect("canonical");
    let home = base.join("home");
    let project = base.join("project");
    let data = base.join("data");
    let scratch = data.join("scratch/s1");
    for d in [&home.join(".ssh"), &project, &scratch] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    std::fs::write(home.join(".ssh/id_rsa"), "PRIVATE KEY").expect("write");
    std::fs::write(data.join("sessions.db"), "SESSIONS").expect("write");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("addr").port();
    let b = sandbox(
        on(),
        Paths {
            home: Some(home.clone()),
            roots: vec![project.clone()],
            scratch: scratch.clone(),
            data_dir: data.clone(),
            hidden: Vec::new(),
            proxy_socket: PathBuf::new(),
        },
    );
    let (ok, text) = run_inside(&b, &project, "echo hi > inside.txt && pwd");
    assert!(ok, "{text}");
    assert_eq!(
        text.trim(),
        project.to_str().expect("utf8"),
        "it starts where it was"
    );
    assert_eq!(
        std::fs::read_to_string(project.join("inside.txt")).expect("written"),
        "hi\n"
    );
    let (ok, _) = run_inside(&b, &scratch, "echo x > out.log");
    assert!(
        ok && scratch.join("out.log").exists(),
        "scratch is writable"
    );
    // Under /tmp (a tempdir's home) the write lands in the sandbox's own /tmp, at worst.
    let (_, text) = run_inside(&b, &project, &format!("touch {}", home.join("x").display()));
    assert!(!home.join("x").exists(), "{text}");
    let outside = PathBuf::from(format!("/var/tmp/tether-sandbox-{}", std::process::id()));
    let (ok, text) = run_inside(&b, &project, &format!("touch {}", outside.display()));
    assert!(!ok && !outside.exists(), "{text}");
    assert!(text.contains("Read-only file system"), "{text}");
    let (_, text) = run_inside(
        &b,
        &project,
        &format!(
            "cat {} {}",
            home.join(".ssh/id_rsa").display(),
            data.join("sessions.db").display()
        ),
    );
    assert!(
        !text.contains("PRIVATE KEY") && !text.contains("SESSIONS"),
        "{text}"
    );
    let (ok, text) = run_inside(
        &b,
        &project,
        &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"),
    );
    assert!(!ok && !text.contains("connected"), "{text}");
    listener.set_nonblocking(true).expect("nonblocking");
    assert!(
        listener.accept().is_err(),
        "no connection reached the listener"
    );
}
