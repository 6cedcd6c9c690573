//! `Lease`: granted on the cluster, kept alive in the background at a third of its TTL, with
//! a *safe-until* deadline on this process's monotonic clock: the send time of the last
//! acknowledged keepalive plus the TTL, minus a margin. Until then the server cannot have
//! expired the lease; [`Lease::lost`] resolves when that deadline passes without a new
//! acknowledgement, or when the server says the lease is gone.

use crate::client::{Call, Client};
use crate::error::{Error, Result};
use baton_wire::{KeepaliveResponse, LeaseGrantRequest, LeaseResponse, RevokeResponse, paths};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Where a lease stands as this client knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseStatus {
    /// Alive on the server at least until `safe_until` (this process's monotonic clock).
    Alive {
        /// The deadline before which the server cannot have expired the lease.
        safe_until: Instant,
    },
    /// The server said the lease is gone, or it was closed.
    Lost,
}

/// A lease with a background keepalive. Cheap to clone; the keepalive stops and the lease
/// is revoked (best effort) when the last clone is dropped, or at [`Lease::close`].
#[derive(Clone)]
pub struct Lease {
    inner: Arc<LeaseInner>,
}

struct LeaseInner {
    client: Client,
    id: u64,
    ttl: Duration,
    status: watch::Receiver<LeaseStatus>,
    keepalive: JoinHandle<()>,
    closed: AtomicBool,
}

/// The margin kept before the TTL: a tenth of it, between 100 ms and 2 s (clock rates of
/// two machines differ slightly; the request's own travel is on the safe side already).
pub fn safety_margin(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(100), Duration::from_secs(2))
}

impl Lease {
    /// Grants a lease of `ttl` and starts keeping it alive.
    pub async fn grant(client: &Client, ttl: Duration) -> Result<Lease> {
        let sent = Instant::now();
        let granted = client.grant_lease(ttl).await?;
        let id = granted.lease_id;
        let ttl = Duration::from_millis(granted.ttl_ms);
        let (tx, status) = watch::channel(LeaseStatus::Alive {
            safe_until: sent + ttl.saturating_sub(safety_margin(ttl)),
        });
        let keepalive = tokio::spawn(keep_alive(client.clone(), id, ttl, tx));
        Ok(Lease {
            inner: Arc::new(LeaseInner {
                client: client.clone(),
                id,
                ttl,
                status,
                keepalive,
                closed: AtomicBool::new(false),
            }),
        })
    }

    /// The lease id.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// Its TTL.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// The client it was granted through.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The current status.
    pub fn status(&self) -> LeaseStatus {
        *self.inner.status.borrow()
    }

    /// The safe-until deadline, if the lease is not known lost.
    pub fn safe_until(&self) -> Option<Instant> {
        match self.status() {
            LeaseStatus::Alive { safe_until } if Instant::now() < safe_until => Some(safe_until),
            _ => None,
        }
    }

    /// Resolves when the lease can no longer be counted on: the safe-until deadline passed
    /// without a new acknowledged keepalive, or the server said it is gone.
    pub async fn lost(&self) {
        let mut status = self.inner.status.clone();
        loop {
            let current = *status.borrow_and_update();
            match current {
                LeaseStatus::Lost => return,
                LeaseStatus::Alive { safe_until } => {
                    tokio::select! {
                        () = tokio::time::sleep_until(safe_until) => {
                            if *status.borrow() == current {
                                return;
                            }
                        }
                        changed = status.changed() => if changed.is_err() { return },
                    }
                }
            }
        }
    }

    /// Revokes the lease (everything it holds is released in one revision).
    pub async fn close(self) -> Result<()> {
        self.inner.closed.store(true, Ordering::Relaxed);
        self.inner.keepalive.abort();
        revoke(&self.inner.client, self.inner.id).await
    }
}

async fn revoke(client: &Client, id: u64) -> Result<()> {
    match client.revoke_lease(id).await {
        Ok(_) | Err(Error::LeaseNotFound) => Ok(()),
        Err(e) => Err(e),
    }
}

impl Client {
    /// Grants a lease without keeping it alive (see [`Lease::grant`] for one that is).
    pub async fn grant_lease(&self, ttl: Duration) -> Result<LeaseResponse> {
        let body = LeaseGrantRequest {
            ttl_ms: ttl.as_millis() as u64,
        };
        self.post(paths::LEASES, &body, Call::WRITE).await
    }

    /// One keepalive of lease `id`: it lives at least the answer's `ttl_ms` after this
    /// call was sent.
    pub async fn keepalive(&self, id: u64) -> Result<KeepaliveResponse> {
        self.keepalive_within(id, REQUEST_TIMEOUT_KEEPALIVE).await
    }

    pub(crate) async fn keepalive_within(
        &self,
        id: u64,
        timeout: Duration,
    ) -> Result<KeepaliveResponse> {
        let call = Call {
            mutation: false,
            extra: Duration::ZERO,
            exact: Some(timeout),
        };
        self.call::<(), _>(
            reqwest::Method::POST,
            &paths::fill(paths::LEASE_KEEPALIVE, &id.to_string()),
            None,
            call,
        )
        .await
    }

    /// Revokes lease `id`: everything it owns is released in one revision.
    pub async fn revoke_lease(&self, id: u64) -> Result<RevokeResponse> {
        self.delete_path(&paths::fill(paths::LEASE, &id.to_string()))
            .await
    }
}

/// Timeout of a single keepalive asked for directly.
const REQUEST_TIMEOUT_KEEPALIVE: Duration = Duration::from_secs(10);

impl Drop for LeaseInner {
    fn drop(&mut self) {
        self.keepalive.abort();
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (client, id) = (self.client.clone(), self.id);
            // Best effort: the lease expires on its own if this never runs.
            runtime.spawn(async move {
                let _ = revoke(&client, id).await;
            });
        }
    }
}

/// Keeps the lease alive at a third of its TTL, retrying sooner after a failure; each
/// acknowledgement moves safe-until to its send time + TTL − margin.
async fn keep_alive(client: Client, id: u64, ttl: Duration, status: watch::Sender<LeaseStatus>) {
    let period = ttl / 3;
    let retry = (ttl / 20).max(Duration::from_millis(50));
    let mut next = Instant::now() + period;
    loop {
        tokio::time::sleep_until(next).await;
        let sent = Instant::now();
        let result = client
            .keepalive_within(id, period.max(Duration::from_millis(500)))
            .await;
        match result {
            Ok(answer) => {
                let acked = Duration::from_millis(answer.ttl_ms);
                let safe_until = sent + acked.saturating_sub(safety_margin(acked));
                status.send_replace(LeaseStatus::Alive { safe_until });
                next = sent + period;
            }
            Err(Error::LeaseNotFound) => {
                status.send_replace(LeaseStatus::Lost);
                return;
            }
            Err(e) => {
                tracing::warn!(lease = id, error = %e, "keepalive failed; retrying");
                next = Instant::now() + retry;
            }
        }
    }
}
