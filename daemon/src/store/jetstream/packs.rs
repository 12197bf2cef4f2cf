//! The cluster's snapshots: one object per workspace snapshot in the `tether-snapshots` object
//! store, the git pack of its objects beyond its base's (named in the object's metadata), so a
//! node that takes a session over can rebuild its working tree from the chain of packs.
//!
//! Invariant: a pack is stored before the event that names its snapshot is logged; one whose
//! event never was is never read (a fenced owner's late snapshot is garbage).

use async_nats::jetstream::object_store::{ObjectMetadata, ObjectStore};
use futures::future::BoxFuture;
use std::collections::HashMap;
use tokio::io::AsyncReadExt;

/// The metadata key naming a pack's base snapshot.
const BASE: &str = "base";

/// The bucket of snapshot packs.
#[derive(Clone)]
pub struct Packs {
    store: ObjectStore,
}

impl std::fmt::Debug for Packs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Packs")
    }
}

impl Packs {
    /// The packs in `store`.
    pub fn new(store: ObjectStore) -> Self {
        Self { store }
    }
}

impl crate::snapshots::PackStore for Packs {
    fn put(
        &self,
        commit: String,
        base: Option<String>,
        pack: Vec<u8>,
    ) -> BoxFuture<'static, Result<(), String>> {
        let store = self.store.clone();
        Box::pin(async move {
            let meta = ObjectMetadata {
                name: commit,
                metadata: base
                    .map(|b| HashMap::from([(BASE.to_owned(), b)]))
                    .unwrap_or_default(),
                ..Default::default()
            };
            store
                .put(meta, &mut pack.as_slice())
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    }

    fn has(&self, commit: String) -> BoxFuture<'static, bool> {
        let store = self.store.clone();
        Box::pin(async move { store.info(&commit).await.is_ok_and(|i| !i.deleted) })
    }

    fn get(
        &self,
        commit: String,
    ) -> BoxFuture<'static, Result<Option<(Vec<u8>, Option<String>)>, String>> {
        let store = self.store.clone();
        Box::pin(async move {
            let mut object = match store.get(&commit).await {
                Ok(o) => o,
                Err(e)
                    if e.kind() == async_nats::jetstream::object_store::GetErrorKind::NotFound =>
                {
                    return Ok(None);
                }
                Err(e) => return Err(e.to_string()),
            };
            let base = object.info().metadata.get(BASE).cloned();
            let mut pack = Vec::new();
            object
                .read_to_end(&mut pack)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Some((pack, base)))
        })
    }
}
