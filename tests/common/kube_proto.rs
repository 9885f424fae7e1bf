//! kube-proto (built by `testbed/build.sh`): the real Kubernetes Go types and protobuf serializers, the reference the
//! protobuf tests compare with.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// kube-proto: `$KUBE_PROTO`, or the testbed's.
pub fn path() -> Option<PathBuf> {
    static PATH: OnceLock<Option<PathBuf>> = OnceLock::new();
    PATH.get_or_init(|| super::real::testbed_tool("KUBE_PROTO", "kube-proto")).clone()
}

/// kube-proto's path, or `None` after reporting it missing (a failure under `KACHE_REQUIRE_TOOLS=1`).
pub fn require() -> Option<PathBuf> {
    let found = path();
    if found.is_none() {
        super::tools::missing(&format!("the testbed's kube-proto is not built: {}", super::real::BUILD_HINT));
    }
    found
}

/// Runs `kube-proto CMD` on `input`; panics with its stderr on failure.
pub fn run(bin: &Path, cmd: &str, input: &[u8]) -> Vec<u8> {
    let mut child = Command::new(bin)
        .arg(cmd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kube-proto runs");
    child.stdin.take().expect("stdin").write_all(input).expect("write stdin");
    let out = child.wait_with_output().expect("kube-proto ends");
    assert!(out.status.success(), "kube-proto {cmd} failed: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}
