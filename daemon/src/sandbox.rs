//! The OS sandbox Bash commands run in (bubblewrap): Claude Code's `sandbox` settings read with
//! workspace trust ([`Settings::read`]), which calls it holds ([`Sandbox::place`]), the `bwrap`
//! command line a shell starts under ([`Sandbox::wrap`]) and whether bubblewrap can start
//! ([`ready`], [`probe`]).
//!
//! Inside: the whole filesystem read-only but the session's working directories, its scratch
//! directory and a fresh `/tmp`; the user's secrets (`~/.ssh`, `~/.aws`, …), tether's data and
//! configuration, and the sockets of the user's runtime directory hidden; no capabilities; its
//! own process, IPC and network namespaces. The network is off, unless
//! `network.allowedDomains` names hosts: then the session's filtering proxy ([`proxy`]) is
//! bound in, a relay inside forwards the sandbox's loopback port to it, and the proxy
//! variables point there, so only those hosts are reached (over HTTP and HTTPS).
//!
//! Invariant: when the sandbox is enabled a call it holds runs inside it or not at all — a
//! bubblewrap that cannot start refuses the call, it never runs unsandboxed. Calls it does not
//! hold (`excludedCommands`, `dangerouslyDisableSandbox`) go through the normal permission
//! check; only calls it holds are allowed without asking (`autoAllowBashIfSandboxed`). Imports
//! nothing of the crate but `settings`, so tools, sessions and `doctor` may all ask it.

pub mod proxy;

use serde_json::Value;
use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

/// The variable naming the `bwrap` to run (default: `bwrap` on `PATH`).
pub const BWRAP_VAR: &str = "TETHER_BWRAP";

/// Directories under the home directory that hold credentials; hidden inside.
const SECRET_DIRS: &[&str] = &[
    ".ssh",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".gnupg",
    ".kube",
    ".password-store",
];

/// Files under the home directory that hold credentials; read as empty inside.
const SECRET_FILES: &[&str] = &[
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".claude/.credentials.json",
    ".claude.json",
];

/// Claude Code's `sandbox` settings as they apply to one project.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Settings {
    /// `sandbox.enabled`.
    pub enabled: bool,
    /// `sandbox.autoAllowBashIfSandboxed` (default: on, when the user or a trusted project
    /// turned the sandbox on).
    pub auto_allow: bool,
    /// `sandbox.allowUnsandboxedCommands` (default true): whether `dangerouslyDisableSandbox`
    /// is honoured.
    pub allow_unsandboxed: bool,
    /// `sandbox.excludedCommands`: commands that run outside (and are asked about as usual).
    pub excluded: Vec<String>,
    /// `sandbox.network.allowedDomains`.
    pub allowed_domains: Vec<String>,
    /// `sandbox.network.allowUnixSockets`: socket paths left reachable.
    pub unix_sockets: Vec<PathBuf>,
    /// `sandbox.network.allowAllUnixSockets`.
    pub all_unix_sockets: bool,
    /// `sandbox.network.allowLocalBinding`: commands may listen on the sandbox's own loopback.
    pub local_binding: bool,
    /// Which file said what, for `/sandbox`: `file: key ignored (why)` for what was skipped.
    pub skipped: Vec<String>,
}

impl Settings {
    /// The `sandbox` key of the settings files (most general first, as
    /// [`crate::settings::files`] gives them). `user_file` is `~/.claude/settings.json`, whose
    /// every key applies; a project's file may only narrow unless the project is `trusted`: its
    /// `enabled: true` and `allowUnsandboxedCommands: false` always apply, the rest only when
    /// trusted.
    pub fn read(files: &[(PathBuf, Value)], user_file: Option<&Path>, trusted: bool) -> Self {
        let mut out = Self {
            allow_unsandboxed: true,
            ..Self::default()
        };
        // Whether the sandbox was turned on by someone whose say widens what runs unasked.
        let mut enabled_by_trusted = false;
        let mut auto_allow: Option<bool> = None;
        for (path, v) in files {
            let s = &v["sandbox"];
            if !s.is_object() {
                continue;
            }
            let full = trusted || Some(path.as_path()) == user_file;
            let mut skip = |key: &str| {
                out.skipped.push(format!(
                    "{}: sandbox.{key} ignored (the project is not trusted)",
                    path.display()
                ))
            };
            match s["enabled"].as_bool() {
                Some(true) => {
                    out.enabled = true;
                    enabled_by_trusted = full;
                }
                Some(false) if full => {
                    out.enabled = false;
                    enabled_by_trusted = false;
                }
                Some(false) => skip("enabled"),
                None => {}
            }
            match s["allowUnsandboxedCommands"].as_bool() {
                Some(false) => out.allow_unsandboxed = false,
                Some(true) if full => out.allow_unsandboxed = true,
                Some(true) => skip("allowUnsandboxedCommands"),
                None => {}
            }
            if let Some(on) = s["autoAllowBashIfSandboxed"].as_bool() {
                if full || !on {
                    auto_allow = Some(on);
                } else {
                    skip("autoAllowBashIfSandboxed");
                }
            }
            let strings = |v: &Value| -> Vec<String> {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            };
            let widening = [
                (
                    "excludedCommands",
                    !strings(&s["excludedCommands"]).is_empty(),
                ),
                (
                    "network.allowedDomains",
                    !strings(&s["network"]["allowedDomains"]).is_empty(),
                ),
                (
                    "network.allowUnixSockets",
                    !strings(&s["network"]["allowUnixSockets"]).is_empty(),
                ),
                (
                    "network.allowAllUnixSockets",
                    s["network"]["allowAllUnixSockets"] == true,
                ),
                (
                    "network.allowLocalBinding",
                    s["network"]["allowLocalBinding"] == true,
                ),
            ];
            if !full {
                for (key, set) in widening {
                    if set {
                        skip(key);
                    }
                }
                continue;
            }
            push_new(&mut out.excluded, strings(&s["excludedCommands"]));
            push_new(
                &mut out.allowed_domains,
                strings(&s["network"]["allowedDomains"])
                    .into_iter()
                    .map(|d| d.trim().trim_end_matches('.').to_ascii_lowercase())
                    .filter(|d| !d.is_empty())
                    .collect(),
            );
            push_new(
                &mut out.unix_sockets,
                strings(&s["network"]["allowUnixSockets"])
                    .into_iter()
                    .map(PathBuf::from)
                    .filter(|p| p.is_absolute())
                    .collect(),
            );
            if let Some(b) = s["network"]["allowAllUnixSockets"].as_bool() {
                out.all_unix_sockets = b;
            }
            if let Some(b) = s["network"]["allowLocalBinding"].as_bool() {
                out.local_binding = b;
            }
        }
        out.auto_allow = out.enabled && auto_allow.unwrap_or(enabled_by_trusted);
        out
    }
}

fn push_new<T: PartialEq>(list: &mut Vec<T>, items: Vec<T>) {
    for i in items {
        if !list.contains(&i) {
            list.push(i);
        }
    }
}

/// Where one Bash call runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Inside the sandbox.
    Inside,
    /// Outside it: the sandbox is off, or the call is excluded or asked to leave it.
    Outside,
}

/// The sandbox of one session, as its current turn runs it: the settings and the paths they
/// apply to.
#[derive(Debug, Clone, PartialEq)]
pub struct Sandbox {
    /// The settings.
    pub settings: Settings,
    /// The `bwrap` to run.
    pub bwrap: PathBuf,
    /// Directories writable inside: the working directories (and the scratch directory).
    pub writable: Vec<PathBuf>,
    /// The session's scratch directory: writable even under a hidden directory.
    pub scratch: PathBuf,
    /// Directories and files hidden inside (those that exist when a shell starts are masked).
    pub hidden: Vec<PathBuf>,
    /// Where the session's network proxy listens (used when `allowedDomains` is not empty).
    pub proxy_socket: PathBuf,
    /// The program that runs the relay inside (`tetherd sandbox-relay`): this one.
    pub relay: PathBuf,
}

/// The namespaces and the filesystem every sandboxed shell starts with (before the writable
/// directories and the masks): no capabilities, its own pids, IPC and (empty) network, the
/// root read-only, a private `/dev`, `/proc` and `/tmp`.
const NAMESPACES: &[&str] = &[
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-net",
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--tmpfs",
    "/tmp",
];

/// Paths, relative to each writable directory, that change what runs outside the sandbox.
const PROTECTED: &[&str] = &[
    ".claude",
    ".mcp.json",
    ".git/hooks",
    ".git/config",
    ".git/config.worktree",
    ".git/commondir",
    ".git/worktrees",
    ".gitmodules",
    ".envrc",
    ".vscode",
    ".idea",
    ".husky",
];

fn push_bind(a: &mut Vec<OsString>, flag: &str, from: &Path, to: &Path) {
    a.push(flag.into());
    a.push(from.as_os_str().to_owned());
    a.push(to.as_os_str().to_owned());
}

/// What [`Sandbox::new`] is built from.
#[derive(Debug, Clone, Default)]
pub struct Paths {
    /// The user's home directory.
    pub home: Option<PathBuf>,
    /// The session's working directories (its directory and the additional ones).
    pub roots: Vec<PathBuf>,
    /// The session's scratch directory.
    pub scratch: PathBuf,
    /// tether's data directory.
    pub data_dir: PathBuf,
    /// Other paths to hide: tether's configuration, its socket, the runtime directory.
    pub hidden: Vec<PathBuf>,
    /// Where the session's network proxy listens (in tether's private data directory).
    pub proxy_socket: PathBuf,
}

impl Sandbox {
    /// The sandbox of `settings` over `paths`; `bwrap` from [`BWRAP_VAR`], else `bwrap`.
    pub fn new(settings: Settings, paths: Paths) -> Self {
        let bwrap = bwrap_path();
        let mut hidden = Vec::new();
        if let Some(home) = &paths.home {
            hidden.extend(SECRET_DIRS.iter().map(|d| home.join(d)));
            hidden.extend(SECRET_FILES.iter().map(|f| home.join(f)));
        }
        for var in [
            "GOOGLE_APPLICATION_CREDENTIALS",
            "AWS_SHARED_CREDENTIALS_FILE",
            "CLOUDSDK_CONFIG",
        ] {
            if let Some(p) = std::env::var_os(var).map(PathBuf::from)
                && p.is_absolute()
            {
                hidden.push(p);
            }
        }
        hidden.push(paths.data_dir.clone());
        hidden.extend(paths.hidden.iter().cloned());
        if !settings.all_unix_sockets {
            // The user's sockets (the session bus, agents, tetherd's own) and Docker's.
            if let Some(run) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
                hidden.push(PathBuf::from(run));
            }
            if let Some(sock) = std::env::var_os("SSH_AUTH_SOCK").filter(|v| !v.is_empty()) {
                hidden.push(PathBuf::from(sock));
            }
            hidden.push(PathBuf::from("/run/docker.sock"));
            hidden.push(PathBuf::from("/var/run/docker.sock"));
        }
        Self {
            settings,
            bwrap,
            writable: paths.roots,
            scratch: paths.scratch,
            hidden,
            proxy_socket: paths.proxy_socket,
            relay: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("tetherd")),
        }
    }

    /// The hosts the sandbox may reach through the proxy; `None` when the network is off.
    pub fn network(&self) -> Option<proxy::Allowed> {
        (!self.settings.allowed_domains.is_empty())
            .then(|| proxy::Allowed::new(&self.settings.allowed_domains))
    }

    /// Where a Bash call with `input` runs: outside when the sandbox is off, when its command
    /// starts with one of `excludedCommands`, or when it sets `dangerouslyDisableSandbox` and
    /// `allowUnsandboxedCommands` is not off.
    pub fn place(&self, input: &Value) -> Placement {
        let s = &self.settings;
        if !s.enabled {
            return Placement::Outside;
        }
        if s.allow_unsandboxed && input["dangerouslyDisableSandbox"] == true {
            return Placement::Outside;
        }
        let command = input["command"].as_str().unwrap_or("");
        if s.excluded.iter().any(|p| excluded(p, command)) {
            return Placement::Outside;
        }
        Placement::Inside
    }

    /// Whether a Bash call with `input` runs without asking because the sandbox holds it
    /// (deny and ask rules still apply: the permission check looks at them first).
    pub fn auto_allows(&self, input: &Value) -> bool {
        self.settings.auto_allow && self.place(input) == Placement::Inside
    }

    /// The command line a shell starts under (`bwrap` first; the shell program and its
    /// arguments follow it); the shell's own directory is kept inside (bwrap stays in its
    /// working directory). With `proxy` (the socket of a running [`proxy::Proxy`]) the socket
    /// is bound in and the line ends with the [`proxy::prelude`] that starts the relay before
    /// the shell; without it, with `--`, and the sandbox has no network.
    pub fn wrap(&self, proxy: Option<&Path>) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![self.bwrap.as_os_str().to_owned()];
        a.extend(NAMESPACES.iter().map(OsString::from));
        for dir in self.writable.iter().filter(|d| d.is_dir()) {
            push_bind(&mut a, "--bind", dir, dir);
        }
        // A repository's `.git` is a mount point of its own, so it cannot be renamed away and
        // replaced by one with another config.
        for git in self
            .writable
            .iter()
            .map(|d| d.join(".git"))
            .filter(|g| g.is_dir())
        {
            push_bind(&mut a, "--bind", &git, &git);
        }
        // What changes what runs stays read-only inside the writable directories.
        for p in self.protected().iter().filter(|p| p.exists()) {
            push_bind(&mut a, "--ro-bind", p, p);
        }
        for p in &self.hidden {
            match std::fs::metadata(p) {
                Ok(m) if m.is_dir() => {
                    a.push("--tmpfs".into());
                    a.push(p.as_os_str().to_owned());
                }
                Ok(_) => push_bind(&mut a, "--ro-bind", Path::new("/dev/null"), p),
                Err(_) => {}
            }
        }
        // After the masks: the scratch directory may lie in the (hidden) data directory.
        if self.scratch.is_dir() {
            push_bind(&mut a, "--bind", &self.scratch, &self.scratch);
        }
        for sock in self.settings.unix_sockets.iter().filter(|s| s.exists()) {
            push_bind(&mut a, "--bind", sock, sock);
        }
        if let Some(sock) = proxy {
            push_bind(&mut a, "--bind", sock, sock);
        }
        a.push("--".into());
        if let Some(sock) = proxy {
            a.extend(
                proxy::prelude(&self.relay, sock)
                    .into_iter()
                    .map(OsString::from),
            );
        }
        a
    }

    /// The files in the writable directories that change what runs outside the sandbox: the
    /// project's settings, hooks and MCP servers (which would turn the sandbox off or add
    /// hooks), git's hooks and config, editors' tasks, direnv. Bound read-only when they exist.
    pub fn protected(&self) -> Vec<PathBuf> {
        self.writable
            .iter()
            .flat_map(|root| PROTECTED.iter().map(move |p| root.join(p)))
            .collect()
    }

    /// Of [`Sandbox::protected`], those not there now: a sandboxed command could create them,
    /// so the Bash tool looks again after each call ([`Sandbox::created`]).
    pub fn absent(&self) -> Vec<PathBuf> {
        self.protected()
            .into_iter()
            .filter(|p| p.symlink_metadata().is_err())
            .collect()
    }

    /// Of `absent`, those a command created.
    pub fn created(absent: Vec<PathBuf>) -> Vec<PathBuf> {
        absent
            .into_iter()
            .filter(|p| p.symlink_metadata().is_ok())
            .collect()
    }

    /// A few lines for `/sandbox`: on or off, what is writable, the network rule.
    pub fn describe(&self, ready: Result<(), &Unavailable>) -> String {
        let s = &self.settings;
        let mut lines = Vec::new();
        if !s.enabled {
            lines.push("sandbox: off (set sandbox.enabled in ~/.claude/settings.json or the project's .claude/settings.json)".to_owned());
        } else {
            match ready {
                Ok(()) => lines.push(format!(
                    "sandbox: on — Bash commands run in bubblewrap ({})",
                    self.bwrap.display()
                )),
                Err(why) => lines.push(format!(
                    "sandbox: enabled but unavailable — {why}; Bash commands it would hold are refused"
                )),
            }
            let mut writable: Vec<String> = self
                .writable
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            writable.push(format!("{} (scratch)", self.scratch.display()));
            writable.push("/tmp (empty, per command)".into());
            lines.push(format!("writable: {}", writable.join(", ")));
            lines.push(if s.allowed_domains.is_empty() {
                "network: none".to_owned()
            } else {
                format!(
                    "network: only {} (allowedDomains; *.domain for its subdomains, :port for one port), over HTTP and HTTPS through tether's proxy (HTTP_PROXY/HTTPS_PROXY are set inside); any other host is refused with 403, other traffic has no route",
                    s.allowed_domains.join(", ")
                )
            });
            lines.push(format!(
                "hidden: ~/.ssh, ~/.aws, ~/.config/gcloud, ~/.gnupg, ~/.kube and other credentials, tether's data{}",
                if s.all_unix_sockets { "" } else { ", the runtime directory's sockets" }
            ));
            lines.push(format!(
                "unsandboxed Bash calls (asked as usual): {}{}",
                if s.excluded.is_empty() {
                    "none excluded".to_owned()
                } else {
                    format!("excludedCommands {}", s.excluded.join(", "))
                },
                if s.allow_unsandboxed {
                    "; dangerouslyDisableSandbox honoured"
                } else {
                    "; dangerouslyDisableSandbox ignored"
                }
            ));
            lines.push(format!(
                "sandboxed Bash calls: {}",
                if s.auto_allow {
                    "run without asking unless a deny or ask rule matches (autoAllowBashIfSandboxed)"
                } else {
                    "asked as usual"
                }
            ));
        }
        lines.extend(s.skipped.iter().cloned());
        lines.join("\n")
    }
}

/// Whether `command` starts with the excluded command `pattern` (`docker`, `npm run test`,
/// `git:*`): the pattern's words, then the end or a space.
fn excluded(pattern: &str, command: &str) -> bool {
    let pattern = pattern.trim();
    let pattern = pattern
        .strip_suffix(":*")
        .or_else(|| pattern.strip_suffix(" *"))
        .or_else(|| pattern.strip_suffix('*'))
        .unwrap_or(pattern)
        .trim();
    if pattern.is_empty() {
        return false;
    }
    let words: Vec<&str> = command.split_whitespace().collect();
    let want: Vec<&str> = pattern.split_whitespace().collect();
    words.len() >= want.len() && words[..want.len()] == want[..]
}

/// The `bwrap` to run: [`BWRAP_VAR`], else `bwrap` on `PATH`.
pub fn bwrap_path() -> PathBuf {
    std::env::var_os(BWRAP_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("bwrap"))
}

/// Why bubblewrap cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// No such program.
    #[error("bubblewrap is not installed ({0} not found; install the bubblewrap package)")]
    NotFound(String),
    /// It ran and refused (no user namespaces, a kernel or container that forbids them, …).
    #[error("bubblewrap cannot start a sandbox here ({bwrap}: {reason})")]
    Refused {
        /// The program.
        bwrap: String,
        /// What it said.
        reason: String,
    },
}

/// Runs `bwrap` once with the sandbox's namespaces around `true`.
pub async fn probe(bwrap: &Path) -> Result<(), Unavailable> {
    let name = bwrap.display().to_string();
    let out = tokio::process::Command::new(bwrap)
        .args(NAMESPACES)
        .args(["--", "true"])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await;
    match out {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Unavailable::NotFound(name)),
        Err(e) => Err(Unavailable::Refused {
            bwrap: name,
            reason: e.to_string(),
        }),
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => {
            let said = String::from_utf8_lossy(&o.stderr).trim().to_owned();
            Err(Unavailable::Refused {
                bwrap: name,
                reason: if said.is_empty() {
                    format!("exited with {}", o.status)
                } else {
                    said
                },
            })
        }
    }
}

/// [`probe`], remembered once it succeeded (a failure is probed again next time, so installing
/// bubblewrap needs no restart).
pub async fn ready(bwrap: &Path) -> Result<(), Unavailable> {
    static READY: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    let known = READY.get_or_init(Default::default);
    if known
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(bwrap)
    {
        return Ok(());
    }
    probe(bwrap).await?;
    known
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(bwrap.to_owned());
    Ok(())
}

#[cfg(test)]
mod tests;
