//! All end-to-end suites, in one test binary (one link, parallel tests).

mod permissions;
mod spine;
mod turns;
