//! `lock`: blocking acquires guarding a fenced store and an unfenced shadow store; the
//! holder sometimes pauses longer than its lease TTL with keepalives stopped (a GC pause).

use super::kept::KeptLease;
use super::{LOCKS, Op, Worker, grant_result, process_number, release_result};
use crate::client::Reply;
use rand::Rng;
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Blocking acquire, fenced read-modify-write (with an unfenced shadow), release.
pub async fn lock(mut w: Worker) {
    let ttl = w.ctx.ttl_ms;
    let mut lease: Option<KeptLease> = None;
    while w.ctx.running() {
        w.gap().await;
        if lease.as_ref().is_none_or(|l| !l.is_alive()) {
            lease = w.kept_lease(ttl).await;
            if lease.is_none() {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        }
        let Some(l) = lease.as_ref() else { continue };
        let (lease_id, paused) = (l.id, l.paused.clone());
        let name = LOCKS[w.rng.random_range(0..LOCKS.len())];
        let owner = format!("p{}", process_number(w.process));
        let wait_ms = 2_000;
        let (slot, node, url) = w.ctx.pick(&mut w.rng);
        let acquire = Op::new("acquire", Method::POST, format!("/v1/locks/{name}/acquire"))
            .key(name)
            .args(json!({"lease": lease_id, "owner": owner, "wait_ms": wait_ms, "ttl_ms": ttl}))
            .body(json!({"lease_id": lease_id, "owner": owner, "wait_ms": wait_ms}))
            .timeout(Duration::from_millis(wait_ms + 1_000));
        let fence = match w.run_on(&node, &url, acquire, grant_result).await {
            Reply::Ok(b) => b.get("fence").and_then(Value::as_u64).unwrap_or(0),
            Reply::Fail { code, .. } => {
                if code == "lease_not_found" {
                    lease = None;
                }
                continue;
            }
            Reply::Info(_) => {
                // It may be granted later: end the lease so it cannot block everyone.
                w.abandon(&mut lease).await;
                continue;
            }
        };
        *w.ctx.holder_node.lock().unwrap_or_else(|p| p.into_inner()) = Some(slot);
        let read = w.ctx.stores.fenced_read(name, fence);
        w.local(
            "store-read",
            name,
            json!({"fence": fence}),
            read.clone().map(|(v, seq)| json!({"value": v, "seq": seq})),
        );
        let shadow = w.ctx.stores.shadow_read(name);
        w.local(
            "shadow-read",
            name,
            Value::Null,
            Ok(json!({"value": shadow.0, "seq": shadow.1})),
        );
        // Sometimes a GC pause: everything stops, keepalives included, past the TTL.
        if w.rng.random_range(0..10) == 0 {
            paused.store(true, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(ttl * 3 / 2)).await;
            paused.store(false, Ordering::Relaxed);
        } else {
            tokio::time::sleep(Duration::from_millis(w.rng.random_range(0..50))).await;
        }
        if let Ok((v, _)) = read {
            let wrote = w.ctx.stores.fenced_write(name, fence, v + 1);
            w.local(
                "store-write",
                name,
                json!({"fence": fence, "value": v + 1}),
                wrote.map(|seq| json!({"seq": seq})),
            );
        }
        let seq = w.ctx.stores.shadow_write(name, shadow.0 + 1);
        w.local(
            "shadow-write",
            name,
            json!({"value": shadow.0 + 1}),
            Ok(json!({"seq": seq})),
        );
        let release = Op::new("release", Method::POST, format!("/v1/locks/{name}/release"))
            .key(name)
            .args(json!({"lease": lease_id, "owner": owner, "fence": fence}))
            .body(json!({"lease_id": lease_id, "owner": owner, "fence": fence}));
        if matches!(w.release(release, release_result).await, Reply::Info(_)) {
            w.abandon(&mut lease).await;
        }
    }
    if let Some(l) = lease.take() {
        l.alive.store(false, Ordering::Relaxed);
    }
}
