//! `Client`: endpoints tried in turn, the leader learned and preferred, every mutation
//! carrying an `Idempotency-Key` so that it can be retried safely after a connection
//! failure, a 503 or an unknown outcome.

use crate::error::{Error, Result};
use reqwest::Method;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Attempts per call (across endpoints) before giving up.
const ATTEMPTS_MAX: usize = 10;
/// Timeout of an ordinary request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between attempts after a 503 or an unknown outcome.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// A handle on a baton cluster. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    endpoints: Vec<String>,
    preferred: AtomicUsize,
    http: reqwest::Client,
}

/// How a call may be retried.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call {
    /// A mutation carries an idempotency key; after an unknown outcome it is retried with
    /// the same key, and reported `Indeterminate` only if every retry stays unknown.
    pub(crate) mutation: bool,
    /// Per-request timeout (held-open acquires need more than the default).
    pub(crate) timeout: Duration,
}

impl Call {
    pub(crate) const READ: Call = Call {
        mutation: false,
        timeout: REQUEST_TIMEOUT,
    };
    pub(crate) const WRITE: Call = Call {
        mutation: true,
        timeout: REQUEST_TIMEOUT,
    };

    /// A write held open up to `wait`.
    pub(crate) fn waiting(wait: Duration) -> Call {
        Call {
            mutation: true,
            timeout: wait + Duration::from_secs(30),
        }
    }
}

impl Client {
    /// A client for these endpoints (`host:port` or `http://host:port`), tried in turn.
    pub fn new<I, S>(endpoints: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let endpoints: Vec<String> = endpoints
            .into_iter()
            .map(|e| {
                let e = e.as_ref().trim().trim_end_matches('/');
                if e.starts_with("http://") || e.starts_with("https://") {
                    e.to_owned()
                } else {
                    format!("http://{e}")
                }
            })
            .filter(|e| e.len() > "http://".len())
            .collect();
        if endpoints.is_empty() {
            return Err(Error::BadRequest("no endpoints given".into()));
        }
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(2))
            .build()
            .map_err(|e| Error::Unreachable(e.to_string()))?;
        Ok(Client {
            inner: Arc::new(Inner {
                endpoints,
                preferred: AtomicUsize::new(0),
                http,
            }),
        })
    }

    /// The endpoints, in the order given.
    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }

    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.inner.http
    }

    /// The endpoint for attempt `n`: the preferred one first, then the others in turn.
    pub(crate) fn endpoint(&self, attempt: usize) -> (usize, &str) {
        let n = self.inner.endpoints.len();
        let i = (self.inner.preferred.load(Ordering::Relaxed) + attempt) % n;
        (i, &self.inner.endpoints[i])
    }

    pub(crate) fn prefer(&self, index: usize) {
        self.inner.preferred.store(index, Ordering::Relaxed);
    }

    /// Asks the endpoints which node leads and prefers it (one hop less per request).
    pub async fn find_leader(&self) -> Option<String> {
        for attempt in 0..self.inner.endpoints.len() {
            let (_, endpoint) = self.endpoint(attempt);
            let Ok(response) = self
                .inner
                .http
                .get(format!("{endpoint}/v1/cluster"))
                .timeout(Duration::from_secs(2))
                .send()
                .await
            else {
                continue;
            };
            let Ok(status) = response.json::<Value>().await else {
                continue;
            };
            if let Some(api) = status["leader_api"].as_str() {
                let url = format!("http://{api}");
                if let Some(i) = self.inner.endpoints.iter().position(|e| *e == url) {
                    self.prefer(i);
                }
                return Some(url);
            }
        }
        None
    }

    /// One logical call with retries. See [`Call`].
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        call: Call,
    ) -> Result<Value> {
        let key = call.mutation.then(|| uuid::Uuid::new_v4().to_string());
        let mut maybe_applied = false;
        let mut last = Error::Unreachable("no attempt made".into());
        for attempt in 0..ATTEMPTS_MAX {
            let (index, endpoint) = self.endpoint(attempt);
            let mut request = self
                .inner
                .http
                .request(method.clone(), format!("{endpoint}{path}"))
                .timeout(call.timeout);
            if let Some(key) = &key {
                request = request.header("Idempotency-Key", key);
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = match request.send().await {
                Ok(r) => r,
                Err(e) if e.is_connect() => {
                    last = Error::Unreachable(format!("{endpoint}: {e}"));
                    continue;
                }
                Err(e) => {
                    // Sent, no answer: a mutation may have happened; the same key makes
                    // the retry safe.
                    maybe_applied |= call.mutation;
                    last = Error::Unavailable(format!("{endpoint}: {e}"));
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            };
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            if (200..300).contains(&status) {
                self.prefer(index);
                return Ok(body);
            }
            let error = Error::from_api(status, &body);
            match error {
                Error::Unavailable(_) => {
                    last = error;
                    if attempt % 2 == 1 {
                        self.find_leader().await;
                    }
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Error::Indeterminate(_) => {
                    maybe_applied = true;
                    last = error;
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                definite => return Err(definite),
            }
        }
        if maybe_applied {
            return Err(Error::Indeterminate(last.to_string()));
        }
        Err(last)
    }

    /// A raw call on any API path (`mutation`: carries an idempotency key and is retried
    /// safely). For what the typed methods do not cover.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        mutation: bool,
    ) -> Result<Value> {
        let call = if mutation { Call::WRITE } else { Call::READ };
        self.call(method, path, body, call).await
    }

    pub(crate) async fn get_path(&self, path: &str) -> Result<Value> {
        self.call(Method::GET, path, None, Call::READ).await
    }

    pub(crate) async fn post(&self, path: &str, body: &Value, call: Call) -> Result<Value> {
        self.call(Method::POST, path, Some(body), call).await
    }

    /// The cluster as the first answering node sees it (`GET /v1/cluster`).
    pub async fn cluster(&self) -> Result<Value> {
        self.get_path("/v1/cluster").await
    }
}

/// Percent-encodes a name for one path segment (or a query value).
pub fn segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Percent-encodes a key, keeping its slashes.
pub(crate) fn key_path(key: &str) -> String {
    key.split('/').map(segment).collect::<Vec<_>>().join("/")
}
