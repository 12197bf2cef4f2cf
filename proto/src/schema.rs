//! The JSON Schema of every wire type, generated from the types themselves (schemars), so a
//! change to the protocol shows up as a diff of the committed `proto/wire-schema.json` (a test
//! compares the two; `TETHER_BLESS=1` rewrites the file).

use crate::{event, types};
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

/// The schema document: every wire type under `$defs`, by name.
pub fn wire_schema() -> Value {
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    macro_rules! each {
        ($($t:ty),* $(,)?) => { $( generator.subschema_for::<$t>(); )* };
    }
    each!(
        event::Event,
        types::InitializeResult,
        types::ClientInfo,
        types::Capabilities,
        types::DaemonStatus,
        types::ClusterInfo,
        types::HeldSession,
        types::ShutdownResult,
        types::ConfigReport,
        types::Check,
        types::ModelList,
        types::SessionNewResult,
        types::SessionList,
        types::SessionSnapshot,
        types::TurnOptions,
        types::InputItem,
        types::BusyMode,
        types::TurnStarted,
        types::TurnCancelled,
        types::PermissionDecision,
        types::PermissionResponse,
        types::PermissionRules,
        types::McpList,
        types::McpChange,
        types::McpChanged,
        types::CommandInfo,
        types::SettingsKey,
        types::WorkspaceTrust,
        types::SessionExport,
        types::NoControllerPolicy,
    );
    let defs: serde_json::Map<String, Value> = generator
        .definitions()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    sorted(json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "tether wire types",
        "protocolVersion": crate::PROTOCOL_VERSION,
        "$defs": defs,
    }))
}

/// `v` with every object's keys in order, whatever order serde_json keeps them in (a crate in
/// the build may turn on its `preserve_order`), so the committed file is the same either way.
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}
