//! MCP servers as tools. `config.rs` reads Claude Code's MCP configuration (`.mcp.json`,
//! `~/.claude.json`, `--mcp-config`); `client.rs` is one rmcp connection (stdio, Streamable
//! HTTP, and the older SSE transport in `sse.rs`); `servers.rs` is the daemon's registry that
//! starts, shares, restarts and stops servers; `tool.rs` makes a server's tools tether tools.
//!
//! Invariant: the only module that names rmcp; the rest of the daemon sees `Tools`, strings
//! and JSON.

mod client;
pub mod config;
mod servers;
mod sse;
mod tool;

pub use client::McpError;
pub use config::{Extra, McpConfig, Scope, ServerConfig, Transport};
pub use servers::{ForTurn, Limits, McpServers, Server, State};
pub use tool::prefix;
