//! `tetherd`, the daemon that holds tether sessions: a library so benchmarks and tests can reach
//! its parts; `main.rs` is the thin binary over [`run`].

pub mod agent;
pub mod approvals;
pub mod approve;
pub mod child_env;
pub mod config;
pub mod context;
pub mod daemon;
pub mod doctor;
#[cfg(test)]
mod fuzz;
pub mod heap;
pub mod hooks;
pub mod json_file;
pub mod llm;
pub mod mcp;
pub mod permissions;
pub mod rpc;
pub mod sandbox;
pub mod session;
pub mod settings;
pub mod snapshots;
pub mod store;
pub mod telemetry;
pub mod tools;
pub mod trust;

pub use daemon::{Options, run};
