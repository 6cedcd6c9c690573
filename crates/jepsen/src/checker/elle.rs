//! Strict serializability of list-append transactions, in the manner of Elle (Kingsbury and
//! Alvaro, VLDB 2020): each key holds a list, a transaction appends unique elements and reads
//! whole lists. Because a list shows the order of every append it contains, the reads give
//! each key's version order, and from it the dependencies between transactions:
//!
//! - `ww`: T1 appended the element just before T2's in a key's order;
//! - `wr`: T2 read a list whose last element T1 appended;
//! - `rw`: T1 read a list and T2 appended the element that follows it (an anti-dependency);
//! - `rt`: T1 completed before T2 was invoked (real time, for *strict* serializability).
//!
//! A cycle is an anomaly, named by the weakest kind of edge it needs: `G0` (ww only), `G1c`
//! (ww and wr), `G-single` (exactly one rw), `G2` (more), and `-realtime` when it needs a
//! real-time edge. Besides cycles: reads that disagree on a key's order, duplicated or
//! unknown elements, reads of failed (`G1a`) or intermediate (`G1b`) appends, a transaction
//! that does not see its own appends (`internal`), and an acknowledged append missing from a
//! read that began after it (`lost-append`).
//!
//! A history records each transaction as `f = "txn"`, its invocation's args a list of
//! micro-operations `["append", key, element]` or `["r", key, null]`, and an ok completion's
//! result the same list with every read's list filled in.

use super::{Anomaly, CheckConfig, CheckResult};
use crate::history::Op;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// Write-write dependency.
const WW: u8 = 1;
/// Write-read dependency.
const WR: u8 = 2;
/// Read-write anti-dependency.
const RW: u8 = 4;
/// Real-time order.
const RT: u8 = 8;

/// One micro-operation of a transaction.
#[derive(Clone, Debug, PartialEq)]
enum Micro {
    Append(String, u64),
    Read(String, Option<Vec<u64>>),
}

/// Parses a list of micro-operations; `None` if it is not one.
fn micros(value: &Value) -> Option<Vec<Micro>> {
    value
        .as_array()?
        .iter()
        .map(|m| {
            let m = m.as_array()?;
            let key = m.get(1)?.as_str()?.to_owned();
            match m.first()?.as_str()? {
                "append" => Some(Micro::Append(key, m.get(2)?.as_u64()?)),
                "r" => {
                    let list = match m.get(2)? {
                        Value::Null => None,
                        v => Some(
                            v.as_array()?
                                .iter()
                                .map(Value::as_u64)
                                .collect::<Option<Vec<_>>>()?,
                        ),
                    };
                    Some(Micro::Read(key, list))
                }
                _ => None,
            }
        })
        .collect()
}

/// A transaction of the history: the op, and its micro-operations (with the reads' lists
/// when it completed ok).
struct Txn<'a> {
    op: &'a Op,
    micros: Vec<Micro>,
}

/// The dependency graph over transactions (indices into the checked list), edges merged
/// into kind masks.
#[derive(Default)]
struct Graph {
    edges: HashMap<(usize, usize), u8>,
}

impl Graph {
    fn add(&mut self, from: usize, to: usize, kind: u8) {
        if from != to {
            *self.edges.entry((from, to)).or_default() |= kind;
        }
    }

    /// Adjacency lists of the edges with a kind in `mask`.
    fn adjacency(&self, n: usize, mask: u8) -> Vec<Vec<(usize, u8)>> {
        let mut adj = vec![Vec::new(); n];
        for (&(a, b), &kinds) in &self.edges {
            if kinds & mask != 0 {
                adj[a].push((b, kinds & mask));
            }
        }
        for list in &mut adj {
            list.sort_unstable();
        }
        adj
    }
}

/// Strongly connected components with more than one member (Tarjan's, without recursion).
fn components(adj: &[Vec<(usize, u8)>]) -> Vec<Vec<usize>> {
    let n = adj.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut out = Vec::new();
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        // (node, position in its adjacency list)
        let mut work = vec![(root, 0usize)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut at)) = work.last_mut() {
            if let Some(&(w, _)) = adj[v].get(*at) {
                *at += 1;
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort_unstable();
                    out.push(component);
                }
            }
        }
    }
    out
}

/// A shortest path from `from` to `to` inside `within` over edges of `mask`, as the edges
/// taken: (from, to, kinds).
fn path(
    adj: &[Vec<(usize, u8)>],
    within: &HashSet<usize>,
    from: usize,
    to: usize,
    mask: u8,
) -> Option<Vec<(usize, usize, u8)>> {
    let mut came: HashMap<usize, (usize, u8)> = HashMap::new();
    let mut queue = VecDeque::from([from]);
    let mut seen = HashSet::from([from]);
    while let Some(v) = queue.pop_front() {
        if v == to {
            let mut edges = Vec::new();
            let mut at = to;
            while at != from {
                let (prev, kinds) = came[&at];
                edges.push((prev, at, kinds));
                at = prev;
            }
            edges.reverse();
            return Some(edges);
        }
        for &(w, kinds) in &adj[v] {
            if kinds & mask != 0 && within.contains(&w) && seen.insert(w) {
                came.insert(w, (v, kinds & mask));
                queue.push_back(w);
            }
        }
    }
    None
}

/// The name of a cycle: by the rw edges it needs, and whether it needs real time.
fn cycle_kind(cycle: &[(usize, usize, u8)]) -> String {
    // An edge counts as rw (or rt) only if it has no weaker kind to stand for it.
    let needs = |kinds: u8, kind: u8| kinds & kind != 0 && kinds & (WW | WR) == 0;
    let rw = cycle.iter().filter(|e| needs(e.2 & !RT, RW)).count();
    let realtime = cycle.iter().any(|e| e.2 & (WW | WR | RW) == 0);
    let wr = cycle.iter().any(|e| e.2 & WR != 0 && e.2 & WW == 0);
    let base = match rw {
        0 if wr => "G1c",
        0 => "G0",
        1 => "G-single",
        _ => "G2",
    };
    if realtime {
        format!("{base}-realtime")
    } else {
        base.to_owned()
    }
}

fn edge_names(kinds: u8) -> &'static str {
    if kinds & WW != 0 {
        "ww"
    } else if kinds & WR != 0 {
        "wr"
    } else if kinds & RW != 0 {
        "rw"
    } else {
        "rt"
    }
}

/// Checks list-append transactions for strict serializability.
pub fn list_append(ops: &[Op], config: &CheckConfig) -> CheckResult {
    let mut anomalies = Vec::new();
    // Every transaction that may have happened: ok ones with their reads, info ones with
    // their appends (they may be visible); failed ones only name appends nobody may see.
    let mut txns: Vec<Txn> = Vec::new();
    let mut failed_appends: HashMap<(String, u64), &Op> = HashMap::new();
    for op in ops.iter().filter(|o| o.f == "txn") {
        let parsed = if op.is_ok() {
            micros(&op.result)
        } else {
            micros(&op.args)
        };
        let Some(micros) = parsed else {
            anomalies.push(Anomaly::new(
                "malformed",
                &[op],
                "a txn whose micro-operations cannot be read".into(),
            ));
            continue;
        };
        match op.outcome {
            crate::history::Kind::Fail => {
                for m in micros {
                    if let Micro::Append(k, v) = m {
                        failed_appends.insert((k, v), op);
                    }
                }
            }
            _ => txns.push(Txn { op, micros }),
        }
    }
    let ok_count = txns.iter().filter(|t| t.op.is_ok()).count();

    // Who appended each element, and in which order each transaction appended to a key.
    let mut writer: HashMap<(&str, u64), usize> = HashMap::new();
    for (i, t) in txns.iter().enumerate() {
        for m in &t.micros {
            if let Micro::Append(k, v) = m
                && let Some(&other) = writer.get(&(k.as_str(), *v))
            {
                anomalies.push(Anomaly::new(
                    "duplicate-append",
                    &[txns[other].op, t.op],
                    format!("element {v} of {k} appended twice"),
                ));
            } else if let Micro::Append(k, v) = m {
                writer.insert((k.as_str(), *v), i);
            }
        }
    }

    // Internal consistency, and each key's reads (external ones: before the txn's own
    // appends to it) for the version order.
    let mut reads: BTreeMap<&str, Vec<(usize, &[u64])>> = BTreeMap::new();
    for (i, t) in txns.iter().enumerate() {
        // Per key: the txn's own appends so far, and the list its next read must show
        // (known after its first read of the key).
        let mut own: HashMap<&str, Vec<u64>> = HashMap::new();
        let mut expect: HashMap<&str, Vec<u64>> = HashMap::new();
        for m in &t.micros {
            match m {
                Micro::Append(k, v) => {
                    own.entry(k).or_default().push(*v);
                    if let Some(list) = expect.get_mut(k.as_str()) {
                        list.push(*v);
                    }
                }
                Micro::Read(k, Some(list)) => {
                    let appended = own.get(k.as_str()).map_or(&[][..], Vec::as_slice);
                    let consistent = match expect.get(k.as_str()) {
                        Some(expected) => list == expected,
                        None => list.ends_with(appended),
                    };
                    if !consistent {
                        anomalies.push(Anomaly::new(
                            "internal",
                            &[t.op],
                            format!(
                                "read {list:?} of {k} disagrees with the txn's own earlier reads or appends {appended:?}"
                            ),
                        ));
                    }
                    if !expect.contains_key(k.as_str()) {
                        // The part before the txn's own appends is what it saw of others.
                        let external = &list[..list.len() - appended.len().min(list.len())];
                        reads.entry(k).or_default().push((i, external));
                    }
                    expect.insert(k, list.clone());
                }
                Micro::Read(_, None) => {}
            }
        }
    }

    // Each key's version order: the longest read; every other read must be a prefix of it.
    let mut order: HashMap<&str, &[u64]> = HashMap::new();
    for (k, list) in &reads {
        // The first of the longest, so ties are decided by history order.
        let longest =
            list.iter().map(|r| r.1).fold(
                &[][..],
                |best, l| if l.len() > best.len() { l } else { best },
            );
        for &(i, l) in list {
            if !longest.starts_with(l) {
                anomalies.push(Anomaly::new(
                    "incompatible-order",
                    &[txns[i].op],
                    format!("read {l:?} of {k} is not a prefix of another read {longest:?}"),
                ));
            }
            let mut distinct = HashSet::new();
            if let Some(dup) = l.iter().find(|v| !distinct.insert(**v)) {
                anomalies.push(Anomaly::new(
                    "duplicate-elements",
                    &[txns[i].op],
                    format!("read {l:?} of {k} holds {dup} twice"),
                ));
            }
            for v in l {
                if writer.contains_key(&(*k, *v)) {
                    continue;
                }
                let (kind, why, mut involved) = match failed_appends.get(&(k.to_string(), *v)) {
                    Some(f) => ("G1a", "a failed txn's append", vec![*f]),
                    None => ("garbage-read", "an element nobody appended", vec![]),
                };
                involved.push(txns[i].op);
                anomalies.push(Anomaly::new(
                    kind,
                    &involved,
                    format!("read {l:?} of {k} holds {v}: {why}"),
                ));
            }
            // G1b: the last element read was not its writer's last append to the key.
            if let Some(last) = l.last()
                && let Some(&w) = writer.get(&(*k, *last))
                && w != i
            {
                let appends: Vec<u64> = txns[w]
                    .micros
                    .iter()
                    .filter_map(|m| match m {
                        Micro::Append(key, v) if key == k => Some(*v),
                        _ => None,
                    })
                    .collect();
                if appends.last() != Some(last) {
                    anomalies.push(Anomaly::new(
                        "G1b",
                        &[txns[w].op, txns[i].op],
                        format!("read {l:?} of {k} ends at an intermediate append of its writer"),
                    ));
                }
            }
        }
        order.insert(k, longest);
    }

    // The dependency graph.
    let mut graph = Graph::default();
    for (k, versions) in &order {
        for pair in versions.windows(2) {
            if let (Some(&a), Some(&b)) = (writer.get(&(*k, pair[0])), writer.get(&(*k, pair[1]))) {
                graph.add(a, b, WW);
            }
        }
    }
    for (k, list) in &reads {
        let versions = order.get(k).copied().unwrap_or(&[]);
        for &(i, l) in list {
            if let Some(last) = l.last()
                && let Some(&w) = writer.get(&(*k, *last))
            {
                graph.add(w, i, WR);
            }
            if let Some(next) = versions.get(l.len())
                && versions.starts_with(l)
                && let Some(&w) = writer.get(&(*k, *next))
            {
                graph.add(i, w, RW);
            }
        }
    }
    realtime_edges(&txns, &mut graph);

    // An acknowledged append that a read begun after it does not show, and that no read
    // ever placed (so no cycle can show it).
    for t in txns.iter().filter(|t| t.op.is_ok()) {
        for m in &t.micros {
            let Micro::Append(k, v) = m else { continue };
            if order.get(k.as_str()).is_some_and(|o| o.contains(v)) {
                continue;
            }
            let Some(done) = t.op.ret else { continue };
            let later = reads.get(k.as_str()).and_then(|list| {
                list.iter()
                    .find(|(i, _)| txns[*i].op.is_ok() && txns[*i].op.call > done)
            });
            if let Some(&(i, l)) = later {
                anomalies.push(Anomaly::new(
                    "lost-append",
                    &[t.op, txns[i].op],
                    format!("{v} was appended to {k} before a read of {l:?} began"),
                ));
            }
        }
    }

    let cycles = find_cycles(&graph, txns.len());
    for cycle in &cycles {
        let involved: Vec<&Op> = cycle.iter().map(|e| txns[e.0].op).collect();
        let steps: Vec<String> = cycle
            .iter()
            .map(|e| {
                format!(
                    "{} -{}-> {}",
                    txns[e.0].op.index,
                    edge_names(e.2),
                    txns[e.1].op.index
                )
            })
            .collect();
        anomalies.push(Anomaly::new(
            &cycle_kind(cycle),
            &involved,
            format!("dependency cycle: {}", steps.join(", ")),
        ));
    }

    let count = |mask: u8| graph.edges.values().filter(|k| **k & mask != 0).count();
    let stats = json!({
        "txns": txns.len(),
        "ok": ok_count,
        "failed": failed_appends.values().map(|o| o.index).collect::<HashSet<_>>().len(),
        "keys": order.len(),
        "longest_list": order.values().map(|o| o.len()).max().unwrap_or(0),
        "edges": {"ww": count(WW), "wr": count(WR), "rw": count(RW), "rt": count(RT)},
    });
    CheckResult::from(
        "list-append",
        "strict serializability of txns (Elle list-append: G0, G1a-c, G-single, G2, real time)",
        anomalies,
        ok_count >= config.min_ok_ops,
        stats,
    )
}

/// Real-time edges, transitively reduced: each transaction gets an edge from every
/// completed one on the "frontier" (completed, and not known to precede another completed
/// one that also completed before this invocation). The frontier is at most as large as
/// the concurrency, so the edges stay O(n × concurrency).
fn realtime_edges(txns: &[Txn], graph: &mut Graph) {
    // (time, 0 = invocation / 1 = completion, txn)
    let mut events: Vec<(u64, u8, usize)> = Vec::new();
    for (i, t) in txns.iter().enumerate() {
        events.push((t.op.call, 0, i));
        if t.op.is_ok()
            && let Some(ret) = t.op.ret
        {
            events.push((ret, 1, i));
        }
    }
    events.sort_unstable();
    let mut frontier: Vec<usize> = Vec::new();
    for (_, what, i) in events {
        if what == 0 {
            for &f in &frontier {
                graph.add(f, i, RT);
            }
        } else {
            let call = txns[i].op.call;
            frontier.retain(|&f| txns[f].op.ret.is_none_or(|r| r >= call));
            frontier.push(i);
        }
    }
}

/// One cycle per strongly connected component, the weakest first: ww, then ww+wr, then
/// with rw (a cycle with a single rw edge if there is one), then with real time. A
/// component sharing a transaction with one already reported is left out: its cycle would
/// mostly repeat that one.
fn find_cycles(graph: &Graph, n: usize) -> Vec<Vec<(usize, usize, u8)>> {
    let mut found = Vec::new();
    let mut covered: HashSet<usize> = HashSet::new();
    for mask in [WW, WW | WR, WW | WR | RW, WW | WR | RW | RT] {
        let adj = graph.adjacency(n, mask);
        for component in components(&adj) {
            if component.iter().any(|v| covered.contains(v)) {
                continue;
            }
            let within: HashSet<usize> = component.iter().copied().collect();
            if let Some(cycle) = cycle_in(&adj, &within, mask) {
                covered.extend(component.iter().copied());
                found.push(cycle);
            }
        }
    }
    found
}

/// Most rw edges tried when looking for a `G-single` cycle in one component.
const RW_TRIES: usize = 50;

/// A cycle inside the component `within` over `mask`. With rw edges, first one that
/// closes a single rw edge through ww and wr edges (`G-single`).
fn cycle_in(
    adj: &[Vec<(usize, u8)>],
    within: &HashSet<usize>,
    mask: u8,
) -> Option<Vec<(usize, usize, u8)>> {
    let mut members: Vec<usize> = within.iter().copied().collect();
    members.sort_unstable();
    let close = |a: usize, b: usize, kinds: u8, over: u8| {
        path(adj, within, b, a, over).map(|rest| {
            let mut cycle = vec![(a, b, kinds)];
            cycle.extend(rest);
            cycle
        })
    };
    if mask & RW != 0 {
        let single = members
            .iter()
            .flat_map(|&a| adj[a].iter().map(move |&(b, kinds)| (a, b, kinds)))
            .filter(|&(_, b, kinds)| {
                kinds & (WW | WR) == 0 && kinds & RW != 0 && within.contains(&b)
            })
            .take(RW_TRIES)
            .find_map(|(a, b, kinds)| close(a, b, kinds, WW | WR));
        if single.is_some() {
            return single;
        }
    }
    let &start = members.first()?;
    let &(b, kinds) = adj[start].iter().find(|(b, _)| within.contains(b))?;
    close(start, b, kinds, mask)
}
