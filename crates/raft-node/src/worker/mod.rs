//! Background jobs of a node. Each file owns one job (the lease clock a directory: its task,
//! its pure bookkeeping and its port to the node); its doc says what it owns, what wakes it
//! and how it stops. All run under the node's `CancellationToken` and `TaskTracker`.

pub(crate) mod lease_clock;
pub(crate) mod proposer;
pub(crate) mod reader;
pub(crate) mod snapshot;

/// The monotonic clock leases are measured on: tokio's, so that tests may pause it.
pub(crate) fn clock_now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}
