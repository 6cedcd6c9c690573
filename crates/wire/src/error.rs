//! Error bodies: `{"error": {"code": "<snake_case>", "message": "…", …details}}`.

use crate::{Holder, KeyValue};
use serde::{Deserialize, Serialize};

/// Every error code of the API, with its string and HTTP status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ErrorCode {
    /// Malformed input, an unknown field, a limit, a bad name (400).
    BadRequest,
    /// No valid bearer token where one is required (401).
    Unauthenticated,
    /// The principal may not do this to that resource (403).
    PermissionDenied,
    /// No such lease (404).
    LeaseNotFound,
    /// No such key (404).
    KeyNotFound,
    /// No holder or waiter to force-release (404).
    LockNotFound,
    /// No such endpoint (404).
    NotFound,
    /// Wrong method on an endpoint (405).
    MethodNotAllowed,
    /// A try-acquire found the resource busy (409).
    LockHeld,
    /// A held-open acquire's deadline passed first (409).
    Timeout,
    /// The caller does not hold that grant (409).
    NotHolder,
    /// A compare-and-set expectation did not hold (409).
    CasFailed,
    /// A semaphore is in use with another limit (409).
    LimitMismatch,
    /// The waiting request's queue entry is gone (409).
    NotWaiting,
    /// An idempotency key reused for another request (422).
    IdempotencyKeyReused,
    /// A membership change was refused (409).
    MembershipChangeRefused,
    /// A command that no longer matches the state (409).
    Stale,
    /// The watch start is older than the event window (410).
    Compacted,
    /// A body or value over its limit (413).
    PayloadTooLarge,
    /// A body sent without `Content-Type: application/json` (415).
    UnsupportedMediaType,
    /// A queue at its bound, or the principal's request rate (429).
    RateLimited,
    /// A principal's quota on leases, keys, bytes, waiters or watches (429).
    QuotaExceeded,
    /// An internal inconsistency of the server: a bug, logged with the request id (500).
    Internal,
    /// No leader is known: nothing happened (503).
    NoLeader,
    /// The node cannot serve now: nothing happened (503).
    Unavailable,
    /// A write was sent and not confirmed: it may have happened (504).
    Indeterminate,
}

impl ErrorCode {
    /// The code as it appears in the body.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::LeaseNotFound => "lease_not_found",
            ErrorCode::KeyNotFound => "key_not_found",
            ErrorCode::LockNotFound => "lock_not_found",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::LockHeld => "lock_held",
            ErrorCode::Timeout => "timeout",
            ErrorCode::NotHolder => "not_holder",
            ErrorCode::CasFailed => "cas_failed",
            ErrorCode::LimitMismatch => "limit_mismatch",
            ErrorCode::NotWaiting => "not_waiting",
            ErrorCode::IdempotencyKeyReused => "idempotency_key_reused",
            ErrorCode::MembershipChangeRefused => "membership_change_refused",
            ErrorCode::Stale => "stale",
            ErrorCode::Compacted => "compacted",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::QuotaExceeded => "quota_exceeded",
            ErrorCode::Internal => "internal",
            ErrorCode::NoLeader => "no_leader",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Indeterminate => "indeterminate",
        }
    }

    /// The HTTP status that carries it.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::BadRequest => 400,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::PermissionDenied => 403,
            ErrorCode::LeaseNotFound
            | ErrorCode::KeyNotFound
            | ErrorCode::LockNotFound
            | ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::LockHeld
            | ErrorCode::Timeout
            | ErrorCode::NotHolder
            | ErrorCode::CasFailed
            | ErrorCode::LimitMismatch
            | ErrorCode::NotWaiting
            | ErrorCode::MembershipChangeRefused
            | ErrorCode::Stale => 409,
            ErrorCode::IdempotencyKeyReused => 422,
            ErrorCode::Compacted => 410,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::RateLimited | ErrorCode::QuotaExceeded => 429,
            ErrorCode::Internal => 500,
            ErrorCode::NoLeader | ErrorCode::Unavailable => 503,
            ErrorCode::Indeterminate => 504,
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error's code with the details that code carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ErrorDetail {
    /// 400.
    BadRequest,
    /// 401.
    Unauthenticated,
    /// 403.
    PermissionDenied,
    /// 404.
    LeaseNotFound,
    /// 404.
    KeyNotFound,
    /// 404.
    LockNotFound,
    /// 404.
    NotFound,
    /// 405.
    MethodNotAllowed,
    /// 409: the resource is busy and the request did not queue.
    LockHeld {
        /// Current holders (at most 32).
        holders: Vec<Holder>,
        /// Waiters in the queue.
        queue_len: u64,
        /// Whether a lock-delay keeps it ungranted.
        lock_delay: bool,
    },
    /// 409: no grant within the wait.
    Timeout {
        /// The wait asked for.
        wait_ms: u64,
    },
    /// 409: not the holder of that grant.
    NotHolder {
        /// The current holder's fence, or null.
        fence: Option<u64>,
    },
    /// 409: the compare-and-set expectation did not hold.
    CasFailed {
        /// The key as it is, or null.
        current: Option<KeyValue>,
    },
    /// 409: the semaphore's limit is another.
    LimitMismatch {
        /// Its limit.
        limit: u32,
    },
    /// 409.
    NotWaiting,
    /// 422: the key was used for another request.
    IdempotencyKeyReused,
    /// 409.
    MembershipChangeRefused,
    /// 409.
    Stale,
    /// 410: revisions before `oldest_revision` are gone.
    Compacted {
        /// The oldest revision still held.
        oldest_revision: u64,
    },
    /// 413.
    PayloadTooLarge,
    /// 415: a body without `Content-Type: application/json`.
    UnsupportedMediaType,
    /// 429: a queue is at its bound, or the principal sends faster than its rate.
    RateLimited {
        /// The queue's bound, when a queue is full.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queue_len_max: Option<u64>,
        /// When to try again, when the principal's rate was passed (also `Retry-After`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
    },
    /// 429: the principal's quota on `resource` would be passed.
    QuotaExceeded {
        /// `leases`, `keys`, `key_bytes`, `waiters` or `watches`.
        resource: String,
        /// The principal's limit.
        limit: u64,
    },
    /// 500: a bug of the server, logged under the response's `x-request-id`.
    Internal,
    /// 503.
    NoLeader,
    /// 503.
    Unavailable,
    /// 504: the write may have happened.
    Indeterminate {
        /// Always true: the outcome is unknown, not a failure.
        indeterminate: bool,
    },
    /// A code this version does not know (a newer server).
    #[serde(other)]
    Unknown,
}

impl ErrorDetail {
    /// Its code; `None` for a code this version does not know.
    pub fn code(&self) -> Option<ErrorCode> {
        Some(match self {
            ErrorDetail::BadRequest => ErrorCode::BadRequest,
            ErrorDetail::Unauthenticated => ErrorCode::Unauthenticated,
            ErrorDetail::PermissionDenied => ErrorCode::PermissionDenied,
            ErrorDetail::LeaseNotFound => ErrorCode::LeaseNotFound,
            ErrorDetail::KeyNotFound => ErrorCode::KeyNotFound,
            ErrorDetail::LockNotFound => ErrorCode::LockNotFound,
            ErrorDetail::NotFound => ErrorCode::NotFound,
            ErrorDetail::MethodNotAllowed => ErrorCode::MethodNotAllowed,
            ErrorDetail::LockHeld { .. } => ErrorCode::LockHeld,
            ErrorDetail::Timeout { .. } => ErrorCode::Timeout,
            ErrorDetail::NotHolder { .. } => ErrorCode::NotHolder,
            ErrorDetail::CasFailed { .. } => ErrorCode::CasFailed,
            ErrorDetail::LimitMismatch { .. } => ErrorCode::LimitMismatch,
            ErrorDetail::NotWaiting => ErrorCode::NotWaiting,
            ErrorDetail::IdempotencyKeyReused => ErrorCode::IdempotencyKeyReused,
            ErrorDetail::MembershipChangeRefused => ErrorCode::MembershipChangeRefused,
            ErrorDetail::Stale => ErrorCode::Stale,
            ErrorDetail::Compacted { .. } => ErrorCode::Compacted,
            ErrorDetail::PayloadTooLarge => ErrorCode::PayloadTooLarge,
            ErrorDetail::UnsupportedMediaType => ErrorCode::UnsupportedMediaType,
            ErrorDetail::RateLimited { .. } => ErrorCode::RateLimited,
            ErrorDetail::QuotaExceeded { .. } => ErrorCode::QuotaExceeded,
            ErrorDetail::Internal => ErrorCode::Internal,
            ErrorDetail::NoLeader => ErrorCode::NoLeader,
            ErrorDetail::Unavailable => ErrorCode::Unavailable,
            ErrorDetail::Indeterminate { .. } => ErrorCode::Indeterminate,
            ErrorDetail::Unknown => return None,
        })
    }
}

/// The object under `"error"`: the typed code and details, and a message in words.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorObject {
    /// The code and its details.
    #[serde(flatten)]
    pub detail: ErrorDetail,
    /// What happened, for people.
    #[serde(default)]
    pub message: String,
}

/// Every error response's body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorObject,
}

impl ErrorBody {
    /// A body of this detail and message.
    pub fn new(detail: ErrorDetail, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: ErrorObject {
                detail,
                message: message.into(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn details_sit_beside_code_and_message() {
        let body = ErrorBody::new(ErrorDetail::NotHolder { fence: Some(7) }, "not yours");
        let v = serde_json::to_value(&body).unwrap();
        assert_eq!(
            v,
            json!({"error": {"code": "not_holder", "fence": 7, "message": "not yours"}})
        );
        assert_eq!(serde_json::from_value::<ErrorBody>(v).unwrap(), body);
        let v = serde_json::to_value(ErrorBody::new(ErrorDetail::NoLeader, "x")).unwrap();
        assert_eq!(v, json!({"error": {"code": "no_leader", "message": "x"}}));
    }

    #[test]
    fn an_unknown_code_parses_as_unknown() {
        let v = json!({"error": {"code": "brand_new", "message": "m", "extra": 1}});
        let body: ErrorBody = serde_json::from_value(v).unwrap();
        assert_eq!(body.error.detail, ErrorDetail::Unknown);
        assert_eq!(body.error.detail.code(), None);
    }

    #[test]
    fn every_code_string_matches_its_serde_name() {
        let all = [
            ErrorCode::BadRequest,
            ErrorCode::Unauthenticated,
            ErrorCode::PermissionDenied,
            ErrorCode::LeaseNotFound,
            ErrorCode::KeyNotFound,
            ErrorCode::LockNotFound,
            ErrorCode::NotFound,
            ErrorCode::MethodNotAllowed,
            ErrorCode::LockHeld,
            ErrorCode::Timeout,
            ErrorCode::NotHolder,
            ErrorCode::CasFailed,
            ErrorCode::LimitMismatch,
            ErrorCode::NotWaiting,
            ErrorCode::IdempotencyKeyReused,
            ErrorCode::MembershipChangeRefused,
            ErrorCode::Stale,
            ErrorCode::Compacted,
            ErrorCode::PayloadTooLarge,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::RateLimited,
            ErrorCode::QuotaExceeded,
            ErrorCode::Internal,
            ErrorCode::NoLeader,
            ErrorCode::Unavailable,
            ErrorCode::Indeterminate,
        ];
        for code in all {
            assert_eq!(serde_json::to_value(code).unwrap(), json!(code.as_str()));
            assert!((400..600).contains(&code.status()));
        }
    }
}
