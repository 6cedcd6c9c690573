//! Sequential models for the linearizability checker.

use super::linear::Model;

/// A register with read, write and compare-and-set (Jepsen's `cas-register`). Values are
/// integers; `None` is the initial, unwritten value.
#[derive(Clone, Copy, Debug, Default)]
pub struct CasRegister;

/// An operation on a [`CasRegister`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterOp {
    /// Read the value.
    Read,
    /// Write a value.
    Write(i64),
    /// Set to `to` if the value is `from`.
    Cas {
        /// Expected value.
        from: i64,
        /// New value.
        to: i64,
    },
}

/// What a register operation answered: the value read, or success of a write or CAS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterOut {
    /// A read's value.
    Value(Option<i64>),
    /// A completed write or successful CAS.
    Done,
}

impl Model for CasRegister {
    type State = Option<i64>;
    type Input = RegisterOp;
    type Output = RegisterOut;

    fn init(&self) -> Option<i64> {
        None
    }

    fn step(
        &self,
        state: &Option<i64>,
        input: &RegisterOp,
        output: Option<&RegisterOut>,
    ) -> Option<Option<i64>> {
        match (input, output) {
            (RegisterOp::Read, Some(RegisterOut::Value(v))) => (v == state).then_some(*state),
            (RegisterOp::Read, _) => Some(*state),
            (RegisterOp::Write(v), _) => Some(Some(*v)),
            // A CAS that completed succeeded: the value must have matched.
            (RegisterOp::Cas { from, to }, Some(_)) => (*state == Some(*from)).then_some(Some(*to)),
            // Unknown outcome: it applies if it matched, and changes nothing otherwise.
            (RegisterOp::Cas { from, to }, None) => Some(if *state == Some(*from) {
                Some(*to)
            } else {
                *state
            }),
        }
    }
}

/// One key of a key-value store with get, put and append (Porcupine's kv model); the
/// history is partitioned by key.
#[derive(Clone, Copy, Debug, Default)]
pub struct KvKey;

/// An operation on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvOp {
    /// Read the value ("" if unset).
    Get,
    /// Replace the value.
    Put(String),
    /// Append to the value.
    Append(String),
}

impl Model for KvKey {
    type State = String;
    type Input = KvOp;
    type Output = String;

    fn init(&self) -> String {
        String::new()
    }

    fn step(&self, state: &String, input: &KvOp, output: Option<&String>) -> Option<String> {
        match input {
            KvOp::Get => match output {
                Some(v) => (v == state).then(|| state.clone()),
                None => Some(state.clone()),
            },
            KvOp::Put(v) => Some(v.clone()),
            KvOp::Append(v) => Some(format!("{state}{v}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::linear::{Operation, Verdict, check};
    use std::time::Duration;

    fn op(
        process: u64,
        call: u64,
        ret: Option<u64>,
        input: RegisterOp,
        output: Option<RegisterOut>,
    ) -> Operation<RegisterOp, RegisterOut> {
        Operation {
            process,
            call,
            ret,
            input,
            output,
        }
    }

    const BUDGET: Duration = Duration::from_secs(5);

    #[test]
    fn a_re_entrant_hold_takes_as_many_releases_and_keeps_its_fence() {
        let m = FencedOwnerMutex;
        let a = || "a".to_owned();
        let s = m.init();
        let s = m
            .step(&s, &MutexIn::Acquire(a()), Some(&MutexOut::Granted(5)))
            .unwrap();
        // Re-entrant: same fence, or it is no re-entrant grant.
        assert!(
            m.step(&s, &MutexIn::Acquire(a()), Some(&MutexOut::Granted(6)))
                .is_none()
        );
        let s = m
            .step(&s, &MutexIn::Acquire(a()), Some(&MutexOut::Granted(5)))
            .unwrap();
        let s = m
            .step(&s, &MutexIn::Release(a()), Some(&MutexOut::Done))
            .unwrap();
        // Still held once: another owner is refused.
        let b = MutexIn::Acquire("b".to_owned());
        assert!(m.step(&s, &b, Some(&MutexOut::Granted(9))).is_none());
        assert!(m.step(&s, &b, Some(&MutexOut::Held)).is_some());
        let s = m
            .step(&s, &MutexIn::Release(a()), Some(&MutexOut::Done))
            .unwrap();
        assert!(m.step(&s, &b, Some(&MutexOut::Granted(9))).is_some());
        // A revoke frees every hold at once.
        let held = (Some(("a".to_owned(), 3)), 5);
        assert_eq!(m.step(&held, &MutexIn::Revoke(a()), None), Some((None, 5)));
    }

    #[test]
    fn concurrent_write_and_read_may_see_either_value() {
        let h = vec![
            op(0, 0, Some(3), RegisterOp::Write(1), Some(RegisterOut::Done)),
            op(
                1,
                1,
                Some(2),
                RegisterOp::Read,
                Some(RegisterOut::Value(Some(1))),
            ),
        ];
        assert_eq!(check(&CasRegister, &h, BUDGET), Verdict::Linearizable);
    }

    #[test]
    fn stale_read_after_a_completed_write_is_rejected() {
        let h = vec![
            op(0, 0, Some(1), RegisterOp::Write(1), Some(RegisterOut::Done)),
            op(1, 2, Some(3), RegisterOp::Write(2), Some(RegisterOut::Done)),
            op(
                0,
                4,
                Some(5),
                RegisterOp::Read,
                Some(RegisterOut::Value(Some(1))),
            ),
        ];
        assert!(matches!(
            check(&CasRegister, &h, BUDGET),
            Verdict::NotLinearizable { .. }
        ));
    }

    #[test]
    fn lost_update_through_two_successful_cas_from_the_same_value_is_rejected() {
        let h = vec![
            op(0, 0, Some(1), RegisterOp::Write(0), Some(RegisterOut::Done)),
            op(
                1,
                2,
                Some(5),
                RegisterOp::Cas { from: 0, to: 1 },
                Some(RegisterOut::Done),
            ),
            op(
                2,
                3,
                Some(6),
                RegisterOp::Cas { from: 0, to: 2 },
                Some(RegisterOut::Done),
            ),
        ];
        assert!(matches!(
            check(&CasRegister, &h, BUDGET),
            Verdict::NotLinearizable { .. }
        ));
    }

    #[test]
    fn read_of_a_value_never_written_is_rejected() {
        let h = vec![op(
            0,
            0,
            Some(1),
            RegisterOp::Read,
            Some(RegisterOut::Value(Some(9))),
        )];
        assert!(matches!(
            check(&CasRegister, &h, BUDGET),
            Verdict::NotLinearizable { .. }
        ));
    }

    #[test]
    fn unknown_write_may_take_effect_late_or_never() {
        let h = vec![
            op(0, 0, None, RegisterOp::Write(7), None),
            op(
                1,
                5,
                Some(6),
                RegisterOp::Read,
                Some(RegisterOut::Value(None)),
            ),
            op(
                1,
                7,
                Some(8),
                RegisterOp::Read,
                Some(RegisterOut::Value(Some(7))),
            ),
        ];
        assert_eq!(check(&CasRegister, &h, BUDGET), Verdict::Linearizable);
        // ...but once seen it cannot be unseen.
        let mut h2 = h.clone();
        h2.push(op(
            1,
            9,
            Some(10),
            RegisterOp::Read,
            Some(RegisterOut::Value(None)),
        ));
        assert!(matches!(
            check(&CasRegister, &h2, BUDGET),
            Verdict::NotLinearizable { .. }
        ));
    }

    #[test]
    fn kv_append_order_must_match_real_time() {
        let h = vec![
            Operation {
                process: 0,
                call: 0,
                ret: Some(1),
                input: KvOp::Append("a".into()),
                output: Some(String::new()),
            },
            Operation {
                process: 0,
                call: 2,
                ret: Some(3),
                input: KvOp::Append("b".into()),
                output: Some(String::new()),
            },
            Operation {
                process: 1,
                call: 4,
                ret: Some(5),
                input: KvOp::Get,
                output: Some("ba".into()),
            },
        ];
        assert!(matches!(
            check(&KvKey, &h, BUDGET),
            Verdict::NotLinearizable { .. }
        ));
    }
}

/// A key as baton serves it: a value and the revision of its last change. Reads return
/// both, writes return their revision (which must exceed the previous one), and a CAS
/// names the revision it expects (0: the key must not exist).
#[derive(Clone, Copy, Debug, Default)]
pub struct RevRegister;

/// An operation on a [`RevRegister`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegIn {
    /// Read value and revision.
    Read,
    /// Write a value.
    Write(String),
    /// Write a value if the key's revision is `prev`.
    Cas {
        /// Expected revision.
        prev: u64,
        /// New value.
        value: String,
    },
}

/// What a [`RevRegister`] operation answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegOut {
    /// A read: the value (`None` if absent) and its revision (0 if absent).
    Read(Option<String>, u64),
    /// A write's or CAS's revision.
    Rev(u64),
}

/// State: the value and its revision; the revision is `None` after a write of unknown
/// outcome until a read or CAS pins it.
pub type RegState = (Option<String>, Option<u64>);

impl Model for RevRegister {
    type State = RegState;
    type Input = RegIn;
    type Output = RegOut;

    fn init(&self) -> RegState {
        (None, Some(0))
    }

    fn step(&self, state: &RegState, input: &RegIn, output: Option<&RegOut>) -> Option<RegState> {
        let (value, rev) = state;
        let newer = |r: u64| rev.is_none_or(|old| r > old);
        match (input, output) {
            (RegIn::Read, Some(RegOut::Read(v, r))) => {
                (v == value && rev.is_none_or(|old| old == *r)).then(|| (value.clone(), Some(*r)))
            }
            (RegIn::Read, _) => Some(state.clone()),
            (RegIn::Write(v), Some(RegOut::Rev(r))) => {
                newer(*r).then(|| (Some(v.clone()), Some(*r)))
            }
            (RegIn::Write(v), _) => Some((Some(v.clone()), None)),
            (RegIn::Cas { prev, value: v }, Some(RegOut::Rev(r))) => {
                (rev.is_none_or(|old| old == *prev) && *r > *prev)
                    .then(|| (Some(v.clone()), Some(*r)))
            }
            // Unknown outcome: it applies when the revision matches (or is unknown).
            (RegIn::Cas { prev, value: v }, _) => Some(if rev.is_none_or(|old| old == *prev) {
                (Some(v.clone()), None)
            } else {
                state.clone()
            }),
        }
    }
}

/// A try-lock whose grants carry fences (Hazelcast's fenced mutex, with an owner): only
/// a free lock is granted, with a fence above every earlier one; only the owner releases;
/// revoking an owner's lease frees what it holds. An owner is what the server knows a
/// holder by: the owner name and its lease together.
#[derive(Clone, Copy, Debug, Default)]
pub struct FencedOwnerMutex;

/// An operation on a [`FencedOwnerMutex`], by owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MutexIn {
    /// Try to acquire.
    Acquire(String),
    /// Release.
    Release(String),
    /// Revoke the owner's lease.
    Revoke(String),
}

/// What it answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MutexOut {
    /// Granted with this fence.
    Granted(u64),
    /// Refused: someone else holds it.
    Held,
    /// Released or revoked.
    Done,
    /// Refused: the caller does not hold it.
    NotHolder,
}

/// State: the owner with its hold count, and the highest fence granted so far.
pub type MutexState = (Option<(String, u32)>, u64);

impl Model for FencedOwnerMutex {
    type State = MutexState;
    type Input = MutexIn;
    type Output = MutexOut;

    fn init(&self) -> MutexState {
        (None, 0)
    }

    fn step(
        &self,
        state: &MutexState,
        input: &MutexIn,
        output: Option<&MutexOut>,
    ) -> Option<MutexState> {
        let (owner, last) = state;
        let mine = |me: &String| owner.as_ref().is_some_and(|(o, _)| o == me);
        let count = owner.as_ref().map_or(0, |(_, c)| *c);
        // One hold fewer (re-entrant holds take as many releases).
        let released = |me: &String| (count > 1).then(|| (me.clone(), count - 1));
        match (input, output) {
            // A re-entrant acquire keeps its fence.
            (MutexIn::Acquire(me), Some(MutexOut::Granted(f))) if mine(me) => {
                (f == last).then(|| (Some((me.clone(), count + 1)), *last))
            }
            (MutexIn::Acquire(me), Some(MutexOut::Granted(f))) => {
                (owner.is_none() && f > last).then(|| (Some((me.clone(), 1)), *f))
            }
            (MutexIn::Acquire(me), Some(MutexOut::Held)) => {
                (owner.is_some() && !mine(me)).then(|| state.clone())
            }
            (MutexIn::Acquire(me), None) => Some(if owner.is_none() || mine(me) {
                (Some((me.clone(), count + 1)), *last)
            } else {
                state.clone()
            }),
            (MutexIn::Release(me), Some(MutexOut::Done)) => mine(me).then(|| (released(me), *last)),
            (MutexIn::Release(me), Some(MutexOut::NotHolder)) => (!mine(me)).then(|| state.clone()),
            (MutexIn::Release(me), _) => Some(if mine(me) {
                (released(me), *last)
            } else {
                state.clone()
            }),
            (MutexIn::Revoke(me), _) => Some(if mine(me) {
                (None, *last)
            } else {
                state.clone()
            }),
            (MutexIn::Acquire(_), Some(_)) => None,
        }
    }
}
