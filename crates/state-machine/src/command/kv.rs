//! Key commands: put (with compare-and-set on `mod_revision`), sequential create, delete
//! (with compare-and-set) and delete by prefix.

use crate::error::Error;
use crate::ids::{LeaseId, Revision};
use crate::limits::Limits;
use crate::machine::{Ctx, StateMachine};
use crate::outcome::{Rejection, Response};
use serde::{Deserialize, Serialize};

/// Digits of a sequential key's suffix: enough for any u64 revision.
pub const SEQUENCE_DIGITS: usize = 20;

/// Put a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Put {
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
    /// Bind the key to this lease (ephemeral); `None` detaches it from any lease.
    pub lease: Option<LeaseId>,
    /// Compare-and-set: the key's `mod_revision` must equal this; 0 means it must not exist.
    pub prev_revision: Option<Revision>,
}

/// Create a key named `prefix` + a zero-padded, strictly increasing suffix (the revision
/// of the create, 20 digits).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutSequential {
    /// The prefix; the suffix is appended as is, so include a separator if you want one.
    pub prefix: String,
    /// The value.
    pub value: String,
    /// Bind the key to this lease (ephemeral).
    pub lease: Option<LeaseId>,
}

/// Delete a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delete {
    /// The key.
    pub key: String,
    /// Compare-and-set: the key's `mod_revision` must equal this.
    pub prev_revision: Option<Revision>,
}

/// Delete every key under a prefix, in one revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletePrefix {
    /// The prefix; must not be empty (deleting everything takes an explicit txn per range).
    pub prefix: String,
}

impl Put {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        limits.check_name("key", &self.key)?;
        limits.check_value("value", &self.value)
    }

    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        if let Some(lease) = self.lease.filter(|l| !sm.leases.contains_key(l)) {
            return Rejection::LeaseNotFound { lease }.into();
        }
        let current = sm.keys.get(&self.key);
        if let Some(expected) = self.prev_revision {
            let actual = current.map_or(Revision(0), |r| r.mod_revision);
            if actual != expected {
                let current = current.map(|r| r.to_key_value(&self.key));
                return Rejection::CasFailed { current }.into();
            }
        }
        let (create_revision, version) = sm.put_key(ctx, self.key.clone(), self.value, self.lease);
        Response::Put {
            key: self.key,
            create_revision,
            version,
        }
    }
}

impl PutSequential {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        limits.check_name("prefix", &self.prefix)?;
        limits.check_value("value", &self.value)
    }

    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        if let Some(lease) = self.lease.filter(|l| !sm.leases.contains_key(l)) {
            return Rejection::LeaseNotFound { lease }.into();
        }
        let key = format!(
            "{}{:0width$}",
            self.prefix,
            ctx.revision.0,
            width = SEQUENCE_DIGITS
        );
        // Only a key written by hand under the same name can be in the way.
        if let Some(existing) = sm.keys.get(&key) {
            let current = Some(existing.to_key_value(&key));
            return Rejection::CasFailed { current }.into();
        }
        let (create_revision, version) = sm.put_key(ctx, key.clone(), self.value, self.lease);
        Response::Put {
            key,
            create_revision,
            version,
        }
    }
}

impl Delete {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        limits.check_name("key", &self.key)
    }

    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        let Some(record) = sm.keys.get(&self.key) else {
            return Rejection::KeyNotFound { key: self.key }.into();
        };
        if self.prev_revision.is_some_and(|p| p != record.mod_revision) {
            let current = Some(record.to_key_value(&self.key));
            return Rejection::CasFailed { current }.into();
        }
        sm.delete_key(ctx, &self.key);
        Response::Deleted { deleted: 1 }
    }
}

impl DeletePrefix {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        limits.check_name("prefix", &self.prefix)
    }

    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        let mut deleted = 0;
        for key in sm.keys.names_under(&self.prefix) {
            if sm.delete_key(ctx, &key) {
                deleted += 1;
            }
        }
        Response::Deleted { deleted }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::*;
    use crate::*;

    #[test]
    fn put_sets_create_and_mod_revision_and_counts_versions() {
        let mut sm = StateMachine::default();
        put(&mut sm, "k", "a", None);
        let first = sm.get("k").unwrap();
        assert_eq!(first.create_revision, Revision(1));
        assert_eq!(first.mod_revision, Revision(1));
        assert_eq!(first.version, 1);
        put(&mut sm, "k", "b", None);
        let second = sm.get("k").unwrap();
        assert_eq!(second.create_revision, Revision(1));
        assert_eq!(second.mod_revision, Revision(2));
        assert_eq!(second.version, 2);
        assert_eq!(second.value, "b");
    }

    #[test]
    fn cas_put_on_mod_revision_succeeds_only_on_a_match() {
        let mut sm = StateMachine::default();
        let create = |prev| {
            Command::Put(Put {
                key: "k".into(),
                value: "v".into(),
                lease: None,
                prev_revision: Some(Revision(prev)),
            })
        };
        assert!(matches!(
            sm.apply_command(create(0)).response,
            Response::Put { .. }
        ));
        let before = sm.clone();
        let refused = sm.apply_command(create(0)).response;
        let Response::Rejected(Rejection::CasFailed { current: Some(kv) }) = refused else {
            panic!("expected cas_failed, got {refused:?}");
        };
        assert_eq!(kv.mod_revision, Revision(1));
        assert_eq!(sm, before, "a failed CAS changes nothing");
        assert!(matches!(
            sm.apply_command(create(1)).response,
            Response::Put { .. }
        ));
    }

    #[test]
    fn ephemeral_key_needs_a_live_lease_and_goes_with_it() {
        let mut sm = StateMachine::default();
        let refused = put_response(&mut sm, "k", "v", Some(LeaseId(5)));
        assert_eq!(
            refused,
            Response::Rejected(Rejection::LeaseNotFound { lease: LeaseId(5) })
        );
        let lease = grant(&mut sm, 10_000);
        put(&mut sm, "k", "v", Some(lease));
        assert_eq!(sm.lease(lease).unwrap().keys, vec!["k".to_string()]);
        revoke(&mut sm, lease);
        assert!(sm.get("k").is_none());
    }

    #[test]
    fn put_without_lease_detaches_an_ephemeral_key() {
        let mut sm = StateMachine::default();
        let lease = grant(&mut sm, 10_000);
        put(&mut sm, "k", "v", Some(lease));
        put(&mut sm, "k", "w", None);
        revoke(&mut sm, lease);
        assert_eq!(sm.get("k").unwrap().value, "w");
    }

    #[test]
    fn sequential_keys_have_zero_padded_strictly_increasing_suffixes() {
        let mut sm = StateMachine::default();
        let mut names = Vec::new();
        for _ in 0..3 {
            let applied = sm.apply_command(Command::PutSequential(PutSequential {
                prefix: "jobs/".into(),
                value: "x".into(),
                lease: None,
            }));
            let Response::Put { key, .. } = applied.response else {
                panic!("expected a put");
            };
            names.push(key);
            put(&mut sm, "other", "y", None);
        }
        assert_eq!(names[0], "jobs/00000000000000000001");
        assert!(names.windows(2).all(|w| w[0] < w[1]));
        assert!(names.iter().all(|n| n.len() == "jobs/".len() + 20));
    }

    #[test]
    fn delete_with_cas_and_missing_keys() {
        let mut sm = StateMachine::default();
        let del = |prev| {
            Command::Delete(Delete {
                key: "k".into(),
                prev_revision: prev,
            })
        };
        assert_eq!(
            sm.apply_command(del(None)).response,
            Response::Rejected(Rejection::KeyNotFound { key: "k".into() })
        );
        put(&mut sm, "k", "v", None);
        assert!(matches!(
            sm.apply_command(del(Some(Revision(9)))).response,
            Response::Rejected(Rejection::CasFailed { .. })
        ));
        assert_eq!(
            sm.apply_command(del(Some(Revision(1)))).response,
            Response::Deleted { deleted: 1 }
        );
        assert!(sm.get("k").is_none());
    }

    #[test]
    fn delete_by_prefix_is_one_revision_and_range_by_prefix_is_ordered() {
        let mut sm = StateMachine::default();
        for k in ["a/2", "a/1", "b/1", "a/3"] {
            put(&mut sm, k, "v", None);
        }
        let (kvs, more) = sm.range("a/", 2);
        assert_eq!(
            kvs.iter().map(|kv| kv.key.as_str()).collect::<Vec<_>>(),
            ["a/1", "a/2"]
        );
        assert!(more);
        let applied = sm.apply_command(Command::DeletePrefix(DeletePrefix {
            prefix: "a/".into(),
        }));
        assert_eq!(applied.response, Response::Deleted { deleted: 3 });
        assert_eq!(applied.revision, Revision(5));
        assert_eq!(applied.events.len(), 3);
        assert_eq!(sm.range("", 10).0.len(), 1);
    }
}
