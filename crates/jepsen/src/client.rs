//! Recording operations and sending them: the history recorder (timestamps taken under
//! its lock, so file order is time order) and a raw HTTP client that never retries and
//! maps every answer to ok, fail (definitely not done) or info (unknown).

use crate::history::{Event, Kind, Process};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Shared history recorder.
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<Mutex<Vec<Event>>>,
    start: Instant,
    next_process: Arc<AtomicU64>,
}

impl Recorder {
    /// A recorder whose time 0 is now.
    pub fn new() -> Recorder {
        Recorder {
            inner: Arc::new(Mutex::new(Vec::new())),
            start: Instant::now(),
            next_process: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A fresh client process id.
    pub fn new_process(&self) -> Process {
        Process::Client(self.next_process.fetch_add(1, Ordering::Relaxed))
    }

    /// Nanoseconds since the start.
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Records one event and returns its time.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        kind: Kind,
        process: Process,
        f: &str,
        key: Option<&str>,
        value: Value,
        node: Option<&str>,
        error: Option<String>,
    ) -> u64 {
        let mut events = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let time = self.now();
        let i = events.len() as u64;
        events.push(Event {
            i,
            kind,
            process,
            f: f.to_owned(),
            key: key.map(str::to_owned),
            value,
            node: node.map(str::to_owned),
            error,
            time,
        });
        time
    }

    /// A copy of everything recorded so far.
    pub fn events(&self) -> Vec<Event> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

/// How an HTTP request ended.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A 2xx with its body.
    Ok(Value),
    /// An answer that proves the request did nothing: a 4xx, or 503 before proposing.
    Fail {
        /// Status code.
        status: u16,
        /// The spec's error code.
        code: String,
        /// The body.
        body: Value,
    },
    /// Unknown: timeout, reset after sending, 504, other 5xx.
    Info(String),
}

impl Reply {
    /// The error text for the history.
    pub fn error(&self) -> Option<String> {
        match self {
            Reply::Ok(_) => None,
            Reply::Fail { code, .. } => Some(code.clone()),
            Reply::Info(e) => Some(e.clone()),
        }
    }

    /// The history kind.
    pub fn kind(&self) -> Kind {
        match self {
            Reply::Ok(_) => Kind::Ok,
            Reply::Fail { .. } => Kind::Fail,
            Reply::Info(_) => Kind::Info,
        }
    }
}

/// A raw client of one cluster (no retries, no failover).
#[derive(Clone)]
pub struct Http {
    client: reqwest::Client,
}

impl Http {
    /// A client with connection pooling and a 500 ms connect timeout.
    pub fn new() -> Result<Http, crate::Error> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(500))
            .pool_idle_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| crate::Error::Setup(e.to_string()))?;
        Ok(Http { client })
    }

    /// Sends one request; `timeout` bounds the whole exchange.
    pub async fn send(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Reply {
        let mut request = self.client.request(method, url).timeout(timeout);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = match request.send().await {
            Ok(r) => r,
            // Nothing was sent when the connection could not be made.
            Err(e) if e.is_connect() => {
                return Reply::Fail {
                    status: 0,
                    code: "connect".into(),
                    body: Value::Null,
                };
            }
            Err(e) if e.is_timeout() => return Reply::Info("timeout".into()),
            Err(e) => return Reply::Info(format!("send: {e}")),
        };
        let status = response.status().as_u16();
        let body: Value = match response.json().await {
            Ok(v) => v,
            Err(e) if e.is_timeout() => return Reply::Info("timeout".into()),
            Err(e) => {
                return if (200..300).contains(&status) {
                    Reply::Info(format!("body: {e}"))
                } else {
                    Reply::Info(format!("status {status}"))
                };
            }
        };
        let code = body
            .pointer("/error/code")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        match status {
            200..=299 => Reply::Ok(body),
            // Refused before proposing. (`unavailable` may follow a proposal: unknown.)
            503 if code == "no_leader" => Reply::Fail { status, code, body },
            400..=499 => Reply::Fail { status, code, body },
            _ => Reply::Info(if code.is_empty() {
                format!("status {status}")
            } else {
                code
            }),
        }
    }
}
