//! Principals, their permissions and their flow control.
//!
//! `baton serve --auth FILE` loads an [`AuthFile`]: principals, each with the SHA-256 of its
//! bearer token, `read` / `write` rules on name prefixes per namespace, an `admin` flag and
//! quotas. [`Auth`] holds the rules (swapped whole on reload, so a request sees one version)
//! and each principal's [`Flow`] on this node: its token bucket and its counts of held-open
//! waits and open watches. The middleware [`authenticate`] turns a request's token into an
//! [`Authz`] that handlers ask; the replicated part (lease ownership, quotas on leases and
//! keys) travels with the proposal as a [`Caller`] and is checked by the state machine.

//!
//! Files: `file.rs` (the auth file and its rules), `authz.rs` (what a principal may do),
//! `flow.rs` (the token bucket and held-open counts), `middleware.rs` (authentication).

mod authz;
mod file;
mod flow;
mod middleware;

pub use authz::Authz;
pub(crate) use authz::reloaded;
pub use file::*;
pub use flow::Flow;
pub(crate) use flow::FlowGuard;
pub use middleware::{OPEN_PATHS, authenticate, is_open_path};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

/// The rules in force (reloadable) and every principal's flow on this node.
pub struct Auth {
    path: PathBuf,
    rules: RwLock<Arc<Rules>>,
    flows: Mutex<BTreeMap<String, Arc<Flow>>>,
    /// Counts reloads: open streams and held-open acquires re-check their principal when
    /// it moves ([`Authz::refreshed`]).
    reloads: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("path", &self.path).finish()
    }
}

impl Auth {
    /// Loads the auth file at `path`.
    pub fn load(path: &Path) -> Result<Auth, AuthError> {
        Ok(Auth {
            path: path.to_owned(),
            rules: RwLock::new(Arc::new(read_rules(path)?)),
            flows: Mutex::default(),
            reloads: tokio::sync::watch::Sender::new(0),
        })
    }

    /// Rules given directly (tests, embedding).
    pub fn from_rules(rules: Rules) -> Auth {
        Auth {
            path: PathBuf::new(),
            rules: RwLock::new(Arc::new(rules)),
            flows: Mutex::default(),
            reloads: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Reads the file again; a broken file is refused and the rules in force are kept.
    /// Returns how many principals the new rules have.
    pub fn reload(&self) -> Result<usize, AuthError> {
        let rules = read_rules(&self.path)?;
        let count = rules.len();
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(rules);
        self.reloads.send_modify(|n| *n += 1);
        Ok(count)
    }

    /// Told of every reload (open streams and held-open acquires re-check themselves).
    pub(crate) fn reloads(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reloads.subscribe()
    }

    /// `principal` as the rules in force have it: the entry of the same name and token,
    /// if there still is one.
    pub(super) fn current(&self, principal: &Principal) -> Option<Arc<Principal>> {
        self.rules()
            .principals
            .iter()
            .find(|p| p.name == principal.name && p.token_sha256 == principal.token_sha256)
            .cloned()
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<Rules> {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(super) fn flow(&self, principal: &str) -> Arc<Flow> {
        let mut flows = self.flows.lock().unwrap_or_else(|e| e.into_inner());
        flows.entry(principal.to_owned()).or_default().clone()
    }

    /// Every principal seen since start with its counters, by name.
    pub fn flows(&self) -> Vec<(String, Arc<Flow>)> {
        let flows = self.flows.lock().unwrap_or_else(|e| e.into_inner());
        flows.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_state_machine::EventKind;
    use std::time::Duration;

    const FILE: &str = r#"
        [[principal]]
        name = "orders"
        token_sha256 = "HASH_A"
        rules = [
          { namespace = "locks", prefix = "orders/", access = "write" },
          { namespace = "*", prefix = "shared/", access = "read" },
        ]
        quota = { leases = 2, requests_per_second = 1, burst = 2 }

        [[principal]]
        name = "ops"
        token_sha256 = "HASH_B"
        admin = true
    "#;

    fn rules() -> Rules {
        let text = FILE
            .replace("HASH_A", &token_hash("token-a"))
            .replace("HASH_B", &token_hash("token-b"));
        Rules::parse(&text).unwrap()
    }

    #[test]
    fn tokens_find_their_principal_and_rules_give_what_they_say() {
        let rules = rules();
        assert!(rules.authenticate("nope").is_none());
        let a = rules.authenticate("token-a").unwrap();
        assert_eq!(a.name, "orders");
        assert!(a.allows(Namespace::Locks, "orders/x", Access::Write));
        assert!(a.allows(Namespace::Locks, "orders/x", Access::Read));
        assert!(!a.allows(Namespace::Locks, "billing/x", Access::Read));
        assert!(!a.allows(Namespace::Keys, "orders/x", Access::Read));
        assert!(a.allows(Namespace::Keys, "shared/k", Access::Read));
        assert!(!a.allows(Namespace::Keys, "shared/k", Access::Write));
        assert!(a.allows(Namespace::Watches, "shared/", Access::Read));
        let b = rules.authenticate("token-b").unwrap();
        assert!(b.allows(Namespace::Keys, "anything", Access::Write));
        assert!(!format!("{a:?}").contains(&token_hash("token-a")));
    }

    #[test]
    fn broken_files_are_refused_with_the_reason() {
        let bad = [
            (
                "[[principal]]\nname = \"a b\"\ntoken_sha256 = \"00\"",
                "a name is",
            ),
            (
                "[[principal]]\nname = \"a\"\ntoken_sha256 = \"00\"",
                "64 hex",
            ),
            (
                "[[principal]]\nname = \"a\"\ntoken_sha256 = \"x\"\nextra = 1",
                "unknown field",
            ),
            ("not toml", "expected"),
        ];
        for (text, why) in bad {
            let e = Rules::parse(text).unwrap_err();
            assert!(e.contains(why), "{text:?}: {e}");
        }
        let h = token_hash("t");
        let twice = format!(
            "[[principal]]\nname = \"a\"\ntoken_sha256 = \"{h}\"\n[[principal]]\nname = \"b\"\ntoken_sha256 = \"{h}\""
        );
        assert!(
            Rules::parse(&twice)
                .unwrap_err()
                .contains("shares its token")
        );
        let ns = format!(
            "[[principal]]\nname = \"a\"\ntoken_sha256 = \"{h}\"\nrules = [{{ namespace = \"lockz\", access = \"read\" }}]"
        );
        assert!(Rules::parse(&ns).unwrap_err().contains("lockz"));
    }

    #[test]
    fn an_elections_leader_change_reaches_whoever_may_read_the_election() {
        let rules = Rules::parse(&format!(
            "[[principal]]\nname = \"e\"\ntoken_sha256 = \"{}\"\nrules = [{{ namespace = \"elections\", prefix = \"jobs/\", access = \"read\" }}]",
            token_hash("t")
        ))
        .unwrap();
        let p = rules.authenticate("t").unwrap();
        let authz = Authz::Principal(p, Arc::default());
        let changed = |election: &str| EventKind::LeaderChanged {
            election: election.into(),
            leader: None,
        };
        assert!(authz.sees_event(&changed("jobs/nightly")));
        assert!(!authz.sees_event(&changed("other/nightly")));
    }

    #[test]
    fn the_token_bucket_refuses_past_the_burst_and_the_count_guards_release() {
        let rules = rules();
        let a = rules.authenticate("token-a").unwrap();
        let flow = Arc::new(Flow::default());
        assert!(flow.take(&a.quota).is_ok());
        assert!(flow.take(&a.quota).is_ok());
        let wait = flow.take(&a.quota).unwrap_err();
        assert!(wait <= Duration::from_secs(1));
        let g1 = flow.enter(true, Some(1)).unwrap();
        assert_eq!(flow.enter(true, Some(1)).err(), Some(1));
        drop(g1);
        assert!(flow.enter(true, Some(1)).is_ok());
    }
}
