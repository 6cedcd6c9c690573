//! A principal's flow control on this node: its token bucket and its counts of held-open
//! waits and open watches.

use super::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A principal's flow control on this node, and its counters for `/metrics`.
#[derive(Debug, Default)]
pub struct Flow {
    bucket: Mutex<Option<(f64, Instant)>>,
    waiters: AtomicU64,
    watches: AtomicU64,
    /// Requests authenticated as this principal.
    pub requests: AtomicU64,
    /// Requests refused for its rate.
    pub rate_limited: AtomicU64,
    /// Requests refused for a quota (replicated or per node).
    pub quota_exceeded: AtomicU64,
    /// Requests refused for a permission.
    pub permission_denied: AtomicU64,
}

impl Flow {
    /// Takes one token of the bucket; `Err(wait)` when it is empty.
    pub(super) fn take(&self, quota: &QuotaEntry) -> Result<(), Duration> {
        let Some(rate) = quota.requests_per_second else {
            return Ok(());
        };
        let burst = f64::from(quota.burst.unwrap_or(rate.ceil() as u32).max(1));
        let now = Instant::now();
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, last) = bucket.get_or_insert((burst, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * rate).min(burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                ((1.0 - *tokens) / rate).min(86_400.0),
            ))
        }
    }

    /// Counts one more of `what` (`waiters` or `watches`) under `limit`, until the guard
    /// drops.
    pub(super) fn enter(
        self: &Arc<Self>,
        watch: bool,
        limit: Option<u64>,
    ) -> Result<FlowGuard, u64> {
        let counter = if watch { &self.watches } else { &self.waiters };
        let before = counter.fetch_add(1, Ordering::AcqRel);
        if let Some(max) = limit
            && before >= max
        {
            counter.fetch_sub(1, Ordering::AcqRel);
            return Err(max);
        }
        Ok(FlowGuard {
            flow: self.clone(),
            watch,
        })
    }
}

/// One held-open wait or watch counted against its principal; uncounted on drop.
pub(crate) struct FlowGuard {
    flow: Arc<Flow>,
    watch: bool,
}

impl Drop for FlowGuard {
    fn drop(&mut self) {
        let counter = if self.watch {
            &self.flow.watches
        } else {
            &self.flow.waiters
        };
        counter.fetch_sub(1, Ordering::AcqRel);
    }
}
