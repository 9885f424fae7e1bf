//! What a run produces: figures with their goals, tables, plot series and errors, serialised as JSON
//! (the input of `report`) and rendered as Markdown.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency a histogram records (µs); longer samples are clamped to it.
const HIST_MAX_MICROS: u64 = 600_000_000;
/// Significant digits of the latency histograms.
const HIST_SIGFIG: u8 = 3;
/// Errors kept verbatim per run; the rest are only counted.
const MAX_ERROR_MESSAGES: usize = 20;

/// A latency histogram in microseconds.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_MICROS, HIST_SIGFIG).expect("static bounds are valid")
}

/// Records `d` (clamped into the histogram's range).
pub fn record(h: &mut Histogram<u64>, d: Duration) {
    let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX).clamp(1, HIST_MAX_MICROS);
    h.saturating_record(us);
}

/// Percentiles of a histogram, in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            count: h.len(),
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
        }
    }
}

/// The median of `v` (mean of the middle two for even lengths); 0 when empty.
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return 0.0;
    }
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    if s.len().is_multiple_of(2) { (s[m - 1] + s[m]) / 2.0 } else { s[m] }
}

/// A headline number next to its goal.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Figure {
    pub label: String,
    pub value: f64,
    pub unit: String,
    /// The goal's upper bound, if any.
    pub goal_max: Option<f64>,
    /// How the value was obtained (which measurements, medians of how many batches).
    pub detail: String,
}

impl Figure {
    pub fn met(&self) -> Option<bool> {
        self.goal_max.map(|g| self.value <= g)
    }
}

/// A Markdown table.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Table {
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: impl Into<String>, columns: &[&str]) -> Self {
        Self { title: title.into(), columns: columns.iter().map(|c| c.to_string()).collect(), rows: vec![] }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
}

/// Points of one line on one plot.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Series {
    /// File stem of the SVG the series is drawn on.
    pub plot: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub log_y: bool,
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Everything one `run` of a scenario file produced.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RunReport {
    pub scenario: String,
    pub description: String,
    pub command: String,
    pub started_unix: u64,
    pub duration_secs: f64,
    pub figures: Vec<Figure>,
    pub tables: Vec<Table>,
    pub series: Vec<Series>,
    pub errors: Vec<String>,
    pub error_count: u64,
}

impl RunReport {
    /// Counts an error; distinct messages are kept (up to [`MAX_ERROR_MESSAGES`]).
    pub fn error(&mut self, msg: impl Into<String>) {
        self.error_count += 1;
        let msg = msg.into();
        if self.errors.len() < MAX_ERROR_MESSAGES && !self.errors.contains(&msg) {
            self.errors.push(msg);
        }
    }

    pub fn figure(
        &mut self,
        label: impl Into<String>,
        value: f64,
        unit: &str,
        goal_max: Option<f64>,
        detail: String,
    ) {
        self.figures.push(Figure { label: label.into(), value, unit: unit.to_string(), goal_max, detail });
    }

    /// Adds a point to the named series of a plot, creating it on first use.
    pub fn point(&mut self, plot: &Series, x: f64, y: f64) {
        match self.series.iter_mut().find(|s| s.plot == plot.plot && s.name == plot.name) {
            Some(s) => s.points.push((x, y)),
            None => {
                let mut s = plot.clone();
                s.points = vec![(x, y)];
                self.series.push(s);
            }
        }
    }

    /// The run as Markdown (a `###` section per run).
    pub fn markdown(&self, plots_rel: Option<&str>) -> String {
        let mut out = format!("### {}\n\n", self.scenario);
        if !self.description.is_empty() {
            out.push_str(&format!("{}\n\n", self.description));
        }
        out.push_str(&format!("Command: `{}` (took {:.0} s)\n\n", self.command, self.duration_secs));
        if !self.figures.is_empty() {
            out.push_str("| Figure | Value | Goal | Met | How |\n|---|---:|---:|:---:|---|\n");
            for f in &self.figures {
                let goal = f.goal_max.map_or("—".to_string(), |g| format!("≤ {} {}", fmt_num(g), f.unit));
                let met = match f.met() {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "",
                };
                out.push_str(&format!(
                    "| {} | {} {} | {} | {} | {} |\n",
                    f.label,
                    fmt_num(f.value),
                    f.unit,
                    goal,
                    met,
                    f.detail
                ));
            }
            out.push('\n');
        }
        for t in &self.tables {
            out.push_str(&render_table(t));
        }
        if let Some(rel) = plots_rel {
            let mut plots: Vec<&str> = self.series.iter().map(|s| s.plot.as_str()).collect();
            plots.dedup();
            for p in plots {
                out.push_str(&format!("![{p}]({rel}/{p}.svg)\n\n"));
            }
        }
        if self.error_count > 0 {
            out.push_str(&format!("Errors: {} (distinct messages below)\n\n", self.error_count));
            for e in &self.errors {
                out.push_str(&format!("- `{}`\n", e.replace('`', "'")));
            }
            out.push('\n');
        }
        out
    }
}

/// A table as Markdown.
pub fn render_table(t: &Table) -> String {
    let mut out =
        format!("**{}**\n\n| {} |\n|{}\n", t.title, t.columns.join(" | "), "---|".repeat(t.columns.len()));
    for r in &t.rows {
        out.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    out.push('\n');
    out
}

/// A number with sensible precision for a table.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Bytes in KiB/MiB for tables.
pub fn fmt_bytes(b: f64) -> String {
    if b >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / 1024.0 / 1024.0)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[f64::NAN, 1.0]), 1.0);
    }

    #[test]
    fn latency_percentiles_in_ms() {
        let mut h = histogram();
        for ms in 1..=100u64 {
            record(&mut h, Duration::from_millis(ms));
        }
        let l = Latency::of(&h);
        assert_eq!(l.count, 100);
        assert!((l.p50_ms - 50.0).abs() < 0.1, "{l:?}");
        assert!((l.p99_ms - 99.0).abs() < 0.1, "{l:?}");
        assert_eq!(Latency::of(&histogram()), Latency::default());
    }

    #[test]
    fn markdown_marks_goals() {
        let mut r = RunReport { scenario: "s".into(), command: "c".into(), ..Default::default() };
        r.figure("ok", 1.2, "×", Some(1.5), "a/b".into());
        r.figure("bad", 3.0, "ms", Some(2.0), String::new());
        r.error("boom");
        r.error("boom");
        assert_eq!((r.error_count, r.errors.len()), (2, 1));
        let md = r.markdown(None);
        assert!(md.contains("| ok | 1.20 × | ≤ 1.50 × | yes |"), "{md}");
        assert!(md.contains("| bad | 3.00 ms | ≤ 2.00 ms | **no** |"), "{md}");
        assert!(md.contains("Errors: 2 (distinct messages below)\n\n- `boom`\n\n"), "{md}");
    }

    #[test]
    fn series_points_accumulate() {
        let mut r = RunReport::default();
        let s = Series {
            plot: "p".into(),
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log_x: false,
            log_y: false,
            name: "a".into(),
            points: vec![],
        };
        r.point(&s, 1.0, 2.0);
        r.point(&s, 2.0, 3.0);
        assert_eq!(r.series.len(), 1);
        assert_eq!(r.series[0].points, vec![(1.0, 2.0), (2.0, 3.0)]);
    }
}
