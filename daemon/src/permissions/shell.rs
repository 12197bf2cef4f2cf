//! Splitting a shell command into the simple commands a rule is matched against: `&&`, `||`,
//! `;`, `|`, `&`, newlines, and the insides of `( … )`, `$( … )` and backquotes. Quotes are
//! respected; this is a splitter for permission checks, not a shell.

/// The simple commands of `command`, trimmed, in order.
pub fn split(command: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = command.chars().collect();
    let mut i = 0;
    let mut quote: Option<char> = None;
    let push = |current: &mut String, parts: &mut Vec<String>| {
        let t = current.trim();
        if !t.is_empty() {
            parts.push(t.to_owned());
        }
        current.clear();
    };
    while i < chars.len() {
        let c = chars[i];
        match quote {
            Some(q) => {
                if c == '\\' && q == '"' && i + 1 < chars.len() {
                    current.push(c);
                    current.push(chars[i + 1]);
                    i += 2;
                    continue;
                }
                if c == q {
                    quote = None;
                }
                current.push(c);
            }
            None => match c {
                '\'' | '"' => {
                    quote = Some(c);
                    current.push(c);
                }
                '\\' if i + 1 < chars.len() => {
                    current.push(c);
                    current.push(chars[i + 1]);
                    i += 2;
                    continue;
                }
                ';' | '\n' | '(' | ')' | '`' => push(&mut current, &mut parts),
                '$' if chars.get(i + 1) == Some(&'(') => {
                    push(&mut current, &mut parts);
                    i += 2;
                    continue;
                }
                '&' | '|' => {
                    push(&mut current, &mut parts);
                    if chars.get(i + 1) == Some(&c) {
                        i += 1;
                    }
                }
                _ => current.push(c),
            },
        }
        i += 1;
    }
    push(&mut current, &mut parts);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases: &[(&str, &[&str])] = &[
            ("ls -la", &["ls -la"]),
            ("cd x && rm -rf y", &["cd x", "rm -rf y"]),
            ("a || b; c | d & e", &["a", "b", "c", "d", "e"]),
            ("echo 'a && b' && c", &["echo 'a && b'", "c"]),
            ("echo \"x; y\" ; z", &["echo \"x; y\"", "z"]),
            (
                "(cd sub && make) && echo done",
                &["cd sub", "make", "echo done"],
            ),
            ("echo $(rm -rf /)", &["echo", "rm -rf /"]),
            ("echo `whoami`", &["echo", "whoami"]),
            ("git diff\ngit status", &["git diff", "git status"]),
            ("echo a\\;b", &["echo a\\;b"]),
            ("   ", &[]),
        ];
        for (cmd, want) in cases {
            assert_eq!(
                split(cmd),
                want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{cmd}"
            );
        }
    }
}
