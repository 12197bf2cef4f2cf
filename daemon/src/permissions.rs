//! Permissions: modes, rules from the settings files, and the decision for one tool call.
//!
//! Invariant: pure functions of (mode, rules, call, working directories) — table-tested; the
//! session's broker asks users only when [`decide`] says `Ask`. Precedence: deny > plan mode >
//! a settings file that could not be read (ask) > ask > bypass > sandboxed Bash > allow >
//! read-only inside the working directories > acceptEdits > dontAsk > ask.

pub(crate) mod rules;
pub(crate) mod settings;
pub(crate) mod shell;

pub use rules::{EDIT_TOOLS, READ_TOOLS, Rule, host_of};
pub mod keys;
pub use settings::{RuleSet, load as load_settings, remember_always};
pub use shell::split as split_command;

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use tether_proto::PermissionMode;

/// What to do with a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run it.
    Allow,
    /// Ask a controller.
    Ask,
    /// Refuse it, telling the model why.
    Deny(String),
}

/// A call as the permission check sees it.
pub struct Call<'a> {
    /// Tool name.
    pub tool: &'a str,
    /// Its input.
    pub input: &'a Value,
    /// Whether the tool only reads.
    pub read_only: bool,
    /// The session's current directory (relative paths resolve here).
    pub cwd: &'a Path,
    /// The session's working directories.
    pub roots: &'a [PathBuf],
}

/// The file a call touches, if it is a file tool: absolute, but not normalised (`a/../b`
/// means something else when `a` is a symlink; the matchers resolve it as the kernel does).
pub fn call_path(call: &Call<'_>) -> Option<PathBuf> {
    let is_file_tool = EDIT_TOOLS.contains(&call.tool) || READ_TOOLS.contains(&call.tool);
    if !is_file_tool {
        return None;
    }
    let given = ["file_path", "notebook_path", "path"]
        .iter()
        .find_map(|k| call.input[*k].as_str())
        .unwrap_or(".");
    let p = Path::new(given);
    Some(if p.is_absolute() {
        p.to_owned()
    } else {
        call.cwd.join(p)
    })
}

/// Whether `path` is inside one of `roots` both by its name and where it really is (for a file
/// not there yet, its longest existing ancestor resolved).
fn inside(path: &Path, roots: &[PathBuf]) -> bool {
    let lexical = rules::normalize(path);
    let real = rules::real_path(path);
    roots.iter().any(|r| {
        let root = rules::normalize(r);
        let real_root = r.canonicalize().unwrap_or_else(|_| root.clone());
        lexical.starts_with(&root)
            && real
                .as_ref()
                .is_none_or(|p| p.starts_with(&real_root) || p.starts_with(&root))
    })
}

/// Names that, anywhere in a path, make it a file that changes what runs: git's config and
/// hooks, the project's settings, hooks and MCP servers, editors' tasks, direnv. Neither
/// acceptEdits nor bypassPermissions writes them unasked (an allow rule that names them still
/// does); `.claude/commands` and `agents` are exempt, as in Claude Code — not `skills`, whose
/// `allowed-tools` allow commands without asking.
const RUNS_THINGS: &[&str] = &[
    ".git",
    ".gitmodules",
    ".claude",
    ".mcp.json",
    ".envrc",
    ".vscode",
    ".idea",
    ".husky",
];

/// Whether writing `path` could change what runs (by its name or where it really is).
fn changes_what_runs(path: &Path) -> bool {
    let named = |p: &Path| {
        let parts: Vec<&std::ffi::OsStr> = p.components().map(|c| c.as_os_str()).collect();
        parts.iter().enumerate().any(|(i, c)| {
            RUNS_THINGS.iter().any(|n| c == n)
                // The project's commands and agents are prompts, written as work.
                && !(*c == ".claude"
                    && parts
                        .get(i + 1)
                        .is_some_and(|d| ["commands", "agents"].iter().any(|e| d == e)))
        })
    };
    named(&rules::normalize(path)) || rules::real_path(path).is_some_and(|p| named(&p))
}

/// Which of `rules` match the call (for Bash: per simple command). Deny and ask rules match a
/// command as written and as bash reads it (`r''m` is `rm`), through env assignments and
/// wrappers (`FOO=1 sudo rm` is `rm`), and a path by any of its names (through symlinks too);
/// allow rules ([`allowing`]) are stricter.
fn matching<'r>(rules: &'r [Rule], call: &Call<'_>) -> Vec<&'r Rule> {
    rules
        .iter()
        .filter(|r| r.covers(call.tool))
        .filter(|r| match call.tool {
            "Bash" => {
                let cmd = call.input["command"].as_str().unwrap_or("");
                split_command(cmd).iter().any(|part| {
                    let plain = shell::dequoted(part);
                    r.matches_command(part)
                        || shell::unwrapped(part).iter().any(|c| r.matches_command(c))
                        || shell::unwrapped(&plain)
                            .iter()
                            .any(|c| r.matches_command(c))
                })
            }
            "WebFetch" => r.matches_url(call.input["url"].as_str().unwrap_or("")),
            _ => match call_path(call) {
                Some(p) => r.matches_path(&p),
                None => r.matches_other(call.input),
            },
        })
        .collect()
}

/// Whether an allow rule covers a call of a tool other than Bash: a path must match by its
/// name as given and by the file it really is (a symlink inside an allowed directory that
/// points outside it is not allowed).
/// The rules behind a decision on `call`, for the record: the deny rules that match it when
/// it was denied, the allow rules that match it (for a Bash command, any of its parts) when
/// it was allowed.
pub fn deciding_rules<'r>(rules: &'r RuleSet, call: &Call<'_>, allowed: bool) -> Vec<&'r Rule> {
    if allowed {
        matching(&rules.allow, call)
    } else {
        matching(&rules.deny, call)
    }
}

fn allowing(rules: &[Rule], call: &Call<'_>) -> bool {
    let path = call_path(call);
    // A file that changes what runs needs a rule that names it (`Edit(./.git/**)`), not one
    // for a directory it happens to be in.
    let runs_things =
        EDIT_TOOLS.contains(&call.tool) && path.as_deref().is_some_and(changes_what_runs);
    rules
        .iter()
        .filter(|r| r.covers(call.tool))
        .any(|r| match call.tool {
            "WebFetch" => r.matches_url(call.input["url"].as_str().unwrap_or("")),
            _ => match &path {
                Some(p) => {
                    r.covers_path(p)
                        && (!runs_things || RUNS_THINGS.iter().any(|n| r.text.contains(n)))
                }
                None => r.matches_other(call.input),
            },
        })
}

/// Whether an allow rule covers one simple command. A command that writes a file outside the
/// working directories — by a redirection or an option such as `--output` — needs a rule for
/// exactly that command: a prefix rule such as `Bash(git diff:*)` lets through neither
/// `git diff > ~/.bashrc` nor `git diff --output=../outside/x`.
fn part_allowed(rules: &[Rule], part: &str, cwd: &Path, roots: &[PathBuf]) -> bool {
    let mut targets = shell::output_targets(part);
    targets.extend(shell::option_targets(part));
    let writes_outside = targets.iter().any(|target| {
        let p = Path::new(target);
        target != "/dev/null"
            && (target.is_empty()
                || target.starts_with('~')
                || target.contains('$')
                || !inside(&cwd.join(p), roots))
    });
    rules.iter().any(|r| {
        r.covers("Bash")
            && r.matches_command(part)
            && (!writes_outside || matches!(&r.spec, rules::Specifier::Exact(_)))
    })
}

/// Whether a simple command only reads inside the working directories. Where Read deny rules
/// exist, a command that reads files it does not name (`grep -r`, `rg`, a glob) is not taken
/// as only reading: it could read a denied file.
fn part_reads(part: &str, cwd: &Path, roots: &[PathBuf], fenced: bool) -> bool {
    if fenced && shell::reads_unnamed_files(part) {
        return false;
    }
    // Every argument that may name a file must be inside the roots, by its name and where it
    // really is (a symlink in the project pointing out is outside); `~` never is.
    shell::is_read_only(part, &|arg| {
        !arg.starts_with('~') && inside(&cwd.join(arg), roots)
    })
}

/// The working directories a call may touch without asking.
fn roots_of(rules: &RuleSet, call: &Call<'_>) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = call.roots.to_vec();
    roots.extend(rules.additional_dirs.iter().cloned());
    roots
}

/// The deny rules that keep files from being read (`Read(…)`, `Grep(…)`, …, with paths).
fn read_denials(rules: &RuleSet) -> impl Iterator<Item = &Rule> {
    rules
        .deny
        .iter()
        .filter(|r| r.covers("Read") && matches!(r.spec, rules::Specifier::Paths(..)))
}

/// What the search tools' walks must skip: the paths the Read deny rules name (`None` when
/// there are none).
pub fn read_fence(rules: &RuleSet) -> Option<crate::tools::walk::Fence> {
    let denials: Vec<Rule> = read_denials(rules).cloned().collect();
    (!denials.is_empty())
        .then(|| crate::tools::walk::Fence::new(move |p| denials.iter().any(|r| r.matches_path(p))))
}

/// The files and directories the Read deny rules name outright (`./.env`, `./secrets/**`):
/// the OS sandbox hides them from Bash. A rule that matches by name anywhere (`**/.env`) is
/// left to the permission check.
pub fn read_denied_paths(rules: &RuleSet) -> Vec<PathBuf> {
    read_denials(rules).filter_map(rules::named_path).collect()
}

/// The Read deny rule a Bash command's file arguments run into (`cat .env` under
/// `Read(./.env)`), if any.
fn denied_argument<'r>(rules: &'r RuleSet, parts: &[String], cwd: &Path) -> Option<&'r Rule> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let args: Vec<PathBuf> = parts
        .iter()
        .flat_map(|part| shell::file_args(part))
        .map(|a| match (a.strip_prefix("~/"), &home) {
            (Some(rest), Some(home)) => home.join(rest),
            _ => cwd.join(a),
        })
        .collect();
    read_denials(rules).find(|r| args.iter().any(|a| r.matches_path(a)))
}

/// What a Bash call gets before any rule or mode could allow it: denied when a file argument
/// is one a Read deny rule names; asked about (refused where nobody is asked) when the check
/// cannot see what would run — a walk, a glob or an expanded file name where Read deny rules
/// exist, a program that is an expansion or runs another command (`eval`, `xargs`, `sh -c`,
/// `find -exec`) where Bash deny rules exist, a command the splitter does not understand where
/// either exists — or when the call asks to leave the OS sandbox.
fn bash_gate(
    mode: PermissionMode,
    rules: &RuleSet,
    call: &Call<'_>,
    scan: &shell::Scan,
) -> Option<Decision> {
    let command = call.input["command"].as_str().unwrap_or("");
    let (parts, understood) = (&scan.parts, scan.understood);
    if let Some(rule) = denied_argument(rules, parts, call.cwd) {
        return Some(Decision::Deny(format!(
            "denied by the permission rule {}",
            rule.text
        )));
    }
    let unseen = read_denials(rules)
        .next()
        .filter(|_| {
            !understood
                || parts.iter().any(|p| {
                    // A walk, a glob, or a file named through an expansion (`.e${U}nv`).
                    shell::reads_unnamed_files(p)
                        || shell::file_args(p).iter().any(|a| a.contains(['$', '`']))
                })
        })
        .map(|rule| {
            format!(
                "this command could read files the permission rule {} denies (a recursive search, a glob, \
                 or shell syntax the check does not follow); name the files, or use the Grep and Glob \
                 tools, which skip denied files",
                rule.text
            )
        })
        .or_else(|| {
            rules
                .deny
                .iter()
                .find(|r| r.covers("Bash"))
                .filter(|_| {
                    !understood
                        || shell::program_is_expansion(command)
                        || parts.iter().any(|p| shell::runs_another(p))
                })
                .map(|rule| {
                    format!(
                        "what this command runs cannot be checked against the permission rule {} \
                         (an expansion, a command run by another such as eval, xargs, sh -c or find -exec, \
                         or shell syntax the check does not follow); write it plainly",
                        rule.text
                    )
                })
        })
        .or_else(|| {
            (rules.sandbox_on && call.input["dangerouslyDisableSandbox"] == true).then(|| {
                "the call asks to run outside the sandbox, which only the user can allow".to_owned()
            })
        });
    unseen.map(|why| match mode {
        PermissionMode::DontAsk => Decision::Deny(why),
        PermissionMode::BypassPermissions if call.input["dangerouslyDisableSandbox"] != true => {
            Decision::Deny(why)
        }
        _ => Decision::Ask,
    })
}

/// The decision for `call` under `mode` and `rules`.
pub fn decide(mode: PermissionMode, rules: &RuleSet, call: &Call<'_>) -> Decision {
    if let Some(rule) = matching(&rules.deny, call).first() {
        return Decision::Deny(format!("denied by the permission rule {}", rule.text));
    }
    let command = call.input["command"].as_str().unwrap_or("");
    // A Bash command is split (and judged understood or not) once, for every check below.
    let scan = if call.tool == "Bash" {
        let scan = shell::scan(command);
        if let Some(decision) = bash_gate(mode, rules, call, &scan) {
            return decision;
        }
        scan
    } else {
        shell::Scan {
            parts: Vec::new(),
            understood: true,
        }
    };
    let (parts, understood) = (&scan.parts, scan.understood);
    let roots = roots_of(rules, call);
    // Which parts only read (checked once: it looks at the filesystem for paths). A command
    // the splitter does not understand never only reads.
    let fenced = read_denials(rules).next().is_some();
    let reads: Vec<bool> = parts
        .iter()
        .map(|p| understood && part_reads(p, call.cwd, &roots, fenced))
        .collect();
    // A Bash call whose every part only reads is a read-only call.
    let bash_reads = !parts.is_empty() && reads.iter().all(|r| *r);
    if mode == PermissionMode::Plan && !call.read_only && !bash_reads {
        return Decision::Deny(format!(
            "the session is in plan mode: {} changes things and is not run. Finish the plan and present it; \
             the user will switch modes to carry it out",
            call.tool
        ));
    }
    if rules.unreadable {
        return if mode == PermissionMode::DontAsk {
            Decision::Deny(
                "a settings file's permission rules could not be read, and the session does not ask (dontAsk mode)"
                    .into(),
            )
        } else {
            Decision::Ask
        };
    }
    if mode != PermissionMode::BypassPermissions && !matching(&rules.ask, call).is_empty() {
        return Decision::Ask;
    }
    if mode == PermissionMode::BypassPermissions {
        // As in Claude Code: even here, writing what changes what runs asks.
        if EDIT_TOOLS.contains(&call.tool) && call_path(call).is_some_and(|p| changes_what_runs(&p))
        {
            return Decision::Ask;
        }
        return Decision::Allow;
    }
    // The sandbox holds it (never a call that leaves it: `sandboxed_bash` is false for those).
    if call.tool == "Bash" && rules.sandboxed_bash {
        return Decision::Allow;
    }
    // Every part of a compound command must be allowed: by a rule, or because it only reads.
    let allowed = match call.tool {
        // Not understood: only a rule for exactly this command allows it.
        "Bash" if !understood => rules.allow.iter().any(|r| {
            r.covers("Bash") && matches!(&r.spec, rules::Specifier::Exact(e) if e == command.trim())
        }),
        // A rule for exactly this command (what is offered for a loop) allows it whole.
        "Bash" => {
            rules.allow.iter().any(|r| {
                r.covers("Bash")
                    && matches!(&r.spec, rules::Specifier::Exact(e) if e == command.trim())
            }) || (!parts.is_empty()
                && parts
                    .iter()
                    .zip(&reads)
                    .all(|(p, reads)| *reads || part_allowed(&rules.allow, p, call.cwd, &roots)))
        }
        _ => allowing(&rules.allow, call),
    };
    if allowed {
        return Decision::Allow;
    }
    let path = call_path(call);
    let in_workspace = path.as_ref().is_none_or(|p| inside(p, &roots));
    // An MCP server's own read-only hint is not trusted to skip the question.
    if call.read_only && call.tool != "WebFetch" && !call.tool.starts_with("mcp__") && in_workspace
    {
        return Decision::Allow;
    }
    if mode == PermissionMode::AcceptEdits
        && EDIT_TOOLS.contains(&call.tool)
        && in_workspace
        && !path.as_deref().is_some_and(changes_what_runs)
    {
        return Decision::Allow;
    }
    if mode == PermissionMode::DontAsk {
        return Decision::Deny(format!(
            "{} is not pre-allowed and the session does not ask (dontAsk mode)",
            call.tool
        ));
    }
    Decision::Ask
}

/// The rule for one simple command: its program (and subcommand) as a prefix, or the exact
/// command when it redirects output (a prefix would allow writing anywhere).
fn bash_rule(part: &str) -> String {
    if part.contains('>') || !shell::option_targets(part).is_empty() {
        return format!("Bash({part})");
    }
    let words: Vec<&str> = part.split_whitespace().take(2).collect();
    let prefix = if words.len() == 2 && !words[1].starts_with('-') && !words[1].contains('/') {
        words.join(" ")
    } else {
        words.first().copied().unwrap_or("").to_owned()
    };
    format!("Bash({prefix}:*)")
}

/// Words that open or close a compound command (a loop, a condition, a group): a part that
/// starts with one is shell syntax, not a command a rule could name.
const SHELL_KEYWORDS: [&str; 17] = [
    "for", "while", "until", "select", "if", "then", "elif", "else", "fi", "do", "done", "case",
    "esac", "function", "{", "}", "!",
];

/// Whether `parts` are a loop, a condition or a function rather than simple commands: their
/// commands may run many times or not at all, so what runs is decided only as it runs.
fn compound_syntax(parts: &[String]) -> bool {
    parts.iter().any(|part| {
        part.split_whitespace()
            .next()
            .is_some_and(|first| SHELL_KEYWORDS.contains(&first) || first.ends_with("()"))
    })
}

/// The rules an `allow_session` / `allow_always` answer adds for this call: for a compound
/// Bash command, one for each part that neither a rule allows nor only reads, so the same
/// command runs without asking next time.
pub fn suggest_rules(call: &Call<'_>, rules: &RuleSet) -> Vec<String> {
    if call.tool != "Bash" {
        return vec![suggest_rule(call)];
    }
    let roots = roots_of(rules, call);
    let cmd = call.input["command"].as_str().unwrap_or("");
    let scan = shell::scan(cmd);
    let expansion = shell::program_is_expansion(cmd);
    if !scan.understood || expansion || compound_syntax(&scan.parts) {
        // Its parts are not the commands it will run: only exactly this command can be
        // allowed, and not even that when a `*` would make the rule a pattern, or when a
        // variable or a substitution names the program (the rule would allow whatever it
        // names next time).
        if cmd.contains('*') || expansion {
            return Vec::new();
        }
        return vec![format!("Bash({})", cmd.trim())];
    }
    let fenced = read_denials(rules).next().is_some();
    let mut out: Vec<String> = Vec::new();
    for part in scan.parts {
        if part_allowed(&rules.allow, &part, call.cwd, &roots)
            || part_reads(&part, call.cwd, &roots, fenced)
        {
            continue;
        }
        let rule = bash_rule(&part);
        if !out.contains(&rule) {
            out.push(rule);
        }
    }
    if out.is_empty() {
        out.push(bash_rule(cmd.trim()));
    }
    out
}

/// The rule an `allow_session` / `allow_always` answer adds for this call (for Bash: its first
/// part; see [`suggest_rules`] for every part).
pub fn suggest_rule(call: &Call<'_>) -> String {
    match call.tool {
        "Bash" => {
            let cmd = call.input["command"].as_str().unwrap_or("");
            bash_rule(&split_command(cmd).into_iter().next().unwrap_or_default())
        }
        "WebFetch" => match host_of(call.input["url"].as_str().unwrap_or("")) {
            Some(h) => format!("WebFetch(domain:{h})"),
            None => "WebFetch".into(),
        },
        t if EDIT_TOOLS.contains(&t) => {
            match call_path(call).and_then(|p| rules::normalize(&p).parent().map(Path::to_owned)) {
                Some(dir) => format!("Edit(/{}/**)", dir.display()),
                None => "Edit".into(),
            }
        }
        t => t.to_owned(),
    }
}

/// `sha256:` and the hex digest of `input`'s JSON with object keys sorted, so one input has
/// one hash however its keys were ordered.
pub fn input_hash(input: &Value) -> String {
    fn canonical(v: &Value, out: &mut String) {
        match v {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String((*k).clone()).to_string());
                    out.push(':');
                    canonical(&map[*k], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    canonical(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut text = String::new();
    canonical(input, &mut text);
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

#[cfg(test)]
mod escapes;
#[cfg(test)]
mod tests;
