//! The Anthropic Messages API client: request building, streaming decode, message assembly,
//! error classes, retries, models and prices.
//!
//! Providers: the Anthropic API, Google Vertex AI (`provider.rs`) or Amazon Bedrock (`bedrock.rs`).
//!
//! Invariant: the only module that imports reqwest. Everything the model sends reaches the caller
//! piece by piece as it arrives ([`StreamUpdate`]); nothing buffers a whole response. Secrets
//! never appear in errors, logs or updates.

mod accumulate;
mod auth;
mod bedrock;
mod client;
mod error;
pub mod listing;
mod models;
mod provider;
mod request;
mod retry;
mod web;

pub use accumulate::{
    Accumulator, AssembledMessage, StreamUpdate, TruncatedToolInput, assemble, decode_stream,
};
pub use auth::{Auth, Credential, custom_headers};
pub use bedrock::Bedrock;
pub use client::{AnthropicClient, LlmConfig, Model, Streaming};
pub use error::{ApiError, ApiErrorKind, LlmError};
pub use models::{
    Effort, ListedModel, ModelCatalog, ModelError, ModelInfo, Price, RequestPolicy, ThinkingKind,
    Usage,
};
pub use provider::{Provider, Vertex};
pub use request::{
    CacheControl, CacheTtl, Message, MessagesRequest, Role, SystemBlock, Thinking, ThinkingDisplay,
    ToolDefinition,
};
pub use retry::RetryPolicy;
pub use web::{Page, WebError, WebFetcher};
