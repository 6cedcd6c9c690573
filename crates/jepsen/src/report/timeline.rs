//! Placeholder until the timeline lands.
use crate::history::{FaultWindow, Op};
/// Renders the timeline.
pub fn render(title: &str, ops: &[Op], windows: &[FaultWindow], highlight: &[u64]) -> String {
    format!(
        "{title} {} {} {}",
        ops.len(),
        windows.len(),
        highlight.len()
    )
}
