//! Tests that must have the process to themselves: they measure the heap, which is one per process and which
//! the other tests of the binary, running on other threads, would move.
//!
//! The pattern: a plain `#[test] fn x()` calls [`run_in_own_process`] with the full name of an
//! `#[ignore]`d `x_in_own_process` test, which does the work. The child is this same test binary, filtered
//! to that one test, so only it (and what it starts) runs in the child process.

use std::process::Command;

/// Runs the `#[ignore]`d test `name` (its full path in the binary, e.g. `memory::x_in_own_process`) alone
/// in a child process of this test binary; panics with the child's output when it failed or when no test
/// ran (a renamed test must not pass by running nothing). Returns the child's stderr.
#[track_caller]
pub fn run_in_own_process(name: &str) -> String {
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new(exe)
        .args(["--exact", name, "--ignored", "--nocapture", "--test-threads=1"])
        .output()
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{name} failed in its own process:\n{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "{name} did not run in its own process:\n{stdout}\n{stderr}");
    stderr
}
