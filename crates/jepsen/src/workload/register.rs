//! `register`: read, write and compare-and-set on rotating keys.

use super::{KEY_SLOTS, OPS_PER_KEY, Op, Worker, field, process_number, rev_result};
use crate::client::Reply;
use rand::Rng;
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;

/// Reads, writes and CAS on rotating keys.
pub async fn register(mut w: Worker) {
    let mut seq = 0u64;
    let mut last_read: std::collections::HashMap<String, u64> = Default::default();
    while w.ctx.running() {
        w.gap().await;
        let n = w.ctx.register_ops.fetch_add(1, Ordering::Relaxed);
        let key = format!(
            "r/{}-{}",
            n / (OPS_PER_KEY * KEY_SLOTS),
            w.rng.random_range(0..KEY_SLOTS)
        );
        let path = format!("/v1/kv/{key}");
        seq += 1;
        let value = format!("{}-{seq}", process_number(w.process));
        match w.rng.random_range(0..10) {
            0..=3 => {
                let read = Op::new("read", Method::GET, path).key(&key);
                let reply = w
                    .run(read, |b| {
                        json!({"value": field(b, "value"), "mod_rev": field(b, "mod_revision"), "rev": field(b, "revision")})
                    })
                    .await;
                if let Reply::Ok(b) = &reply
                    && let Some(r) = b.get("mod_revision").and_then(Value::as_u64)
                {
                    last_read.insert(key.clone(), r);
                }
                // A read of an absent key is a 404: record it as an ok read of nothing.
                if let Reply::Fail { code, .. } = &reply
                    && code == "key_not_found"
                {
                    last_read.insert(key.clone(), 0);
                }
            }
            4..=6 => {
                let write = Op::new("write", Method::PUT, path)
                    .key(&key)
                    .args(json!({"value": value}))
                    .body(json!({"value": value}));
                w.run(write, rev_result).await;
            }
            _ => {
                let prev = last_read.get(&key).copied().unwrap_or(0);
                let cas = Op::new("cas", Method::PUT, path)
                    .key(&key)
                    .args(json!({"value": value, "prev_rev": prev}))
                    .body(json!({"value": value, "prev_revision": prev}));
                w.run(cas, rev_result).await;
            }
        }
    }
}
