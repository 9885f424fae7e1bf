//! Every metric a dashboard queries is one kache exports.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kache::metrics::names;
use serde_json::Value;

use super::support::{self, RunningKache};

/// PromQL words that are not metric names: aggregation operators, their modifiers, set and comparison
/// keywords, and literal numbers' names.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
    "limitk",
    "limit_ratio",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "atan2",
    "inf",
    "nan",
    "Inf",
    "NaN",
];

/// Words followed by a parenthesised list of label names.
const LABEL_LIST_KEYWORDS: &[&str] = &["by", "without", "on", "ignoring", "group_left", "group_right"];

/// The metric names a PromQL expression reads: identifiers outside label matchers (`{...}`), range
/// selectors (`[...]`), strings and label lists, that are neither function calls nor keywords. Grafana
/// variables (`$resource`, `${datasource}`, `$__rate_interval`) are skipped.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut skip_next_paren_list = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => i = skip_string(&chars, i),
            '{' => i = skip_until(&chars, i, '}'),
            '[' => i = skip_until(&chars, i, ']'),
            '$' => {
                i += 1;
                if chars.get(i) == Some(&'{') {
                    i = skip_until(&chars, i, '}');
                } else {
                    while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                        i += 1;
                    }
                }
            }
            '(' if skip_next_paren_list => {
                skip_next_paren_list = false;
                i = skip_until(&chars, i, ')');
            }
            c if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) => {
                // Numbers, including exponents and durations like 5m (the unit letters go with them).
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|c| !c.is_whitespace()).copied();
                if LABEL_LIST_KEYWORDS.contains(&word.as_str()) {
                    skip_next_paren_list = next == Some('(');
                } else if KEYWORDS.contains(&word.as_str()) || next == Some('(') {
                    // A keyword or a function call.
                } else {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// Index after the closing quote of the string starting at `i` (backslash escapes honoured).
fn skip_string(chars: &[char], i: usize) -> usize {
    let quote = chars[i];
    let mut j = i + 1;
    while j < chars.len() {
        match chars[j] {
            '\\' if quote != '`' => j += 2,
            c if c == quote => return j + 1,
            _ => j += 1,
        }
    }
    j
}

/// Index after the `close` matching the opener at `i` (strings inside skipped).
fn skip_until(chars: &[char], i: usize, close: char) -> usize {
    let mut j = i + 1;
    while j < chars.len() {
        match chars[j] {
            '"' | '\'' | '`' => j = skip_string(chars, j),
            c if c == close => return j + 1,
            _ => j += 1,
        }
    }
    j
}

/// Every query of a dashboard: panel targets (also inside rows) and templating queries.
fn queries(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect(dashboard, &mut out);
    out
}

fn collect(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                match (k.as_str(), child) {
                    ("expr", Value::String(e)) => out.push(e.clone()),
                    ("query" | "definition", Value::String(q)) => {
                        // Templating: `label_values(metric{...}, label)` reads `metric`.
                        if let Some(inner) = q.strip_prefix("label_values(") {
                            let metric = inner.split([',', ')']).next().unwrap_or("");
                            out.push(metric.to_owned());
                        } else if q.contains('(') || q.contains('{') {
                            out.push(q.clone());
                        }
                    }
                    ("query", Value::Object(o)) => {
                        if let Some(Value::String(q)) = o.get("query") {
                            out.push(q.clone());
                        }
                    }
                    _ => collect(child, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect(i, out)),
        _ => {}
    }
}

fn dashboard_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("dashboards/ exists")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

/// (file, metric names) for every dashboard.
fn dashboard_metrics() -> Vec<(String, BTreeSet<String>)> {
    dashboard_files()
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("readable dashboard");
            let json: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()));
            for field in ["uid", "title", "panels"] {
                assert!(json.get(field).is_some(), "{} has no {field}", path.display());
            }
            let names = queries(&json).iter().flat_map(|q| metric_names(q)).collect();
            (path.file_name().expect("file name").to_string_lossy().into_owned(), names)
        })
        .collect()
}

#[test]
fn tokenizer_finds_metric_names_only() {
    let e = r#"histogram_quantile(0.99, sum by (le, source) (rate(apiserver_request_duration_seconds_bucket{job=~"$job",verb!~"WATCH|x"}[$__rate_interval])))"#;
    assert_eq!(metric_names(e), BTreeSet::from(["apiserver_request_duration_seconds_bucket".to_owned()]));
    let e = "sum(a_total) / on (resource) group_left (state) b == 1 or vector(0) offset 5m";
    assert_eq!(metric_names(e), BTreeSet::from(["a_total".to_owned(), "b".to_owned()]));
    let e = r#"count(kache_resource_synced{configured="true"} == 0) and x_seconds > 1e3"#;
    assert_eq!(metric_names(e), BTreeSet::from(["kache_resource_synced".to_owned(), "x_seconds".to_owned()]));
    assert!(metric_names("${datasource} 'quoted_name' \"also\"").is_empty());
}

#[test]
fn every_dashboard_reads_something() {
    let all = dashboard_metrics();
    let files: Vec<&str> = all.iter().map(|(f, _)| f.as_str()).collect();
    for expected in ["kache-overview.json", "kache-resources.json", "kache-upstream.json", "kache-watch.json"]
    {
        assert!(files.contains(&expected), "missing dashboard {expected}: {files:?}");
    }
    for (file, names) in &all {
        assert!(names.len() >= 3, "{file} reads only {names:?}");
    }
}

#[test]
fn dashboard_metrics_are_defined_in_the_names_module() {
    let defined: BTreeSet<String> = names::ALL.iter().flat_map(names::series_names).collect();
    for (file, used) in dashboard_metrics() {
        let unknown: Vec<&String> = used.iter().filter(|n| !defined.contains(*n)).collect();
        assert!(unknown.is_empty(), "{file} queries metrics kache does not define: {unknown:?}");
    }
}

#[tokio::test]
async fn dashboard_metrics_are_exported_by_a_running_kache() {
    let running = RunningKache::start(3).await;
    running.traffic().await;
    let (status, text) = support::get(&running.metrics_url("/metrics")).await;
    assert_eq!(status, 200, "{text}");
    let exposed = support::exposed_series(&text);
    for (file, used) in dashboard_metrics() {
        let missing: Vec<&String> = used.iter().filter(|n| !exposed.contains(*n)).collect();
        assert!(missing.is_empty(), "{file} queries metrics the running kache does not export: {missing:?}");
    }
    // And the other way round: every defined metric is exported once kache has served some traffic.
    for def in names::ALL {
        for series in names::series_names(def) {
            assert!(exposed.contains(&series), "{series} is defined but not exported:\n{text}");
        }
    }
    running.stop().await;
}
