//! The report's plots, as SVG files drawn with plotters: line plots (log axes optional),
//! grouped bars and stacked horizontal bars. Every plot carries a footer line saying
//! where and how its numbers were measured.

use super::three_digits;
use crate::error::{Error, Result};
use plotters::chart::{ChartContext, MeshStyle};
use plotters::coord::ranged1d::Ranged;
use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// Plot size in pixels (the SVG scales; this sets the text-to-plot proportions).
const SIZE: (u32, u32) = (1100, 600);
/// Height of the footer strip under the chart (two lines of text).
const FOOTER: u32 = 44;
/// Longest footer line, in characters, before it wraps onto a second line.
const FOOTER_LINE: usize = 165;
const FONT: &str = "sans-serif";

/// A colour-blind-safe palette (Okabe & Ito), in series order.
const COLORS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(240, 228, 66),
    RGBColor(0, 0, 0),
];

/// The colour of series number `i`.
pub fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

fn err(e: impl std::fmt::Display) -> Error {
    Error::new(format!("drawing a plot: {e}"))
}

/// A line of a line plot.
pub struct Line {
    /// Legend text.
    pub name: String,
    /// Points, in x order.
    pub points: Vec<(f64, f64)>,
    /// Colour index (see [`color`]).
    pub color: usize,
    /// Dashed-looking thin line with hollow markers instead of a solid line with filled
    /// ones: tells apart two families of lines that share colours.
    pub hollow: bool,
}

/// A line plot.
pub struct LinePlot<'a> {
    /// Title above the chart.
    pub title: &'a str,
    /// X axis description, with unit.
    pub x_desc: &'a str,
    /// Y axis description, with unit.
    pub y_desc: &'a str,
    /// Logarithmic x axis, ticks at powers of two (sizes and counts).
    pub log_x: bool,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// The lines.
    pub lines: Vec<Line>,
    /// Formats x tick values.
    pub x_format: fn(f64) -> String,
    /// The provenance line under the chart.
    pub footer: &'a str,
}

/// A group of bars: one value per series (`None`: not measured).
pub struct BarPlot<'a> {
    /// Title above the chart.
    pub title: &'a str,
    /// Y axis description, with unit.
    pub y_desc: &'a str,
    /// Group names along the x axis.
    pub groups: Vec<String>,
    /// Series names (legend) and their values per group.
    pub series: Vec<(String, Vec<Option<f64>>)>,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// A horizontal reference line (e.g. 1.0 for normalised values).
    pub reference: Option<f64>,
    /// Formats the value printed above each bar.
    pub value_format: fn(f64) -> String,
    /// The provenance line under the chart.
    pub footer: &'a str,
}

/// Horizontal bars made of consecutive phases, one bar per row.
pub struct StackedBars<'a> {
    /// Title above the chart.
    pub title: &'a str,
    /// X axis description, with unit.
    pub x_desc: &'a str,
    /// Row names (one bar each), top to bottom.
    pub rows: Vec<String>,
    /// Phase names (legend), in order along each bar.
    pub phases: Vec<String>,
    /// Per row, the length of each phase.
    pub values: Vec<Vec<f64>>,
    /// The provenance line under the chart.
    pub footer: &'a str,
}

/// Splits the canvas into the chart area and the footer, and writes the footer (wrapped
/// onto a second line at a ` · ` if it is long).
fn canvas<'b>(
    root: &DrawingArea<SVGBackend<'b>, Shift>,
    footer: &str,
) -> Result<DrawingArea<SVGBackend<'b>, Shift>> {
    root.fill(&WHITE).map_err(err)?;
    let (chart, foot) = root.split_vertically(SIZE.1 - FOOTER);
    let style = TextStyle::from((FONT, 13).into_font()).color(&RGBColor(80, 80, 80));
    let mut lines = wrap(footer, FOOTER_LINE);
    if lines.len() > 2 {
        // Never drop a part: what does not fit on two lines goes on the second.
        let rest = lines.split_off(1).join(" · ");
        lines.push(rest);
    }
    for (i, line) in lines.iter().enumerate() {
        foot.draw_text(line, &style, (10, 4 + 18 * i as i32))
            .map_err(err)?;
    }
    Ok(chart)
}

/// `text` in lines of at most `width` characters, broken after ` · ` separators (a part
/// longer than `width` gets a line of its own).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for part in text.split(" · ") {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 3 + part.chars().count() <= width => {
                l.push_str(" · ");
                l.push_str(part);
            }
            _ => lines.push(part.to_string()),
        }
    }
    lines
}

/// The chart builder every plot starts from: title, margins, label areas (`y_labels`
/// pixels wide for the y axis).
fn builder<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    title: &str,
    y_labels: u32,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(area);
    b.caption(title, (FONT, 22))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(y_labels);
    b
}

/// The fonts and grid colour of every plot's axes.
fn mesh_style<'m, 'a, 'b, X, Y, DB>(
    mesh: &'m mut MeshStyle<'a, 'b, X, Y, DB>,
) -> &'m mut MeshStyle<'a, 'b, X, Y, DB>
where
    X: Ranged,
    Y: Ranged,
    DB: DrawingBackend,
{
    mesh.label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .light_line_style(RGBColor(235, 235, 235))
}

/// Draws the legend box of `chart` at `position`.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> Result<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .label_font((FONT, 14))
        .position(position)
        .draw()
        .map_err(err)
}

/// The range of `values` widened for a log or linear axis, never empty, with room above
/// the data for the legend box (`headroom`: the fraction of the axis left free on top).
fn axis_range(
    values: impl Iterator<Item = f64>,
    log: bool,
    from_zero: bool,
    headroom: f64,
) -> (f64, f64) {
    let v: Vec<f64> = values
        .filter(|x| x.is_finite() && (!log || *x > 0.0))
        .collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() || !hi.is_finite() {
        return if log { (0.1, 10.0) } else { (0.0, 1.0) };
    }
    let free = 1.0 / (1.0 - headroom.clamp(0.0, 0.8));
    if log {
        let (lo, hi) = (lo / 1.5, hi * 1.5);
        (lo, lo * (hi / lo).powf(free))
    } else if from_zero {
        (0.0, if hi > 0.0 { hi * 1.05 * free } else { 1.0 })
    } else {
        let pad = ((hi - lo) * 0.1).max(hi.abs() * 0.05).max(1e-9);
        (lo - pad, lo - pad + (hi - lo + 2.0 * pad) * free)
    }
}

/// Draws a line plot into the SVG file `path`.
pub fn lines(path: &Path, p: &LinePlot) -> Result<()> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    let area = canvas(&root, p.footer)?;
    let xs = axis_range(
        p.lines.iter().flat_map(|l| l.points.iter().map(|q| q.0)),
        p.log_x,
        false,
        0.0,
    );
    // Room on top for the legend: one line of it per data line.
    let ys = axis_range(
        p.lines.iter().flat_map(|l| l.points.iter().map(|q| q.1)),
        p.log_y,
        !p.log_y,
        0.045 * p.lines.len() as f64,
    );
    // The four axis kinds are four coordinate types; one generic body draws them all.
    match (p.log_x, p.log_y) {
        (true, true) => draw_lines(
            &area,
            p,
            (xs.0..xs.1).log_scale().base(2.0),
            (ys.0..ys.1).log_scale(),
        ),
        (true, false) => draw_lines(&area, p, (xs.0..xs.1).log_scale().base(2.0), ys.0..ys.1),
        (false, true) => draw_lines(&area, p, xs.0..xs.1, (ys.0..ys.1).log_scale()),
        (false, false) => draw_lines(&area, p, xs.0..xs.1, ys.0..ys.1),
    }?;
    root.present().map_err(err)
}

fn draw_lines<'a, X, Y>(
    area: &DrawingArea<SVGBackend<'a>, Shift>,
    p: &LinePlot,
    x: X,
    y: Y,
) -> Result<()>
where
    X: plotters::coord::ranged1d::AsRangedCoord<Value = f64>,
    Y: plotters::coord::ranged1d::AsRangedCoord<Value = f64>,
    X::CoordDescType: plotters::coord::ranged1d::ValueFormatter<f64>,
    Y::CoordDescType: plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let mut chart = builder(area, p.title, 80)
        .build_cartesian_2d(x, y)
        .map_err(err)?;
    let x_format = p.x_format;
    mesh_style(&mut chart.configure_mesh())
        .x_desc(p.x_desc)
        .y_desc(p.y_desc)
        .x_label_formatter(&|v| x_format(*v))
        .y_label_formatter(&|v| short_number(*v))
        .draw()
        .map_err(err)?;
    for l in &p.lines {
        let c = color(l.color);
        let style = if l.hollow {
            c.stroke_width(1)
        } else {
            c.stroke_width(2)
        };
        let hollow = l.hollow;
        chart
            .draw_series(LineSeries::new(l.points.iter().copied(), style))
            .map_err(err)?
            .label(l.name.clone())
            .legend(move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (24, 0)], style)
                    + marker_at((12, 0), c, hollow)
            });
        chart
            .draw_series(l.points.iter().map(|&(x, y)| marker_at((x, y), c, hollow)))
            .map_err(err)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

/// A point marker: filled, or a ring for the hollow family of lines.
fn marker_at<C>(at: C, c: RGBColor, hollow: bool) -> Circle<C, i32> {
    let style = if hollow {
        c.stroke_width(1)
    } else {
        c.filled()
    };
    Circle::new(at, 4, style)
}

/// A number in few characters: 0.5, 12, 3.4k, 2M, 1e-3.
pub fn short_number(v: f64) -> String {
    let a = v.abs();
    if v == 0.0 {
        "0".into()
    } else if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e4 {
        format!("{}k", trim(v / 1e3))
    } else if a >= 0.01 {
        trim(v)
    } else {
        format!("{v:.0e}")
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// A time in ns with three significant digits and its unit, no space: 47.6ns, 195µs.
pub fn compact_time(ns: f64) -> String {
    let (v, unit) = if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        (ns, "ns")
    };
    format!("{}{unit}", three_digits(v))
}

/// A byte count with a binary unit: 8 B, 64 KiB, 4 MiB.
pub fn bytes_label(v: f64) -> String {
    if v >= (1 << 20) as f64 {
        format!("{} MiB", trim(v / (1 << 20) as f64))
    } else if v >= 1024.0 {
        format!("{} KiB", trim(v / 1024.0))
    } else {
        format!("{} B", trim(v))
    }
}

/// Draws grouped vertical bars into the SVG file `path`. Groups sit at x = 0, 1, ...;
/// the axis labels are the group names.
pub fn grouped_bars(path: &Path, p: &BarPlot) -> Result<()> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    let area = canvas(&root, p.footer)?;
    let n = p.groups.len().max(1);
    let values = p
        .series
        .iter()
        .flat_map(|(_, v)| v.iter().flatten().copied())
        .chain(p.reference);
    let ys = axis_range(values, p.log_y, !p.log_y, 0.06 * p.series.len() as f64);
    let xs = -0.5..n as f64 - 0.5;
    if p.log_y {
        draw_bars(&area, p, xs, (ys.0..ys.1).log_scale(), ys.0)?;
    } else {
        draw_bars(&area, p, xs, ys.0..ys.1, 0.0)?;
    }
    root.present().map_err(err)
}

/// The name of the group whose centre is at `x`, or nothing between groups.
fn group_label(names: &[String], x: f64) -> String {
    let i = x.round();
    if (x - i).abs() > 1e-6 || i < 0.0 {
        return String::new();
    }
    names.get(i as usize).cloned().unwrap_or_default()
}

fn draw_bars<'a, Y>(
    area: &DrawingArea<SVGBackend<'a>, Shift>,
    p: &BarPlot,
    x: std::ops::Range<f64>,
    y: Y,
    floor: f64,
) -> Result<()>
where
    Y: plotters::coord::ranged1d::AsRangedCoord<Value = f64>,
    Y::CoordDescType: plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let n = p.groups.len();
    let mut chart = builder(area, p.title, 80)
        .build_cartesian_2d(x, y)
        .map_err(err)?;
    let groups = p.groups.clone();
    mesh_style(&mut chart.configure_mesh())
        .disable_x_mesh()
        // Ticks at the integers (step 1 fits in n labels): the group centres.
        .x_labels(n)
        .x_label_formatter(&|v| group_label(&groups, *v))
        .y_label_formatter(&|v| short_number(*v))
        .y_desc(p.y_desc)
        .draw()
        .map_err(err)?;
    let k = p.series.len().max(1) as f64;
    let width = 0.8 / k;
    for (s, (name, values)) in p.series.iter().enumerate() {
        let c = color(s);
        let bars = values.iter().enumerate().filter_map(|(g, v)| {
            let v = (*v)?;
            let x0 = g as f64 - 0.4 + s as f64 * width;
            Some(Rectangle::new(
                [(x0, floor), (x0 + width * 0.92, v)],
                c.filled(),
            ))
        });
        chart
            .draw_series(bars)
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
        let fmt = p.value_format;
        let labels = values.iter().enumerate().filter_map(|(g, v)| {
            let v = (*v)?;
            let xc = g as f64 - 0.4 + (s as f64 + 0.46) * width;
            Some(Text::new(
                fmt(v),
                (xc, v),
                TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom)),
            ))
        });
        chart.draw_series(labels).map_err(err)?;
    }
    if let Some(r) = p.reference {
        chart
            .draw_series(LineSeries::new(
                [(-0.5, r), (n as f64 - 0.5, r)],
                BLACK.stroke_width(1),
            ))
            .map_err(err)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

/// Draws stacked horizontal bars into the SVG file `path`: row `i` at y = i from the top,
/// its phases laid end to end from x = 0.
pub fn stacked_bars(path: &Path, p: &StackedBars) -> Result<()> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    let area = canvas(&root, p.footer)?;
    let n = p.rows.len().max(1);
    let total = p
        .values
        .iter()
        .map(|v| v.iter().sum::<f64>())
        .fold(0.0, f64::max);
    let (_, hi) = axis_range(std::iter::once(total), false, true, 0.0);
    // Rows from the top: row i at y = n-1-i.
    let rows: Vec<String> = p.rows.iter().rev().cloned().collect();
    let top = n as f64 + 0.3 * p.phases.len() as f64;
    let mut chart = builder(&area, p.title, 110)
        // Rows below, free space above them for the legend box.
        .build_cartesian_2d(0.0..hi * 1.2, -0.5..n as f64 + 0.3 * p.phases.len() as f64)
        .map_err(err)?;
    mesh_style(&mut chart.configure_mesh())
        .disable_y_mesh()
        // Enough labels for a tick at every integer of the axis: the row centres get
        // their names, the others (above the rows) none.
        .y_labels((top + 0.5).ceil() as usize + 1)
        .y_label_formatter(&|v| group_label(&rows, *v))
        .x_label_formatter(&|v| short_number(*v))
        .x_desc(p.x_desc)
        .draw()
        .map_err(err)?;
    for (ph, name) in p.phases.iter().enumerate() {
        let c = color(ph);
        let bars = p.values.iter().enumerate().map(|(row, v)| {
            let start: f64 = v.iter().take(ph).sum();
            let len = v.get(ph).copied().unwrap_or(0.0);
            let y = (n - 1 - row) as f64;
            Rectangle::new([(start, y - 0.32), (start + len, y + 0.32)], c.filled())
        });
        chart
            .draw_series(bars)
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
    }
    let totals = p.values.iter().enumerate().map(|(row, v)| {
        let sum: f64 = v.iter().sum();
        Text::new(
            format!("{sum:.3} s"),
            (sum, (n - 1 - row) as f64),
            TextStyle::from((FONT, 13).into_font()).pos(Pos::new(HPos::Left, VPos::Center)),
        )
    });
    chart.draw_series(totals).map_err(err)?;
    legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_short() {
        assert_eq!(short_number(1500.0), "1500");
        assert_eq!(short_number(25_000.0), "25k");
        assert_eq!(short_number(0.5), "0.5");
        assert_eq!(bytes_label(4.0 * 1048576.0), "4 MiB");
        assert_eq!(bytes_label(8.0), "8 B");
        assert_eq!(compact_time(194_780.0), "195µs");
        assert_eq!(compact_time(47.6), "47.6ns");
        assert_eq!(group_label(&["a".into(), "b".into()], 1.0), "b");
        assert_eq!(group_label(&["a".into()], 0.5), "");
        assert_eq!(wrap("aa · bb · cc", 7), vec!["aa · bb", "cc"]);
        assert_eq!(wrap("aaaaaaaaa · b", 4), vec!["aaaaaaaaa", "b"]);
    }

    #[test]
    fn every_kind_of_plot_draws() {
        let dir = std::env::temp_dir().join(format!("lazarus-plot-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        lines(
            &dir.join("l.svg"),
            &LinePlot {
                title: "t",
                x_desc: "x",
                y_desc: "y",
                log_x: true,
                log_y: true,
                lines: vec![Line {
                    name: "a".into(),
                    points: vec![(8.0, 1.0), (64.0, 3.0)],
                    color: 0,
                    hollow: true,
                }],
                x_format: bytes_label,
                footer: "f",
            },
        )
        .unwrap();
        grouped_bars(
            &dir.join("b.svg"),
            &BarPlot {
                title: "t",
                y_desc: "y",
                groups: vec!["g1".into(), "g2".into()],
                series: vec![("s".into(), vec![Some(1.0), None])],
                log_y: false,
                reference: Some(1.0),
                value_format: |v| format!("{v:.2}"),
                footer: "f",
            },
        )
        .unwrap();
        stacked_bars(
            &dir.join("s.svg"),
            &StackedBars {
                title: "t",
                x_desc: "s",
                rows: vec!["r".into()],
                phases: vec!["p1".into(), "p2".into()],
                values: vec![vec![0.1, 0.2]],
                footer: "f",
            },
        )
        .unwrap();
        let svg = std::fs::read_to_string(dir.join("b.svg")).unwrap();
        assert!(svg.contains("g1") && svg.contains("<svg"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
