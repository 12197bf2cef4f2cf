//! Who is attached to a session, in which role: the list `session/get` shows, and the questions
//! the actor asks of it (may this client act? is anyone able to answer a permission request?).
//!
//! Invariant: one entry per subscription; a client attached twice (say as observer and
//! controller) has two entries and may act if either is a controller.

use tether_proto::{AttachedClient, ClientRef, Role};

/// The subscriptions of one session.
#[derive(Default)]
pub struct Presence {
    attached: Vec<AttachedClient>,
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
            .position(|a| a.client.client_id == client.client_id && a.role == role)
        {
            Some(i) => {
                self.attached.remove(i);
                true
            }
            None => false,
        }
    }

    /// Whether `client` is attached only as an observer (an unattached client may act).
    pub fn observer_only(&self, client: &ClientRef) -> bool {
        let mut roles = self
            .attached
            .iter()
            .filter(|a| a.client.client_id == client.client_id)
            .map(|a| a.role)
            .peekable();
        roles.peek().is_some() && roles.all(|r| r != Role::Controller)
    }

    /// Whether some controller is attached.
    pub fn has_controller(&self) -> bool {
        self.attached.iter().any(|a| a.role == Role::Controller)
    }

    /// Whether nobody is attached.
    pub fn is_empty(&self) -> bool {
        self.attached.is_empty()
    }

    /// The attached clients, for summaries.
    pub fn list(&self) -> Vec<AttachedClient> {
        self.attached.clone()
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
}
