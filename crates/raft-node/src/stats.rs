//! What the node measures about itself for `/metrics`: commit latency, fsync latency,
//! proposals per entry, forwarded requests and commit notices. The handles are the
//! Prometheus client's own metric types (an `Arc` inside): cloning shares them, and the
//! API layer registers those clones in the registry it encodes at scrape time.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

/// Labels of a forwarded request: the peer route it went to.
pub type ForwardLabels = [(&'static str, &'static str); 1];

/// The node's own measurements. Cheap to clone (every field shares its data).
#[derive(Clone, Debug)]
pub struct NodeStats {
    /// Seconds from handing an entry to Raft until it was committed and applied here.
    pub commit_seconds: Histogram,
    /// Seconds one flush of the log to disk took (sled's `flush_async`).
    pub fsync_seconds: Histogram,
    /// Proposals gathered into one Raft entry (group commit).
    pub proposals_per_entry: Histogram,
    /// Requests this node sent to the leader instead of serving them, by route.
    pub forwarded: Family<ForwardLabels, Counter>,
    /// Commit notices this node got in the leader's answers to writes it forwarded
    /// (decision #131).
    pub commit_notices: Counter,
    /// The peer port's connections (`listener`).
    pub peer_connections: std::sync::Arc<crate::listener::ConnStats>,
}

impl Default for NodeStats {
    fn default() -> NodeStats {
        NodeStats {
            // 50 µs … ~1.6 s.
            commit_seconds: Histogram::new(exponential_buckets(0.000_05, 2.0, 16)),
            // 20 µs … ~0.65 s.
            fsync_seconds: Histogram::new(exponential_buckets(0.000_02, 2.0, 16)),
            // 1 … 4 096 proposals.
            proposals_per_entry: Histogram::new(exponential_buckets(1.0, 2.0, 13)),
            forwarded: Family::default(),
            commit_notices: Counter::default(),
            peer_connections: std::sync::Arc::default(),
        }
    }
}

impl NodeStats {
    /// Counts one request sent to the leader on `route` (a peer path).
    pub(crate) fn forwarded(&self, route: &'static str) {
        self.forwarded.get_or_create(&[("route", route)]).inc();
    }
}
