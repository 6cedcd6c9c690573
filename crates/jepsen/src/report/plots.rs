//! Placeholder until the plots land.
use crate::history::{FaultWindow, Op};
/// A plot error.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// Drawing failed.
    #[error("plot: {0}")]
    Draw(String),
}
/// Latency plot.
pub fn latency_svg(ops: &[Op], windows: &[FaultWindow]) -> Result<String, PlotError> {
    Ok(format!("<svg>{} {}</svg>", ops.len(), windows.len()))
}
/// Rate plot.
pub fn rate_svg(ops: &[Op], windows: &[FaultWindow]) -> Result<String, PlotError> {
    Ok(format!("<svg>{} {}</svg>", ops.len(), windows.len()))
}
