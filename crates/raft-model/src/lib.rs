//! An exhaustive model of Raft as baton runs it: openraft 0.9.25 with the changes of
//! `vendor/openraft/patches/` that touch Raft's safety rules, each behind a switch of
//! [`Rules`], checked with the `stateright` model checker.
//!
//! The model is Raft's core, at the level where those changes act: three nodes, terms,
//! votes, logs whose durable prefix survives a crash and whose tail does not, the commit
//! rule, and a network that may drop, delay, reorder and repeat any message. It checks
//! Raft's safety properties in every reachable state (`properties` in [`RaftModel`]):
//! - **election safety**: at most one node leads in a term;
//! - **log matching**: two logs that hold an entry of the same index and term hold the same
//!   entries up to it;
//! - **leader completeness**: a node that becomes leader holds every committed entry;
//! - **state machine safety**: no two nodes apply different entries at the same index.
//!
//! The changes it models (see `vendor/openraft/patches/`):
//! - `0001` (decision #106): a leader sends its new entries before its own flush of them
//!   ends, and counts its own copy towards a commit only once it is flushed
//!   ([`Rules::leader_sends_before_flush`], guard [`Rules::leader_counts_only_flushed`]);
//! - `0003` (decision #117): a node that restarts with a committed vote for itself
//!   campaigns in a new term instead of leading again in its old one (guard
//!   [`Rules::restarted_leader_campaigns`]);
//! - `0004` (decision #131): a follower commits up to a commit notice of its leader, which
//!   names a committed entry, but only from the leader it follows now and only up to what
//!   it accepted from that leader ([`Rules::commit_notices`], guard
//!   [`Rules::commit_notice_guard`]).
//!
//! Simplifications, each of which keeps every behaviour the properties depend on: a leader
//! sends its whole log with every AppendEntries (the follower's conflict rule is Raft's);
//! a follower flushes what it accepts before it answers (openraft's `append_to_log`
//! awaits the flush); a crashed node restarts at once (a node that stays down is a node
//! whose messages are never delivered); denials of votes and appends are not sent (a
//! sender learns nothing from them that the model needs).

use stateright::{Model, Property};
use std::collections::BTreeSet;

/// Nodes in the modelled cluster.
pub const NODES: usize = 3;

/// Which of baton's rules are on. [`Rules::baton`] is what ships.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rules {
    /// A leader sends entries before its own flush of them ends (#106); off: it flushes
    /// as it appends, as openraft 0.9.25 does.
    pub leader_sends_before_flush: bool,
    /// A leader counts its own copy towards a commit only once flushed (#106's guard).
    pub leader_counts_only_flushed: bool,
    /// A node that restarts with a committed vote for itself campaigns in a new term
    /// (#117); off: it leads again in its old term, as openraft 0.9.25 does.
    pub restarted_leader_campaigns: bool,
    /// Leaders send commit notices (#131).
    pub commit_notices: bool,
    /// A follower believes a notice only from the leader it follows now, and commits only
    /// up to what it accepted from it (#131's guard).
    pub commit_notice_guard: bool,
}

impl Rules {
    /// The rules baton ships with.
    pub fn baton() -> Rules {
        Rules {
            leader_sends_before_flush: true,
            leader_counts_only_flushed: true,
            restarted_leader_campaigns: true,
            commit_notices: true,
            commit_notice_guard: true,
        }
    }

    /// openraft 0.9.25 as published.
    pub fn upstream() -> Rules {
        Rules {
            leader_sends_before_flush: false,
            leader_counts_only_flushed: true,
            restarted_leader_campaigns: false,
            commit_notices: false,
            commit_notice_guard: true,
        }
    }
}

/// How far the checker explores.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// The highest term.
    pub terms: u8,
    /// Client writes in all.
    pub writes: u8,
    /// Crashes in all.
    pub crashes: u8,
    /// Messages in flight at once.
    pub in_flight: usize,
}

/// A log entry: its term, and the value of the client write it carries (0: the blank
/// entry a new leader appends).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry {
    /// The term of the leader that appended it.
    pub term: u8,
    /// The write (1, 2, …), or 0 for a blank entry.
    pub value: u8,
}

/// A node's role.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Follows the leader it heard from in its term, if any.
    Follower {
        /// The leader of this term it accepted entries from.
        leader: Option<u8>,
    },
    /// Asks for votes; the set of nodes that granted one.
    Candidate {
        /// Bit `i`: node `i` voted for it.
        votes: u8,
    },
    /// Leads its term; what each node is known to hold durably.
    Leader {
        /// Per node: the length of the log prefix known to be on its disk.
        matched: [u8; NODES],
    },
}

/// One node: its durable state (term, vote, log up to `flushed`) and the rest, which a
/// crash loses.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    /// The current term (durable).
    pub term: u8,
    /// Whom it voted for in `term` (durable).
    pub voted_for: Option<u8>,
    /// Its vote was granted by a quorum: it led `term` (durable; openraft's committed vote).
    pub vote_committed: bool,
    /// Its log; the first `flushed` entries are on its disk.
    pub log: Vec<Entry>,
    /// How many entries of `log` are durable.
    pub flushed: u8,
    /// Its role.
    pub role: Role,
    /// How many entries it knows to be committed (and has applied).
    pub commit: u8,
    /// How many entries of its log it accepted from the leader of its term (#131).
    pub accepted: u8,
}

/// A message on the network.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// RequestVote.
    Vote {
        /// The candidate's term.
        term: u8,
        /// The candidate.
        from: u8,
        /// The voter asked.
        to: u8,
        /// The candidate's last entry's term (0: empty log).
        last_term: u8,
        /// The candidate's log length.
        len: u8,
    },
    /// A granted vote.
    Granted {
        /// The term.
        term: u8,
        /// The voter.
        from: u8,
        /// The candidate.
        to: u8,
    },
    /// AppendEntries with the leader's whole log.
    Append {
        /// The leader's term.
        term: u8,
        /// The leader.
        from: u8,
        /// The follower.
        to: u8,
        /// The leader's log as it was sent.
        entries: Vec<Entry>,
        /// The leader's commit index.
        commit: u8,
    },
    /// A follower holds the first `len` entries of the leader's log on its disk.
    Appended {
        /// The term.
        term: u8,
        /// The follower.
        from: u8,
        /// The leader.
        to: u8,
        /// The prefix it holds.
        len: u8,
    },
    /// A commit notice (#131): the leader of `term` committed its first `commit` entries.
    Notice {
        /// The leader's term.
        term: u8,
        /// The leader.
        from: u8,
        /// The follower.
        to: u8,
        /// The committed prefix.
        commit: u8,
    },
}

/// The whole system: the nodes, the network, and what the properties need to remember.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    /// The nodes.
    pub nodes: [Node; NODES],
    /// Every message sent and not delivered yet: any may be delivered next, or never (a
    /// lost message). A repeated message is one the sender sends again.
    pub network: BTreeSet<Msg>,
    /// Client writes made so far.
    pub writes: u8,
    /// Crashes so far.
    pub crashes: u8,
    /// The leader of each term, once one was elected (index: term).
    pub leaders: Vec<Option<u8>>,
    /// The longest prefix any node has applied.
    pub applied: Vec<Entry>,
    /// The longest prefix any leader has committed, each entry with the term of the leader
    /// that first counted it committed.
    pub committed: Vec<(Entry, u8)>,
    /// Set once two nodes led the same term.
    pub two_leaders: bool,
    /// Set once a node became leader without an entry committed in an earlier term.
    pub incomplete_leader: bool,
    /// Set once a node applied an entry that differs from another node's at that index.
    pub diverged: bool,
}

/// A step of the system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The node's election timer fires: it campaigns in the next term.
    Timeout(u8),
    /// A client write reaches the leader.
    Write(u8),
    /// The node's flush of its log ends.
    Flush(u8),
    /// The candidate asks a node for its vote.
    AskVote(u8, u8),
    /// The leader sends AppendEntries to a follower.
    Replicate(u8, u8),
    /// The leader sends a commit notice to a follower.
    SendNotice(u8, u8),
    /// The node crashes (losing its unflushed tail and everything not durable) and
    /// restarts.
    Crash(u8),
    /// A message is delivered.
    Deliver(Msg),
}

/// The model: bounds and rules.
#[derive(Clone, Debug)]
pub struct RaftModel {
    /// How far to explore.
    pub bounds: Bounds,
    /// Which rules are on.
    pub rules: Rules,
}

fn majority(count: usize) -> bool {
    count * 2 > NODES
}

fn last_term(log: &[Entry]) -> u8 {
    log.last().map_or(0, |e| e.term)
}

impl RaftModel {
    /// Records that `node` has applied its first `commit` entries; notes a divergence.
    fn apply(state: &mut State, node: usize) {
        let n = &state.nodes[node];
        let upto = usize::from(n.commit).min(n.log.len());
        let log = &n.log[..upto];
        let shared = log.len().min(state.applied.len());
        if log[..shared] != state.applied[..shared] {
            state.diverged = true;
        }
        if log.len() > state.applied.len() {
            state.applied = log.to_vec();
        }
    }

    /// The node adopts a newer term as a follower.
    fn step_down(node: &mut Node, term: u8) {
        node.term = term;
        node.voted_for = None;
        node.vote_committed = false;
        node.role = Role::Follower { leader: None };
        node.accepted = 0;
    }

    /// The node campaigns in the next term, if the bounds allow one: it votes for itself
    /// (durably) and asks the others one by one (`Action::AskVote`).
    fn campaign(&self, state: &mut State, id: u8) {
        let node = &mut state.nodes[usize::from(id)];
        if node.term >= self.bounds.terms {
            return;
        }
        node.term += 1;
        node.voted_for = Some(id);
        node.vote_committed = false;
        node.accepted = 0;
        node.role = Role::Candidate { votes: 1 << id };
    }

    /// What the leader counts as its own durable copy.
    fn own_copy(&self, node: &Node) -> u8 {
        if self.rules.leader_counts_only_flushed {
            node.flushed
        } else {
            node.log.len() as u8
        }
    }

    /// The leader `id` takes its own copy into account and commits what a majority holds,
    /// if the last such entry is of its term.
    fn advance_commit(&self, state: &mut State, id: u8) {
        let own = self.own_copy(&state.nodes[usize::from(id)]);
        let node = &mut state.nodes[usize::from(id)];
        let Role::Leader { matched } = &mut node.role else {
            return;
        };
        matched[usize::from(id)] = own;
        let mut committed = node.commit;
        for len in (node.commit + 1)..=node.log.len() as u8 {
            let holders = matched.iter().filter(|m| **m >= len).count();
            if majority(holders) && node.log[usize::from(len) - 1].term == node.term {
                committed = len;
            }
        }
        if committed > node.commit {
            let (from, term) = (usize::from(node.commit), node.term);
            node.commit = committed;
            for i in from..usize::from(committed) {
                let entry = node.log[i];
                match state.committed.get(i) {
                    Some((held, _)) if *held != entry => state.diverged = true,
                    Some(_) => {}
                    None => state.committed.push((entry, term)),
                }
            }
            RaftModel::apply(state, usize::from(id));
        }
    }

    /// The node `id` becomes leader of its term.
    fn become_leader(&self, state: &mut State, id: u8) {
        let term = state.nodes[usize::from(id)].term;
        match state.leaders[usize::from(term)] {
            Some(other) if other != id => state.two_leaders = true,
            _ => state.leaders[usize::from(term)] = Some(id),
        }
        let node = &mut state.nodes[usize::from(id)];
        // Raft's leader completeness: every entry committed in an earlier term.
        let complete = state
            .committed
            .iter()
            .enumerate()
            .all(|(i, (entry, by))| *by >= term || node.log.get(i) == Some(entry));
        if !complete {
            state.incomplete_leader = true;
        }
        node.vote_committed = true;
        node.role = Role::Leader {
            matched: [0; NODES],
        };
        node.log.push(Entry { term, value: 0 });
        if !self.rules.leader_sends_before_flush {
            node.flushed = node.log.len() as u8;
        }
        self.advance_commit(state, id);
    }

    fn deliver(&self, state: &mut State, msg: Msg) {
        let (term, to) = match &msg {
            Msg::Vote { term, to, .. }
            | Msg::Granted { term, to, .. }
            | Msg::Append { term, to, .. }
            | Msg::Appended { term, to, .. }
            | Msg::Notice { term, to, .. } => (*term, *to),
        };
        let me = usize::from(to);
        if term > state.nodes[me].term {
            RaftModel::step_down(&mut state.nodes[me], term);
        }
        if term < state.nodes[me].term {
            return;
        }
        match msg {
            Msg::Vote {
                from,
                last_term: their_term,
                len,
                ..
            } => {
                let node = &mut state.nodes[me];
                let free = node.voted_for.is_none() || node.voted_for == Some(from);
                let mine = (last_term(&node.log), node.log.len() as u8);
                if free && (their_term, len) >= mine {
                    node.voted_for = Some(from);
                    state.network.insert(Msg::Granted {
                        term,
                        from: to,
                        to: from,
                    });
                }
            }
            Msg::Granted { from, .. } => {
                let node = &mut state.nodes[me];
                if let Role::Candidate { votes } = &mut node.role {
                    *votes |= 1 << from;
                    if majority(votes.count_ones() as usize) {
                        self.become_leader(state, to);
                    }
                }
            }
            Msg::Append {
                from,
                entries,
                commit,
                ..
            } => {
                let node = &mut state.nodes[me];
                if matches!(node.role, Role::Leader { .. }) {
                    // Only under a broken rule can a leader hear another of its term.
                    return;
                }
                node.role = Role::Follower { leader: Some(from) };
                // Raft's rule: an entry whose term differs from the one at its index ends
                // the log there; entries of the same term are taken to be the same.
                for (i, entry) in entries.iter().enumerate() {
                    match node.log.get(i) {
                        Some(held) if held.term == entry.term => {}
                        Some(_) => {
                            node.log.truncate(i);
                            node.log.push(*entry);
                        }
                        None => node.log.push(*entry),
                    }
                }
                let len = entries.len() as u8;
                // Flushed before the answer; a truncation is durable with it.
                node.flushed = node.log.len() as u8;
                node.accepted = node.accepted.max(len);
                let upto = commit.min(len);
                if upto > node.commit {
                    node.commit = upto;
                    RaftModel::apply(state, me);
                }
                state.network.insert(Msg::Appended {
                    term,
                    from: to,
                    to: from,
                    len,
                });
            }
            Msg::Appended { from, len, .. } => {
                if let Role::Leader { matched } = &mut state.nodes[me].role {
                    let held = &mut matched[usize::from(from)];
                    *held = (*held).max(len);
                    self.advance_commit(state, to);
                }
            }
            Msg::Notice { from, commit, .. } => {
                let node = &mut state.nodes[me];
                let upto = if self.rules.commit_notice_guard {
                    if node.role != (Role::Follower { leader: Some(from) }) {
                        return;
                    }
                    commit.min(node.accepted)
                } else {
                    commit.min(node.log.len() as u8)
                };
                if upto > node.commit {
                    node.commit = upto;
                    RaftModel::apply(state, me);
                }
            }
        }
    }

    fn crash(&self, state: &mut State, id: u8) {
        state.crashes += 1;
        let node = &mut state.nodes[usize::from(id)];
        node.log.truncate(usize::from(node.flushed));
        node.commit = 0;
        node.accepted = 0;
        node.role = Role::Follower { leader: None };
        let led = node.vote_committed && node.voted_for == Some(id);
        if !led {
            return;
        }
        if self.rules.restarted_leader_campaigns {
            self.campaign(state, id);
        } else {
            // openraft 0.9.25: leads again in its old term, with the log read back.
            node.role = Role::Leader {
                matched: [0; NODES],
            };
            self.advance_commit(state, id);
        }
    }
}

impl Model for RaftModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let node = Node {
            term: 0,
            voted_for: None,
            vote_committed: false,
            log: Vec::new(),
            flushed: 0,
            role: Role::Follower { leader: None },
            commit: 0,
            accepted: 0,
        };
        vec![State {
            nodes: [node.clone(), node.clone(), node],
            network: BTreeSet::new(),
            writes: 0,
            crashes: 0,
            leaders: vec![None; usize::from(self.bounds.terms) + 1],
            applied: Vec::new(),
            committed: Vec::new(),
            two_leaders: false,
            incomplete_leader: false,
            diverged: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for id in 0..NODES as u8 {
            let node = &state.nodes[usize::from(id)];
            let leads = matches!(node.role, Role::Leader { .. });
            if !leads && node.term < self.bounds.terms {
                actions.push(Action::Timeout(id));
            }
            if leads && state.writes < self.bounds.writes {
                actions.push(Action::Write(id));
            }
            if usize::from(node.flushed) < node.log.len() {
                actions.push(Action::Flush(id));
            }
            if let Role::Candidate { votes } = node.role {
                for to in 0..NODES as u8 {
                    if votes & (1 << to) == 0 {
                        actions.push(Action::AskVote(id, to));
                    }
                }
            }
            if leads {
                for to in 0..NODES as u8 {
                    if to != id {
                        actions.push(Action::Replicate(id, to));
                        if self.rules.commit_notices && node.commit > 0 {
                            actions.push(Action::SendNotice(id, to));
                        }
                    }
                }
            }
            if state.crashes < self.bounds.crashes {
                actions.push(Action::Crash(id));
            }
        }
        actions.extend(state.network.iter().cloned().map(Action::Deliver));
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Timeout(id) => self.campaign(&mut state, id),
            Action::Write(id) => {
                state.writes += 1;
                let value = state.writes;
                let node = &mut state.nodes[usize::from(id)];
                node.log.push(Entry {
                    term: node.term,
                    value,
                });
                if !self.rules.leader_sends_before_flush {
                    node.flushed = node.log.len() as u8;
                }
            }
            Action::Flush(id) => {
                let node = &mut state.nodes[usize::from(id)];
                node.flushed = node.log.len() as u8;
                self.advance_commit(&mut state, id);
            }
            Action::AskVote(id, to) => {
                let node = &state.nodes[usize::from(id)];
                state.network.insert(Msg::Vote {
                    term: node.term,
                    from: id,
                    to,
                    last_term: last_term(&node.log),
                    len: node.log.len() as u8,
                });
            }
            Action::Replicate(id, to) => {
                let node = &state.nodes[usize::from(id)];
                let sent = if self.rules.leader_sends_before_flush {
                    node.log.clone()
                } else {
                    node.log[..usize::from(node.flushed)].to_vec()
                };
                state.network.insert(Msg::Append {
                    term: node.term,
                    from: id,
                    to,
                    entries: sent,
                    commit: node.commit,
                });
            }
            Action::SendNotice(id, to) => {
                let node = &state.nodes[usize::from(id)];
                state.network.insert(Msg::Notice {
                    term: node.term,
                    from: id,
                    to,
                    commit: node.commit,
                });
            }
            Action::Crash(id) => self.crash(&mut state, id),
            Action::Deliver(msg) => {
                state.network.remove(&msg);
                self.deliver(&mut state, msg);
            }
        }
        (state != *last).then_some(state)
    }

    fn within_boundary(&self, state: &State) -> bool {
        state.network.len() <= self.bounds.in_flight
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("election safety", |_, s: &State| !s.two_leaders),
            Property::always("log matching", |_, s: &State| log_matching(s)),
            Property::always("leader completeness", |_, s: &State| !s.incomplete_leader),
            Property::always("state machine safety", |_, s: &State| !s.diverged),
            Property::sometimes("a write is applied", |_, s: &State| {
                s.applied.iter().any(|e| e.value > 0)
            }),
        ]
    }
}

/// The orders of the nodes: the model treats them alike, so a state and its relabelling
/// by any of these are one state (symmetry reduction).
const PERMUTATIONS: [[u8; NODES]; 6] = [
    [0, 1, 2],
    [0, 2, 1],
    [1, 0, 2],
    [1, 2, 0],
    [2, 0, 1],
    [2, 1, 0],
];

impl State {
    /// This state with node `i` renamed `to[i]`.
    fn relabel(&self, to: [u8; NODES]) -> State {
        let id = |n: u8| to[usize::from(n)];
        let mut nodes = self.nodes.clone();
        for (i, node) in self.nodes.iter().enumerate() {
            let mut node = node.clone();
            node.voted_for = node.voted_for.map(id);
            node.role = match node.role {
                Role::Follower { leader } => Role::Follower {
                    leader: leader.map(id),
                },
                Role::Candidate { votes } => Role::Candidate {
                    votes: (0..NODES as u8)
                        .filter(|n| votes & (1 << n) != 0)
                        .fold(0, |v, n| v | 1 << id(n)),
                },
                Role::Leader { matched } => {
                    let mut renamed = [0; NODES];
                    for (n, m) in matched.iter().enumerate() {
                        renamed[usize::from(to[n])] = *m;
                    }
                    Role::Leader { matched: renamed }
                }
            };
            nodes[usize::from(to[i])] = node;
        }
        let network = self
            .network
            .iter()
            .map(|m| {
                let mut m = m.clone();
                match &mut m {
                    Msg::Vote { from, to: t, .. }
                    | Msg::Granted { from, to: t, .. }
                    | Msg::Append { from, to: t, .. }
                    | Msg::Appended { from, to: t, .. }
                    | Msg::Notice { from, to: t, .. } => {
                        *from = id(*from);
                        *t = id(*t);
                    }
                }
                m
            })
            .collect();
        State {
            nodes,
            network,
            leaders: self.leaders.iter().map(|l| l.map(id)).collect(),
            ..self.clone()
        }
    }

    /// The least of this state's relabellings: one representative per class of states
    /// that differ only in the names of their nodes.
    pub fn representative(&self) -> State {
        PERMUTATIONS
            .iter()
            .map(|p| self.relabel(*p))
            .min()
            .unwrap_or_else(|| self.clone())
    }
}

/// Two logs that hold an entry of the same index and term hold the same entries up to it.
fn log_matching(state: &State) -> bool {
    for (i, a) in state.nodes.iter().enumerate() {
        for b in &state.nodes[i + 1..] {
            let shared = a.log.len().min(b.log.len());
            for at in (0..shared).rev() {
                if a.log[at].term == b.log[at].term {
                    if a.log[..=at] != b.log[..=at] {
                        return false;
                    }
                    break;
                }
            }
        }
    }
    true
}
