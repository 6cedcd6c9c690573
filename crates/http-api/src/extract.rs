//! Extractors that turn every malformed input into a 4xx with the spec error shape:
//! JSON bodies (any content type, unknown fields refused, size-limited), paths, queries,
//! the `Idempotency-Key` header (checked against the node's limits), and the admin token.

use crate::error::ApiError;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use baton_wire::ErrorDetail;
use serde::de::DeserializeOwned;

/// A JSON body. The content type is not required (so `curl -d` works); size, syntax, types
/// and unknown fields are checked.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::payload_too_large("request body over the limit")
            } else {
                ApiError::bad_request(format!("cannot read the body: {e}"))
            }
        })?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
    }
}

/// Path parameters; a parse failure is a 400.
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(v)| ApiPath(v))
            .map_err(|e| ApiError::bad_request(format!("invalid path: {e}")))
    }
}

/// Query parameters; unknown or malformed ones are a 400.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(v)| ApiQuery(v))
            .map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))
    }
}

/// The `Idempotency-Key` header, if present.
pub struct IdempotencyKey(pub Option<String>);

impl FromRequestParts<AppState> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Some(value) = parts.headers.get("idempotency-key") else {
            return Ok(IdempotencyKey(None));
        };
        let key = value
            .to_str()
            .map_err(|_| ApiError::bad_request("Idempotency-Key must be visible ASCII"))?;
        state.limits().check_idempotency_key(key)?;
        Ok(IdempotencyKey(Some(key.to_owned())))
    }
}

/// Requires the admin bearer token when one is configured.
pub fn require_admin(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &state.config.admin_token else {
        return Ok(());
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        None => Err(ApiError::new(
            ErrorDetail::Unauthorized,
            "an admin bearer token is required",
        )),
        Some(p) if p == token => Ok(()),
        Some(_) => Err(ApiError::new(
            ErrorDetail::Forbidden,
            "this token may not do that",
        )),
    }
}
