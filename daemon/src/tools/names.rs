//! The one table of tool names: each built-in tool's name in tether and the other names it
//! answers to (Claude Code's current names where tether keeps the older one, and the reverse).
//! Permission rules, hook matchers, `--tools`, `--allowedTools`, `--disallowedTools`, agents'
//! `tools:` lists and commands' `allowed-tools` all reach a tool through here, so a rule or a
//! matcher that names a tool by any of its names applies to it.

/// `(name, aliases)` for every tool that has more than one name.
pub const TABLE: &[(&str, &[&str])] = &[
    ("Agent", &["Task"]),
    ("BashOutput", &["TaskOutput"]),
    ("KillShell", &["TaskStop"]),
];

/// The name tether calls the tool `name` names (itself when it is no alias).
pub fn canonical(name: &str) -> &str {
    TABLE
        .iter()
        .find(|(_, aliases)| aliases.contains(&name))
        .map_or(name, |(canonical, _)| canonical)
}

/// The other names of the tool called `canonical`.
pub fn aliases(canonical: &str) -> &'static [&'static str] {
    TABLE
        .iter()
        .find(|(name, _)| *name == canonical)
        .map_or(&[], |(_, aliases)| aliases)
}

/// Every name of the tool `name` names: its own first, then its aliases.
pub fn all(name: &str) -> impl Iterator<Item = &str> {
    let canonical = canonical(name);
    std::iter::once(canonical).chain(aliases(canonical).iter().copied())
}

/// Whether `a` and `b` name the same tool.
pub fn same(a: &str, b: &str) -> bool {
    canonical(a) == canonical(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_leads_to_its_tool_and_back() {
        for (name, aliases) in TABLE {
            assert_eq!(canonical(name), *name);
            for alias in *aliases {
                assert_eq!(canonical(alias), *name);
                assert!(same(alias, name));
                assert_eq!(all(alias).collect::<Vec<_>>()[0], *name);
            }
        }
        assert_eq!(canonical("Bash"), "Bash");
        assert_eq!(all("Bash").collect::<Vec<_>>(), ["Bash"]);
        assert!(!same("Agent", "Bash"));
    }
}
