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
