//! `daemon/doctor` and `tetherd doctor`: one line per check of what the daemon needs — its
//! configuration, data directory, credentials (their kind, never their value), git, the Bash
//! sandbox (bubblewrap), and, when asked to go online, the API itself.

use crate::config::Config;
use crate::llm::AnthropicClient;
use std::path::Path;
use tether_proto::{Check, CheckStatus};

fn check(name: &str, status: CheckStatus, detail: impl Into<String>) -> Check {
    Check {
        name: name.to_owned(),
        status,
        detail: detail.into(),
    }
}

/// Free space under `dir`, in bytes.
fn free_bytes(dir: &Path) -> Option<u64> {
    let s = nix::sys::statvfs::statvfs(dir).ok()?;
    Some(s.blocks_available() as u64 * s.fragment_size() as u64)
}

fn data_dir_check(dir: &Path) -> Check {
    let probe = dir.join(format!(".doctor-{}", std::process::id()));
    if let Err(e) = tether_proto::private::create_dir_all(dir)
        .and_then(|_| tether_proto::private::write(&probe, b"ok"))
    {
        return check(
            "data directory",
            CheckStatus::Fail,
            format!("{} is not writable: {e}", dir.display()),
        );
    }
    let _ = std::fs::remove_file(&probe);
    if let Some((path, mode)) = tether_proto::private::first_open_entry(dir) {
        return check(
            "data directory",
            CheckStatus::Warn,
            format!(
                "{} has mode {mode:04o}: other users may read your sessions; tetherd makes it \
                 private at its next start (or run `chmod -R go= {}`)",
                path.display(),
                dir.display()
            ),
        );
    }
    match free_bytes(dir) {
        Some(free) if free < 512 << 20 => check(
            "data directory",
            CheckStatus::Warn,
            format!(
                "{}: only {} MiB free; sessions stop saving when the disk is full",
                dir.display(),
                free >> 20
            ),
        ),
        Some(free) => check(
            "data directory",
            CheckStatus::Ok,
            format!(
                "{} (private, writable, {} GiB free)",
                dir.display(),
                free >> 30
            ),
        ),
        None => check(
            "data directory",
            CheckStatus::Ok,
            format!("{} (private, writable)", dir.display()),
        ),
    }
}

fn git_check() -> Check {
    let (major, minor, patch) = crate::context::libgit2_version();
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("git").is_file()))
        .unwrap_or(false);
    if on_path {
        check(
            "git",
            CheckStatus::Ok,
            format!("libgit2 {major}.{minor}.{patch}; git on PATH"),
        )
    } else {
        check(
            "git",
            CheckStatus::Warn,
            format!(
                "libgit2 {major}.{minor}.{patch}; no git on PATH (the model's git commands will fail)"
            ),
        )
    }
}

/// Whether bubblewrap can start the sandbox `sandbox.enabled` asks for (it runs it once).
async fn sandbox_check() -> Check {
    let bwrap = crate::sandbox::bwrap_path();
    match crate::sandbox::probe(&bwrap).await {
        Ok(()) => check(
            "sandbox",
            CheckStatus::Ok,
            format!(
                "bubblewrap ({}) starts; Bash runs in it where sandbox.enabled is set, with no network but the hosts sandbox.network.allowedDomains names (HTTP and HTTPS, through tether's proxy)",
                bwrap.display()
            ),
        ),
        Err(why) => check(
            "sandbox",
            CheckStatus::Warn,
            format!("unavailable: {why}; where sandbox.enabled is set, Bash commands are refused"),
        ),
    }
}

/// Runs every check; the API is contacted only when `online`.
pub async fn checks(
    config: &Config,
    data_dir: &Path,
    llm: Result<&AnthropicClient, &str>,
    online: bool,
) -> Vec<Check> {
    let mut out = Vec::new();
    out.push(match &config.file {
        Some(f) => check(
            "config",
            CheckStatus::Ok,
            format!("{} is valid", f.display()),
        ),
        None => check(
            "config",
            CheckStatus::Ok,
            match crate::config::default_path() {
                Some(p) => format!(
                    "no file at {}; defaults and environment in use",
                    p.display()
                ),
                None => "no config file; defaults and environment in use".into(),
            },
        ),
    });
    out.push(data_dir_check(data_dir));
    out.push(match llm {
        Ok(client) => match client.credential_kind() {
            Some(kind) => check("credentials", CheckStatus::Ok, format!("from {kind}")),
            None => check(
                "credentials",
                CheckStatus::Fail,
                "none: set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN, TETHER_API_KEY_HELPER, or apiKeyHelper in ~/.claude/settings.json)",
            ),
        },
        Err(why) => check("credentials", CheckStatus::Fail, why.to_owned()),
    });
    out.push(git_check());
    if let Some(cluster) = crate::store::ClusterSettings::from_config(config) {
        out.push(match crate::store::probe_cluster(&cluster).await {
            Ok(found) => check(
                "cluster",
                CheckStatus::Ok,
                format!("node {}: {found}", cluster.node),
            ),
            Err(e) => check("cluster", CheckStatus::Fail, e.to_string()),
        });
    }
    out.push(sandbox_check().await);
    let base = match llm.map(|c| c.provider()) {
        Ok(crate::llm::Provider::Vertex(v)) => format!(
            "Vertex AI (project {}, region {}{})",
            v.project,
            v.region,
            v.base_url
                .as_deref()
                .map(|b| format!(", via {b}"))
                .unwrap_or_default()
        ),
        Ok(crate::llm::Provider::Bedrock(b)) => format!(
            "Amazon Bedrock (region {}{})",
            b.region,
            b.base_url
                .as_deref()
                .map(|u| format!(", via {u}"))
                .unwrap_or_default()
        ),
        _ => config.string("api.base_url").unwrap_or_default(),
    };
    out.push(match (online, llm) {
        (false, _) => check(
            "api",
            CheckStatus::Ok,
            format!("{base} (not contacted; use --online)"),
        ),
        (true, Err(why)) => check("api", CheckStatus::Fail, why.to_owned()),
        (true, Ok(client)) => match client.ping().await {
            Ok(status) => check("api", CheckStatus::Ok, format!("{base} answered {status}")),
            Err(e) => check("api", CheckStatus::Fail, format!("{base}: {e}")),
        },
    });
    out
}
