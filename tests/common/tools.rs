//! Tests that need a tool from outside cargo (kubectl, Prometheus, a Python venv, the real apiserver in
//! the testbed): the one rule for what happens when it is missing.
//!
//! Without `KACHE_REQUIRE_TOOLS` a test whose tool is missing prints `SKIPPED: <why>` and passes, so a
//! developer's machine without the tool still runs the rest. CI exports `KACHE_REQUIRE_TOOLS=1`
//! (`.ci/run`): there a missing tool fails the test, so a broken installation never looks like a pass.

/// The variable CI sets.
pub const REQUIRE_TOOLS_VAR: &str = "KACHE_REQUIRE_TOOLS";

/// Whether a missing tool must fail the test (`KACHE_REQUIRE_TOOLS` set to anything but empty, `0` or
/// `false`).
pub fn tools_required() -> bool {
    std::env::var(REQUIRE_TOOLS_VAR)
        .is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// The test cannot run here because of `why` (what is missing, and how to get it). With
/// `KACHE_REQUIRE_TOOLS` set this panics (the test fails); otherwise it prints why the test skips, and the
/// caller returns.
#[track_caller]
pub fn missing(why: &str) {
    if tools_required() {
        panic!("{why} ({REQUIRE_TOOLS_VAR} is set: a missing tool fails the test)");
    }
    eprintln!("SKIPPED: {why} (set {REQUIRE_TOOLS_VAR}=1 to make this a failure)");
    record_skip(why);
}

/// The variable naming the file where skips are recorded (`test.sh` sets it and prints every skip with its
/// reason at the end: the test harness shows a passing test's output only on failure).
pub const SKIP_LOG_VAR: &str = "KACHE_SKIP_LOG";

/// Appends `<test name>\t<why>` to the file `KACHE_SKIP_LOG` names, if any (one short write per skip, so
/// lines of parallel tests do not interleave).
fn record_skip(why: &str) {
    use std::io::Write as _;
    let Some(path) = std::env::var_os(SKIP_LOG_VAR) else { return };
    let test = std::thread::current().name().unwrap_or("unnamed test").to_owned();
    let line = format!("{test}\t{}\n", why.replace(['\n', '\t'], " "));
    if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = file.write_all(line.as_bytes());
    }
}

/// Whether `kubectl` runs here (`kubectl version --client`). Tests never install it:
/// `scripts/install-test-deps.sh` does, before the tests run (`test.sh`).
pub fn kubectl_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        std::process::Command::new("kubectl")
            .args(["version", "--client"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}
