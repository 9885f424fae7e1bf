//! Exports the path of the protoc vendored by `protoc-bin-vendored` as `KACHE_VENDORED_PROTOC` (nothing reads
//! it at run time). The build-dependency is what matters: it makes cargo unpack the vendored protoc before any
//! build script runs, so etcd-client's finds it through `scripts/protoc` (`.cargo/config.toml`'s `PROTOC`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Ok(path) = protoc_bin_vendored::protoc_bin_path() {
        println!("cargo:rustc-env=KACHE_VENDORED_PROTOC={}", path.display());
    }
}
