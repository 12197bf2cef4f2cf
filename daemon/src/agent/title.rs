//! Session titles: a few words from the first prompt, written by the small fast model; when the
//! model cannot be asked, the prompt's first line, shortened.

use crate::llm::{AnthropicClient, Message, MessagesRequest, ModelCatalog, SystemBlock};
use tokio_util::sync::CancellationToken;

/// Longest title kept, in characters.
const MAX_TITLE_CHARS: usize = 60;
/// Most of the prompt shown to the model.
const MAX_PROMPT_CHARS: usize = 2000;

/// The instruction the title request starts with.
pub const TITLE_INSTRUCTION: &str = "Write a title for the coding session that begins with the request below: 3 to 7 words, sentence case, no quotes, no final period. Reply with the title only.";

/// The prompt's first non-empty line, cut at a word boundary to fit a title.
pub fn fallback(prompt: &str) -> String {
    let line = prompt
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("Untitled session");
    shorten(line)
}

fn shorten(text: &str) -> String {
    if text.chars().count() <= MAX_TITLE_CHARS {
        return text.to_owned();
    }
    let cut: String = text.chars().take(MAX_TITLE_CHARS - 1).collect();
    let at_word = match cut.rfind(char::is_whitespace) {
        Some(i) if i > MAX_TITLE_CHARS / 2 => &cut[..i],
        _ => cut.as_str(),
    };
    format!("{}…", at_word.trim_end())
}

/// Asks `model` for a title for `prompt`; any failure (no client, an API error, an empty or
/// odd answer) gives the [`fallback`] instead, with the reason.
pub async fn generate(
    llm: Result<&AnthropicClient, &str>,
    catalog: &ModelCatalog,
    model: &str,
    prompt: &str,
) -> Result<String, (String, String)> {
    let llm = llm.map_err(|e| (fallback(prompt), e.to_owned()))?;
    let shown: String = prompt.chars().take(MAX_PROMPT_CHARS).collect();
    let mut request = MessagesRequest::new(
        catalog.resolve(model),
        64,
        vec![Message::user_text(format!(
            "{TITLE_INSTRUCTION}\n\n<request>\n{shown}\n</request>"
        ))],
    );
    request.system = vec![SystemBlock::text(
        "You name coding sessions so that a list of them is easy to scan.",
    )];
    catalog.shape(&mut request, &crate::llm::RequestPolicy::internal());
    let answer = llm
        .stream(&request, &mut |_| {}, &CancellationToken::new())
        .await
        .map_err(|e| (fallback(prompt), e.to_string()))?;
    let text: String = answer
        .content()
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect();
    let title = text
        .lines()
        .map(|l| {
            l.trim()
                .trim_matches(|c| matches!(c, '"' | '\'' | '*' | '#'))
        })
        .find(|l| !l.is_empty())
        .map(|l| shorten(l.trim_end_matches('.')))
        .filter(|t| !t.is_empty());
    title.ok_or_else(|| (fallback(prompt), "the model gave no title".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fallback_is_the_first_line_cut_at_a_word() {
        assert_eq!(fallback("\n  fix the build \nmore"), "fix the build");
        let long = "please refactor the session actor so that commits are batched and flushed once per loop iteration";
        let t = fallback(long);
        assert!(
            t.ends_with('…') && t.chars().count() <= MAX_TITLE_CHARS,
            "{t}"
        );
        assert!(t.starts_with("please refactor the session actor"), "{t}");
        assert_eq!(fallback("   "), "Untitled session");
    }
}
