//! `POST /v1/txn`: etcd-style compares, then the success or failure operations, in one
//! revision.

use crate::error::{ApiError, ApiResult};
use crate::extract::{IdempotencyKey, JsonBody};
use crate::routes::leases::unexpected;
use crate::state::AppState;
use crate::wire::*;
use axum::Json;
use axum::extract::State;
use baton_state_machine::{
    Command, Compare, CompareOp, CompareTarget, LeaseId, Response, Revision, Txn, TxnOp,
};
use serde_json::Value;

/// Range limit of a txn read when none is given.
const RANGE_LIMIT_DEFAULT: usize = 100;

/// Runs a transaction.
#[utoipa::path(post, path = "/v1/txn", request_body = TxnRequest, responses((status = 200, body = TxnResponse)))]
pub(crate) async fn txn(
    State(state): State<AppState>,
    IdempotencyKey(idem): IdempotencyKey,
    JsonBody(body): JsonBody<TxnRequest>,
) -> ApiResult<Json<TxnResponse>> {
    let txn = Txn {
        compare: body
            .compare
            .into_iter()
            .map(compare)
            .collect::<ApiResult<_>>()?,
        success: body.success.into_iter().map(op).collect(),
        failure: body.failure.into_iter().map(op).collect(),
    };
    let applied = state.apply(idem, Command::Txn(txn)).await?;
    match applied.response {
        Response::Txn { succeeded, results } => Ok(Json(TxnResponse {
            succeeded,
            results: results.iter().map(txn_result_json).collect(),
            revision: applied.revision.0,
        })),
        other => Err(unexpected(&other)),
    }
}

fn compare(dto: CompareDto) -> ApiResult<Compare> {
    let op = match dto.op.as_str() {
        "equal" | "=" | "==" => CompareOp::Equal,
        "not_equal" | "!=" => CompareOp::NotEqual,
        "greater" | ">" => CompareOp::Greater,
        "less" | "<" => CompareOp::Less,
        other => {
            return Err(ApiError::BadRequest(format!(
                "compare.op: unknown {other:?}"
            )));
        }
    };
    let number = |v: &Value| {
        v.as_u64().ok_or_else(|| {
            ApiError::BadRequest(format!("compare.value must be a number for {}", dto.target))
        })
    };
    let target = match dto.target.as_str() {
        "value" => CompareTarget::Value(
            dto.value
                .as_str()
                .ok_or_else(|| {
                    ApiError::BadRequest("compare.value must be a string for value".into())
                })?
                .to_owned(),
        ),
        "version" => CompareTarget::Version(number(&dto.value)?),
        "create_revision" => CompareTarget::CreateRevision(Revision(number(&dto.value)?)),
        "mod_revision" => CompareTarget::ModRevision(Revision(number(&dto.value)?)),
        "lease" => CompareTarget::Lease(LeaseId(number(&dto.value)?)),
        other => {
            return Err(ApiError::BadRequest(format!(
                "compare.target: unknown {other:?}"
            )));
        }
    };
    Ok(Compare {
        key: dto.key,
        target,
        op,
    })
}

fn op(dto: TxnOpDto) -> TxnOp {
    match dto {
        TxnOpDto::Put {
            key,
            value,
            lease_id,
        } => TxnOp::Put {
            key,
            value,
            lease: lease_id.map(LeaseId),
        },
        TxnOpDto::Delete { key } => TxnOp::Delete { key },
        TxnOpDto::DeletePrefix { prefix } => TxnOp::DeletePrefix { prefix },
        TxnOpDto::Range { prefix, limit } => TxnOp::Range {
            prefix,
            limit: limit.unwrap_or(RANGE_LIMIT_DEFAULT),
        },
    }
}
