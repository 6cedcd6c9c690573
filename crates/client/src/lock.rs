//! Locks and semaphores: [`LockGuard`] carries the fence of its grant. Release explicitly
//! with [`LockGuard::release`] (it names the fence, so a late retry never frees a newer
//! grant); dropping the guard releases it in the background.

use crate::client::{Call, Client, segment};
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::watch::WatchFilter;
use baton_wire::paths;
use baton_wire::{
    AcquireRequest, CampaignRequest, Event, GrantResponse, Mode, ReleaseRequest, ReleaseResponse,
    SemaphoreAcquireRequest, WaitingResponse, WatchEvent,
};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Lock options.
#[derive(Clone, Debug, Default)]
pub struct LockOptions {
    /// Owner within the lease. Empty (the default): a fresh owner for this acquire, so two
    /// tasks sharing one `Lease` never both hold an exclusive lock by accident. Re-entrancy
    /// is a choice: give the same owner to every acquire that may re-enter (the server
    /// then counts them, and each release undoes one).
    pub owner: String,
    /// Shared (read) instead of exclusive.
    pub shared: bool,
    /// How long to wait in the queue (`None`: do not queue).
    pub wait: Option<Duration>,
    /// After this holder's lease expires, keep the lock ungranted this long.
    pub lock_delay: Option<Duration>,
}

/// A held lock or semaphore permits.
pub struct LockGuard {
    lease: Lease,
    kind: Kind,
    name: String,
    owner: String,
    fence: u64,
    count: u32,
    released: bool,
}

impl Lease {
    /// Waits for the lock, as long as it takes: in waits of the cluster's longest
    /// (`wait_ms_max`, a day by default), each keeping its place in the queue across the
    /// server's per-request hold limit; after a whole wait the request queues again.
    pub async fn lock(&self, name: &str) -> Result<LockGuard> {
        let wait_ms_max = self.client().limits().await?.wait_ms_max;
        loop {
            let options = LockOptions {
                wait: Some(Duration::from_millis(wait_ms_max)),
                ..LockOptions::default()
            };
            match self.lock_with(name, options).await {
                Err(Error::Timeout) => continue,
                other => return other,
            }
        }
    }

    /// Takes the lock if it is free; `Error::LockHeld` otherwise. Never queues.
    pub async fn try_lock(&self, name: &str) -> Result<LockGuard> {
        self.lock_with(name, LockOptions::default()).await
    }

    /// Waits up to `wait` for the lock; `Error::Timeout` if it was not granted.
    pub async fn lock_timeout(&self, name: &str, wait: Duration) -> Result<LockGuard> {
        let options = LockOptions {
            wait: Some(wait),
            ..LockOptions::default()
        };
        self.lock_with(name, options).await
    }

    /// Acquires a lock with explicit options.
    pub async fn lock_with(&self, name: &str, mut options: LockOptions) -> Result<LockGuard> {
        if options.owner.is_empty() {
            options.owner = fresh_owner();
        }
        let wait = options.wait.unwrap_or_default();
        let body = AcquireRequest {
            lease_id: self.id(),
            owner: options.owner.clone(),
            mode: if options.shared {
                Mode::Shared
            } else {
                Mode::Exclusive
            },
            wait_ms: wait.as_millis() as u64,
            lock_delay_ms: options.lock_delay.unwrap_or_default().as_millis() as u64,
            enqueued: None,
        };
        self.acquire(Kind::Lock, name, options.owner, &body, wait)
            .await
    }

    /// Takes `permits` of a semaphore of `limit` permits, waiting up to `wait`.
    pub async fn semaphore(
        &self,
        name: &str,
        limit: u32,
        permits: u32,
        wait: Duration,
    ) -> Result<LockGuard> {
        let owner = fresh_owner();
        let body = SemaphoreAcquireRequest {
            lease_id: self.id(),
            owner: owner.clone(),
            limit,
            permits,
            wait_ms: wait.as_millis() as u64,
            enqueued: None,
        };
        self.acquire(Kind::Semaphore, name, owner, &body, wait)
            .await
    }

    async fn acquire(
        &self,
        kind: Kind,
        name: &str,
        owner: String,
        body: &(impl QueueBody + Clone),
        wait: Duration,
    ) -> Result<LockGuard> {
        // A connection lost mid-wait: the retry (same Idempotency-Key) takes the place up
        // again on the node that served it (the server keeps it a grace period). Sent to
        // another node, it may end `not_waiting` once that grace is over: queue again (at
        // the end) with a fresh request rather than failing.
        let mut attempts = 0;
        let grant: GrantResponse = loop {
            attempts += 1;
            match self
                .client()
                .queue(&kind.acquire_path(name), body.clone(), wait)
                .await
            {
                Err(Error::NotWaiting) if attempts < 3 => continue,
                other => break other?,
            }
        };
        Ok(LockGuard {
            lease: self.clone(),
            kind,
            name: name.to_owned(),
            owner,
            fence: grant.holder.fence,
            count: grant.holder.count,
            released: false,
        })
    }
}

/// A queue request (lock, semaphore, campaign) that can be sent again to take up the place
/// it was given (after a `202`: the wait outlived the server's hold limit).
pub(crate) trait QueueBody: Serialize {
    /// Names the place queued at `enqueued`.
    fn take_up(&mut self, enqueued: u64);
}

impl QueueBody for AcquireRequest {
    fn take_up(&mut self, enqueued: u64) {
        self.enqueued = Some(enqueued);
    }
}

impl QueueBody for SemaphoreAcquireRequest {
    fn take_up(&mut self, enqueued: u64) {
        self.enqueued = Some(enqueued);
    }
}

impl QueueBody for CampaignRequest {
    fn take_up(&mut self, enqueued: u64) {
        self.enqueued = Some(enqueued);
    }
}

/// The answer of a queue request: the grant (200) or the place it keeps (202).
#[derive(Deserialize)]
#[serde(untagged)]
enum Acquired {
    Granted(GrantResponse),
    Waiting(WaitingResponse),
}

/// The server's usual hold limit: waits up to it need no look at the cluster's limits.
const HOLD_DEFAULT: Duration = Duration::from_secs(300);

impl Client {
    /// Sends a queue request and waits for its grant, up to `wait`. A wait longer than the
    /// server holds one request open is answered `202`; the request is then sent again
    /// naming its place, so it keeps its position in the queue.
    pub(crate) async fn queue<B: QueueBody>(
        &self,
        path: &str,
        mut body: B,
        wait: Duration,
    ) -> Result<GrantResponse> {
        // Each request's own timeout follows what the server holds it, not the whole wait.
        let held = if wait > HOLD_DEFAULT {
            match self.limits().await {
                Ok(limits) if limits.hold_ms_max > 0 => {
                    wait.min(Duration::from_millis(limits.hold_ms_max))
                }
                _ => wait,
            }
        } else {
            wait
        };
        loop {
            match self
                .post::<_, Acquired>(path, &body, Call::waiting(held))
                .await?
            {
                Acquired::Granted(grant) => return Ok(grant),
                Acquired::Waiting(waiting) => body.take_up(waiting.enqueued),
            }
        }
    }
}

impl LockGuard {
    /// The fencing token: pass it to every downstream write (and read).
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The re-entrant count of this hold when it was granted.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The lease that holds it.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Resolves when the hold can no longer be counted on: the lease is lost (its
    /// keepalives are not acknowledged in time), or the grant ended on the server in any
    /// way (an admin's force-release, the lease revoked or expired, a release through
    /// another handle). It follows the resource's events, pushed by the server (no polling).
    pub async fn lost(&self) {
        tokio::select! {
            () = self.lease.lost() => {}
            () = self.grant_ended() => {}
        }
    }

    /// Resolves when the server reports the end of this grant. If the event window no
    /// longer reaches back to the grant, the current state decides.
    async fn grant_ended(&self) {
        let filter = match self.kind {
            Kind::Semaphore => WatchFilter::Semaphore(self.name.clone()),
            Kind::Lock => WatchFilter::Lock(self.name.clone()),
        };
        let client = self.lease.client();
        let mut from = self.fence + 1;
        loop {
            let mut events = client.watch(filter.clone(), Some(from));
            while let Some(event) = events.next().await {
                match event {
                    Ok(WatchEvent {
                        event: Event::Released(_, ended),
                        ..
                    }) if ended.lease_id == self.lease.id() && ended.fence == self.fence => {
                        return;
                    }
                    Ok(_) => {}
                    Err(Error::Compacted { .. }) => break,
                    Err(e) => tracing::debug!(error = %e, "watch of a held grant"),
                }
            }
            // Compacted (or the stream ended): does the grant still exist?
            let state = match self.kind {
                Kind::Semaphore => client.semaphore_state(&self.name).await,
                Kind::Lock => client.lock_state(&self.name).await,
            };
            match state {
                Ok(state) if !state.holders.iter().any(|h| h.fence == self.fence) => return,
                Ok(state) => from = state.revision + 1,
                Err(e) => {
                    tracing::debug!(error = %e, "state of a held grant");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// Releases this grant (and only this one: the request names the fence). If the hold
    /// was already gone, this says so, never a silent `Ok`: `Error::NotHolder` (the grant
    /// ended: force-released, or released through another handle) or
    /// `Error::LeaseNotFound` (the lease expired or was revoked). Either means the critical
    /// section may have run unprotected for a while.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        let path = self.kind.release_path(&self.name);
        release(&self.lease, &path, &self.owner, self.fence).await
    }
}

/// Whether a guard holds a lock or semaphore permits: which paths it uses.
#[derive(Clone, Copy)]
enum Kind {
    Lock,
    Semaphore,
}

impl Kind {
    /// The acquire path of the resource `name`.
    fn acquire_path(self, name: &str) -> String {
        let path = match self {
            Kind::Lock => paths::LOCK_ACQUIRE,
            Kind::Semaphore => paths::SEMAPHORE_ACQUIRE,
        };
        paths::fill(path, &segment(name))
    }

    /// The release path of the resource `name`.
    fn release_path(self, name: &str) -> String {
        let path = match self {
            Kind::Lock => paths::LOCK_RELEASE,
            Kind::Semaphore => paths::SEMAPHORE_RELEASE,
        };
        paths::fill(path, &segment(name))
    }
}

/// An owner no other guard uses.
fn fresh_owner() -> String {
    format!("guard-{}", uuid::Uuid::new_v4())
}

async fn release(lease: &Lease, path: &str, owner: &str, fence: u64) -> Result<()> {
    let body = ReleaseRequest {
        lease_id: lease.id(),
        owner: owner.to_owned(),
        fence: Some(fence),
    };
    lease
        .client()
        .post::<_, ReleaseResponse>(path, &body, Call::WRITE)
        .await
        .map(drop)
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (lease, path, owner, fence) = (
                self.lease.clone(),
                self.kind.release_path(&self.name),
                self.owner.clone(),
                self.fence,
            );
            runtime.spawn(async move {
                let _ = release(&lease, &path, &owner, fence).await;
            });
        }
    }
}
