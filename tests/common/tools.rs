//! Tests that need a tool from outside cargo (kubectl, Prometheus, a Python venv, the real apiserver in
//! ../shared/apiserver): the one rule for what happens when it is missing.
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
