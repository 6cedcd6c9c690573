//! What operators and the CLI look at and change: leases, locks in use, force-release,
//! membership.

use crate::client::{Call, Client, segment};
use crate::error::Result;
use crate::keys::query_string;
use baton_wire::paths;
use baton_wire::{
    AddMemberRequest, CheckRequest, CheckResponse, ClusterStatus, ForceReleaseResponse,
    LeaseInfoResponse, LeaseListResponse, LockListParams, LockListResponse, LockStateResponse,
};

impl Client {
    /// Live leases, in id order.
    pub async fn leases(&self) -> Result<LeaseListResponse> {
        self.get_json(paths::LEASES).await
    }

    /// A lease: its TTL, what remains of it on the leader's clock, and what it owns.
    pub async fn lease_info(&self, id: u64) -> Result<LeaseInfoResponse> {
        self.get_json(&paths::fill(paths::LEASE, &id.to_string()))
            .await
    }

    /// Locks in use (held, waited for, or in a lock-delay) under `prefix`, in name order.
    pub async fn locks(&self, prefix: &str) -> Result<LockListResponse> {
        let params = LockListParams {
            prefix: prefix.to_owned(),
            ..LockListParams::default()
        };
        self.get_json(&format!("{}{}", paths::LOCKS, query_string(&params)))
            .await
    }

    /// A lock's holders, queue and lock-delay (empty lists when it is free).
    pub async fn lock_state(&self, name: &str) -> Result<LockStateResponse> {
        self.get_json(&paths::fill(paths::LOCK, &segment(name)))
            .await
    }

    /// Whether `fence` is the lock's current grant (linearizable): what storage that takes
    /// fences asks before it accepts a write.
    pub async fn check_fence(&self, name: &str, fence: u64) -> Result<CheckResponse> {
        self.post(
            &paths::fill(paths::LOCK_CHECK, &segment(name)),
            &CheckRequest { fence },
            Call::READ,
        )
        .await
    }

    /// A semaphore's holders, queue and limit (linearizable).
    pub async fn semaphore_state(&self, name: &str) -> Result<LockStateResponse> {
        self.get_json(&paths::fill(paths::SEMAPHORE, &segment(name)))
            .await
    }

    /// Admin: releases every holder of a lock.
    pub async fn force_release(&self, name: &str) -> Result<ForceReleaseResponse> {
        self.delete_path(&paths::fill(paths::LOCK, &segment(name)))
            .await
    }

    /// Admin (any node forwards it to the leader): adds a member, which must be running with
    /// `--join`; it joins as a learner and votes once caught up, or the call fails with the
    /// voters unchanged.
    pub async fn add_member(&self, id: u64, peer: &str, api: &str) -> Result<ClusterStatus> {
        let body = AddMemberRequest {
            id,
            peer: peer.to_owned(),
            api: api.to_owned(),
        };
        // Membership changes carry no idempotency key (they are not replicated commands):
        // retried only where nothing was sent, like a read.
        self.post(paths::CLUSTER_MEMBERS, &body, Call::MEMBERSHIP)
            .await
    }

    /// Admin (forwarded to the leader): removes a member, unless fewer reachable,
    /// caught-up voters than a quorum would be left.
    pub async fn remove_member(&self, id: u64) -> Result<ClusterStatus> {
        self.call::<(), _>(
            reqwest::Method::DELETE,
            &paths::fill(paths::CLUSTER_MEMBER, &id.to_string()),
            None,
            Call::MEMBERSHIP,
        )
        .await
    }
}
