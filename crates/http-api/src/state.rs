//! `AppState`: what every handler shares, and the helpers that turn a command into an
//! answer (propose, check the refusal) or a query into a read at the asked consistency.

use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;
use baton_raft_node::Node;
use baton_state_machine::{Applied, Command, Proposal, Response, Revision, StateMachine};
use serde::Deserialize;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Settings of the API layer.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// Largest request body.
    pub body_bytes_max: usize,
    /// If set, force-release and membership changes need `Authorization: Bearer <token>`.
    pub admin_token: Option<String>,
    /// How long past its `wait_ms` a held-open acquire waits for the leader's timeout
    /// before proposing the timeout itself.
    pub wait_grace_ms: u64,
    /// Interval of `progress` events on watches.
    pub watch_progress_ms: u64,
}

impl Default for ApiConfig {
    fn default() -> ApiConfig {
        ApiConfig {
            body_bytes_max: 2 << 20,
            admin_token: None,
            wait_grace_ms: 2_000,
            watch_progress_ms: 5_000,
        }
    }
}

/// Shared by every handler. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// The local raft node.
    pub node: Node,
    /// API settings.
    pub config: Arc<ApiConfig>,
    /// Request and state metrics.
    pub metrics: Arc<Metrics>,
    /// Cancelled when the server begins to shut down: held-open requests answer at once.
    pub shutdown: CancellationToken,
    /// Background work spawned by handlers (cancels of abandoned waits).
    pub tracker: TaskTracker,
}

/// `?consistency=linearizable|serializable` on reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Consistency {
    /// Through the leader's read index (the default).
    #[default]
    Linearizable,
    /// This node's applied state, possibly stale.
    Serializable,
}

impl AppState {
    /// Proposes a command; a refusal becomes its `ApiError`.
    pub async fn apply(
        &self,
        idempotency_key: Option<String>,
        command: Command,
    ) -> ApiResult<Applied> {
        let applied = self
            .node
            .propose(Proposal {
                idempotency_key,
                command,
            })
            .await?;
        match applied.response {
            Response::Rejected(r) => Err(ApiError::from(r)),
            _ => Ok(applied),
        }
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
