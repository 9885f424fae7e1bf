//! The soak's memory series: kache's VmRSS, CPU and gauges sampled until the deadline, and what they say.
//!
//! What the flat-memory figure must not measure: the run's own end. Sampling stops **at the deadline**, before
//! readers drain, watchers stop and kache shuts down, and the run is cut into tenths **by time**, not by
//! sample count, so a sampler starved on a loaded machine cannot squeeze the last tenth into a few samples
//! taken during the final storm (each tenth's sample count is reported beside it).
//!
//! What RSS mixes: the steady state (store, history, caches, allocator) and what in-flight reads pin for as
//! long as they stream — the lists of 200 watchers relisting or resuming at once in a reconnect storm, or
//! after an upstream fault. The byte budget's gauge (`kache_memory_read_bytes_in_flight`) cannot be
//! subtracted from RSS: it charges each list's encoded size, while the list's objects are the snapshot's,
//! shared with every other reader and counted once in RSS (in earlier runs the gauge read 2 GiB beside
//! 260 MiB of RSS). So the steady state is read from the samples taken **outside disturbances**: not within
//! a settling time after a storm or a fault (a refusal window counts from its end), and with every watcher
//! connected. Its growth is the second figure; the per-tenth floor (minimum) is the third view a leak
//! cannot hide from.

use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::Spec;
use crate::http::{self as lhttp, Client};
use crate::procs::{cpu_time, rss_bytes};
use crate::results::{RunReport, Series, Table, fmt_num, median};

/// Growth of the end-of-run RSS over the early plateau that still counts as flat: allocator noise and the
/// sim's churn replacing objects of different sizes move RSS by a few percent.
const FLAT_GOAL_PCT: f64 = 10.0;

/// One sample of kache's process.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    /// Seconds since the run's start.
    pub at: f64,
    pub rss_mib: f64,
    pub cpu_pct: f64,
    /// kache's own gauges at the same moment ([`GAUGES`], summed over labels), in MiB or count.
    pub gauges: [f64; GAUGES.len()],
}

/// kache's gauges sampled beside RSS, to tell a leak (RSS grows, these do not) from a cache filling to its
/// bound (one of these grows, then stops) from allocator warm-up (RSS plateaus). (metric, label, is bytes)
const GAUGES: [(&str, &str, bool); 7] = [
    ("kache_store_bytes", "store", true),
    ("kache_gzip_cache_bytes", "gzip cache", true),
    ("kache_memory_read_bytes_in_flight", "reads in flight", true),
    ("kache_table_row_cache_bytes", "Table rows", true),
    ("kache_history_events", "history events", false),
    ("kache_retained_snapshots", "retained snapshots", false),
    ("kache_watchers", "watchers", false),
];
/// Index of `kache_watchers` in [`GAUGES`].
const WATCHERS: usize = 6;

/// Samples kache's RSS and CPU (% of one core since the previous sample) and its [`GAUGES`] until the
/// deadline (a sample finished after it is dropped) or until stopped.
pub(super) async fn sample(
    pid: u32,
    metrics_url: Option<String>,
    t0: Instant,
    every: Duration,
    deadline: Instant,
    mut stop: watch::Receiver<bool>,
) -> Vec<Sample> {
    let client = lhttp::client(1);
    let mut out = Vec::new();
    let mut tick = tokio::time::interval(every);
    // A starved sampler takes its next sample when it can, not a burst of catch-up samples at one moment.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<(Instant, Duration)> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let (Ok(rss), Ok(cpu)) = (rss_bytes(pid), cpu_time(pid)) else { continue };
                let now = Instant::now();
                let gauges = scrape(&client, metrics_url.as_deref()).await;
                if Instant::now() >= deadline {
                    return out;
                }
                if let Some((at, was)) = last {
                    let wall = now.duration_since(at).as_secs_f64().max(1e-6);
                    out.push(Sample {
                        at: now.duration_since(t0).as_secs_f64(),
                        rss_mib: rss as f64 / 1024.0 / 1024.0,
                        cpu_pct: cpu.saturating_sub(was).as_secs_f64() / wall * 100.0,
                        gauges,
                    });
                }
                last = Some((now, cpu));
            }
            _ = tokio::time::sleep_until(deadline.into()) => return out,
            _ = stop.changed() => return out,
        }
    }
}

/// kache's [`GAUGES`] from its /metrics (bytes in MiB), each summed over its label sets; NaN when absent.
async fn scrape(client: &Client, metrics_url: Option<&str>) -> [f64; GAUGES.len()] {
    let mut out = [f64::NAN; GAUGES.len()];
    let Some(base) = metrics_url else { return out };
    let url = format!("{base}/metrics");
    let send = lhttp::Send { keep_body: true, ..lhttp::Send::default() };
    let Ok(got) = lhttp::request(client, http::Method::GET, &url, &send).await else { return out };
    let Some(body) = got.body else { return out };
    out = parse_gauges(&String::from_utf8_lossy(&body));
    out
}

/// Sums each of [`GAUGES`] over its label sets in a Prometheus text exposition.
fn parse_gauges(text: &str) -> [f64; GAUGES.len()] {
    let mut out = [f64::NAN; GAUGES.len()];
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        for (i, (name, _, bytes)) in GAUGES.iter().enumerate() {
            let Some(rest) = line.strip_prefix(name) else { continue };
            if !(rest.starts_with('{') || rest.starts_with(' ')) {
                continue;
            }
            let Some(v) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else { continue };
            let v = if *bytes { v / 1024.0 / 1024.0 } else { v };
            out[i] = if out[i].is_nan() { v } else { out[i] + v };
        }
    }
    out
}

/// The run's disturbances: intervals (seconds since the start) during which in-flight reads pin memory
/// beyond the steady state — a storm or a fault and the settling time after it.
#[derive(Debug, Default)]
pub(super) struct Disturbances {
    windows: Vec<(f64, f64)>,
}

// === impl Disturbances ===

impl Disturbances {
    /// A disturbance from `from` to `to` (seconds since the start), followed by `settle`.
    pub fn add(&mut self, from: f64, to: f64, settle: Duration) {
        self.windows.push((from, to + settle.as_secs_f64()));
    }

    fn covers(&self, at: f64) -> bool {
        self.windows.iter().any(|(from, to)| (*from..=*to).contains(&at))
    }
}

/// Whether a sample shows the steady state: outside every disturbance, every watcher connected.
fn quiet(s: &Sample, d: &Disturbances, watchers: usize) -> bool {
    !d.covers(s.at) && s.gauges[WATCHERS] >= watchers as f64
}

/// The samples of tenth `i` (0-based) of a run of `secs` seconds, by time.
fn tenth(samples: &[Sample], secs: f64, i: usize) -> Vec<Sample> {
    let (from, to) = (secs * i as f64 / 10.0, secs * (i + 1) as f64 / 10.0);
    samples.iter().filter(|s| s.at >= from && (s.at < to || (i == 9 && s.at <= to))).copied().collect()
}

fn rss(s: &[Sample]) -> f64 {
    median(&s.iter().map(|s| s.rss_mib).collect::<Vec<_>>())
}

fn growth_pct(early: f64, end: f64) -> f64 {
    if early > 0.0 { (end - early) / early * 100.0 } else { 0.0 }
}

/// Figures (growth of all samples and of the quiet ones, last tenth over second tenth; slope; CPU), the
/// per-tenth table and the plots.
pub(super) fn summarise(
    spec: &Spec,
    samples: &[Sample],
    disturbances: &Disturbances,
    report: &mut RunReport,
) {
    let n = samples.len();
    let secs = spec.duration.as_secs_f64();
    let tenths: Vec<Vec<Sample>> = (0..10).map(|i| tenth(samples, secs, i)).collect();
    let quiet_of = |s: &[Sample]| -> Vec<Sample> {
        s.iter().filter(|s| quiet(s, disturbances, spec.watchers)).copied().collect()
    };
    let (early, end) = (rss(&tenths[1]), rss(&tenths[9]));
    let (q_early, q_end) = (quiet_of(&tenths[1]), quiet_of(&tenths[9]));
    let half: Vec<Sample> = samples.iter().filter(|s| s.at >= secs / 2.0).copied().collect();
    let cpu: Vec<f64> = samples.iter().map(|s| s.cpu_pct).collect();
    let peak = samples.iter().map(|s| s.rss_mib).fold(0.0, f64::max);
    report.figure(
        format!("Soak ({}): RSS growth, last tenth over second tenth", spec.name),
        growth_pct(early, end),
        "%",
        Some(FLAT_GOAL_PCT),
        format!(
            "median VmRSS {} MiB (second tenth, {} samples) → {} MiB (last tenth, {} samples), peak {} MiB; \
             {n} samples every {} ms until the deadline, tenths by time",
            fmt_num(early),
            tenths[1].len(),
            fmt_num(end),
            tenths[9].len(),
            fmt_num(peak),
            spec.sample_every.as_millis()
        ),
    );
    report.figure(
        format!("Soak ({}): steady-state RSS growth (outside storms and faults)", spec.name),
        growth_pct(rss(&q_early), rss(&q_end)),
        "%",
        Some(FLAT_GOAL_PCT),
        format!(
            "median VmRSS of the samples taken outside storms and faults (not within {} s after one, every \
             watcher connected): {} MiB (second tenth, {} samples) → {} MiB (last tenth, {} samples)",
            spec.settle.as_secs_f64(),
            fmt_num(rss(&q_early)),
            q_early.len(),
            fmt_num(rss(&q_end)),
            q_end.len()
        ),
    );
    report.figure(
        format!("Soak ({}): RSS slope over the second half", spec.name),
        slope_per_hour(&half),
        "MiB/h",
        None,
        "least-squares fit of VmRSS against time".into(),
    );
    report.figure(
        format!("Soak ({}): kache CPU", spec.name),
        median(&cpu),
        "% of a core (median)",
        None,
        format!("p99 of samples {} %", fmt_num(quantile(&cpu, 0.99))),
    );
    plot(spec, samples, disturbances, report);
    // The same as a table: a gauge that rises and stops is a cache filling to its bound; RSS rising while
    // every gauge is flat is a leak or allocator retention (the floor rises too); RSS levelling off is
    // allocator warm-up; RSS high only outside the quiet samples is memory pinned by in-flight reads.
    let mut table = Table::new(
        format!("Soak ({}): VmRSS and kache's gauges, median per tenth of the run (by time)", spec.name),
        &["tenth", "samples", "VmRSS MiB", "VmRSS min", "quiet samples", "quiet VmRSS MiB"]
            .into_iter()
            .chain(GAUGES.iter().map(|(_, label, _)| *label))
            .collect::<Vec<_>>(),
    );
    for (t, part) in tenths.iter().enumerate().filter(|(_, p)| !p.is_empty()) {
        let q = quiet_of(part);
        let min = part.iter().map(|s| s.rss_mib).fold(f64::INFINITY, f64::min);
        let mut row = vec![
            format!("{}", t + 1),
            part.len().to_string(),
            fmt_num(rss(part)),
            fmt_num(min),
            q.len().to_string(),
            if q.is_empty() { "-".into() } else { fmt_num(rss(&q)) },
        ];
        for g in 0..GAUGES.len() {
            row.push(fmt_num(median(&part.iter().map(|s| s.gauges[g]).collect::<Vec<_>>())));
        }
        table.row(row);
    }
    report.tables.push(table);
}

/// The memory, CPU, gauge and count plots.
fn plot(spec: &Spec, samples: &[Sample], disturbances: &Disturbances, report: &mut RunReport) {
    let series = |plot: &str, title: &str, y: &str| Series {
        plot: plot.into(),
        title: title.into(),
        x_label: "seconds".into(),
        y_label: y.into(),
        log_x: false,
        log_y: false,
        name: spec.name.clone(),
        points: vec![],
    };
    let mem = series("soak-memory", "kache resident memory during the soak", "VmRSS (MiB)");
    let mut mem_quiet = mem.clone();
    mem_quiet.name = format!("{} outside storms and faults", spec.name);
    let cpu_s = series("soak-cpu", "kache CPU during the soak", "% of one core");
    let mut bytes_series = series("soak-gauges", "kache's memory gauges beside VmRSS during the soak", "MiB");
    let mut count_series = series("soak-counts", "kache's counts during the soak", "count");
    for s in samples {
        report.point(&mem, s.at, s.rss_mib);
        if quiet(s, disturbances, spec.watchers) {
            report.point(&mem_quiet, s.at, s.rss_mib);
        }
        report.point(&cpu_s, s.at, s.cpu_pct);
        bytes_series.name = "VmRSS".into();
        report.point(&bytes_series, s.at, s.rss_mib);
        for ((_, label, bytes), v) in GAUGES.iter().zip(s.gauges).filter(|(_, v)| v.is_finite()) {
            let target = if *bytes { &mut bytes_series } else { &mut count_series };
            target.name = (*label).into();
            report.point(target, s.at, v);
        }
    }
}

/// Least-squares slope of RSS against time, in MiB per hour.
fn slope_per_hour(s: &[Sample]) -> f64 {
    if s.len() < 2 {
        return 0.0;
    }
    let n = s.len() as f64;
    let (mx, my) = (s.iter().map(|p| p.at).sum::<f64>() / n, s.iter().map(|p| p.rss_mib).sum::<f64>() / n);
    let cov: f64 = s.iter().map(|p| (p.at - mx) * (p.rss_mib - my)).sum();
    let var: f64 = s.iter().map(|p| (p.at - mx).powi(2)).sum();
    if var == 0.0 { 0.0 } else { cov / var * 3600.0 }
}

fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return 0.0;
    }
    s.sort_by(f64::total_cmp);
    s[((s.len() - 1) as f64 * q).round() as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(at: f64, rss_mib: f64, watchers: f64) -> Sample {
        let mut gauges = [0.0; GAUGES.len()];
        gauges[WATCHERS] = watchers;
        Sample { at, rss_mib, cpu_pct: 0.0, gauges }
    }

    #[test]
    fn gauges_are_summed_over_labels_and_bytes_read_in_mib() {
        let text = "# HELP kache_store_bytes x\n# TYPE kache_store_bytes gauge\n\
                    kache_store_bytes{resource=\"pods\"} 2097152\n\
                    kache_store_bytes{resource=\"nodes\"} 1048576\n\
                    kache_store_bytes_other 99\n\
                    kache_watchers 7\n";
        let g = parse_gauges(text);
        assert_eq!(g[0], 3.0, "store bytes summed, in MiB");
        assert_eq!(g[WATCHERS], 7.0, "a count as is");
        assert!(g[1].is_nan(), "absent");
    }

    #[test]
    fn slope_of_a_line() {
        let s: Vec<Sample> = (0..10).map(|i| at(i as f64 * 360.0, 100.0 + i as f64, 0.0)).collect();
        assert!((slope_per_hour(&s) - 10.0).abs() < 1e-9);
        assert_eq!(slope_per_hour(&s[..1]), 0.0);
    }

    /// A starved sampler's few late samples stay in the last tenth; they are not spread over it by count.
    #[test]
    fn tenths_are_cut_by_time_not_by_sample_count() {
        let mut s: Vec<Sample> = (0..90).map(|i| at(i as f64, 100.0, 0.0)).collect();
        s.extend([at(95.0, 300.0, 0.0), at(99.0, 300.0, 0.0), at(100.0, 300.0, 0.0)]);
        assert_eq!(tenth(&s, 100.0, 1).len(), 10);
        assert_eq!(tenth(&s, 100.0, 8).len(), 10);
        assert_eq!(tenth(&s, 100.0, 9).len(), 3, "the deadline's own sample belongs to the last tenth");
        assert_eq!(rss(&tenth(&s, 100.0, 8)), 100.0);
    }

    /// Samples inside a storm's or a fault's settling time, or with watchers still reconnecting, are not
    /// the steady state.
    #[test]
    fn quiet_samples_exclude_disturbances_and_reconnecting_watchers() {
        let mut d = Disturbances::default();
        d.add(10.0, 10.0, Duration::from_secs(5));
        d.add(30.0, 40.0, Duration::from_secs(5));
        assert!(quiet(&at(9.0, 1.0, 4.0), &d, 4));
        assert!(!quiet(&at(12.0, 1.0, 4.0), &d, 4), "settling after a storm");
        assert!(quiet(&at(16.0, 1.0, 4.0), &d, 4));
        assert!(!quiet(&at(44.0, 1.0, 4.0), &d, 4), "the settling time counts from a refusal's end");
        assert!(!quiet(&at(20.0, 1.0, 3.0), &d, 4), "a watcher not connected");
    }
}
