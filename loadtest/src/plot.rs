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
}
