//! One test run: set up the network and cluster, run workloads and faults, heal, kill
//! every node and restart (durability), read the server's log back, stop everything,
//! check, and write the report.

use crate::archivist::{Archive, Archivist};
use crate::checker::{self, CheckConfig, Truth, Validity};
use crate::client::{Http, Recorder, Reply};
use crate::cluster::{self, API_PORT, Cluster, ServerSpec};
use crate::history::{self, Kind};
use crate::nemesis::{Fault, Nemesis};
use crate::workload::{self, Ctx, Worker};
use crate::{Error, report};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Workload {
    /// Reads, writes, CAS on keys.
    Register,
    /// Blocking locks guarding a fenced store.
    Lock,
    /// Try-lock/release (linearizability).
    Trylock,
    /// A semaphore with a limit.
    Semaphore,
    /// An election.
    Election,
    /// Leases whose keepalives stop.
    Lease,
    /// Watches over the keys.
    Watch,
    /// List-append transactions (strict serializability).
    Append,
}

impl Workload {
    /// Every workload.
    pub const ALL: [Workload; 8] = [
        Workload::Register,
        Workload::Lock,
        Workload::Trylock,
        Workload::Semaphore,
        Workload::Election,
        Workload::Lease,
        Workload::Watch,
        Workload::Append,
    ];

    fn workers(self, nodes: usize) -> usize {
        match self {
            Workload::Register => 2 + nodes,
            Workload::Lock => 4,
            Workload::Trylock => 3,
            Workload::Semaphore => 3,
            Workload::Election => 3,
            Workload::Lease => 2,
            Workload::Watch => 2,
            Workload::Append => 3,
        }
    }
}

/// What a run does.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Voting members (3 or 5).
    pub nodes: usize,
    /// Seconds of workload.
    pub time_limit: u64,
    /// Faults.
    pub faults: Vec<Fault>,
    /// Workloads.
    pub workloads: Vec<Workload>,
    /// The seed.
    pub seed: u64,
    /// Mean seconds between faults.
    pub interval: u64,
    /// Total target client operations per second.
    pub rate: f64,
    /// TTL of lock leases (ms).
    pub ttl_ms: u64,
    /// Where run directories go.
    pub out: PathBuf,
    /// The `baton` binary.
    pub binary: PathBuf,
    /// Test-only: the canary the servers run with (the checkers must notice).
    pub canary: Option<String>,
    /// Clock drift the servers run with and the checkers allow: slot rates spread over
    /// 1 ± drift (0: real clocks).
    pub clock_drift: f64,
    /// Test-only: every server's clocks run this many times too fast, whatever the
    /// checkers allow (they must notice).
    pub clock_fast: Option<f64>,
    /// Revisions of events the servers keep for watches.
    pub event_window: u64,
    /// Checker settings.
    pub check: CheckConfig,
}

/// The servers' event window unless `--event-window` says otherwise: larger than any run,
/// so the log can be read back from revision 1 afterwards.
pub const DEFAULT_EVENT_WINDOW: u64 = 5_000_000;

impl Plan {
    /// The command line that repeats this plan.
    pub fn command(&self) -> String {
        let list = |v: Vec<&str>| {
            if v.is_empty() {
                "none".into()
            } else {
                v.join(",")
            }
        };
        format!(
            "cargo run -p jepsen -- --nodes {} --time-limit {} --nemesis {} --workload {} --seed {} --interval {} --rate {}{}",
            self.nodes,
            self.time_limit,
            list(self.faults.iter().map(|f| f.name()).collect()),
            list(
                self.workloads
                    .iter()
                    .map(|w| match w {
                        Workload::Register => "register",
                        Workload::Lock => "lock",
                        Workload::Trylock => "trylock",
                        Workload::Semaphore => "semaphore",
                        Workload::Election => "election",
                        Workload::Lease => "lease",
                        Workload::Watch => "watch",
                        Workload::Append => "append",
                    })
                    .collect()
            ),
            self.seed,
            self.interval,
            self.rate,
            self.canary
                .as_ref()
                .map(|c| format!(" --unsafe-canary {c}"))
                .unwrap_or_default()
        ) + &self.clock_flags()
    }

    fn clock_flags(&self) -> String {
        let mut flags = String::new();
        if self.clock_drift > 0.0 {
            flags.push_str(&format!(" --clock-drift {}", self.clock_drift));
        }
        if let Some(fast) = self.clock_fast {
            flags.push_str(&format!(" --clock-fast {fast}"));
        }
        if self.event_window != DEFAULT_EVENT_WINDOW {
            flags.push_str(&format!(" --event-window {}", self.event_window));
        }
        flags
    }

    /// The clock rate of each of `slots` slots (empty: real clocks). With drift, the
    /// rates are spread evenly from 1 + drift (slot 1) to 1 − drift (the last slot), so
    /// both extremes run.
    pub fn clock_rates(&self, slots: usize) -> Vec<f64> {
        if let Some(fast) = self.clock_fast {
            return vec![fast; slots];
        }
        if self.clock_drift <= 0.0 {
            return Vec::new();
        }
        let last = slots.saturating_sub(1).max(1) as f64;
        (0..slots)
            .map(|i| 1.0 + self.clock_drift * (1.0 - 2.0 * i as f64 / last))
            .collect()
    }
}

fn utc_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

async fn ready(http: &reqwest::Client, slot: usize) -> bool {
    let url = format!("http://{}:{API_PORT}/readyz", cluster::ip(slot));
    matches!(http.get(url).send().await, Ok(r) if r.status().is_success())
}

async fn wait_ready(http: &reqwest::Client, slots: &[usize], timeout: Duration) -> bool {
    cluster::wait_until(timeout, || async {
        for s in slots {
            if !ready(http, *s).await {
                return false;
            }
        }
        true
    })
    .await
}

/// Runs the plan; returns the overall verdict and the run directory.
pub async fn run(plan: Plan) -> Result<(Validity, PathBuf), Error> {
    if plan.faults.contains(&Fault::Clock) && (plan.clock_drift > 0.0 || plan.clock_fast.is_some())
    {
        // libfaketime takes one clock specification per process: either jumps of the wall
        // clock (the `clock` fault) or a rate for every clock.
        return Err(Error::Setup(
            "the clock fault cannot be combined with --clock-drift or --clock-fast".into(),
        ));
    }
    cluster::preflight(
        plan.faults.contains(&Fault::Clock) || plan.clock_drift > 0.0 || plan.clock_fast.is_some(),
    )?;
    let names = |v: Vec<String>| {
        if v.is_empty() {
            "none".into()
        } else {
            v.join("+")
        }
    };
    let dir = plan.out.join(format!(
        "{}-{}-{}-seed{}",
        utc_stamp(),
        names(
            plan.workloads
                .iter()
                .map(|w| format!("{w:?}").to_lowercase())
                .collect()
        ),
        names(plan.faults.iter().map(|f| f.name().to_owned()).collect()),
        plan.seed
    ));
    std::fs::create_dir_all(&dir).map_err(|e| Error::Setup(e.to_string()))?;
    let dir = dir
        .canonicalize()
        .map_err(|e| Error::Setup(e.to_string()))?;
    tracing::info!(dir = %dir.display(), "run directory");
    let spares =
        usize::from(plan.faults.contains(&Fault::Member) || plan.faults.contains(&Fault::Mixed));
    cluster::setup_network(plan.nodes + spares)?;
    let spec = ServerSpec {
        binary: plan.binary.clone(),
        dir: dir.clone(),
        faketime: plan.faults.contains(&Fault::Clock),
        clock_rates: plan.clock_rates(plan.nodes + spares),
        canary: plan.canary.clone(),
        event_window: plan.event_window,
    };
    let cluster = Arc::new(tokio::sync::Mutex::new(Cluster::start(
        spec, plan.nodes, spares,
    )?));
    let result = drive(&plan, &dir, cluster.clone()).await;
    cluster.lock().await.stop_all();
    cluster::cleanup();
    scan_server_logs(&dir)?;
    let rec = result?;
    let events = rec.events();
    history::write(&dir.join("history.jsonl"), &events)
        .map_err(|e| Error::Report(e.to_string()))?;
    let config = json!({
        "seed": plan.seed,
        "command": plan.command(),
        "nodes": plan.nodes,
        "time_limit_s": plan.time_limit,
        "canary": plan.canary,
        "clock_rates": plan.clock_rates(plan.nodes + spares),
        "check": plan.check,
        "git": git_revision(),
    });
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(&config).unwrap_or_default(),
    )
    .map_err(|e| Error::Report(e.to_string()))?;
    let verdict = check_dir(&dir)?;
    Ok((verdict, dir))
}

fn git_revision() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Scans every server log of the run (after every server stopped) for panics and errors,
/// and writes what it found to `server-logs.json` for the crash checker.
fn scan_server_logs(dir: &Path) -> Result<(), Error> {
    let mut found = Truth::default();
    let entries = std::fs::read_dir(dir).map_err(|e| Error::Report(e.to_string()))?;
    let mut logs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    for log in logs {
        let node = log
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = std::fs::read(&log).map_err(|e| Error::Report(e.to_string()))?;
        let mut flagged = Vec::new();
        for line in String::from_utf8_lossy(&text).lines() {
            let line = strip_ansi(line);
            match checker::faults::classify(&line) {
                checker::faults::LogLine::Panic | checker::faults::LogLine::Error => {
                    flagged.push(line)
                }
                checker::faults::LogLine::Expected => found.server_log_expected += 1,
                checker::faults::LogLine::Other => {}
            }
        }
        found.server_logs.insert(node, flagged);
    }
    let json =
        json!({"server_logs": found.server_logs, "server_log_expected": found.server_log_expected});
    std::fs::write(
        dir.join("server-logs.json"),
        serde_json::to_string_pretty(&json).unwrap_or_default(),
    )
    .map_err(|e| Error::Report(e.to_string()))
}

/// A log line without its terminal colour codes.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ parameters final-letter
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Checks a saved run directory and (re)writes its report; prints the summary.
pub fn check_dir(dir: &Path) -> Result<Validity, Error> {
    let events =
        history::read(&dir.join("history.jsonl")).map_err(|e| Error::Report(e.to_string()))?;
    let ops = history::pair(&events).map_err(|e| Error::Report(e.to_string()))?;
    let mut truth: Truth = std::fs::read_to_string(dir.join("server-events.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    // Runs older than the crash checker have no `server-logs.json`: it is then skipped.
    if let Some(logs) = std::fs::read_to_string(dir.join("server-logs.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Truth>(&t).ok())
    {
        truth.server_logs = logs.server_logs;
        truth.server_log_expected = logs.server_log_expected;
    }
    let config: Value = std::fs::read_to_string(dir.join("config.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let check: CheckConfig = serde_json::from_value(config["check"].clone()).unwrap_or_default();
    let results = checker::check_all(&ops, &truth, &check);
    let title = format!(
        "baton jepsen run {} — {}",
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        config["command"].as_str().unwrap_or("")
    );
    report::write(dir, &title, &ops, &results, &config)?;
    Ok(checker::overall(&results))
}

async fn drive(
    plan: &Plan,
    dir: &Path,
    cluster: Arc<tokio::sync::Mutex<Cluster>>,
) -> Result<Recorder, Error> {
    let probe = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .map_err(|e| Error::Setup(e.to_string()))?;
    let voters: Vec<usize> = (1..=plan.nodes).collect();
    if !wait_ready(&probe, &voters, Duration::from_secs(60)).await {
        return Err(Error::Setup(
            "the cluster did not become ready in 60 s".into(),
        ));
    }
    let rec = Recorder::new();
    let members = voters
        .iter()
        .map(|s| {
            (
                *s,
                format!("n{s}"),
                format!("http://{}:{API_PORT}", cluster::ip(*s)),
            )
        })
        .collect();
    let workers_total: usize = plan.workloads.iter().map(|w| w.workers(plan.nodes)).sum();
    let mean_gap = Duration::from_secs_f64(workers_total.max(1) as f64 / plan.rate.max(0.1));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(plan.time_limit);
    let ctx = Arc::new(Ctx::new(
        rec.clone(),
        Http::new()?,
        members,
        deadline,
        Duration::from_millis(1_000),
        plan.ttl_ms,
        plan.seed,
        mean_gap,
    ));
    let archivist = Archivist::start(ctx.clone());
    let mut tasks = Vec::new();
    let mut stream = 0u64;
    for w in &plan.workloads {
        for i in 0..w.workers(plan.nodes) {
            stream += 1;
            let worker = Worker::new(ctx.clone(), stream);
            tasks.push(match w {
                Workload::Register => tokio::spawn(workload::register(worker)),
                Workload::Lock => tokio::spawn(workload::lock(worker)),
                Workload::Trylock => tokio::spawn(workload::trylock(worker)),
                Workload::Semaphore => tokio::spawn(workload::semaphore(worker)),
                Workload::Election => tokio::spawn(workload::election(worker, i == 0)),
                Workload::Lease => tokio::spawn(workload::lease(worker)),
                Workload::Watch => tokio::spawn(workload::watch(worker)),
                Workload::Append => tokio::spawn(workload::append(worker)),
            });
        }
    }
    // Faults stop 10 s before the workload does: the end runs on a healthy cluster.
    let mut nemesis = Nemesis::new(
        cluster.clone(),
        ctx.clone(),
        plan.faults.clone(),
        Duration::from_secs(plan.interval),
    );
    nemesis
        .run(
            deadline
                .checked_sub(Duration::from_secs(10))
                .unwrap_or(deadline),
        )
        .await;
    nemesis.heal_all().await;
    let members = ctx.member_slots();
    tokio::time::sleep_until(deadline.into()).await;
    for t in tasks {
        // Workers stop on their own at the deadline; a stuck one is cut off after 40 s.
        if tokio::time::timeout(Duration::from_secs(40), t)
            .await
            .is_err()
        {
            tracing::warn!("a worker did not stop in time");
        }
    }
    if !wait_ready(&probe, &members, Duration::from_secs(60)).await {
        tracing::warn!("the cluster is not ready after healing");
    }
    // Durability: kill every node at once, restart, read everything back.
    nemesis.kill_all_and_restart().await;
    if !wait_ready(&probe, &members, Duration::from_secs(60)).await {
        tracing::warn!("the cluster is not ready after the restart");
    }
    final_read(&ctx, &members).await;
    let filters = truth_filters();
    let revision = current_revision(&probe, &members).await;
    let archives = match revision {
        Some(r) => archivist.finish(r, Duration::from_secs(60), &filters).await,
        None => filters
            .iter()
            .map(|f| (f.clone(), Err("no member reported its revision".into())))
            .collect(),
    };
    let truth = read_truth(&probe, &members, archives).await;
    std::fs::write(
        dir.join("server-events.json"),
        serde_json::to_string(&truth).unwrap_or_default(),
    )
    .map_err(|e| Error::Report(e.to_string()))?;
    Ok(rec)
}

/// Reads every register key after the restart (a few tries; each is recorded).
async fn final_read(ctx: &Arc<Ctx>, members: &[usize]) {
    let http = Http::new().ok();
    let Some(http) = http else { return };
    for attempt in 0..10 {
        let slot = members[attempt % members.len()];
        let process = ctx.rec.new_process();
        let node = format!("n{slot}");
        ctx.rec.record(
            Kind::Invoke,
            process,
            "final-read",
            Some("r/"),
            Value::Null,
            Some(&node),
            None,
        );
        let url = format!(
            "http://{}:{API_PORT}/v1/kv?prefix=r/&limit=10000",
            cluster::ip(slot)
        );
        let reply = http
            .send(reqwest::Method::GET, &url, None, Duration::from_secs(10))
            .await;
        let value = match &reply {
            Reply::Ok(b) => {
                json!({"kvs": b.get("kvs"), "more": b.get("more"), "rev": b.get("revision")})
            }
            _ => Value::Null,
        };
        ctx.rec.record(
            reply.kind(),
            process,
            "final-read",
            Some("r/"),
            value,
            Some(&node),
            reply.error(),
        );
        if matches!(reply, Reply::Ok(_)) {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The watch filters whose logs the checkers use.
fn truth_filters() -> Vec<String> {
    vec![
        "prefix=r/".to_owned(),
        format!("lock={}", workload::LOCKS[0]),
        format!("lock={}", workload::LOCKS[1]),
        format!("semaphore={}", workload::SEMAPHORE.0),
        format!("election={}", workload::ELECTION),
    ]
}

/// The revision of the first member that answers.
async fn current_revision(http: &reqwest::Client, members: &[usize]) -> Option<u64> {
    for slot in members {
        let url = format!("http://{}:{API_PORT}/v1/cluster", cluster::ip(*slot));
        let Ok(response) = http.get(url).send().await else {
            continue;
        };
        if let Ok(status) = response.json::<Value>().await
            && let Some(r) = status["revision"].as_u64()
        {
            return Some(r);
        }
    }
    None
}

/// The server's log for every filter the checkers use, from revision 1: read back after
/// the run, else the archivist's record of it. Where both exist they must agree.
async fn read_truth(
    http: &reqwest::Client,
    members: &[usize],
    mut archives: BTreeMap<String, Archive>,
) -> Truth {
    let mut truth = Truth::default();
    for filter in truth_filters() {
        let mut last_error = String::new();
        let mut read = None;
        for slot in members {
            match read_log(http, *slot, &filter).await {
                Ok(events) => {
                    read = Some(events);
                    break;
                }
                Err(e) => last_error = e,
            }
        }
        let archive = archives
            .remove(&filter)
            .unwrap_or_else(|| Err("not archived".into()));
        match (read, archive) {
            (Some(read), Ok(archived)) if read != archived => {
                let at = read
                    .iter()
                    .zip(&archived)
                    .position(|(a, b)| a != b)
                    .unwrap_or(read.len().min(archived.len()));
                let why = format!(
                    "the log read back ({} events) and the archivist's record ({}) differ at event {at}",
                    read.len(),
                    archived.len()
                );
                tracing::warn!(%filter, %why, "truth");
                truth.missing.insert(filter, why);
            }
            (Some(read), _) => {
                truth.events.insert(filter, read);
            }
            (None, Ok(archived)) => {
                let why = format!("read back failed: {last_error}");
                truth.archived.insert(filter.clone(), why);
                truth.events.insert(filter, archived);
            }
            (None, Err(archive_error)) => {
                let why = format!("read back failed: {last_error}; {archive_error}");
                truth.missing.insert(filter, why);
            }
        }
    }
    truth
}

async fn read_log(http: &reqwest::Client, slot: usize, filter: &str) -> Result<Vec<Value>, String> {
    use futures_util::StreamExt;
    let base = format!("http://{}:{API_PORT}", cluster::ip(slot));
    let status: Value = http
        .get(format!("{base}/v1/cluster"))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    let target = status["revision"].as_u64().ok_or("no revision")?;
    let response = reqwest::Client::new()
        .get(format!("{base}/v1/watch?{filter}&start_revision=1"))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("status {}", response.status()));
    }
    let mut body = response.bytes_stream();
    let mut buffer = String::new();
    let mut events = Vec::new();
    while let Some(chunk) = body.next().await {
        buffer.push_str(&String::from_utf8_lossy(&chunk.map_err(|e| e.to_string())?));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let id = frame
                .lines()
                .find_map(|l| l.strip_prefix("id:"))
                .and_then(|i| i.trim().parse::<u64>().ok());
            let progress = frame
                .lines()
                .any(|l| l.trim() == "event: progress" || l.trim() == "event:progress");
            if progress {
                let data = frame
                    .lines()
                    .find_map(|l| l.strip_prefix("data:"))
                    .unwrap_or("{}");
                let rev = serde_json::from_str::<Value>(data.trim())
                    .ok()
                    .and_then(|v| v["revision"].as_u64());
                if rev.is_some_and(|r| r >= target) {
                    return Ok(events);
                }
                continue;
            }
            if let Some(e) = workload::parse_sse(&frame) {
                if e.get("error").is_some() {
                    return Err(e.to_string());
                }
                events.push(e);
            }
            if id.is_some_and(|r| r >= target) {
                return Ok(events);
            }
        }
    }
    Err("the stream ended early".into())
}

/// A fresh seed from the clock.
pub fn random_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64 % 1_000_000_007)
        .unwrap_or(1)
}
