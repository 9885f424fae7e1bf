use std::path::PathBuf;

use super::*;
use crate::results::RunReport;

/// The repository root (the load test's crate is one level down).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the crate is in the workspace").to_path_buf()
}

fn apiserver_run() -> RunReport {
    let mut r = RunReport {
        scenario: "apiserver".into(),
        command: "kache-loadtest apiserver --objects 10".into(),
        started_unix: 1_795_825_228,
        duration_secs: 61.0,
        ..Default::default()
    };
    r.figure("get, kache ÷ direct", 1.26, "×", Some(1.5), "d".into());
    r.error("watch 10k: 8 of 10 events delivered");
    r.figure("full list, kache ÷ direct", 0.086, "×", None, "d".into());
    let mut t = Table::new(
        "Every case and target (latency)",
        &["foreign writes/s", "case", "target", "÷ direct (p50)", "CPU ms per request"],
    );
    for (writes, case, target, ratio, cpu) in [
        ("0", "get", "apiserver direct", "", "kache 0.00, relay 0.00, apiserver 0.85, etcd 0.37"),
        ("0", "get", "through kache", "1.26×", "kache 0.30, relay 0.00, apiserver 0.93, etcd 0.37"),
        (
            "0",
            "get",
            "through a TLS byte relay",
            "1.10×",
            "kache 0.00, relay 0.07, apiserver 0.87, etcd 0.38",
        ),
        (
            "10 (achieved 10.0)",
            "get",
            "through kache",
            "1.44×",
            "kache 0.28, relay 0.00, apiserver 0.91, etcd 0.39",
        ),
    ] {
        t.row([writes, case, target, ratio, cpu].map(String::from).to_vec());
    }
    r.tables.push(t);
    let mut suites =
        Table::new("List suites: sync", &["suite", "pods", "kache RSS after sync", "pod JSON (list body)"]);
    suites.row(["1k", "1000", "37.5 MiB", "3.5 MiB"].map(String::from).to_vec());
    suites.row(["10k", "10000", "81.3 MiB", "34.7 MiB"].map(String::from).to_vec());
    r.tables.push(suites);
    r
}

#[test]
fn generates_runs_machine_charts_and_figures() {
    let dir = std::env::temp_dir().join(format!("kache-loadtest-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let json = dir.join("apiserver.json");
    std::fs::write(&json, serde_json::to_string(&apiserver_run()).expect("json")).expect("write");
    let (md, charts) = generate(&ReportInput {
        runs: vec![json],
        machine: "- CPU: test\n".into(),
        charts_rel: "docs/bench".into(),
    })
    .expect("report");
    assert!(
        md.contains("| apiserver | 2026-11-28 00:20 | 61 s | 1 | `kache-loadtest apiserver --objects 10` |"),
        "{md}"
    );
    assert!(
        md.contains(
            "\n\n- apiserver: `watch 10k: 8 of 10 events delivered`\n\n## Machine\n\n- CPU: test\n\n"
        ),
        "{md}"
    );
    assert!(md.contains("| apiserver | get, kache ÷ direct | 1.26 × | ≤ 1.50 × |"), "{md}");
    assert!(md.contains("| apiserver | full list, kache ÷ direct | 0.086 × |  |"), "{md}");
    let names: Vec<&str> = charts.iter().map(Chart::name).collect();
    assert_eq!(names, ["apiserver-ratio", "apiserver-cpu", "memory-vs-objects"]);
    for n in &names {
        assert!(md.contains(&format!("(docs/bench/{n}.svg)")), "{md}");
    }
    let Chart::Bars(ratio) = &charts[0] else { panic!("bars") };
    assert_eq!(ratio.groups, ["0 foreign writes/s", "10 foreign writes/s"]);
    assert_eq!(
        ratio.categories,
        [
            ("get".to_string(), vec![Some(1.26), Some(1.44)]),
            ("get, TLS byte relay".to_string(), vec![Some(1.10)])
        ]
    );
    let Chart::Bars(cpu) = &charts[1] else { panic!("bars") };
    assert_eq!(cpu.categories.len(), 1);
    let get = &cpu.categories[0].1;
    assert!((get[0].expect("direct") - 1.22).abs() < 1e-9 && get[2] == Some(0.30), "{get:?}");
    for c in &charts {
        let svg = std::fs::read_to_string(c.write(&dir).expect("chart")).expect("svg");
        assert!(svg.contains("<svg"), "{svg}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cells_parse_numbers_and_sizes() {
    assert_eq!(number("10 (achieved 10.0)"), Some(10.0));
    assert_eq!(number("1.26×"), Some(1.26));
    assert_eq!(number(""), None);
    assert_eq!(mib("218.0 KiB"), Some(218.0 / 1024.0));
    assert_eq!(mib("1.5 GiB"), Some(1536.0));
    assert_eq!(mib("12"), None);
    assert_eq!(utc(0), "1970-01-01 00:00");
    assert_eq!(utc(1_795_781_921), "2026-11-27 12:18");
}

/// BENCHMARKS.md is what the generator makes of the committed runs, and short enough to read.
#[test]
fn benchmarks_md_is_generated_from_the_committed_runs() {
    let runs_dir = root().join(RUNS_DIR);
    let mut runs: Vec<PathBuf> = std::fs::read_dir(&runs_dir)
        .expect("the runs behind BENCHMARKS.md are committed")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    runs.sort();
    let machine = std::fs::read_to_string(runs_dir.join(MACHINE_FILE)).expect("machine.md");
    let (md, charts) =
        generate(&ReportInput { runs, machine, charts_rel: CHARTS_DIR.into() }).expect("report");
    let committed = std::fs::read_to_string(root().join("BENCHMARKS.md")).expect("BENCHMARKS.md");
    assert!(
        committed == md,
        "BENCHMARKS.md is not what `kache-loadtest report --json {RUNS_DIR}/*.json` generates; run it"
    );
    // The figures, and the real cluster's per-phase tables (each read's p50 and p99, the upstream's cost).
    assert!(md.lines().count() <= 250, "BENCHMARKS.md has {} lines", md.lines().count());
    for c in &charts {
        let svg = root().join(CHARTS_DIR).join(format!("{}.svg", c.name()));
        assert!(svg.exists(), "{} is missing; run the report", svg.display());
    }
}

/// A page made of runs already kept beside new ones keeps them all (the kept ones are read before the runs
/// dir is cleared).
#[test]
fn publishing_kept_runs_with_new_ones_keeps_them_all() {
    let dir = std::env::temp_dir().join(format!("kache-loadtest-publish-{}", std::process::id()));
    let (runs_dir, new_dir) = (dir.join("runs"), dir.join("new"));
    std::fs::create_dir_all(&runs_dir).expect("dir");
    std::fs::create_dir_all(&new_dir).expect("dir");
    let run = serde_json::to_string(&apiserver_run()).expect("json");
    std::fs::write(runs_dir.join("kept.json"), &run).expect("write");
    std::fs::write(runs_dir.join("dropped.json"), &run).expect("write");
    std::fs::write(new_dir.join("new.json"), &run).expect("write");
    publish(&Publish {
        json: vec![runs_dir.join("kept.json"), new_dir.join("new.json")],
        out: dir.join("BENCHMARKS.md"),
        charts: dir.join("charts"),
        runs_dir: runs_dir.clone(),
        machine: None,
    })
    .expect("publish");
    let mut kept: Vec<String> = std::fs::read_dir(&runs_dir)
        .expect("runs")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    assert_eq!(kept, ["kept.json", "machine.md", "new.json"]);
    assert_eq!(std::fs::read_to_string(runs_dir.join("kept.json")).expect("kept"), run);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_cluster_runs_tables_are_on_the_page_and_other_runs_tables_are_not() {
    let dir = std::env::temp_dir().join(format!("kache-loadtest-report-tables-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut cluster =
        RunReport { scenario: "cluster".into(), started_unix: 1_795_825_228, ..Default::default() };
    let mut t = Table::new("Coalescing sweep", &["phase", "readers", "etcd requests per proven read"]);
    t.row(["kache etcd", "64", "0.05"].map(String::from).to_vec());
    cluster.tables.push(t);
    let (a, c) = (dir.join("apiserver.json"), dir.join("cluster.json"));
    std::fs::write(&a, serde_json::to_string(&apiserver_run()).expect("json")).expect("write");
    std::fs::write(&c, serde_json::to_string(&cluster).expect("json")).expect("write");
    let (md, _) = generate(&ReportInput {
        runs: vec![a, c],
        machine: "- CPU: test\n".into(),
        charts_rel: "docs/bench".into(),
    })
    .expect("report");
    assert!(md.contains("## The `cluster` run's tables\n\n**Coalescing sweep**\n"), "{md}");
    assert!(md.contains("| kache etcd | 64 | 0.05 |"), "{md}");
    assert!(!md.contains("**Every case and target (latency)**"), "only the cluster's tables: {md}");
    let _ = std::fs::remove_dir_all(&dir);
}
