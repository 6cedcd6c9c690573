//! Extractors that turn every malformed input into a 4xx with the spec error shape:
//! JSON bodies (`Content-Type: application/json` required, unknown fields refused,
//! size-limited), paths, queries,
//! the `Idempotency-Key` header (checked against the node's limits), and the admin token.

use crate::error::ApiError;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use baton_wire::ErrorDetail;
use serde::de::DeserializeOwned;

/// A JSON body: its content type must say JSON (415 otherwise; `curl --json` does), and
/// size, syntax, types and unknown fields are checked.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        // A web page may send a cross-site `text/plain` or form POST without asking first;
        // it may not send `application/json` without a CORS preflight, which this server
        // never grants. So a JSON body must say it is one.
        if !is_json(req.headers()) {
            return Err(ApiError::new(
                baton_wire::ErrorDetail::UnsupportedMediaType,
                "a request body must be JSON sent with `Content-Type: application/json`",
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::payload_too_large("request body over the limit")
            } else {
                ApiError::bad_request(format!("cannot read the body: {e}"))
            }
        })?;
        let invalid =
            |e: serde_json::Error| ApiError::bad_request(format!("invalid JSON body: {e}"));
        let mut value: serde_json::Value = serde_json::from_slice(&bytes).map_err(invalid)?;
        whole_numbers_as_integers(&mut value);
        serde_json::from_value(value).map(JsonBody).map_err(invalid)
    }
}

/// Whether the request says its body is JSON: `application/json` or `application/…+json`,
/// with any parameters (`; charset=utf-8`).
fn is_json(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let media = value.split(';').next().unwrap_or_default().trim();
    let Some((kind, subtype)) = media.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json") || subtype.to_ascii_lowercase().ends_with("+json"))
}

/// JSON has one number type, and JSON Schema counts `5.0` as an integer: a number with no
/// fraction that fits an integer becomes one, so `{"ttl_ms": 5000.0}` means 5000 (as it
/// does to most JSON producers). Anything else is left for serde to refuse.
fn whole_numbers_as_integers(value: &mut serde_json::Value) {
    use serde_json::{Number, Value};
    match value {
        Value::Number(n) if !(n.is_u64() || n.is_i64()) => {
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0) {
                // Exact in both directions: below 2^64 (u64) or at least -2^63 (i64).
                if (0.0..18_446_744_073_709_551_616.0).contains(&f) {
                    *n = Number::from(f as u64);
                } else if (-9_223_372_036_854_775_808.0..0.0).contains(&f) {
                    *n = Number::from(f as i64);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_numbers_as_integers),
        Value::Object(fields) => fields.values_mut().for_each(whole_numbers_as_integers),
        _ => {}
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
            ErrorDetail::Unauthenticated,
            "an admin bearer token is required",
        )),
        Some(p) if token.matches(p.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::new(
            ErrorDetail::PermissionDenied,
            "this token may not do that",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whole_numbers_written_with_a_fraction_are_integers_and_fractions_stay() {
        let mut v = json!({"a": 1012.0, "b": [3.0, -4.0, 2.5], "c": {"d": 1e3}, "e": "7.0"});
        whole_numbers_as_integers(&mut v);
        assert_eq!(
            v,
            json!({"a": 1012, "b": [3, -4, 2.5], "c": {"d": 1000}, "e": "7.0"})
        );
        assert!(v["a"].is_u64());
        let mut huge = json!(1e30);
        whole_numbers_as_integers(&mut huge);
        assert!(
            huge.is_f64(),
            "out of range stays a float, for serde to refuse"
        );
        // Parsed exactly (found by the fuzzer: without exact parsing this read as
        // 1838530429156448.8 and was refused).
        let mut big: serde_json::Value =
            serde_json::from_str(r#"{"lease_id": 1838530429156449.0}"#).unwrap();
        whole_numbers_as_integers(&mut big);
        assert_eq!(big["lease_id"].as_u64(), Some(1_838_530_429_156_449));
    }
}
