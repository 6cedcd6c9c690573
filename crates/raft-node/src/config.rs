//! `NodeConfig`, validated at startup, and `cluster.toml`.

use crate::error::NodeError;
use crate::secret::Secret;
use crate::tls::{PeerTls, TlsFiles};
use crate::types::{NodeAddr, NodeId};
use baton_state_machine::{Bounds, Limits};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Everything a node needs to start. Build it with [`NodeConfig::single`] or from a
/// [`ClusterFile`], adjust fields, and [`validate`](NodeConfig::validate) it.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's id.
    pub id: NodeId,
    /// This node's addresses as the others reach it (advertised to peers and clients).
    pub addr: NodeAddr,
    /// Where to listen, if not on the advertised addresses (e.g. `0.0.0.0:7071`).
    pub listen: Option<NodeAddr>,
    /// Where sled keeps the log, vote and snapshots.
    pub data_dir: PathBuf,
    /// The initial members (used only by the lowest id to initialise a fresh cluster).
    pub members: BTreeMap<NodeId, NodeAddr>,
    /// Never initialise: this node waits to be added to an existing cluster.
    pub join_existing: bool,
    /// Leader heartbeat; also openraft's AppendEntries timeout.
    pub heartbeat_ms: u64,
    /// Election timeout range (a random value in it is chosen per process).
    pub election_timeout_min_ms: u64,
    /// Upper end of the election timeout range.
    pub election_timeout_max_ms: u64,
    /// Timeout of one snapshot chunk, install included.
    pub install_snapshot_timeout_ms: u64,
    /// Build a snapshot after at least this many entries since the last one (and, for a
    /// big state, at least half as many commands as it has items: `worker::snapshot`).
    pub snapshot_logs_since_last: u64,
    /// Entries kept behind a snapshot before they are purged.
    pub logs_kept_behind_snapshot: u64,
    /// Entries per AppendEntries.
    pub append_entries_max: u64,
    /// A leader sends new entries to its spare followers (those beyond what a commit
    /// needs, while the others keep up) at most this often instead of once per write
    /// (decision #136); 0 sends to every follower at once.
    pub spare_batch_ms: u64,
    /// Bytes per AppendEntries (at least one entry is always sent).
    pub append_bytes_max: usize,
    /// Shared secret every peer request must carry (`None`: none required).
    pub cluster_secret: Option<Secret>,
    /// Mutual TLS between members (`None`: plain HTTP on the peer port).
    pub peer_tls: Option<PeerTls>,
    /// The API runs with authentication (`--auth`): every proposal that arrives on the
    /// peer port must then name its principal (a `caller`), and the peer port must be
    /// protected by mutual TLS or a cluster secret.
    pub callers_required: bool,
    /// The peer port's connection bounds (`None`: `ConnLimits::peer_default` for the
    /// process's descriptor limit).
    pub peer_conn_limits: Option<crate::listener::ConnLimits>,
    /// TLS of the client API (served by the API layer; kept here with the other
    /// per-node settings of the cluster file).
    pub api_tls: Option<TlsFiles>,
    /// How long a proposal may take before its outcome is reported as unknown.
    pub propose_timeout_ms: u64,
    /// How long a new member may take to catch up as a learner before it is removed again
    /// instead of promoted to voter.
    pub member_catchup_timeout_ms: u64,
    /// A member counts as caught up when it is at most this many entries behind the
    /// leader's log (new members before they vote; voters in the quorum check).
    pub member_lag_max: u64,
    /// Most proposals in one Raft entry.
    pub batch_proposals_max: usize,
    /// Most bytes of proposals in one Raft entry.
    pub batch_bytes_max: usize,
    /// Raft entries proposed and not yet applied, at most. openraft 0.9 appends and
    /// flushes one entry at a time, so one in flight (the default) makes the fullest
    /// batches: everything queued during a commit goes into the next entry.
    pub batches_in_flight_max: usize,
    /// An entry made only of acquires that will join a lock's or semaphore's queue waits
    /// up to this long for another kind of proposal (a release) to carry with it
    /// (decision #138); 0 sends it at once.
    pub queue_join_hold_us: u64,
    /// How often the leader checkpoints remaining lease TTLs through the log.
    pub lease_checkpoint_interval_ms: u64,
    /// Limits on client input (spec §3); `ttl_ms_min` must cover two election timeouts.
    pub limits: Limits,
    /// sled's page cache. The log's recent entries are what it serves; the latest
    /// snapshot, stored in sled too, would fill any size (decision #119).
    pub sled_cache_bytes: u64,
    /// Sizes of the state machine's own tables (event window, idempotency, queues) for a
    /// fresh state; replicated, so every member must use the same. A restored snapshot
    /// keeps the bounds it was made with.
    pub bounds: Bounds,
}

/// The shortest cluster secret accepted, in bytes.
pub const CLUSTER_SECRET_BYTES_MIN: usize = 16;

/// The longest `queue_join_hold_us` accepted: a queued acquire's wait is counted in
/// milliseconds, so holding its entry longer than this would show.
pub const QUEUE_JOIN_HOLD_US_MAX: u64 = 100_000;

impl NodeConfig {
    /// A single-node cluster with spec §4's defaults for addresses and timing.
    pub fn single(id: NodeId, addr: NodeAddr, data_dir: impl Into<PathBuf>) -> NodeConfig {
        NodeConfig {
            id,
            members: BTreeMap::from([(id, addr.clone())]),
            join_existing: false,
            addr,
            listen: None,
            data_dir: data_dir.into(),
            heartbeat_ms: 100,
            election_timeout_min_ms: 500,
            election_timeout_max_ms: 1_000,
            install_snapshot_timeout_ms: 10_000,
            snapshot_logs_since_last: 10_000,
            logs_kept_behind_snapshot: 1_000,
            append_entries_max: 512,
            spare_batch_ms: 10,
            append_bytes_max: 4 << 20,
            cluster_secret: None,
            peer_tls: None,
            callers_required: false,
            peer_conn_limits: None,
            api_tls: None,
            propose_timeout_ms: 5_000,
            member_catchup_timeout_ms: 30_000,
            member_lag_max: 1_000,
            batch_proposals_max: 512,
            batch_bytes_max: 1 << 20,
            batches_in_flight_max: 1,
            queue_join_hold_us: 1_000,
            lease_checkpoint_interval_ms: 5_000,
            limits: Limits::default(),
            sled_cache_bytes: 16 << 20,
            bounds: Bounds::default(),
        }
    }

    /// The spec §4 default: node 1, API on 127.0.0.1:7070, peers on 127.0.0.1:7071,
    /// data in `./baton-data`.
    pub fn default_single() -> NodeConfig {
        let addr = NodeAddr {
            peer: "127.0.0.1:7071".into(),
            api: "127.0.0.1:7070".into(),
        };
        NodeConfig::single(1, addr, "baton-data")
    }

    /// Where this node listens: `listen` if set, else the advertised addresses.
    pub fn listen_addr(&self) -> &NodeAddr {
        self.listen.as_ref().unwrap_or(&self.addr)
    }

    /// Rejects settings that cannot work together.
    pub fn validate(&self) -> Result<(), NodeError> {
        let bad = |m: String| Err(NodeError::Config(m));
        for (what, addr) in [("api", &self.addr.api), ("peer", &self.addr.peer)] {
            if unspecified_host(addr) {
                return bad(format!(
                    "the advertised {what} address {addr} is not an address others can reach; \
                     listen there and advertise a reachable one (--advertise-{what}, or \
                     `listen_{what}` beside `{what}` in the cluster file)"
                ));
            }
        }
        if !self.members.contains_key(&self.id) {
            return bad(format!("node {} is not among the members", self.id));
        }
        if let Some(secret) = &self.cluster_secret
            && secret.expose().len() < CLUSTER_SECRET_BYTES_MIN
        {
            return bad(format!(
                "the cluster secret is {} bytes long; it must be at least {CLUSTER_SECRET_BYTES_MIN} \
                 (`baton auth token` prints a good one)",
                secret.expose().len()
            ));
        }
        if self.callers_required && self.cluster_secret.is_none() && self.peer_tls.is_none() {
            return bad(
                "with --auth the peer port needs mutual TLS (--peer-tls-cert, --peer-tls-key, \
                 --peer-ca) or a cluster secret (--secret-file, BATON_CLUSTER_SECRET or `secret` \
                 in the cluster file), on loopback too: otherwise any local process could \
                 propose through it without a token"
                    .into(),
            );
        }
        if self.heartbeat_ms == 0 || self.election_timeout_min_ms <= self.heartbeat_ms {
            return bad("election_timeout_min_ms must exceed heartbeat_ms > 0".into());
        }
        if self.election_timeout_max_ms <= self.election_timeout_min_ms {
            return bad("election_timeout_max_ms must exceed election_timeout_min_ms".into());
        }
        // spec §3: TTLs are at least twice the election timeout. The floor is checked
        // against the lower end of the range so that the spec's 1 000 ms minimum holds with the
        // default 500–1000 ms elections; expiry is never early whatever the TTL, a short
        // TTL only risks expiring during a slow failover.
        if self.limits.ttl_ms_min < 2 * self.election_timeout_min_ms {
            return bad(format!(
                "ttl_ms_min {} is below twice the election timeout ({} ms)",
                self.limits.ttl_ms_min, self.election_timeout_min_ms
            ));
        }
        if self.limits.ttl_ms_max > baton_state_machine::TTL_MS_MAX {
            return bad(format!(
                "ttl_ms_max {} is above {} ms (about 49.7 days), the longest TTL a lease can have",
                self.limits.ttl_ms_max,
                baton_state_machine::TTL_MS_MAX
            ));
        }
        if self.limits.hold_ms_max < 1_000 {
            return bad(format!(
                "hold_ms_max {} is below 1000 ms",
                self.limits.hold_ms_max
            ));
        }
        let positive = [
            ("batch_proposals_max", self.batch_proposals_max),
            ("batch_bytes_max", self.batch_bytes_max),
            ("batches_in_flight_max", self.batches_in_flight_max),
            ("append_bytes_max", self.append_bytes_max),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return bad(format!("{name} must be positive"));
        }
        if self.queue_join_hold_us > QUEUE_JOIN_HOLD_US_MAX {
            return bad(format!(
                "queue_join_hold_us {} is above {QUEUE_JOIN_HOLD_US_MAX}",
                self.queue_join_hold_us
            ));
        }
        if self.append_entries_max == 0 || self.snapshot_logs_since_last == 0 {
            return bad("append_entries_max and snapshot_logs_since_last must be positive".into());
        }
        if self.propose_timeout_ms == 0
            || self.lease_checkpoint_interval_ms == 0
            || self.member_catchup_timeout_ms == 0
        {
            return bad("timeouts and intervals must be positive".into());
        }
        Ok(())
    }

    pub(crate) fn raft_config(&self) -> Result<openraft::Config, NodeError> {
        let config = openraft::Config {
            cluster_name: "baton".into(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_timeout_min_ms,
            election_timeout_max: self.election_timeout_max_ms,
            install_snapshot_timeout: self.install_snapshot_timeout_ms,
            max_payload_entries: self.append_entries_max,
            // Snapshots are asked for by `worker::snapshot`, paced by the state's size.
            snapshot_policy: openraft::SnapshotPolicy::Never,
            max_in_snapshot_log_to_keep: self.logs_kept_behind_snapshot,
            ..openraft::Config::default()
        };
        config
            .validate()
            .map_err(|e| NodeError::Config(e.to_string()))
    }
}

/// `cluster.toml`: the members of a cluster and optional shared settings.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// Shared secret for peer traffic.
    #[serde(default)]
    pub secret: Option<Secret>,
    /// Limits on client input, enforced by every node and reported in `/v1/cluster`
    /// (every member should carry the same table).
    #[serde(default)]
    pub limits: Limits,
    /// Raft timing and log settings, the same for every member (defaults otherwise).
    #[serde(default)]
    pub raft: RaftTuning,
    /// The members.
    pub node: Vec<ClusterNode>,
}

/// The `[raft]` table of `cluster.toml`: each setting optional, the default otherwise.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RaftTuning {
    /// Leader heartbeat interval.
    pub heartbeat_ms: Option<u64>,
    /// Lower end of the randomised election timeout.
    pub election_timeout_min_ms: Option<u64>,
    /// Upper end of the randomised election timeout.
    pub election_timeout_max_ms: Option<u64>,
    /// Build a snapshot after at least this many entries since the last one.
    pub snapshot_logs_since_last: Option<u64>,
    /// Entries kept behind a snapshot before they are purged.
    pub logs_kept_behind_snapshot: Option<u64>,
    /// How long a new member may take to catch up before it is removed again.
    pub member_catchup_timeout_ms: Option<u64>,
    /// How far behind the leader's log a member may be and still count as caught up.
    pub member_lag_max: Option<u64>,
    /// How often at most a leader sends new entries to a spare follower (0: at once).
    pub spare_batch_ms: Option<u64>,
    /// How long an entry of acquires that will only queue waits for a release (0: none).
    pub queue_join_hold_us: Option<u64>,
}

impl RaftTuning {
    /// Applies the settings that are given.
    fn apply(&self, config: &mut NodeConfig) {
        let set = |target: &mut u64, value: Option<u64>| {
            if let Some(v) = value {
                *target = v;
            }
        };
        set(&mut config.heartbeat_ms, self.heartbeat_ms);
        set(
            &mut config.election_timeout_min_ms,
            self.election_timeout_min_ms,
        );
        set(
            &mut config.election_timeout_max_ms,
            self.election_timeout_max_ms,
        );
        set(
            &mut config.snapshot_logs_since_last,
            self.snapshot_logs_since_last,
        );
        set(
            &mut config.logs_kept_behind_snapshot,
            self.logs_kept_behind_snapshot,
        );
        set(
            &mut config.member_catchup_timeout_ms,
            self.member_catchup_timeout_ms,
        );
        set(&mut config.member_lag_max, self.member_lag_max);
        set(&mut config.spare_batch_ms, self.spare_batch_ms);
        set(&mut config.queue_join_hold_us, self.queue_join_hold_us);
    }
}

/// One member in `cluster.toml`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterNode {
    /// Its id (unique, positive).
    pub id: NodeId,
    /// Client API address.
    pub api: String,
    /// Peer address.
    pub peer: String,
    /// Data directory (relative paths are relative to the file's directory).
    pub data_dir: Option<PathBuf>,
    /// Where this node listens for clients, if not on `api` (e.g. `0.0.0.0:7070`).
    pub listen_api: Option<String>,
    /// Where this node listens for peers, if not on `peer`.
    pub listen_peer: Option<String>,
    /// Its client API certificate chain (PEM): the API is served over TLS.
    pub tls_cert: Option<PathBuf>,
    /// The key of `tls_cert` (PEM).
    pub tls_key: Option<PathBuf>,
    /// Its peer certificate chain (PEM): mutual TLS between members.
    pub peer_tls_cert: Option<PathBuf>,
    /// The key of `peer_tls_cert` (PEM).
    pub peer_tls_key: Option<PathBuf>,
    /// The CA bundle (PEM) that signs every member's peer certificate.
    pub peer_ca: Option<PathBuf>,
}

impl ClusterFile {
    /// Reads and checks a cluster file.
    pub fn load(path: &Path) -> Result<ClusterFile, NodeError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| NodeError::Config(format!("{}: {e}", path.display())))?;
        let file: ClusterFile = toml::from_str(&text)
            .map_err(|e| NodeError::Config(format!("{}: {e}", path.display())))?;
        let mut ids: Vec<NodeId> = file.node.iter().map(|n| n.id).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != file.node.len() || ids.is_empty() || ids[0] == 0 {
            return Err(NodeError::Config(
                "node ids must be unique and positive".into(),
            ));
        }
        Ok(file)
    }

    /// The configuration of member `id`; relative data dirs resolve against `base`.
    pub fn node_config(&self, id: NodeId, base: &Path) -> Result<NodeConfig, NodeError> {
        let me = self
            .node
            .iter()
            .find(|n| n.id == id)
            .ok_or_else(|| NodeError::Config(format!("no node {id} in the cluster file")))?;
        let data_dir = me
            .data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("baton-data/node-{id}")));
        let data_dir = if data_dir.is_relative() {
            base.join(data_dir)
        } else {
            data_dir
        };
        let addr_of = |n: &ClusterNode| NodeAddr {
            peer: n.peer.clone(),
            api: n.api.clone(),
        };
        let mut config = NodeConfig::single(id, addr_of(me), data_dir);
        if me.listen_api.is_some() || me.listen_peer.is_some() {
            config.listen = Some(NodeAddr {
                api: me.listen_api.clone().unwrap_or_else(|| me.api.clone()),
                peer: me.listen_peer.clone().unwrap_or_else(|| me.peer.clone()),
            });
        }
        config.members = self.node.iter().map(|n| (n.id, addr_of(n))).collect();
        config.cluster_secret = self.secret.clone();
        let path = |p: &Option<PathBuf>| {
            p.as_ref().map(|p| {
                if p.is_relative() {
                    base.join(p)
                } else {
                    p.clone()
                }
            })
        };
        config.api_tls = match (path(&me.tls_cert), path(&me.tls_key)) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert,
                key,
                client_ca: None,
            }),
            (None, None) => None,
            _ => {
                return Err(NodeError::Config(format!(
                    "node {id}: tls_cert and tls_key go together"
                )));
            }
        };
        config.peer_tls = match (
            path(&me.peer_tls_cert),
            path(&me.peer_tls_key),
            path(&me.peer_ca),
        ) {
            (Some(cert), Some(key), Some(ca)) => Some(PeerTls { cert, key, ca }),
            (None, None, None) => None,
            _ => {
                return Err(NodeError::Config(format!(
                    "node {id}: peer_tls_cert, peer_tls_key and peer_ca go together"
                )));
            }
        };
        config.limits = self.limits.clone();
        self.raft.apply(&mut config);
        Ok(config)
    }
}

/// Whether `host:port` names the unspecified address (0.0.0.0 or ::), which can be listened
/// on but not reached.
fn unspecified_host(addr: &str) -> bool {
    addr.parse::<std::net::SocketAddr>()
        .is_ok_and(|a| a.ip().is_unspecified())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_address_is_listened_on_but_never_advertised() {
        let mut config = NodeConfig::default_single();
        config.addr.api = "0.0.0.0:7070".into();
        let e = config.validate().unwrap_err().to_string();
        assert!(e.contains("--advertise-api"), "{e}");
        config.listen = Some(config.addr.clone());
        config.addr.api = "10.0.0.5:7070".into();
        config.members.insert(config.id, config.addr.clone());
        config.validate().unwrap();
        assert_eq!(config.listen_addr().api, "0.0.0.0:7070");
    }

    #[test]
    fn a_short_secret_is_refused_and_auth_needs_a_protected_peer_port() {
        let mut config = NodeConfig::default_single();
        config.cluster_secret = Some(Secret::new(""));
        assert!(
            config
                .validate()
                .unwrap_err()
                .to_string()
                .contains("at least 16")
        );
        config.cluster_secret = Some(Secret::new("fifteen-bytes!!"));
        assert!(config.validate().is_err());
        config.cluster_secret = Some(Secret::new("sixteen-bytes!!!"));
        config.validate().unwrap();
        // With auth on, a peer port without a secret or mutual TLS is refused, loopback
        // or not.
        config.callers_required = true;
        config.validate().unwrap();
        config.cluster_secret = None;
        let e = config.validate().unwrap_err().to_string();
        assert!(e.contains("with --auth the peer port needs"), "{e}");
    }

    #[test]
    fn default_single_node_config_is_valid() {
        NodeConfig::default_single().validate().unwrap();
    }

    #[test]
    fn ttl_floor_below_two_election_timeouts_is_refused() {
        let mut config = NodeConfig::default_single();
        config.limits.ttl_ms_min = 999;
        assert!(config.validate().is_err());
        config.limits.ttl_ms_min = 1_000;
        assert!(config.validate().is_ok());
    }

    #[test]
    fn a_ttl_ceiling_beyond_what_a_lease_can_hold_is_refused() {
        let mut config = NodeConfig::default_single();
        config.limits.ttl_ms_max = baton_state_machine::TTL_MS_MAX + 1;
        let refused = config.validate().unwrap_err().to_string();
        assert!(refused.contains("ttl_ms_max"), "{refused}");
        config.limits.ttl_ms_max = baton_state_machine::TTL_MS_MAX;
        assert!(config.validate().is_ok());
    }

    #[test]
    fn election_must_be_slower_than_heartbeat() {
        let mut config = NodeConfig::default_single();
        config.election_timeout_min_ms = 100;
        assert!(config.validate().is_err());
    }

    #[test]
    fn the_raft_table_sets_what_it_names_and_nothing_else() {
        let file: ClusterFile = toml::from_str(
            "[raft]\nsnapshot_logs_since_last = 200\nlogs_kept_behind_snapshot = 50\nspare_batch_ms = 0\nqueue_join_hold_us = 250\n\n[[node]]\nid = 1\napi = \"127.0.0.1:1\"\npeer = \"127.0.0.1:2\"\n",
        )
        .unwrap();
        let mut config = file.node_config(1, Path::new("/srv")).unwrap();
        assert_eq!(config.queue_join_hold_us, 250);
        assert_eq!(NodeConfig::default_single().queue_join_hold_us, 1_000);
        assert_eq!(config.snapshot_logs_since_last, 200);
        assert_eq!(config.logs_kept_behind_snapshot, 50);
        assert_eq!(config.spare_batch_ms, 0);
        assert_eq!(NodeConfig::default_single().spare_batch_ms, 10);
        assert_eq!(
            config.heartbeat_ms,
            NodeConfig::default_single().heartbeat_ms
        );
        config.validate().unwrap();
        config.queue_join_hold_us = QUEUE_JOIN_HOLD_US_MAX + 1;
        let refused = config.validate().unwrap_err().to_string();
        assert!(refused.contains("queue_join_hold_us"), "{refused}");
        assert!(
            toml::from_str::<ClusterFile>(
                "[raft]\nheartbeat = 1\n[[node]]\nid = 1\napi = \"a\"\npeer = \"b\"\n"
            )
            .is_err()
        );
    }

    #[test]
    fn repo_cluster_file_describes_three_local_nodes() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../cluster.toml");
        let file = ClusterFile::load(&path).unwrap();
        let config = file.node_config(2, Path::new("/srv")).unwrap();
        assert_eq!(config.members.len(), 3);
        assert_eq!(config.addr.api, "127.0.0.1:7002");
        assert_eq!(config.addr.peer, "127.0.0.1:7102");
        assert_eq!(config.data_dir, Path::new("/srv/baton-data/node-2"));
        config.validate().unwrap();
    }
}
