//! Who proposed a command, when the API authenticates: the principal owns the leases it
//! grants and the keys it writes, and its quotas are checked where they cannot race, in
//! `apply` (two nodes granting at once still see one count).

use crate::command::{Command, TxnOp};
use crate::ids::LeaseId;
use crate::machine::StateMachine;
use crate::outcome::Rejection;
use crate::resource::ResourceId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The authenticated principal behind a proposal, with its replicated quotas.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    /// The principal's name (from the auth file).
    pub principal: String,
    /// Admins may use any lease and force-release.
    pub admin: bool,
    /// Its limits on replicated state.
    pub quota: Quota,
}

/// Limits on what one principal may own at once (`None`: no limit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    /// Live leases.
    pub leases: Option<u64>,
    /// Keys written by the principal and still present.
    pub keys: Option<u64>,
    /// Bytes (key + value) of those keys.
    pub key_bytes: Option<u64>,
    /// Holds and queue places of its leases (locks, semaphores, elections), those a 202
    /// keeps included.
    pub claims: Option<u64>,
    /// Bytes of its claims' owner strings and election values, and of the idempotency
    /// outcomes its leases keep.
    pub state_bytes: Option<u64>,
}

/// What one principal owns now; entries at zero are removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Live leases it granted.
    pub leases: u64,
    /// Keys it wrote last.
    pub keys: u64,
    /// Their bytes (key + value).
    pub key_bytes: u64,
    /// Holds and queue places of its leases.
    pub claims: u64,
    /// Bytes of their owner strings and election values.
    pub claim_bytes: u64,
    /// Bytes of the idempotency outcomes its leases keep.
    pub outcome_bytes: u64,
}

impl Usage {
    /// The bytes [`Quota::state_bytes`] limits.
    pub fn state_bytes(&self) -> u64 {
        self.claim_bytes.saturating_add(self.outcome_bytes)
    }
}

/// Runs `f` on `principal`'s entry of `usage` (allocating its name only for a new entry),
/// and drops the entry once it is all zero. A free function, so that callers holding a
/// lease of the same machine can charge its owner without copying the name.
pub(crate) fn usage_in(
    usage: &mut BTreeMap<String, Usage>,
    principal: &str,
    f: impl FnOnce(&mut Usage),
) {
    match usage.get_mut(principal) {
        Some(entry) => {
            f(entry);
            if entry.is_zero() {
                usage.remove(principal);
            }
        }
        None => {
            let mut entry = Usage::default();
            f(&mut entry);
            if !entry.is_zero() {
                usage.insert(principal.to_owned(), entry);
            }
        }
    }
}

/// Adds (`add`) or takes back `claims` and their `bytes` in `owner`'s entry of `usage`.
pub(crate) fn charge_claims_in(
    usage: &mut BTreeMap<String, Usage>,
    owner: &str,
    claims: u64,
    bytes: u64,
    add: bool,
) {
    usage_in(usage, owner, |u| {
        if add {
            u.claims += claims;
            u.claim_bytes += bytes;
        } else {
            u.claims = u.claims.saturating_sub(claims);
            u.claim_bytes = u.claim_bytes.saturating_sub(bytes);
        }
    });
}

/// The bytes a claim counts for in quotas: its owner string and its election value.
pub(crate) fn claim_bytes(owner: &str, value_len: usize) -> u64 {
    (owner.len() + value_len) as u64
}

/// An idempotency outcome larger than this is never kept under its lease (it goes to the
/// shared window, bounded in bytes as a whole), so what one lease keeps is bounded in
/// bytes as well as in count.
pub const OWNED_OUTCOME_BYTES_MAX: usize = 4 << 10;

impl Usage {
    fn is_zero(&self) -> bool {
        *self == Usage::default()
    }
}

/// The bytes a key counts for in quotas.
pub(crate) fn key_bytes(key: &str, value: &str) -> u64 {
    (key.len() + value.len()) as u64
}

impl Command {
    /// Every lease the command uses or ends (ownership is checked on each).
    pub(crate) fn leases_used(&self) -> Vec<LeaseId> {
        let mut leases: Vec<LeaseId> = self.lease().into_iter().collect();
        match self {
            Command::LeaseRevoke(c) => leases.push(c.lease),
            Command::Txn(txn) => {
                for op in txn.success.iter().chain(&txn.failure) {
                    if let TxnOp::Put {
                        lease: Some(lease), ..
                    } = op
                    {
                        leases.push(*lease);
                    }
                }
            }
            _ => {}
        }
        leases
    }
}

impl StateMachine {
    /// What `principal` owns now.
    pub fn usage(&self, principal: &str) -> Usage {
        self.usage.get(principal).copied().unwrap_or_default()
    }

    pub(crate) fn usage_mut(&mut self, principal: &str, f: impl FnOnce(&mut Usage)) {
        usage_in(&mut self.usage, principal, f);
    }

    /// Adds (`add`) or takes back claims and their bytes for the principal that owns
    /// `lease` (nothing for a lease granted without authentication, or gone).
    pub(crate) fn charge_claims(
        &mut self,
        owner: Option<&str>,
        claims: u64,
        bytes: u64,
        add: bool,
    ) {
        if let Some(owner) = owner {
            charge_claims_in(&mut self.usage, owner, claims, bytes, add);
        }
    }

    /// Adds or takes back the bytes of an idempotency outcome a lease of `owner` keeps.
    pub(crate) fn charge_outcome(&mut self, owner: &str, bytes: u64, add: bool) {
        self.usage_mut(owner, |u| {
            if add {
                u.outcome_bytes += bytes;
            } else {
                u.outcome_bytes = u.outcome_bytes.saturating_sub(bytes);
            }
        });
    }

    /// The principal that granted `lease`, if it is live and was granted with one.
    pub(crate) fn lease_principal(&self, lease: LeaseId) -> Option<String> {
        self.leases
            .get(&lease)
            .and_then(|l| l.owner.as_deref().map(str::to_owned))
    }

    /// Adds (or takes back) one key of `bytes` to `owner`'s usage.
    pub(crate) fn charge_key(&mut self, owner: &str, bytes: u64, add: bool) {
        self.usage_mut(owner, |u| {
            if add {
                u.keys += 1;
                u.key_bytes += bytes;
            } else {
                u.keys = u.keys.saturating_sub(1);
                u.key_bytes = u.key_bytes.saturating_sub(bytes);
            }
        });
    }

    /// The principal that granted a lease: `None` if there is no such lease,
    /// `Some(None)` if it was granted without authentication.
    pub fn lease_owner(&self, lease: LeaseId) -> Option<Option<&str>> {
        self.leases.get(&lease).map(|l| l.owner.as_deref())
    }

    /// Refuses a command its caller may not run: another principal's lease (or one granted
    /// without authentication), a force-release by a non-admin, or a quota it would pass.
    /// Leases that do not exist are left to the command (it answers `lease_not_found`).
    pub(crate) fn authorize(&self, caller: &Caller, command: &Command) -> Result<(), Rejection> {
        if caller.admin {
            return Ok(());
        }
        if matches!(command, Command::ForceRelease(_)) || command.from_leader_clock() {
            return Err(Rejection::PermissionDenied {
                reason: format!("{} needs admin rights", command.kind()),
            });
        }
        for lease in command.leases_used() {
            if let Some(owner) = self.lease_owner(lease)
                && owner != Some(caller.principal.as_str())
            {
                return Err(Rejection::PermissionDenied {
                    reason: format!("lease {lease} belongs to another principal"),
                });
            }
        }
        self.check_quota(caller, command)
    }

    fn check_quota(&self, caller: &Caller, command: &Command) -> Result<(), Rejection> {
        let usage = self.usage(&caller.principal);
        let quota = caller.quota;
        if let (Command::LeaseGrant(_), Some(max)) = (command, quota.leases)
            && usage.leases >= max
        {
            return Err(Rejection::QuotaExceeded {
                resource: "leases".into(),
                limit: max,
            });
        }
        if quota.claims.is_some() || quota.state_bytes.is_some() {
            let (claims, bytes) = self.claim_growth(command);
            if let Some(max) = quota.claims
                && claims > 0
                && usage.claims.saturating_add(claims) > max
            {
                return Err(Rejection::QuotaExceeded {
                    resource: "claims".into(),
                    limit: max,
                });
            }
            if let Some(max) = quota.state_bytes
                && bytes > 0
                && usage.state_bytes().saturating_add(bytes as u64) > max
            {
                return Err(Rejection::QuotaExceeded {
                    resource: "state_bytes".into(),
                    limit: max,
                });
            }
        }
        if quota.keys.is_none() && quota.key_bytes.is_none() {
            return Ok(());
        }
        let (new_keys, new_bytes) = self.key_growth(&caller.principal, command);
        let over = |used: u64, growth: i64, limit: Option<u64>| {
            limit.filter(|&max| growth > 0 && used.saturating_add(growth as u64) > max)
        };
        if let Some(max) = over(usage.keys, new_keys, quota.keys) {
            return Err(Rejection::QuotaExceeded {
                resource: "keys".into(),
                limit: max,
            });
        }
        if let Some(max) = over(usage.key_bytes, new_bytes, quota.key_bytes) {
            return Err(Rejection::QuotaExceeded {
                resource: "key_bytes".into(),
                limit: max,
            });
        }
        Ok(())
    }

    /// How many claims and claim bytes a command may add: one claim (owner and value) for
    /// an acquire or a campaign that its lease does not already hold or wait for, the
    /// growth of the value for a proclaim.
    fn claim_growth(&self, command: &Command) -> (u64, i64) {
        let new_claim = |id: ResourceId, lease: LeaseId, owner: &str, value_len: usize| {
            let exists = self
                .leases
                .get(&lease)
                .is_some_and(|l| l.claims.contains(&crate::lease::ClaimRef::new(&id, owner)));
            if exists {
                (0, 0)
            } else {
                (1, claim_bytes(owner, value_len) as i64)
            }
        };
        match command {
            Command::LockAcquire(c) => {
                new_claim(ResourceId::lock(c.name.as_str()), c.lease, &c.owner, 0)
            }
            Command::SemaphoreAcquire(c) => {
                new_claim(ResourceId::semaphore(c.name.as_str()), c.lease, &c.owner, 0)
            }
            Command::Campaign(c) => new_claim(
                ResourceId::election(c.name.as_str()),
                c.lease,
                "",
                c.value.len(),
            ),
            Command::Proclaim(c) => {
                let old = self
                    .election_leader(&c.name)
                    .filter(|l| l.lease == c.lease)
                    .map_or(0, |l| l.value.len());
                (0, c.value.len() as i64 - old as i64)
            }
            _ => (0, 0),
        }
    }

    /// How many keys and bytes a command may add to `principal`'s usage: exact for single
    /// writes, an upper bound for transactions (the puts of both branches; deletes are not
    /// subtracted).
    fn key_growth(&self, principal: &str, command: &Command) -> (i64, i64) {
        let put = |key: &str, value: &str| -> (i64, i64) {
            let new = key_bytes(key, value) as i64;
            match self.keys.records.get(key) {
                Some(r) if r.owner.as_deref() == Some(principal) => {
                    (0, new - key_bytes(key, &r.value) as i64)
                }
                _ => (1, new),
            }
        };
        match command {
            Command::Put(c) => put(&c.key, &c.value),
            // The sequential suffix is 20 digits.
            Command::PutSequential(c) => (1, key_bytes(&c.prefix, &c.value) as i64 + 20),
            Command::Txn(txn) => txn
                .success
                .iter()
                .chain(&txn.failure)
                .filter_map(|op| match op {
                    TxnOp::Put { key, value, .. } => Some(put(key, value)),
                    _ => None,
                })
                .fold((0, 0), |(k, b), (dk, db)| (k + dk, b + db.max(0))),
            _ => (0, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::*;
    use crate::*;

    fn caller(name: &str, quota: Quota) -> Option<Caller> {
        Some(Caller {
            principal: name.into(),
            admin: false,
            quota,
        })
    }

    fn as_caller(sm: &mut StateMachine, who: &Option<Caller>, command: Command) -> Response {
        sm.apply(Proposal {
            idempotency_key: None,
            command,
            caller: who.clone(),
        })
        .response
    }

    fn lease_of(sm: &mut StateMachine, who: &Option<Caller>) -> LeaseId {
        match as_caller(sm, who, Command::LeaseGrant(LeaseGrant { ttl_ms: 10_000 })) {
            Response::LeaseGranted { lease, .. } => lease,
            other => panic!("grant refused: {other:?}"),
        }
    }

    #[test]
    fn another_principals_lease_cannot_be_used_revoked_or_written_with() {
        let mut sm = StateMachine::default();
        let a = caller("a", Quota::default());
        let b = caller("b", Quota::default());
        let lease = lease_of(&mut sm, &a);
        let before = sm.clone();
        let commands = [
            Command::LeaseRevoke(LeaseRevoke { lease }),
            Command::LockAcquire(LockAcquire {
                name: "L".into(),
                lease,
                owner: "o".into(),
                mode: Mode::Exclusive,
                wait_ms: 0,
                lock_delay_ms: 0,
            }),
            Command::Put(Put {
                key: "k".into(),
                value: "v".into(),
                lease: Some(lease),
                prev_revision: None,
            }),
            Command::ForceRelease(ForceRelease {
                resource: ResourceId::lock("L"),
            }),
        ];
        for command in commands {
            let response = as_caller(&mut sm, &b, command.clone());
            assert!(
                matches!(
                    response,
                    Response::Rejected(Rejection::PermissionDenied { .. })
                ),
                "{command:?}: {response:?}"
            );
            assert_eq!(sm, before, "a refusal changes nothing");
        }
        let admin = Some(Caller {
            principal: "ops".into(),
            admin: true,
            quota: Quota::default(),
        });
        let response = as_caller(&mut sm, &admin, Command::LeaseRevoke(LeaseRevoke { lease }));
        assert!(matches!(response, Response::LeaseEnded { .. }));
    }

    #[test]
    fn leases_granted_without_a_caller_are_only_for_admins_once_callers_are_named() {
        let mut sm = StateMachine::default();
        let lease = grant(&mut sm, 10_000);
        let a = caller("a", Quota::default());
        let response = as_caller(&mut sm, &a, Command::LeaseRevoke(LeaseRevoke { lease }));
        assert!(matches!(
            response,
            Response::Rejected(Rejection::PermissionDenied { .. })
        ));
    }

    #[test]
    fn quotas_on_leases_keys_and_bytes_refuse_and_change_nothing_and_free_on_delete() {
        let mut sm = StateMachine::default();
        let quota = Quota {
            leases: Some(1),
            keys: Some(2),
            key_bytes: Some(10),
            ..Quota::default()
        };
        let a = caller("a", quota);
        let lease = lease_of(&mut sm, &a);
        let before = sm.clone();
        let refused = as_caller(&mut sm, &a, Command::LeaseGrant(LeaseGrant { ttl_ms: 10 }));
        assert_eq!(
            refused,
            Response::Rejected(Rejection::QuotaExceeded {
                resource: "leases".into(),
                limit: 1
            })
        );
        assert_eq!(sm, before);
        let put = |key: &str, value: &str| {
            Command::Put(Put {
                key: key.into(),
                value: value.into(),
                lease: None,
                prev_revision: None,
            })
        };
        assert!(matches!(
            as_caller(&mut sm, &a, put("k1", "abc")),
            Response::Put { .. }
        ));
        // Overwriting its own key counts the difference only.
        assert!(matches!(
            as_caller(&mut sm, &a, put("k1", "abcd")),
            Response::Put { .. }
        ));
        assert_eq!(sm.usage("a").keys, 1);
        assert_eq!(sm.usage("a").key_bytes, 6);
        let before = sm.clone();
        let too_big = as_caller(&mut sm, &a, put("k2", "abcdefgh"));
        assert!(matches!(
            too_big,
            Response::Rejected(Rejection::QuotaExceeded { ref resource, .. }) if resource == "key_bytes"
        ));
        assert_eq!(sm, before);
        assert!(matches!(
            as_caller(&mut sm, &a, put("k2", "x")),
            Response::Put { .. }
        ));
        let third = as_caller(&mut sm, &a, put("k3", ""));
        assert!(matches!(
            third,
            Response::Rejected(Rejection::QuotaExceeded { ref resource, .. }) if resource == "keys"
        ));
        // Another principal's quota is its own.
        let b = caller("b", quota);
        assert!(matches!(
            as_caller(&mut sm, &b, put("k3", "")),
            Response::Put { .. }
        ));
        // Deleting and revoking give the room back.
        as_caller(
            &mut sm,
            &a,
            Command::Delete(Delete {
                key: "k1".into(),
                prev_revision: None,
            }),
        );
        assert_eq!(sm.usage("a").keys, 1);
        as_caller(&mut sm, &a, Command::LeaseRevoke(LeaseRevoke { lease }));
        assert_eq!(sm.usage("a").leases, 0);
        lease_of(&mut sm, &a);
        sm.check_invariants();
    }

    #[test]
    fn holds_queue_places_owner_strings_and_election_values_count_against_quotas() {
        let mut sm = StateMachine::default();
        let quota = Quota {
            claims: Some(2),
            state_bytes: Some(24),
            ..Quota::default()
        };
        let a = caller("a", quota);
        let lease = lease_of(&mut sm, &a);
        let other = lease_of(&mut sm, &caller("b", Quota::default()));
        let acquire = |name: &str, lease: LeaseId, owner: &str, wait_ms: u64| {
            Command::LockAcquire(LockAcquire {
                name: name.into(),
                lease,
                owner: owner.into(),
                mode: Mode::Exclusive,
                wait_ms,
                lock_delay_ms: 0,
            })
        };
        // A hold (owner "w1": 2 bytes) and a queue place behind b's hold (owner "w2").
        assert!(matches!(
            as_caller(&mut sm, &a, acquire("L1", lease, "w1", 0)),
            Response::Granted(_)
        ));
        let b = caller("b", Quota::default());
        assert!(matches!(
            as_caller(&mut sm, &b, acquire("L2", other, "x", 0)),
            Response::Granted(_)
        ));
        assert!(matches!(
            as_caller(&mut sm, &a, acquire("L2", lease, "w2", 60_000)),
            Response::Queued { .. }
        ));
        assert_eq!((sm.usage("a").claims, sm.usage("a").claim_bytes), (2, 4));
        // Re-entry adds no claim; a third claim is over the quota and changes nothing.
        assert!(matches!(
            as_caller(&mut sm, &a, acquire("L1", lease, "w1", 0)),
            Response::Granted(_)
        ));
        let before = sm.clone();
        let refused = as_caller(&mut sm, &a, acquire("L3", lease, "w3", 0));
        assert!(
            matches!(refused, Response::Rejected(Rejection::QuotaExceeded { ref resource, .. }) if resource == "claims"),
            "{refused:?}"
        );
        assert_eq!(sm, before);
        // Releasing gives the claim back; an election value counts its bytes.
        // (Acquired twice: released twice.)
        for _ in 0..2 {
            let release = Release {
                name: "L1".into(),
                lease,
                owner: "w1".into(),
                fence: None,
            };
            as_caller(&mut sm, &a, Command::LockRelease(release));
        }
        assert_eq!(sm.usage("a").claims, 1);
        let campaign = |value: &str| {
            Command::Campaign(Campaign {
                name: "E".into(),
                lease,
                value: value.into(),
                wait_ms: 0,
            })
        };
        let big = as_caller(&mut sm, &a, campaign(&"v".repeat(30)));
        assert!(
            matches!(big, Response::Rejected(Rejection::QuotaExceeded { ref resource, .. }) if resource == "state_bytes"),
            "{big:?}"
        );
        assert!(matches!(
            as_caller(&mut sm, &a, campaign("v10")),
            Response::Granted(_)
        ));
        assert_eq!(sm.usage("a").claim_bytes, 2 + 3);
        // The lease's end gives everything back.
        as_caller(&mut sm, &a, Command::LeaseRevoke(LeaseRevoke { lease }));
        assert_eq!(sm.usage("a"), Usage::default());
        sm.check_invariants();
    }
}
