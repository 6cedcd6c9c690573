//! The cluster under test: one network namespace per node slot on a bridge the harness
//! creates (10.77.0.0/24), real `baton serve` processes inside them, partitions as
//! iptables DROP rules in the destination's namespace, per-node wall clocks through
//! libfaketime, and a cleanup registry that undoes everything, also on Ctrl-C or panic.
//!
//! Safety: the harness creates the bridge and namespaces, verifies them, and only then lets
//! anything connect to their addresses; it never sends to an address it did not create.

use crate::Error;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bridge the harness creates; its own address is `.254`.
pub const BRIDGE: &str = "btnbr0";
/// The harness's address on the bridge.
pub const HOST_IP: &str = "10.77.0.254";
const NS_PREFIX: &str = "btn";
const VETH_PREFIX: &str = "btv";
/// Client API port inside every namespace.
pub const API_PORT: u16 = 7070;
/// Peer port inside every namespace.
pub const PEER_PORT: u16 = 7071;
/// libfaketime's multithreaded library (Debian `libfaketime`).
pub const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
/// Admin token the harness's servers require for membership changes.
pub const ADMIN_TOKEN: &str = "jepsen-admin";

/// What must be undone: PIDs the harness started and whether the network exists.
struct Registry {
    pids: BTreeSet<i32>,
    slots: usize,
    network: bool,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    pids: BTreeSet::new(),
    slots: 0,
    network: false,
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Stops every process the harness started (SIGCONT first, so a paused one can die) and
/// removes the namespaces, rules and bridge it made. Safe to call more than once.
pub fn cleanup() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let mut reg = registry();
    for pid in std::mem::take(&mut reg.pids) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    if std::mem::take(&mut reg.network) {
        teardown_network(reg.slots);
    }
}

fn sh(program: &str, args: &[&str]) -> Result<String, Error> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Setup(format!("{program}: {e}")))?;
    if !out.status.success() {
        return Err(Error::Setup(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The namespace of slot `i` (1-based).
pub fn netns(i: usize) -> String {
    format!("{NS_PREFIX}{i}")
}

/// The address of slot `i` on the bridge.
pub fn ip(i: usize) -> String {
    format!("10.77.0.{i}")
}

fn teardown_network(slots: usize) {
    for i in 1..=slots.max(9) {
        // The host end of the veth first: deleting it removes the pair at once, while a
        // deleted namespace releases its end later, in the kernel's own time; a setup
        // right after (the next run) then found the old veth still there.
        let _ = sh("ip", &["link", "del", &format!("{VETH_PREFIX}{i}")]);
        let _ = sh("ip", &["netns", "del", &netns(i)]);
    }
    let _ = sh("ip", &["link", "del", BRIDGE]);
}

/// Checks that what the chosen faults need is installed, naming the Debian packages.
pub fn preflight(clock: bool) -> Result<(), Error> {
    if !nix::unistd::Uid::effective().is_root() {
        return Err(Error::Setup(
            "the harness needs root (network namespaces and iptables)".into(),
        ));
    }
    let mut missing = Vec::new();
    if sh("ip", &["-V"]).is_err() {
        missing.push("iproute2");
    }
    if sh("iptables", &["-V"]).is_err() {
        missing.push("iptables");
    }
    if clock && !Path::new(FAKETIME_LIB).exists() {
        missing.push("faketime");
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::Setup(format!(
            "missing tools; install them with: apt-get install -y --no-install-recommends {}",
            missing.join(" ")
        )))
    }
}

/// Creates the bridge and one namespace per slot, then verifies each address exists.
pub fn setup_network(slots: usize) -> Result<(), Error> {
    teardown_network(slots);
    {
        let mut reg = registry();
        reg.network = true;
        reg.slots = slots;
    }
    sh("ip", &["link", "add", BRIDGE, "type", "bridge"])?;
    sh(
        "ip",
        &["addr", "add", &format!("{HOST_IP}/24"), "dev", BRIDGE],
    )?;
    sh("ip", &["link", "set", BRIDGE, "up"])?;
    for i in 1..=slots {
        let ns = netns(i);
        let veth = format!("{VETH_PREFIX}{i}");
        sh("ip", &["netns", "add", &ns])?;
        sh(
            "ip",
            &[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ],
        )?;
        sh("ip", &["link", "set", &veth, "master", BRIDGE])?;
        sh("ip", &["link", "set", &veth, "up"])?;
        sh(
            "ip",
            &[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", ip(i)),
                "dev",
                "eth0",
            ],
        )?;
        sh("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
        sh("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
    }
    for i in 1..=slots {
        let shown = sh("ip", &["-n", &netns(i), "-4", "addr", "show", "eth0"])?;
        if !shown.contains(&format!("{}/24", ip(i))) {
            return Err(Error::Setup(format!(
                "namespace {} has no address",
                netns(i)
            )));
        }
    }
    let bridge = sh("ip", &["-4", "addr", "show", BRIDGE])?;
    if !bridge.contains(HOST_IP) {
        return Err(Error::Setup("the bridge has no address".into()));
    }
    Ok(())
}

/// Appends a DROP rule in `dst`'s namespace for packets from `srcs`, with `matching`
/// (extra iptables match arguments) if any.
fn drop_from(dst: usize, srcs: &[usize], matching: &[&str]) -> Result<(), Error> {
    if srcs.is_empty() {
        return Ok(());
    }
    let sources: Vec<String> = srcs.iter().map(|s| ip(*s)).collect();
    let sources = sources.join(",");
    let ns = netns(dst);
    let mut args = vec![
        "netns", "exec", &ns, "iptables", "-w", "-A", "INPUT", "-s", &sources,
    ];
    args.extend_from_slice(matching);
    args.extend_from_slice(&["-j", "DROP"]);
    sh("ip", &args).map(drop)
}

/// Drops, in each destination slot's namespace, packets from the given source slots.
pub fn partition(grudge: &BTreeMap<usize, Vec<usize>>) -> Result<(), Error> {
    for (dst, srcs) in grudge {
        drop_from(*dst, srcs, &[])?;
    }
    Ok(())
}

/// Drops each packet between nodes with probability `p` (a flaky network).
pub fn flaky(slots: &[usize], p: f64) -> Result<(), Error> {
    let p = format!("{p:.2}");
    let matching = ["-m", "statistic", "--mode", "random", "--probability", &p];
    for dst in slots {
        let others: Vec<usize> = slots.iter().copied().filter(|s| s != dst).collect();
        drop_from(*dst, &others, &matching)?;
    }
    Ok(())
}

/// The canaries a test build of baton can run with (`--unsafe-canary`), each a known
/// violation one checker must catch. Written out here: the harness shares no server code.
pub const CANARIES: [&str; 5] = [
    "expire-early",
    "duplicate-fence",
    "barging",
    "drop-watch-event",
    "stale-read",
];

/// Whether slot `from` can open a TCP connection to slot `to`'s peer port within a
/// second (a partition's probe: dropped packets time out; a stopped server refuses).
pub fn reaches(from: usize, to: usize) -> bool {
    let target = format!("exec 3<>/dev/tcp/{}/{PEER_PORT}", ip(to));
    Command::new("ip")
        .args([
            "netns",
            "exec",
            &netns(from),
            "timeout",
            "1",
            "bash",
            "-c",
            &target,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The state letter of process `pid` in `/proc` (`R`, `S`, `T` stopped, `Z`, …), or
/// `None` once it is gone.
pub fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the command name, which is in parentheses and may hold spaces.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Removes every rule in every slot.
pub fn heal(slots: usize) -> Result<(), Error> {
    for i in 1..=slots {
        sh("ip", &["netns", "exec", &netns(i), "iptables", "-w", "-F"])?;
    }
    Ok(())
}

/// One server slot: a namespace, an address and (maybe) a running `baton serve`.
pub struct Node {
    /// Slot number (1-based); also the last byte of its address.
    pub slot: usize,
    /// The raft id it currently runs under.
    pub id: u64,
    /// Its data directory.
    pub data_dir: PathBuf,
    log: PathBuf,
    clock_file: Option<PathBuf>,
    join: bool,
    child: Option<Child>,
    paused: bool,
}

impl Node {
    /// The node's name in histories (`n<slot>`).
    pub fn name(&self) -> String {
        format!("n{}", self.slot)
    }

    /// Its client API base URL.
    pub fn url(&self) -> String {
        format!("http://{}:{API_PORT}", ip(self.slot))
    }

    /// Whether its process is running (paused counts).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether it is stopped with SIGSTOP.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Its PID, if running.
    pub fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }

    /// Whether its process was started and has not exited.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}

/// Everything the servers are started with.
#[derive(Clone, Debug)]
pub struct ServerSpec {
    /// The `baton` binary.
    pub binary: PathBuf,
    /// The run directory (data, logs, clock files).
    pub dir: PathBuf,
    /// Whether to start servers under libfaketime with a wall-clock file (jumps).
    pub faketime: bool,
    /// Clock rates by slot (index slot − 1): a server started in a slot with a rate has
    /// every clock, monotonic included, run at that rate (libfaketime `x<rate>`). Empty:
    /// real clocks.
    pub clock_rates: Vec<f64>,
    /// Test-only: the canary servers start with (`BATON_UNSAFE_CANARY`).
    pub canary: Option<String>,
    /// Revisions of events the servers keep for watches (`--event-window`).
    pub event_window: u64,
}

/// The cluster: node slots (voters first, then spares for membership changes).
pub struct Cluster {
    spec: ServerSpec,
    /// Slots by number.
    pub nodes: BTreeMap<usize, Node>,
    next_id: u64,
}

impl Cluster {
    /// Starts `voters` nodes from a cluster file and prepares `spares` empty slots.
    pub fn start(spec: ServerSpec, voters: usize, spares: usize) -> Result<Cluster, Error> {
        std::fs::create_dir_all(&spec.dir).map_err(|e| Error::Setup(e.to_string()))?;
        // Snapshots every 200 entries with 50 kept behind: a node that was down, paused,
        // cut off or just added catches up by installing a snapshot mid-run.
        let mut file = String::from(
            "[raft]\nsnapshot_logs_since_last = 200\nlogs_kept_behind_snapshot = 50\n\n",
        );
        for i in 1..=voters {
            file.push_str(&format!(
                "[[node]]\nid = {i}\napi = \"{ip}:{API_PORT}\"\npeer = \"{ip}:{PEER_PORT}\"\ndata_dir = \"data/n{i}\"\n\n",
                ip = ip(i)
            ));
        }
        std::fs::write(spec.dir.join("cluster.toml"), file)
            .map_err(|e| Error::Setup(e.to_string()))?;
        let mut cluster = Cluster {
            spec,
            nodes: BTreeMap::new(),
            next_id: voters as u64 + 1,
        };
        for slot in 1..=voters + spares {
            let clock_file = if cluster.spec.faketime {
                let path = cluster.spec.dir.join(format!("n{slot}.faketime"));
                write_atomic(&path, "+0\n")?;
                Some(path)
            } else {
                None
            };
            cluster.nodes.insert(
                slot,
                Node {
                    slot,
                    id: slot as u64,
                    data_dir: cluster.spec.dir.join(format!("data/n{slot}")),
                    log: cluster.spec.dir.join(format!("n{slot}.log")),
                    clock_file,
                    join: false,
                    child: None,
                    paused: false,
                },
            );
        }
        for slot in 1..=voters {
            cluster.spawn(slot)?;
        }
        Ok(cluster)
    }

    fn spawn(&mut self, slot: usize) -> Result<(), Error> {
        let spec = self.spec.clone();
        let node = self.nodes.get_mut(&slot).ok_or(Error::NoSuchNode(slot))?;
        if node.child.is_some() {
            return Ok(());
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .map_err(|e| Error::Setup(e.to_string()))?;
        let log2 = log.try_clone().map_err(|e| Error::Setup(e.to_string()))?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &netns(slot)])
            .arg(&spec.binary)
            .arg("serve");
        if node.join {
            cmd.args(["--id", &node.id.to_string(), "--join"]);
        } else {
            cmd.arg("--config")
                .arg(spec.dir.join("cluster.toml"))
                .args(["--node", &node.id.to_string()]);
        }
        cmd.args(["--api", &format!("{}:{API_PORT}", ip(slot))])
            .args(["--peer", &format!("{}:{PEER_PORT}", ip(slot))])
            .arg("--data-dir")
            .arg(&node.data_dir)
            .args(["--admin-token", ADMIN_TOKEN])
            // Its own network namespaces: a private test network, no other host reaches it.
            .arg("--insecure-allow-open")
            .args(["--event-window", &spec.event_window.to_string()])
            .env("RUST_LOG", "info,openraft=warn,sled=warn")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        if let Some(rate) = spec.clock_rates.get(slot - 1) {
            // A fixed rate for the process's life: changing it later would move the
            // monotonic clock backwards or forwards in one step.
            cmd.env("LD_PRELOAD", FAKETIME_LIB)
                .env("FAKETIME", format!("+0 x{rate}"))
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "0");
        } else if let Some(file) = &node.clock_file {
            cmd.env("LD_PRELOAD", FAKETIME_LIB)
                .env("FAKETIME_TIMESTAMP_FILE", file)
                .env("FAKETIME_CACHE_DURATION", "1")
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        if let Some(canary) = &spec.canary {
            cmd.env("BATON_UNSAFE_CANARY", canary);
        }
        let child = cmd
            .spawn()
            .map_err(|e| Error::Setup(format!("start {}: {e}", spec.binary.display())))?;
        registry().pids.insert(child.id() as i32);
        node.child = Some(child);
        node.paused = false;
        Ok(())
    }

    /// Slots whose process runs.
    pub fn running(&self) -> Vec<usize> {
        self.nodes
            .values()
            .filter(|n| n.is_running())
            .map(|n| n.slot)
            .collect()
    }

    /// SIGKILL a node and reap it.
    pub fn kill(&mut self, slot: usize) {
        if let Some(node) = self.nodes.get_mut(&slot)
            && let Some(mut child) = node.child.take()
        {
            let pid = child.id() as i32;
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGCONT,
            );
            let _ = child.kill();
            let _ = child.wait();
            node.paused = false;
            registry().pids.remove(&pid);
        }
    }

    /// Restarts a stopped node on the same data.
    pub fn restart(&mut self, slot: usize) -> Result<(), Error> {
        self.spawn(slot)
    }

    /// SIGSTOP or SIGCONT a node.
    pub fn pause(&mut self, slot: usize, stop: bool) {
        use nix::sys::signal::{Signal, kill};
        if let Some(node) = self.nodes.get_mut(&slot)
            && let Some(pid) = node.pid()
        {
            let signal = if stop {
                Signal::SIGSTOP
            } else {
                Signal::SIGCONT
            };
            if kill(nix::unistd::Pid::from_raw(pid), signal).is_ok() {
                node.paused = stop;
            }
        }
    }

    /// The PIDs of `slots` that run now.
    pub fn pids(&self, slots: &[usize]) -> Vec<(usize, i32)> {
        slots
            .iter()
            .filter_map(|s| Some((*s, self.nodes.get(s)?.pid()?)))
            .collect()
    }

    /// Sets a node's wall-clock offset in seconds (libfaketime; monotonic time untouched).
    pub fn set_clock(&self, slot: usize, offset_s: i64) -> Result<(), Error> {
        match self.nodes.get(&slot).and_then(|n| n.clock_file.as_ref()) {
            Some(file) => write_atomic(file, &format!("{offset_s:+}\n")),
            None => Ok(()),
        }
    }

    /// Prepares a spare slot to join under a fresh raft id on an empty data directory,
    /// and starts it. Returns the new id.
    pub fn start_joiner(&mut self, slot: usize) -> Result<u64, Error> {
        self.kill(slot);
        let id = self.next_id;
        self.next_id += 1;
        let node = self.nodes.get_mut(&slot).ok_or(Error::NoSuchNode(slot))?;
        let _ = std::fs::remove_dir_all(&node.data_dir);
        node.id = id;
        node.join = true;
        self.spawn(slot)?;
        Ok(id)
    }

    /// Stops and wipes a removed node's slot.
    pub fn wipe(&mut self, slot: usize) {
        self.kill(slot);
        if let Some(node) = self.nodes.get(&slot) {
            let _ = std::fs::remove_dir_all(&node.data_dir);
        }
    }

    /// Run directory.
    pub fn dir(&self) -> &Path {
        &self.spec.dir
    }

    /// Stops every node: SIGCONT, SIGKILL, reap.
    pub fn stop_all(&mut self) {
        let slots: Vec<usize> = self.nodes.keys().copied().collect();
        for slot in slots {
            self.kill(slot);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}

fn write_atomic(path: &Path, text: &str) -> Result<(), Error> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(|e| Error::Setup(e.to_string()))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::Setup(e.to_string()))
}

/// Polls until `ready` says yes or `timeout` passes.
pub async fn wait_until<F, Fut>(timeout: Duration, mut ready: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while started.elapsed() < timeout {
        if ready().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}
