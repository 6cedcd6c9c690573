//! The timeline page: one column per process, time flowing down, one box per operation
//! coloured by its outcome, with fault windows shaded across every column.
//!
//! The page is self-contained (inline CSS, no scripts, no external resources) so that it
//! can be opened straight from a run's directory or attached to a bug report.

use crate::history::{FaultWindow, Kind, Op, Process};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// The most operations drawn; later ones (by call time) are left out and counted.
pub const OPS_MAX: usize = 10_000;
/// The tallest the time axis gets, in pixels.
const HEIGHT_PX_MAX: f64 = 20_000.0;
/// The largest scale, so that short histories do not stretch into a tall page.
const PX_PER_MS_MAX: f64 = 5.0;
/// Every box is at least this tall, so instant operations stay visible.
const BOX_HEIGHT_PX_MIN: f64 = 2.0;
/// Width of one process column.
const COLUMN_PX: usize = 160;
/// Width of the time axis on the left.
const GUTTER_PX: usize = 80;
/// Characters of value/result text shown inside a box.
const SHORT_CHARS_MAX: usize = 28;
/// Shades for fault kinds (translucent `#rgba`), in the order of their sorted names.
const FAULT_COLOURS: [&str; 5] = ["#8883", "#a5c3", "#5a63", "#ca43", "#47c3"];

/// The page's whole style sheet.
const CSS: &str = "body{font-family:sans-serif;margin:12px;color:#222}\
h1{font-size:20px;margin:0 0 6px}.summary{margin:0 0 10px;font-size:13px}\
.legend span{display:inline-block;padding:1px 8px;margin-right:6px;border:1px solid #999}\
.heads{position:sticky;top:0;z-index:5;background:#fff;height:24px;border-bottom:1px solid #999}\
.head{position:absolute;top:4px;font-weight:bold;font-size:13px;text-align:center}\
.plot{position:relative;margin-top:4px}.fault{position:absolute;z-index:1}\
.tick{position:absolute;left:0;font-size:11px;color:#555;border-top:1px solid #ddd}\
.fault-label{position:absolute;left:0;top:14px;text-align:right;overflow:hidden;\
font:italic bold 11px sans-serif;color:#333}\
.op{position:absolute;z-index:2;box-sizing:border-box;overflow:hidden;font-size:11px;\
line-height:13px;padding:0 3px;border:1px solid #0004;border-radius:2px;white-space:nowrap}\
.ok{background:#b3dcf5}.info{background:#ffb74d}.fail{background:#f8b8c8}.open{background:#ddd}\
.op.hl,.legend .hl{border:3px solid #d00000;z-index:3}";

/// The key to the colours, shown under the title.
const LEGEND: &str = "<span class=\"legend\"><span class=\"ok\">ok</span>\
<span class=\"info\">info</span><span class=\"fail\">fail</span>\
<span class=\"hl\">counterexample</span></span>";

/// Renders the timeline of `ops` as a self-contained HTML page, shading `windows` and
/// outlining the operations whose `index` is in `highlight`.
pub fn render(title: &str, ops: &[Op], windows: &[FaultWindow], highlight: &[u64]) -> String {
    let mut page = String::new();
    // Writing into a String cannot fail.
    let _ = write_page(&mut page, title, ops, windows, highlight);
    page
}

/// The vertical scale shared by boxes, bands and ticks.
struct Scale {
    origin_ns: u64,
    end_ns: u64,
    px_per_ms: f64,
}

impl Scale {
    /// Spans the operations shown and, unless some were left out, every window: a capped
    /// page ends with its last operation. At most `HEIGHT_PX_MAX` tall.
    fn new(ops: &[&Op], windows: &[FaultWindow], capped: bool) -> Scale {
        let op_spans = ops
            .iter()
            .map(|o| (o.call, o.completed_at.unwrap_or(o.call)));
        let windows = windows.iter().filter(|_| !capped);
        let mut spans = op_spans.chain(windows.map(|w| (w.start, w.end)));
        let first = spans.next().unwrap_or((0, 0));
        let (origin_ns, end_ns) = spans.fold(first, |(a, b), (s, e)| (a.min(s), b.max(e)));
        let span_ms = (end_ns.saturating_sub(origin_ns) as f64 / 1e6).max(1.0);
        let px_per_ms = (HEIGHT_PX_MAX / span_ms).min(PX_PER_MS_MAX);
        Scale {
            origin_ns,
            end_ns,
            px_per_ms,
        }
    }

    fn y(&self, t_ns: u64) -> f64 {
        t_ns.saturating_sub(self.origin_ns) as f64 / 1e6 * self.px_per_ms
    }

    /// The band from `start_ns` to `end_ns`, cut at the end of the page, as CSS `top` and
    /// `height`.
    fn band(&self, start_ns: u64, end_ns: u64) -> String {
        let top = self.y(start_ns);
        let height = (self.y(end_ns.min(self.end_ns)) - top).max(BOX_HEIGHT_PX_MIN);
        format!("top:{top:.1}px;height:{height:.1}px")
    }
}

fn write_page(
    out: &mut String,
    title: &str,
    ops: &[Op],
    windows: &[FaultWindow],
    highlight: &[u64],
) -> std::fmt::Result {
    let mut kept: Vec<&Op> = ops.iter().collect();
    kept.sort_by_key(|o| (o.call, o.index));
    let left_out = kept.len().saturating_sub(OPS_MAX);
    kept.truncate(OPS_MAX);
    let processes: BTreeSet<Process> = kept.iter().map(|o| o.process).collect();
    let columns: BTreeMap<Process, usize> = processes.into_iter().zip(0..).collect();
    let scale = Scale::new(&kept, windows, left_out > 0);
    let width_px = GUTTER_PX + COLUMN_PX * columns.len().max(1);
    let (title, n_ops, n_columns) = (escape(title), kept.len(), columns.len());
    let (n_windows, ms_per_px) = (windows.len(), 1.0 / scale.px_per_ms);
    let note = match left_out {
        0 => String::new(),
        n => format!(" <b>{n} operations left out</b> (only the first {OPS_MAX} by call time)."),
    };
    write!(
        out,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>\
         <style>{CSS}</style></head><body>\n<h1>{title}</h1>\n<p class=\"summary\">{n_ops} \
         operations, {n_columns} processes, {n_windows} fault windows, {ms_per_px:.3} ms per \
         pixel.{note} {LEGEND}</p>\n<div class=\"heads\" style=\"width:{width_px}px\">\n"
    )?;
    for (process, col) in &columns {
        let style = format!("left:{}px;width:{COLUMN_PX}px", GUTTER_PX + col * COLUMN_PX);
        div(out, "head", &style, "", &process_name(*process))?;
    }
    let height_px = scale.y(scale.end_ns) + 20.0;
    let style = format!("width:{width_px}px;height:{height_px:.0}px");
    write!(out, "</div>\n<div class=\"plot\" style=\"{style}\">")?;
    write_ticks(out, &scale, width_px)?;
    write_windows(out, &scale, windows, width_px)?;
    let highlight: BTreeSet<u64> = highlight.iter().copied().collect();
    for op in &kept {
        let col = columns.get(&op.process).copied().unwrap_or(0);
        write_op(out, &scale, op, col, highlight.contains(&op.index))?;
    }
    out.push_str("</div>\n</body></html>\n");
    Ok(())
}

/// Writes a `div`; `tip` is escaped here, `inner` must already be HTML.
fn div(out: &mut String, class: &str, style: &str, tip: &str, inner: &str) -> std::fmt::Result {
    write!(out, "<div class=\"{class}\" style=\"{style}\"")?;
    if !tip.is_empty() {
        write!(out, " title=\"{}\"", escape(tip))?;
    }
    writeln!(out, ">{inner}</div>")
}

fn write_ticks(out: &mut String, scale: &Scale, width_px: usize) -> std::fmt::Result {
    let step_ms = tick_step_ms(200.0 / scale.px_per_ms);
    let span_ms = scale.end_ns.saturating_sub(scale.origin_ns) as f64 / 1e6;
    let origin_ms = scale.origin_ns as f64 / 1e6;
    // At most HEIGHT_PX_MAX / 200 ticks: one every 200 px or more.
    let mut tick_ms = 0.0;
    while tick_ms <= span_ms {
        let style = format!("top:{:.1}px;width:{width_px}px", tick_ms * scale.px_per_ms);
        let label = format!("{:.0} ms", origin_ms + tick_ms);
        div(out, "tick", &style, "", &label)?;
        tick_ms += step_ms;
    }
    Ok(())
}

/// The smallest 1, 2 or 5 times a power of ten that is at least `ms_min` (up to 1e40).
fn tick_step_ms(ms_min: f64) -> f64 {
    let mut step = 1.0;
    // 1, 2, 5, 10, 20, 50, …: three steps per power of ten.
    for factor in [2.0, 2.5, 2.0].into_iter().cycle().take(120) {
        if step >= ms_min {
            break;
        }
        step *= factor;
    }
    step
}

fn write_windows(
    out: &mut String,
    scale: &Scale,
    windows: &[FaultWindow],
    width_px: usize,
) -> std::fmt::Result {
    let kinds: BTreeSet<&str> = windows.iter().map(|w| w.kind.as_str()).collect();
    for w in windows.iter().filter(|w| w.start <= scale.end_ns) {
        let shade = kinds.iter().position(|k| *k == w.kind).unwrap_or(0) % FAULT_COLOURS.len();
        // The band spans the gutter too, where its label stays clear of the boxes.
        let (band, colour) = (scale.band(w.start, w.end), FAULT_COLOURS[shade]);
        let style = format!("{band};left:0;width:{width_px}px;background:{colour}");
        let (detail, start, end) = (&w.detail, ms(w.start), ms(w.end));
        let tip = format!("{} {detail}\n{start} – {end}", w.kind);
        let (kind, label_px) = (escape(&w.kind), GUTTER_PX - 6);
        let label =
            format!("<span class=\"fault-label\" style=\"width:{label_px}px\">{kind}</span>");
        div(out, "fault", &style, &tip, &label)?;
    }
    Ok(())
}

fn write_op(
    out: &mut String,
    scale: &Scale,
    op: &Op,
    col: usize,
    highlighted: bool,
) -> std::fmt::Result {
    let outcome = match op.outcome {
        Kind::Ok => "ok",
        Kind::Info => "info",
        Kind::Fail => "fail",
        Kind::Invoke => "open",
    };
    let class = format!("op {outcome}{}", if highlighted { " hl" } else { "" });
    let band = scale.band(op.call, op.completed_at.unwrap_or(scale.end_ns));
    let (left, width) = (GUTTER_PX + col * COLUMN_PX + 3, COLUMN_PX - 6);
    let style = format!("{band};left:{left}px;width:{width}px");
    let mut tip = String::new();
    write_tooltip(&mut tip, op)?;
    let (f, key) = (escape(&op.f), escape(op.key.as_deref().unwrap_or("")));
    let inner = format!("<b>{f}</b> {key} {}", escape(&short(op)));
    div(out, &class, &style, &tip, &inner)
}

fn write_tooltip(tip: &mut String, op: &Op) -> std::fmt::Result {
    let (name, index, f) = (process_name(op.process), op.index, &op.f);
    write!(tip, "{name} #{index}\nf: {f}")?;
    if let Some(key) = &op.key {
        write!(tip, "\nkey: {key}")?;
    }
    let (args, outcome, result) = (&op.args, op.outcome, &op.result);
    write!(tip, "\nargs: {args}\noutcome: {outcome:?}")?;
    write!(tip, "\nresult: {result}")?;
    if let Some(error) = &op.error {
        write!(tip, "\nerror: {error}")?;
    }
    if let Some(node) = &op.node {
        write!(tip, "\nnode: {node}")?;
    }
    write!(tip, "\ncall: {}", ms(op.call))?;
    match (op.completed_at, op.latency()) {
        (Some(done), Some(lat)) => write!(tip, "\ncompleted: {}\nlatency: {}", ms(done), ms(lat)),
        _ => write!(tip, "\nnever completed"),
    }
}

/// What a box says after its function and key: the error, else the result, else the arguments.
fn short(op: &Op) -> String {
    let value = [&op.result, &op.args].into_iter().find(|v| !v.is_null());
    let text = match (&op.error, value) {
        (Some(error), _) => error.clone(),
        (None, None) => String::new(),
        (None, Some(Value::String(s))) => s.clone(),
        (None, Some(other)) => other.to_string(),
    };
    if text.chars().count() <= SHORT_CHARS_MAX {
        return text;
    }
    let mut cut: String = text.chars().take(SHORT_CHARS_MAX - 1).collect();
    cut.push('…');
    cut
}

fn process_name(process: Process) -> String {
    match process {
        Process::Client(n) => format!("process {n}"),
        Process::Nemesis => "nemesis".to_owned(),
    }
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// Escapes text for HTML content and double- or single-quoted attributes.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A `read` of key `k1`; times in ms.
    fn op(index: u64, process: Process, outcome: Kind, call: u64, done: Option<u64>) -> Op {
        let done = done.map(|t| t * 1_000_000);
        Op {
            process,
            f: "read".into(),
            key: Some("k1".into()),
            args: json!({"value": index}),
            outcome,
            result: Value::Null,
            error: None,
            node: Some("n1".into()),
            call: call * 1_000_000,
            ret: done.filter(|_| outcome != Kind::Info),
            completed_at: done,
            index,
        }
    }

    /// A `kill` window; times in ms.
    fn window(start: u64, end: u64) -> FaultWindow {
        let (kind, detail) = ("kill".to_owned(), json!(["n1"]));
        let (start, end) = (start * 1_000_000, end * 1_000_000);
        FaultWindow {
            kind,
            detail,
            start,
            end,
        }
    }

    fn boxes(page: &str) -> usize {
        page.matches("<div class=\"op ").count()
    }

    #[test]
    fn one_box_per_op_in_process_columns() {
        let ops = vec![
            op(0, Process::Client(10), Kind::Ok, 0, Some(5)),
            op(1, Process::Client(2), Kind::Fail, 1, Some(3)),
            op(2, Process::Nemesis, Kind::Info, 2, Some(2)),
            op(3, Process::Client(3), Kind::Info, 3, None),
        ];
        let page = render("run 7", &ops, &[window(2, 9)], &[1]);
        assert_eq!(boxes(&page), 4);
        assert_eq!(page.matches("class=\"op fail hl\"").count(), 1);
        assert_eq!(page.matches("<div class=\"fault\"").count(), 1);
        let heads = ["process 2<", "process 3<", "process 10<", "nemesis<"];
        let [p2, p3, p10, nemesis] = heads.map(|s| page.find(s));
        assert!(p2 < p3 && p3 < p10 && p10 < nemesis && nemesis.is_some());
        assert!(page.contains("latency: 5.000 ms") && page.contains("never completed"));
        // The open op runs from 3 ms to the end of the history (9 ms), at 5 px per ms.
        assert!(page.contains("top:15.0px;height:30.0px"));
        // An instant op still gets a box.
        assert!(page.contains("top:10.0px;height:2.0px"));
        assert!(!page.contains("src=") && !page.contains("href="));
    }

    #[test]
    fn text_is_escaped() {
        let mut o = op(0, Process::Client(1), Kind::Ok, 0, Some(1));
        o.f = "<script>alert(1)</script>".into();
        o.key = Some("\"k\" & 'q'".into());
        o.result = json!("<script>");
        let page = render("<script>title</script>", &[o], &[], &[]);
        assert!(!page.contains("<script>"), "{page}");
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("&quot;k&quot; &amp; &#39;q&#39;"));
    }

    #[test]
    fn the_cap_keeps_the_earliest_ops_and_says_how_many_are_left_out() {
        let ops: Vec<Op> = (0..OPS_MAX as u64 + 25)
            .rev()
            .map(|i| op(i, Process::Client(i % 4), Kind::Ok, i, Some(i + 1)))
            .collect();
        let windows = [window(9_999, 60_000), window(20_000, 30_000)];
        let page = render("big", &ops, &windows, &[]);
        assert_eq!(boxes(&page), OPS_MAX);
        assert!(page.contains("25 operations left out"));
        // The page ends with the last op shown (10 s at 2 px per ms) and cuts the window
        // open then; the window that starts after it is not drawn.
        assert!(page.contains("height:20020px") && page.contains("top:19998.0px;height:2.0px"));
        assert_eq!(page.matches("<div class=\"fault\"").count(), 1);
        assert!(page.contains("process 0 #0\n") && !page.contains(&format!("#{OPS_MAX}\n")));
    }

    #[test]
    fn ticks_step_by_1_2_5() {
        assert_eq!(
            [130.0, 0.4, 6.0, 2e6].map(tick_step_ms),
            [200.0, 1.0, 10.0, 2e6]
        );
    }
}
