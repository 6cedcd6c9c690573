//! `ApiError`: the one error type of the API. Each refusal of the state machine and each
//! failure of the node is mapped here, once, to a typed [`ErrorDetail`] (whose
//! [`baton_wire::ErrorCode`] gives the HTTP status), and every error body is built by
//! [`error_response`].

use crate::convert;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use baton_raft_node::NodeError;
use baton_state_machine::{Error as LimitError, Rejection};
use baton_wire::{ErrorBody, ErrorDetail};

/// Seconds a client should wait before retrying a 503.
const RETRY_AFTER_SECS: u64 = 1;

/// A failed request: what the client is told, typed per code, and in words.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// The code and its details.
    pub detail: ErrorDetail,
    /// The message.
    pub message: String,
}

impl ApiError {
    /// An error of this detail and message.
    pub fn new(detail: ErrorDetail, message: impl Into<String>) -> ApiError {
        ApiError {
            detail,
            message: message.into(),
        }
    }

    /// 400 `bad_request`: malformed or out-of-limit input.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorDetail::BadRequest, message)
    }

    /// 413 `payload_too_large`.
    pub fn payload_too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorDetail::PayloadTooLarge, message)
    }

    /// 503 `unavailable`: the server is shutting down.
    pub fn shutting_down() -> ApiError {
        ApiError::new(ErrorDetail::Unavailable, "the server is shutting down")
    }

    /// 500 `internal`: an inconsistency inside the server (a bug), logged in the request's
    /// span, which carries its `x-request-id`. Never for anything a client sent.
    pub fn internal(what: impl std::fmt::Debug) -> ApiError {
        tracing::error!(?what, "internal inconsistency");
        ApiError::new(
            ErrorDetail::Internal,
            "internal error; the server log has it under this response's x-request-id",
        )
    }
}

impl From<LimitError> for ApiError {
    fn from(e: LimitError) -> ApiError {
        match e {
            LimitError::TooLarge { .. } => ApiError::payload_too_large(e.to_string()),
            _ => ApiError::bad_request(e.to_string()),
        }
    }
}

/// The table: each refusal of the state machine, its code, details and words.
impl From<Rejection> for ApiError {
    fn from(r: Rejection) -> ApiError {
        let (detail, message) = match r {
            Rejection::InvalidArgument { reason } => (ErrorDetail::BadRequest, reason),
            Rejection::LeaseNotFound { lease } => (
                ErrorDetail::LeaseNotFound,
                format!("lease {lease} not found"),
            ),
            Rejection::KeyNotFound { key } => {
                (ErrorDetail::KeyNotFound, format!("key {key:?} not found"))
            }
            Rejection::LockNotFound { resource } => (
                ErrorDetail::LockNotFound,
                format!(
                    "{} {:?} has no holder or waiter",
                    resource.kind.as_str(),
                    resource.name
                ),
            ),
            Rejection::LockHeld {
                holders,
                queue_len,
                delayed,
            } => (
                ErrorDetail::LockHeld {
                    holders: holders.iter().map(convert::holder).collect(),
                    queue_len,
                    lock_delay: delayed,
                },
                if delayed {
                    "the lock is in its lock-delay after a lost holder".into()
                } else {
                    "the lock is held (try-acquire does not queue)".into()
                },
            ),
            Rejection::NotHolder { current_fence } => (
                ErrorDetail::NotHolder {
                    fence: current_fence.map(|f| f.0),
                },
                "the caller does not hold this grant".into(),
            ),
            Rejection::NotWaiting => (
                ErrorDetail::NotWaiting,
                "the request is no longer waiting in the queue".into(),
            ),
            Rejection::CasFailed { current } => (
                ErrorDetail::CasFailed {
                    current: current.as_ref().map(convert::key_value),
                },
                "the compare-and-set expectation did not hold".into(),
            ),
            Rejection::LimitMismatch { limit } => (
                ErrorDetail::LimitMismatch { limit },
                format!("the semaphore's limit is {limit}"),
            ),
            Rejection::QueueFull { queue_len_max } => (
                ErrorDetail::RateLimited {
                    queue_len_max: Some(queue_len_max),
                    retry_after_ms: None,
                },
                format!("the queue is full ({queue_len_max} waiters)"),
            ),
            Rejection::IdempotencyKeyReused => (
                ErrorDetail::IdempotencyKeyReused,
                "this Idempotency-Key was used for a different request".into(),
            ),
            Rejection::PermissionDenied { reason } => (ErrorDetail::PermissionDenied, reason),
            Rejection::QuotaExceeded { resource, limit } => (
                ErrorDetail::QuotaExceeded {
                    resource: resource.clone(),
                    limit,
                },
                format!("over the quota of {limit} {resource}"),
            ),
            Rejection::Stale => (
                ErrorDetail::Stale,
                "the command no longer matches the state".into(),
            ),
            Rejection::Compacted { oldest } => (
                ErrorDetail::Compacted {
                    oldest_revision: oldest.0,
                },
                format!("revisions before {oldest} are compacted"),
            ),
        };
        ApiError::new(detail, message)
    }
}

/// Each failure of the node: 503 when nothing happened, 504 when a write may have.
impl From<NodeError> for ApiError {
    fn from(e: NodeError) -> ApiError {
        let detail = match &e {
            NodeError::NoLeader | NodeError::ForwardToLeader { .. } => ErrorDetail::NoLeader,
            // The command may have been applied: say so, and never call it a failure.
            NodeError::Indeterminate(_) => ErrorDetail::Indeterminate {
                indeterminate: true,
            },
            NodeError::Invalid(limit) => return ApiError::from(limit.clone()),
            NodeError::Membership(_) => ErrorDetail::MembershipChangeRefused,
            NodeError::Unavailable(_)
            | NodeError::Stopped
            | NodeError::Storage(_)
            | NodeError::Config(_) => ErrorDetail::Unavailable,
        };
        ApiError::new(detail, e.to_string())
    }
}

/// The response of an error: its code's status, `Retry-After` on a 503, and the body.
pub fn error_response(detail: ErrorDetail, message: String) -> Response {
    let status = detail
        .code()
        .and_then(|c| StatusCode::from_u16(c.status()).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let code = detail.code();
    let mut response = (status, axum::Json(ErrorBody::new(detail, message))).into_response();
    if let Some(code) = code {
        response.extensions_mut().insert(code);
    }
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    }
    response
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error_response(self.detail, self.message)
    }
}

/// A result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;
    use baton_state_machine::{Fence, LeaseId, ResourceId, Revision};

    fn status_and_code(e: ApiError) -> (u16, String) {
        let response = e.into_response();
        let status = response.status().as_u16();
        let code = response
            .headers()
            .get(header::RETRY_AFTER)
            .map(|_| "+retry-after")
            .unwrap_or("");
        (status, code.to_owned())
    }

    #[test]
    fn every_rejection_maps_to_its_code_and_status() {
        let cases: Vec<(Rejection, &str, u16)> = vec![
            (
                Rejection::InvalidArgument { reason: "x".into() },
                "bad_request",
                400,
            ),
            (
                Rejection::LeaseNotFound { lease: LeaseId(1) },
                "lease_not_found",
                404,
            ),
            (
                Rejection::KeyNotFound { key: "k".into() },
                "key_not_found",
                404,
            ),
            (
                Rejection::LockNotFound {
                    resource: ResourceId::lock("l"),
                },
                "lock_not_found",
                404,
            ),
            (
                Rejection::LockHeld {
                    holders: vec![],
                    queue_len: 0,
                    delayed: false,
                },
                "lock_held",
                409,
            ),
            (
                Rejection::NotHolder {
                    current_fence: Some(Fence(3)),
                },
                "not_holder",
                409,
            ),
            (Rejection::NotWaiting, "not_waiting", 409),
            (Rejection::CasFailed { current: None }, "cas_failed", 409),
            (Rejection::LimitMismatch { limit: 2 }, "limit_mismatch", 409),
            (
                Rejection::QueueFull { queue_len_max: 9 },
                "rate_limited",
                429,
            ),
            (
                Rejection::IdempotencyKeyReused,
                "idempotency_key_reused",
                422,
            ),
            (Rejection::Stale, "stale", 409),
            (
                Rejection::Compacted {
                    oldest: Revision(5),
                },
                "compacted",
                410,
            ),
        ];
        for (rejection, code, status) in cases {
            let e = ApiError::from(rejection);
            assert_eq!(e.detail.code().map(|c| c.as_str()), Some(code));
            assert_eq!(status_and_code(e).0, status, "{code}");
        }
    }

    #[test]
    fn an_inconsistency_is_a_500_and_unavailability_a_503_with_retry_after() {
        assert_eq!(
            status_and_code(ApiError::internal("unexpected answer")),
            (500, String::new())
        );
        assert_eq!(
            status_and_code(ApiError::from(NodeError::NoLeader)),
            (503, "+retry-after".to_owned())
        );
        assert_eq!(
            status_and_code(ApiError::from(NodeError::Indeterminate("t".into()))).0,
            504
        );
    }
}
