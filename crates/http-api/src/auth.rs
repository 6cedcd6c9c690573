//! Principals, their permissions and their flow control.
//!
//! `baton serve --auth FILE` loads an [`AuthFile`]: principals, each with the SHA-256 of its
//! bearer token, `read` / `write` rules on name prefixes per namespace, an `admin` flag and
//! quotas. [`Auth`] holds the rules (swapped whole on reload, so a request sees one version)
//! and each principal's [`Flow`] on this node: its token bucket and its counts of held-open
//! waits and open watches. The middleware [`authenticate`] turns a request's token into an
//! [`Authz`] that handlers ask; the replicated part (lease ownership, quotas on leases and
//! keys) travels with the proposal as a [`Caller`] and is checked by the state machine.

use crate::error::{ApiError, error_response};
use crate::state::AppState;
use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use baton_state_machine::{Caller, EventKind, Quota, ResourceKind};
use baton_wire::{ErrorCode, ErrorDetail};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// Live leases a principal may have when its entry sets no `leases` quota.
pub const DEFAULT_LEASES_QUOTA: u64 = 10_000;

/// Why an auth file was refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The file could not be read.
    #[error("cannot read the auth file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the expected shape.
    #[error("auth file {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The auth file as written (TOML).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthFile {
    /// Every principal.
    #[serde(rename = "principal", default)]
    pub principals: Vec<PrincipalEntry>,
}

/// One `[[principal]]` of the auth file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalEntry {
    /// Its name: 1..=64 of `A-Z a-z 0-9 _ . -`.
    pub name: String,
    /// SHA-256 of its token, 64 hex digits (`baton auth hash` prints it).
    pub token_sha256: String,
    /// May change membership, force-release, use any lease and see everything.
    #[serde(default)]
    pub admin: bool,
    /// May read `/metrics`.
    #[serde(default)]
    pub metrics: bool,
    /// What it may read and write.
    #[serde(default)]
    pub rules: Vec<RuleEntry>,
    /// Its limits.
    #[serde(default)]
    pub quota: QuotaEntry,
}

/// One rule: `access` on names starting with `prefix` in `namespace` (or `*`: all five).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleEntry {
    /// `locks`, `semaphores`, `elections`, `keys`, `watches` or `*`.
    pub namespace: String,
    /// The name prefix ("" for every name).
    #[serde(default)]
    pub prefix: String,
    /// `read` or `write` (write includes read).
    pub access: Access,
}

/// Per-principal limits (absent: none).
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaEntry {
    /// Live leases (replicated, exact).
    pub leases: Option<u64>,
    /// Keys it wrote that still exist (replicated, exact).
    pub keys: Option<u64>,
    /// Bytes of those keys, key plus value (replicated, exact).
    pub key_bytes: Option<u64>,
    /// Holds and queue places of its leases, 202s included (replicated, exact).
    pub claims: Option<u64>,
    /// Bytes of its claims' owner strings and election values and of the idempotency
    /// outcomes its leases keep (replicated, exact).
    pub state_bytes: Option<u64>,
    /// Held-open acquires at once on one node.
    pub waiters: Option<u64>,
    /// Open watch streams at once on one node.
    pub watches: Option<u64>,
    /// Sustained requests per second on one node (token bucket; may be fractional).
    pub requests_per_second: Option<f64>,
    /// Bucket size: requests allowed in a burst (default: one second's worth).
    pub burst: Option<u32>,
}

/// A namespace of names that rules grant access to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Namespace {
    /// Lock names.
    Locks,
    /// Semaphore names.
    Semaphores,
    /// Election names.
    Elections,
    /// Keys of the key space (and transactions over them).
    Keys,
    /// What a watch may be opened on (its key, prefix or resource name).
    Watches,
}

impl Namespace {
    fn parse(text: &str) -> Option<Vec<Namespace>> {
        use Namespace::*;
        Some(match text {
            "locks" => vec![Locks],
            "semaphores" => vec![Semaphores],
            "elections" => vec![Elections],
            "keys" => vec![Keys],
            "watches" => vec![Watches],
            "*" => vec![Locks, Semaphores, Elections, Keys, Watches],
            _ => return None,
        })
    }

    /// The namespace of a resource kind.
    pub fn of(kind: ResourceKind) -> Namespace {
        match kind {
            ResourceKind::Lock => Namespace::Locks,
            ResourceKind::Semaphore => Namespace::Semaphores,
            ResourceKind::Election => Namespace::Elections,
        }
    }

    /// The field name a bad name is reported under.
    pub(crate) fn field(self) -> &'static str {
        match self {
            Namespace::Keys => "key",
            _ => "name",
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Namespace::Locks => "locks",
            Namespace::Semaphores => "semaphores",
            Namespace::Elections => "elections",
            Namespace::Keys => "keys",
            Namespace::Watches => "watches",
        }
    }
}

/// Read or write; write includes read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// See state and events.
    Read,
    /// Change state (acquire, release, put, delete, campaign, …).
    Write,
}

/// A principal as loaded: never printed with its token hash.
pub struct Principal {
    /// Its name.
    pub name: String,
    token_sha256: [u8; 32],
    /// Whether it is an admin.
    pub admin: bool,
    metrics: bool,
    rules: Vec<(Namespace, String, Access)>,
    /// Its limits.
    pub quota: QuotaEntry,
}

impl std::fmt::Debug for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Principal")
            .field("name", &self.name)
            .field("admin", &self.admin)
            .field("rules", &self.rules.len())
            .finish_non_exhaustive()
    }
}

impl Principal {
    /// Whether it may `access` the name `name` in `ns`.
    pub fn allows(&self, ns: Namespace, name: &str, access: Access) -> bool {
        self.admin
            || self
                .rules
                .iter()
                .any(|(n, prefix, a)| *n == ns && *a >= access && name.starts_with(prefix))
    }

    fn caller(&self) -> Caller {
        Caller {
            principal: self.name.clone(),
            admin: self.admin,
            quota: Quota {
                // Leases are never unlimited: everything else a principal holds hangs on
                // them.
                leases: Some(self.quota.leases.unwrap_or(DEFAULT_LEASES_QUOTA)),
                keys: self.quota.keys,
                key_bytes: self.quota.key_bytes,
                claims: self.quota.claims,
                state_bytes: self.quota.state_bytes,
            },
        }
    }
}

/// SHA-256 of a token, as the auth file stores it (64 lowercase hex digits).
pub fn token_hash(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex32(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The rules of one version of the auth file.
#[derive(Debug)]
pub struct Rules {
    principals: Vec<Arc<Principal>>,
}

impl Rules {
    /// Parses and checks the text of an auth file.
    pub fn parse(text: &str) -> Result<Rules, String> {
        let file: AuthFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut principals = Vec::new();
        let mut names = std::collections::BTreeSet::new();
        for entry in file.principals {
            let name = entry.name;
            let valid_name = !name.is_empty()
                && name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
            if !valid_name {
                return Err(format!(
                    "principal {name:?}: a name is 1..=64 of A-Z a-z 0-9 _ . -"
                ));
            }
            if !names.insert(name.clone()) {
                return Err(format!("principal {name:?} is named twice"));
            }
            let token_sha256 = parse_hex32(&entry.token_sha256).ok_or_else(|| {
                format!(
                    "principal {name:?}: token_sha256 must be 64 hex digits (`baton auth hash`)"
                )
            })?;
            let mut rules = Vec::new();
            for rule in entry.rules {
                let namespaces = Namespace::parse(&rule.namespace).ok_or_else(|| {
                    format!(
                        "principal {name:?}: namespace {:?} is not one of locks, semaphores, elections, keys, watches, *",
                        rule.namespace
                    )
                })?;
                for ns in namespaces {
                    rules.push((ns, rule.prefix.clone(), rule.access));
                }
            }
            let q = entry.quota;
            if q.requests_per_second
                .is_some_and(|r| !(r.is_finite() && r > 0.0))
                || q.burst == Some(0)
            {
                return Err(format!(
                    "principal {name:?}: requests_per_second and burst must be positive"
                ));
            }
            principals.push(Arc::new(Principal {
                name,
                token_sha256,
                admin: entry.admin,
                metrics: entry.metrics,
                rules,
                quota: q,
            }));
        }
        let mut hashes = std::collections::BTreeSet::new();
        for p in &principals {
            if !hashes.insert(p.token_sha256) {
                return Err(format!(
                    "principal {:?} shares its token with another principal",
                    p.name
                ));
            }
        }
        Ok(Rules { principals })
    }

    /// The principal whose token this is. Every principal's hash is compared, in constant
    /// time, whatever matches.
    pub fn authenticate(&self, token: &str) -> Option<Arc<Principal>> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for p in &self.principals {
            if bool::from(p.token_sha256.ct_eq(&digest)) {
                found = Some(p.clone());
            }
        }
        found
    }

    /// How many principals there are.
    pub fn len(&self) -> usize {
        self.principals.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.principals.is_empty()
    }
}

/// A principal's flow control on this node, and its counters for `/metrics`.
#[derive(Debug, Default)]
pub struct Flow {
    bucket: Mutex<Option<(f64, Instant)>>,
    waiters: AtomicU64,
    watches: AtomicU64,
    /// Requests authenticated as this principal.
    pub requests: AtomicU64,
    /// Requests refused for its rate.
    pub rate_limited: AtomicU64,
    /// Requests refused for a quota (replicated or per node).
    pub quota_exceeded: AtomicU64,
    /// Requests refused for a permission.
    pub permission_denied: AtomicU64,
}

impl Flow {
    /// Takes one token of the bucket; `Err(wait)` when it is empty.
    fn take(&self, quota: &QuotaEntry) -> Result<(), Duration> {
        let Some(rate) = quota.requests_per_second else {
            return Ok(());
        };
        let burst = f64::from(quota.burst.unwrap_or(rate.ceil() as u32).max(1));
        let now = Instant::now();
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, last) = bucket.get_or_insert((burst, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * rate).min(burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                ((1.0 - *tokens) / rate).min(86_400.0),
            ))
        }
    }

    /// Counts one more of `what` (`waiters` or `watches`) under `limit`, until the guard
    /// drops.
    fn enter(self: &Arc<Self>, watch: bool, limit: Option<u64>) -> Result<FlowGuard, u64> {
        let counter = if watch { &self.watches } else { &self.waiters };
        let before = counter.fetch_add(1, Ordering::AcqRel);
        if let Some(max) = limit
            && before >= max
        {
            counter.fetch_sub(1, Ordering::AcqRel);
            return Err(max);
        }
        Ok(FlowGuard {
            flow: self.clone(),
            watch,
        })
    }
}

/// One held-open wait or watch counted against its principal; uncounted on drop.
pub(crate) struct FlowGuard {
    flow: Arc<Flow>,
    watch: bool,
}

impl Drop for FlowGuard {
    fn drop(&mut self) {
        let counter = if self.watch {
            &self.flow.watches
        } else {
            &self.flow.waiters
        };
        counter.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The rules in force (reloadable) and every principal's flow on this node.
pub struct Auth {
    path: PathBuf,
    rules: RwLock<Arc<Rules>>,
    flows: Mutex<BTreeMap<String, Arc<Flow>>>,
    /// Counts reloads: open streams and held-open acquires re-check their principal when
    /// it moves ([`Authz::refreshed`]).
    reloads: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("path", &self.path).finish()
    }
}

impl Auth {
    /// Loads the auth file at `path`.
    pub fn load(path: &Path) -> Result<Auth, AuthError> {
        Ok(Auth {
            path: path.to_owned(),
            rules: RwLock::new(Arc::new(read_rules(path)?)),
            flows: Mutex::default(),
            reloads: tokio::sync::watch::Sender::new(0),
        })
    }

    /// Rules given directly (tests, embedding).
    pub fn from_rules(rules: Rules) -> Auth {
        Auth {
            path: PathBuf::new(),
            rules: RwLock::new(Arc::new(rules)),
            flows: Mutex::default(),
            reloads: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Reads the file again; a broken file is refused and the rules in force are kept.
    /// Returns how many principals the new rules have.
    pub fn reload(&self) -> Result<usize, AuthError> {
        let rules = read_rules(&self.path)?;
        let count = rules.len();
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(rules);
        self.reloads.send_modify(|n| *n += 1);
        Ok(count)
    }

    /// Told of every reload (open streams and held-open acquires re-check themselves).
    pub(crate) fn reloads(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reloads.subscribe()
    }

    /// `principal` as the rules in force have it: the entry of the same name and token,
    /// if there still is one.
    fn current(&self, principal: &Principal) -> Option<Arc<Principal>> {
        self.rules()
            .principals
            .iter()
            .find(|p| p.name == principal.name && p.token_sha256 == principal.token_sha256)
            .cloned()
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<Rules> {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn flow(&self, principal: &str) -> Arc<Flow> {
        let mut flows = self.flows.lock().unwrap_or_else(|e| e.into_inner());
        flows.entry(principal.to_owned()).or_default().clone()
    }

    /// Every principal seen since start with its counters, by name.
    pub fn flows(&self) -> Vec<(String, Arc<Flow>)> {
        let flows = self.flows.lock().unwrap_or_else(|e| e.into_inner());
        flows.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

fn read_rules(path: &Path) -> Result<Rules, AuthError> {
    let text = std::fs::read_to_string(path).map_err(|source| AuthError::Read {
        path: path.to_owned(),
        source,
    })?;
    Rules::parse(&text).map_err(|message| AuthError::Invalid {
        path: path.to_owned(),
        message,
    })
}

/// What a request may do: everything (authentication off) or what its principal may.
#[derive(Clone, Debug)]
pub enum Authz {
    /// Authentication is off; admin calls are gated by the legacy admin token, if set.
    Open,
    /// An authenticated principal.
    Principal(Arc<Principal>, Arc<Flow>),
}

impl Authz {
    /// Refuses with 403 unless `access` on `name` in `ns` is allowed.
    pub fn allow(&self, ns: Namespace, name: &str, access: Access) -> Result<(), ApiError> {
        match self {
            Authz::Open => Ok(()),
            Authz::Principal(p, flow) => {
                if p.allows(ns, name, access) {
                    Ok(())
                } else {
                    flow.permission_denied.fetch_add(1, Ordering::Relaxed);
                    Err(ApiError::new(
                        ErrorDetail::PermissionDenied,
                        format!(
                            "principal {:?} may not {} {} {name:?}",
                            p.name,
                            match access {
                                Access::Read => "read",
                                Access::Write => "write",
                            },
                            ns.as_str()
                        ),
                    ))
                }
            }
        }
    }

    /// This request's authorization under the rules in force now: 401 if its principal (or
    /// its token) was removed by a reload, else the principal's current rules.
    pub(crate) fn refreshed(&self, auth: Option<&Auth>) -> Result<Authz, ApiError> {
        match (self, auth) {
            (Authz::Principal(p, flow), Some(auth)) => match auth.current(p) {
                Some(now) => Ok(Authz::Principal(now, flow.clone())),
                None => Err(ApiError::new(
                    ErrorDetail::Unauthenticated,
                    format!("principal {:?} or its token was removed", p.name),
                )),
            },
            _ => Ok(self.clone()),
        }
    }

    /// Whether `access` on `name` in `ns` is allowed (lists show only those).
    pub fn can(&self, ns: Namespace, name: &str, access: Access) -> bool {
        match self {
            Authz::Open => true,
            Authz::Principal(p, _) => p.allows(ns, name, access),
        }
    }

    /// Whether this request may see everything (admin, or authentication off).
    pub fn sees_all(&self) -> bool {
        match self {
            Authz::Open => true,
            Authz::Principal(p, _) => p.admin,
        }
    }

    /// Refuses with 403 unless the principal is an admin. With authentication off, the
    /// legacy `--admin-token` (if any) is checked by the caller.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        match self {
            Authz::Principal(p, flow) if !p.admin => {
                flow.permission_denied.fetch_add(1, Ordering::Relaxed);
                Err(ApiError::new(
                    ErrorDetail::PermissionDenied,
                    format!("principal {:?} is not an admin", p.name),
                ))
            }
            _ => Ok(()),
        }
    }

    /// The caller for the state machine (`None` with authentication off).
    pub fn caller(&self) -> Option<Caller> {
        match self {
            Authz::Open => None,
            Authz::Principal(p, _) => Some(p.caller()),
        }
    }

    /// Whether the lease's owner (as the state shows it) is this principal.
    pub fn owns(&self, owner: Option<&str>) -> bool {
        match self {
            Authz::Open => true,
            Authz::Principal(p, _) => p.admin || owner == Some(p.name.as_str()),
        }
    }

    /// Counts a held-open wait (`watch == false`) or a watch against the per-node quota.
    pub(crate) fn enter(&self, watch: bool) -> Result<Option<FlowGuard>, ApiError> {
        let Authz::Principal(p, flow) = self else {
            return Ok(None);
        };
        let limit = if watch {
            p.quota.watches
        } else {
            p.quota.waiters
        };
        // Counted in `quota_exceeded` by `authenticate`, like every 429 `quota_exceeded`.
        flow.enter(watch, limit).map(Some).map_err(|max| {
            let resource = if watch { "watches" } else { "waiters" };
            ApiError::new(
                ErrorDetail::QuotaExceeded {
                    resource: resource.into(),
                    limit: max,
                },
                format!(
                    "principal {:?} has {max} open {resource} on this node",
                    p.name
                ),
            )
        })
    }

    /// Whether this principal may see an event: its resource or key readable, lease events
    /// only for admins.
    pub fn sees_event(&self, event: &EventKind) -> bool {
        if self.sees_all() {
            return true;
        }
        if let Some(key) = event.key() {
            return self.can(Namespace::Keys, key, Access::Read);
        }
        if let Some(resource) = event.resource() {
            return self.can(Namespace::of(resource.kind), &resource.name, Access::Read);
        }
        // An election's leader change belongs to its election.
        if let EventKind::LeaderChanged { election, .. } = event {
            return self.can(Namespace::Elections, election, Access::Read);
        }
        false
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Authz {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        // Set by `authenticate` on every route; absent only in a router built without it.
        Ok(parts
            .extensions
            .get::<Authz>()
            .cloned()
            .unwrap_or(Authz::Open))
    }
}

/// Resolves at the next reload of the auth file (never, without authentication).
pub(crate) async fn reloaded(reloads: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    match reloads {
        Some(rx) => {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

/// Paths that never need a token: health, and the console's static page, script and style
/// (its data calls are `/v1` requests with the user's token).
fn open_path(path: &str) -> bool {
    matches!(path, "/" | "/healthz" | "/readyz" | "/ui") || path.starts_with("/ui/")
}

/// Middleware: authenticates the bearer token (401), applies the principal's rate (429),
/// hands the handlers an [`Authz`], counts refusals per principal, and writes the access
/// log line when it is on.
pub async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    // What the access log line needs, taken only when the log is on.
    let logged = state.config.access_log.then(|| {
        let route = request
            .extensions()
            .get::<MatchedPath>()
            .map_or_else(|| request.uri().path(), MatchedPath::as_str)
            .to_owned();
        let request_id = request
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned();
        (
            route,
            request.uri().path().to_owned(),
            request.method().clone(),
            request_id,
        )
    });
    let (authz, response) = match admit(&state, &request) {
        Ok(authz) => {
            request.extensions_mut().insert(authz.clone());
            (Some(authz), next.run(request).await)
        }
        Err(refusal) => (None, *refusal),
    };
    let principal = match &authz {
        Some(Authz::Principal(p, flow)) => {
            if response.status().as_u16() == 429
                && response.extensions().get::<ErrorCode>() == Some(&ErrorCode::QuotaExceeded)
            {
                flow.quota_exceeded.fetch_add(1, Ordering::Relaxed);
            }
            p.name.as_str()
        }
        _ => "-",
    };
    if let Some((route, path, method, request_id)) = logged {
        tracing::info!(
            target: "baton::access",
            principal,
            method = %method,
            route = %route,
            path = %path,
            status = response.status().as_u16(),
            latency_ms = started.elapsed().as_secs_f64() * 1e3,
            request_id = %request_id,
            "access"
        );
    }
    response
}

fn admit(state: &AppState, request: &Request) -> Result<Authz, Box<Response>> {
    let path = request.uri().path();
    let Some(auth) = &state.auth else {
        return Ok(Authz::Open);
    };
    if open_path(path) || (path == "/metrics" && state.config.metrics_open) {
        return Ok(Authz::Open);
    }
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let principal = token.and_then(|t| auth.rules().authenticate(t));
    let Some(principal) = principal else {
        let mut response = error_response(
            ErrorDetail::Unauthenticated,
            if token.is_some() {
                "the bearer token is not valid".into()
            } else {
                "this server needs `Authorization: Bearer <token>`".into()
            },
        );
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"baton\""),
        );
        return Err(Box::new(response));
    };
    let flow = auth.flow(&principal.name);
    flow.requests.fetch_add(1, Ordering::Relaxed);
    if path == "/metrics" && !(principal.admin || principal.metrics) {
        flow.permission_denied.fetch_add(1, Ordering::Relaxed);
        return Err(Box::new(error_response(
            ErrorDetail::PermissionDenied,
            format!("principal {:?} may not read /metrics", principal.name),
        )));
    }
    if let Err(wait) = flow.take(&principal.quota) {
        flow.rate_limited.fetch_add(1, Ordering::Relaxed);
        let wait_ms = wait.as_millis().max(1) as u64;
        let mut response = error_response(
            ErrorDetail::RateLimited {
                queue_len_max: None,
                retry_after_ms: Some(wait_ms),
            },
            format!(
                "principal {:?} is over its {} requests per second",
                principal.name,
                principal.quota.requests_per_second.unwrap_or_default()
            ),
        );
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(wait_ms.div_ceil(1_000).max(1)),
        );
        return Err(Box::new(response));
    }
    Ok(Authz::Principal(principal, flow))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
        [[principal]]
        name = "orders"
        token_sha256 = "HASH_A"
        rules = [
          { namespace = "locks", prefix = "orders/", access = "write" },
          { namespace = "*", prefix = "shared/", access = "read" },
        ]
        quota = { leases = 2, requests_per_second = 1, burst = 2 }

        [[principal]]
        name = "ops"
        token_sha256 = "HASH_B"
        admin = true
    "#;

    fn rules() -> Rules {
        let text = FILE
            .replace("HASH_A", &token_hash("token-a"))
            .replace("HASH_B", &token_hash("token-b"));
        Rules::parse(&text).unwrap()
    }

    #[test]
    fn tokens_find_their_principal_and_rules_give_what_they_say() {
        let rules = rules();
        assert!(rules.authenticate("nope").is_none());
        let a = rules.authenticate("token-a").unwrap();
        assert_eq!(a.name, "orders");
        assert!(a.allows(Namespace::Locks, "orders/x", Access::Write));
        assert!(a.allows(Namespace::Locks, "orders/x", Access::Read));
        assert!(!a.allows(Namespace::Locks, "billing/x", Access::Read));
        assert!(!a.allows(Namespace::Keys, "orders/x", Access::Read));
        assert!(a.allows(Namespace::Keys, "shared/k", Access::Read));
        assert!(!a.allows(Namespace::Keys, "shared/k", Access::Write));
        assert!(a.allows(Namespace::Watches, "shared/", Access::Read));
        let b = rules.authenticate("token-b").unwrap();
        assert!(b.allows(Namespace::Keys, "anything", Access::Write));
        assert!(!format!("{a:?}").contains(&token_hash("token-a")));
    }

    #[test]
    fn broken_files_are_refused_with_the_reason() {
        let bad = [
            (
                "[[principal]]\nname = \"a b\"\ntoken_sha256 = \"00\"",
                "a name is",
            ),
            (
                "[[principal]]\nname = \"a\"\ntoken_sha256 = \"00\"",
                "64 hex",
            ),
            (
                "[[principal]]\nname = \"a\"\ntoken_sha256 = \"x\"\nextra = 1",
                "unknown field",
            ),
            ("not toml", "expected"),
        ];
        for (text, why) in bad {
            let e = Rules::parse(text).unwrap_err();
            assert!(e.contains(why), "{text:?}: {e}");
        }
        let h = token_hash("t");
        let twice = format!(
            "[[principal]]\nname = \"a\"\ntoken_sha256 = \"{h}\"\n[[principal]]\nname = \"b\"\ntoken_sha256 = \"{h}\""
        );
        assert!(
            Rules::parse(&twice)
                .unwrap_err()
                .contains("shares its token")
        );
        let ns = format!(
            "[[principal]]\nname = \"a\"\ntoken_sha256 = \"{h}\"\nrules = [{{ namespace = \"lockz\", access = \"read\" }}]"
        );
        assert!(Rules::parse(&ns).unwrap_err().contains("lockz"));
    }

    #[test]
    fn an_elections_leader_change_reaches_whoever_may_read_the_election() {
        let rules = Rules::parse(&format!(
            "[[principal]]\nname = \"e\"\ntoken_sha256 = \"{}\"\nrules = [{{ namespace = \"elections\", prefix = \"jobs/\", access = \"read\" }}]",
            token_hash("t")
        ))
        .unwrap();
        let p = rules.authenticate("t").unwrap();
        let authz = Authz::Principal(p, Arc::default());
        let changed = |election: &str| EventKind::LeaderChanged {
            election: election.into(),
            leader: None,
        };
        assert!(authz.sees_event(&changed("jobs/nightly")));
        assert!(!authz.sees_event(&changed("other/nightly")));
    }

    #[test]
    fn the_token_bucket_refuses_past_the_burst_and_the_count_guards_release() {
        let rules = rules();
        let a = rules.authenticate("token-a").unwrap();
        let flow = Arc::new(Flow::default());
        assert!(flow.take(&a.quota).is_ok());
        assert!(flow.take(&a.quota).is_ok());
        let wait = flow.take(&a.quota).unwrap_err();
        assert!(wait <= Duration::from_secs(1));
        let g1 = flow.enter(true, Some(1)).unwrap();
        assert_eq!(flow.enter(true, Some(1)).err(), Some(1));
        drop(g1);
        assert!(flow.enter(true, Some(1)).is_ok());
    }
}
