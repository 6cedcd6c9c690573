//! Error bodies: `{"error": {"code": "<snake_case>", "message": "…", …details}}`.

use crate::{Holder, KeyValue};
use serde::{Deserialize, Serialize};

/// Writes [`ErrorCode`] with its string and status from one list.
macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident = $code:literal, $status:literal;)*) => {
        /// Every error code of the API, with its string and HTTP status.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        pub enum ErrorCode {
            $($(#[$doc])* $variant,)*
        }

        impl ErrorCode {
            /// Every code, in the order of the list.
            pub const ALL: &[ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code as it appears in the body.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $code,)*
                }
            }

            /// The HTTP status that carries it.
            pub fn status(self) -> u16 {
                match self {
                    $(ErrorCode::$variant => $status,)*
                }
            }
        }
    };
}

// The one list of error codes: the variant, its string in the body, its HTTP status.
error_codes! {
    /// Malformed input, an unknown field, a limit, a bad name (400).
    BadRequest = "bad_request", 400;
    /// No valid bearer token where one is required (401).
    Unauthenticated = "unauthenticated", 401;
    /// The principal may not do this to that resource (403).
    PermissionDenied = "permission_denied", 403;
    /// No such lease (404).
    LeaseNotFound = "lease_not_found", 404;
    /// No such key (404).
    KeyNotFound = "key_not_found", 404;
    /// No holder or waiter to force-release (404).
    LockNotFound = "lock_not_found", 404;
    /// No such endpoint (404).
    NotFound = "not_found", 404;
    /// Wrong method on an endpoint (405).
    MethodNotAllowed = "method_not_allowed", 405;
    /// A try-acquire found the resource busy (409).
    LockHeld = "lock_held", 409;
    /// A held-open acquire's deadline passed first (409).
    Timeout = "timeout", 409;
    /// The caller does not hold that grant (409).
    NotHolder = "not_holder", 409;
    /// A compare-and-set expectation did not hold (409).
    CasFailed = "cas_failed", 409;
    /// A semaphore is in use with another limit (409).
    LimitMismatch = "limit_mismatch", 409;
    /// The waiting request's queue entry is gone (409).
    NotWaiting = "not_waiting", 409;
    /// An idempotency key reused for another request (422).
    IdempotencyKeyReused = "idempotency_key_reused", 422;
    /// A membership change was refused (409).
    MembershipChangeRefused = "membership_change_refused", 409;
    /// A command that no longer matches the state (409).
    Stale = "stale", 409;
    /// The watch start is older than the event window (410).
    Compacted = "compacted", 410;
    /// A body or value over its limit (413).
    PayloadTooLarge = "payload_too_large", 413;
    /// A body sent without `Content-Type: application/json` (415).
    UnsupportedMediaType = "unsupported_media_type", 415;
    /// A queue at its bound, or the principal's request rate (429).
    RateLimited = "rate_limited", 429;
    /// A principal's quota on leases, keys, bytes, waiters or watches (429).
    QuotaExceeded = "quota_exceeded", 429;
    /// An internal inconsistency of the server: a bug, logged with the request id (500).
    Internal = "internal", 500;
    /// No leader is known: nothing happened (503).
    NoLeader = "no_leader", 503;
    /// The node cannot serve now: nothing happened (503).
    Unavailable = "unavailable", 503;
    /// A write was sent and not confirmed: it may have happened (504).
    Indeterminate = "indeterminate", 504;
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
        for &code in ErrorCode::ALL {
            assert_eq!(serde_json::to_value(code).unwrap(), json!(code.as_str()));
            assert!((400..600).contains(&code.status()));
            // Each code has its typed detail under the same string: an unknown string
            // would parse as `Unknown`; a known one parses, or misses its details.
            if let Ok(detail) =
                serde_json::from_value::<ErrorDetail>(json!({"code": code.as_str()}))
            {
                assert_eq!(detail.code(), Some(code));
            }
        }
        assert_eq!(ErrorCode::ALL.len(), 26);
    }
}
