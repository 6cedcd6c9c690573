//! An in-process cluster over real loopback sockets, for the integration tests. Ports are
//! picked free at run time; every node is shut down by the test that started it.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use baton_raft_node::{Node, NodeAddr, NodeConfig, NodeId};
use baton_state_machine::*;
use std::collections::BTreeMap;
use std::time::Duration;
use tempfile::TempDir;
use tokio::net::TcpListener;

/// Timing for tests: fast elections, short TTL floor.
pub fn tune(config: &mut NodeConfig) {
    config.heartbeat_ms = 50;
    config.election_timeout_min_ms = 250;
    config.election_timeout_max_ms = 500;
    config.limits.ttl_ms_min = 1_000;
    config.lease_checkpoint_interval_ms = 500;
    config.propose_timeout_ms = 5_000;
    config.sled_cache_bytes = 8 << 20;
}

/// A tweak for [`Cluster::start`]: heartbeats every `heartbeat_ms`, elections after
/// `election_ms` (min, max), and the lowest lease TTL floor those allow.
pub fn timing(heartbeat_ms: u64, election_ms: (u64, u64)) -> impl Fn(&mut NodeConfig) {
    move |c| {
        c.heartbeat_ms = heartbeat_ms;
        (c.election_timeout_min_ms, c.election_timeout_max_ms) = election_ms;
        c.limits.ttl_ms_min = 2 * election_ms.0;
    }
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,openraft=error".into()),
        )
        .with_test_writer()
        .try_init();
}

pub struct Cluster {
    pub dir: TempDir,
    pub configs: BTreeMap<NodeId, NodeConfig>,
    pub nodes: BTreeMap<NodeId, Node>,
}

impl Cluster {
    /// Starts `n` voters (ids 1..=n) with `tweak` applied to each config.
    pub async fn start(n: u64, tweak: impl Fn(&mut NodeConfig)) -> Cluster {
        init_tracing();
        let dir = TempDir::new().unwrap();
        let mut listeners = BTreeMap::new();
        let mut members = BTreeMap::new();
        for id in 1..=n {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let peer = listener.local_addr().unwrap().to_string();
            members.insert(id, addr(&peer));
            listeners.insert(id, listener);
        }
        let mut cluster = Cluster {
            dir,
            configs: BTreeMap::new(),
            nodes: BTreeMap::new(),
        };
        for (id, listener) in listeners {
            let mut config = NodeConfig::single(
                id,
                members[&id].clone(),
                cluster.dir.path().join(format!("n{id}")),
            );
            config.members = members.clone();
            tune(&mut config);
            tweak(&mut config);
            cluster.configs.insert(id, config.clone());
            let node = Node::start_on(config, listener).await.unwrap();
            cluster.nodes.insert(id, node);
        }
        cluster
    }

    /// Starts a new node that waits to be added (it never initialises a cluster).
    pub async fn spawn_joiner(&mut self, id: NodeId, tweak: impl Fn(&mut NodeConfig)) -> NodeAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let node_addr = addr(&listener.local_addr().unwrap().to_string());
        let mut config = NodeConfig::single(
            id,
            node_addr.clone(),
            self.dir.path().join(format!("n{id}")),
        );
        config.join_existing = true;
        tune(&mut config);
        tweak(&mut config);
        self.configs.insert(id, config.clone());
        self.nodes
            .insert(id, Node::start_on(config, listener).await.unwrap());
        node_addr
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[&id]
    }

    /// Waits until every running node names the same leader; returns it.
    pub async fn leader(&self) -> NodeId {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let leaders: Vec<Option<NodeId>> = self
                .nodes
                .values()
                .map(|n| n.leader().map(|(id, _)| id))
                .collect();
            if let Some(Some(first)) = leaders.first()
                && leaders.iter().all(|l| *l == Some(*first))
                && self.nodes.get(first).is_some_and(|n| n.is_leader())
            {
                return *first;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no agreed leader: {leaders:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A running node that is not the leader.
    pub async fn follower(&self) -> NodeId {
        let leader = self.leader().await;
        *self.nodes.keys().find(|id| **id != leader).unwrap()
    }

    /// Stops a node (graceful: its sockets close, its data stays).
    pub async fn stop(&mut self, id: NodeId) {
        if let Some(node) = self.nodes.remove(&id) {
            node.shutdown().await;
        }
    }

    /// Starts a stopped node again on the same address and data.
    pub async fn restart(&mut self, id: NodeId) {
        let config = self.configs[&id].clone();
        let mut tries = 0;
        let listener = loop {
            match TcpListener::bind(&config.addr.peer).await {
                Ok(l) => break l,
                Err(e) if tries < 50 => {
                    tries += 1;
                    tracing::warn!(error = %e, "rebinding");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("cannot rebind {}: {e}", config.addr.peer),
            }
        };
        self.nodes
            .insert(id, Node::start_on(config, listener).await.unwrap());
    }

    /// Waits until every running node has applied at least `index`.
    pub async fn wait_applied(&self, index: u64) {
        for node in self.nodes.values() {
            node.wait_applied(index, Duration::from_secs(30))
                .await
                .unwrap();
        }
    }

    pub async fn shutdown(mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            self.stop(id).await;
        }
    }
}

/// A node's addresses: its peer address, and an API address of its own (nothing serves
/// the API in these tests, but membership changes check that it is a real, unused one).
pub fn addr(peer: &str) -> NodeAddr {
    NodeAddr {
        peer: peer.to_string(),
        api: format!("127.0.0.1:{}", free_port()),
    }
}

pub fn put(key: &str, value: &str) -> Proposal {
    Proposal::from(Command::Put(Put {
        key: key.into(),
        value: value.into(),
        lease: None,
        prev_revision: None,
    }))
}

pub fn grant(ttl_ms: u64) -> Proposal {
    Proposal::from(Command::LeaseGrant(LeaseGrant { ttl_ms }))
}

pub async fn grant_lease(node: &Node, ttl_ms: u64) -> LeaseId {
    match node.propose(grant(ttl_ms)).await.unwrap().response {
        Response::LeaseGranted { lease, .. } => lease,
        other => panic!("grant refused: {other:?}"),
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
