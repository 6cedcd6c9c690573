//! `ApiError`: the one error type of the API, mapped once to a status code and the spec's
//! shape `{"error": {"code": "snake_case", "message": "…", …details}}`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use baton_raft_node::NodeError;
use baton_state_machine::{Error as LimitError, Rejection};
use serde_json::{Map, Value, json};

/// Seconds a client should wait before retrying a 503.
const RETRY_AFTER_SECS: u64 = 1;

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Malformed or out-of-limit input (400 `bad_request`).
    #[error("{0}")]
    BadRequest(String),
    /// A body or value over its limit (413 `payload_too_large`).
    #[error("{0}")]
    PayloadTooLarge(String),
    /// Missing or wrong credentials (401 `unauthorized`).
    #[error("{0}")]
    Unauthorized(String),
    /// Credentials without the right (403 `forbidden`).
    #[error("{0}")]
    Forbidden(String),
    /// Something that does not exist (404 with a specific code).
    #[error("{message}")]
    NotFound {
        /// `lease_not_found`, `key_not_found`, `lock_not_found` or `not_found`.
        code: &'static str,
        /// In words.
        message: String,
    },
    /// A deterministic refusal of the state machine.
    #[error("{}", rejection_message(.0))]
    Rejected(Rejection),
    /// A blocking acquire's deadline passed before a grant (409 `timeout`).
    #[error("no grant within {wait_ms} ms")]
    Timeout {
        /// The wait asked for.
        wait_ms: u64,
    },
    /// The cluster could not answer (503 / 504).
    #[error(transparent)]
    Node(#[from] NodeError),
    /// The server is shutting down (503 `unavailable`).
    #[error("the server is shutting down")]
    ShuttingDown,
}

impl From<LimitError> for ApiError {
    fn from(e: LimitError) -> ApiError {
        match e {
            LimitError::TooLarge { .. } => ApiError::PayloadTooLarge(e.to_string()),
            _ => ApiError::BadRequest(e.to_string()),
        }
    }
}

impl From<Rejection> for ApiError {
    fn from(r: Rejection) -> ApiError {
        match r {
            Rejection::LeaseNotFound { lease } => ApiError::NotFound {
                code: "lease_not_found",
                message: format!("lease {lease} not found"),
            },
            Rejection::KeyNotFound { key } => ApiError::NotFound {
                code: "key_not_found",
                message: format!("key {key:?} not found"),
            },
            Rejection::LockNotFound { resource } => ApiError::NotFound {
                code: "lock_not_found",
                message: format!(
                    "{} {:?} has no holder or waiter",
                    resource.kind.as_str(),
                    resource.name
                ),
            },
            Rejection::InvalidArgument { reason } => ApiError::BadRequest(reason),
            other => ApiError::Rejected(other),
        }
    }
}

impl ApiError {
    /// Status, code and details of this error.
    fn parts(&self) -> (StatusCode, &'static str, Map<String, Value>) {
        let mut details = Map::new();
        let (status, code) = match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::NotFound { code, .. } => (StatusCode::NOT_FOUND, *code),
            ApiError::Timeout { wait_ms } => {
                details.insert("wait_ms".into(), json!(wait_ms));
                (StatusCode::CONFLICT, "timeout")
            }
            ApiError::Rejected(r) => rejection_parts(r, &mut details),
            ApiError::Node(e) => node_parts(e, &mut details),
            ApiError::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        };
        (status, code, details)
    }
}

fn rejection_message(r: &Rejection) -> String {
    match r {
        Rejection::LockHeld { delayed: true, .. } => {
            "the lock is in its lock-delay after a lost holder".into()
        }
        Rejection::LockHeld { .. } => "the lock is held (try-acquire does not queue)".into(),
        Rejection::NotHolder { .. } => "the caller does not hold this grant".into(),
        Rejection::NotWaiting => "the request is no longer waiting in the queue".into(),
        Rejection::CasFailed { .. } => "the compare-and-set expectation did not hold".into(),
        Rejection::LimitMismatch { limit } => format!("the semaphore's limit is {limit}"),
        Rejection::QueueFull { queue_len_max } => {
            format!("the queue is full ({queue_len_max} waiters)")
        }
        Rejection::IdempotencyKeyReused => {
            "this Idempotency-Key was used for a different request".into()
        }
        Rejection::Stale => "the command no longer matches the state".into(),
        Rejection::Compacted { oldest } => format!("revisions before {oldest} are compacted"),
        Rejection::InvalidArgument { reason } => reason.clone(),
        Rejection::LeaseNotFound { lease } => format!("lease {lease} not found"),
        Rejection::KeyNotFound { key } => format!("key {key:?} not found"),
        Rejection::LockNotFound { resource } => {
            format!("{} {:?} not found", resource.kind.as_str(), resource.name)
        }
    }
}

fn rejection_parts(r: &Rejection, details: &mut Map<String, Value>) -> (StatusCode, &'static str) {
    match r {
        Rejection::LockHeld {
            holders,
            queue_len,
            delayed,
        } => {
            let holders: Vec<Value> = holders.iter().map(crate::wire::holder_json).collect();
            details.insert("holders".into(), json!(holders));
            details.insert("queue_len".into(), json!(queue_len));
            details.insert("lock_delay".into(), json!(delayed));
            (StatusCode::CONFLICT, "lock_held")
        }
        Rejection::NotHolder { current_fence } => {
            details.insert("fence".into(), json!(current_fence.map(|f| f.0)));
            (StatusCode::CONFLICT, "not_holder")
        }
        Rejection::NotWaiting => (StatusCode::CONFLICT, "not_waiting"),
        Rejection::CasFailed { current } => {
            let current = current.as_ref().map(crate::wire::key_json);
            details.insert("current".into(), json!(current));
            (StatusCode::CONFLICT, "cas_failed")
        }
        Rejection::LimitMismatch { limit } => {
            details.insert("limit".into(), json!(limit));
            (StatusCode::CONFLICT, "limit_mismatch")
        }
        Rejection::QueueFull { queue_len_max } => {
            details.insert("queue_len_max".into(), json!(queue_len_max));
            (StatusCode::TOO_MANY_REQUESTS, "rate_limited")
        }
        Rejection::IdempotencyKeyReused => (StatusCode::CONFLICT, "idempotency_key_reused"),
        Rejection::Stale => (StatusCode::CONFLICT, "stale"),
        Rejection::Compacted { oldest } => {
            details.insert("oldest_revision".into(), json!(oldest.0));
            (StatusCode::GONE, "compacted")
        }
        Rejection::InvalidArgument { .. } => (StatusCode::BAD_REQUEST, "bad_request"),
        Rejection::LeaseNotFound { .. } => (StatusCode::NOT_FOUND, "lease_not_found"),
        Rejection::KeyNotFound { .. } => (StatusCode::NOT_FOUND, "key_not_found"),
        Rejection::LockNotFound { .. } => (StatusCode::NOT_FOUND, "lock_not_found"),
    }
}

fn node_parts(e: &NodeError, details: &mut Map<String, Value>) -> (StatusCode, &'static str) {
    match e {
        NodeError::NoLeader | NodeError::ForwardToLeader { .. } => {
            (StatusCode::SERVICE_UNAVAILABLE, "no_leader")
        }
        NodeError::Indeterminate(_) => {
            // The command may have been applied: say so, and never call it a failure.
            details.insert("indeterminate".into(), json!(true));
            (StatusCode::GATEWAY_TIMEOUT, "indeterminate")
        }
        NodeError::Invalid(LimitError::TooLarge { .. }) => {
            (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
        }
        NodeError::Invalid(_) => (StatusCode::BAD_REQUEST, "bad_request"),
        NodeError::Membership(_) => (StatusCode::CONFLICT, "membership_change_refused"),
        NodeError::Unavailable(_)
        | NodeError::Stopped
        | NodeError::Storage(_)
        | NodeError::Config(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, mut details) = self.parts();
        details.insert("code".into(), json!(code));
        details.insert("message".into(), json!(self.to_string()));
        let mut response = (status, axum::Json(json!({ "error": details }))).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        response
    }
}

/// A result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;
