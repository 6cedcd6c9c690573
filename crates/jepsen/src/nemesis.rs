//! Faults on a seeded schedule, one at a time: wait, start, hold, stop. Every start and
//! stop is an operation of the `nemesis` process in the history, with its targets.

use crate::cluster::{self, ADMIN_TOKEN, API_PORT, Cluster, PEER_PORT};
use crate::history::{Kind, Process};
use crate::workload::Ctx;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Fault {
    /// kill -9 and restart on the same data (leader, a minority, or all nodes).
    Kill,
    /// SIGSTOP/SIGCONT longer than the election timeout and the lease TTL.
    Pause,
    /// Network partitions (leader alone, halves, ring, bridge, flaky links).
    Partition,
    /// Wall-clock jumps per node (libfaketime; monotonic clocks untouched).
    Clock,
    /// Replace a voter: add a fresh node, then remove and wipe the old one.
    Member,
    /// A partition with another fault inside it: a kill (any node, either side), or the
    /// replacement of the node the partition cut off (added and removed while it lasts).
    Mixed,
}

impl Fault {
    /// Every kind.
    pub const ALL: [Fault; 6] = [
        Fault::Kill,
        Fault::Pause,
        Fault::Partition,
        Fault::Clock,
        Fault::Member,
        Fault::Mixed,
    ];

    /// Its name in histories.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Pause => "pause",
            Fault::Partition => "partition",
            Fault::Clock => "clock",
            Fault::Member => "member",
            Fault::Mixed => "mixed",
        }
    }
}

/// The nemesis.
pub struct Nemesis {
    /// The cluster it acts on.
    pub cluster: Arc<Mutex<Cluster>>,
    /// Shared with workers (history, member list, holder node).
    pub ctx: Arc<Ctx>,
    /// Enabled faults.
    pub faults: Vec<Fault>,
    /// Mean seconds between faults.
    pub interval: Duration,
    rng: ChaCha8Rng,
    http: reqwest::Client,
    /// The slots and PIDs the current kill fault killed (to verify they are gone).
    killed: Vec<(usize, i32)>,
}

impl Nemesis {
    /// A nemesis with its own random stream.
    pub fn new(
        cluster: Arc<Mutex<Cluster>>,
        ctx: Arc<Ctx>,
        faults: Vec<Fault>,
        interval: Duration,
    ) -> Nemesis {
        let mut rng = ChaCha8Rng::seed_from_u64(ctx.seed);
        rng.set_stream(u64::MAX);
        Nemesis {
            cluster,
            ctx,
            faults,
            interval,
            rng,
            killed: Vec::new(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .build()
                .unwrap_or_default(),
        }
    }

    fn record(&self, kind: Kind, f: &str, value: Value) {
        self.ctx
            .rec
            .record(kind, Process::Nemesis, f, None, value, None, None);
    }

    /// Runs faults until `until`, then heals everything.
    pub async fn run(&mut self, until: Instant) {
        if self.faults.is_empty() {
            return;
        }
        let mut deck: Vec<Fault> = Vec::new();
        loop {
            let wait = self
                .rng
                .random_range(self.interval.as_secs_f64() * 0.5..self.interval.as_secs_f64() * 1.5);
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
            let hold = Duration::from_secs_f64(self.rng.random_range(4.0..9.0));
            if Instant::now() + hold >= until {
                break;
            }
            // A shuffled deck: every kind comes once before any comes twice.
            if deck.is_empty() {
                deck = self.faults.clone();
                rand::seq::SliceRandom::shuffle(deck.as_mut_slice(), &mut self.rng);
            }
            let Some(fault) = deck.pop() else {
                break;
            };
            let f = fault.name();
            self.record(Kind::Invoke, &format!("{f}-start"), Value::Null);
            let (mut detail, undo) = self.start(fault).await;
            let unapplied = self.verify_start(&detail, &undo).await;
            note_unapplied(&mut detail, unapplied);
            self.record(Kind::Ok, &format!("{f}-start"), detail);
            tokio::time::sleep(hold).await;
            self.record(Kind::Invoke, &format!("{f}-stop"), Value::Null);
            let verify = undo.clone();
            let mut detail = self.stop(undo).await;
            let unapplied = self.verify_stop(&detail, &verify).await;
            note_unapplied(&mut detail, unapplied);
            self.record(Kind::Ok, &format!("{f}-stop"), detail);
        }
    }

    /// Why the fault just started did not take effect, if it did not: a killed process
    /// still there, a paused one not stopped, a partitioned node still reaching a peer it
    /// should not, a step that reported an error.
    async fn verify_start(&self, detail: &Value, undo: &Undo) -> Vec<String> {
        let mut why = errors_in(detail);
        for part in undo.parts() {
            self.verify_start_part(detail, part, &mut why).await;
        }
        why
    }

    async fn verify_start_part(&self, detail: &Value, undo: &Undo, why: &mut Vec<String>) {
        match undo {
            Undo::Restart(targets) => {
                for (slot, pid) in &self.killed {
                    if targets.contains(slot) && cluster::process_state(*pid).is_some() {
                        why.push(format!("n{slot} (pid {pid}) still runs after kill"));
                    }
                }
            }
            Undo::Resume(targets) => {
                let pids = self.cluster.lock().await.pids(targets);
                for (slot, pid) in pids {
                    if !stopped_soon(pid, true).await {
                        why.push(format!("n{slot} (pid {pid}) is not stopped after SIGSTOP"));
                    }
                }
            }
            Undo::Heal => {
                if detail["kind"] != "flaky"
                    && let Some(grudge) = detail["grudge"].as_object()
                {
                    for (dst, srcs) in grudge {
                        let (Some(dst), Some(src)) = (
                            dst.strip_prefix('n').and_then(|d| d.parse::<usize>().ok()),
                            srcs.get(0)
                                .and_then(Value::as_str)
                                .and_then(|s| s.strip_prefix('n'))
                                .and_then(|s| s.parse::<usize>().ok()),
                        ) else {
                            continue;
                        };
                        if cluster::reaches(src, dst) {
                            why.push(format!("n{src} still reaches n{dst} through the partition"));
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// Why undoing a fault did not take effect, if it did not: a restarted process that
    /// is not running, a resumed one still stopped, a step that reported an error.
    async fn verify_stop(&self, detail: &Value, undo: &Undo) -> Vec<String> {
        let mut why = errors_in(detail);
        for part in undo.parts() {
            self.verify_stop_part(part, &mut why).await;
        }
        why
    }

    async fn verify_stop_part(&self, undo: &Undo, why: &mut Vec<String>) {
        match undo {
            Undo::Restart(targets) => {
                // Give a process that fails at start (a bad data dir, a taken port) time to exit.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let mut cluster = self.cluster.lock().await;
                for slot in targets {
                    if !cluster.nodes.get_mut(slot).is_some_and(|n| n.alive()) {
                        why.push(format!("n{slot} did not restart"));
                    }
                }
            }
            Undo::Resume(targets) => {
                let pids = self.cluster.lock().await.pids(targets);
                for (slot, pid) in pids {
                    if !stopped_soon(pid, false).await {
                        why.push(format!(
                            "n{slot} (pid {pid}) is still stopped after SIGCONT"
                        ));
                    }
                }
            }
            _ => {}
        }
    }

    async fn members(&self) -> Vec<usize> {
        self.ctx.member_slots()
    }

    /// The leader's slot, asking the running members.
    async fn leader(&self) -> Option<usize> {
        let slots = self.members().await;
        for slot in &slots {
            let url = format!("http://{}:{API_PORT}/v1/cluster", cluster::ip(*slot));
            if let Ok(r) = self.http.get(&url).send().await
                && let Ok(v) = r.json::<Value>().await
                && let Some(id) = v.get("leader").and_then(Value::as_u64)
            {
                let cluster = self.cluster.lock().await;
                return cluster
                    .nodes
                    .values()
                    .find(|n| n.id == id && slots.contains(&n.slot))
                    .map(|n| n.slot);
            }
        }
        None
    }

    async fn start(&mut self, fault: Fault) -> (Value, Undo) {
        let slots = self.members().await;
        let leader = self.leader().await;
        let minority = {
            let mut s = slots.clone();
            rand::seq::SliceRandom::shuffle(s.as_mut_slice(), &mut self.rng);
            s.truncate((slots.len() - 1) / 2);
            s
        };
        // A majority that is not everyone: the survivors cannot elect, the cluster stalls.
        let majority = {
            let mut s = slots.clone();
            rand::seq::SliceRandom::shuffle(s.as_mut_slice(), &mut self.rng);
            s.truncate(slots.len() / 2 + 1);
            s
        };
        match fault {
            Fault::Kill => {
                let targets = match self.rng.random_range(0..4) {
                    0 => leader.map(|l| vec![l]).unwrap_or(minority),
                    1 => minority,
                    2 => majority,
                    _ => slots.clone(),
                };
                let mut cluster = self.cluster.lock().await;
                self.killed = cluster.pids(&targets);
                for t in &targets {
                    cluster.kill(*t);
                }
                (json!({"nodes": names(&targets)}), Undo::Restart(targets))
            }
            Fault::Pause => {
                let holder = *self
                    .ctx
                    .holder_node
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                let targets: Vec<usize> = match self.rng.random_range(0..4) {
                    3 => majority,
                    pick => match pick {
                        0 => leader,
                        1 => holder,
                        _ => slots.choose(&mut self.rng).copied(),
                    }
                    .or(slots.first().copied())
                    .into_iter()
                    .collect(),
                };
                let mut cluster = self.cluster.lock().await;
                for t in &targets {
                    cluster.pause(*t, true);
                }
                (json!({"nodes": names(&targets)}), Undo::Resume(targets))
            }
            Fault::Partition => {
                let (name, grudge) = self.grudge(&slots, leader);
                let result = if name == "flaky" {
                    cluster::flaky(&slots, 0.3)
                } else {
                    cluster::partition(&grudge)
                };
                let detail = json!({
                    "kind": name,
                    "grudge": grudge_names(&grudge),
                    "error": result.err().map(|e| e.to_string()),
                });
                (detail, Undo::Heal)
            }
            Fault::Clock => {
                let cluster = self.cluster.lock().await;
                let mut offsets = BTreeMap::new();
                let mut errors = Vec::new();
                for slot in &slots {
                    let offset: i64 = self.rng.random_range(-300..=300);
                    if let Err(e) = cluster.set_clock(*slot, offset) {
                        errors.push(format!("n{slot}: {e}"));
                    }
                    offsets.insert(format!("n{slot}"), offset);
                }
                let mut detail = json!({"offsets_s": offsets});
                if !errors.is_empty() {
                    detail["error"] = json!(errors.join("; "));
                }
                (detail, Undo::Clock(slots))
            }
            Fault::Member => self.replace(None).await,
            Fault::Mixed => match leader {
                Some(leader) if self.rng.random_bool(0.5) => {
                    self.partition_and_replace(&slots, leader).await
                }
                _ => self.partition_and_kill(&slots, leader).await,
            },
        }
    }

    /// A partition (any kind), then a kill of any one node.
    async fn partition_and_kill(
        &mut self,
        slots: &[usize],
        leader: Option<usize>,
    ) -> (Value, Undo) {
        let (name, grudge) = self.grudge(slots, leader);
        let result = if name == "flaky" {
            cluster::flaky(slots, 0.3)
        } else {
            cluster::partition(&grudge)
        };
        let target = slots
            .choose(&mut self.rng)
            .copied()
            .into_iter()
            .collect::<Vec<_>>();
        let mut cluster = self.cluster.lock().await;
        self.killed = cluster.pids(&target);
        for t in &target {
            cluster.kill(*t);
        }
        let detail = json!({
            "kind": name,
            "grudge": grudge_names(&grudge),
            "nodes": names(&target),
            "error": result.err().map(|e| e.to_string()),
        });
        (detail, Undo::Both(vec![Undo::Restart(target), Undo::Heal]))
    }

    /// Cuts one node that is not the leader off from the others, then replaces it while it
    /// is cut off: a fresh node joins, and at the end the cut-off one is removed (before
    /// the partition heals) and wiped.
    async fn partition_and_replace(&mut self, slots: &[usize], leader: usize) -> (Value, Undo) {
        let others: Vec<usize> = slots.iter().copied().filter(|s| *s != leader).collect();
        let Some(&cut) = others.choose(&mut self.rng) else {
            return self.partition_and_kill(slots, Some(leader)).await;
        };
        let rest: Vec<usize> = slots.iter().copied().filter(|s| *s != cut).collect();
        let mut grudge: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        grudge.insert(cut, rest.clone());
        for r in &rest {
            grudge.insert(*r, vec![cut]);
        }
        if let Err(e) = cluster::partition(&grudge) {
            let detail = json!({"kind": "isolated", "grudge": grudge_names(&grudge), "error": e.to_string()});
            return (detail, Undo::Heal);
        }
        let (mut detail, undo) = self.replace(Some(cut)).await;
        detail["kind"] = json!("isolated");
        detail["grudge"] = json!(grudge_names(&grudge));
        (detail, Undo::Both(vec![undo, Undo::Heal]))
    }

    fn grudge(
        &mut self,
        slots: &[usize],
        leader: Option<usize>,
    ) -> (&'static str, BTreeMap<usize, Vec<usize>>) {
        let n = slots.len();
        let mut grudge: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        let cut = |a: &[usize], b: &[usize], g: &mut BTreeMap<usize, Vec<usize>>| {
            for x in a {
                g.entry(*x).or_default().extend(b.iter().copied());
            }
            for y in b {
                g.entry(*y).or_default().extend(a.iter().copied());
            }
        };
        let choice = self.rng.random_range(0..if n >= 5 { 5 } else { 3 });
        match choice {
            0 => {
                let one = leader.unwrap_or(slots[0]);
                let rest: Vec<usize> = slots.iter().copied().filter(|s| *s != one).collect();
                cut(&[one], &rest, &mut grudge);
                ("leader-alone", grudge)
            }
            1 => {
                let mut s = slots.to_vec();
                rand::seq::SliceRandom::shuffle(s.as_mut_slice(), &mut self.rng);
                let (a, b) = s.split_at(n / 2);
                cut(a, b, &mut grudge);
                ("halves", grudge)
            }
            2 => ("flaky", grudge),
            3 => {
                // Majorities ring: on a ring of 5 each node hears only its two neighbours,
                // so each sees a majority (itself and them) and no two see the same one.
                for (i, s) in slots.iter().enumerate() {
                    let keep = [(i + 1) % n, (i + n - 1) % n];
                    let drop: Vec<usize> = (0..n)
                        .filter(|j| *j != i && !keep.contains(j))
                        .map(|j| slots[j])
                        .collect();
                    grudge.insert(*s, drop);
                }
                ("majorities-ring", grudge)
            }
            _ => {
                // Bridge: two halves joined by one node that sees both.
                let mut s = slots.to_vec();
                rand::seq::SliceRandom::shuffle(s.as_mut_slice(), &mut self.rng);
                let bridge = s[0];
                let rest = &s[1..];
                let (a, b) = rest.split_at(rest.len() / 2);
                cut(a, b, &mut grudge);
                grudge.entry(bridge).or_default();
                ("bridge", grudge)
            }
        }
    }

    /// Grows by a fresh node on the spare slot; `stop` removes and wipes an old voter
    /// (`old`, or one drawn at random).
    async fn replace(&mut self, old: Option<usize>) -> (Value, Undo) {
        let slots = self.members().await;
        let spare = {
            let cluster = self.cluster.lock().await;
            cluster.nodes.keys().copied().find(|s| !slots.contains(s))
        };
        let Some(spare) = spare else {
            return (json!({"skipped": "no spare slot"}), Undo::Nothing);
        };
        let id = match self.cluster.lock().await.start_joiner(spare) {
            Ok(id) => id,
            Err(e) => return (json!({"error": e.to_string()}), Undo::Nothing),
        };
        let body = json!({
            "id": id,
            "api": format!("{}:{API_PORT}", cluster::ip(spare)),
            "peer": format!("{}:{PEER_PORT}", cluster::ip(spare)),
        });
        let added = self
            .admin(reqwest::Method::POST, "/v1/cluster/members", Some(body))
            .await;
        if let Err(e) = added {
            self.cluster.lock().await.wipe(spare);
            return (
                json!({"add": format!("n{spare}"), "error": e}),
                Undo::Nothing,
            );
        }
        {
            let mut members = self.ctx.members.write().unwrap_or_else(|p| p.into_inner());
            members.push((
                spare,
                format!("n{spare}"),
                format!("http://{}:{API_PORT}", cluster::ip(spare)),
            ));
        }
        let old = old.or_else(|| slots.choose(&mut self.rng).copied());
        (
            json!({"added": format!("n{spare}"), "id": id}),
            old.map(Undo::Remove).unwrap_or(Undo::Nothing),
        )
    }

    /// Sends an admin request to the leader (found through any member), retrying for 30 s.
    async fn admin(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < Duration::from_secs(30) {
            if let Some(leader) = self.leader().await {
                let url = format!("http://{}:{API_PORT}{path}", cluster::ip(leader));
                let mut req = self
                    .http
                    .request(method.clone(), &url)
                    .bearer_auth(ADMIN_TOKEN)
                    .timeout(Duration::from_secs(20));
                if let Some(b) = &body {
                    req = req.json(b);
                }
                match req.send().await {
                    Ok(r) if r.status().is_success() => {
                        return Ok(r.json().await.unwrap_or(Value::Null));
                    }
                    Ok(r) => last = format!("status {}", r.status()),
                    Err(e) => last = e.to_string(),
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(last)
    }

    async fn stop(&mut self, undo: Undo) -> Value {
        let Undo::Both(parts) = undo else {
            return self.stop_one(undo).await;
        };
        // Each part's detail under its own name; the first error is the whole one's.
        let mut detail = json!({});
        for part in parts {
            let name = match &part {
                Undo::Restart(_) => "restarted",
                Undo::Heal => "healed",
                Undo::Remove(_) => "removed",
                _ => "undone",
            };
            let done = self.stop_one(part).await;
            if let Some(e) = errors_in(&done).first()
                && detail.get("error").is_none()
            {
                detail["error"] = json!(e);
            }
            detail[name] = done;
        }
        detail
    }

    async fn stop_one(&mut self, undo: Undo) -> Value {
        match undo {
            Undo::Nothing | Undo::Both(_) => Value::Null,
            Undo::Restart(targets) => {
                let mut cluster = self.cluster.lock().await;
                let errors: Vec<String> = targets
                    .iter()
                    .filter_map(|t| cluster.restart(*t).err().map(|e| format!("n{t}: {e}")))
                    .collect();
                let mut detail = json!({"nodes": names(&targets)});
                if !errors.is_empty() {
                    detail["error"] = json!(errors.join("; "));
                }
                detail
            }
            Undo::Resume(targets) => {
                let mut cluster = self.cluster.lock().await;
                for t in &targets {
                    cluster.pause(*t, false);
                }
                json!({"nodes": names(&targets)})
            }
            Undo::Heal => {
                let slots = self.cluster.lock().await.nodes.len();
                json!({"error": cluster::heal(slots).err().map(|e| e.to_string())})
            }
            Undo::Clock(slots) => {
                let cluster = self.cluster.lock().await;
                let errors: Vec<String> = slots
                    .iter()
                    .filter_map(|s| cluster.set_clock(*s, 0).err().map(|e| format!("n{s}: {e}")))
                    .collect();
                let mut detail = json!({"nodes": names(&slots)});
                if !errors.is_empty() {
                    detail["error"] = json!(errors.join("; "));
                }
                detail
            }
            Undo::Remove(slot) => {
                let id = self.cluster.lock().await.nodes.get(&slot).map(|n| n.id);
                let Some(id) = id else { return Value::Null };
                let removed = self
                    .admin(
                        reqwest::Method::DELETE,
                        &format!("/v1/cluster/members/{id}"),
                        None,
                    )
                    .await;
                if removed.is_ok() {
                    self.ctx
                        .members
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .retain(|m| m.0 != slot);
                    self.cluster.lock().await.wipe(slot);
                }
                json!({"removed": format!("n{slot}"), "id": id, "error": removed.err()})
            }
        }
    }

    /// Ends every fault: heal, resume, reset clocks, restart every member.
    pub async fn heal_all(&mut self) {
        self.record(Kind::Invoke, "heal", Value::Null);
        let slots = self.members().await;
        let mut cluster = self.cluster.lock().await;
        let _ = cluster::heal(cluster.nodes.len());
        for s in &slots {
            cluster.pause(*s, false);
            let _ = cluster.set_clock(*s, 0);
            if !cluster.running().contains(s) {
                let _ = cluster.restart(*s);
            }
        }
        drop(cluster);
        self.record(Kind::Ok, "heal", json!({"nodes": names(&slots)}));
    }

    /// Kills every member at once and restarts them all (the durability step).
    pub async fn kill_all_and_restart(&mut self) {
        let slots = self.members().await;
        self.record(Kind::Invoke, "kill-all-start", Value::Null);
        {
            let mut cluster = self.cluster.lock().await;
            for s in &slots {
                cluster.kill(*s);
            }
        }
        self.record(Kind::Ok, "kill-all-start", json!({"nodes": names(&slots)}));
        tokio::time::sleep(Duration::from_millis(500)).await;
        self.record(Kind::Invoke, "kill-all-stop", Value::Null);
        {
            let mut cluster = self.cluster.lock().await;
            for s in &slots {
                let _ = cluster.restart(*s);
            }
        }
        self.record(Kind::Ok, "kill-all-stop", json!({"nodes": names(&slots)}));
    }
}

/// How to end a fault.
#[derive(Clone)]
enum Undo {
    Nothing,
    Restart(Vec<usize>),
    Resume(Vec<usize>),
    Heal,
    Clock(Vec<usize>),
    Remove(usize),
    /// Several, undone in this order (never nested).
    Both(Vec<Undo>),
}

impl Undo {
    /// The single undos this one is made of.
    fn parts(&self) -> Vec<&Undo> {
        match self {
            Undo::Both(parts) => parts.iter().collect(),
            one => vec![one],
        }
    }
}

/// A grudge as the history records it: node name to the names it drops.
fn grudge_names(grudge: &BTreeMap<usize, Vec<usize>>) -> BTreeMap<String, Vec<String>> {
    grudge
        .iter()
        .map(|(d, s)| (format!("n{d}"), names(s)))
        .collect()
}

/// Errors a fault's steps reported in its detail (`error`, `removed`'s error, …).
fn errors_in(detail: &Value) -> Vec<String> {
    match detail.get("error") {
        Some(Value::String(e)) => vec![e.clone()],
        Some(Value::Null) | None => Vec::new(),
        Some(other) => vec![other.to_string()],
    }
}

/// Records why a fault did not take effect in its detail (nothing when it did).
fn note_unapplied(detail: &mut Value, unapplied: Vec<String>) {
    if unapplied.is_empty() {
        return;
    }
    if !detail.is_object() {
        *detail = json!({});
    }
    detail["unapplied"] = json!(unapplied);
}

/// Whether process `pid` is (`stopped`) or is not stopped within 200 ms; a process that
/// is gone counts as not stopped.
async fn stopped_soon(pid: i32, stopped: bool) -> bool {
    for _ in 0..20 {
        if (cluster::process_state(pid) == Some('T')) == stopped {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

fn names(slots: &[usize]) -> Vec<String> {
    slots.iter().map(|s| format!("n{s}")).collect()
}
