//! A session's settings and what it reports about itself: `session/configure`, who else has a
//! role in it (`session/share`, `session/unshare`), generated titles, the permission rules in effect (read from the settings files each time, so edits
//! apply at once, plus the rules answers added), and the snapshot.
//!
//! Invariant: a setting changes only with a `session_configured` event that says what changed;
//! a configure that changes nothing logs nothing.

use super::actor::SessionActor;
use super::{Configure, SessionError};
use tether_proto::{
    ClientRef, EventKind, RuleKind, SessionRole, SessionSnapshot, SessionSummary, Share,
};
use tokio::sync::oneshot;

impl SessionActor {
    /// `session/configure`: applies what differs from the current settings; answered once the
    /// change is durable.
    pub(super) fn configure(
        &mut self,
        change: Configure,
        by: Option<ClientRef>,
        reply: oneshot::Sender<Result<SessionSummary, SessionError>>,
    ) {
        if by.as_ref().is_some_and(|b| self.presence.observer_only(b)) {
            let _ = reply.send(Err(SessionError::NotController));
            return;
        }
        let record = &self.journal.record;
        let title = change
            .title
            .filter(|t| record.title.as_deref() != Some(t.as_str()));
        let model = change.model.filter(|m| *m != record.model);
        let permission_mode = change
            .permission_mode
            .filter(|m| *m != record.permission_mode);
        let on_no_controller = change
            .on_no_controller
            .filter(|p| *p != record.on_no_controller);
        // Set again even when unchanged: that is how a session paused at its budget goes on.
        let budget_usd = change
            .budget_usd
            .filter(|b| *b != record.budget_usd.unwrap_or(0.0) || self.ledger.budget_reached);
        if title.is_none()
            && model.is_none()
            && permission_mode.is_none()
            && on_no_controller.is_none()
            && budget_usd.is_none()
        {
            let _ = reply.send(Ok(self.summary()));
            return;
        }
        let record = &mut self.journal.record;
        if let Some(t) = &title {
            record.title = Some(t.clone());
        }
        if let Some(m) = &model {
            record.model = m.clone();
        }
        if let Some(m) = permission_mode {
            record.permission_mode = m;
        }
        if let Some(p) = on_no_controller {
            record.on_no_controller = p;
        }
        if let Some(b) = budget_usd {
            record.budget_usd = (b > 0.0).then_some(b);
            self.turns.set_budget(record.budget_usd);
        }
        self.journal.touch();
        if on_no_controller.is_some() {
            self.arm_no_controller();
        }
        let kind = EventKind::SessionConfigured {
            title,
            model,
            effort: None,
            permission_mode,
            on_no_controller,
            budget_usd,
            by,
        };
        match self.try_emit(kind, None) {
            Ok(()) => {
                let summary = self.summary();
                self.journal.reply_after_commit(reply, move || summary);
                // Prompts that waited at the budget go on.
                if budget_usd.is_some() {
                    self.start_next();
                }
            }
            Err(e) => drop(reply.send(Err(e))),
        }
    }

    /// `session/share` (`role` set) and `session/unshare`: the record's shares change with a
    /// `session_shared` or `session_unshared` event; answered with everyone's roles once
    /// durable. Giving someone the role they have logs nothing.
    pub(super) fn share(
        &mut self,
        principal: String,
        role: Option<SessionRole>,
        by: Option<ClientRef>,
        reply: oneshot::Sender<Result<Vec<Share>, SessionError>>,
    ) {
        let shares = &mut self.journal.record.shares;
        let had = shares.iter().position(|s| s.principal == principal);
        let kind = match (role, had) {
            (Some(role), Some(i)) if shares[i].role == role => {
                let _ = reply.send(Ok(shares.clone()));
                return;
            }
            (Some(role), Some(i)) => {
                shares[i].role = role.clone();
                EventKind::SessionShared {
                    principal,
                    role,
                    by,
                }
            }
            (Some(role), None) => {
                shares.push(Share {
                    principal: principal.clone(),
                    role: role.clone(),
                });
                shares.sort_by(|a, b| a.principal.cmp(&b.principal));
                EventKind::SessionShared {
                    principal,
                    role,
                    by,
                }
            }
            (None, Some(i)) => {
                let gone = shares.remove(i);
                EventKind::SessionUnshared {
                    principal,
                    role: gone.role,
                    by,
                }
            }
            (None, None) => {
                let _ = reply.send(Err(SessionError::NotShared(principal)));
                return;
            }
        };
        self.journal.touch();
        match self.try_emit(kind, None) {
            Ok(()) => {
                let shares = self.journal.record.shares.clone();
                self.journal.reply_after_commit(reply, move || shares);
            }
            Err(e) => drop(reply.send(Err(e))),
        }
    }

    /// The session's own change of permission mode (plan mode entered or approved to leave),
    /// logged as a `session_configured` with no client.
    pub(super) fn switch_mode(&mut self, mode: tether_proto::PermissionMode) {
        let change = Configure {
            permission_mode: Some(mode),
            ..Default::default()
        };
        let (reply, _) = oneshot::channel();
        self.configure(change, None, reply);
    }

    /// A generated title, unless the session got one meanwhile.
    pub(super) fn titled(&mut self, title: String) {
        self.titling = false;
        if self.journal.record.title.is_some() {
            return;
        }
        self.journal.record.title = Some(title.clone());
        self.journal.touch();
        self.emit(EventKind::SessionConfigured {
            title: Some(title),
            model: None,
            effort: None,
            permission_mode: None,
            on_no_controller: None,
            budget_usd: None,
            by: None,
        });
    }

    /// Tells every client about a settings problem, once per load.
    pub(super) fn report(&mut self, problem: String) {
        if self.reported.insert(problem.clone()) {
            self.emit(EventKind::Notice {
                level: tether_proto::NoticeLevel::Warning,
                message: problem,
            });
        }
    }

    /// The session's rules now: the settings files plus the rules answers added and the
    /// running turn's `allowedTools`. New problems in the files are reported once.
    pub(super) fn rules(&mut self) -> crate::permissions::RuleSet {
        let root = std::path::PathBuf::from(&self.journal.record.cwd);
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let mut rules = crate::permissions::load_settings(&root, home.as_deref());
        rules.add(
            "allow",
            self.ledger.session_rules(),
            &root,
            home.as_deref(),
            "session",
        );
        rules
            .additional_dirs
            .extend(self.turns.dirs().iter().cloned());
        if let Some(settings) = self.turns.settings() {
            rules.add_settings(settings, &root, home.as_deref(), "--settings");
        }
        rules.add(
            "allow",
            self.turns.allow(),
            &root,
            home.as_deref(),
            "this turn's allowedTools",
        );
        rules.add(
            "deny",
            self.turns.deny(),
            &root,
            home.as_deref(),
            "this turn's disallowedTools",
        );
        for problem in rules.problems.clone() {
            self.report(problem);
        }
        rules
    }

    /// `permission/rules`: the mode and every rule with its source.
    pub(super) fn rules_report(&mut self) -> tether_proto::PermissionRules {
        let rules = self.rules();
        let entries = [
            (RuleKind::Deny, &rules.deny),
            (RuleKind::Ask, &rules.ask),
            (RuleKind::Allow, &rules.allow),
        ]
        .into_iter()
        .flat_map(|(kind, list)| {
            list.iter().map(move |r| tether_proto::RuleEntry {
                kind: kind.clone(),
                rule: r.text.clone(),
                source: r.source.clone(),
            })
        })
        .collect();
        tether_proto::PermissionRules {
            mode: self.journal.record.permission_mode,
            rules: entries,
            additional_directories: rules
                .additional_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect(),
            problems: rules.problems,
        }
    }

    /// `session/get`: the summary, pending requests, totals and the running turn.
    pub(super) fn snapshot(&self) -> SessionSnapshot {
        SessionSnapshot {
            summary: self.summary(),
            pending_permissions: self.ledger.open_requests(),
            usage: self.ledger.usage,
            cost_usd: self.ledger.cost_usd,
            budget_usd: self.journal.record.budget_usd,
            budget_reached: self.ledger.budget_reached,
            running_turn: self.turns.running_id().cloned(),
        }
    }
}
