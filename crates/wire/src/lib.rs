//! The `/v1` HTTP/JSON contract of baton, written once: every request body and query, every
//! response, watch event and error body, as Rust types that the server (`baton-http-api`)
//! serialises and the client (`baton-client`) parses. It knows nothing of axum or of the
//! state machine, so it is the contract alone; `docs/api.md` describes it in words.
//!
//! - Requests refuse unknown fields (a typo is a 400, never a silently ignored option).
//! - Responses accept unknown fields, so a client keeps working against a newer server
//!   that adds one.
//! - Errors are [`ErrorBody`]: an [`ErrorDetail`] typed per code (with that code's details)
//!   and a message; [`ErrorCode`] gives each code's string and HTTP status.
//! - With the `openapi` feature every type derives `utoipa::ToSchema`.
//! - [`paths`] holds every path of the API, and [`names`] what a name may contain: the
//!   server's router, its OpenAPI document and the client use them.
//!
//! The Jepsen harness deliberately does not use this crate: it checks the server as a black
//! box, and a harness that shared these types would share their mistakes.

mod cluster;
mod error;
mod event;
mod kv;
mod lease;
mod lock;
pub mod names;
pub mod paths;
mod query;
mod stats;

pub use cluster::*;
pub use error::*;
pub use event::*;
pub use kv::*;
pub use lease::*;
pub use lock::*;
pub use query::*;
pub use stats::*;
