//! `semaphore` and `election`: cycles of acquire, hold and release on a queued resource
//! (a semaphore permit, an election candidacy), and an observer of the election.

use super::kept::KeptLease;
use super::{ELECTION, Op, SEMAPHORE, Worker, field, grant_result, process_number, release_result};
use crate::client::Reply;
use rand::Rng;
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

/// Acquire a permit, hold it briefly, release.
pub async fn semaphore(w: Worker) {
    let (name, limit) = SEMAPHORE;
    let owner = |w: &Worker, _| format!("p{}", process_number(w.process));
    let cycle = Cycle {
        key: name,
        acquire: "sem-acquire",
        acquire_path: format!("/v1/semaphores/{name}/acquire"),
        acquire_args: &|lease, who| {
            let args = json!({"lease": lease, "owner": who, "limit": limit});
            let body = json!({"lease_id": lease, "owner": who, "limit": limit, "wait_ms": 2_000});
            (args, body)
        },
        release: "sem-release",
        release_path: format!("/v1/semaphores/{name}/release"),
        release_args: &|lease, who, fence| {
            let args = json!({"lease": lease, "owner": who, "fence": fence});
            let body = json!({"lease_id": lease, "owner": who, "fence": fence});
            (args, body)
        },
    };
    queue_cycles(w, &cycle, &owner).await;
}

/// Campaign, hold, resign; the first worker only observes.
pub async fn election(mut w: Worker, observer: bool) {
    if !observer {
        let ttl_ms = w.ctx.ttl_ms;
        let value = |w: &Worker, seq| format!("p{}-{seq}", process_number(w.process));
        let cycle = Cycle {
            key: ELECTION,
            acquire: "campaign",
            acquire_path: format!("/v1/elections/{ELECTION}/campaign"),
            acquire_args: &|lease, who| {
                let args = json!({"lease": lease, "value": who, "ttl_ms": ttl_ms});
                let body = json!({"lease_id": lease, "value": who, "wait_ms": 2_000});
                (args, body)
            },
            release: "resign",
            release_path: format!("/v1/elections/{ELECTION}/resign"),
            release_args: &|lease, _, fence| {
                let args = json!({"lease": lease, "fence": fence});
                let body = json!({"lease_id": lease, "fence": fence});
                (args, body)
            },
        };
        queue_cycles(w, &cycle, &value).await;
        return;
    }
    while w.ctx.running() {
        w.gap().await;
        let observe =
            Op::new("observe", Method::GET, format!("/v1/elections/{ELECTION}")).key(ELECTION);
        w.run(observe, |b| {
            json!({"lease": b.pointer("/leader/lease_id"), "fence": b.pointer("/leader/fence"), "value": b.pointer("/leader/value"), "rev": field(b, "revision")})
        })
        .await;
    }
}

/// (history args, request body) of a queue request.
type Args = (Value, Value);

/// A queued resource's acquire and release (semaphore permit, election candidacy).
struct Cycle<'a> {
    key: &'a str,
    acquire: &'a str,
    acquire_path: String,
    /// From the lease and the caller's name (owner or value).
    acquire_args: &'a (dyn Fn(u64, &str) -> Args + Sync),
    release: &'a str,
    release_path: String,
    /// From the lease, the caller's name and the fence granted.
    release_args: &'a (dyn Fn(u64, &str, Option<u64>) -> Args + Sync),
}

/// Acquire (waiting up to 2 s), hold up to 200 ms, release; under a kept-alive lease that
/// is ended after any unknown outcome. `who` names the caller from its process and a
/// sequence number.
async fn queue_cycles(mut w: Worker, c: &Cycle<'_>, who: &(dyn Fn(&Worker, u64) -> String + Sync)) {
    let ttl = w.ctx.ttl_ms;
    let mut lease: Option<KeptLease> = None;
    let mut seq = 0;
    while w.ctx.running() {
        w.gap().await;
        if lease.as_ref().is_none_or(|l| !l.is_alive()) {
            lease = w.kept_lease(ttl).await;
            continue;
        }
        let Some(lease_id) = lease.as_ref().map(|l| l.id) else {
            continue;
        };
        seq += 1;
        let name = who(&w, seq);
        let (args, body) = (c.acquire_args)(lease_id, &name);
        let acquire = Op::new(c.acquire, Method::POST, c.acquire_path.as_str())
            .key(c.key)
            .args(args)
            .body(body)
            .timeout(Duration::from_millis(3_000));
        let fence = match w.run(acquire, grant_result).await {
            Reply::Ok(b) => b.get("fence").and_then(Value::as_u64),
            Reply::Fail { .. } => continue,
            Reply::Info(_) => {
                w.abandon(&mut lease).await;
                continue;
            }
        };
        tokio::time::sleep(Duration::from_millis(w.rng.random_range(0..200))).await;
        let (args, body) = (c.release_args)(lease_id, &name, fence);
        let release = Op::new(c.release, Method::POST, c.release_path.as_str())
            .key(c.key)
            .args(args)
            .body(body);
        if matches!(w.release(release, release_result).await, Reply::Info(_)) {
            w.abandon(&mut lease).await;
        }
    }
}
