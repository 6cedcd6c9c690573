//! The leases workers hold: granted, kept alive by a background task recorded as a process
//! of its own, paused to mimic a GC pause, and revoked (retried) when a worker gives up.

use super::{Op, Worker, field, rev_result};
use crate::client::Reply;
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A lease kept alive by a background task that records its keepalives as its own process.
pub(super) struct KeptLease {
    pub(super) id: u64,
    pub(super) alive: Arc<AtomicBool>,
    pub(super) paused: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl KeptLease {
    /// Whether its keepalives still find it.
    pub(super) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }
}

impl Drop for KeptLease {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A keepalive of lease `id` as the history records it.
pub(super) fn keepalive_op<'a>(id: u64, key: &'a str, ttl_ms: u64) -> Op<'a> {
    Op::new(
        "keepalive",
        Method::POST,
        format!("/v1/leases/{id}/keepalive"),
    )
    .key(key)
    .args(json!({"lease": id, "ttl_ms": ttl_ms}))
    .timeout(Duration::from_millis(ttl_ms / 3))
}

impl Worker {
    /// Grants a lease of `ttl_ms`; its id, or `None` if the grant did not succeed.
    pub(super) async fn grant_lease(&mut self, ttl_ms: u64) -> Option<u64> {
        let grant = Op::new("lease-grant", Method::POST, "/v1/leases")
            .args(json!({"ttl_ms": ttl_ms}))
            .body(json!({"ttl_ms": ttl_ms}));
        let reply = self
            .run(
                grant,
                |b| json!({"lease": field(b, "lease_id"), "rev": field(b, "revision")}),
            )
            .await;
        match reply {
            Reply::Ok(b) => b.get("lease_id").and_then(Value::as_u64),
            _ => None,
        }
    }

    /// Grants a lease and keeps it alive every third of its TTL until it is gone.
    pub(super) async fn kept_lease(&mut self, ttl_ms: u64) -> Option<KeptLease> {
        let id = self.grant_lease(ttl_ms).await?;
        let alive = Arc::new(AtomicBool::new(true));
        let paused = Arc::new(AtomicBool::new(false));
        let mut keeper = Worker::new(self.ctx.clone(), 1_000_000 + id);
        let (a, p) = (alive.clone(), paused.clone());
        let task = tokio::spawn(async move {
            let key = id.to_string();
            while a.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(ttl_ms / 3)).await;
                if p.load(Ordering::Relaxed) {
                    continue;
                }
                let reply = keeper
                    .run(keepalive_op(id, &key, ttl_ms), |_| json!({}))
                    .await;
                if let Reply::Fail { code, .. } = &reply
                    && code == "lease_not_found"
                {
                    a.store(false, Ordering::Relaxed);
                }
            }
        });
        Some(KeptLease {
            id,
            alive,
            paused,
            task,
        })
    }

    /// Revokes a lease, retrying (each try its own operation) until it is gone or 5 tries.
    pub(super) async fn revoke(&mut self, lease: u64) {
        self.revoke_as("lease-revoke", lease, json!({"lease": lease}))
            .await;
    }

    /// Ends a lease the worker gives up on (after an unknown outcome), if it has one.
    pub(super) async fn abandon(&mut self, lease: &mut Option<KeptLease>) {
        if let Some(l) = lease.take() {
            self.revoke(l.id).await;
        }
    }

    /// Revokes `lease`, recorded as `f` with `args`, retrying (each try its own
    /// operation) until it is gone or 5 tries.
    pub(super) async fn revoke_as(&mut self, f: &str, lease: u64, args: Value) {
        let key = lease.to_string();
        for _ in 0..5 {
            let revoke = Op::new(f, Method::DELETE, format!("/v1/leases/{lease}"))
                .key(&key)
                .args(args.clone());
            match self.run(revoke, rev_result).await {
                Reply::Ok(_) => return,
                Reply::Fail { code, .. } if code == "lease_not_found" => return,
                _ => tokio::time::sleep(Duration::from_millis(300)).await,
            }
        }
    }
}
