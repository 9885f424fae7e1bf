//! Exports the path of the protoc vendored by `protoc-bin-vendored` (`KACHE_VENDORED_PROTOC`, shown by
//! `kache version`-style diagnostics and used by nothing at run time). etcd-client's build script finds the
//! same binary through `scripts/protoc` (`.cargo/config.toml`), since cargo runs it before this one.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Ok(path) = protoc_bin_vendored::protoc_bin_path() {
        println!("cargo:rustc-env=KACHE_VENDORED_PROTOC={}", path.display());
    }
}
