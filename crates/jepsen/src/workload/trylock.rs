//! `trylock`: try-lock and release under one-hour leases, checked by the search against a
//! fenced owner-mutex model.

use super::{OPS_PER_TRYLOCK, Op, Worker, grant_result, process_number, release_result};
use crate::client::Reply;
use rand::Rng;
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Try-lock and release under a one-hour lease (no expiry can interfere).
pub async fn trylock(mut w: Worker) {
    const TTL: u64 = 3_600_000;
    let mut lease: Option<u64> = None;
    while w.ctx.running() {
        w.gap().await;
        let Some(lease_id) = (match lease {
            Some(l) => Some(l),
            None => w.grant_lease(TTL).await,
        }) else {
            continue;
        };
        lease = Some(lease_id);
        let n = w.ctx.trylock_ops.fetch_add(1, Ordering::Relaxed);
        let name = format!("try-{}", n / OPS_PER_TRYLOCK);
        let owner = format!("p{}", process_number(w.process));
        let acquire = Op::new(
            "try-acquire",
            Method::POST,
            format!("/v1/locks/{name}/acquire"),
        )
        .key(&name)
        .args(json!({"lease": lease_id, "owner": owner}))
        .body(json!({"lease_id": lease_id, "owner": owner, "wait_ms": 0}));
        let fence = match w.run(acquire, grant_result).await {
            Reply::Ok(b) => b.get("fence").and_then(Value::as_u64),
            Reply::Fail { .. } => continue,
            Reply::Info(_) => {
                // The revoke is this (new) process's: it frees whatever the lease holds.
                w.revoke_owner(lease_id, &owner).await;
                lease = None;
                continue;
            }
        };
        tokio::time::sleep(Duration::from_millis(w.rng.random_range(0..30))).await;
        let release = Op::new(
            "try-release",
            Method::POST,
            format!("/v1/locks/{name}/release"),
        )
        .key(&name)
        .args(json!({"lease": lease_id, "owner": owner, "fence": fence}))
        .body(json!({"lease_id": lease_id, "owner": owner, "fence": fence}));
        if matches!(w.release(release, release_result).await, Reply::Info(_)) {
            w.revoke_owner(lease_id, &owner).await;
            lease = None;
        }
    }
    if let Some(l) = lease {
        w.revoke(l).await;
    }
}

impl Worker {
    /// Revokes a try-lock lease, naming the owner whose holds it frees (for the model).
    async fn revoke_owner(&mut self, lease: u64, owner: &str) {
        let args = json!({"lease": lease, "owner": owner});
        self.revoke_as("try-revoke", lease, args).await;
    }
}
