//! Permission rules in Claude Code's syntax: `Tool`, `Tool(specifier)`. Bash specifiers are a
//! prefix (`npm run test:*`), a glob (`git diff *`) or an exact command; file-tool specifiers are
//! gitignore-style paths (`./.env` and `src/**` in the session's directory, `//abs`, `~/home`,
//! `/relative-to-the-settings`);
//! `WebFetch(domain:example.com)` matches the host and its subdomains.
//!
//! A rule may name a tool by any of its names (`Agent` is `Task`: `tools/names.rs`).
//!
//! `Edit(…)` rules cover every tool that changes files (Edit, MultiEdit, Write, NotebookEdit);
//! `Read(…)` rules cover every tool that reads them (Read, Glob, Grep, LS).

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Tools whose calls `Edit(…)` rules govern.
pub const EDIT_TOOLS: &[&str] = &["Edit", "MultiEdit", "Write", "NotebookEdit"];
/// Tools whose calls `Read(…)` rules govern.
pub const READ_TOOLS: &[&str] = &["Read", "Glob", "Grep", "LS"];

/// What a rule's parentheses say.
#[derive(Debug, Clone)]
pub enum Specifier {
    /// No parentheses: every call of the tool.
    Any,
    /// `cmd:*`: the command or anything starting with `cmd `.
    Prefix(String),
    /// A glob over the whole command (`*` matches anything).
    CommandGlob(globset::GlobMatcher),
    /// One exact command.
    Exact(String),
    /// Paths (absolute globs), and the pattern they were built from (absolute, normalised).
    Paths(GlobSet, String),
    /// `domain:host`.
    Domain(String),
    /// Anything else: matched against the call's first string input, exactly.
    Other(String),
}

/// One rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// As written.
    pub text: String,
    /// The tool it names.
    pub tool: String,
    /// Its specifier.
    pub spec: Specifier,
    /// Where it was written (a settings file, `session`, …); empty until added to a set.
    pub source: String,
    /// The line of `source` it is written on, when it is a file.
    pub line: Option<usize>,
}

/// Where `path` really is, as the kernel would resolve it: its longest existing prefix resolved
/// through symlinks, then the rest applied (so `link/../x`, with `link` pointing elsewhere, is
/// beside the link's target, not beside the link); `None` when nothing resolves.
pub fn real_path(path: &Path) -> Option<PathBuf> {
    let parts: Vec<std::path::Component<'_>> = path.components().collect();
    let resolve = |n: usize| parts[..n].iter().collect::<PathBuf>().canonicalize().ok();
    // A prefix resolves only if every shorter one does, so the longest one that does is found
    // by bisection: a few system calls, however long the path.
    let (mut lo, mut hi) = (0, parts.len());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if resolve(mid).is_some() {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let real = resolve(lo)?;
    Some(normalize(&parts[lo..].iter().fold(real, |p, c| p.join(c))))
}

/// Lexically resolves `.` and `..`.
pub fn normalize(path: &Path) -> PathBuf {
    crate::tools::normalize(path)
}

impl Rule {
    /// Where it is written: `file:line`, or the source alone (`session`, a flag).
    pub fn origin(&self) -> String {
        match self.line {
            Some(line) => format!("{}:{line}", self.source),
            None => self.source.clone(),
        }
    }

    /// Parses `text`; relative path specifiers resolve against `base`, `~/` against `home`.
    pub fn parse(text: &str, base: &Path, home: Option<&Path>) -> Result<Self, String> {
        Self::parse_in(text, base, base, home)
    }

    /// Parses `text` as Claude Code reads a settings file's rules: `/path` relative to the
    /// settings file's `base`, `path` and `./path` relative to the session's `cwd`, `~/path` to
    /// `home`, `//path` absolute.
    pub fn parse_in(
        text: &str,
        base: &Path,
        cwd: &Path,
        home: Option<&Path>,
    ) -> Result<Self, String> {
        let t = text.trim();
        let (tool, spec) = match t.find('(') {
            None => (t, None),
            Some(open) => {
                if !t.ends_with(')') {
                    return Err("missing the closing parenthesis".into());
                }
                (&t[..open], Some(&t[open + 1..t.len() - 1]))
            }
        };
        // `mcp__server__*` names every tool of a server, as `mcp__server` does.
        let tool = match tool.strip_suffix("__*") {
            Some(server) if server.starts_with("mcp__") && spec.is_none() => server,
            _ => tool,
        };
        if tool.is_empty()
            || !tool
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!("{tool:?} is not a tool name"));
        }
        // A rule names a tool by any of its names (`Agent` is `Task`).
        let tool = crate::tools::names::canonical(tool);
        let spec = match spec.map(str::trim) {
            None => Specifier::Any,
            Some("") => {
                return Err(
                    "empty parentheses; write the tool name alone to match every call".into(),
                );
            }
            Some("*") => Specifier::Any,
            Some(s) if tool == "Bash" => {
                if let Some(prefix) = s.strip_suffix(":*") {
                    Specifier::Prefix(prefix.trim().to_owned())
                } else if s.contains('*') {
                    let g = GlobBuilder::new(s)
                        .literal_separator(false)
                        .build()
                        .map_err(|e| format!("invalid command pattern: {e}"))?;
                    Specifier::CommandGlob(g.compile_matcher())
                } else {
                    Specifier::Exact(s.to_owned())
                }
            }
            Some(s) if tool == "WebFetch" => match s.strip_prefix("domain:") {
                Some(d) if !d.trim().is_empty() => Specifier::Domain(d.trim().to_ascii_lowercase()),
                _ => return Err("WebFetch rules take domain:HOST".into()),
            },
            Some(s)
                if tool == "Edit"
                    || tool == "Read"
                    || EDIT_TOOLS.contains(&tool)
                    || READ_TOOLS.contains(&tool) =>
            {
                let (set, pattern) = path_globs(s, base, cwd, home)?;
                Specifier::Paths(set, pattern)
            }
            Some(s) => Specifier::Other(s.to_owned()),
        };
        Ok(Self {
            text: t.to_owned(),
            tool: tool.to_owned(),
            spec,
            source: String::new(),
            line: None,
        })
    }

    /// Whether the rule governs calls of `tool` (by any of its names).
    pub fn covers(&self, tool: &str) -> bool {
        let tool = crate::tools::names::canonical(tool);
        self.tool == tool
            // `mcp__server` covers each `mcp__server__<tool>`.
            || (self.tool.starts_with("mcp__")
                && !self.tool["mcp__".len()..].contains("__")
                && tool
                    .strip_prefix(self.tool.as_str())
                    .is_some_and(|rest| rest.starts_with("__")))
            || (self.tool == "Edit" && EDIT_TOOLS.contains(&tool))
            || (self.tool == "Read" && READ_TOOLS.contains(&tool))
    }

    /// Whether the rule matches one simple shell command.
    pub fn matches_command(&self, command: &str) -> bool {
        let command = command.trim();
        match &self.spec {
            Specifier::Any => true,
            Specifier::Prefix(p) => command == p || command.starts_with(&format!("{p} ")),
            Specifier::CommandGlob(g) => g.is_match(command),
            Specifier::Exact(e) => command == e,
            _ => false,
        }
    }

    /// Whether the rule matches a file path (absolute).
    pub fn matches_path(&self, path: &Path) -> bool {
        match &self.spec {
            Specifier::Any => true,
            Specifier::Paths(set, _) => {
                set.is_match(normalize(path))
                    || real_path(path).is_some_and(|real| set.is_match(real))
            }
            _ => false,
        }
    }

    /// Whether the rule covers a path by every name it has: as given and as the file it
    /// really is (for a file not yet there, its nearest existing directory resolved).
    pub fn covers_path(&self, path: &Path) -> bool {
        match &self.spec {
            Specifier::Any => true,
            Specifier::Paths(set, _) => {
                set.is_match(normalize(path))
                    && real_path(path).is_none_or(|real| set.is_match(real))
            }
            _ => false,
        }
    }

    /// Whether the rule matches a URL's host.
    pub fn matches_url(&self, url: &str) -> bool {
        match &self.spec {
            Specifier::Any => true,
            Specifier::Domain(d) => {
                host_of(url).is_some_and(|h| h == *d || h.ends_with(&format!(".{d}")))
            }
            _ => false,
        }
    }

    /// Whether the rule matches a call of another tool (by its first string input).
    pub fn matches_other(&self, input: &Value) -> bool {
        match &self.spec {
            Specifier::Any => true,
            Specifier::Other(s) => input
                .as_object()
                .and_then(|o| o.values().find_map(Value::as_str))
                .is_some_and(|v| v == s),
            _ => false,
        }
    }
}

/// The host of an http(s) URL, lowercased.
pub fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit('@').next()?;
    let host = if host.starts_with('[') {
        host.split(']').next().map(|h| format!("{h}]"))?
    } else {
        host.split(':').next()?.to_owned()
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// The file or directory a path rule names outright: its pattern up to the first glob, when
/// all that follows is `/**` or nothing (`./.env`, `./secrets/**`); `None` for a pattern that
/// matches by name anywhere (`**/.env`).
pub fn named_path(rule: &Rule) -> Option<PathBuf> {
    let Specifier::Paths(_, pattern) = &rule.spec else {
        return None;
    };
    let literal = pattern.strip_suffix("/**").unwrap_or(pattern);
    (!literal.contains(['*', '?', '[', '{'])).then(|| PathBuf::from(literal))
}

fn path_globs(
    spec: &str,
    base: &Path,
    cwd: &Path,
    home: Option<&Path>,
) -> Result<(GlobSet, String), String> {
    let absolute: String = if let Some(rest) = spec.strip_prefix("//") {
        format!("/{rest}")
    } else if let Some(rest) = spec.strip_prefix("~/") {
        let home = home.ok_or("~ is used but HOME is not set")?;
        format!("{}/{rest}", home.display())
    } else if let Some(rest) = spec.strip_prefix('/') {
        format!("{}/{rest}", base.display())
    } else if let Some(rest) = spec.strip_prefix("./") {
        format!("{}/{rest}", cwd.display())
    } else if spec.trim_end_matches('/').contains('/') {
        format!("{}/{spec}", cwd.display())
    } else {
        // gitignore: a bare name matches at any depth.
        format!("{}/**/{spec}", cwd.display())
    };
    let absolute = absolute.trim_end_matches('/').to_owned();
    let normalized = if absolute.contains('*') || absolute.contains('?') || absolute.contains('[') {
        absolute
    } else {
        normalize(Path::new(&absolute)).display().to_string()
    };
    let mut set = GlobSetBuilder::new();
    for pattern in [normalized.clone(), format!("{normalized}/**")] {
        let glob = GlobBuilder::new(&pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("invalid path pattern: {e}"))?;
        set.add(glob);
    }
    let set = set
        .build()
        .map_err(|e| format!("invalid path pattern: {e}"))?;
    Ok((set, normalized))
}
