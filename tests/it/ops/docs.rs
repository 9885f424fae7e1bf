//! The user's documentation holds together: README.md starts with the two commands, README.md and
//! BENCHMARKS.md stay short, and every relative link of README.md, BENCHMARKS.md and docs/ names a file that
//! exists (and a heading of it).

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn readme_starts_with_the_two_commands_and_is_short() {
    let text = read(&root().join("README.md"));
    let first_block = text.split("```").nth(1).expect("README.md has a code block");
    assert!(
        first_block.contains("cargo run --release -- demo") && first_block.contains("./test.sh"),
        "README.md's first code block must be the two commands:\n{first_block}"
    );
    let lines = text.lines().count();
    assert!(lines <= 250, "README.md has {lines} lines (at most 250)");
    let bench = read(&root().join("BENCHMARKS.md")).lines().count();
    // Its figures, and the real cluster's per-phase tables.
    assert!(bench <= 250, "BENCHMARKS.md has {bench} lines (at most 250)");
}

/// A heading's GitHub anchor: lower case, punctuation dropped, spaces as dashes.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of `](target)` links outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let Some(end) = tail.find(')') else { break };
            out.push(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let mut pages = vec![root().join("README.md"), root().join("BENCHMARKS.md")];
    for dir in ["docs", "docs/decisions"] {
        for entry in std::fs::read_dir(root().join(dir)).expect("docs/ exists").filter_map(Result::ok) {
            if entry.path().extension().is_some_and(|e| e == "md") {
                pages.push(entry.path());
            }
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = read(page);
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                page.clone()
            } else {
                page.parent().expect("a page is in a directory").join(path)
            };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", page.display()));
            } else if !fragment.is_empty()
                && target.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&target)).iter().any(|a| a == fragment)
            {
                broken.push(format!("{}: {link} (no such heading)", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
