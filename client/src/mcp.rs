//! `tether mcp`: Claude Code's `claude mcp` commands (`add`, `add-json`, `list`, `get`,
//! `remove`, with `--scope`, `--transport`, `-e`, `--header`) over the daemon's `mcp/*`
//! methods, plus tether's `approve`, `reject` and `reconnect`. The daemon reads and writes the
//! files, so the client and a running session always agree on what is configured.

use crate::commands::{Output, print_json};
use crate::connection;
use anyhow::Context;
use serde_json::{Map, Value, json};
use std::path::Path;
use std::process::ExitCode;
use tether_proto::ClientKind;
use tether_proto::{McpChange, McpList, TetherRpcClient};

/// `tether mcp …`.
#[derive(Debug, clap::Subcommand)]
pub enum McpCmd {
    /// Add a server: `tether mcp add NAME -- COMMAND [ARGS…]` (stdio), or
    /// `tether mcp add --transport http NAME URL`.
    Add {
        /// Where to keep it: local (this project, you; default), project (.mcp.json) or user.
        #[arg(short, long)]
        scope: Option<String>,
        /// stdio (default), http or sse.
        #[arg(short, long, default_value = "stdio")]
        transport: String,
        /// Environment of a stdio server: KEY=value (repeatable).
        #[arg(short = 'e', long = "env", value_name = "KEY=value")]
        env: Vec<String>,
        /// Header of an http or sse server: "Name: value" (repeatable).
        #[arg(short = 'H', long = "header", value_name = "HEADER")]
        header: Vec<String>,
        /// The server's name.
        name: String,
        /// The command (stdio) or the URL (http, sse).
        command_or_url: String,
        /// The command's arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Add a server from its JSON entry (`.mcp.json`'s shape).
    AddJson {
        /// The server's name.
        name: String,
        /// The entry, e.g. '{"type":"http","url":"https://…"}'.
        #[arg(value_name = "JSON")]
        entry: String,
        /// local (default), project or user.
        #[arg(short, long)]
        scope: Option<String>,
    },
    /// The servers sessions here get, with their state and tools.
    List,
    /// One server's configuration and state.
    Get {
        /// The server's name.
        name: String,
    },
    /// Remove a server.
    Remove {
        /// The server's name.
        name: String,
        /// Only from this scope (local, project, user).
        #[arg(short, long)]
        scope: Option<String>,
    },
    /// Approve servers of this project's .mcp.json (all when none is named).
    Approve {
        /// Server names.
        names: Vec<String>,
    },
    /// Reject servers of this project's .mcp.json (all when none is named).
    Reject {
        /// Server names.
        names: Vec<String>,
    },
    /// Stop a server and start it again.
    Reconnect {
        /// The server's name.
        name: String,
    },
}

/// A `KEY=value` or `Name: value` list as a JSON object.
fn pairs(items: &[String], sep: char, what: &str) -> anyhow::Result<Map<String, Value>> {
    items
        .iter()
        .map(|item| {
            let (k, v) = item.split_once(sep).with_context(|| {
                format!(
                    "{what} {item:?}: expected {}",
                    if sep == '=' {
                        "KEY=value"
                    } else {
                        "\"Name: value\""
                    }
                )
            })?;
            Ok((k.trim().to_owned(), json!(v.trim())))
        })
        .collect()
}

/// The entry `tether mcp add` writes.
fn entry(
    transport: &str,
    target: &str,
    args: &[String],
    env: &[String],
    header: &[String],
) -> anyhow::Result<Value> {
    match transport {
        "stdio" => {
            anyhow::ensure!(header.is_empty(), "--header is for http and sse servers");
            let mut e = json!({"type": "stdio", "command": target, "args": args});
            if !env.is_empty() {
                e["env"] = Value::Object(pairs(env, '=', "--env")?);
            }
            Ok(e)
        }
        "http" | "sse" => {
            anyhow::ensure!(
                args.is_empty(),
                "an {transport} server takes a URL, not arguments"
            );
            anyhow::ensure!(env.is_empty(), "--env is for stdio servers");
            let mut e = json!({"type": transport, "url": target});
            if !header.is_empty() {
                e["headers"] = Value::Object(pairs(header, ':', "--header")?);
            }
            Ok(e)
        }
        other => anyhow::bail!("unknown transport {other:?} (stdio, http or sse)"),
    }
}

/// Runs one `tether mcp` command in the current directory.
pub async fn run(socket: &Path, out: Output, cmd: McpCmd) -> anyhow::Result<ExitCode> {
    let cwd = crate::remote::work_dir()?;
    let conn = connection::connect(socket, true, ClientKind::Script).await?;
    let rpc = &conn.client;
    let dir = cwd.clone();
    let change = |change: McpChange| async move {
        let done = rpc.mcp_configure(dir, change).await?;
        if out.json {
            print_json(&done)?;
        } else {
            println!("{}", done.message);
        }
        anyhow::Ok(ExitCode::SUCCESS)
    };
    match cmd {
        McpCmd::Add {
            scope,
            transport,
            env,
            header,
            name,
            command_or_url,
            args,
        } => {
            let config = entry(&transport, &command_or_url, &args, &env, &header)?;
            change(McpChange::Add {
                name,
                scope,
                config,
            })
            .await
        }
        McpCmd::AddJson { name, entry, scope } => {
            let config: Value =
                serde_json::from_str(&entry).context("add-json: the entry is not valid JSON")?;
            change(McpChange::Add {
                name,
                scope,
                config,
            })
            .await
        }
        McpCmd::Remove { name, scope } => change(McpChange::Remove { name, scope }).await,
        McpCmd::Approve { names } => {
            change(McpChange::Approve {
                names,
                approve: true,
            })
            .await
        }
        McpCmd::Reject { names } => {
            change(McpChange::Approve {
                names,
                approve: false,
            })
            .await
        }
        McpCmd::List => {
            let list = rpc.mcp_list(cwd.clone()).await?;
            if out.json {
                print_json(&list)?;
            } else {
                print!("{}", render(&list, None));
            }
            Ok(ExitCode::SUCCESS)
        }
        McpCmd::Get { name } => {
            let list = rpc.mcp_list(cwd.clone()).await?;
            let Some(server) = list.servers.iter().find(|s| s.name == name) else {
                anyhow::bail!("no MCP server named {name} here");
            };
            if out.json {
                print_json(server)?;
            } else {
                print!("{}", render(&list, Some(&name)));
            }
            Ok(ExitCode::SUCCESS)
        }
        McpCmd::Reconnect { name } => {
            let list = rpc.mcp_reconnect(cwd.clone(), name.clone()).await?;
            if out.json {
                print_json(&list)?;
            } else {
                println!("Restarting the MCP server {name}.");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The servers as lines for people (`only`: one server, with its tools).
pub fn render(list: &McpList, only: Option<&str>) -> String {
    let mut s = String::new();
    if list.servers.is_empty() && only.is_none() {
        s.push_str("No MCP servers configured here. Add one with `tether mcp add`.\n");
    }
    for server in list
        .servers
        .iter()
        .filter(|x| only.is_none_or(|n| n == x.name))
    {
        s.push_str(&format!(
            "{}: {} ({}, {} scope) - {}{}\n",
            server.name,
            server.target,
            server.transport,
            server.scope,
            server.state,
            server
                .error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ));
        if only.is_some() {
            s.push_str(&format!("  configured in {}\n", server.source));
            for t in &server.tools {
                s.push_str(&format!("  {t}\n"));
            }
        }
    }
    if only.is_none() {
        if !list.unapproved.is_empty() {
            s.push_str(&format!(
                "Waiting for approval (.mcp.json): {} - run `tether mcp approve`\n",
                list.unapproved.join(", ")
            ));
        }
        if !list.rejected.is_empty() {
            s.push_str(&format!(
                "Rejected (.mcp.json): {}\n",
                list.rejected.join(", ")
            ));
        }
        for p in &list.problems {
            s.push_str(&format!("problem: {p}\n"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_builds_claude_codes_entries() {
        let e = entry(
            "stdio",
            "npx",
            &["-y".into(), "srv".into()],
            &["K=v=w".into()],
            &[],
        )
        .expect("test setup");
        assert_eq!(
            e,
            json!({"type": "stdio", "command": "npx", "args": ["-y", "srv"], "env": {"K": "v=w"}})
        );
        let e = entry(
            "http",
            "https://x/mcp",
            &[],
            &[],
            &["Authorization: Bearer t".into()],
        )
        .expect("test setup");
        assert_eq!(e["headers"]["Authorization"], "Bearer t");
        assert!(entry("http", "u", &["a".into()], &[], &[]).is_err());
        assert!(entry("stdio", "c", &[], &["novalue".into()], &[]).is_err());
        assert!(entry("ws", "u", &[], &[], &[]).is_err());
    }
}
