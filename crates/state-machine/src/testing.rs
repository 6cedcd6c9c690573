//! Helpers for the unit tests of this crate.

use crate::command::*;
use crate::ids::{Fence, LeaseId};
use crate::machine::StateMachine;
use crate::outcome::Response;

pub(crate) fn grant(sm: &mut StateMachine, ttl_ms: u64) -> LeaseId {
    match sm
        .apply_command(Command::LeaseGrant(LeaseGrant { ttl_ms }))
        .response
    {
        Response::LeaseGranted { lease, .. } => lease,
        other => panic!("lease grant refused: {other:?}"),
    }
}

pub(crate) fn revoke(sm: &mut StateMachine, lease: LeaseId) {
    sm.apply_command(Command::LeaseRevoke(LeaseRevoke { lease }));
}

pub(crate) fn put_response(
    sm: &mut StateMachine,
    key: &str,
    value: &str,
    lease: Option<LeaseId>,
) -> Response {
    sm.apply_command(Command::Put(Put {
        key: key.into(),
        value: value.into(),
        lease,
        prev_revision: None,
    }))
    .response
}

pub(crate) fn put(sm: &mut StateMachine, key: &str, value: &str, lease: Option<LeaseId>) {
    let response = put_response(sm, key, value, lease);
    assert!(
        matches!(response, Response::Put { .. }),
        "put refused: {response:?}"
    );
}

pub(crate) fn lock_cmd(
    name: &str,
    lease: LeaseId,
    owner: &str,
    mode: Mode,
    wait_ms: u64,
) -> Command {
    Command::LockAcquire(LockAcquire {
        name: name.into(),
        lease,
        owner: owner.into(),
        mode,
        wait_ms,
        lock_delay_ms: 0,
    })
}

pub(crate) fn acquire(
    sm: &mut StateMachine,
    name: &str,
    lease: LeaseId,
    owner: &str,
    wait_ms: u64,
) -> Response {
    sm.apply_command(lock_cmd(name, lease, owner, Mode::Exclusive, wait_ms))
        .response
}

pub(crate) fn release_cmd(
    name: &str,
    lease: LeaseId,
    owner: &str,
    fence: Option<Fence>,
) -> Command {
    Command::LockRelease(Release {
        name: name.into(),
        lease,
        owner: owner.into(),
        fence,
    })
}

pub(crate) fn release(
    sm: &mut StateMachine,
    name: &str,
    lease: LeaseId,
    owner: &str,
    fence: Option<Fence>,
) -> Response {
    sm.apply_command(release_cmd(name, lease, owner, fence))
        .response
}
