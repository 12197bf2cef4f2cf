//! `Skill {skill, args?}` (Claude Code's): loads one of the session's skills (`skills.rs`) into
//! the conversation — its instructions with the arguments in place, its directory and the files
//! beside it — for the model to follow. Its description lists the skills the model may load.

use super::skills::{self, Skills};
use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use serde_json::{Value, json};

/// Loads the skills it knows.
pub struct Skill {
    found: Skills,
    description: String,
}

impl Skill {
    /// A Skill tool offering these skills (those the model may load are listed in its
    /// description).
    pub fn new(found: Skills) -> Self {
        let description = format!(
            "Loads a skill: instructions for a kind of task, with the scripts and references \
             beside them. When the request matches a skill's description, call this with the \
             skill's name before doing the task yourself, then follow the instructions it \
             returns; args passes the request's details. A skill already loaded in this \
             conversation need not be loaded again.\n\nAvailable skills:\n{}",
            skills::describe(found.for_model())
        );
        Self { found, description }
    }

    /// Whether it offers the model any skill.
    pub fn offers_any(&self) -> bool {
        self.found.for_model().next().is_some()
    }
}

impl Tool for Skill {
    fn name(&self) -> &str {
        "Skill"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "skill": {"type": "string", "minLength": 1, "description": "The skill's name (one of the available skills)"},
                "args": {"type": "string", "description": "Arguments for the skill, as the user would type them after /name"}
            },
            "required": ["skill"],
            "additionalProperties": false
        })
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, input: Value, _ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let name = input["skill"].as_str().unwrap_or_default();
            let args = input["args"].as_str().unwrap_or_default();
            match self.found.get(name).filter(|s| s.model_invocable) {
                Some(skill) => {
                    let mut text = format!("Skill {} loaded.\n\n", skill.name);
                    text.push_str(&skill.render(args));
                    ToolOutput::text(text)
                }
                None => {
                    let known: Vec<&str> =
                        self.found.for_model().map(|s| s.name.as_str()).collect();
                    ToolOutput::error(if known.is_empty() {
                        format!("there is no skill {name:?}; this session has no skills")
                    } else {
                        format!(
                            "there is no skill {name:?}; the skills are {}",
                            known.join(", ")
                        )
                    })
                }
            }
        })
    }
}
