//! One module per resource of spec §3.

pub(crate) mod cluster;
pub(crate) mod elections;
pub(crate) mod health;
pub(crate) mod kv;
pub(crate) mod leases;
pub(crate) mod locks;
pub(crate) mod semaphores;
pub(crate) mod txn;
pub(crate) mod watch;

use crate::state::Consistency;
use serde::Deserialize;

/// `?consistency=` alone.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadParams {
    #[serde(default)]
    pub(crate) consistency: Consistency,
}

/// Default page size of listings.
pub(crate) const LIST_LIMIT_DEFAULT: usize = 1_000;
