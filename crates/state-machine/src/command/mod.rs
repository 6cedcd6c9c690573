//! The [`Command`] enum: every mutation the log can carry, one module per family.
//! Each payload validates itself against [`Limits`] (at the edge, before proposing) and
//! applies itself to the [`StateMachine`] (in log order, on every node).

mod election;
mod kv;
mod lease;
mod lock;
mod semaphore;
mod txn;
mod wait;

pub use election::{Campaign, Proclaim, Resign};
pub use kv::{Delete, DeletePrefix, Put, PutSequential};
pub use lease::{LeaseCheckpoint, LeaseExpire, LeaseGrant, LeaseRevoke};
pub use lock::{ForceRelease, LockAcquire, Mode, Release};
pub use semaphore::SemaphoreAcquire;
pub use txn::{Compare, CompareOp, CompareTarget, Txn, TxnOp};
pub use wait::{AcquireTimeout, Cancel, LockDelayElapsed};

use crate::caller::Caller;
use crate::error::Error;
use crate::ids::LeaseId;
use crate::limits::Limits;
use crate::machine::{Ctx, StateMachine};
use crate::outcome::Response;
use crate::resource::{ResourceId, ResourceKind};
use serde::{Deserialize, Serialize};

/// A command with its optional idempotency key: the unit the log carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    /// The client's `Idempotency-Key`: a repeat returns the first outcome.
    pub idempotency_key: Option<String>,
    /// The mutation.
    pub command: Command,
    /// The authenticated principal behind it (`None`: the API runs without auth, or the
    /// leader's own clock proposed it).
    #[serde(default)]
    pub caller: Option<Caller>,
}

impl From<Command> for Proposal {
    fn from(command: Command) -> Proposal {
        Proposal {
            idempotency_key: None,
            command,
            caller: None,
        }
    }
}

impl Proposal {
    /// Checks the key and the command against the spec §3 limits.
    pub fn validate(&self, limits: &Limits) -> Result<(), Error> {
        if let Some(key) = &self.idempotency_key {
            limits.check_idempotency_key(key)?;
        }
        self.command.validate(limits)
    }

    /// [`Proposal::validate`], and refuses the commands only the leader's own clock may
    /// issue: everything a client or a peer sends goes through this.
    pub fn validate_from_outside(&self, limits: &Limits) -> Result<(), Error> {
        if self.command.from_leader_clock() {
            return Err(Error::invalid(
                "command",
                format!(
                    "{} is issued only by the leader's own clock",
                    self.command.kind()
                ),
            ));
        }
        self.validate(limits)
    }
}

/// Every mutation of the state machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Grant a lease.
    LeaseGrant(LeaseGrant),
    /// Revoke a lease and everything it owns.
    LeaseRevoke(LeaseRevoke),
    /// Expire a lease (proposed by the leader's lease clock).
    LeaseExpire(LeaseExpire),
    /// Record remaining TTLs (proposed by the leader's lease clock).
    LeaseCheckpoint(LeaseCheckpoint),
    /// Put a key, optionally compare-and-set on `mod_revision`.
    Put(Put),
    /// Create a sequential key under a prefix.
    PutSequential(PutSequential),
    /// Delete a key, optionally compare-and-set.
    Delete(Delete),
    /// Delete every key under a prefix.
    DeletePrefix(DeletePrefix),
    /// An etcd-style transaction.
    Txn(Txn),
    /// Acquire a lock.
    LockAcquire(LockAcquire),
    /// Release a lock (or cancel a queued acquire).
    LockRelease(Release),
    /// Acquire semaphore permits.
    SemaphoreAcquire(SemaphoreAcquire),
    /// Release semaphore permits.
    SemaphoreRelease(Release),
    /// Campaign in an election.
    Campaign(Campaign),
    /// Change the leader's value.
    Proclaim(Proclaim),
    /// Give up leadership or candidacy.
    Resign(Resign),
    /// Withdraw a queued acquire (client gone).
    Cancel(Cancel),
    /// A blocking acquire's deadline passed (decided by the leader).
    AcquireTimeout(AcquireTimeout),
    /// Admin force-release of every holder.
    ForceRelease(ForceRelease),
    /// A lock-delay is due (decided by the leader).
    LockDelayElapsed(LockDelayElapsed),
}

impl Command {
    /// For a lock or semaphore acquire that may wait (`wait_ms` > 0): the resource, the
    /// lease and the owner it claims; `None` for every other command.
    pub fn waiting_claim(&self) -> Option<(ResourceId, LeaseId, &str)> {
        match self {
            Command::LockAcquire(c) if c.wait_ms > 0 => {
                Some((ResourceId::lock(c.name.as_str()), c.lease, &c.owner))
            }
            Command::SemaphoreAcquire(c) if c.wait_ms > 0 => {
                Some((ResourceId::semaphore(c.name.as_str()), c.lease, &c.owner))
            }
            _ => None,
        }
    }

    /// Checks the command against the spec §3 limits; a failure must never be proposed.
    pub fn validate(&self, limits: &Limits) -> Result<(), Error> {
        match self {
            Command::LeaseGrant(c) => c.validate(limits),
            Command::LeaseRevoke(_) | Command::LeaseExpire(_) | Command::LeaseCheckpoint(_) => {
                Ok(())
            }
            Command::Put(c) => c.validate(limits),
            Command::PutSequential(c) => c.validate(limits),
            Command::Delete(c) => c.validate(limits),
            Command::DeletePrefix(c) => c.validate(limits),
            Command::Txn(c) => c.validate(limits),
            Command::LockAcquire(c) => c.validate(limits),
            Command::LockRelease(c) => c.validate(limits),
            Command::SemaphoreAcquire(c) => c.validate(limits),
            Command::SemaphoreRelease(c) => c.validate(limits),
            Command::Campaign(c) => c.validate(limits),
            Command::Proclaim(c) => c.validate(limits),
            Command::Resign(c) => c.validate(limits),
            Command::Cancel(c) => c.validate(limits),
            Command::AcquireTimeout(c) => c.validate(limits),
            Command::ForceRelease(c) => c.validate(limits),
            Command::LockDelayElapsed(c) => c.validate(limits),
        }
    }

    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        match self {
            Command::LeaseGrant(c) => c.apply(sm, ctx),
            Command::LeaseRevoke(c) => c.apply(sm, ctx),
            Command::LeaseExpire(c) => c.apply(sm, ctx),
            Command::LeaseCheckpoint(c) => c.apply(sm),
            Command::Put(c) => c.apply(sm, ctx),
            Command::PutSequential(c) => c.apply(sm, ctx),
            Command::Delete(c) => c.apply(sm, ctx),
            Command::DeletePrefix(c) => c.apply(sm, ctx),
            Command::Txn(c) => c.apply(sm, ctx),
            Command::LockAcquire(c) => c.apply(sm, ctx),
            Command::LockRelease(c) => c.apply(ResourceKind::Lock, sm, ctx),
            Command::SemaphoreAcquire(c) => c.apply(sm, ctx),
            Command::SemaphoreRelease(c) => c.apply(ResourceKind::Semaphore, sm, ctx),
            Command::Campaign(c) => c.apply(sm, ctx),
            Command::Proclaim(c) => c.apply(sm, ctx),
            Command::Resign(c) => c.apply(sm, ctx),
            Command::Cancel(c) => c.apply(sm, ctx),
            Command::AcquireTimeout(c) => c.apply(sm, ctx),
            Command::ForceRelease(c) => c.apply(sm, ctx),
            Command::LockDelayElapsed(c) => c.apply(sm, ctx),
        }
    }

    /// The command's kind, as logs and metrics name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::LeaseGrant(_) => "lease_grant",
            Command::LeaseRevoke(_) => "lease_revoke",
            Command::LeaseExpire(_) => "lease_expire",
            Command::LeaseCheckpoint(_) => "lease_checkpoint",
            Command::Put(_) => "put",
            Command::PutSequential(_) => "put_sequential",
            Command::Delete(_) => "delete",
            Command::DeletePrefix(_) => "delete_prefix",
            Command::Txn(_) => "txn",
            Command::LockAcquire(_) => "lock_acquire",
            Command::LockRelease(_) => "lock_release",
            Command::SemaphoreAcquire(_) => "semaphore_acquire",
            Command::SemaphoreRelease(_) => "semaphore_release",
            Command::Campaign(_) => "campaign",
            Command::Proclaim(_) => "proclaim",
            Command::Resign(_) => "resign",
            Command::Cancel(_) => "cancel",
            Command::AcquireTimeout(_) => "acquire_timeout",
            Command::ForceRelease(_) => "force_release",
            Command::LockDelayElapsed(_) => "lock_delay_elapsed",
        }
    }

    /// Whether only the leader's lease clock may propose this command (lease expiry, TTL
    /// checkpoint, end of a lock-delay): never accepted from a client or a peer.
    pub fn from_leader_clock(&self) -> bool {
        matches!(
            self,
            Command::LeaseExpire(_) | Command::LeaseCheckpoint(_) | Command::LockDelayElapsed(_)
        )
    }

    /// The lease the command acts for, if any: it owns the command's idempotency outcome.
    pub fn lease(&self) -> Option<LeaseId> {
        match self {
            Command::LockAcquire(c) => Some(c.lease),
            Command::LockRelease(c) => Some(c.lease),
            Command::SemaphoreAcquire(c) => Some(c.lease),
            Command::SemaphoreRelease(c) => Some(c.lease),
            Command::Campaign(c) => Some(c.lease),
            Command::Proclaim(c) => Some(c.lease),
            Command::Resign(c) => Some(c.lease),
            Command::Cancel(c) => Some(c.lease),
            Command::AcquireTimeout(c) => Some(c.lease),
            Command::Put(c) => c.lease,
            Command::PutSequential(c) => c.lease,
            _ => None,
        }
    }

    /// The key under which an `Idempotency-Key` is remembered: scoped to the lease the
    /// command acts for (`lease/key`), or to no lease (`-/key`) for the commands that name
    /// none (lease grants, plain key writes).
    /// Lease-less keys of an authenticated caller are scoped to its principal too
    /// (`-@principal/key`), so principals never share outcomes.
    pub(crate) fn scoped_idempotency_key(&self, key: &str, caller: Option<&Caller>) -> String {
        match (self.lease(), caller) {
            (Some(lease), _) => format!("{lease}/{key}"),
            (None, Some(caller)) => format!("-@{}/{key}", caller.principal),
            (None, None) => format!("-/{key}"),
        }
    }

    /// The whole command, hashed (SHA-256 of its bincode form, 128 bits kept, after its
    /// kind): the same key with any other request is refused, never answered with another
    /// request's outcome. Deterministic on every node and build.
    pub(crate) fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        use std::fmt::Write;
        let bytes = bincode::serialize(self).unwrap_or_default();
        let digest = Sha256::digest(&bytes);
        let mut print = String::with_capacity(self.kind().len() + 33);
        print.push_str(self.kind());
        print.push(' ');
        for byte in &digest[..16] {
            let _ = write!(print, "{byte:02x}");
        }
        print
    }
}

#[cfg(test)]
mod tests {
    use crate::*;

    #[test]
    fn commands_of_the_leaders_clock_are_refused_from_outside_and_others_pass() {
        let limits = Limits::default();
        let lease = LeaseId(1);
        let clock_only = [
            Command::LeaseExpire(LeaseExpire { lease }),
            Command::LeaseCheckpoint(LeaseCheckpoint {
                remaining_ms: vec![(lease, 5)],
            }),
            Command::LockDelayElapsed(LockDelayElapsed {
                resource: ResourceId::lock("L"),
                since: Revision(1),
            }),
        ];
        for command in clock_only {
            let proposal = Proposal::from(command);
            assert!(proposal.validate(&limits).is_ok());
            assert!(proposal.validate_from_outside(&limits).is_err());
        }
        let revoke = Proposal::from(Command::LeaseRevoke(LeaseRevoke { lease }));
        assert!(revoke.validate_from_outside(&limits).is_ok());
    }
}
