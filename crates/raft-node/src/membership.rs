//! Membership changes that cannot lose quorum (spec §4).
//!
//! - Addresses are checked before anything is proposed: `host:port`, resolvable, and not
//!   an address of an existing member.
//! - A new member must answer on its peer port with its own id before it is added; it
//!   joins as a learner and votes only once it is within `member_lag_max` entries of the
//!   leader's log. If it does not catch up within `member_catchup_timeout_ms`, the learner
//!   is removed again and the call fails: the voters are never changed.
//! - etcd's strict reconfiguration check: a change that would leave fewer reachable,
//!   caught-up voters than a quorum of the new configuration is refused.
//!
//! Changes run on the leader, one at a time; a follower forwards them (`Node::add_member`).

use crate::error::NodeError;
use crate::node::Node;
use crate::types::{ClientWriteError, NodeAddr, NodeId, RaftError, RaftMetrics};
use openraft::ChangeMembers;
use openraft::error::ChangeMembershipError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::time::Instant;

/// Longest accepted address (a DNS name of 253 bytes, a colon and a port).
const ADDR_BYTES_MAX: usize = 260;
/// How long name resolution of one address may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a new member has to answer the identity probe (it may still be starting).
const JOIN_PROBE_PATIENCE: Duration = Duration::from_secs(5);
/// Pause between identity probes of a new member.
const JOIN_PROBE_PAUSE: Duration = Duration::from_millis(200);

/// A membership change, as a follower forwards it to the leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberChange {
    /// Add a member: learner first, voter once caught up.
    Add {
        /// Its id.
        id: NodeId,
        /// Its addresses.
        addr: NodeAddr,
    },
    /// Remove a member (voter or learner).
    Remove {
        /// Its id.
        id: NodeId,
    },
}

/// What a prober sends on `paths::IDENTITY`: a fresh random challenge. The probe carries
/// no cluster secret (the address is not known to be a member yet); the answer proves that
/// the process there holds the secret without revealing it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityProbe {
    /// 32 random bytes.
    pub nonce: [u8; 32],
}

/// What a member says of itself on `paths::IDENTITY`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// Its configured id.
    pub id: NodeId,
    /// With a cluster secret: HMAC-SHA256 under the secret of the probe's nonce and `id`
    /// ([`identity_proof`]).
    pub proof: Option<[u8; 32]>,
}

/// The proof of an identity answer: HMAC-SHA256 keyed with the cluster secret over a
/// label, the prober's nonce and the id (so an answer can be replayed neither to another
/// probe nor for another id).
pub(crate) fn identity_proof(secret: &crate::Secret, nonce: &[u8; 32], id: NodeId) -> [u8; 32] {
    let (key, message) = identity_mac(secret, nonce, id);
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::hmac::sign(&key, &message).as_ref());
    out
}

/// Whether `proof` is [`identity_proof`] of this nonce and id (in constant time).
fn proof_holds(secret: &crate::Secret, nonce: &[u8; 32], id: NodeId, proof: &[u8; 32]) -> bool {
    let (key, message) = identity_mac(secret, nonce, id);
    ring::hmac::verify(&key, &message, proof).is_ok()
}

/// The key and the message of an identity proof.
fn identity_mac(
    secret: &crate::Secret,
    nonce: &[u8; 32],
    id: NodeId,
) -> (ring::hmac::Key, Vec<u8>) {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.expose().as_bytes());
    let mut message = b"baton identity v1\0".to_vec();
    message.extend_from_slice(nonce);
    message.extend_from_slice(&id.to_be_bytes());
    (key, message)
}

/// Runs a change on this node, which must be the leader.
pub(crate) async fn change_here(node: &Node, change: MemberChange) -> Result<(), NodeError> {
    let _one_at_a_time = node.membership_lock().lock().await;
    if !node.is_leader() {
        return Err(NodeError::ForwardToLeader {
            leader: node.leader(),
        });
    }
    match change {
        MemberChange::Add { id, addr } => add(node, id, addr).await,
        MemberChange::Remove { id } => remove(node, id).await,
    }
}

async fn add(node: &Node, id: NodeId, addr: NodeAddr) -> Result<(), NodeError> {
    if id == 0 {
        return Err(invalid("id", "must be positive".into()));
    }
    let metrics = node.raft().metrics().borrow().clone();
    let membership = metrics.membership_config.membership().clone();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    if voters.contains(&id) {
        return Err(refused(format!("node {id} is already a voter")));
    }
    // A learner left by an earlier attempt (the leader failed mid-change) with the same
    // addresses is taken up where it stopped; with other addresses it is refused.
    let resuming = match membership.get_node(&id) {
        Some(existing) if *existing == addr => true,
        Some(existing) => {
            return Err(refused(format!(
                "node {id} is already a learner at peer {} / api {}; remove it first",
                existing.peer, existing.api
            )));
        }
        None => false,
    };
    let peer = resolve("peer", &addr.peer).await?;
    let api = resolve("api", &addr.api).await?;
    if peer.iter().any(|a| api.contains(a)) {
        return Err(invalid("api", "must differ from the peer address".into()));
    }
    if !resuming {
        for (other, other_addr) in membership.nodes() {
            for (field, theirs) in [("peer", &other_addr.peer), ("api", &other_addr.api)] {
                let theirs = resolve(field, theirs).await.unwrap_or_default();
                if peer.iter().chain(&api).any(|a| theirs.contains(a)) {
                    return Err(refused(format!(
                        "{field} address {theirs:?} already belongs to node {other}"
                    )));
                }
            }
        }
    }
    probe_joiner(node, id, &addr.peer).await.map_err(|why| {
        refused(format!(
            "node {id} does not answer at {} within {} s ({why}); start it with --join first",
            addr.peer,
            JOIN_PROBE_PATIENCE.as_secs()
        ))
    })?;
    let mut after = voters.clone();
    after.insert(id);
    // The new member counts as caught up: it must be before it votes.
    check_quorum(node, &voters, &after, "adding it", Some(id)).await?;
    if !resuming {
        node.raft()
            .add_learner(id, addr, false)
            .await
            .map_err(membership_error)?;
        tracing::info!(member = id, "learner added; waiting for it to catch up");
    }
    let budget = Duration::from_millis(node.config().member_catchup_timeout_ms);
    if !wait_caught_up(node, id, Instant::now() + budget).await {
        let removed = node
            .raft()
            .change_membership(ChangeMembers::RemoveNodes(BTreeSet::from([id])), false)
            .await;
        let outcome = match removed {
            Ok(_) => "it was removed again".to_owned(),
            Err(e) => format!("removing it again failed ({e}); remove it by hand"),
        };
        tracing::warn!(member = id, %outcome, "learner did not catch up");
        return Err(refused(format!(
            "node {id} did not catch up within {} ms (at most {} entries behind); {outcome}; \
             the voters are unchanged",
            budget.as_millis(),
            node.config().member_lag_max
        )));
    }
    node.raft()
        .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
        .await
        .map_err(membership_error)?;
    tracing::info!(member = id, "member added as a voter");
    Ok(())
}

async fn remove(node: &Node, id: NodeId) -> Result<(), NodeError> {
    let membership = node
        .raft()
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .clone();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let change = if voters.contains(&id) {
        if voters.len() == 1 {
            return Err(refused("cannot remove the last voter".into()));
        }
        let mut after = voters.clone();
        after.remove(&id);
        check_quorum(node, &voters, &after, "removing it", None).await?;
        ChangeMembers::RemoveVoters(BTreeSet::from([id]))
    } else if membership.get_node(&id).is_some() {
        ChangeMembers::RemoveNodes(BTreeSet::from([id]))
    } else {
        return Err(refused(format!("{id} is not a member")));
    };
    node.raft()
        .change_membership(change, false)
        .await
        .map_err(membership_error)?;
    tracing::info!(member = id, "member removed");
    Ok(())
}

/// Refuses a change after which fewer voters of `after` than its quorum would be reachable
/// and caught up. `joining` is a new member, counted as caught up (it must be to vote).
async fn check_quorum(
    node: &Node,
    before: &BTreeSet<NodeId>,
    after: &BTreeSet<NodeId>,
    what: &str,
    joining: Option<NodeId>,
) -> Result<(), NodeError> {
    let healthy = healthy_voters(node, before).await;
    let counted: BTreeSet<NodeId> = after
        .iter()
        .copied()
        .filter(|v| healthy.contains(v) || Some(*v) == joining)
        .collect();
    let quorum = after.len() / 2 + 1;
    if counted.len() >= quorum {
        return Ok(());
    }
    let missing: Vec<NodeId> = after.difference(&counted).copied().collect();
    Err(refused(format!(
        "{what} would leave {} of {} voters reachable and caught up, fewer than a quorum of \
         {quorum} (unreachable or behind: {missing:?})",
        counted.len(),
        after.len()
    )))
}

/// The voters of `among` that are this node (the leader), or answer on their peer port with
/// their id and are within `member_lag_max` entries of the leader's log.
async fn healthy_voters(node: &Node, among: &BTreeSet<NodeId>) -> BTreeSet<NodeId> {
    let metrics = node.raft().metrics().borrow().clone();
    let membership = metrics.membership_config.membership();
    let lag = node.config().member_lag_max;
    let probes = among.iter().map(|&id| {
        let addr = membership.get_node(&id).map(|a| a.peer.clone());
        let caught_up = id == node.id() || is_caught_up(&metrics, id, lag);
        async move {
            if id == node.id() {
                return Some(id);
            }
            let addr = addr?;
            (caught_up && probe(node, id, &addr).await.is_ok()).then_some(id)
        }
    });
    futures_util::future::join_all(probes)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Probes a new member until it answers (it may have been started just now), at most
/// [`JOIN_PROBE_PATIENCE`]. A process that answers with another id is refused at once.
async fn probe_joiner(node: &Node, id: NodeId, peer: &str) -> Result<(), String> {
    let deadline = Instant::now() + JOIN_PROBE_PATIENCE;
    loop {
        match probe(node, id, peer).await {
            Ok(()) => return Ok(()),
            Err(why) if why.starts_with(OTHER_NODE) || Instant::now() >= deadline => {
                return Err(why);
            }
            Err(_) => tokio::time::sleep(JOIN_PROBE_PAUSE).await,
        }
    }
}

/// How a probe's answer from another node begins.
const OTHER_NODE: &str = "the process there is node";

/// Asks the process at `peer` for its id, without the cluster secret; `Ok` if it answers
/// with `id` in time and, where the cluster has a secret, proves that it holds it. Only
/// then is the address sent anything with the secret (under mutual TLS its certificate
/// must also name `id`).
async fn probe(node: &Node, id: NodeId, peer: &str) -> Result<(), String> {
    let timeout = Duration::from_millis(node.config().election_timeout_max_ms);
    let nonce = crate::secret::random_bytes::<32>()
        .ok_or_else(|| "no randomness for the challenge".to_owned())?;
    let answer: Identity = node
        .peers()
        .without_secret()
        .call(
            crate::network::Target { id, addr: peer },
            crate::network::paths::IDENTITY,
            &IdentityProbe { nonce },
            timeout,
        )
        .await
        .map_err(|e| e.to_string())?;
    if answer.id != id {
        return Err(format!("{OTHER_NODE} {}", answer.id));
    }
    if let Some(secret) = &node.config().cluster_secret {
        let proven = answer
            .proof
            .is_some_and(|proof| proof_holds(secret, &nonce, id, &proof));
        if !proven {
            return Err(format!(
                "{OTHER_NODE} {id} by its word, but it cannot prove that it holds the cluster secret"
            ));
        }
    }
    Ok(())
}

/// Waits (on Raft metrics, no polling) until `id` is caught up; `false` at the deadline or
/// when this node stops leading.
async fn wait_caught_up(node: &Node, id: NodeId, deadline: Instant) -> bool {
    let lag = node.config().member_lag_max;
    let mut metrics = node.raft().metrics();
    loop {
        {
            let m = metrics.borrow_and_update();
            if is_caught_up(&m, id, lag) {
                return true;
            }
            if !node.is_leader() {
                return false;
            }
        }
        match tokio::time::timeout_at(deadline, metrics.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return false,
        }
    }
}

/// Whether the leader has replicated to `id` up to `lag` entries of its last log index.
/// A member to which nothing was replicated yet is never caught up.
fn is_caught_up(m: &RaftMetrics, id: NodeId, lag: u64) -> bool {
    let last = m.last_log_index.unwrap_or(0);
    m.replication
        .as_ref()
        .and_then(|r| r.get(&id).cloned().flatten())
        .is_some_and(|matched| matched.index.saturating_add(lag) >= last)
}

/// Checks `host:port` and resolves it (bounded in time).
async fn resolve(field: &'static str, addr: &str) -> Result<Vec<SocketAddr>, NodeError> {
    let shape = "must be host:port (a name or an IP, and a port 1..=65535)";
    if addr.is_empty()
        || addr.len() > ADDR_BYTES_MAX
        || !addr
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-.:[]_".contains(c))
    {
        return Err(invalid(field, shape.into()));
    }
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err(invalid(field, shape.into()));
    };
    if host.is_empty() || !matches!(port.parse::<u16>(), Ok(p) if p > 0) {
        return Err(invalid(field, shape.into()));
    }
    match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host(addr)).await {
        Ok(Ok(found)) => {
            let found: Vec<SocketAddr> = found.collect();
            if found.is_empty() {
                Err(invalid(field, format!("{addr:?} resolves to no address")))
            } else {
                Ok(found)
            }
        }
        Ok(Err(e)) => Err(invalid(field, format!("{addr:?} does not resolve: {e}"))),
        Err(_) => Err(invalid(
            field,
            format!(
                "resolving {addr:?} took over {} s",
                RESOLVE_TIMEOUT.as_secs()
            ),
        )),
    }
}

fn invalid(field: &'static str, reason: String) -> NodeError {
    NodeError::Invalid(baton_state_machine::Error::Invalid { field, reason })
}

fn refused(message: String) -> NodeError {
    NodeError::Membership(message)
}

/// openraft's refusal of a change, as a node error.
pub(crate) fn membership_error(e: RaftError<ClientWriteError>) -> NodeError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => NodeError::ForwardToLeader {
            leader: f.leader_id.zip(f.leader_node),
        },
        RaftError::APIError(ClientWriteError::ChangeMembershipError(
            ChangeMembershipError::InProgress(p),
        )) => NodeError::Membership(format!("another change is in progress: {p}")),
        RaftError::APIError(other) => NodeError::Membership(other.to_string()),
        RaftError::Fatal(_) => NodeError::Stopped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn addresses_must_be_host_and_port() {
        for bad in [
            "",
            "\u{7f}\u{1}garbage",
            "127.0.0.1",
            "127.0.0.1:0",
            "127.0.0.1:70000",
            ":7071",
            "http://127.0.0.1:7071",
            "127.0.0.1:7071/path",
            "a b:1",
        ] {
            let e = resolve("peer", bad).await.unwrap_err();
            assert!(matches!(e, NodeError::Invalid(_)), "{bad:?}: {e:?}");
        }
        for good in ["127.0.0.1:7071", "localhost:7071", "[::1]:7071"] {
            assert!(resolve("peer", good).await.is_ok(), "{good}");
        }
    }
}
