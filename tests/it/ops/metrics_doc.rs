//! docs/metrics.md documents every metric in its table, generated from the names module.

use std::path::Path;

use kache::metrics::names;

#[test]
fn metrics_table_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/metrics.md");
    let text = std::fs::read_to_string(&path).expect("docs/metrics.md exists");
    let table = names::markdown_table();
    assert!(
        text.contains(&table),
        "docs/metrics.md's metrics table is out of date; replace it with:\n\n{table}"
    );
    for def in names::ALL {
        assert!(text.contains(&format!("`{}`", def.name)), "{} undocumented", def.name);
    }
}
