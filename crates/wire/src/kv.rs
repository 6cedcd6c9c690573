//! Keys and transactions.

use serde::{Deserialize, Serialize};

/// `PUT /v1/kv/{key}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PutRequest {
    /// The value.
    pub value: String,
    /// Bind the key to this lease (an ephemeral key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<u64>,
    /// Compare-and-set on `mod_revision`; 0 means the key must not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_revision: Option<u64>,
}

/// `POST /v1/kv/{prefix}`: a sequential key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SequentialRequest {
    /// The value.
    pub value: String,
    /// Bind the key to this lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<u64>,
}

/// A stored key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// Its value.
    pub value: String,
    /// The revision that created it.
    pub create_revision: u64,
    /// The revision of its last change.
    pub mod_revision: u64,
    /// Puts since creation.
    pub version: u64,
    /// Its lease, if ephemeral.
    pub lease_id: Option<u64>,
}

/// `GET /v1/kv/{key}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyResponse {
    /// The key.
    #[serde(flatten)]
    pub kv: KeyValue,
    /// The revision read.
    pub revision: u64,
}

/// A write's answer (put or sequential create).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PutResponse {
    /// The key written (generated for a sequential key).
    pub key: String,
    /// The revision of the write.
    pub revision: u64,
    /// The revision that created the key.
    pub create_revision: u64,
    /// Its version after the write.
    pub version: u64,
}

/// `GET /v1/kv?prefix=`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RangeResponse {
    /// Keys in order.
    pub kvs: Vec<KeyValue>,
    /// Whether the limit cut the list short.
    pub more: bool,
    /// The revision read.
    pub revision: u64,
}

/// A delete's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeleteResponse {
    /// Keys deleted.
    pub deleted: u64,
    /// The revision of the delete (unchanged if nothing was deleted).
    pub revision: u64,
}

/// What a txn compare looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum CompareTarget {
    /// The value (compared as a string).
    Value,
    /// Puts since creation (0 for a missing key).
    Version,
    /// The creating revision (0 for a missing key).
    CreateRevision,
    /// The last change's revision (0 for a missing key).
    ModRevision,
    /// The lease id (0 for none).
    Lease,
}

/// How a txn compare compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum CompareOp {
    /// Equal (`=` and `==` also accepted).
    #[serde(alias = "=", alias = "==")]
    Equal,
    /// Not equal (`!=` also accepted).
    #[serde(alias = "!=")]
    NotEqual,
    /// Greater (`>` also accepted).
    #[serde(alias = ">")]
    Greater,
    /// Less (`<` also accepted).
    #[serde(alias = "<")]
    Less,
}

/// A compare's operand: a string for `value`, a number for every other target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum CompareValue {
    /// A number.
    Number(u64),
    /// A string.
    Text(String),
}

/// One compare of a txn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Compare {
    /// The key.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, pattern = "{word}"))]
    pub key: String,
    /// What to compare.
    pub target: CompareTarget,
    /// How.
    pub op: CompareOp,
    /// Against what.
    pub value: CompareValue,
}

/// One operation of a txn branch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum TxnOp {
    /// Put a key.
    Put {
        /// The key.
        #[cfg_attr(feature = "openapi", schema(min_length = 1, pattern = "{word}"))]
        key: String,
        /// The value.
        value: String,
        /// Its lease.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease_id: Option<u64>,
    },
    /// Delete a key.
    Delete {
        /// The key.
        #[cfg_attr(feature = "openapi", schema(min_length = 1, pattern = "{word}"))]
        key: String,
    },
    /// Delete keys under a prefix.
    DeletePrefix {
        /// The prefix.
        #[cfg_attr(feature = "openapi", schema(min_length = 1, pattern = "{word}"))]
        prefix: String,
    },
    /// Read keys under a prefix (sees earlier operations of the txn).
    Range {
        /// The prefix.
        #[cfg_attr(feature = "openapi", schema(pattern = "{text}"))]
        prefix: String,
        /// At most this many (default 100).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(nullable = false, minimum = 1))]
        limit: Option<usize>,
    },
}

/// `POST /v1/txn`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TxnRequest {
    /// All must hold for `success` to run.
    #[serde(default)]
    pub compare: Vec<Compare>,
    /// Operations if every compare holds.
    #[serde(default)]
    pub success: Vec<TxnOp>,
    /// Operations otherwise.
    #[serde(default)]
    pub failure: Vec<TxnOp>,
}

/// The result of one txn operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum TxnResult {
    /// A put.
    Put {
        /// The key.
        key: String,
        /// Its version after the put.
        version: u64,
    },
    /// A delete or delete by prefix.
    Delete {
        /// Keys deleted.
        deleted: u64,
    },
    /// A range.
    Range {
        /// Keys in order.
        kvs: Vec<KeyValue>,
        /// Whether the limit cut the list short.
        more: bool,
    },
}

/// `POST /v1/txn`'s answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TxnResponse {
    /// Whether every compare held.
    pub succeeded: bool,
    /// One result per operation of the branch that ran.
    pub results: Vec<TxnResult>,
    /// The revision of the txn (unchanged if it wrote nothing).
    pub revision: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn compares_take_symbols_and_typed_operands() {
        let c: Compare = serde_json::from_value(
            json!({"key": "k", "target": "mod_revision", "op": "=", "value": 7}),
        )
        .unwrap();
        assert_eq!(c.op, CompareOp::Equal);
        assert_eq!(c.value, CompareValue::Number(7));
        let c: Compare = serde_json::from_value(
            json!({"key": "k", "target": "value", "op": "!=", "value": "x"}),
        )
        .unwrap();
        assert_eq!(c.value, CompareValue::Text("x".into()));
        assert!(
            serde_json::from_value::<Compare>(
                json!({"key": "k", "target": "nope", "op": "=", "value": 1})
            )
            .is_err()
        );
    }
}
