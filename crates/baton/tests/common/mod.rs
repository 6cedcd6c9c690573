//! Real `baton serve` processes on loopback ports picked free at run time. Every process is
//! started by the test and killed by PID when the test's `Cluster` drops.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// A loopback port that is free now and that no other caller of this function in the
/// process is handed. Ports come from below the kernel's ephemeral range, so the local
/// end of an outgoing connection (which the kernel picks from that range) cannot take one
/// between this check and the server's bind; the start depends on the process id, so two
/// test processes at once start far apart.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let (low, high) = if ephemeral_low > 12_000 {
        (10_000, ephemeral_low)
    } else {
        (ephemeral_low.max(1_024), 65_535)
    };
    let span = high - low;
    let base = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (low + (base + n) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port between {low} and {high}");
}

/// The path of `binary` on the PATH; when it is missing, the project's `.ci/<script>` (a
/// Debian package installer) is run first.
pub fn tool(binary: &str, script: &str) -> PathBuf {
    // The sbin directories too: Debian keeps some tools there (`filefrag`), off a user's PATH.
    let find = || {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
            .map(|p| p.join(binary))
            .find(|p| p.is_file())
    };
    if let Some(path) = find() {
        return path;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../.ci")
        .join(script);
    let status = Command::new("bash")
        .arg(&script)
        .status()
        .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    assert!(status.success(), "{} failed: {status}", script.display());
    find().unwrap_or_else(|| panic!("{binary} is on the PATH after {}", script.display()))
}

pub struct Server {
    pub id: u64,
    pub api: String,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl Server {
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(&self.args)
            .env("RUST_LOG", "warn,baton=info,baton_http_api=info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start baton serve");
        self.child = Some(child);
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, as a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for a clean exit; returns its exit status success.
    pub fn terminate(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.api)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

pub struct Cluster {
    pub dir: TempDir,
    pub nodes: BTreeMap<u64, Server>,
    pub http: reqwest::Client,
}

impl Cluster {
    /// One node: `baton serve` with explicit addresses and data dir.
    pub async fn single() -> Cluster {
        Cluster::single_with(&[]).await
    }

    /// One node with extra `baton serve` flags.
    pub async fn single_with(extra: &[&str]) -> Cluster {
        let dir = TempDir::new().unwrap();
        let api = format!("127.0.0.1:{}", free_port());
        let peer = format!("127.0.0.1:{}", free_port());
        let data = dir.path().join("data");
        let args = vec![
            "serve".into(),
            "--api".into(),
            api.clone(),
            "--peer".into(),
            peer,
            "--data-dir".into(),
            data.display().to_string(),
        ];
        let args = args
            .into_iter()
            .chain(extra.iter().map(|s| s.to_string()))
            .collect();
        let mut cluster = Cluster::empty(dir);
        cluster.add(1, api, args);
        cluster.wait_ready().await;
        cluster
    }

    /// Three nodes from a cluster file.
    pub async fn three() -> Cluster {
        Cluster::from_file(3, "").await
    }

    /// `nodes` nodes from a cluster file that also holds `extra` (TOML tables).
    pub async fn from_file(nodes: u64, extra: &str) -> Cluster {
        let dir = TempDir::new().unwrap();
        let mut file = format!("{extra}\n");
        let mut apis = BTreeMap::new();
        for id in 1..=nodes {
            let api = format!("127.0.0.1:{}", free_port());
            let peer = format!("127.0.0.1:{}", free_port());
            file.push_str(&format!(
                "[[node]]\nid = {id}\napi = \"{api}\"\npeer = \"{peer}\"\ndata_dir = \"node-{id}\"\n\n"
            ));
            apis.insert(id, api);
        }
        let path = dir.path().join("cluster.toml");
        std::fs::write(&path, file).unwrap();
        let mut cluster = Cluster::empty(dir);
        for (id, api) in apis {
            let args = vec![
                "serve".into(),
                "--config".into(),
                path.display().to_string(),
                "--node".into(),
                id.to_string(),
            ];
            cluster.add(id, api, args);
        }
        cluster.wait_ready().await;
        cluster
    }

    pub fn empty(dir: TempDir) -> Cluster {
        Cluster {
            dir,
            nodes: BTreeMap::new(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
        }
    }

    pub fn add(&mut self, id: u64, api: String, args: Vec<String>) {
        let log = self.dir.path().join(format!("node-{id}.log"));
        let mut server = Server {
            id,
            api,
            args,
            log,
            child: None,
        };
        server.spawn();
        self.nodes.insert(id, server);
    }

    pub fn node(&self, id: u64) -> &Server {
        &self.nodes[&id]
    }

    pub fn restart(&mut self, id: u64) {
        let server = self.nodes.get_mut(&id).unwrap();
        server.kill();
        server.spawn();
    }

    pub fn start_again(&mut self, id: u64) {
        self.nodes.get_mut(&id).unwrap().spawn();
    }

    /// Stops node `id` with SIGTERM (asserting a clean exit), starts it on the same data
    /// and waits until the cluster is ready again.
    pub async fn restart_cleanly(&mut self, id: u64) {
        assert!(
            self.nodes.get_mut(&id).unwrap().terminate(),
            "clean exit on SIGTERM"
        );
        self.start_again(id);
        self.wait_ready().await;
    }

    /// Waits until every running node is ready (leader known, caught up).
    pub async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        for server in self.nodes.values().filter(|s| s.child.is_some()) {
            loop {
                let ready = self
                    .http
                    .get(server.url("/readyz"))
                    .timeout(Duration::from_secs(2))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                if ready {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "node {} not ready:\n{}",
                    server.id,
                    server.log()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// Waits (at most 15 s: a loaded machine may be slow) until node `id`'s `/readyz` says
    /// 503; returns that body. `what` names the expectation in the failure message.
    pub async fn wait_unready(&self, id: u64, what: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (status, body) = self.get(id, "/readyz").await.unwrap();
            if status == 503 {
                return body;
            }
            assert!(Instant::now() < deadline, "{what}: {body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The leader's id as node `via` reports it (waits for one).
    pub async fn leader(&self, via: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok((200, body)) = self.get(via, "/v1/cluster").await
                && let Some(leader) = body["leader"].as_u64()
                && self.nodes.get(&leader).is_some_and(|s| s.child.is_some())
            {
                return leader;
            }
            assert!(Instant::now() < deadline, "no leader seen from node {via}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn send(
        &self,
        id: u64,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> reqwest::Result<(u16, Value)> {
        let mut request = self.http.request(method, self.node(id).url(path));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        Ok((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    pub async fn get(&self, id: u64, path: &str) -> reqwest::Result<(u16, Value)> {
        self.send(id, reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, id: u64, path: &str, body: Value) -> (u16, Value) {
        self.send(id, reqwest::Method::POST, path, Some(body))
            .await
            .unwrap()
    }

    pub async fn delete(&self, id: u64, path: &str) -> (u16, Value) {
        self.send(id, reqwest::Method::DELETE, path, None)
            .await
            .unwrap()
    }

    pub async fn put(&self, id: u64, path: &str, body: Value) -> (u16, Value) {
        self.send(id, reqwest::Method::PUT, path, Some(body))
            .await
            .unwrap()
    }

    pub async fn lease(&self, id: u64, ttl_ms: u64) -> u64 {
        let (status, body) = self
            .post(id, "/v1/leases", json!({ "ttl_ms": ttl_ms }))
            .await;
        assert_eq!(status, 201, "{body}");
        body["lease_id"].as_u64().unwrap()
    }

    pub async fn revision(&self, id: u64) -> u64 {
        let (_, body) = self.get(id, "/v1/cluster").await.unwrap();
        body["revision"].as_u64().unwrap()
    }

    /// The queue of lock `name` as node `id` shows it: (lease, enqueue revision), in order.
    pub async fn lock_queue(&self, id: u64, name: &str) -> Vec<(u64, u64)> {
        let (_, state) = self.get(id, &format!("/v1/locks/{name}")).await.unwrap();
        state["queue"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                (
                    w["lease_id"].as_u64().unwrap(),
                    w["enqueued_revision"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }
}
