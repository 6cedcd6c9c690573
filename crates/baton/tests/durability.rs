//! An acknowledged write is on stable storage, not only in the kernel's page cache: every
//! write a node answers was followed by an `fdatasync` (or `fsync`) of its log file, which
//! flushes the device's write cache and the file's size. A process kill cannot tell the two
//! apart (the page cache survives it), so the Jepsen harness cannot either; a power loss
//! can. The test traces a real node's system calls with `strace` (installed by the
//! project's `.ci/deps` when missing) while it answers sequential writes.

// The counts are printed for `--nocapture` readers; the assertions are the test.
#![allow(clippy::print_stderr)]

mod common;

use common::Cluster;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Sequential writes traced: each is answered only after its own flush.
const WRITES: usize = 20;

/// The `strace` binary, installed by `.ci/deps` if missing.
fn strace() -> PathBuf {
    common::tool("strace", "deps")
}

/// `strace` attached to every thread of `pid`, writing each thread's sync calls to its own
/// file `<out>.<tid>` (one file per thread, so no call is split into an "unfinished" and a
/// "resumed" line by another thread's); stopped (it detaches) when dropped.
struct Tracer(Child);

impl Tracer {
    fn attach(pid: u32, out: &Path) -> Tracer {
        let child = Command::new(strace())
            .args(["-ff", "-qq", "-e", "trace=fdatasync,fsync,sync_file_range"])
            .arg("-o")
            .arg(out)
            .args(["-p", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start strace");
        // Attached once every thread of the node names a tracer.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !every_thread_traced(pid) {
            assert!(Instant::now() < deadline, "strace did not attach to {pid}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Tracer(child)
    }

    /// Detaches (SIGINT, as at a terminal) and waits until the trace is written.
    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn every_thread_traced(pid: u32) -> bool {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    threads.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("status"))
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("TracerPid:") && l.split_whitespace().nth(1) != Some("0"))
    })
}

/// The descriptor of `pid` open on `file`.
fn fd_of(pid: u32, file: &Path) -> String {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("list the node's descriptors")
        .flatten()
        .find(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == file))
        .map(|fd| fd.file_name().to_string_lossy().into_owned())
        .unwrap_or_else(|| panic!("the node has {} open", file.display()))
}

/// The single node's PID and the descriptor it holds open on its log file.
fn log_descriptor(cluster: &Cluster) -> (u32, String) {
    let pid = cluster.node(1).pid().expect("running");
    let log_file = cluster
        .data_dir()
        .join("data/db")
        .canonicalize()
        .expect("the node's log file");
    (pid, fd_of(pid, &log_file))
}

/// Every sync call in the traces under `traces`, and how many of them synced descriptor
/// `fd` successfully.
fn log_syncs(traces: &Path, fd: &str) -> (usize, String) {
    let calls: String = std::fs::read_dir(traces)
        .expect("the traces")
        .flatten()
        .map(|f| std::fs::read_to_string(f.path()).expect("a thread's trace"))
        .collect();
    let (fdatasync, fsync) = (format!("fdatasync({fd})"), format!("fsync({fd})"));
    let synced = calls
        .lines()
        .filter(|l| l.contains(&fdatasync) || l.contains(&fsync))
        .filter(|l| l.trim_end().ends_with("= 0"))
        .count();
    (synced, calls)
}

/// Sequential writes on one node: each answered write had its log file `fdatasync`ed,
/// and no call of the trace is `sync_file_range` (which leaves data in the disk's cache).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answered_write_is_synced_to_the_disk_not_only_to_the_page_cache() {
    let cluster = Cluster::single().await;
    let (pid, fd) = log_descriptor(&cluster);
    let traces = cluster.data_dir().join("traces");
    std::fs::create_dir(&traces).expect("a directory for the traces");
    let tracer = Tracer::attach(pid, &traces.join("sync"));
    for i in 0..WRITES {
        let body = json!({"value": format!("value-{i}")});
        let (status, answer) = cluster.put(1, &format!("/v1/kv/durable-{i}"), body).await;
        assert_eq!(status, 200, "{answer}");
    }
    tracer.stop();
    let (synced, calls) = log_syncs(&traces, &fd);
    let ranges: Vec<&str> = calls
        .lines()
        .filter(|l| l.contains("sync_file_range("))
        .collect();
    eprintln!(
        "{WRITES} answered writes, {synced} syncs of the log file, {} sync_file_range calls",
        ranges.len()
    );
    assert!(
        ranges.is_empty(),
        "sync_file_range leaves writes in the disk's cache: {ranges:?}"
    );
    assert!(
        synced >= WRITES,
        "{WRITES} answered writes but {synced} syncs of the log file (fd {fd}):\n{calls}"
    );
}

/// Values of this size fill a 512 KiB log segment in about a hundred writes.
const LARGE_VALUE: usize = 4_096;

/// Writes that fill more than two log segments.
const SEGMENT_WRITES: usize = 300;

/// Writes of a few bytes each, which fill only the start of a segment.
const SMALL_WRITES: usize = 20;

/// The log segment size sled records in the data directory's `conf` file (text lines,
/// then a binary checksum).
fn segment_size(data: &Path) -> u64 {
    let conf = std::fs::read(data.join("conf")).expect("sled's conf file");
    let conf = String::from_utf8_lossy(&conf);
    conf.lines()
        .find_map(|l| l.strip_prefix("segment_size: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no segment size in {conf}"))
}

/// The extents of `file` that `filefrag -v` flags `unwritten`: space reserved by
/// `fallocate` whose first write still changes the file's extent map (and so makes the
/// sync after it write that metadata too). A file system without extent flags has none.
fn unwritten_extents(file: &Path) -> Vec<String> {
    let out = Command::new(common::tool("filefrag", "deps"))
        .arg("-v")
        .arg(file)
        .output()
        .expect("run filefrag");
    assert!(out.status.success(), "filefrag: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("unwritten"))
        .map(str::to_owned)
        .collect()
}

/// The log file is prepared a whole segment at a time, with zeros written into every block,
/// so an answered write lands inside the file and overwrites written blocks instead of
/// growing the file (which made every sync also write the file's new size) or converting
/// reserved blocks (which made every few syncs write the extent map). The zeroed rest of
/// a segment is the end of sled's log: a node killed with that tail recovers every
/// answered write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_grows_a_zeroed_segment_at_a_time_and_a_crash_recovers_from_its_tail() {
    let mut cluster = Cluster::single().await;
    let data = cluster.data_dir().join("data");
    let segment = segment_size(&data);
    // Small writes first: they use only the start of the first segment.
    for i in 0..SMALL_WRITES {
        let (status, answer) = cluster
            .put(1, &format!("/v1/kv/small-{i}"), json!({"value": "small"}))
            .await;
        assert_eq!(status, 200, "{answer}");
    }
    let unwritten = unwritten_extents(&data.join("db"));
    assert!(
        unwritten.is_empty(),
        "the log file has reserved but unwritten extents, so writes into them change its \
         extent map: {unwritten:?}"
    );
    let value = "v".repeat(LARGE_VALUE);
    for i in 0..SEGMENT_WRITES {
        let body = json!({"value": format!("{i}:{value}")});
        let (status, answer) = cluster.put(1, &format!("/v1/kv/large-{i}"), body).await;
        assert_eq!(status, 200, "{answer}");
    }
    let size = std::fs::metadata(data.join("db"))
        .expect("the log file")
        .len();
    eprintln!("log file {size} bytes after {SEGMENT_WRITES} writes, segments of {segment}");
    assert!(
        size >= 2 * segment,
        "{SEGMENT_WRITES} writes of {LARGE_VALUE} bytes should fill two segments: {size} bytes"
    );
    assert_eq!(
        size % segment,
        0,
        "the log file ends inside a segment ({size} bytes, segments of {segment}): \
         writes grow the file instead of landing in allocated space"
    );

    cluster.restart(1);
    cluster.wait_ready().await;
    for i in 0..SEGMENT_WRITES {
        let (status, answer) = cluster
            .get(1, &format!("/v1/kv/large-{i}"))
            .await
            .expect("read after the crash");
        assert_eq!(status, 200, "write {i} lost by the crash: {answer}");
        let expected = format!("{i}:{value}");
        assert_eq!(
            answer["value"].as_str(),
            Some(expected.as_str()),
            "write {i}"
        );
    }
    let (status, answer) = cluster
        .put(1, "/v1/kv/after-the-crash", json!({"value": "written"}))
        .await;
    assert_eq!(status, 200, "a write after recovery: {answer}");
}

/// An idle node leaves its disk alone. sled's background flusher used to `fsync` the log
/// file every 500 ms whether or not anything had been written, and each of those sends the
/// device a cache flush (six a second from an idle three-node cluster); it now syncs only
/// when something reached the file since its last sync (`vendor/sled/PATCHED.md`, item 7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_node_does_not_sync_its_log() {
    let cluster = Cluster::single().await;
    let (pid, fd) = log_descriptor(&cluster);
    for i in 0..5 {
        let body = json!({"value": format!("value-{i}")});
        let (status, answer) = cluster
            .put(1, &format!("/v1/kv/before-idle-{i}"), body)
            .await;
        assert_eq!(status, 200, "{answer}");
    }
    // The flusher's first round after the writes may still sync them; let it pass.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let traces = cluster.data_dir().join("idle-traces");
    std::fs::create_dir(&traces).expect("a directory for the traces");
    let tracer = Tracer::attach(pid, &traces.join("sync"));
    // Six rounds of sled's flusher.
    tokio::time::sleep(Duration::from_secs(3)).await;
    tracer.stop();
    let (synced, calls) = log_syncs(&traces, &fd);
    eprintln!("3 idle seconds: {synced} syncs of the log file");
    assert_eq!(
        synced, 0,
        "an idle node synced its log file (fd {fd}):\n{calls}"
    );
}
