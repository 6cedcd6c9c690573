//! The crate's one error enum. Domain refusals are not errors: they are
//! [`Rejection`](crate::Rejection)s returned by `apply`. Errors are for input that must never
//! reach the log (limits) and for snapshots that cannot be trusted.

/// What can go wrong outside `apply`: validation against [`Limits`](crate::Limits) and
/// snapshot decoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A field breaks a rule of spec §3 (maps to 400 `bad_request`).
    #[error("{field}: {reason}")]
    Invalid {
        /// The offending field.
        field: &'static str,
        /// Why it is refused, in words.
        reason: String,
    },
    /// A field is larger than its limit (maps to 413 `payload_too_large`).
    #[error("{field} is {actual} bytes, over the limit of {max}")]
    TooLarge {
        /// The offending field.
        field: &'static str,
        /// Its size in bytes.
        actual: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// A snapshot could not be decoded or failed its checks on restore.
    #[error("snapshot: {0}")]
    Snapshot(String),
}

impl Error {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
        Error::Invalid {
            field,
            reason: reason.into(),
        }
    }
}
