//! The `---` YAML frontmatter of Claude Code's Markdown files (custom commands, sub-agent
//! definitions), read with a YAML parser as Claude Code reads it: scalars as text, lists as
//! YAML sequences or comma-separated text. Errors carry the line in the file.

use yaml_rust2::{Yaml, YamlLoader};

/// The `*.md` files of `dir`, by name (none when it cannot be read): the definition and rule
/// files these blocks head.
pub fn markdown_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<std::path::PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files
}

/// A frontmatter block's fields.
#[derive(Debug, Default, Clone)]
pub struct Frontmatter {
    fields: Vec<(String, Yaml)>,
}

/// Why a frontmatter block cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct FrontmatterError {
    /// The line of the file (1-based).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Splits `text` into its frontmatter and body; a text without `---` on its first line has
/// empty frontmatter.
pub fn split(text: &str) -> Result<(Frontmatter, &str), FrontmatterError> {
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return Ok((Frontmatter::default(), text));
    };
    let Some(end) = rest
        .find("\n---")
        .or_else(|| rest.starts_with("---").then_some(0))
    else {
        return Err(FrontmatterError {
            line: 1,
            message: "the frontmatter has no closing ---".into(),
        });
    };
    let yaml = &rest[..end];
    let after = &rest[end..];
    let after = after.strip_prefix('\n').unwrap_or(after);
    let body = after
        .strip_prefix("---")
        .unwrap_or(after)
        .trim_start_matches(['\r', '\n']);
    let docs = YamlLoader::load_from_str(yaml).map_err(|e| FrontmatterError {
        // The YAML starts on the file's second line.
        line: e.marker().line() + 1,
        message: e.info().to_owned(),
    })?;
    let fields = match docs.into_iter().next() {
        None | Some(Yaml::Null) => Vec::new(),
        Some(Yaml::Hash(hash)) => hash
            .into_iter()
            .filter_map(|(k, v)| scalar(&k).map(|k| (k, v)))
            .collect(),
        Some(_) => {
            return Err(FrontmatterError {
                line: 2,
                message: "the frontmatter is not a set of `key: value` lines".into(),
            });
        }
    };
    Ok((Frontmatter { fields }, body))
}

/// [`split`], with a block that does not parse read as having no fields (its body is still the
/// text after it): for files where a broken field should not lose the rest.
pub fn split_lenient(text: &str) -> (Frontmatter, &str) {
    match split(text) {
        Ok(parts) => parts,
        Err(_) => {
            let body = text
                .strip_prefix("---")
                .and_then(|rest| rest.find("\n---").map(|end| &rest[end + 4..]))
                .map_or(text, |b| b.trim_start_matches(['\r', '\n']));
            (Frontmatter::default(), body)
        }
    }
}

/// A scalar as text (`true`, `3`, `text`); `None` for lists, maps and nulls.
fn scalar(v: &Yaml) -> Option<String> {
    match v {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

impl Frontmatter {
    fn get(&self, key: &str) -> Option<&Yaml> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// A field's text, trimmed; `None` when absent, empty or not a scalar.
    pub fn text(&self, key: &str) -> Option<String> {
        self.get(key)
            .and_then(scalar)
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    }

    /// A list field: a YAML sequence, or text split at commas (`tools: Read, Grep`).
    pub fn list(&self, key: &str) -> Option<Vec<String>> {
        let items: Vec<String> = match self.get(key)? {
            Yaml::Array(items) => items.iter().filter_map(scalar).collect(),
            other => scalar(other)?.split(',').map(str::to_owned).collect(),
        };
        Some(
            items
                .into_iter()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
        )
    }

    /// The keys present, in file order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.fields.iter().map(|(k, _)| k.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_lists_and_the_body() {
        let text = "---\nname: reviewer\ndescription: \"Reviews: diffs\"\ntools: Read, Grep\nmodel: haiku\n---\nYou review.\n";
        let (front, body) = split(text).expect("valid frontmatter");
        assert_eq!(front.text("name").as_deref(), Some("reviewer"));
        assert_eq!(front.text("description").as_deref(), Some("Reviews: diffs"));
        assert_eq!(
            front.list("tools"),
            Some(vec!["Read".into(), "Grep".into()])
        );
        assert_eq!(body, "You review.\n");
        let (front, _) =
            split("---\ntools:\n  - Read\n  - Bash(git diff:*)\n---\nx").expect("a list");
        assert_eq!(
            front.list("tools"),
            Some(vec!["Read".into(), "Bash(git diff:*)".into()])
        );
        let (front, body) = split("no frontmatter").expect("plain text");
        assert_eq!(front.text("name"), None);
        assert_eq!(body, "no frontmatter");
    }

    #[test]
    fn errors_name_the_line() {
        let err = split("---\nname: a\ndescription: [unclosed\n---\nbody").expect_err("bad YAML");
        assert!(err.line >= 3, "{err}");
        let err = split("---\nname: a\n").expect_err("unclosed");
        assert_eq!(err.line, 1);
    }
}
