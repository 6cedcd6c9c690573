//! Workloads: concurrent clients that drive the cluster and record every operation.
//!
//! - `register`: read, write and compare-and-set on rotating keys `r/<gen>-<slot>`
//!   (unique values, at most `OPS_PER_KEY` operations per key, so each key's history
//!   stays small enough for the linearizability search).
//! - `lock`: blocking acquires guarding a fenced store and an unfenced shadow store; the
//!   holder sometimes pauses longer than its lease TTL with keepalives stopped (a GC pause).
//! - `trylock`: try-lock and release under one-hour leases, checked by the search against
//!   a fenced owner-mutex model.
//! - `semaphore`, `election`: queues with limits and leaders.
//! - `lease`: keepalives that stop, then lookups until the lease is gone.
//! - `watch`: streams over the register keys, resumed after each break.

use crate::client::{Http, Recorder, Reply};
use crate::fenced::Stores;
use crate::history::{Kind, Process};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Operations per register key before its slot moves on to a new key.
pub const OPS_PER_KEY: u64 = 200;
/// Register keys live at once.
pub const KEY_SLOTS: u64 = 4;
/// Try-lock operations per lock before moving to a new one.
pub const OPS_PER_TRYLOCK: u64 = 150;
/// Locks guarding fenced stores.
pub const LOCKS: [&str; 2] = ["lock-0", "lock-1"];
/// The semaphore and its limit.
pub const SEMAPHORE: (&str, u32) = ("sem-0", 2);
/// The election.
pub const ELECTION: &str = "elect-0";
/// TTL of the `lease` workload's leases.
pub const LEASE_TTL_MS: u64 = 2_000;

/// What every worker shares.
pub struct Ctx {
    /// The history.
    pub rec: Recorder,
    /// HTTP client.
    pub http: Http,
    /// Slots that are members now, with their names and URLs.
    pub members: RwLock<Vec<(usize, String, String)>>,
    /// When workers stop starting operations.
    pub deadline: Instant,
    /// Timeout of a plain request.
    pub op_timeout: Duration,
    /// TTL of lock, semaphore and election leases.
    pub ttl_ms: u64,
    /// The fenced and shadow stores.
    pub stores: Stores,
    /// Run seed.
    pub seed: u64,
    /// Mean gap between one worker's operations.
    pub mean_gap: Duration,
    /// The slot of the node the latest lock holder talks to (for the nemesis).
    pub holder_node: Mutex<Option<usize>>,
    register_ops: AtomicU64,
    trylock_ops: AtomicU64,
}

impl Ctx {
    /// Shared context.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rec: Recorder,
        http: Http,
        members: Vec<(usize, String, String)>,
        deadline: Instant,
        op_timeout: Duration,
        ttl_ms: u64,
        seed: u64,
        mean_gap: Duration,
    ) -> Ctx {
        Ctx {
            rec,
            http,
            members: RwLock::new(members),
            deadline,
            op_timeout,
            ttl_ms,
            stores: Stores::default(),
            seed,
            mean_gap,
            holder_node: Mutex::new(None),
            register_ops: AtomicU64::new(0),
            trylock_ops: AtomicU64::new(0),
        }
    }

    fn pick(&self, rng: &mut ChaCha8Rng) -> (usize, String, String) {
        let members = self.members.read().unwrap_or_else(|p| p.into_inner());
        members[rng.random_range(0..members.len())].clone()
    }

    fn running(&self) -> bool {
        Instant::now() < self.deadline
    }
}

/// One worker's state: its process, randomness and chosen node.
pub struct Worker {
    /// Shared context.
    pub ctx: Arc<Ctx>,
    /// Current process id (new after an `info`).
    pub process: Process,
    rng: ChaCha8Rng,
}

impl Worker {
    /// A worker with its own random stream derived from the run seed.
    pub fn new(ctx: Arc<Ctx>, stream: u64) -> Worker {
        let mut rng = ChaCha8Rng::seed_from_u64(ctx.seed);
        rng.set_stream(stream);
        let process = ctx.rec.new_process();
        Worker { ctx, process, rng }
    }

    async fn gap(&mut self) {
        let mean = self.ctx.mean_gap.as_secs_f64();
        let u: f64 = self.rng.random_range(0.0001..1.0);
        let gap = (-u.ln() * mean).min(mean * 5.0);
        tokio::time::sleep(Duration::from_secs_f64(gap)).await;
    }

    /// Runs one operation against a random member: records the invoke, sends, records
    /// the completion (`result` builds the ok value), and retires the process after an
    /// `info`.
    #[allow(clippy::too_many_arguments)]
    async fn op(
        &mut self,
        f: &str,
        key: Option<&str>,
        args: Value,
        method: Method,
        path: &str,
        body: Option<Value>,
        timeout: Duration,
        result: impl FnOnce(&Value) -> Value,
    ) -> Reply {
        let (_, name, url) = self.ctx.pick(&mut self.rng);
        self.op_on(
            &name, &url, f, key, args, method, path, body, timeout, result,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn op_on(
        &mut self,
        name: &str,
        url: &str,
        f: &str,
        key: Option<&str>,
        args: Value,
        method: Method,
        path: &str,
        body: Option<Value>,
        timeout: Duration,
        result: impl FnOnce(&Value) -> Value,
    ) -> Reply {
        let rec = &self.ctx.rec;
        rec.record(Kind::Invoke, self.process, f, key, args, Some(name), None);
        let reply = self
            .ctx
            .http
            .send(method, &format!("{url}{path}"), body.as_ref(), timeout)
            .await;
        let value = match &reply {
            Reply::Ok(body) => result(body),
            Reply::Fail { body, .. } => body.get("error").cloned().unwrap_or(Value::Null),
            Reply::Info(_) => Value::Null,
        };
        rec.record(
            reply.kind(),
            self.process,
            f,
            key,
            value,
            Some(name),
            reply.error(),
        );
        if matches!(reply, Reply::Info(_)) {
            self.process = rec.new_process();
        }
        reply
    }

    /// A release (or resign): retried, each try its own operation, while the answer
    /// proves nothing happened (no connection, no leader). A release that never got
    /// through would leave the lock held, and the next acquire would be re-entrant.
    #[allow(clippy::too_many_arguments)]
    async fn release(
        &mut self,
        f: &str,
        key: Option<&str>,
        args: Value,
        method: Method,
        path: &str,
        body: Option<Value>,
        timeout: Duration,
        result: impl Fn(&Value) -> Value + Copy,
    ) -> Reply {
        let mut reply = Reply::Info("not sent".into());
        for _ in 0..5 {
            reply = self
                .op(
                    f,
                    key,
                    args.clone(),
                    method.clone(),
                    path,
                    body.clone(),
                    timeout,
                    result,
                )
                .await;
            match &reply {
                Reply::Fail { code, .. } if code == "connect" || code == "no_leader" => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                _ => break,
            }
        }
        // Still refused: treat it as unknown, so the caller ends the lease.
        match reply {
            Reply::Fail { code, .. } if code == "connect" || code == "no_leader" => {
                Reply::Info(code)
            }
            other => other,
        }
    }

    /// Records a harness-local operation (fenced store access) that is atomic.
    fn local(&mut self, f: &str, key: &str, args: Value, outcome: Result<Value, String>) {
        let rec = &self.ctx.rec;
        rec.record(Kind::Invoke, self.process, f, Some(key), args, None, None);
        match outcome {
            Ok(v) => rec.record(Kind::Ok, self.process, f, Some(key), v, None, None),
            Err(e) => rec.record(
                Kind::Fail,
                self.process,
                f,
                Some(key),
                Value::Null,
                None,
                Some(e),
            ),
        };
    }
}

fn field(v: &Value, name: &str) -> Value {
    v.get(name).cloned().unwrap_or(Value::Null)
}

/// What a mutation's history records: its revision.
fn rev_result(b: &Value) -> Value {
    json!({"rev": field(b, "revision")})
}

/// What a grant's history records: its fence and revision.
fn grant_result(b: &Value) -> Value {
    json!({"fence": field(b, "fence"), "rev": field(b, "revision")})
}

// ---------------------------------------------------------------- register

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
        let timeout = w.ctx.op_timeout;
        seq += 1;
        let value = format!("{}-{seq}", process_number(w.process));
        match w.rng.random_range(0..10) {
            0..=3 => {
                let reply = w
                    .op(
                        "read",
                        Some(&key),
                        Value::Null,
                        Method::GET,
                        &path,
                        None,
                        timeout,
                        |b| {
                            json!({"value": field(b, "value"), "mod_rev": field(b, "mod_revision"), "rev": field(b, "revision")})
                        },
                    )
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
                w.op(
                    "write",
                    Some(&key),
                    json!({"value": value}),
                    Method::PUT,
                    &path,
                    Some(json!({"value": value})),
                    timeout,
                    rev_result,
                )
                .await;
            }
            _ => {
                let prev = last_read.get(&key).copied().unwrap_or(0);
                w.op(
                    "cas",
                    Some(&key),
                    json!({"value": value, "prev_rev": prev}),
                    Method::PUT,
                    &path,
                    Some(json!({"value": value, "prev_revision": prev})),
                    timeout,
                    rev_result,
                )
                .await;
            }
        }
    }
}

/// The number of a client process.
pub fn process_number(p: Process) -> u64 {
    match p {
        Process::Client(n) => n,
        Process::Nemesis => u64::MAX,
    }
}

// ---------------------------------------------------------------- leases

/// A lease kept alive by a background task that records its keepalives as its own process.
struct KeptLease {
    id: u64,
    alive: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for KeptLease {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Worker {
    async fn grant_lease(&mut self, ttl_ms: u64) -> Option<u64> {
        let reply = self
            .op(
                "lease-grant",
                None,
                json!({"ttl_ms": ttl_ms}),
                Method::POST,
                "/v1/leases",
                Some(json!({"ttl_ms": ttl_ms})),
                self.ctx.op_timeout,
                |b| json!({"lease": field(b, "lease_id"), "rev": field(b, "revision")}),
            )
            .await;
        match reply {
            Reply::Ok(b) => b.get("lease_id").and_then(Value::as_u64),
            _ => None,
        }
    }

    async fn kept_lease(&mut self, ttl_ms: u64) -> Option<KeptLease> {
        let id = self.grant_lease(ttl_ms).await?;
        let alive = Arc::new(AtomicBool::new(true));
        let paused = Arc::new(AtomicBool::new(false));
        let mut keeper = Worker::new(self.ctx.clone(), 1_000_000 + id);
        let (a, p) = (alive.clone(), paused.clone());
        let task = tokio::spawn(async move {
            let key = id.to_string();
            let path = format!("/v1/leases/{id}/keepalive");
            while a.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(ttl_ms / 3)).await;
                if p.load(Ordering::Relaxed) {
                    continue;
                }
                let timeout = Duration::from_millis(ttl_ms / 3);
                let reply = keeper
                    .op(
                        "keepalive",
                        Some(&key),
                        json!({"lease": id, "ttl_ms": ttl_ms}),
                        Method::POST,
                        &path,
                        None,
                        timeout,
                        |_| json!({}),
                    )
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
    async fn revoke(&mut self, lease: u64) {
        self.revoke_as("lease-revoke", lease, json!({"lease": lease}))
            .await;
    }

    /// Ends a lease the worker gives up on (after an unknown outcome), if it has one.
    async fn abandon(&mut self, lease: &mut Option<KeptLease>) {
        if let Some(l) = lease.take() {
            self.revoke(l.id).await;
        }
    }

    /// Revokes `lease`, recorded as `f` with `args`, retrying (each try its own
    /// operation) until it is gone or 5 tries.
    async fn revoke_as(&mut self, f: &str, lease: u64, args: Value) {
        for _ in 0..5 {
            let reply = self
                .op(
                    f,
                    Some(&lease.to_string()),
                    args.clone(),
                    Method::DELETE,
                    &format!("/v1/leases/{lease}"),
                    None,
                    self.ctx.op_timeout,
                    rev_result,
                )
                .await;
            match reply {
                Reply::Ok(_) => return,
                Reply::Fail { code, .. } if code == "lease_not_found" => return,
                _ => tokio::time::sleep(Duration::from_millis(300)).await,
            }
        }
    }
}

// ---------------------------------------------------------------- locks

/// Blocking acquire, fenced read-modify-write (with an unfenced shadow), release.
pub async fn lock(mut w: Worker) {
    let ttl = w.ctx.ttl_ms;
    let mut lease: Option<KeptLease> = None;
    while w.ctx.running() {
        w.gap().await;
        if lease
            .as_ref()
            .is_none_or(|l| !l.alive.load(Ordering::Relaxed))
        {
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
        let reply = w
            .op_on(
                &node,
                &url,
                "acquire",
                Some(name),
                json!({"lease": lease_id, "owner": owner, "wait_ms": wait_ms, "ttl_ms": ttl}),
                Method::POST,
                &format!("/v1/locks/{name}/acquire"),
                Some(json!({"lease_id": lease_id, "owner": owner, "wait_ms": wait_ms})),
                Duration::from_millis(wait_ms + 1_000),
                grant_result,
            )
            .await;
        let fence = match reply {
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
        let reply = w
            .release(
                "release",
                Some(name),
                json!({"lease": lease_id, "owner": owner, "fence": fence}),
                Method::POST,
                &format!("/v1/locks/{name}/release"),
                Some(json!({"lease_id": lease_id, "owner": owner, "fence": fence})),
                w.ctx.op_timeout,
                rev_result,
            )
            .await;
        if matches!(reply, Reply::Info(_)) {
            w.abandon(&mut lease).await;
        }
    }
    if let Some(l) = lease.take() {
        l.alive.store(false, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------- try-lock

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
        let reply = w
            .op(
                "try-acquire",
                Some(&name),
                json!({"lease": lease_id, "owner": owner}),
                Method::POST,
                &format!("/v1/locks/{name}/acquire"),
                Some(json!({"lease_id": lease_id, "owner": owner, "wait_ms": 0})),
                w.ctx.op_timeout,
                grant_result,
            )
            .await;
        let fence = match reply {
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
        let reply = w
            .release(
                "try-release",
                Some(&name),
                json!({"lease": lease_id, "owner": owner, "fence": fence}),
                Method::POST,
                &format!("/v1/locks/{name}/release"),
                Some(json!({"lease_id": lease_id, "owner": owner, "fence": fence})),
                w.ctx.op_timeout,
                rev_result,
            )
            .await;
        if matches!(reply, Reply::Info(_)) {
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

// ---------------------------------------------------------------- semaphore

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

// ---------------------------------------------------------------- election

/// Campaign, hold, resign; the first worker only observes.
pub async fn election(mut w: Worker, observer: bool) {
    if !observer {
        let value = |w: &Worker, seq| format!("p{}-{seq}", process_number(w.process));
        let cycle = Cycle {
            key: ELECTION,
            acquire: "campaign",
            acquire_path: format!("/v1/elections/{ELECTION}/campaign"),
            acquire_args: &|lease, who| {
                let args = json!({"lease": lease, "value": who});
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
        w.op(
            "observe",
            Some(ELECTION),
            Value::Null,
            Method::GET,
            &format!("/v1/elections/{ELECTION}"),
            None,
            w.ctx.op_timeout,
            |b| json!({"lease": b.pointer("/leader/lease_id"), "fence": b.pointer("/leader/fence"), "value": b.pointer("/leader/value"), "rev": field(b, "revision")}),
        )
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
        if lease
            .as_ref()
            .is_none_or(|l| !l.alive.load(Ordering::Relaxed))
        {
            lease = w.kept_lease(ttl).await;
            continue;
        }
        let Some(lease_id) = lease.as_ref().map(|l| l.id) else {
            continue;
        };
        seq += 1;
        let name = who(&w, seq);
        let (args, body) = (c.acquire_args)(lease_id, &name);
        let reply = w
            .op(
                c.acquire,
                Some(c.key),
                args,
                Method::POST,
                &c.acquire_path,
                Some(body),
                Duration::from_millis(3_000),
                grant_result,
            )
            .await;
        let fence = match reply {
            Reply::Ok(b) => b.get("fence").and_then(Value::as_u64),
            Reply::Fail { .. } => continue,
            Reply::Info(_) => {
                w.abandon(&mut lease).await;
                continue;
            }
        };
        tokio::time::sleep(Duration::from_millis(w.rng.random_range(0..200))).await;
        let (args, body) = (c.release_args)(lease_id, &name, fence);
        let timeout = w.ctx.op_timeout;
        let reply = w
            .release(
                c.release,
                Some(c.key),
                args,
                Method::POST,
                &c.release_path,
                Some(body),
                timeout,
                rev_result,
            )
            .await;
        if matches!(reply, Reply::Info(_)) {
            w.abandon(&mut lease).await;
        }
    }
}

// ---------------------------------------------------------------- lease

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
                .op(
                    "keepalive",
                    Some(&key),
                    json!({"lease": id, "ttl_ms": LEASE_TTL_MS}),
                    Method::POST,
                    &format!("/v1/leases/{id}/keepalive"),
                    None,
                    Duration::from_millis(LEASE_TTL_MS / 3),
                    |_| json!({}),
                )
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
            let reply = w
                .op(
                    "lease-get",
                    Some(&key),
                    json!({"lease": id}),
                    Method::GET,
                    &format!("/v1/leases/{id}"),
                    None,
                    w.ctx.op_timeout,
                    |b| json!({"remaining_ms": field(b, "remaining_ms")}),
                )
                .await;
            gone = matches!(&reply, Reply::Fail { code, .. } if code == "lease_not_found");
        }
    }
}

// ---------------------------------------------------------------- watch

/// Watches the register keys in stretches of a few seconds, resuming after each one
/// where the last ended (and sometimes a little earlier, to test resumption).
pub async fn watch(mut w: Worker) {
    use futures_util::StreamExt;
    let mut next: u64 = 1;
    while w.ctx.running() {
        let (_, node, url) = w.ctx.pick(&mut w.rng);
        let start = next;
        let args = json!({"prefix": "r/", "start_revision": start});
        let rec = w.ctx.rec.clone();
        rec.record(
            Kind::Invoke,
            w.process,
            "watch",
            Some("r/"),
            args,
            Some(&node),
            None,
        );
        let stretch = Duration::from_millis(w.rng.random_range(2_000..6_000));
        let mut events: Vec<Value> = Vec::new();
        let mut error: Option<String> = None;
        let request = reqwest::Client::new()
            .get(format!("{url}/v1/watch?prefix=r/&start_revision={start}"))
            .timeout(stretch)
            .send()
            .await;
        match request {
            Ok(r) if r.status().is_success() => {
                let mut body = r.bytes_stream();
                let mut buffer = String::new();
                loop {
                    match body.next().await {
                        Some(Ok(chunk)) => {
                            buffer.push_str(&String::from_utf8_lossy(&chunk));
                            while let Some(end) = buffer.find("\n\n") {
                                let frame: String = buffer.drain(..end + 2).collect();
                                if let Some(e) = parse_sse(&frame) {
                                    events.push(e);
                                }
                            }
                        }
                        Some(Err(e)) => {
                            if !e.is_timeout() {
                                error = Some(e.to_string());
                            }
                            break;
                        }
                        None => {
                            error = Some("stream ended".into());
                            break;
                        }
                    }
                }
            }
            Ok(r) => error = Some(format!("status {}", r.status())),
            Err(e) => error = Some(e.to_string()),
        }
        let last = events
            .iter()
            .filter_map(|e| e.get("revision").and_then(Value::as_u64))
            .max();
        if let Some(last) = last {
            next = last + 1;
            // Now and then resume from a little earlier: the overlap must repeat exactly.
            if w.rng.random_range(0..4) == 0 {
                next = next.saturating_sub(w.rng.random_range(1..20)).max(1);
            }
        }
        // A watch that saw events is an observation whatever ended it.
        rec.record(
            Kind::Ok,
            w.process,
            "watch",
            Some("r/"),
            json!({"events": events, "ended": error}),
            Some(&node),
            None,
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Parses one SSE frame into the event's JSON data (`None` for comments and progress).
pub fn parse_sse(frame: &str) -> Option<Value> {
    let mut kind = "";
    let mut data = String::new();
    for line in frame.lines() {
        if let Some(k) = line.strip_prefix("event:") {
            kind = k.trim();
        } else if let Some(d) = line.strip_prefix("data:") {
            data.push_str(d.trim_start());
        }
    }
    if kind == "progress" || data.is_empty() {
        return None;
    }
    serde_json::from_str(&data).ok()
}
