//! `Error`: one variant per API error code, plus transport failures. Every error says
//! whether the outcome is known ([`Error::is_indeterminate`]).

use serde_json::Value;

/// A failed call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// 400 `bad_request`: the request was malformed; nothing changed.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// 401 / 403: credentials missing or insufficient.
    #[error("not allowed: {0}")]
    Unauthorized(String),
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
        /// Current holders, as the server listed them.
        holders: Vec<Value>,
        /// Waiters in the queue.
        queue_len: u64,
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
        current: Option<Value>,
    },
    /// 409 `limit_mismatch`: the semaphore has another limit.
    #[error("the semaphore's limit is {limit}")]
    LimitMismatch {
        /// Its limit.
        limit: u32,
    },
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
    /// Never a failure: retry with the same idempotency key, or read the state.
    #[error("outcome unknown: {0}")]
    Indeterminate(String),
    /// No endpoint could be reached: nothing was sent.
    #[error("no endpoint reachable: {0}")]
    Unreachable(String),
    /// Another API error code.
    #[error("{code} ({status}): {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// The API's error code.
        code: String,
        /// The message.
        message: String,
    },
}

impl Error {
    /// Whether the outcome is unknown: the request may have been applied.
    pub fn is_indeterminate(&self) -> bool {
        matches!(self, Error::Indeterminate(_))
    }

    /// Builds the error for an API error body.
    pub(crate) fn from_api(status: u16, body: &Value) -> Error {
        let error = &body["error"];
        let code = error["code"].as_str().unwrap_or("unknown").to_owned();
        let message = error["message"].as_str().unwrap_or_default().to_owned();
        match code.as_str() {
            "bad_request" => Error::BadRequest(message),
            "unauthorized" | "forbidden" => Error::Unauthorized(message),
            "lease_not_found" => Error::LeaseNotFound,
            "key_not_found" => Error::KeyNotFound,
            "lock_not_found" | "not_found" => Error::NotFound(message),
            "lock_held" => Error::LockHeld {
                holders: error["holders"].as_array().cloned().unwrap_or_default(),
                queue_len: error["queue_len"].as_u64().unwrap_or(0),
            },
            "timeout" => Error::Timeout,
            "not_holder" => Error::NotHolder {
                fence: error["fence"].as_u64(),
            },
            "cas_failed" => Error::CasFailed {
                current: Some(error["current"].clone()).filter(|v| !v.is_null()),
            },
            "limit_mismatch" => Error::LimitMismatch {
                limit: error["limit"].as_u64().unwrap_or(0) as u32,
            },
            "compacted" => Error::Compacted {
                oldest_revision: error["oldest_revision"].as_u64().unwrap_or(0),
            },
            "payload_too_large" => Error::PayloadTooLarge(message),
            "rate_limited" => Error::RateLimited(message),
            "no_leader" | "unavailable" => Error::Unavailable(message),
            "indeterminate" => Error::Indeterminate(message),
            _ => Error::Api {
                status,
                code,
                message,
            },
        }
    }
}

/// A result of a client call.
pub type Result<T> = std::result::Result<T, Error>;
