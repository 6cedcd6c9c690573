//! `Error`: one variant per API error code that a caller acts on, plus transport and
//! protocol failures. Every error says whether the outcome is known
//! ([`Error::is_indeterminate`]). Error bodies are parsed with the wire contract
//! (`baton-wire`), so details are typed values, never JSON to index.

use baton_wire::{ErrorBody, ErrorCode, ErrorDetail, Holder, KeyValue};

/// A failed call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// 400 `bad_request`: the request was malformed; nothing changed.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// 401 `unauthenticated`: no valid token (set one with `ClientBuilder::token`).
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// 403 `permission_denied`: the token's principal may not do this; nothing changed.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// 429 `quota_exceeded`: the principal's quota would be passed; nothing changed.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// 404 `lease_not_found`: the lease ended (or never existed).
    #[error("lease not found")]
    LeaseNotFound,
    /// 404 `key_not_found`.
    #[error("key not found")]
    KeyNotFound,
    /// 404 `lock_not_found` or an unknown endpoint.
    #[error("not found: {0}")]
    NotFound(String),
    /// 409 `lock_held`: a try-acquire found the lock busy.
    #[error("lock held ({queue_len} waiting)")]
    LockHeld {
        /// Current holders.
        holders: Vec<Holder>,
        /// Waiters in the queue.
        queue_len: u64,
        /// Whether a lock-delay keeps it ungranted.
        lock_delay: bool,
    },
    /// 409 `timeout`: the wait ended before a grant (the queue entry is gone).
    #[error("no grant before the deadline")]
    Timeout,
    /// 409 `not_holder`: the caller does not hold that grant.
    #[error("not the holder (current fence {fence:?})")]
    NotHolder {
        /// The current holder's fence, if any.
        fence: Option<u64>,
    },
    /// 409 `cas_failed`: a compare-and-set expectation did not hold.
    #[error("compare-and-set failed")]
    CasFailed {
        /// The key as it is, if it exists.
        current: Option<KeyValue>,
    },
    /// 409 `limit_mismatch`: the semaphore has another limit.
    #[error("the semaphore's limit is {limit}")]
    LimitMismatch {
        /// Its limit.
        limit: u32,
    },
    /// 409 `not_waiting`: the waiting request's queue entry is gone.
    #[error("no longer waiting in the queue")]
    NotWaiting,
    /// 410 `compacted`: the watch start is older than the server's window.
    #[error("revisions before {oldest_revision} are compacted")]
    Compacted {
        /// The oldest revision still held.
        oldest_revision: u64,
    },
    /// 413 `payload_too_large`.
    #[error("payload too large: {0}")]
    PayloadTooLarge(String),
    /// 429 `rate_limited`.
    #[error("rate limited: {0}")]
    RateLimited(String),
    /// 503 after retries: no leader, or the cluster could not answer. Nothing changed.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The request may or may not have been applied (504, timeout or reset after sending).
    /// Never a failure: repeat the call through `client.with_idempotency_key(key)` (the
    /// same key: it acts at most once and answers the first outcome), or read the state.
    #[error("outcome unknown: {message}")]
    Indeterminate {
        /// What was seen last.
        message: String,
        /// The `Idempotency-Key` the call carried (mutations only).
        idempotency_key: Option<String>,
    },
    /// No endpoint could be reached: nothing was sent.
    #[error("no endpoint reachable: {0}")]
    Unreachable(String),
    /// The server's answer does not follow the contract (another program on the port, or
    /// an incompatible version). For a mutation with a 2xx status it did happen.
    #[error("unexpected answer from the server: {0}")]
    Protocol(String),
    /// Another API error (its code, if this version knows it).
    #[error("{} ({status}): {message}", code.map_or("unknown code", ErrorCode::as_str))]
    Api {
        /// HTTP status.
        status: u16,
        /// The API's error code; `None` for a code newer than this client.
        code: Option<ErrorCode>,
        /// The message.
        message: String,
    },
}

impl Error {
    /// Whether the outcome is unknown: the request may have been applied.
    pub fn is_indeterminate(&self) -> bool {
        matches!(self, Error::Indeterminate { .. })
    }

    /// The error an API error response stands for.
    pub(crate) fn from_api(status: u16, body: ErrorBody) -> Error {
        let message = body.error.message;
        match body.error.detail {
            ErrorDetail::BadRequest => Error::BadRequest(message),
            ErrorDetail::Unauthenticated => Error::Unauthenticated(message),
            ErrorDetail::PermissionDenied => Error::PermissionDenied(message),
            ErrorDetail::QuotaExceeded { .. } => Error::QuotaExceeded(message),
            ErrorDetail::LeaseNotFound => Error::LeaseNotFound,
            ErrorDetail::KeyNotFound => Error::KeyNotFound,
            ErrorDetail::LockNotFound | ErrorDetail::NotFound => Error::NotFound(message),
            ErrorDetail::LockHeld {
                holders,
                queue_len,
                lock_delay,
            } => Error::LockHeld {
                holders,
                queue_len,
                lock_delay,
            },
            ErrorDetail::Timeout { .. } => Error::Timeout,
            ErrorDetail::NotHolder { fence } => Error::NotHolder { fence },
            ErrorDetail::CasFailed { current } => Error::CasFailed { current },
            ErrorDetail::LimitMismatch { limit } => Error::LimitMismatch { limit },
            ErrorDetail::NotWaiting => Error::NotWaiting,
            ErrorDetail::Compacted { oldest_revision } => Error::Compacted { oldest_revision },
            ErrorDetail::PayloadTooLarge => Error::PayloadTooLarge(message),
            ErrorDetail::RateLimited { .. } => Error::RateLimited(message),
            ErrorDetail::NoLeader | ErrorDetail::Unavailable => Error::Unavailable(message),
            ErrorDetail::Indeterminate { .. } => Error::Indeterminate {
                message,
                idempotency_key: None,
            },
            other => Error::Api {
                status,
                code: other.code(),
                message,
            },
        }
    }

    /// The error for a non-2xx answer whose body is not an error body of the contract.
    pub(crate) fn unreadable(status: u16, text: &str) -> Error {
        let excerpt: String = text.chars().take(200).collect();
        match status {
            // A proxy or a node mid-restart: the same retry rules as a 503.
            502..=504 => Error::Unavailable(format!("HTTP {status}: {excerpt}")),
            _ => Error::Protocol(format!("HTTP {status} without an error body: {excerpt}")),
        }
    }
}

/// A result of a client call.
pub type Result<T> = std::result::Result<T, Error>;
