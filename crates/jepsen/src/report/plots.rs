//! SVG plots of a run: client latency over time and completions per second, each with the
//! fault windows shaded behind the data so that slowdowns can be matched to their cause.

use crate::history::{FaultWindow, Kind, Op, Process};
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::collections::BTreeSet;

/// Size of every plot, in pixels.
const SIZE_PX: (u32, u32) = (1200, 500);
/// The smallest latency drawn, so that a log axis can hold instant operations.
const LATENCY_MS_MIN: f64 = 0.001;
/// The most one-second buckets in a rate plot; completions after the last are not counted.
pub const RATE_BUCKETS_MAX: usize = 86_400;
/// Colours for functions (`0xRRGGBB`), in the order of their sorted names.
const F_COLOURS: [u32; 6] = [0x1f77b4, 0x2ca02c, 0x9467bd, 0x8c564b, 0x17becf, 0xd62728];
/// Colours for fault kinds (`0xRRGGBB`), in the order of their sorted names.
const FAULT_COLOURS: [u32; 4] = [0x787878, 0xa05ac8, 0x3ca05a, 0xc8aa28];
/// Outcomes in the order they are drawn, with their colour in the rate plot.
const OUTCOMES: [(Kind, &str, RGBColor); 3] = [
    (Kind::Ok, "ok", RGBColor(70, 130, 200)),
    (Kind::Fail, "fail", RGBColor(230, 90, 140)),
    (Kind::Info, "info", RGBColor(245, 150, 30)),
];

/// A plot could not be drawn.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlotError {
    /// The drawing library refused.
    #[error("plot: {0}")]
    Draw(String),
}

type Chart<'a, 'b, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, Y>>;

/// Plots the latency (ms, log scale) of completed client operations against time (s),
/// coloured by function, a filled circle when ok, a cross when failed and a hollow circle
/// when unknown, with `windows` shaded.
pub fn latency_svg(ops: &[Op], windows: &[FaultWindow]) -> Result<String, PlotError> {
    let done: Vec<(&Op, (f64, f64))> = client_ops(ops)
        .filter_map(|o| Some((o, seconds(o.completed_at?), o.latency()? as f64 / 1e6)))
        .map(|(o, t, ms)| (o, (t, ms.max(LATENCY_MS_MIN))))
        .collect();
    if done.is_empty() {
        return no_operations();
    }
    let lo = done.iter().map(|d| d.1.1).fold(f64::INFINITY, f64::min) / 1.5;
    let hi = done.iter().map(|d| d.1.1).fold(0.0, f64::max) * 1.5;
    let fs: BTreeSet<&str> = done.iter().map(|d| d.0.f.as_str()).collect();
    let x_end = x_end(ops, windows);
    let labels = ["Latency of client operations", "latency (ms)"];
    plot(labels, x_end, (lo..hi).log_scale(), windows, |chart| {
        for (i, f) in fs.iter().enumerate() {
            let colour = rgb(F_COLOURS[i % F_COLOURS.len()]);
            for (kind, name, _) in OUTCOMES {
                let mine = done.iter().filter(|d| d.0.f == *f && d.0.outcome == kind);
                let points: Vec<(f64, f64)> = mine.map(|d| d.1).collect();
                if !points.is_empty() {
                    draw_points(chart, &points, kind, colour, format!("{f} {name}"))?;
                }
            }
        }
        Ok(())
    })
}

/// Plots completions per second (1 s buckets) of all client operations, one line per
/// outcome, with `windows` shaded.
pub fn rate_svg(ops: &[Op], windows: &[FaultWindow]) -> Result<String, PlotError> {
    let done: Vec<(Kind, usize)> = client_ops(ops)
        .filter_map(|o| Some((o.outcome, (o.completed_at? / 1_000_000_000) as usize)))
        .filter(|(_, bucket)| *bucket < RATE_BUCKETS_MAX)
        .collect();
    let Some(last) = done.iter().map(|d| d.1).max() else {
        return no_operations();
    };
    let mut counts = vec![[0u32; 3]; last + 1];
    for (kind, bucket) in &done {
        if let Some(slot) = OUTCOMES.iter().position(|o| o.0 == *kind) {
            counts[*bucket][slot] += 1;
        }
    }
    let hi = counts.iter().flatten().copied().max().unwrap_or(0).max(1) as f64 * 1.1;
    let x_end = x_end(ops, windows).max(last as f64 + 1.0);
    let labels = ["Client completions per second", "completions per second"];
    plot(labels, x_end, 0.0..hi, windows, |chart| {
        for (slot, (_, name, colour)) in OUTCOMES.into_iter().enumerate() {
            let point = |(b, c): (u32, &[u32; 3])| (f64::from(b) + 0.5, f64::from(c[slot]));
            let line = LineSeries::new((0..).zip(&counts).map(point), colour.stroke_width(2));
            let mark =
                move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(2));
            let series = chart.draw_series(line).map_err(draw_err)?;
            series.label(name).legend(mark);
        }
        Ok(())
    })
}

/// Draws a plot of `[caption, y axis description]` from time 0 to `x_end` seconds against
/// `y`: the axes, the shaded `windows`, whatever `draw` adds, and the legend.
fn plot<Y, F>(
    [caption, y_desc]: [&str; 2],
    x_end: f64,
    y: Y,
    windows: &[FaultWindow],
    draw: F,
) -> Result<String, PlotError>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
    F: FnOnce(&mut Chart<'_, '_, Y::CoordDescType>) -> Result<(), PlotError>,
{
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE_PX).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let mut builder = ChartBuilder::on(&root);
        builder.caption(caption, ("sans-serif", 20)).margin(10);
        builder.x_label_area_size(40).y_label_area_size(70);
        let chart = builder.build_cartesian_2d(0.0..x_end, y);
        let mut chart = chart.map_err(draw_err)?;
        let mut mesh = chart.configure_mesh();
        mesh.x_desc("time (s)").y_desc(y_desc);
        mesh.draw().map_err(draw_err)?;
        let y_span = chart.y_range();
        shade_windows(&mut chart, windows, (y_span.start, y_span.end))?;
        draw(&mut chart)?;
        let mut legend = chart.configure_series_labels();
        legend.position(SeriesLabelPosition::UpperRight);
        legend.border_style(BLACK).background_style(WHITE.mix(0.85));
        legend.draw().map_err(draw_err)?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

fn client_ops(ops: &[Op]) -> impl Iterator<Item = &Op> {
    ops.iter().filter(|o| o.process != Process::Nemesis)
}

fn rgb(hex: u32) -> RGBColor {
    let [_, r, g, b] = hex.to_be_bytes();
    RGBColor(r, g, b)
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The right end of the time axis: the last completion, invocation or fault, in seconds.
fn x_end(ops: &[Op], windows: &[FaultWindow]) -> f64 {
    let ops_end = ops.iter().map(|o| o.completed_at.unwrap_or(o.call));
    let end = ops_end.chain(windows.iter().map(|w| w.end));
    (seconds(end.fold(0, u64::max)) * 1.02).max(1.0)
}

/// Draws one series of points: filled circles for ok, crosses for fail, hollow circles for
/// info.
fn draw_points<Y: Ranged<ValueType = f64>>(
    chart: &mut Chart<'_, '_, Y>,
    points: &[(f64, f64)],
    kind: Kind,
    colour: RGBColor,
    label: String,
) -> Result<(), PlotError> {
    let at = points.iter().copied();
    let (filled, bold) = (colour.filled(), colour.stroke_width(2));
    let drawn = match kind {
        Kind::Ok => chart.draw_series(at.map(|p| Circle::new(p, 3, filled))),
        Kind::Fail => chart.draw_series(at.map(|p| Cross::new(p, 4, bold))),
        Kind::Info | Kind::Invoke => chart.draw_series(at.map(|p| Circle::new(p, 4, bold))),
    };
    let series = drawn.map_err(draw_err)?.label(label);
    match kind {
        Kind::Ok => series.legend(move |p| Circle::new(p, 3, filled)),
        Kind::Fail => series.legend(move |p| Cross::new(p, 4, bold)),
        Kind::Info | Kind::Invoke => series.legend(move |p| Circle::new(p, 4, bold)),
    };
    Ok(())
}

/// Shades each window across the y range `(lo, hi)`, labels it with its kind and adds one
/// legend entry per kind.
fn shade_windows<Y: Ranged<ValueType = f64>>(
    chart: &mut Chart<'_, '_, Y>,
    windows: &[FaultWindow],
    (lo, hi): (f64, f64),
) -> Result<(), PlotError> {
    let kinds: BTreeSet<&str> = windows.iter().map(|w| w.kind.as_str()).collect();
    let span = |w: &FaultWindow| [(seconds(w.start), lo), (seconds(w.end), hi)];
    for (i, kind) in kinds.into_iter().enumerate() {
        let colour = rgb(FAULT_COLOURS[i % FAULT_COLOURS.len()]);
        let (shade, mark) = (colour.mix(0.15).filled(), colour.mix(0.3).filled());
        let mine = || windows.iter().filter(move |w| w.kind == kind);
        let bands = chart.draw_series(mine().map(|w| Rectangle::new(span(w), shade)));
        let legend = move |(x, y)| Rectangle::new([(x, y - 5), (x + 16, y + 5)], mark);
        let bands = bands.map_err(draw_err)?;
        bands.label(format!("fault: {kind}")).legend(legend);
        let font = ("sans-serif", 14).into_font().color(&colour);
        let label =
            |w: &FaultWindow| Text::new(kind.to_owned(), (seconds(w.start), hi), font.clone());
        chart.draw_series(mine().map(label)).map_err(draw_err)?;
    }
    Ok(())
}

/// A plot-sized SVG that says there is nothing to plot.
fn no_operations() -> Result<String, PlotError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE_PX).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let centre = (SIZE_PX.0 as i32 / 2 - 60, SIZE_PX.1 as i32 / 2);
        let text = Text::new("no operations", centre, ("sans-serif", 20).into_font());
        root.draw(&text).map_err(draw_err)?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

fn draw_err<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError::Draw(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const MS: u64 = 1_000_000;

    /// A completed client `f` called at `call` ms that took `latency` ms.
    fn op(i: u64, f: &str, outcome: Kind, call: u64, latency: u64) -> Op {
        let (call, done) = (call * MS, (call + latency) * MS);
        let (process, f, key) = (Process::Client(i % 5), f.into(), None);
        let (args, result, error, node) = (Value::Null, Value::Null, None, None);
        let ret = (outcome != Kind::Info).then_some(done);
        let completed_at = Some(done);
        Op {
            process,
            f,
            key,
            args,
            outcome,
            result,
            error,
            node,
            call,
            ret,
            completed_at,
            index: i,
        }
    }

    fn window(kind: &str, start_s: u64, end_s: u64) -> FaultWindow {
        let (kind, detail, start, end) = (kind.into(), json!(["n1"]), start_s * 1000 * MS, end_s);
        FaultWindow {
            kind,
            detail,
            start,
            end: end * 1000 * MS,
        }
    }

    /// 40 client ops (24 ok) over 4 s, one open op, one nemesis op and three windows.
    fn history() -> (Vec<Op>, Vec<FaultWindow>) {
        let outcomes = [Kind::Ok, Kind::Ok, Kind::Fail, Kind::Info, Kind::Ok];
        let fs = ["read", "write", "cas"];
        let mut ops: Vec<Op> = (0..40)
            .map(|i| {
                op(
                    i,
                    fs[i as usize % 3],
                    outcomes[i as usize % 5],
                    i * 100,
                    1 + i * 7,
                )
            })
            .collect();
        let mut open = op(40, "read", Kind::Info, 3_000, 0);
        open.completed_at = None;
        let mut nemesis = op(41, "kill-start", Kind::Info, 1_000, 100);
        nemesis.process = Process::Nemesis;
        ops.extend([open, nemesis]);
        (
            ops,
            vec![
                window("kill", 1, 2),
                window("<part>", 2, 3),
                window("kill", 3, 4),
            ],
        )
    }

    /// The number of circles, and of hollow ones.
    fn circles(svg: &str) -> (usize, usize) {
        let tags = svg
            .split("<circle")
            .skip(1)
            .filter_map(|c| c.split('>').next());
        let hollow = |t: &str| usize::from(t.contains("fill=\"none\""));
        tags.fold((0, 0), |(n, h), t| (n + 1, h + hollow(t)))
    }

    fn has_text(svg: &str, text: &str) -> bool {
        svg.contains(&format!(">\n{text}\n</text>"))
    }

    #[test]
    fn latency_plot_draws_every_completed_client_op_and_the_windows() {
        let (ops, windows) = history();
        let svg = latency_svg(&ops, &windows).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        let texts = [
            "latency (ms)",
            "write ok",
            "cas fail",
            "read info",
            "fault: kill",
        ];
        for text in texts {
            assert!(has_text(&svg, text), "lacks {text}");
        }
        // 24 ok and 8 info points, and a legend mark for each function of each.
        assert_eq!(circles(&svg), (24 + 3 + 8 + 3, 8 + 3));
        assert!(svg.contains("&lt;part&gt;") && !svg.contains("<part>"));
        assert_eq!(
            svg.matches(">\nkill\n</text>").count(),
            2,
            "a label per window"
        );
    }

    #[test]
    fn rate_plot_has_one_line_per_outcome() {
        let (ops, windows) = history();
        let svg = rate_svg(&ops, &windows).unwrap();
        for text in [
            "completions per second",
            "ok",
            "fail",
            "info",
            "fault: &lt;part&gt;",
        ] {
            assert!(has_text(&svg, text), "lacks {text}");
        }
        for (_, name, RGBColor(r, g, b)) in OUTCOMES {
            let stroke = format!("stroke=\"#{r:02X}{g:02X}{b:02X}\"");
            assert_eq!(
                svg.matches(&stroke).count(),
                2,
                "{name}: a line and its legend mark"
            );
        }
    }

    #[test]
    fn empty_histories_say_so() {
        let mut nemesis = op(0, "kill-start", Kind::Info, 0, 1);
        nemesis.process = Process::Nemesis;
        for ops in [Vec::new(), vec![nemesis]] {
            let plots = [latency_svg(&ops, &[]), rate_svg(&ops, &[])];
            for svg in plots.map(Result::unwrap) {
                assert!(has_text(&svg, "no operations") && svg.contains("</svg>"));
            }
        }
    }
}
