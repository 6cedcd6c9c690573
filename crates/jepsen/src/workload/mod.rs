//! Workloads: concurrent clients that drive the cluster and record every operation, one
//! module each, on a small shared core: [`Ctx`] (what every worker shares), [`Worker`] (a
//! client process with its own seeded random stream) and [`Op`] (one request as the
//! history records it).
//!
//! - `register`: read, write and compare-and-set on rotating keys `r/<gen>-<slot>`
//!   (unique values, at most `OPS_PER_KEY` operations per key, so each key's history
//!   stays small enough for the linearizability search).
//! - `lock`: blocking acquires guarding a fenced store and an unfenced shadow store; the
//!   holder sometimes pauses longer than its lease TTL with keepalives stopped (a GC pause).
//! - `trylock`: try-lock and release under one-hour leases, checked by the search against
//!   a fenced owner-mutex model.
//! - `queue` (`semaphore`, `election`): queues with limits and leaders.
//! - `lease`: keepalives that stop, then lookups until the lease is gone.
//! - `watch`: streams over the register keys, resumed after each break.
//! - `kept`: the leases workers hold, kept alive by a background process of their own.
//! - `append`: list-append transactions over `/v1/txn` (Elle's workload).
//!
//! Every random draw comes from the worker's stream in a fixed order, so a seed replays
//! the same operations.

mod append;
mod kept;
mod lease;
mod lock;
mod queue;
mod register;
mod trylock;
mod watch;

pub use append::append;
pub use lease::lease;
pub use lock::lock;
pub use queue::{election, semaphore};
pub use register::register;
pub use trylock::trylock;
pub use watch::{parse_sse, sse_fields, watch};

use crate::client::{Http, Recorder, Reply};
use crate::fenced::Stores;
use crate::history::{Kind, Process};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::atomic::AtomicU64;
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
    append_ops: AtomicU64,
}

impl Ctx {
    /// The slots of the members now.
    pub fn member_slots(&self) -> Vec<usize> {
        self.members
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|m| m.0)
            .collect()
    }

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
            append_ops: AtomicU64::new(0),
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

/// One request as the history records it: the operation's name `f`, its key and args,
/// and the HTTP request that performs it. Built with [`Op::new`] and the setters.
#[derive(Clone, Debug)]
pub(crate) struct Op<'a> {
    f: &'a str,
    key: Option<&'a str>,
    args: Value,
    method: Method,
    path: String,
    body: Option<Value>,
    /// `None`: the run's plain-request timeout.
    timeout: Option<Duration>,
}

impl<'a> Op<'a> {
    /// Operation `f`, sent as `method path`, with no key, args or body yet.
    pub(crate) fn new(f: &'a str, method: Method, path: impl Into<String>) -> Op<'a> {
        Op {
            f,
            key: None,
            args: Value::Null,
            method,
            path: path.into(),
            body: None,
            timeout: None,
        }
    }

    /// The key (or resource) the history files it under.
    pub(crate) fn key(mut self, key: &'a str) -> Op<'a> {
        self.key = Some(key);
        self
    }

    /// The arguments the history records.
    pub(crate) fn args(mut self, args: Value) -> Op<'a> {
        self.args = args;
        self
    }

    /// The JSON body sent.
    pub(crate) fn body(mut self, body: Value) -> Op<'a> {
        self.body = Some(body);
        self
    }

    /// A timeout other than the run's plain-request one.
    pub(crate) fn timeout(mut self, timeout: Duration) -> Op<'a> {
        self.timeout = Some(timeout);
        self
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

    /// Runs `op` against a random member (see [`Worker::run_on`]).
    async fn run(&mut self, op: Op<'_>, result: impl FnOnce(&Value) -> Value) -> Reply {
        let (_, name, url) = self.ctx.pick(&mut self.rng);
        self.run_on(&name, &url, op, result).await
    }

    /// Runs `op` against node `name` at `url`: records the invoke, sends, records the
    /// completion (`result` builds the ok value), and retires the process after an `info`.
    async fn run_on(
        &mut self,
        name: &str,
        url: &str,
        op: Op<'_>,
        result: impl FnOnce(&Value) -> Value,
    ) -> Reply {
        let rec = &self.ctx.rec;
        let timeout = op.timeout.unwrap_or(self.ctx.op_timeout);
        rec.record(
            Kind::Invoke,
            self.process,
            op.f,
            op.key,
            op.args,
            Some(name),
            None,
        );
        let reply = self
            .ctx
            .http
            .send(
                op.method,
                &format!("{url}{}", op.path),
                op.body.as_ref(),
                timeout,
            )
            .await;
        let value = match &reply {
            Reply::Ok(body) => result(body),
            Reply::Fail { body, .. } => body.get("error").cloned().unwrap_or(Value::Null),
            Reply::Info(_) => Value::Null,
        };
        rec.record(
            reply.kind(),
            self.process,
            op.f,
            op.key,
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
    async fn release(&mut self, op: Op<'_>, result: impl Fn(&Value) -> Value + Copy) -> Reply {
        let mut reply = Reply::Info("not sent".into());
        for _ in 0..5 {
            reply = self.run(op.clone(), result).await;
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

/// What a release's (or resign's) history records: its revision and the re-entrant count
/// left (0: the hold ended).
fn release_result(b: &Value) -> Value {
    json!({"rev": field(b, "revision"), "count": field(b, "count")})
}

/// What a grant's history records: its fence and revision.
fn grant_result(b: &Value) -> Value {
    json!({"fence": field(b, "fence"), "rev": field(b, "revision")})
}

/// The number of a client process.
pub fn process_number(p: Process) -> u64 {
    match p {
        Process::Client(n) => n,
        Process::Nemesis => u64::MAX,
    }
}
