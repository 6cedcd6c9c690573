//! `lease`: keepalives that stop, then lookups until the lease is gone (for the lease
//! bounds checker).

use super::kept::keepalive_op;
use super::{LEASE_TTL_MS, Op, Worker, field};
use crate::client::Reply;
use rand::Rng;
use reqwest::Method;
use serde_json::json;
use std::time::{Duration, Instant};

/// Grant, keep alive a few times, stop, then look the lease up until it is gone.
pub async fn lease(mut w: Worker) {
    while w.ctx.running() {
        w.gap().await;
        let Some(id) = w.grant_lease(LEASE_TTL_MS).await else {
            continue;
        };
        let key = id.to_string();
        let keepalives = w.rng.random_range(0..4);
        let mut gone = false;
        for _ in 0..keepalives {
            tokio::time::sleep(Duration::from_millis(LEASE_TTL_MS / 3)).await;
            let reply = w
                .run(keepalive_op(id, &key, LEASE_TTL_MS), |_| json!({}))
                .await;
            if matches!(&reply, Reply::Fail { code, .. } if code == "lease_not_found") {
                gone = true;
                break;
            }
        }
        // Look it up until it is gone (bounded: TTL + 20 s).
        let until = Instant::now() + Duration::from_millis(LEASE_TTL_MS + 20_000);
        while !gone && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let get = Op::new("lease-get", Method::GET, format!("/v1/leases/{id}"))
                .key(&key)
                .args(json!({"lease": id}));
            let reply = w
                .run(get, |b| json!({"remaining_ms": field(b, "remaining_ms")}))
                .await;
            gone = matches!(&reply, Reply::Fail { code, .. } if code == "lease_not_found");
        }
    }
}
