//! Conversions between the state machine's types and the wire's, shared by the handlers:
//! every `Command` is built here, and the values answers are made of (holders, keys,
//! events, errors) are converted here. The state machine stays free to change its types;
//! the contract changes only in `baton-wire`.
//!
//! - `to_wire.rs`: state-machine values to wire answers, errors and watch events.
//! - `to_command.rs`: wire requests to the state-machine commands handlers propose.

mod to_command;
mod to_wire;

pub(crate) use to_command::{
    acquire_timeout, campaign, cancel_wait, delete, delete_prefix, force_release, lease_grant,
    lease_revoke, lock_acquire, lock_release, proclaim, proposal, put, put_sequential,
    release_grant, resign, semaphore_acquire, semaphore_release, txn,
};
pub use to_wire::{
    event, holder, key_value, kind, kind_from_wire, leader, limits, lock_state, lock_summary,
    txn_result,
};
