//! The pure, deterministic state machine of baton (spec §2).
//!
//! One entry point, [`StateMachine::apply`], takes a [`Proposal`] (a [`Command`] and an
//! optional idempotency key) and returns an [`Applied`]: the revision, a [`Response`] and
//! the [`Event`]s of that revision. Domain refusals (`lock_held`, `not_holder`,
//! `cas_failed`, …) are [`Rejection`]s inside the response, not errors. Queries read the
//! state without changing it; [`StateMachine::snapshot`] and [`StateMachine::restore`]
//! move the whole state.
//!
//! This crate never reads a clock, does no I/O, spawns nothing and draws no random
//! numbers: time-based decisions (lease expiry, wait deadlines, lock-delay ends) arrive as
//! commands proposed by the leader. Only ordered collections shape results, so every node
//! applying the same log holds byte-identical state.
//!
//! ```
//! use baton_state_machine::*;
//!
//! let mut sm = StateMachine::default();
//! let Response::LeaseGranted { lease, .. } =
//!     sm.apply_command(Command::LeaseGrant(LeaseGrant { ttl_ms: 10_000 })).response
//! else { unreachable!() };
//! let acquire = Command::LockAcquire(LockAcquire {
//!     name: "jobs/report".into(),
//!     lease,
//!     owner: "worker-3".into(),
//!     mode: Mode::Exclusive,
//!     wait_ms: 0,
//!     lock_delay_ms: 0,
//! });
//! let applied = sm.apply_command(acquire);
//! let Response::Granted(grant) = applied.response else { unreachable!() };
//! // The fence is the revision of the grant: pass it to downstream storage.
//! assert_eq!(grant.holder.fence, applied.revision.fence());
//! ```
//!
//! # Layout
//! - `machine.rs`: [`StateMachine`], `apply`, key writes shared by commands.
//! - `command/`: the [`Command`] enum and one module per family (lease, kv, txn, lock,
//!   semaphore, election, wait), each with validation, `apply` and unit tests.
//! - `claims.rs` + `resource.rs`: the one queue and holder code behind locks, semaphores
//!   and elections (acquire, release, withdraw, handoff, lease end).
//! - `caller.rs`: [`Caller`]: who proposed a command; lease ownership and quotas.
//! - `keyspace.rs`, `lease.rs`, `idempotency.rs`, `event.rs`: the state's tables.
//! - `query.rs`: read-only queries. `snapshot.rs`: snapshot and restore.
//! - `invariants.rs`: [`StateMachine::check_invariants`]. `limits.rs`: every bound.

mod caller;
mod claims;
mod command;
mod error;
mod event;
mod idempotency;
mod ids;
mod invariants;
mod keyspace;
mod lease;
mod limits;
mod machine;
mod outcome;
mod packed;
mod query;
mod resource;
mod resource_table;
mod small;
mod snapshot;
#[cfg(test)]
mod testing;

pub use caller::{Caller, Quota, Usage};
pub use command::*;
pub use error::Error;
pub use event::{CancelReason, Event, EventFilter, EventKind, Leader, ReleaseReason};
pub use ids::{Fence, LeaseId, Revision};
pub use keyspace::KeyValue;
pub use lease::{LeaseClockEntry, LeaseInfo, TTL_MS_MAX};
pub use limits::{Bounds, Limits};
pub use machine::StateMachine;
pub use outcome::{
    Applied, Grant, HolderInfo, LOCK_HELD_HOLDERS_MAX, LockState, Rejection, Response, TxnResult,
    WaiterInfo,
};
pub use packed::PackedMap;
pub use query::{Counts, FenceCheck, LockSummary, PendingWait};
pub use resource::{Claimant, Demand, LockDelay, Policy, ResourceId, ResourceKind};
pub use snapshot::SNAPSHOT_FORMAT_VERSION;
