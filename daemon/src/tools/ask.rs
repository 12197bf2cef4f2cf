//! `AskUserQuestion {questions, answers?}`: questions for the user, with 2–4 options each.
//! The session asks them of its controllers like a permission request (durable, first answer
//! wins, every client sees it); the answer comes back as the call's `answers`, which Claude
//! Code's permission prompt fills in the same way. The tool itself only reports them.

use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use serde_json::{Value, json};

/// Asks the user.
pub struct AskUserQuestion;

impl Tool for AskUserQuestion {
    fn name(&self) -> &'static str {
        "AskUserQuestion"
    }

    fn description(&self) -> &'static str {
        "Asks the user one to four multiple-choice questions when a decision is theirs to make (a \
         preference, an ambiguous requirement, a choice between approaches) and waits for the \
         answers. Each question has a short header (at most 12 characters), 2-4 options with a \
         label and a description, and multiSelect when several options may be chosen. The user \
         may also answer in their own words. Do not use it to ask for permission to run tools."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "questions": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 4,
                    "items": {
                        "type": "object",
                        "properties": {
                            "question": {"type": "string", "minLength": 1},
                            "header": {"type": "string"},
                            "options": {
                                "type": "array",
                                "minItems": 2,
                                "maxItems": 4,
                                "items": {
                                    "type": "object",
                                    "properties": {
                                        "label": {"type": "string", "minLength": 1},
                                        "description": {"type": "string"},
                                        "preview": {"type": "string"}
                                    },
                                    "required": ["label"]
                                }
                            },
                            "multiSelect": {"type": "boolean"}
                        },
                        "required": ["question", "options"]
                    }
                },
                "answers": {
                    "type": "object",
                    "description": "Filled in by the user's client: question text → answer.",
                    "additionalProperties": {"type": "string"}
                }
            },
            "required": ["questions"]
        })
    }

    fn is_read_only(&self) -> bool {
        true
    }

    fn run<'a>(&'a self, input: Value, _ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move { report(&input) })
    }
}

/// The answers, in the order of the questions, as the model reads them.
fn report(input: &Value) -> ToolOutput {
    let Some(answers) = input["answers"].as_object().filter(|a| !a.is_empty()) else {
        return ToolOutput::error(
            "no one answered the questions (no controller attached, or a policy decided); ask \
             them in your reply instead",
        );
    };
    let mut lines = Vec::new();
    for q in input["questions"].as_array().into_iter().flatten() {
        let question = q["question"].as_str().unwrap_or_default();
        let answer = answers
            .get(question)
            .and_then(Value::as_str)
            .unwrap_or("(not answered)");
        lines.push(format!("\"{question}\" = \"{answer}\""));
    }
    ToolOutput::text(format!(
        "The user answered your questions:\n{}\nGo on with these answers in mind.",
        lines.join("\n")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn questions() -> Value {
        json!([
            {"question": "Which database?", "header": "Database", "options": [{"label": "Postgres"}, {"label": "SQLite"}]},
            {"question": "Add tests?", "header": "Tests", "options": [{"label": "Yes"}, {"label": "No"}]}
        ])
    }

    #[test]
    fn answers_are_reported_in_the_order_of_the_questions() {
        let out = report(&json!({
            "questions": questions(),
            "answers": {"Add tests?": "Yes", "Which database?": "SQLite"}
        }));
        assert!(!out.is_error);
        let text = out.content.as_str().expect("text");
        let db = text.find("\"Which database?\" = \"SQLite\"").expect("db");
        let tests = text.find("\"Add tests?\" = \"Yes\"").expect("tests");
        assert!(db < tests, "{text}");
    }

    #[test]
    fn no_answers_is_an_error_the_model_can_act_on() {
        let out = report(&json!({"questions": questions()}));
        assert!(out.is_error);
    }
}
