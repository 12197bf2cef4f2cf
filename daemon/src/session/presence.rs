//! Who is attached to a session, in which role: the list `session/get` shows, and the questions
//! the actor asks of it (may this client act? is anyone able to answer a permission request?).
//!
//! Invariant: one entry per subscription; a client attached twice (say as observer and
//! controller) has two entries and may act if either is a controller. A client is its
//! connection id on its node: in a cluster, the subscribers other nodes follow the session for
//! count too (as the cluster reports them), so "who may act" and "is a controller here" hold
//! across nodes.

use tether_proto::{AttachedClient, ClientRef, Role};

/// The subscriptions of one session.
#[derive(Default)]
pub struct Presence {
    /// This daemon's subscribers.
    attached: Vec<AttachedClient>,
    /// In cluster mode, the subscribers other nodes follow the session for, as the cluster
    /// last reported them.
    elsewhere: Vec<AttachedClient>,
}

/// What changed when the cluster reported the subscribers on other nodes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Moved {
    /// Newly attached.
    pub attached: Vec<AttachedClient>,
    /// Gone.
    pub detached: Vec<AttachedClient>,
}

impl Presence {
    /// Records a subscription.
    pub fn attach(&mut self, client: ClientRef, role: Role) {
        self.attached.push(AttachedClient { client, role });
    }

    /// Forgets one subscription of `client` in `role`; `false` when there was none.
    pub fn detach(&mut self, client: &ClientRef, role: Role) -> bool {
        match self
            .attached
            .iter()
            .position(|a| a.client.same(client) && a.role == role)
        {
            Some(i) => {
                self.attached.remove(i);
                true
            }
            None => false,
        }
    }

    /// Replaces the subscribers on other nodes with `now`; what changed. The first report
    /// after the session loads (`quiet`) changes nothing visible: those clients were attached
    /// before this daemon took the session.
    pub fn elsewhere(&mut self, now: Vec<AttachedClient>, quiet: bool) -> Moved {
        let was = std::mem::replace(&mut self.elsewhere, now);
        if quiet {
            return Moved::default();
        }
        let known = |list: &[AttachedClient], a: &AttachedClient| {
            list.iter()
                .any(|b| b.client.same(&a.client) && b.role == a.role)
        };
        Moved {
            attached: self
                .elsewhere
                .iter()
                .filter(|a| !known(&was, a))
                .cloned()
                .collect(),
            detached: was
                .iter()
                .filter(|a| !known(&self.elsewhere, a))
                .cloned()
                .collect(),
        }
    }

    fn all(&self) -> impl Iterator<Item = &AttachedClient> {
        self.attached.iter().chain(&self.elsewhere)
    }

    /// Whether `client` is attached only as an observer (an unattached client may act).
    pub fn observer_only(&self, client: &ClientRef) -> bool {
        let mut roles = self
            .all()
            .filter(|a| a.client.same(client))
            .map(|a| a.role)
            .peekable();
        roles.peek().is_some() && roles.all(|r| r != Role::Controller)
    }

    /// Whether some controller is attached, here or on another node.
    pub fn has_controller(&self) -> bool {
        self.all().any(|a| a.role == Role::Controller)
    }

    /// Whether nobody is attached to this daemon (subscribers on other nodes follow the
    /// cluster's log, not this daemon's memory).
    pub fn is_empty(&self) -> bool {
        self.attached.is_empty()
    }

    /// The attached clients, here and elsewhere, for summaries.
    pub fn list(&self) -> Vec<AttachedClient> {
        self.all().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_proto::{ClientKind, ConnectionId};

    fn client(id: u64) -> ClientRef {
        ClientRef {
            client_id: ConnectionId(id),
            kind: ClientKind::Tui,
            name: None,
            node: None,
            principal: None,
            channel: None,
        }
    }

    #[test]
    fn roles_decide_who_may_act() {
        let mut p = Presence::default();
        assert!(!p.observer_only(&client(1)), "an unattached script may act");
        p.attach(client(1), Role::Observer);
        assert!(p.observer_only(&client(1)));
        assert!(!p.has_controller());
        p.attach(client(1), Role::Controller);
        assert!(!p.observer_only(&client(1)));
        assert!(p.has_controller());
        assert!(p.detach(&client(1), Role::Controller));
        assert!(
            !p.detach(&client(1), Role::Controller),
            "only one was attached"
        );
        assert!(p.observer_only(&client(1)));
        assert!(p.detach(&client(1), Role::Observer));
        assert!(p.is_empty());
    }

    fn on(node: &str, id: u64, role: Role) -> AttachedClient {
        let mut client = client(id);
        client.node = Some(node.into());
        AttachedClient { client, role }
    }

    #[test]
    fn clients_on_other_nodes_count_and_their_comings_and_goings_are_told() {
        let mut p = Presence::default();
        p.attach(client(1), Role::Observer);
        // Already there when the session was taken over: nothing to tell.
        let first = p.elsewhere(vec![on("b", 1, Role::Observer)], true);
        assert_eq!(first, Moved::default());
        assert!(!p.has_controller());
        assert!(
            p.observer_only(&on("b", 1, Role::Observer).client),
            "b's client 1 is not this node's client 1"
        );
        let moved = p.elsewhere(
            vec![on("b", 1, Role::Observer), on("c", 1, Role::Controller)],
            false,
        );
        assert_eq!(moved.attached, [on("c", 1, Role::Controller)]);
        assert!(moved.detached.is_empty());
        assert!(p.has_controller(), "a controller on another node answers");
        assert!(!p.observer_only(&on("c", 1, Role::Controller).client));
        assert_eq!(p.list().len(), 3);
        let moved = p.elsewhere(vec![on("c", 1, Role::Controller)], false);
        assert_eq!(moved.detached, [on("b", 1, Role::Observer)]);
        assert!(p.detach(&client(1), Role::Observer));
        assert!(p.is_empty(), "only this node's clients keep it loaded");
    }
}
