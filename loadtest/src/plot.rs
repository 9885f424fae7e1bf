//! SVG plots of a run's series (plotters, SVG backend only): one file per plot name.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::results::Series;

const WIDTH: u32 = 900;
const HEIGHT: u32 = 540;
/// Line colours, cycled.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Draws every plot named in `series` into `dir/<plot>.svg`; returns the files written.
pub fn draw_all(series: &[Series], dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut names: Vec<&str> = series.iter().map(|s| s.plot.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let mut out = Vec::new();
    for name in names {
        let group: Vec<&Series> = series.iter().filter(|s| s.plot == name && !s.points.is_empty()).collect();
        if group.is_empty() {
            continue;
        }
        let path = dir.join(format!("{name}.svg"));
        {
            let root = SVGBackend::new(&path, (WIDTH, HEIGHT)).into_drawing_area();
            draw(&root, &group).map_err(|e| anyhow::anyhow!("drawing {name}: {e}"))?;
            root.present().map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        }
        out.push(path);
    }
    Ok(out)
}

/// The range of values on one axis, widened so that a single point or a log axis still draws.
fn range(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return if log { (0.1, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        (lo / 1.5, hi * 1.5)
    } else {
        let pad = if hi > lo { (hi - lo) * 0.05 } else { lo.abs() * 0.1 + 1.0 };
        (lo - pad, hi + pad)
    }
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    group: &[&Series],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let first = group[0];
    let xs = range(group.iter().flat_map(|s| s.points.iter().map(|p| p.0)), first.log_x);
    let ys = range(group.iter().flat_map(|s| s.points.iter().map(|p| p.1)), first.log_y);
    let mut builder = ChartBuilder::on(root);
    builder.caption(&first.title, ("sans-serif", 22)).margin(15).x_label_area_size(45).y_label_area_size(65);
    // plotters types log and linear axes differently: four combinations.
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart.configure_mesh().x_desc(first.x_label.as_str()).y_desc(first.y_label.as_str()).draw()?;
            for (i, s) in group.iter().enumerate() {
                let color = PALETTE[i % PALETTE.len()];
                let pts: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|(x, y)| (!first.log_x || *x > 0.0) && (!first.log_y || *y > 0.0))
                    .collect();
                chart
                    .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                    .label(s.name.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
                if pts.len() <= 20 {
                    chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
                }
            }
            chart.configure_series_labels().background_style(WHITE.mix(0.85)).border_style(BLACK).draw()?;
        }};
    }
    match (first.log_x, first.log_y) {
        (true, true) => {
            body!(builder.build_cartesian_2d((xs.0..xs.1).log_scale(), (ys.0..ys.1).log_scale())?)
        }
        (true, false) => body!(builder.build_cartesian_2d((xs.0..xs.1).log_scale(), ys.0..ys.1)?),
        (false, true) => body!(builder.build_cartesian_2d(xs.0..xs.1, (ys.0..ys.1).log_scale())?),
        (false, false) => body!(builder.build_cartesian_2d(xs.0..xs.1, ys.0..ys.1)?),
    }
    Ok(())
}

// === impl BarChart ===

/// Horizontal grouped bars, written as plain SVG (plotters' bar charts want a numeric category axis): one
/// block of bars per category, one bar per group, the value printed at each bar's end.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BarChart {
    /// File stem of the SVG.
    pub name: String,
    pub title: String,
    /// Printed after every value.
    pub unit: String,
    /// The bars of each category, in this order (a legend entry each).
    pub groups: Vec<String>,
    /// A category's label and its value per group (None: no bar).
    pub categories: Vec<(String, Vec<Option<f64>>)>,
    /// A value drawn as a dashed line (1 for a ratio).
    pub reference: Option<f64>,
}

/// Width of the category labels' column.
const BAR_LABEL_WIDTH: f64 = 340.0;
/// Characters of a category label per line before it wraps.
const BAR_LABEL_CHARS: usize = 48;
const BAR_HEIGHT: f64 = 12.0;
const BAR_GAP: f64 = 2.0;
const CATEGORY_GAP: f64 = 12.0;
const LEGEND_ROW: f64 = 18.0;

impl BarChart {
    /// The chart as an SVG document.
    pub fn svg(&self) -> String {
        let width = f64::from(WIDTH);
        let plot_width = width - BAR_LABEL_WIDTH - 80.0;
        let top = 40.0 + LEGEND_ROW * self.groups.len().div_ceil(3) as f64 + 8.0;
        let block = self.groups.len() as f64 * (BAR_HEIGHT + BAR_GAP) + CATEGORY_GAP;
        let height = top + block * self.categories.len() as f64 + 30.0;
        let max = self
            .categories
            .iter()
            .flat_map(|(_, v)| v.iter().flatten().copied())
            .chain(self.reference)
            .filter(|v| v.is_finite())
            .fold(0.0_f64, f64::max);
        let step = nice_step(max / 5.0);
        let top_value = (max / step).ceil().max(1.0) * step;
        let x = |v: f64| BAR_LABEL_WIDTH + v.max(0.0) / top_value * plot_width;
        let mut out = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
             viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"sans-serif\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{:.0}\" y=\"24\" font-size=\"17\" text-anchor=\"middle\">{}</text>\n",
            width / 2.0,
            xml(&self.title)
        );
        for (i, g) in self.groups.iter().enumerate() {
            let (lx, ly) = (20.0 + (i % 3) as f64 * 290.0, 44.0 + (i / 3) as f64 * LEGEND_ROW);
            out.push_str(&format!(
                "<rect x=\"{lx:.0}\" y=\"{:.0}\" width=\"14\" height=\"10\" fill=\"{}\"/>\
                 <text x=\"{:.0}\" y=\"{ly:.0}\" font-size=\"12\">{}</text>\n",
                ly - 9.0,
                hex(PALETTE[i % PALETTE.len()]),
                lx + 20.0,
                xml(g)
            ));
        }
        let bottom = top + block * self.categories.len() as f64;
        let mut tick = 0.0;
        while tick <= top_value + step / 2.0 {
            out.push_str(&format!(
                "<line x1=\"{0:.1}\" y1=\"{top:.0}\" x2=\"{0:.1}\" y2=\"{bottom:.0}\" stroke=\"#ddd\"/>\
                 <text x=\"{0:.1}\" y=\"{1:.0}\" font-size=\"11\" text-anchor=\"middle\">{2}</text>\n",
                x(tick),
                bottom + 16.0,
                fmt_tick(tick)
            ));
            tick += step;
        }
        for (ci, (label, values)) in self.categories.iter().enumerate() {
            let y0 = top + ci as f64 * block;
            let lines = wrap(label, BAR_LABEL_CHARS);
            let mid = y0 + (block - CATEGORY_GAP) / 2.0;
            for (li, line) in lines.iter().enumerate() {
                let ly = mid + 4.0 + (li as f64 - (lines.len() - 1) as f64 / 2.0) * 13.0;
                out.push_str(&format!(
                    "<text x=\"{:.0}\" y=\"{ly:.1}\" font-size=\"12\" text-anchor=\"end\">{}</text>\n",
                    BAR_LABEL_WIDTH - 8.0,
                    xml(line)
                ));
            }
            for (gi, v) in values.iter().enumerate() {
                let Some(v) = v.filter(|v| v.is_finite()) else { continue };
                let y = y0 + gi as f64 * (BAR_HEIGHT + BAR_GAP);
                out.push_str(&format!(
                    "<rect x=\"{BAR_LABEL_WIDTH:.0}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{BAR_HEIGHT:.0}\" fill=\"{}\"/>\
                     <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\">{}</text>\n",
                    x(v) - BAR_LABEL_WIDTH,
                    hex(PALETTE[gi % PALETTE.len()]),
                    x(v) + 4.0,
                    y + BAR_HEIGHT - 2.0,
                    xml(&format!("{}{}", crate::results::fmt_num(v), self.unit_suffix()))
                ));
            }
        }
        if let Some(r) = self.reference {
            out.push_str(&format!(
                "<line x1=\"{0:.1}\" y1=\"{top:.0}\" x2=\"{0:.1}\" y2=\"{bottom:.0}\" stroke=\"black\" \
                 stroke-dasharray=\"4 3\"/>\n",
                x(r)
            ));
        }
        out.push_str(&format!(
            "<line x1=\"{BAR_LABEL_WIDTH:.0}\" y1=\"{top:.0}\" x2=\"{BAR_LABEL_WIDTH:.0}\" y2=\"{bottom:.0}\" \
             stroke=\"black\"/>\n</svg>\n"
        ));
        out
    }

    fn unit_suffix(&self) -> String {
        if self.unit == "×" { self.unit.clone() } else { format!(" {}", self.unit) }
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let pow = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * pow).find(|s| *s >= raw).unwrap_or(10.0 * pow)
}

fn fmt_tick(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Splits `text` into lines of at most about `width` characters at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split(' ') {
        let last = lines.last_mut().expect("lines starts non-empty");
        if !last.is_empty() && last.chars().count() + 1 + word.chars().count() > width {
            lines.push(word.to_string());
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    lines
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(plot: &str, name: &str, log: bool, points: Vec<(f64, f64)>) -> Series {
        Series {
            plot: plot.into(),
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log_x: log,
            log_y: log,
            name: name.into(),
            points,
        }
    }

    #[test]
    fn writes_one_svg_per_plot() {
        let dir = std::env::temp_dir().join(format!("kache-loadtest-plot-{}", std::process::id()));
        let s = vec![
            series("a", "one", true, vec![(1000.0, 2.0), (10000.0, 20.0)]),
            series("a", "two", true, vec![(1000.0, 1.0), (10000.0, 0.0)]),
            series("b", "three", false, vec![(0.0, 5.0)]),
            series("c", "empty", false, vec![]),
        ];
        let files = draw_all(&s, &dir).expect("plots");
        assert_eq!(files.len(), 2);
        let svg = std::fs::read_to_string(dir.join("a.svg")).expect("svg");
        assert!(svg.starts_with("<svg") && svg.contains("one") && svg.contains("two"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ranges_survive_degenerate_input() {
        assert_eq!(range([].into_iter(), true), (0.1, 10.0));
        let (lo, hi) = range([5.0].into_iter(), false);
        assert!(lo < 5.0 && hi > 5.0);
        let (lo, hi) = range([0.0, 10.0, -1.0].into_iter(), true);
        assert!(lo > 0.0 && hi > 10.0);
    }

    #[test]
    fn bar_chart_draws_every_value_and_the_reference() {
        let b = BarChart {
            name: "r".into(),
            title: "a < b".into(),
            unit: "×".into(),
            groups: vec!["0 writes/s".into(), "10 writes/s".into()],
            categories: vec![
                ("get".into(), vec![Some(1.26), Some(1.44)]),
                (
                    "a label long enough to wrap onto a second line of the label column".into(),
                    vec![None, Some(0.5)],
                ),
            ],
            reference: Some(1.0),
        };
        let svg = b.svg();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"), "{svg}");
        assert!(svg.contains(">1.26×<") && svg.contains(">1.44×<") && svg.contains(">0.50×<"), "{svg}");
        assert_eq!(svg.matches("stroke-dasharray").count(), 1);
        assert!(svg.contains("a &lt; b") && svg.contains(">of the label column<"), "{svg}");
        assert_eq!((nice_step(0.3), nice_step(1.3), nice_step(45.0)), (0.5, 2.0, 50.0));
    }
}
