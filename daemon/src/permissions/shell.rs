//! Splitting a shell command into the simple commands a rule is matched against: `&&`, `||`,
//! `;`, `|`, `&`, newlines, and the insides of `( … )`, `$( … )` and backquotes. Quotes are
//! respected; this is a splitter for permission checks, not a shell. Also which simple commands
//! only look (`ls`, `cat`, `git status`, …), which run without asking as Claude Code's do.

/// A command line as the permission check reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// The simple commands, trimmed, in order.
    pub parts: Vec<String>,
    /// Whether the splitter and the lexer read it as bash does. What they do not model — a
    /// comment, a heredoc, a line continuation, brace expansion, backquotes (which nest only
    /// with escapes), whitespace other than space, tab and newline — makes a command not
    /// understood: it never counts as only reading, and only a rule for exactly it allows it.
    pub understood: bool,
}

/// The simple commands of `command`, trimmed, in order.
pub fn split(command: &str) -> Vec<String> {
    scan(command).parts
}

/// Splits `command` into its simple commands, and says whether it was understood.
pub fn scan(command: &str) -> Scan {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut understood = true;
    let chars: Vec<char> = command.chars().collect();
    let mut i = 0;
    let mut quote: Option<char> = None;
    // Inside `$'…'` a backslash escapes the next character, `\'` included.
    let mut ansi = false;
    // Open substitutions and subshells: the quote state outside each, and what closes it.
    // Inside `"…"`, `$(…)` and backquotes still run commands, with quoting started afresh.
    let mut open: Vec<(Option<char>, char)> = Vec::new();
    let push = |current: &mut String, parts: &mut Vec<String>| {
        let t = current.trim();
        if !t.is_empty() {
            parts.push(t.to_owned());
        }
        current.clear();
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '`' && quote != Some('\'') {
            understood = false;
        }
        match quote {
            Some('"') if c == '`' || (c == '$' && chars.get(i + 1) == Some(&'(')) => {
                push(&mut current, &mut parts);
                open.push((quote, if c == '`' { '`' } else { ')' }));
                quote = None;
                i += if c == '`' { 1 } else { 2 };
                continue;
            }
            Some(q) => {
                if c == '\\' && (q == '"' || ansi) && i + 1 < chars.len() {
                    if q == '"' && chars[i + 1] == '\n' {
                        understood = false;
                    }
                    current.push(c);
                    current.push(chars[i + 1]);
                    i += 2;
                    continue;
                }
                if c == q {
                    quote = None;
                    ansi = false;
                }
                current.push(c);
            }
            None => {
                let word_start = i == 0 || " \t\n;&|()<>".contains(chars[i - 1]);
                let odd_blank =
                    (c.is_whitespace() || c.is_control()) && !matches!(c, ' ' | '\t' | '\n');
                if (c == '#' && word_start)
                    || (c == '<' && chars.get(i + 1) == Some(&'<'))
                    || (c == '{' && brace_expands(&chars[i + 1..]))
                    || odd_blank
                {
                    understood = false;
                }
                match c {
                    '$' if chars.get(i + 1) == Some(&'\'') => {
                        current.push_str("$'");
                        quote = Some('\'');
                        ansi = true;
                        i += 2;
                        continue;
                    }
                    '\'' | '"' => {
                        quote = Some(c);
                        current.push(c);
                    }
                    '\\' if i + 1 < chars.len() => {
                        if chars[i + 1] == '\n' {
                            understood = false;
                        }
                        current.push(c);
                        current.push(chars[i + 1]);
                        i += 2;
                        continue;
                    }
                    ';' | '\n' => push(&mut current, &mut parts),
                    '(' => {
                        push(&mut current, &mut parts);
                        open.push((None, ')'));
                    }
                    '$' if chars.get(i + 1) == Some(&'(') => {
                        push(&mut current, &mut parts);
                        open.push((None, ')'));
                        i += 2;
                        continue;
                    }
                    ')' | '`' => {
                        push(&mut current, &mut parts);
                        match open.last() {
                            Some((outer, closer)) if *closer == c => {
                                quote = *outer;
                                open.pop();
                            }
                            // An opening backquote.
                            _ if c == '`' => open.push((None, '`')),
                            _ => {}
                        }
                    }
                    // Part of a redirection, not a separator: `2>&1`, `<&0`, `&>file`, `>|file`.
                    '&' | '|'
                        if i > 0 && matches!(chars[i - 1], '>' | '<')
                            || (c == '&' && chars.get(i + 1) == Some(&'>')) =>
                    {
                        current.push(c)
                    }
                    '&' | '|' => {
                        push(&mut current, &mut parts);
                        if chars.get(i + 1) == Some(&c) {
                            i += 1;
                        }
                    }
                    _ => current.push(c),
                }
            }
        }
        i += 1;
    }
    push(&mut current, &mut parts);
    Scan { parts, understood }
}

/// Whether the text after an unquoted `{` is a brace expansion (`{a,b}`, `{1..9}`): a `,` or
/// `..` before the closing brace, with no blank first (`{ cmd; }` is a group).
fn brace_expands(rest: &[char]) -> bool {
    if rest.first().is_none_or(|c| c.is_whitespace()) {
        return false;
    }
    let inner: String = rest.iter().take_while(|c| **c != '}').collect();
    inner.len() < rest.len() && (inner.contains(',') || inner.contains(".."))
}

/// The words of a simple command with quotes removed, joined by single spaces: what bash runs,
/// for the deny and ask rules to match (`r''m -rf /` is `rm -rf /`).
pub fn dequoted(command: &str) -> String {
    words_of(&lex(command)).join(" ")
}

/// Whether a program `command` runs is an expansion the check cannot see (`$CMD args`,
/// `$(echo rm) -rf /`, `` `which rm` ``, `env $X`): looked for in every command position of the
/// whole command line (after `;`, `&`, `|`, `(`, a newline, leading assignments) and through
/// the wrappers.
pub fn program_is_expansion(command: &str) -> bool {
    let tokens = lex(command);
    let mut at_start = true;
    let mut word = String::new();
    let mut assignment = false;
    for token in &tokens {
        let Token::Char(c, quoting) = *token else {
            continue;
        };
        let bare = quoting == Quoting::Bare;
        if bare && matches!(c, ';' | '&' | '|' | '(' | ')' | '\n' | '{' | '}') {
            at_start = true;
            word.clear();
            assignment = false;
            continue;
        }
        if bare && matches!(c, ' ' | '\t') {
            if !word.is_empty() {
                at_start = at_start && assignment;
            }
            word.clear();
            assignment = false;
            continue;
        }
        if at_start && !assignment {
            if matches!(c, '$' | '`') && quoting != Quoting::Single {
                return true;
            }
            if c == '=' && bare && is_name(&word) {
                assignment = true;
            }
        }
        word.push(c);
    }
    split(command).iter().any(|part| {
        unwrapped(part).iter().any(|form| {
            form.split(' ')
                .next()
                .is_some_and(|p| p.contains('$') || p.contains('`'))
        })
    })
}

/// Whether `word` is a shell variable name.
fn is_name(word: &str) -> bool {
    word.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Words that run the command after them: a rule about that command applies through them.
const WRAPPERS: &[&str] = &[
    "env", "command", "exec", "nohup", "time", "sudo", "builtin", "nice", "timeout", "stdbuf",
];

/// Shell words that come before a command without being it.
const RESERVED: &[&str] = &[
    "!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "coproc",
    "time", "case", "esac", "in",
];

/// Programs that run another command given as their arguments or input: what they run is as
/// unseen as an expansion (`eval "rm …"`, `xargs rm`, `sh -c 'rm …'`, `find -exec rm`).
const RUNNERS: &[&str] = &[
    "eval", "xargs", "sh", "bash", "dash", "zsh", "ksh", "fish", "source", ".", "parallel",
    "watch", "script", "su", "runuser", "setsid", "flock", "chroot", "unshare", "nsenter",
];

/// Whether a simple command runs a command the check cannot see: an interpreter or a runner
/// ([`RUNNERS`]), or `find` with `-exec`/`-execdir`/`-ok`/`-okdir`.
pub fn runs_another(command: &str) -> bool {
    unwrapped(&dequoted(command)).iter().any(|form| {
        let mut words = form.split(' ');
        match words.next() {
            Some("find") => words.any(|w| matches!(w, "-exec" | "-execdir" | "-ok" | "-okdir")),
            Some(p) => RUNNERS.contains(&p),
            None => false,
        }
    })
}

/// How many words after a wrapper may be its options and their values.
const MAX_WRAPPER_WORDS: usize = 12;

/// The commands a deny or ask rule also looks at in `command`: without its leading
/// `NAME=value` assignments, the program without a leading `\\` or directory (`/bin/rm` →
/// `rm`), and — after a wrapper (`env`, `sudo`, `nohup`, …, whose options and their values
/// vary) — every command the rest of the words could start. Allow rules never use these forms:
/// an assignment such as `GIT_EXTERNAL_DIFF=…` changes what an allowed command does.
pub fn unwrapped(command: &str) -> Vec<String> {
    // Leading assignments, redirections (`>/dev/null rm`) and reserved words (`! rm`,
    // `if rm`) are not the program.
    let words: Vec<&str> = command
        .split_whitespace()
        .skip_while(|w| {
            w.split_once('=').is_some_and(|(name, _)| {
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            }) || w
                .trim_start_matches(|c: char| c.is_ascii_digit() || c == '&')
                .starts_with(['>', '<'])
                || RESERVED.contains(w)
        })
        .collect();
    let form = |words: &[&str]| -> Option<String> {
        let (program, args) = words.split_first()?;
        let program = program.trim_start_matches('\\');
        let program = program.rsplit('/').next().unwrap_or(program);
        Some(
            std::iter::once(program)
                .chain(args.iter().copied())
                .collect::<Vec<_>>()
                .join(" "),
        )
    };
    let mut forms: Vec<String> = form(&words).into_iter().collect();
    if words.first().is_some_and(|w| WRAPPERS.contains(w)) {
        // A wrapper's options and their values take a few words, never many.
        let upto = words.len().min(MAX_WRAPPER_WORDS);
        forms.extend((1..upto).filter_map(|i| form(&words[i..])));
    }
    forms
}

/// How a character of a simple command was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quoting {
    /// Bare: the shell gives it meaning (`>`, whitespace, `$`).
    Bare,
    /// Inside `'…'`: literal.
    Single,
    /// Inside `"…"`: literal but for `$`, backquotes and `\`.
    Double,
    /// Escaped by a backslash, or inside `$'…'` (whose escapes are taken as the character).
    Literal,
}

/// One piece of a simple command, as the shell reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// A character and how it was written (quotes themselves are not characters).
    Char(char, Quoting),
    /// A quote opened here: a word exists even when the quotes are empty (`''`).
    Quote,
}

/// The characters of one simple command with its quoting resolved: `'…'`, `"…"` (with its
/// backslash escapes), `$'…'` (with its escapes, `\'` among them) and backslashes outside
/// quotes. The one model of quoting that [`words`] and [`output_targets`] share, so neither
/// can be fooled where the other is not.
fn lex(command: &str) -> Vec<Token> {
    let chars: Vec<char> = command.chars().collect();
    let mut out = Vec::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                if let Some(&next) = chars.get(i + 1) {
                    out.push(Token::Char(next, Quoting::Literal));
                }
                i += 2;
            }
            '\'' => {
                out.push(Token::Quote);
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    out.push(Token::Char(chars[i], Quoting::Single));
                    i += 1;
                }
                i += 1;
            }
            '$' if chars.get(i + 1) == Some(&'\'') => {
                // Kept as a `$` so the word still shows an expansion happened.
                out.push(Token::Char('$', Quoting::Literal));
                out.push(Token::Quote);
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    if let Some(&c) = chars.get(i) {
                        out.push(Token::Char(c, Quoting::Literal));
                    }
                    i += 1;
                }
                i += 1;
            }
            '"' => {
                out.push(Token::Quote);
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        i += 1;
                        out.push(Token::Char(chars[i], Quoting::Literal));
                    } else {
                        out.push(Token::Char(chars[i], Quoting::Double));
                    }
                    i += 1;
                }
                i += 1;
            }
            c => {
                out.push(Token::Char(c, Quoting::Bare));
                i += 1;
            }
        }
    }
    out
}

/// Where a simple command redirects its output: the words after `>`, `>>`, `>|`, `&>`, `N>`,
/// `>&file` (quotes removed); `>&N` and `>&-` duplicate or close a descriptor and name no file.
pub fn output_targets(command: &str) -> Vec<String> {
    let tokens = lex(command);
    let bare = |i: usize, want: &[char]| matches!(tokens.get(i), Some(Token::Char(c, Quoting::Bare)) if want.contains(c));
    let mut targets = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if !bare(i, &['>']) {
            i += 1;
            continue;
        }
        i += 1;
        while bare(i, &['>', '|']) {
            i += 1;
        }
        if bare(i, &['&']) {
            i += 1;
            // `>&2`, `>&-` duplicate or close a descriptor; `>&file` writes the file.
            if matches!(tokens.get(i), Some(Token::Char(c, _)) if c.is_ascii_digit() || *c == '-') {
                continue;
            }
        }
        while matches!(tokens.get(i), Some(Token::Char(c, Quoting::Bare)) if c.is_whitespace()) {
            i += 1;
        }
        let mut word = String::new();
        while let Some(token) = tokens.get(i) {
            match *token {
                Token::Char(c, Quoting::Bare) if c.is_whitespace() || ";&|<>()".contains(c) => {
                    break;
                }
                Token::Char(c, _) => word.push(c),
                Token::Quote => {}
            }
            i += 1;
        }
        targets.push(word);
    }
    targets
}

/// What of one argument may name a file: the argument itself, the value of `--opt=value`, the
/// value attached to a short option (`-f.env`), and the path of a git `rev:path`.
fn arg_paths(arg: &str) -> Vec<&str> {
    let mut out = Vec::new();
    // An input redirection glued to its file (`<.env`, `0</etc/passwd`).
    let arg = match arg
        .trim_start_matches(|c: char| c.is_ascii_digit())
        .strip_prefix('<')
    {
        Some(file) => file,
        None => arg,
    };
    if let Some(option) = arg.strip_prefix("--") {
        out.extend(option.split_once('=').map(|(_, v)| v));
    } else if let Some(short) = arg.strip_prefix('-') {
        // A cluster (`-kf/etc/passwd`): the value may start after any of its letters.
        out.extend(short.char_indices().skip(1).map(|(i, _)| &short[i..]));
    } else {
        out.push(arg);
        out.extend(arg.split_once(':').map(|(_, path)| path));
    }
    out.retain(|p| !p.is_empty());
    out
}

/// The arguments of a simple command that may name files (see [`arg_paths`]; quotes removed).
pub fn file_args(command: &str) -> Vec<String> {
    let words = words_of(&lex(command));
    words
        .iter()
        .skip(1)
        .flat_map(|w| arg_paths(w))
        .map(str::to_owned)
        .collect()
}

/// The writing option `arg` is, if any, with its value when the same word carries it
/// (`--output=F`, `-OF` for a short `-O`).
fn writing_option<'a>(
    writers: &[&'static str],
    arg: &'a str,
) -> Option<(&'a str, Option<&'a str>)> {
    if let Some((flag, value)) = arg.split_once('=')
        && (writers.contains(&flag) || writes_generally(flag))
    {
        return Some((flag, Some(value)));
    }
    if writers.contains(&arg) || writes_generally(arg) {
        return Some((arg, None));
    }
    // An abbreviated long option (git takes any unique prefix: `--open` is
    // `--open-files-in-pager`).
    if let Some(long) = arg
        .split('=')
        .next()
        .filter(|f| f.starts_with("--") && f.len() > 3)
        && let Some(writer) = writers
            .iter()
            .find(|w| w.starts_with("--") && w.starts_with(long))
    {
        return Some((writer, arg.split_once('=').map(|(_, v)| v)));
    }
    // A short option in a cluster, its value attached (`-iO'cmd'`, `-OF`).
    let cluster = arg.strip_prefix('-').filter(|c| !c.starts_with('-'))?;
    cluster.char_indices().find_map(|(i, c)| {
        let value = &cluster[i + c.len_utf8()..];
        writers
            .iter()
            .find(|w| {
                w.len() == 1 + c.len_utf8()
                    && w.strip_prefix('-') == Some(&cluster[i..i + c.len_utf8()])
            })
            .map(|w| (*w, (!value.is_empty()).then_some(value)))
    })
}

/// Whether a simple command reads files it does not name: a recursive search (`grep -r`, `rg`,
/// `git grep`), or a file argument with a glob the shell expands.
pub fn reads_unnamed_files(command: &str) -> bool {
    let tokens = lex(command);
    let words = words_of(&tokens);
    let Some((program, args)) = words.split_first() else {
        return false;
    };
    let recursive = match program.as_str() {
        "rg" => true,
        // Patches and greps of the whole history or tree.
        "git" => args
            .first()
            .is_some_and(|a| matches!(a.as_str(), "grep" | "log" | "show" | "diff" | "blame")),
        "diff" => args.iter().any(|a| {
            a == "--recursive" || (a.starts_with('-') && !a.starts_with("--") && a.contains('r'))
        }),
        "grep" | "egrep" | "fgrep" => args.iter().any(|a| {
            a == "--recursive"
                || a == "--dereference-recursive"
                || a.starts_with("--directories")
                // `-r`, `-R`, `-d recurse`, alone or in a cluster (`-rn`).
                || (a.starts_with('-') && !a.starts_with("--") && a.contains(['r', 'R', 'd']))
        }),
        _ => false,
    };
    recursive
        || tokens
            .iter()
            .any(|t| matches!(t, Token::Char('*' | '?' | '[', Quoting::Bare)))
}

/// Commands that only read, whatever their (checked) arguments.
const READ_ONLY: &[&str] = &[
    "ls", "cat", "head", "tail", "wc", "pwd", "echo", "printf", "date", "which", "whoami", "uname",
    "file", "stat", "du", "df", "tree", "basename", "dirname", "realpath", "grep", "egrep",
    "fgrep", "rg", "find", "true", "hostname", "id", "cut", "diff", "cmp",
];

/// `git` subcommands that only read.
const GIT_READ_ONLY: &[&str] = &[
    "status",
    "diff",
    "log",
    "show",
    "branch",
    "rev-parse",
    "ls-files",
    "blame",
    "describe",
    "shortlog",
    "grep",
];

/// Arguments that make a reading command write or run something, per program.
fn writing_args(program: &str) -> &'static [&'static str] {
    match program {
        "find" => &[
            "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprintf", "-fprint0",
            "-fls",
        ],
        "rg" => &["--pre", "--pre-glob", "--hostname-bin"],
        "git" => &[
            "--output",
            "--output-directory",
            "-o",
            "--ext-diff",
            "--textconv",
            "-O",
            "--open-files-in-pager",
        ],
        "sort" => &["-o", "--output"],
        // `printf -v 'a[$(cmd)]'` runs the subscript.
        "printf" => &["-v"],
        "date" => &["-s", "--set"],
        "tree" => &["-o"],
        "file" => &["-C", "--compile"],
        _ => &[],
    }
}

/// The words of lexed tokens: split at bare whitespace, quotes removed (`''` is a word).
fn words_of(tokens: &[Token]) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut any = false;
    for token in tokens {
        match *token {
            Token::Quote => any = true,
            Token::Char(' ' | '\t' | '\n', Quoting::Bare) => {
                if any || !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            Token::Char(c, _) => word.push(c),
        }
    }
    if any || !word.is_empty() {
        out.push(word);
    }
    out
}

/// The words of a simple command (quotes removed), or `None` when it redirects output, which
/// makes any command a writer, or expands something (`$HOME`, `${X}`, `$'…'`), whose value the
/// check cannot see.
fn words(command: &str) -> Option<Vec<String>> {
    let tokens = lex(command);
    let expands = tokens.iter().any(|t| {
        matches!(
            t,
            Token::Char('>' | '$', Quoting::Bare | Quoting::Double)
                | Token::Char('$', Quoting::Literal)
        )
    });
    (!expands).then(|| words_of(&tokens))
}

/// Options that write a file in many programs (`--output=FILE`, `--log-file FILE`).
fn writes_generally(flag: &str) -> bool {
    [
        "--output",
        "--out-file",
        "--outfile",
        "--log-file",
        "--output-file",
    ]
    .contains(&flag)
}

/// The files a simple command writes through its options (`git diff --output=F`, `sort -o F`,
/// `find -fprint F`): each option's value, or `""` (somewhere unknown) for an option that writes
/// or runs something without naming a file (`find -delete`, `-exec`). With the redirections
/// ([`output_targets`]), what an allow rule's prefix must not let through unseen.
pub fn option_targets(command: &str) -> Vec<String> {
    let words = words_of(&lex(command));
    let Some((program, args)) = words.split_first() else {
        return Vec::new();
    };
    let program = program.rsplit('/').next().unwrap_or(program);
    let writers = writing_args(program);
    let mut targets = Vec::new();
    for (i, arg) in args.iter().enumerate() {
        if let Some((flag, value)) = writing_option(writers, arg) {
            let takes_file = TAKES_FILE.contains(&flag) || writes_generally(flag);
            match value {
                Some(v) if takes_file => targets.push(v.to_owned()),
                // A value that is a command, not a file: somewhere unknown.
                Some(_) => targets.push(String::new()),
                None if takes_file => targets.push(args.get(i + 1).cloned().unwrap_or_default()),
                None => targets.push(String::new()),
            }
        }
    }
    targets
}

/// The writing options whose value is the file they write.
const TAKES_FILE: &[&str] = &[
    "-fprint",
    "-fprintf",
    "-fprint0",
    "-fls",
    "--output",
    "-o",
    "--output-directory",
];

/// Whether `command` (one simple command, as [`split`] gives it) only reads: a read-only
/// program (`git` with a read-only subcommand), no output redirection, no argument that writes
/// or runs something (attached to its option or not), and every argument that may name a file
/// ([`arg_paths`]) passing `inside`.
pub fn is_read_only(command: &str, inside: &dyn Fn(&str) -> bool) -> bool {
    let Some(words) = words(command) else {
        return false;
    };
    let Some((program, args)) = words.split_first() else {
        return false;
    };
    let writers = writing_args(program);
    let args = match program.as_str() {
        // `git branch NAME` creates and `-d` deletes: only the listing forms read.
        "git" => match args.split_first() {
            Some((sub, rest))
                if sub == "branch"
                    && !rest.iter().all(|a| {
                        matches!(
                            a.as_str(),
                            "-a" | "-r" | "-v" | "-vv" | "--all" | "--list" | "--show-current"
                        )
                    }) =>
            {
                return false;
            }
            Some((sub, rest)) if GIT_READ_ONLY.contains(&sub.as_str()) => rest,
            _ => return false,
        },
        // With an argument it sets the name.
        "hostname" if !args.is_empty() => return false,
        p if READ_ONLY.contains(&p) => args,
        _ => return false,
    };
    args.iter()
        .all(|a| writing_option(writers, a).is_none() && arg_paths(a).iter().all(|p| inside(p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_commands_are_told_apart_from_writers() {
        // As the permission check resolves them: relative to a directory in /work.
        let inside = |p: &str| {
            !p.starts_with('~')
                && !p.split('/').any(|s| s == "..")
                && (p.starts_with("/work/") || !p.starts_with('/'))
        };
        for ok in [
            "ls -la",
            "cat README.md",
            "git status",
            "git diff --stat",
            "git log -5 --oneline",
            "date",
            "pwd",
            "grep -rn 'a > b' src",
            "cat /work/x.txt",
            "echo hi",
            "find . -name '*.rs'",
            "grep -o x y",
            "git branch -a",
            "git branch",
            "du -sh .",
        ] {
            assert!(is_read_only(ok, &inside), "{ok}");
        }
        for no in [
            "echo x > f",
            "cat a >> b",
            "rm -rf x",
            "git push",
            "git -c core.pager=sh diff",
            "git diff --output=/tmp/x",
            "find . -delete",
            "find . -exec rm {} ;",
            "rg --pre ./evil x",
            "cat /etc/shadow",
            "cat ../../secret",
            "cat ~/.ssh/id_rsa",
            "FOO=1 ls",
            "env ls",
            "date -s 2020-01-01",
            "sort -o out in",
            "tree -o out",
            "git branch -D main",
            "git branch new-one",
            "git grep -O x",
            "hostname evil",
            "file -C -m x",
            "git grep -O'touch /tmp/p' -e a",
            "rg --hostname-bin=./evil x",
            "diff --from-file=/etc/shadow README.md",
            "file -f/etc/shadow",
            "cat\u{a0}./x.sh",
            "",
        ] {
            assert!(!is_read_only(no, &inside), "{no:?}");
        }
    }

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
            ("make 2>&1 | tee log", &["make 2>&1", "tee log"]),
            ("a &>out && b >|f", &["a &>out", "b >|f"]),
            ("   ", &[]),
        ];
        for (cmd, understood) in [
            ("ls -la && git status", true),
            ("echo $'a\\'b' ; ls", true),
            ("{ ls; }", true),
            ("echo '#x' \"a#b\" c#d", true),
            ("echo ok #'\ntouch x #'", false),
            ("cat <<EOF\nx\nEOF", false),
            ("ls \\\n-la", false),
            ("find . {-delete,}", false),
            ("echo {1..3}", false),
            ("cat\u{a0}./x.sh", false),
            ("ls\r-la", false),
        ] {
            assert_eq!(scan(cmd).understood, understood, "{cmd:?}");
        }
        for (cmd, hidden) in [
            ("echo $HOME", false),
            ("FOO=$(pwd) make", false),
            ("a=1 b=\"$y\" ls -la", false),
            ("echo '$(x)'", false),
            ("$(echo rm) -rf /", true),
            ("ls; $X y", true),
            ("env $CMD", true),
            ("`which rm` x", true),
            ("\"$RM\" -rf /", true),
            ("x | ${P} y", true),
        ] {
            assert_eq!(program_is_expansion(cmd), hidden, "{cmd:?}");
        }
        for (cmd, want) in cases {
            assert_eq!(
                split(cmd),
                want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{cmd}"
            );
        }
    }
}
