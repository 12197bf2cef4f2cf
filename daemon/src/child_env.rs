//! The environment tetherd's child processes start with — Bash commands, hooks and MCP stdio
//! servers: the daemon's own, less the credentials its model providers and exporter read (the
//! Anthropic key and token, Claude Code's OAuth token, Bedrock's AWS keys, Vertex's Google
//! credentials, the OTLP exporter's headers), whichever provider is in use. A command the
//! model runs could otherwise print them into the log.
//!
//! `CLAUDE_CODE_SUBPROCESS_ENV_SCRUB=0` in tetherd's environment keeps them (Claude Code scrubs
//! only when that variable is 1; tether scrubs unless it is 0). A variable a settings file's
//! `env` or an MCP server's `env` sets explicitly is passed as set: callers apply those after
//! [`scrub`]. Imports nothing of the crate.

/// The variable that turns the scrubbing off (`0`).
pub const SCRUB_VAR: &str = "CLAUDE_CODE_SUBPROCESS_ENV_SCRUB";

/// The credentials tetherd uses, removed from its children's environment.
pub const CREDENTIALS: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "TETHER_API_KEY_HELPER",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_OAUTH_ACCESS_TOKEN",
    "CLOUDSDK_AUTH_ACCESS_TOKEN",
    "ANTHROPIC_CUSTOM_HEADERS",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
];

/// Whether credentials are removed, given the value of [`SCRUB_VAR`].
pub fn scrubs(setting: Option<&str>) -> bool {
    !matches!(setting.map(str::trim), Some("0" | "false"))
}

/// The variables to remove from a child's environment: [`CREDENTIALS`], unless
/// `CLAUDE_CODE_SUBPROCESS_ENV_SCRUB=0` is set in tetherd's environment.
pub fn removed() -> &'static [&'static str] {
    if scrubs(std::env::var(SCRUB_VAR).ok().as_deref()) {
        CREDENTIALS
    } else {
        &[]
    }
}

/// Removes the credentials from `cmd`'s environment (see [`removed`]). Call it before setting
/// the variables the user configured, so those are passed as set.
pub fn scrub(cmd: &mut tokio::process::Command) -> &mut tokio::process::Command {
    for var in removed() {
        cmd.env_remove(var);
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_zero_keeps_the_credentials() {
        for (setting, scrubbed) in [
            (None, true),
            (Some("1"), true),
            (Some(""), true),
            (Some("0"), false),
            (Some(" 0 "), false),
            (Some("false"), false),
        ] {
            assert_eq!(scrubs(setting), scrubbed, "{setting:?}");
        }
    }

    #[tokio::test]
    async fn a_scrubbed_child_does_not_see_a_credential_but_sees_what_is_set_after() {
        // The variable under test is set on the command, not in this process: tests run in
        // parallel and share the environment.
        let mut cmd = tokio::process::Command::new("sh");
        cmd.env("ANTHROPIC_API_KEY", "sk-from-daemon")
            .env("AWS_SECRET_ACCESS_KEY", "aws-secret");
        scrub(&mut cmd);
        cmd.env("AWS_SECRET_ACCESS_KEY", "set-by-the-user");
        let out = cmd
            .args([
                "-c",
                "echo \"[${ANTHROPIC_API_KEY-unset}] [$AWS_SECRET_ACCESS_KEY]\"",
            ])
            .output()
            .await
            .expect("sh");
        let text = String::from_utf8_lossy(&out.stdout);
        if scrubs(std::env::var(SCRUB_VAR).ok().as_deref()) {
            assert_eq!(text.trim(), "[unset] [set-by-the-user]");
        }
    }
}
