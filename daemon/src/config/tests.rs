//! The configuration layers, table-tested: defaults, file, environment, flags, and the errors that name file, line and key.

use super::*;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: std::collections::HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k: &str| map.get(k).cloned()
}

fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.toml");
    std::fs::write(&path, text).expect("write");
    (dir, path)
}

fn source_of(c: &Config, key: &str) -> String {
    c.entries()
        .into_iter()
        .find(|e| e.key == key)
        .map(|e| e.source)
        .unwrap_or_default()
}

#[test]
fn defaults_then_file_then_env_then_flags() {
    let (_d, path) = file(
        "model = \"opus\"\nidle_unload = \"1h\"\n\n[api]\nmax_retries = 3\n\n[permissions]\nallow = [\"Bash(ls:*)\"]\n",
    );
    let env = env_of(&[
        ("TETHER_IDLE_UNLOAD", "2h"),
        ("TETHER_API_MAX_RETRIES", ""),
        ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
    ]);
    let c = Config::load(Some(&path), &env, &["api.max_retries=5".into()]).expect("valid");
    assert_eq!(c.string("model").as_deref(), Some("opus"));
    assert_eq!(source_of(&c, "model"), format!("{}:1", path.display()));
    assert_eq!(c.duration("idle_unload"), Some(Duration::from_secs(7200)));
    assert_eq!(source_of(&c, "idle_unload"), "env TETHER_IDLE_UNLOAD");
    assert_eq!(c.number("api.max_retries"), Some(5.0));
    assert_eq!(source_of(&c, "api.max_retries"), "command line");
    assert_eq!(
        c.string("api.base_url").as_deref(),
        Some("http://127.0.0.1:9/")
    );
    assert_eq!(c.string("fast_model").as_deref(), Some("haiku"));
    assert_eq!(source_of(&c, "fast_model"), "default");
    assert!(c.tables.contains_key("permissions"));
}

#[test]
fn errors_name_the_file_line_and_key() {
    let cases = [
        ("model = \"opus\"\nmodle = \"x\"\n", ":2", "modle"),
        ("[api]\nmax_retries = \"many\"\n", ":2", "api.max_retries"),
        ("idle_unload = \"soon\"\n", ":1", "idle_unload"),
        ("permission_mode = \"yolo\"\n", ":1", "yolo"),
        ("[permissions]\nallow = [1]\n", ":1", "permissions.allow"),
        ("[hooks]\nOnLunch = []\n", ":1", "OnLunch"),
        ("model = \n", ":1", "must be quoted"),
    ];
    for (text, line, word) in cases {
        let (_d, path) = file(text);
        let err = Config::load(Some(&path), &env_of(&[]), &[])
            .expect_err(text)
            .to_string();
        assert!(
            err.starts_with(&path.display().to_string())
                && err.contains(line)
                && err.contains(word),
            "{text:?} gave {err}"
        );
    }
}

#[test]
fn bad_env_and_flags_are_refused() {
    let err = Config::load(None, &env_of(&[("TETHER_DELTA_RETENTION", "forever")]), &[])
        .expect_err("bad env")
        .to_string();
    assert!(
        err.contains("TETHER_DELTA_RETENTION") && err.contains("delta_retention"),
        "{err}"
    );
    let err = Config::load(None, &env_of(&[]), &["nope=1".into()])
        .expect_err("bad flag")
        .to_string();
    assert!(err.contains("unknown key \"nope\""), "{err}");
    let off = Config::load(
        None,
        &env_of(&[
            ("DISABLE_AUTO_COMPACT", "1"),
            ("TETHER_IDLE_UNLOAD_MS", "0"),
        ]),
        &[],
    )
    .expect("valid");
    assert_eq!(off.number("auto_compact_percent"), None);
    assert_eq!(off.duration("idle_unload"), None);
}

#[test]
fn the_snapshot_deny_list_is_a_list_or_a_comma_separated_string() {
    let none = env_of(&[]);
    let c = Config::load(None, &none, &[]).expect("defaults");
    assert_eq!(
        c.list("snapshots.deny"),
        [
            ".env*",
            "*.pem",
            "*.key",
            "id_rsa*",
            "id_dsa*",
            "id_ecdsa*",
            "id_ed25519*",
            ".claude/settings.local.json"
        ]
    );
    assert!(c.flag("snapshots.enabled"));
    let (_d, path) = file("[snapshots]\ndeny = [\"*.secret\"]\nenabled = false\n");
    let c = Config::load(Some(&path), &none, &[]).expect("valid");
    assert_eq!(c.list("snapshots.deny"), ["*.secret"]);
    assert!(!c.flag("snapshots.enabled"));
    let env = env_of(&[("TETHER_SNAPSHOTS_DENY", ".env*, *.p12")]);
    let c = Config::load(None, &env, &[]).expect("valid");
    assert_eq!(c.list("snapshots.deny"), [".env*", "*.p12"]);
    let err = Config::load(None, &none, &["snapshots.deny=3".into()]).expect_err("a number");
    assert!(err.to_string().contains("snapshots.deny"), "{err}");
}
