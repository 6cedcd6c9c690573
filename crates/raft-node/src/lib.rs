//! The baton state machine replicated with openraft 0.9 over sled.
//!
//! # Layout
//! - `types.rs`: openraft's type configuration (`Batch` in, `BatchReply` out, `NodeAddr`),
//!   and `leading_term`, the one reading of "this node leads" from Raft metrics.
//! - `config.rs`: `NodeConfig` (validated) and `cluster.toml`.
//! - `store/`: the only code that knows sled: the log store and the state-machine store.
//! - `stats.rs`: [`NodeStats`], what the node measures for `/metrics`.
//! - `codec.rs`: bincode for the log, snapshots and peer bodies.
//! - `error.rs`: `NodeError`.
//! - `node/`: [`Node`]: start, propose (one answer path: the registry of waiting
//!   requests in `store/waiting.rs`, answered by the apply), route to the leader, read,
//!   keepalive, status, membership, shutdown.
//! - `membership.rs`: membership changes that cannot lose quorum (address checks, learners
//!   that must catch up before they vote, the strict quorum check).
//! - `network/`: peer RPC client and server (Raft RPCs and forwarding to the leader).
//! - `worker/`: the proposer (group commit), the reader (read-index coalescing), snapshot
//!   pacing and the lease clock (`lease_clock/`: the task, its pure `deadlines`, and the
//!   `ClockPort` through which it sees the node).

// openraft's StorageError and axum's Response are large, and the storage traits and
// handlers must return them as they are.
#![allow(clippy::result_large_err)]

mod codec;
mod config;
mod error;
pub mod hooks;
pub mod listener;
mod membership;
pub mod network;
mod node;
mod secret;
mod stats;
pub mod store;
mod tick;
pub mod tls;
mod types;
mod worker;

pub use config::{ClusterFile, ClusterNode, NodeConfig, RaftTuning};
pub use error::NodeError;
pub use membership::{Identity, MemberChange};
pub use node::{ClusterStatus, Forwarded, MemberStatus, Node};
pub use secret::Secret;
pub use stats::{ForwardLabels, NodeStats};
pub use store::{AppliedBatch, AppliedProgress, ApplyObserver, ClaimWait, Observing, Waiting};
pub use types::*;
