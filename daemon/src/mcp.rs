//! MCP servers as tools. `config.rs` reads Claude Code's MCP configuration (`.mcp.json`,
//! `~/.claude.json`, `--mcp-config`); `client.rs` is one rmcp connection (stdio, Streamable
//! HTTP, and the older SSE transport in `sse.rs`); `servers.rs` is the daemon's registry that
//! starts, shares, restarts and stops servers; `tool.rs` makes a server's tools tether tools.
//!
//! Invariant: the only module that names rmcp; the rest of the daemon sees `Tools`, strings
//! and JSON.

mod client;
pub mod config;
pub mod manage;
mod relay;
mod servers;
mod sse;
mod tool;

pub use config::Limits;
pub use config::{Extra, McpConfig};
pub use relay::{Relay, SdkServer, connect as connect_sdk};
pub use servers::{Lease, McpServers};

use servers::State;

use std::path::Path;

/// The configuration of `cwd` as this daemon's user has it (their home, this environment).
pub fn configuration(cwd: &Path, extra: &Extra) -> McpConfig {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    config::load(cwd, home.as_deref(), extra, &|k| std::env::var(k).ok())
}

/// What `mcp/list` answers for `cwd`: the configured servers with their state (nothing is
/// started).
pub fn list(servers: &McpServers, cwd: &Path) -> tether_proto::McpList {
    let config = configuration(cwd, &Extra::default());
    let servers = servers
        .status(&config, cwd)
        .into_iter()
        .map(|(c, live)| {
            let (state, error, tools) = match &live {
                None => ("idle".to_owned(), None, Vec::new()),
                Some(s) => {
                    let state = s.state();
                    let error = match &state {
                        State::Failed { error, .. } => Some(error.clone()),
                        _ => None,
                    };
                    let tools = s.tools().names().into_iter().map(str::to_owned).collect();
                    (state.word().to_owned(), error, tools)
                }
            };
            tether_proto::McpServerInfo {
                name: c.name.clone(),
                scope: c.scope.as_str().into(),
                transport: c.transport.kind().into(),
                target: c.transport.target(),
                source: c.source.clone(),
                state,
                error,
                tools,
            }
        })
        .collect();
    tether_proto::McpList {
        servers,
        unapproved: config.unapproved,
        rejected: config.rejected,
        problems: config.problems,
    }
}

/// Restarts the server `name` of `cwd`; `false` when `cwd` has no such server.
pub fn reconnect(servers: &McpServers, cwd: &Path, name: &str) -> bool {
    servers.reconnect(&configuration(cwd, &Extra::default()), cwd, name)
}
