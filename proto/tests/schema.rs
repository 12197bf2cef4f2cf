//! The committed wire schema matches the types: a protocol change is a reviewed diff of
//! `proto/wire-schema.json`. Run with `TETHER_BLESS=1` to rewrite it after a deliberate change.

#[test]
fn the_committed_wire_schema_matches_the_types() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("wire-schema.json");
    let now = serde_json::to_string_pretty(&tether_proto::schema::wire_schema())
        .expect("the schema encodes")
        + "\n";
    if std::env::var_os("TETHER_BLESS").is_some() {
        std::fs::write(&path, &now).expect("write the schema");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == now,
        "the wire types changed: review the change, bump PROTOCOL_VERSION if old clients break, \
         then run `TETHER_BLESS=1 cargo test -p tether-proto --test schema` and commit {}",
        path.display()
    );
}

#[test]
fn every_method_and_event_type_is_described_in_the_protocol_reference() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("../docs/protocol.md")).expect("docs/protocol.md");
    let rpc = std::fs::read_to_string(root.join("src/rpc.rs")).expect("src/rpc.rs");
    // `name = "session/new"`, `unsubscribe = "session/unsubscribe"`, `=> "session/event"`.
    let methods: Vec<&str> = rpc
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| s.contains('/') || *s == "initialize")
        .collect();
    assert!(methods.len() > 20, "{methods:?}");
    let schema = tether_proto::schema::wire_schema();
    let events: Vec<String> = schema["$defs"]["Event"]["oneOf"]
        .as_array()
        .expect("Event is a oneOf")
        .iter()
        .filter_map(|v| v["properties"]["type"]["const"].as_str().map(str::to_owned))
        .collect();
    assert!(events.len() > 30, "{events:?}");
    let missing: Vec<String> = methods
        .iter()
        .map(|m| (*m).to_owned())
        .chain(events)
        .filter(|name| !doc.contains(&format!("`{name}")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/protocol.md does not describe {missing:?}"
    );
}
