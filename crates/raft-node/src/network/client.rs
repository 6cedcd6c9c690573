//! Outgoing peer calls. Raft RPCs go over each target's own link (`link.rs`, driven by
//! the replication task); each of the node's other calls (forwarded requests, membership
//! changes) over a link of its own, made for the call on a connection an earlier one left
//! idle (decision #135). Connection failures become `Unreachable`, so openraft backs off
//! instead of hammering a dead peer.

use super::link::{IdleLinks, PeerLink};
use super::{Target, paths};
use crate::codec;
use crate::tls::PeerTls;
use crate::types::{NodeAddr, NodeId, RpcError, TypeConfig};
use openraft::error::{InstallSnapshotError, NetworkError, RaftError, RemoteError, Unreachable};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::Duration;

/// Why a peer call failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The connection could not be made: nothing was sent.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The request may have been sent: the outcome is unknown.
    #[error("network: {0}")]
    Network(String),
    /// The peer refused the request (bad secret, bad body).
    #[error("refused with status {0}")]
    Refused(u16),
}

/// A cheap, cloneable client for peer calls.
#[derive(Clone)]
pub struct PeerClient {
    /// The links' TLS connector, swapped whole when the TLS files are re-read.
    connector: Arc<std::sync::RwLock<Option<tokio_rustls::TlsConnector>>>,
    /// The secret as the links send it, built once (marked sensitive: never logged);
    /// `Some(None)` for a secret that is not a valid header value.
    secret_header: Option<Option<hyper::header::HeaderValue>>,
    tls: Option<PeerTls>,
    /// Connections of dropped Raft links, for the next link to the same peer.
    idle: Arc<IdleLinks>,
}

impl PeerClient {
    /// A client presenting `secret` (if any) on every call, over mutual TLS with `tls`.
    pub fn new(
        secret: Option<crate::Secret>,
        tls: Option<PeerTls>,
    ) -> Result<PeerClient, PeerError> {
        let connector = Self::connector_for(tls.as_ref())?;
        // A secret that cannot be a header fails each call.
        let secret_header = secret.as_ref().map(|secret| {
            let mut value = hyper::header::HeaderValue::from_str(secret.expose()).ok()?;
            value.set_sensitive(true);
            Some(value)
        });
        Ok(PeerClient {
            secret_header,
            connector: Arc::new(std::sync::RwLock::new(connector)),
            idle: Arc::default(),
            tls,
        })
    }

    fn connector_for(
        tls: Option<&PeerTls>,
    ) -> Result<Option<tokio_rustls::TlsConnector>, PeerError> {
        tls.map(PeerTls::connector)
            .transpose()
            .map_err(|e| PeerError::Network(e.to_string()))
    }

    /// Re-reads this node's certificate, key and CA (new connections use them).
    pub fn reload_tls(&self) -> Result<(), PeerError> {
        if self.tls.is_some() {
            let connector = Self::connector_for(self.tls.as_ref())?;
            *self.connector.write().unwrap_or_else(|e| e.into_inner()) = connector;
        }
        Ok(())
    }

    /// The cluster secret as a header value, if the cluster has one.
    pub(super) fn secret_header(&self) -> Result<Option<&hyper::header::HeaderValue>, PeerError> {
        match &self.secret_header {
            None => Ok(None),
            Some(Some(value)) => Ok(Some(value)),
            Some(None) => Err(PeerError::Network(
                "the cluster secret is not a header".into(),
            )),
        }
    }

    /// A client that sends no secret (its links and idle connections are its own), for the
    /// membership probe of an address not yet known to be a member.
    pub(crate) fn without_secret(&self) -> PeerClient {
        PeerClient {
            secret_header: None,
            idle: Arc::default(),
            ..self.clone()
        }
    }

    /// Idle connections of dropped Raft links.
    pub(super) fn idle_links(&self) -> &IdleLinks {
        &self.idle
    }

    /// The links' TLS connector, if the cluster uses TLS.
    pub(super) fn connector(&self) -> Option<tokio_rustls::TlsConnector> {
        self.connector
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// POSTs a bincode body to `path` on the member `to` and decodes the bincode reply.
    pub async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        to: Target<'_>,
        path: &str,
        body: &Req,
        timeout: Duration,
    ) -> Result<Resp, PeerError> {
        let bytes = codec::encode(body).map_err(|e| PeerError::Network(e.to_string()))?;
        let mut link = PeerLink::new(self.clone(), to);
        let body = link.call(path, bytes, timeout).await?;
        codec::decode(&body).map_err(|e| PeerError::Network(format!("decode reply: {e}")))
    }
}

/// Makes one [`PeerConn`] per target; never connects by itself.
#[derive(Clone)]
pub struct NetworkFactory {
    client: PeerClient,
}

impl NetworkFactory {
    /// A factory sharing `client`'s connection pool.
    pub fn new(client: PeerClient) -> NetworkFactory {
        NetworkFactory { client }
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerConn;

    async fn new_client(&mut self, target: NodeId, node: &NodeAddr) -> PeerConn {
        PeerConn {
            link: PeerLink::new(
                self.client.clone(),
                Target {
                    id: target,
                    addr: &node.peer,
                },
            ),
            target,
        }
    }
}

/// Raft RPCs to one peer, over a link of its own.
pub struct PeerConn {
    link: PeerLink,
    target: NodeId,
}

impl PeerConn {
    async fn rpc<Req, Resp, E>(
        &mut self,
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RpcError<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let fail = |e: PeerError| match e {
            PeerError::Unreachable(_) => RpcError::Unreachable(Unreachable::new(&e)),
            _ => RpcError::Network(NetworkError::new(&e)),
        };
        let body = codec::encode(req).map_err(|e| fail(PeerError::Network(e.to_string())))?;
        let bytes = self
            .link
            .call(path, body, option.hard_ttl())
            .await
            .map_err(fail)?;
        let reply: Result<Resp, RaftError<NodeId, E>> = codec::decode(&bytes)
            .map_err(|e| fail(PeerError::Network(format!("decode reply: {e}"))))?;
        reply.map_err(|e| RpcError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for PeerConn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcError> {
        self.rpc(paths::APPEND, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RpcError<InstallSnapshotError>> {
        self.rpc(paths::SNAPSHOT, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcError> {
        self.rpc(paths::VOTE, &rpc, &option).await
    }

    fn backoff(&self) -> Backoff {
        // 100 ms doubling to 1.6 s, then 1.6 s: a dead peer costs little, a healed one
        // is found again quickly.
        Backoff::new((0u32..).map(|i| Duration::from_millis(100 << i.min(4))))
    }
}
