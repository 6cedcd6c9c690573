//! One module per resource of spec §3, and what the queued resources share.

pub(crate) mod cluster;
pub(crate) mod elections;
pub(crate) mod health;
pub(crate) mod kv;
pub(crate) mod leases;
pub(crate) mod locks;
pub(crate) mod semaphores;
mod shared;
pub(crate) mod stats;
pub(crate) mod txn;
pub(crate) mod watch;

/// Default page size of listings.
pub(crate) const LIST_LIMIT_DEFAULT: usize = 1_000;
