//! Checkers. One per guarantee of SPEC §5; only the linearizability checker exists yet.

pub mod linear;
pub mod models;
