//! `Client`: endpoints tried in turn, the leader learned and preferred, every mutation
//! carrying an `Idempotency-Key` so that it can be retried safely after a connection
//! failure, a 503 or an unknown outcome.

use crate::error::{Error, Result};
use baton_wire::{ClusterStatus, ErrorBody, Limits, paths};
use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Attempts per call (across endpoints) before giving up, by default.
const ATTEMPTS_MAX: usize = 10;
/// Timeout of an ordinary request, by default.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between attempts after a 503 or an unknown outcome, by default.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// Timeout of a TCP connect, by default.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How a [`Client`] times and retries its calls: built by [`Client::builder`].
#[derive(Clone)]
pub struct ClientBuilder {
    endpoints: Vec<String>,
    request_timeout: Duration,
    connect_timeout: Duration,
    attempts: usize,
    retry_pause: Duration,
    token: Option<String>,
    ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("endpoints", &self.endpoints)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("attempts", &self.attempts)
            .field("retry_pause", &self.retry_pause)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("ca", &self.ca_pem.is_some())
            .finish()
    }
}

impl ClientBuilder {
    /// Trust only this CA bundle (PEM) for `https://` endpoints; bare `host:port`
    /// endpoints then mean `https://host:port`.
    pub fn ca_cert_pem(mut self, pem: impl Into<Vec<u8>>) -> ClientBuilder {
        self.ca_pem = Some(pem.into());
        self
    }

    /// The bearer token every request carries (servers started with `--auth`).
    pub fn token(mut self, token: impl Into<String>) -> ClientBuilder {
        self.token = Some(token.into());
        self
    }

    /// Timeout of one ordinary request (held-open acquires get their wait on top).
    pub fn request_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.request_timeout = timeout;
        self
    }

    /// Timeout of one TCP connect (a node that is down is skipped after it).
    pub fn connect_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.connect_timeout = timeout;
        self
    }

    /// Attempts per call across the endpoints before the error is returned (at least 1).
    pub fn attempts(mut self, attempts: usize) -> ClientBuilder {
        self.attempts = attempts.max(1);
        self
    }

    /// Pause between attempts after a 503 or an unknown outcome.
    pub fn retry_pause(mut self, pause: Duration) -> ClientBuilder {
        self.retry_pause = pause;
        self
    }

    /// The client.
    pub fn build(self) -> Result<Client> {
        let scheme = if self.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        let endpoints: Vec<String> = self
            .endpoints
            .iter()
            .map(|e| {
                let e = e.trim().trim_end_matches('/');
                if e.starts_with("http://") || e.starts_with("https://") {
                    e.to_owned()
                } else {
                    format!("{scheme}://{e}")
                }
            })
            .filter(|e| e.len() > "http://".len())
            .collect();
        if endpoints.is_empty() {
            return Err(Error::BadRequest("no endpoints given".into()));
        }
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = &self.token {
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| Error::BadRequest("the token must be visible ASCII".into()))?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        let mut http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .connect_timeout(self.connect_timeout)
            .default_headers(headers);
        if let Some(pem) = &self.ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| Error::BadRequest(format!("the CA bundle: {e}")))?;
            if certs.is_empty() {
                return Err(Error::BadRequest(
                    "the CA bundle holds no certificate".into(),
                ));
            }
            http = http.tls_built_in_root_certs(false);
            for cert in certs {
                http = http.add_root_certificate(cert);
            }
        }
        let http = http
            .build()
            .map_err(|e| Error::Unreachable(e.to_string()))?;
        Ok(Client {
            key: None,
            inner: Arc::new(Inner {
                endpoints,
                preferred: AtomicUsize::new(0),
                http,
                limits: tokio::sync::OnceCell::new(),
                scheme,
                request_timeout: self.request_timeout,
                attempts: self.attempts,
                retry_pause: self.retry_pause,
            }),
        })
    }
}

/// A handle on a baton cluster. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// The key every mutation of this handle carries ([`Client::with_idempotency_key`]).
    key: Option<Arc<str>>,
}

struct Inner {
    endpoints: Vec<String>,
    preferred: AtomicUsize,
    http: reqwest::Client,
    /// The cluster's limits, read once from `/v1/cluster`.
    limits: tokio::sync::OnceCell<Limits>,
    /// `http` or `https` (with a CA): how advertised `host:port` addresses are reached.
    scheme: &'static str,
    request_timeout: Duration,
    attempts: usize,
    retry_pause: Duration,
}

/// How a call may be retried.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call {
    /// A mutation carries an idempotency key; after an unknown outcome it is retried with
    /// the same key, and reported `Indeterminate` only if every retry stays unknown.
    pub(crate) mutation: bool,
    /// Per-request timeout on top of the client's own (held-open acquires and membership
    /// changes need more).
    pub(crate) extra: Duration,
    /// A per-request timeout that replaces the client's own (keepalives: a fraction of the
    /// TTL).
    pub(crate) exact: Option<Duration>,
}

impl Call {
    pub(crate) const READ: Call = Call {
        mutation: false,
        extra: Duration::ZERO,
        exact: None,
    };
    pub(crate) const WRITE: Call = Call {
        mutation: true,
        extra: Duration::ZERO,
        exact: None,
    };

    /// A membership change: not replicated as a command (no key), and it may wait for a new
    /// member to catch up (the server's deadline is 30 s by default).
    pub(crate) const MEMBERSHIP: Call = Call {
        mutation: false,
        extra: Duration::from_secs(65),
        exact: None,
    };

    /// A write held open up to `wait`.
    pub(crate) fn waiting(wait: Duration) -> Call {
        Call {
            mutation: true,
            extra: wait + Duration::from_secs(20),
            exact: None,
        }
    }
}

impl Client {
    /// A handle on the same connection whose mutations all carry `key` as their
    /// `Idempotency-Key`: repeat a call that ended `Error::Indeterminate` through it, with
    /// the key that error carries, to learn its outcome without acting twice.
    pub fn with_idempotency_key(&self, key: impl Into<String>) -> Client {
        Client {
            inner: self.inner.clone(),
            key: Some(Arc::from(key.into())),
        }
    }

    /// A client for these endpoints (`host:port` or `http://host:port`), tried in turn,
    /// with the default timeouts and retries.
    pub fn new<I, S>(endpoints: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Client::builder(endpoints).build()
    }

    /// A builder for a client of these endpoints: request and connect timeouts (10 s, 2 s),
    /// attempts per call (10) and the pause between them (200 ms).
    pub fn builder<I, S>(endpoints: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        ClientBuilder {
            endpoints: endpoints
                .into_iter()
                .map(|e| e.as_ref().to_owned())
                .collect(),
            request_timeout: REQUEST_TIMEOUT,
            connect_timeout: CONNECT_TIMEOUT,
            attempts: ATTEMPTS_MAX,
            retry_pause: RETRY_PAUSE,
            token: None,
            ca_pem: None,
        }
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
                .get(format!("{endpoint}{}", paths::CLUSTER))
                .timeout(Duration::from_secs(2))
                .send()
                .await
            else {
                continue;
            };
            let Ok(status) = response.json::<ClusterStatus>().await else {
                continue;
            };
            if let Some(api) = status.leader_api {
                let url = format!("{}://{api}", self.inner.scheme);
                if let Some(i) = self.inner.endpoints.iter().position(|e| *e == url) {
                    self.prefer(i);
                }
                return Some(url);
            }
        }
        None
    }

    /// One logical call with retries. See [`Call`]. The answer is parsed with the wire
    /// contract: a 2xx body of another shape is [`Error::Protocol`], never a default.
    pub(crate) async fn call<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        call: Call,
    ) -> Result<T> {
        let key = call.mutation.then(|| match &self.key {
            Some(key) => key.to_string(),
            None => uuid::Uuid::new_v4().to_string(),
        });
        let mut maybe_applied = false;
        let mut last = Error::Unreachable("no attempt made".into());
        for attempt in 0..self.inner.attempts {
            let (index, endpoint) = self.endpoint(attempt);
            let mut request = self
                .inner
                .http
                .request(method.clone(), format!("{endpoint}{path}"))
                .timeout(
                    call.exact
                        .unwrap_or(self.inner.request_timeout + call.extra),
                );
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
                    tokio::time::sleep(self.inner.retry_pause).await;
                    continue;
                }
            };
            let status = response.status().as_u16();
            let text = match response.text().await {
                Ok(text) => text,
                Err(e) => {
                    // The answer broke off: as for a request that got no answer.
                    maybe_applied |= call.mutation;
                    last = Error::Unavailable(format!("{endpoint}: {e}"));
                    tokio::time::sleep(self.inner.retry_pause).await;
                    continue;
                }
            };
            if (200..300).contains(&status) {
                self.prefer(index);
                return serde_json::from_str(&text)
                    .map_err(|e| Error::Protocol(format!("{method} {path}: {e} in {text:.200}")));
            }
            let error = match serde_json::from_str::<ErrorBody>(&text) {
                Ok(body) => Error::from_api(status, body),
                Err(_) => Error::unreadable(status, &text),
            };
            match error {
                Error::Unavailable(_) => {
                    last = error;
                    if attempt % 2 == 1 {
                        self.find_leader().await;
                    }
                    tokio::time::sleep(self.inner.retry_pause).await;
                }
                Error::Indeterminate { .. } => {
                    maybe_applied = true;
                    last = error;
                    tokio::time::sleep(self.inner.retry_pause).await;
                }
                definite => return Err(definite),
            }
        }
        if maybe_applied {
            return Err(Error::Indeterminate {
                message: last.to_string(),
                idempotency_key: key,
            });
        }
        Err(last)
    }

    pub(crate) async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.call::<(), T>(Method::GET, path, None, Call::READ)
            .await
    }

    pub(crate) async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        call: Call,
    ) -> Result<T> {
        self.call(Method::POST, path, Some(body), call).await
    }

    pub(crate) async fn delete_path<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.call::<(), T>(Method::DELETE, path, None, Call::WRITE)
            .await
    }

    /// The cluster as the first answering node sees it (`GET /v1/cluster`).
    pub async fn cluster(&self) -> Result<ClusterStatus> {
        self.get_json(paths::CLUSTER).await
    }

    /// The limits the cluster enforces on input, read once from `/v1/cluster` and kept.
    pub async fn limits(&self) -> Result<Limits> {
        self.inner
            .limits
            .get_or_try_init(|| async { Ok(self.cluster().await?.limits) })
            .await
            .cloned()
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
