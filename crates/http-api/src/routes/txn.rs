//! `POST /v1/txn`: etcd-style compares, then the success or failure operations, in one
//! revision.

use crate::auth::{Access, Authz, Namespace};
use crate::convert;
use crate::error::{ApiError, ApiResult};
use crate::extract::{IdempotencyKey, JsonBody};
use crate::openapi::*;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use baton_state_machine::{
    Command, Compare, CompareOp, CompareTarget, LeaseId, Response, Revision, Txn, TxnOp,
};
use baton_wire::{self as wire, TxnRequest, TxnResponse};

/// Range limit of a txn read when none is given.
const RANGE_LIMIT_DEFAULT: usize = 100;

/// Runs a transaction.
#[utoipa::path(post, path = "/v1/txn", operation_id = "txn_txn", request_body = TxnRequest,
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = r"^[!-~]+$"),
    ),
    responses(
        (status = 200, description = "The branch that ran and its results", body = TxnResponse),
        LeaseNotFound,
        BadRequest,
        TooLarge,
        KeyReused,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn txn(
    State(state): State<AppState>,
    authz: Authz,
    IdempotencyKey(idem): IdempotencyKey,
    JsonBody(body): JsonBody<TxnRequest>,
) -> ApiResult<Json<TxnResponse>> {
    // Every key compared or read needs read, every key written needs write.
    for c in &body.compare {
        authz.allow(Namespace::Keys, &c.key, Access::Read)?;
    }
    for op in body.success.iter().chain(&body.failure) {
        match op {
            wire::TxnOp::Put { key, .. } | wire::TxnOp::Delete { key } => {
                authz.allow(Namespace::Keys, key, Access::Write)?
            }
            wire::TxnOp::DeletePrefix { prefix } => {
                authz.allow(Namespace::Keys, prefix, Access::Write)?
            }
            wire::TxnOp::Range { prefix, .. } => {
                authz.allow(Namespace::Keys, prefix, Access::Read)?
            }
        }
    }
    let txn = Txn {
        compare: body
            .compare
            .into_iter()
            .map(compare)
            .collect::<ApiResult<_>>()?,
        success: body.success.into_iter().map(op).collect(),
        failure: body.failure.into_iter().map(op).collect(),
    };
    let applied = state.propose(&authz, idem, Command::Txn(txn)).await?;
    match applied.response {
        Response::Txn { succeeded, results } => Ok(Json(TxnResponse {
            succeeded,
            results: results.iter().map(convert::txn_result).collect(),
            revision: applied.revision.0,
        })),
        other => Err(ApiError::internal(other)),
    }
}

fn compare(c: wire::Compare) -> ApiResult<Compare> {
    let op = match c.op {
        wire::CompareOp::Equal => CompareOp::Equal,
        wire::CompareOp::NotEqual => CompareOp::NotEqual,
        wire::CompareOp::Greater => CompareOp::Greater,
        wire::CompareOp::Less => CompareOp::Less,
    };
    let target = match (c.target, c.value) {
        (wire::CompareTarget::Value, wire::CompareValue::Text(v)) => CompareTarget::Value(v),
        (wire::CompareTarget::Value, wire::CompareValue::Number(_)) => {
            return Err(ApiError::bad_request(
                "compare.value must be a string for value",
            ));
        }
        (target, wire::CompareValue::Number(n)) => match target {
            wire::CompareTarget::Version => CompareTarget::Version(n),
            wire::CompareTarget::CreateRevision => CompareTarget::CreateRevision(Revision(n)),
            wire::CompareTarget::ModRevision => CompareTarget::ModRevision(Revision(n)),
            wire::CompareTarget::Lease => CompareTarget::Lease(LeaseId(n)),
            wire::CompareTarget::Value => CompareTarget::Value(n.to_string()),
        },
        (target, wire::CompareValue::Text(_)) => {
            return Err(ApiError::bad_request(format!(
                "compare.value must be a number for {target:?}"
            )));
        }
    };
    Ok(Compare {
        key: c.key,
        target,
        op,
    })
}

fn op(op: wire::TxnOp) -> TxnOp {
    match op {
        wire::TxnOp::Put {
            key,
            value,
            lease_id,
        } => TxnOp::Put {
            key,
            value,
            lease: lease_id.map(LeaseId),
        },
        wire::TxnOp::Delete { key } => TxnOp::Delete { key },
        wire::TxnOp::DeletePrefix { prefix } => TxnOp::DeletePrefix { prefix },
        wire::TxnOp::Range { prefix, limit } => TxnOp::Range {
            prefix,
            limit: limit.unwrap_or(RANGE_LIMIT_DEFAULT),
        },
    }
}
