//! `AppState`: what every handler shares, and the helpers that turn a command into an
//! answer (propose, check the refusal), a query into a read at the asked consistency, and
//! a name from a path into a checked one (against the node's configured limits: the one
//! source of limits for the edge, the node and, through `/v1/cluster`, the clients).

use crate::auth::{Access, Auth, Authz, Namespace};
use crate::claim_guard::Detached;
use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;
use axum::http::HeaderMap;
use baton_raft_node::Node;
use baton_state_machine::{Applied, Command, Limits, Response, Revision, StateMachine};
use baton_wire::Consistency;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Settings of the API layer.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// Largest request body.
    pub body_bytes_max: usize,
    /// Without `auth`: if set, force-release and membership changes need
    /// `Authorization: Bearer <token>`.
    pub admin_token: Option<baton_raft_node::Secret>,
    /// One `baton::access` log line per request.
    pub access_log: bool,
    /// `/metrics` answers without a token even when authentication is on.
    pub metrics_open: bool,
    /// The API is served over TLS (shown in `/v1/cluster`).
    pub tls: bool,
    /// Shown in `/v1/cluster` (e.g. `--insecure-allow-open`).
    pub warnings: Vec<String>,
    /// Host names (lowercase, no port) this node is reached by, besides IP addresses and
    /// `localhost`: a request naming another host is refused (`origin.rs`).
    pub hosts: Vec<String>,
    /// How long past its `wait_ms` a held-open acquire waits for the leader's timeout
    /// before proposing the timeout itself.
    pub wait_grace_ms: u64,
    /// Interval of `progress` events on watches.
    pub watch_progress_ms: u64,
    /// How long a held-open acquire with an `Idempotency-Key` whose client went away keeps
    /// its place (or its grant) for a retry with the same key, before it is cancelled.
    pub reattach_grace_ms: u64,
}

impl Default for ApiConfig {
    fn default() -> ApiConfig {
        ApiConfig {
            body_bytes_max: 2 << 20,
            admin_token: None,
            access_log: false,
            metrics_open: false,
            tls: false,
            warnings: Vec::new(),
            hosts: Vec::new(),
            wait_grace_ms: 2_000,
            watch_progress_ms: 5_000,
            reattach_grace_ms: 5_000,
        }
    }
}

/// Shared by every handler: one pointer, so the clone axum makes for each request is one
/// reference count (not one per field, and no lock on the shutdown token's tree).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    /// Wraps the shared parts.
    pub(crate) fn from_shared(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }

    /// Turns authentication on with `auth` (`None`: off). Call before the router is built.
    pub fn set_auth(&mut self, auth: Option<Arc<Auth>>) {
        Arc::make_mut(&mut self.0).auth = auth;
    }
}

/// What every handler shares, behind [`AppState`].
#[derive(Clone)]
pub struct Shared {
    /// The local raft node.
    pub node: Node,
    /// API settings.
    pub config: Arc<ApiConfig>,
    /// Request and state metrics.
    pub metrics: Arc<Metrics>,
    /// Cancelled when the server begins to shut down: held-open requests answer at once.
    pub shutdown: CancellationToken,
    /// Background work spawned by handlers (proposals of held-open acquires, cancels of
    /// abandoned waits).
    pub tracker: TaskTracker,
    /// Held-open acquires with an `Idempotency-Key`, for retries to take up.
    pub(crate) detached: Arc<Detached>,
    /// Principals and their rules (`None`: authentication off).
    pub auth: Option<Arc<Auth>>,
    /// What this node saw happen and when: ages and per-resource statistics.
    pub activity: Arc<crate::activity::Activity>,
}

impl AppState {
    /// Proposes a command through Raft for the request's principal and waits until it is
    /// applied here; a refusal becomes its `ApiError`.
    pub async fn propose(
        &self,
        authz: &Authz,
        idempotency_key: Option<String>,
        command: Command,
    ) -> ApiResult<Applied> {
        let applied = self
            .node
            .propose(crate::convert::proposal(
                command,
                idempotency_key,
                authz.caller(),
            ))
            .await?;
        match applied.response {
            Response::Rejected(r) => Err(ApiError::from(r)),
            _ => Ok(applied),
        }
    }

    /// The limits on client input this node enforces (its configuration).
    pub fn limits(&self) -> &Limits {
        &self.node.config().limits
    }

    /// Checks a resource or key name from a path: the limits, and no `.` or `..` segment
    /// (names are not file paths, but a client sending them has made a mistake).
    pub fn name(&self, field: &'static str, raw: &str) -> ApiResult<String> {
        self.limits().check_name(field, raw)?;
        if raw
            .split('/')
            .any(|segment| segment == "." || segment == "..")
        {
            return Err(ApiError::bad_request(format!(
                "{field}: \".\" and \"..\" segments are not allowed"
            )));
        }
        Ok(raw.to_owned())
    }

    /// [`AppState::name`] of the resource in `ns`, and the principal's `access` to it.
    pub fn checked_name(
        &self,
        authz: &Authz,
        ns: Namespace,
        raw: &str,
        access: Access,
    ) -> ApiResult<String> {
        let name = self.name(ns.field(), raw)?;
        authz.allow(ns, &name, access)?;
        Ok(name)
    }

    /// Admin calls: an admin principal with authentication on; the legacy admin token (if
    /// set) without it.
    pub fn require_admin(&self, authz: &Authz, headers: &HeaderMap) -> ApiResult<()> {
        match authz {
            Authz::Principal(..) => authz.require_admin(),
            Authz::Open => crate::extract::require_admin(self, headers),
        }
    }

    /// Fills in how long each holder has held, by this node's apply clock.
    pub(crate) fn with_ages(&self, holders: &mut [baton_wire::Holder]) {
        for h in holders {
            h.held_for = self.activity.age(h.fence);
        }
    }

    /// Checks a prefix (may be empty).
    pub fn prefix(&self, field: &'static str, raw: &str) -> ApiResult<String> {
        self.limits().check_prefix(field, raw)?;
        Ok(raw.to_owned())
    }

    /// Runs `f` on the state at the asked consistency, with the revision it saw.
    pub async fn read<R>(
        &self,
        consistency: Consistency,
        f: impl FnOnce(&StateMachine) -> R,
    ) -> ApiResult<(R, Revision)> {
        let with_revision = |sm: &StateMachine| (f(sm), sm.revision());
        match consistency {
            Consistency::Linearizable => Ok(self.node.read(with_revision).await?),
            Consistency::Serializable => Ok(self.node.read_local(with_revision)),
        }
    }
}
