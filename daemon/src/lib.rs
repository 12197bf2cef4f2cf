//! `tetherd`, the daemon that holds tether sessions: a library so benchmarks and tests can reach
//! its parts; `main.rs` is the thin binary over [`run`].

pub mod daemon;
pub mod llm;
pub mod rpc;
pub mod session;
pub mod store;

pub use daemon::{Options, run};
