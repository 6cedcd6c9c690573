//! Linearizability checking (Wing & Gong, with Lowe's memo), shaped like Porcupine.
//!
//! Calls and returns sit in a doubly linked list in time order. The search walks it: a call
//! whose operation the model accepts in the current state is linearized (its call and
//! return are lifted out of the list) unless the pair (set of linearized operations, state)
//! was seen before, in which case that path is pruned; reaching a return means no pending
//! call fits, so the search backtracks. An operation whose outcome is unknown (`info`) has
//! its return at the end of time and the model accepts any output for it. Histories are
//! split into independent partitions (keys) and each is checked alone. A time budget per
//! partition makes the answer `Unknown` instead of guessing.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A sequential specification.
pub trait Model {
    /// The object's state.
    type State: Clone + Eq + Hash;
    /// What an operation asks.
    type Input;
    /// What it answered.
    type Output;

    /// The initial state.
    fn init(&self) -> Self::State;

    /// Applies `input` in `state`. `output` is `None` for an operation whose outcome is
    /// unknown (any output is accepted). Returns the next state, or `None` if the output
    /// is impossible in this state.
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: Option<&Self::Output>,
    ) -> Option<Self::State>;
}

/// One operation of a history.
#[derive(Clone, Debug, PartialEq)]
pub struct Operation<I, O> {
    /// The process (client) that ran it.
    pub process: u64,
    /// When it was invoked (any monotonic unit; ties: calls before returns).
    pub call: u64,
    /// When it returned; `None` for an unknown outcome (it returns at the end of time).
    pub ret: Option<u64>,
    /// Its input.
    pub input: I,
    /// Its output; `None` for an unknown outcome.
    pub output: Option<O>,
}

/// The verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Some linearization exists for every partition.
    Linearizable,
    /// A partition has none.
    NotLinearizable {
        /// The index of the offending partition.
        partition: usize,
        /// The most operations linearized before the search got stuck.
        longest_prefix: usize,
    },
    /// The time budget ran out before an answer.
    Unknown,
}

/// Most threads that check partitions at once.
const THREADS_MAX: usize = 64;

/// Checks every partition within `budget` each, concurrently; the first violation found
/// stops the others (a violation is definite, whatever the rest would say). Otherwise
/// `Unknown` if any partition ran out of budget.
pub fn check_partitions<M>(
    model: &M,
    partitions: &[Vec<Operation<M::Input, M::Output>>],
    budget: Duration,
) -> Verdict
where
    M: Model + Sync,
    M::Input: Sync,
    M::Output: Sync,
{
    let stop = AtomicBool::new(false);
    let next = AtomicUsize::new(0);
    let verdicts: Mutex<Vec<(usize, Verdict)>> = Mutex::new(Vec::new());
    let threads = partitions.len().clamp(1, THREADS_MAX);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= partitions.len() || stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let verdict = check_until(model, &partitions[i], budget, &stop);
                    if matches!(verdict, Verdict::NotLinearizable { .. }) {
                        stop.store(true, Ordering::Relaxed);
                    }
                    verdicts
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((i, verdict));
                }
            });
        }
    });
    let mut verdicts = verdicts.into_inner().unwrap_or_else(|p| p.into_inner());
    verdicts.sort_by_key(|(i, _)| *i);
    if let Some((i, Verdict::NotLinearizable { longest_prefix, .. })) = verdicts
        .iter()
        .find(|(_, v)| matches!(v, Verdict::NotLinearizable { .. }))
    {
        return Verdict::NotLinearizable {
            partition: *i,
            longest_prefix: *longest_prefix,
        };
    }
    let finished = verdicts.len() == partitions.len();
    if finished && verdicts.iter().all(|(_, v)| *v == Verdict::Linearizable) {
        Verdict::Linearizable
    } else {
        Verdict::Unknown
    }
}

#[derive(Clone, Copy)]
struct Node {
    /// Operation index.
    op: usize,
    is_call: bool,
    /// For a call: the node of its return.
    partner: usize,
    prev: usize,
    next: usize,
}

const NONE: usize = usize::MAX;

/// Seen (linearized set, state) pairs, bucketed by a hash of the set.
type Memo<S> = HashMap<u64, Vec<(Vec<u64>, S)>>;
/// How often (in search steps) the clock is read.
const CLOCK_EVERY: u64 = 1_024;

/// Checks one partition.
pub fn check<M: Model>(
    model: &M,
    ops: &[Operation<M::Input, M::Output>],
    budget: Duration,
) -> Verdict {
    check_until(model, ops, budget, &AtomicBool::new(false))
}

/// Checks one partition; gives up (`Unknown`) when `stop` is set or the budget runs out.
fn check_until<M: Model>(
    model: &M,
    ops: &[Operation<M::Input, M::Output>],
    budget: Duration,
    stop: &AtomicBool,
) -> Verdict {
    if ops.is_empty() {
        return Verdict::Linearizable;
    }
    let started = Instant::now();
    let mut nodes = build_list(ops);
    let head = 0;
    let words = ops.len().div_ceil(64);
    let mut linearized = vec![0u64; words];
    // Keyed by a hash of the linearized set only (as Porcupine does): hashing large states
    // on every step would dominate; states are compared only within a bucket.
    let mut memo: Memo<M::State> = HashMap::new();
    let mut stack: Vec<(usize, M::State)> = Vec::new();
    let mut state = model.init();
    let mut entry = nodes[head].next;
    let mut longest = 0;
    let mut steps = 0u64;
    while nodes[head].next != NONE {
        steps += 1;
        if steps.is_multiple_of(CLOCK_EVERY)
            && (started.elapsed() > budget || stop.load(Ordering::Relaxed))
        {
            return Verdict::Unknown;
        }
        // The list always ends with returns, so a walk stops at one before running out.
        let node = nodes[entry];
        if node.is_call {
            let op = &ops[node.op];
            if let Some(next_state) = model.step(&state, &op.input, op.output.as_ref()) {
                let mut candidate = linearized.clone();
                candidate[node.op / 64] |= 1 << (node.op % 64);
                let bucket = memo.entry(bitset_hash(&candidate)).or_default();
                let seen = bucket
                    .iter()
                    .any(|(set, s)| *set == candidate && *s == next_state);
                if !seen {
                    bucket.push((candidate.clone(), next_state.clone()));
                    stack.push((entry, state));
                    state = next_state;
                    linearized = candidate;
                    longest = longest.max(stack.len());
                    lift(&mut nodes, entry);
                    entry = nodes[head].next;
                    continue;
                }
            }
            entry = node.next;
        } else {
            match backtrack(&mut nodes, &mut stack, &mut linearized, &mut state) {
                Some(next) => entry = next,
                None => {
                    return Verdict::NotLinearizable {
                        partition: 0,
                        longest_prefix: longest,
                    };
                }
            }
        }
    }
    Verdict::Linearizable
}

/// FNV-style mixing of the bitset's words.
fn bitset_hash(words: &[u64]) -> u64 {
    words.iter().fold(0xcbf2_9ce4_8422_2325, |h, w| {
        (h ^ w).wrapping_mul(0x0100_0000_01b3).rotate_left(29)
    })
}

fn backtrack<S>(
    nodes: &mut [Node],
    stack: &mut Vec<(usize, S)>,
    linearized: &mut [u64],
    state: &mut S,
) -> Option<usize> {
    let (entry, previous) = stack.pop()?;
    let op = nodes[entry].op;
    linearized[op / 64] &= !(1 << (op % 64));
    *state = previous;
    unlift(nodes, entry);
    Some(nodes[entry].next)
}

/// The list: a sentinel head, then calls and returns in time order (calls first on ties);
/// unknown outcomes return after everything.
fn build_list<I, O>(ops: &[Operation<I, O>]) -> Vec<Node> {
    let end = ops
        .iter()
        .filter_map(|o| o.ret)
        .chain(ops.iter().map(|o| o.call))
        .max()
        .unwrap_or(0)
        + 1;
    // (time, returns after calls, op index, is_call)
    let mut events: Vec<(u64, u8, usize, bool)> = Vec::with_capacity(ops.len() * 2);
    for (i, op) in ops.iter().enumerate() {
        events.push((op.call, 0, i, true));
        events.push((op.ret.unwrap_or(end), 1, i, false));
    }
    events.sort_by_key(|e| (e.0, e.1, e.2));
    let mut nodes = Vec::with_capacity(events.len() + 1);
    nodes.push(Node {
        op: NONE,
        is_call: false,
        partner: NONE,
        prev: NONE,
        next: if events.is_empty() { NONE } else { 1 },
    });
    let mut return_node = vec![NONE; ops.len()];
    for (k, (_, _, op, is_call)) in events.iter().enumerate() {
        let index = k + 1;
        nodes.push(Node {
            op: *op,
            is_call: *is_call,
            partner: NONE,
            prev: index - 1,
            next: if index < events.len() {
                index + 1
            } else {
                NONE
            },
        });
        if !is_call {
            return_node[*op] = index;
        }
    }
    for node in nodes.iter_mut().skip(1) {
        if node.is_call {
            node.partner = return_node[node.op];
        }
    }
    nodes
}

fn remove(nodes: &mut [Node], i: usize) {
    let Node { prev, next, .. } = nodes[i];
    nodes[prev].next = next;
    if next != NONE {
        nodes[next].prev = prev;
    }
}

fn reinsert(nodes: &mut [Node], i: usize) {
    let Node { prev, next, .. } = nodes[i];
    nodes[prev].next = i;
    if next != NONE {
        nodes[next].prev = i;
    }
}

fn lift(nodes: &mut [Node], call: usize) {
    remove(nodes, call);
    remove(nodes, nodes[call].partner);
}

fn unlift(nodes: &mut [Node], call: usize) {
    reinsert(nodes, nodes[call].partner);
    reinsert(nodes, call);
}
