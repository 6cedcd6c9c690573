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
use baton_state_machine::Response;
use baton_wire::{self as wire, TxnRequest, TxnResponse};

/// Runs a transaction.
#[utoipa::path(post, path = baton_wire::paths::TXN, operation_id = "txn_txn", request_body = TxnRequest,
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = "{idempotency_key}"),
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
    let command = convert::txn(body)?;
    let applied = state.propose(&authz, idem, command).await?;
    match applied.response {
        Response::Txn { succeeded, results } => Ok(Json(TxnResponse {
            succeeded,
            results: results.iter().map(convert::txn_result).collect(),
            revision: applied.revision.0,
        })),
        other => Err(ApiError::internal(other)),
    }
}
