//! Snapshots that travel: a snapshot's objects as a git pack for the cluster's store, packs
//! taken back into a shadow repository, and a working tree made from a snapshot on a node that
//! did not have it.

use super::{Shadow, SnapshotError, find_commit, git};

impl Shadow {
    /// A pack of the objects of snapshot `commit` that snapshot `base` does not have (all of
    /// them without a base).
    pub fn pack(&self, commit: &str, base: Option<&str>) -> Result<Vec<u8>, SnapshotError> {
        let mut state = self.state();
        let open = self.open(&mut state)?;
        let repo = &open.repo;
        let tip = find_commit(repo, commit)?.id();
        let mut walk = repo
            .revwalk()
            .map_err(git("listing a snapshot's objects"))?;
        walk.push(tip)
            .map_err(git("listing a snapshot's objects"))?;
        if let Some(base) = base
            && let Ok(base) = find_commit(repo, base)
        {
            walk.hide(base.id())
                .map_err(git("listing a snapshot's objects"))?;
        }
        let mut builder = repo.packbuilder().map_err(git("packing a snapshot"))?;
        builder
            .insert_walk(&mut walk)
            .map_err(git("packing a snapshot"))?;
        let mut buf = git2::Buf::new();
        builder
            .write_buf(&mut buf)
            .map_err(git("packing a snapshot"))?;
        Ok(buf.to_vec())
    }

    /// Takes the objects of a pack into this node's store.
    pub fn import(&self, pack: &[u8]) -> Result<(), SnapshotError> {
        use std::io::Write;
        let mut state = self.state();
        let open = self.open(&mut state)?;
        let odb = open.repo.odb().map_err(git("opening the snapshot store"))?;
        let mut writer = odb.packwriter().map_err(git("taking in a snapshot"))?;
        writer.write_all(pack).map_err(|source| SnapshotError::Io {
            path: open.root.clone(),
            source,
        })?;
        writer.commit().map_err(git("taking in a snapshot"))?;
        Ok(())
    }

    /// Makes the working tree snapshot `commit`: its files written (others this session's
    /// snapshots had removed), the session's index and ref set to it, so the next snapshot
    /// follows on from it.
    pub fn materialise(&self, commit: &str) -> Result<(), SnapshotError> {
        let mut state = self.state();
        self.materialise_in(&mut state, commit)?;
        *self.uploaded() = Some(commit.to_owned());
        Ok(())
    }

    /// The snapshot this node's copy of the working tree was last brought to.
    pub fn current(&self) -> Option<String> {
        let mut state = self.state();
        let open = self.open(&mut state).ok()?;
        open.repo
            .refname_to_id(&open.refname)
            .ok()
            .map(|id| id.to_string())
    }

    /// Whether snapshot `commit` and everything its tree holds are in this node's store (a
    /// fetch cut short may have brought its commit but not its base's objects).
    pub fn complete(&self, commit: &str) -> Result<bool, SnapshotError> {
        let mut state = self.state();
        let open = self.open(&mut state)?;
        let repo = &open.repo;
        let Ok(tree) =
            find_commit(repo, commit).and_then(|c| c.tree().map_err(git("reading a snapshot")))
        else {
            return Ok(false);
        };
        let odb = repo.odb().map_err(git("opening the snapshot store"))?;
        let mut whole = true;
        tree.walk(git2::TreeWalkMode::PreOrder, |_, entry| {
            if !odb.exists(entry.id()) && entry.kind() != Some(git2::ObjectType::Commit) {
                whole = false;
                return git2::TreeWalkResult::Abort;
            }
            git2::TreeWalkResult::Ok
        })
        .ok();
        Ok(whole)
    }

    fn materialise_in(&self, state: &mut super::State, commit: &str) -> Result<(), SnapshotError> {
        let open = self.open(state)?;
        let repo = &open.repo;
        let snapshot = find_commit(repo, commit)?;
        let mut checkout = git2::build::CheckoutBuilder::new();
        checkout.force().remove_untracked(false);
        repo.checkout_tree(snapshot.as_object(), Some(&mut checkout))
            .map_err(git("writing the snapshot's files"))?;
        let mut index = repo.index().map_err(git("opening the snapshot index"))?;
        index
            .read_tree(&snapshot.tree().map_err(git("reading a snapshot"))?)
            .map_err(git("setting the snapshot index"))?;
        index.write().map_err(git("saving the snapshot index"))?;
        repo.reference(&open.refname, snapshot.id(), true, "restored")
            .map_err(git("recording the restored snapshot"))?;
        Ok(())
    }
}
