//! Authorization: what a request's principal may do ([`Authz`]), asked by the handlers.

use super::*;
use crate::error::ApiError;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use baton_state_machine::{Caller, EventKind};
use baton_wire::ErrorDetail;
use std::sync::Arc;
use std::sync::atomic::Ordering;

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
