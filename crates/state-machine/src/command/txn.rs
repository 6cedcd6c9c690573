//! An etcd-style transaction: compares, then the success or the failure operations, all in
//! one revision (or none if the branch that ran changed nothing).

use crate::error::Error;
use crate::ids::{LeaseId, Revision};
use crate::keyspace::Record;
use crate::limits::Limits;
use crate::machine::{Ctx, StateMachine};
use crate::outcome::{Rejection, Response, TxnResult};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// A transaction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    /// All must hold for `success` to run; otherwise `failure` runs.
    pub compare: Vec<Compare>,
    /// Operations if every compare holds.
    pub success: Vec<TxnOp>,
    /// Operations otherwise.
    pub failure: Vec<TxnOp>,
}

/// One comparison against a key's current state. A missing key has version, create and mod
/// revision 0, no lease, and fails every value comparison (as in etcd).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compare {
    /// The key.
    pub key: String,
    /// The field and the operand.
    pub target: CompareTarget,
    /// How the key's field relates to the operand.
    pub op: CompareOp,
}

/// The field compared, with the operand.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareTarget {
    /// The value, compared as bytes.
    Value(String),
    /// The version (0 if missing).
    Version(u64),
    /// The create revision (0 if missing).
    CreateRevision(Revision),
    /// The mod revision (0 if missing).
    ModRevision(Revision),
    /// The lease id (0 if none).
    Lease(LeaseId),
}

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareOp {
    /// Equal.
    Equal,
    /// Not equal.
    NotEqual,
    /// The key's field is greater than the operand.
    Greater,
    /// The key's field is less than the operand.
    Less,
}

/// An operation of a txn branch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnOp {
    /// Put a key (with an optional lease).
    Put {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// The lease to bind it to.
        lease: Option<LeaseId>,
    },
    /// Delete a key (0 or 1 deleted).
    Delete {
        /// The key.
        key: String,
    },
    /// Delete every key under a prefix.
    DeletePrefix {
        /// The prefix (non-empty).
        prefix: String,
    },
    /// Read keys under a prefix (a single key is a prefix with limit 1 and an exact match
    /// check by the caller); sees earlier operations of the same txn.
    Range {
        /// The prefix.
        prefix: String,
        /// At most this many keys.
        limit: usize,
    },
}

impl Compare {
    fn holds(&self, record: Option<&Record>) -> bool {
        let ordering = match &self.target {
            CompareTarget::Value(v) => match record {
                Some(r) => r.value.as_str().cmp(v.as_str()),
                None => return false,
            },
            CompareTarget::Version(v) => record.map_or(0, |r| r.version).cmp(v),
            CompareTarget::CreateRevision(v) => {
                record.map_or(Revision(0), |r| r.create_revision).cmp(v)
            }
            CompareTarget::ModRevision(v) => record.map_or(Revision(0), |r| r.mod_revision).cmp(v),
            CompareTarget::Lease(v) => record.and_then(|r| r.lease).unwrap_or(LeaseId(0)).cmp(v),
        };
        match self.op {
            CompareOp::Equal => ordering == Ordering::Equal,
            CompareOp::NotEqual => ordering != Ordering::Equal,
            CompareOp::Greater => ordering == Ordering::Greater,
            CompareOp::Less => ordering == Ordering::Less,
        }
    }
}

impl Txn {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        limits.check_txn_ops(self.compare.len() + self.success.len() + self.failure.len())?;
        for c in &self.compare {
            limits.check_name("compare.key", &c.key)?;
            if let CompareTarget::Value(v) = &c.target {
                limits.check_value("compare.value", v)?;
            }
        }
        // The values a transaction may read are bounded as a whole, not per range: a branch
        // of 128 ranges of the largest limit would otherwise ask every node for a result of
        // a million values.
        for branch in [&self.success, &self.failure] {
            let values: usize = branch
                .iter()
                .map(|op| match op {
                    TxnOp::Range { limit, .. } => *limit,
                    _ => 0,
                })
                .sum();
            if values > limits.range_limit_max {
                return Err(Error::invalid(
                    "txn",
                    format!(
                        "the ranges of one branch ask for {values} values, over {}",
                        limits.range_limit_max
                    ),
                ));
            }
        }
        for op in self.success.iter().chain(&self.failure) {
            match op {
                TxnOp::Put { key, value, .. } => {
                    limits.check_name("put.key", key)?;
                    limits.check_value("put.value", value)?;
                }
                TxnOp::Delete { key } => limits.check_name("delete.key", key)?,
                TxnOp::DeletePrefix { prefix } => limits.check_name("delete.prefix", prefix)?,
                TxnOp::Range { prefix, limit } => {
                    limits.check_prefix("range.prefix", prefix)?;
                    limits.check_range_limit(*limit)?;
                }
            }
        }
        Ok(())
    }

    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        let succeeded = self.compare.iter().all(|c| c.holds(sm.keys.get(&c.key)));
        let ops = if succeeded {
            self.success
        } else {
            self.failure
        };
        // All or nothing: refuse before the first write if any put names a missing lease.
        let missing = ops.iter().find_map(|op| match op {
            TxnOp::Put { lease: Some(l), .. } if !sm.leases.contains_key(l) => Some(*l),
            _ => None,
        });
        if let Some(lease) = missing {
            return Rejection::LeaseNotFound { lease }.into();
        }
        let mut budget = TXN_RESULT_BYTES_MAX;
        let results = ops
            .into_iter()
            .map(|op| run(sm, ctx, op, &mut budget))
            .collect();
        Response::Txn { succeeded, results }
    }
}

/// Bytes (keys and values) that the ranges of one transaction return at most; a range
/// that reaches it stops with `more: true`. The same state gives the same cut on every
/// node, so the result stays deterministic.
pub const TXN_RESULT_BYTES_MAX: usize = 4 << 20;

fn run(sm: &mut StateMachine, ctx: &mut Ctx, op: TxnOp, budget: &mut usize) -> TxnResult {
    match op {
        TxnOp::Put { key, value, lease } => {
            let (_, version) = sm.put_key(ctx, key.clone(), value, lease);
            TxnResult::Put { key, version }
        }
        TxnOp::Delete { key } => TxnResult::Deleted {
            deleted: u64::from(sm.delete_key(ctx, &key)),
        },
        TxnOp::DeletePrefix { prefix } => {
            let mut deleted = 0;
            for key in sm.keys.names_under(&prefix) {
                deleted += u64::from(sm.delete_key(ctx, &key));
            }
            TxnResult::Deleted { deleted }
        }
        TxnOp::Range { prefix, limit } => {
            let mut kvs = Vec::new();
            let mut more = false;
            for (key, record) in sm.keys.prefix_iter(&prefix) {
                let bytes = key.len() + record.value.len();
                if kvs.len() >= limit || bytes > *budget {
                    more = true;
                    break;
                }
                *budget -= bytes;
                kvs.push(record.to_key_value(key));
            }
            TxnResult::Range { kvs, more }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::*;
    use crate::*;

    fn txn(compare: Vec<Compare>, success: Vec<TxnOp>, failure: Vec<TxnOp>) -> Command {
        Command::Txn(Txn {
            compare,
            success,
            failure,
        })
    }

    fn cmp(key: &str, target: CompareTarget, op: CompareOp) -> Compare {
        Compare {
            key: key.into(),
            target,
            op,
        }
    }

    fn put_op(key: &str, value: &str) -> TxnOp {
        TxnOp::Put {
            key: key.into(),
            value: value.into(),
            lease: None,
        }
    }

    #[test]
    fn txn_success_branch_applies_in_one_revision() {
        let mut sm = StateMachine::default();
        put(&mut sm, "a", "1", None);
        let applied = sm.apply_command(txn(
            vec![cmp("a", CompareTarget::Value("1".into()), CompareOp::Equal)],
            vec![
                put_op("b", "2"),
                put_op("c", "3"),
                TxnOp::Delete { key: "a".into() },
            ],
            vec![],
        ));
        assert_eq!(applied.revision, Revision(2));
        assert_eq!(applied.events.len(), 3);
        let Response::Txn { succeeded, results } = applied.response else {
            panic!("expected txn");
        };
        assert!(succeeded);
        assert_eq!(results.len(), 3);
        assert_eq!(sm.get("b").unwrap().mod_revision, Revision(2));
        assert_eq!(sm.get("c").unwrap().mod_revision, Revision(2));
        assert!(sm.get("a").is_none());
    }

    #[test]
    fn txn_failure_branch_runs_when_a_compare_fails() {
        let mut sm = StateMachine::default();
        put(&mut sm, "a", "1", None);
        let applied = sm.apply_command(txn(
            vec![
                cmp("a", CompareTarget::Version(1), CompareOp::Equal),
                cmp(
                    "a",
                    CompareTarget::ModRevision(Revision(5)),
                    CompareOp::Greater,
                ),
            ],
            vec![put_op("x", "never")],
            vec![TxnOp::Range {
                prefix: "a".into(),
                limit: 10,
            }],
        ));
        let Response::Txn { succeeded, results } = applied.response else {
            panic!("expected txn");
        };
        assert!(!succeeded);
        assert!(matches!(&results[0], TxnResult::Range { kvs, more: false } if kvs.len() == 1));
        assert!(sm.get("x").is_none());
        assert_eq!(
            applied.revision,
            Revision(1),
            "a read-only branch makes no revision"
        );
    }

    #[test]
    fn txn_compares_on_version_create_revision_and_lease_treat_missing_keys_as_zero() {
        let mut sm = StateMachine::default();
        let lease = grant(&mut sm, 10_000);
        put(&mut sm, "eph", "v", Some(lease));
        let holds = |sm: &mut StateMachine, c: Compare| {
            let applied = sm.apply_command(txn(vec![c], vec![], vec![]));
            matches!(
                applied.response,
                Response::Txn {
                    succeeded: true,
                    ..
                }
            )
        };
        assert!(holds(
            &mut sm,
            cmp("none", CompareTarget::Version(0), CompareOp::Equal)
        ));
        assert!(holds(
            &mut sm,
            cmp(
                "none",
                CompareTarget::CreateRevision(Revision(0)),
                CompareOp::Equal
            )
        ));
        assert!(!holds(
            &mut sm,
            cmp(
                "none",
                CompareTarget::Value(String::new()),
                CompareOp::Equal
            )
        ));
        assert!(holds(
            &mut sm,
            cmp("eph", CompareTarget::Lease(lease), CompareOp::Equal)
        ));
        assert!(holds(
            &mut sm,
            cmp("eph", CompareTarget::Value("u".into()), CompareOp::Greater)
        ));
        assert!(holds(
            &mut sm,
            cmp("eph", CompareTarget::Version(2), CompareOp::Less)
        ));
        assert!(holds(
            &mut sm,
            cmp("eph", CompareTarget::Version(2), CompareOp::NotEqual)
        ));
    }

    #[test]
    fn txn_with_a_missing_lease_changes_nothing() {
        let mut sm = StateMachine::default();
        let before = sm.clone();
        let applied = sm.apply_command(txn(
            vec![],
            vec![
                put_op("a", "1"),
                TxnOp::Put {
                    key: "b".into(),
                    value: "2".into(),
                    lease: Some(LeaseId(3)),
                },
            ],
            vec![],
        ));
        assert_eq!(
            applied.response,
            Response::Rejected(Rejection::LeaseNotFound { lease: LeaseId(3) })
        );
        assert_eq!(sm, before);
    }

    #[test]
    fn a_transactions_reads_are_bounded_in_values_before_the_log_and_in_bytes_in_apply() {
        let limits = Limits::default();
        let range = |limit: usize| TxnOp::Range {
            prefix: "".into(),
            limit,
        };
        let Command::Txn(two) = txn(vec![], vec![range(6_000), range(6_000)], vec![]) else {
            unreachable!()
        };
        let e = two.validate(&limits).unwrap_err().to_string();
        assert!(e.contains("12000 values"), "{e}");
        let Command::Txn(fits) = txn(vec![], vec![range(5_000)], vec![range(10_000)]) else {
            unreachable!()
        };
        fits.validate(&limits).unwrap();
        // Ten values of 1 MiB: the ranges together stop at the byte budget, with `more`.
        let mut sm = StateMachine::default();
        for i in 0..10 {
            put(&mut sm, &format!("big/{i}"), &"v".repeat(1 << 20), None);
        }
        let applied = sm.apply_command(txn(vec![], vec![range(10), range(10)], vec![]));
        let Response::Txn { results, .. } = applied.response else {
            panic!("{:?}", applied.response)
        };
        let read: Vec<(usize, bool)> = results
            .iter()
            .map(|r| match r {
                TxnResult::Range { kvs, more } => (kvs.len(), *more),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(read, [(3, true), (0, true)]);
    }

    #[test]
    fn a_failed_compare_and_set_is_not_remembered_under_its_key() {
        let mut sm = StateMachine::default();
        put(&mut sm, "k", &"v".repeat(1 << 20), None);
        let before = sm.idempotency.entries.len();
        for attempt in 0..3 {
            let applied = sm.apply(Proposal {
                idempotency_key: Some("retry".to_owned()),
                command: Command::Put(Put {
                    key: "k".into(),
                    value: "new".into(),
                    lease: None,
                    prev_revision: Some(Revision(999)),
                }),
                caller: None,
            });
            assert!(
                matches!(
                    applied.response,
                    Response::Rejected(Rejection::CasFailed { .. })
                ),
                "attempt {attempt}: {:?}",
                applied.response
            );
        }
        assert_eq!(
            sm.idempotency.entries.len(),
            before,
            "no copy of the value was kept"
        );
    }
}
