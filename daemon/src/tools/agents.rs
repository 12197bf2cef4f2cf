//! The sub-agent types the Task (Agent) tool offers: Claude Code's built-in ones
//! (`general-purpose`, `Explore`, `Plan`), the user's (`~/.claude/agents/*.md`), the project's
//! (`<cwd>/.claude/agents/*.md`) and those given with a turn (`--agents` JSON), later ones
//! replacing earlier ones of the same name. A definition file is Markdown with YAML
//! frontmatter — `name`, `description`, `tools` (comma-separated or a list; absent: all),
//! `model` (an alias, an id, or `inherit`) — and its body is the agent's system prompt.

use crate::context::frontmatter;
use serde_json::Value;
use std::path::Path;

/// One sub-agent type.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentDef {
    /// What `subagent_type` names it by.
    pub name: String,
    /// When to use it (shown to the model in the tool's description).
    pub description: String,
    /// The tools it may use (`None`: all of the parent's but Task).
    pub tools: Option<Vec<String>>,
    /// Its model (`None`: the parent's).
    pub model: Option<String>,
    /// Its system prompt (`None`: the parent's).
    pub prompt: Option<String>,
    /// Where it was defined: `built-in`, `user`, `project` or `--agents`.
    pub source: &'static str,
}

/// Tools a read-only agent gets.
const READ_ONLY: &[&str] = &[
    "Read",
    "Glob",
    "Grep",
    "LS",
    "WebFetch",
    "Bash",
    "BashOutput",
];

/// Claude Code's built-in types.
fn builtin() -> Vec<AgentDef> {
    let def =
        |name: &str, description: &str, tools: Option<&[&str]>, prompt: Option<&str>| AgentDef {
            name: name.to_owned(),
            description: description.to_owned(),
            tools: tools.map(|t| t.iter().map(|s| (*s).to_owned()).collect()),
            model: None,
            prompt: prompt.map(str::to_owned),
            source: "built-in",
        };
    vec![
        def(
            "general-purpose",
            "For multi-step research and tasks: searching the code for something you are not sure \
             you will find in the first few tries, or any self-contained job. Has every tool.",
            None,
            None,
        ),
        def(
            "Explore",
            "Fast, read-only exploration of a code base: find files by pattern, search code for \
             keywords, answer questions about how something works. Say how thorough to be.",
            Some(READ_ONLY),
            Some(
                "You explore a code base to answer a question, and change nothing: no edits, no \
                 writes, no commands that modify files, install packages or touch git state. Search \
                 broadly first (Glob, Grep), then read what matters. Answer with what you found: \
                 the relevant files (absolute paths), the key code, and how it fits together.",
            ),
        ),
        def(
            "Plan",
            "Read-only research to design an implementation plan: investigates the code and \
             returns a step-by-step plan with the files to change.",
            Some(READ_ONLY),
            Some(
                "You design an implementation plan and change nothing: no edits, no writes, no \
                 commands that modify files or git state. Read the relevant code, then answer with \
                 a concrete step-by-step plan: the files to change (absolute paths), what to change \
                 in each, the order, and how to verify the result.",
            ),
        ),
    ]
}

/// The agent types found, and what was wrong with the files that define them.
#[derive(Debug, Clone, Default)]
pub struct Found {
    /// Every type, built-in ones first, each name once.
    pub agents: Vec<AgentDef>,
    /// `path:line: problem` for each file or entry that could not be used.
    pub problems: Vec<String>,
}

impl Found {
    /// Only the built-in types.
    pub fn builtin() -> Self {
        let mut found = Self::default();
        for def in builtin() {
            found.add(def);
        }
        found
    }

    fn add(&mut self, def: AgentDef) {
        match self.agents.iter_mut().find(|a| a.name == def.name) {
            Some(slot) => *slot = def,
            None => self.agents.push(def),
        }
    }

    /// The type called `name` (exact, else ignoring case: `explore` finds `Explore`).
    pub fn get(&self, name: &str) -> Option<&AgentDef> {
        self.agents.iter().find(|a| a.name == name).or_else(|| {
            self.agents
                .iter()
                .find(|a| a.name.eq_ignore_ascii_case(name))
        })
    }

    /// Adds the types of a turn's `--agents` JSON: `{"name": {"description", "prompt",
    /// "tools"?, "model"?}}`.
    pub fn with_flag(mut self, agents: Option<&Value>) -> Self {
        let Some(agents) = agents else { return self };
        let Some(map) = agents.as_object() else {
            self.problems
                .push("--agents: expected an object of agents by name".into());
            return self;
        };
        for (name, v) in map {
            let text = |k: &str| v[k].as_str().map(str::trim).filter(|s| !s.is_empty());
            let (Some(description), Some(prompt)) = (text("description"), text("prompt")) else {
                self.problems.push(format!(
                    "--agents: {name}: needs \"description\" and \"prompt\""
                ));
                continue;
            };
            let tools = match &v["tools"] {
                Value::Array(a) => Some(
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect(),
                ),
                Value::String(s) => Some(s.split(',').map(|t| t.trim().to_owned()).collect()),
                _ => None,
            };
            self.add(AgentDef {
                name: name.clone(),
                description: description.to_owned(),
                tools,
                model: model_of(text("model")),
                prompt: Some(prompt.to_owned()),
                source: "--agents",
            });
        }
        self
    }
}

/// `inherit` (or nothing) means the parent's model.
fn model_of(model: Option<&str>) -> Option<String> {
    model
        .filter(|m| !m.eq_ignore_ascii_case("inherit"))
        .map(str::to_owned)
}

/// The built-in types, then the user's, then the project's.
pub fn load(cwd: &Path, home: Option<&Path>) -> Found {
    let mut found = Found::builtin();
    let dirs = [
        (home.map(|h| h.join(".claude/agents")), "user"),
        (Some(cwd.join(".claude/agents")), "project"),
    ];
    for (dir, source) in dirs {
        let Some(dir) = dir else { continue };
        for path in frontmatter::markdown_files(&dir) {
            match read(&path, source) {
                Ok(def) => found.add(def),
                Err(problem) => found.problems.push(format!("{}:{problem}", path.display())),
            }
        }
    }
    found
}

/// One definition file.
fn read(path: &Path, source: &'static str) -> Result<AgentDef, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!(" cannot read it: {e}"))?;
    let (front, body) =
        frontmatter::split(&text).map_err(|e| format!("{}: {}", e.line, e.message))?;
    let name = front
        .text("name")
        .ok_or("1: no `name` in its frontmatter")?;
    if name.contains(char::is_whitespace) {
        return Err(format!("1: the name {name:?} has spaces"));
    }
    let description = front
        .text("description")
        .ok_or("1: no `description` in its frontmatter")?;
    let prompt = body.trim();
    Ok(AgentDef {
        name,
        description,
        tools: front.list("tools").filter(|t| !t.is_empty()),
        model: model_of(front.text("model").as_deref()),
        prompt: (!prompt.is_empty()).then(|| prompt.to_owned()),
        source,
    })
}

/// The Task tool's list of types, for its description.
pub fn describe(agents: &[AgentDef]) -> String {
    agents
        .iter()
        .map(|a| {
            let tools = match &a.tools {
                Some(t) => t.join(", "),
                None => "all tools".into(),
            };
            format!("- {}: {} (Tools: {tools})", a.name, a.description)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_agents_replace_user_ones_and_bad_files_are_reported() {
        let home = tempfile::tempdir().expect("tempdir");
        let cwd = tempfile::tempdir().expect("tempdir");
        let user = home.path().join(".claude/agents");
        let project = cwd.path().join(".claude/agents");
        std::fs::create_dir_all(&user).expect("mkdir");
        std::fs::create_dir_all(&project).expect("mkdir");
        std::fs::write(
            user.join("reviewer.md"),
            "---\nname: reviewer\ndescription: user's\n---\nUser prompt.",
        )
        .expect("write");
        std::fs::write(
            project.join("reviewer.md"),
            "---\nname: reviewer\ndescription: Reviews diffs\ntools: Read, Grep\nmodel: haiku\n---\nYou review.\n",
        )
        .expect("write");
        std::fs::write(
            project.join("broken.md"),
            "---\nname: broken\ndescription: [oops\n---\n",
        )
        .expect("write");
        std::fs::write(
            project.join("nameless.md"),
            "---\ndescription: x\n---\nbody",
        )
        .expect("write");
        let found = load(cwd.path(), Some(home.path()));
        let reviewer = found.get("reviewer").expect("reviewer");
        assert_eq!(reviewer.source, "project");
        assert_eq!(reviewer.prompt.as_deref(), Some("You review."));
        assert_eq!(reviewer.model.as_deref(), Some("haiku"));
        assert_eq!(
            reviewer.tools,
            Some(vec!["Read".to_owned(), "Grep".to_owned()])
        );
        assert!(found.get("explore").is_some(), "built-ins by any case");
        assert_eq!(found.problems.len(), 2, "{:?}", found.problems);
        assert!(found.problems.iter().any(|p| p.contains("broken.md:")));
        assert!(found.problems.iter().any(|p| p.contains("no `name`")));
        let flagged = found.with_flag(Some(&serde_json::json!({
            "reviewer": {"description": "from the flag", "prompt": "Flag prompt.", "model": "inherit"},
            "bad": {"prompt": "no description"}
        })));
        let reviewer = flagged.get("reviewer").expect("reviewer");
        assert_eq!(reviewer.source, "--agents");
        assert_eq!(reviewer.model, None);
        assert!(flagged.problems.iter().any(|p| p.contains("bad")));
    }
}
