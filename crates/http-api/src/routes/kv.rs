//! Keys: put (with compare-and-set), sequential create, get, range, delete, delete prefix.

use super::LIST_LIMIT_DEFAULT;
use crate::auth::{Access, Authz, Namespace};
use crate::convert;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, IdempotencyKey, JsonBody};
use crate::openapi::*;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use baton_state_machine::Response;
use baton_wire::*;

/// Writes a key; `prev_revision` makes it a compare-and-set on `mod_revision`.
#[utoipa::path(put, path = baton_wire::paths::KV_KEY, operation_id = "kv_put", request_body = PutRequest,
    params(
        ("key" = String, Path, description = "The key (may contain `/`): 1..=`name_bytes_max` bytes of UTF-8, no control characters, no `.` or `..` segment", min_length = 1, pattern = "{name}"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = "{idempotency_key}"),
    ),
    responses(
        (status = 200, description = "Written", body = PutResponse),
        LeaseNotFound,
        (status = 409, description = "`cas_failed`: `prev_revision` did not match (`current`: the key, or null)", body = ErrorBody),
        BadRequest,
        TooLarge,
        KeyReused,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn put(
    State(state): State<AppState>,
    authz: Authz,
    IdempotencyKey(idem): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<PutRequest>,
) -> ApiResult<Json<PutResponse>> {
    let key = state.checked_name(&authz, Namespace::Keys, &raw, Access::Write)?;
    let command = convert::put(key, body);
    Ok(Json(put_answer(
        state.propose(&authz, idem, command).await?,
    )?))
}

/// Creates `prefix` + a zero-padded, strictly increasing suffix.
#[utoipa::path(post, path = baton_wire::paths::KV_KEY, operation_id = "kv_create_sequential", request_body = SequentialRequest,
    params(
        ("key" = String, Path, description = "The prefix of the new key, which is the prefix followed by a zero-padded revision (may contain `/`): 1..=`name_bytes_max` bytes of UTF-8, no control characters, no `.` or `..` segment", min_length = 1, pattern = "{name}"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = "{idempotency_key}"),
    ),
    responses(
        (status = 201, description = "Created", body = PutResponse),
        LeaseNotFound,
        (status = 409, description = "`cas_failed`: a key written by hand is in the way", body = ErrorBody),
        BadRequest,
        TooLarge,
        KeyReused,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn create_sequential(
    State(state): State<AppState>,
    authz: Authz,
    IdempotencyKey(idem): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<SequentialRequest>,
) -> ApiResult<(StatusCode, Json<PutResponse>)> {
    let prefix = state.checked_name(&authz, Namespace::Keys, &raw, Access::Write)?;
    let command = convert::put_sequential(prefix, body);
    let answer = put_answer(state.propose(&authz, idem, command).await?)?;
    Ok((StatusCode::CREATED, Json(answer)))
}

fn put_answer(applied: baton_state_machine::Applied) -> ApiResult<PutResponse> {
    match applied.response {
        Response::Put {
            key,
            create_revision,
            version,
        } => Ok(PutResponse {
            key,
            revision: applied.revision.0,
            create_revision: create_revision.0,
            version,
        }),
        other => Err(ApiError::internal(other)),
    }
}

/// Reads a key.
#[utoipa::path(get, path = baton_wire::paths::KV_KEY, operation_id = "kv_get",
    params(
        ("key" = String, Path, description = "The key (may contain `/`): 1..=`name_bytes_max` bytes of UTF-8, no control characters, no `.` or `..` segment", min_length = 1, pattern = "{name}"),
        ReadParams,
    ),
    responses(
        (status = 200, description = "The key", body = KeyResponse),
        (status = 404, description = "`key_not_found`: no such key", body = ErrorBody),
        BadRequest,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn get(
    State(state): State<AppState>,
    authz: Authz,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(params): ApiQuery<ReadParams>,
) -> ApiResult<Json<KeyResponse>> {
    let key = state.checked_name(&authz, Namespace::Keys, &raw, Access::Read)?;
    let (kv, revision) = state.read(params.consistency, |sm| sm.get(&key)).await?;
    let kv = kv
        .ok_or_else(|| ApiError::new(ErrorDetail::KeyNotFound, format!("key {key:?} not found")))?;
    Ok(Json(KeyResponse {
        kv: convert::key_value(&kv),
        revision: revision.0,
    }))
}

/// Keys under a prefix, in order.
#[utoipa::path(get, path = baton_wire::paths::KV, operation_id = "kv_range",
    params(RangeParams),
    responses(
        (status = 200, description = "Keys under the prefix", body = RangeResponse),
        BadRequest,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn range(
    State(state): State<AppState>,
    authz: Authz,
    ApiQuery(params): ApiQuery<RangeParams>,
) -> ApiResult<Json<RangeResponse>> {
    let prefix = state.prefix("prefix", &params.prefix)?;
    let limit = params.limit.unwrap_or(LIST_LIMIT_DEFAULT);
    state.node.config().limits.check_range_limit(limit)?;
    // Only the keys the principal may read, filtered before anything is copied and
    // before the limit (`more` says whether more readable keys follow).
    let ((kvs, more), revision) = state
        .read(params.consistency, |sm| {
            sm.range_visible(&prefix, limit, |key| {
                authz.can(Namespace::Keys, key, Access::Read)
            })
        })
        .await?;
    Ok(Json(RangeResponse {
        kvs: kvs.iter().map(convert::key_value).collect(),
        more,
        revision: revision.0,
    }))
}

/// Deletes a key (compare-and-set with `?prev_revision=`).
#[utoipa::path(delete, path = baton_wire::paths::KV_KEY, operation_id = "kv_delete",
    params(
        ("key" = String, Path, description = "The key (may contain `/`): 1..=`name_bytes_max` bytes of UTF-8, no control characters, no `.` or `..` segment", min_length = 1, pattern = "{name}"),
        DeleteParams,
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = "{idempotency_key}"),
    ),
    responses(
        (status = 200, description = "Deleted", body = DeleteResponse),
        (status = 404, description = "`key_not_found`: no such key", body = ErrorBody),
        (status = 409, description = "`cas_failed`: `prev_revision` did not match", body = ErrorBody),
        BadRequest,
        KeyReused,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn delete(
    State(state): State<AppState>,
    authz: Authz,
    IdempotencyKey(idem): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(params): ApiQuery<DeleteParams>,
) -> ApiResult<Json<DeleteResponse>> {
    let key = state.checked_name(&authz, Namespace::Keys, &raw, Access::Write)?;
    let command = convert::delete(key, params);
    delete_answer(state.propose(&authz, idem, command).await?)
}

/// Deletes every key under a non-empty prefix, in one revision.
#[utoipa::path(delete, path = baton_wire::paths::KV, operation_id = "kv_delete_prefix",
    params(
        DeletePrefixParams,
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = "{idempotency_key}"),
    ),
    responses(
        (status = 200, description = "Deleted", body = DeleteResponse),
        BadRequest,
        KeyReused,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn delete_prefix(
    State(state): State<AppState>,
    authz: Authz,
    IdempotencyKey(idem): IdempotencyKey,
    ApiQuery(params): ApiQuery<DeletePrefixParams>,
) -> ApiResult<Json<DeleteResponse>> {
    let prefix = state.checked_name(&authz, Namespace::Keys, &params.prefix, Access::Write)?;
    let command = convert::delete_prefix(prefix);
    delete_answer(state.propose(&authz, idem, command).await?)
}

fn delete_answer(applied: baton_state_machine::Applied) -> ApiResult<Json<DeleteResponse>> {
    match applied.response {
        Response::Deleted { deleted } => Ok(Json(DeleteResponse {
            deleted,
            revision: applied.revision.0,
        })),
        other => Err(ApiError::internal(other)),
    }
}
