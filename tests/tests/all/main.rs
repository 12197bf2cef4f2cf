//! All end-to-end suites, in one test binary (one link, parallel tests).

mod access;
mod acp;
mod asking;
mod cache;
mod chaos;
mod cluster;
mod cluster_chaos;
mod exhaustion;
mod headless;
mod limits;
mod mcp;
mod models;
mod operations;
mod permissions;
mod providers;
mod remote;
mod sandbox;
mod sdk;
mod security;
mod sessions;
mod spine;
mod systemd;
mod terminal;
mod tidy;
mod turns;
mod wire_fuzz;
