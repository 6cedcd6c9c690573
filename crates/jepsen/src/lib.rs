//! Jepsen-style harness for baton (in progress: the linearizability checker is built; the
//! cluster runner, nemeses, workloads and the other checkers come with the rest of the
//! Jepsen issue).
//!
//! # Layout
//! - `checker/linear.rs`: a Wing–Gong–Lowe search in Porcupine's style (memo of linearized
//!   set and state, partitions checked separately, a time budget that answers `Unknown`).
//! - `checker/models.rs`: sequential models (a CAS register, a key-value store).
//! - `parse.rs`: readers for external histories (Jepsen's etcd logs, Porcupine's EDN).

pub mod checker;
pub mod parse;
