//! kache's integration tests: one binary (`cargo test -p kache --test it`), one module per area. Each
//! starts the simulated apiserver (kache-sim) and kache on ephemeral loopback ports and talks HTTP, unless
//! it says otherwise. Run one area with `cargo test -p kache --test it watch::`, one test with
//! `cargo test -p kache --test it -- --exact list::name_of_the_test`.
//!
//! | module | what it covers | outside tool it needs |
//! |---|---|---|
//! | `auth` | `--auth=delegated`: the authorization matrix (users × verbs × scopes), from memory and forwarded, revocation within the TTLs, client certificates | — |
//! | `chain` | a kache behind a kache under foreign writes: bookmarks passed on, consistent reads proven through the chain | — |
//! | `consistency` | linearizability of consistent reads under concurrent writers, busy and quiet resources | — |
//! | `convergence` | reflectors converge to the sim byte for byte through churn and injected faults | — |
//! | `demo` | `kache demo` as a user meets it: owners consistent, OpenAPI schemas, its limits said plainly, its output | `kubectl` (explain, validation, exec) |
//! | `filtered` | node- and label-filtered mirrors (`--resource-selector`): what they cache, serve and forward | — |
//! | `foreign` | a real cluster's foreign writes (leases, events): no 504 for paginated reads, freshness proofs | — |
//! | `forward` | the forwarding front over a scripted upstream: headers, streaming, upgrades, limits, TLS kubeconfigs | `openssl`; `kubectl` for `kubectl_through_kache` |
//! | `impersonation` | `Impersonate-*` under `--auth=delegated`, the chained node → regional deployment, `kubectl --as` | `kubectl` (the last test) |
//! | `instances` | two kaches in one process share no Table state; a stopped kache leaves no thread behind | — |
//! | `kube_apiserver` | kache in front of a real kube-apiserver 1.36 cluster (controllers, scheduler, simulated nodes): every built-in kind in JSON, protobuf, Table and metadata, pages, selectors, gets, watches and errors, byte for byte | the testbed (`scripts/cluster.sh`; Go builds it) |
//! | `kube_bookmarks` | the pre-deadline bookmark of a quiet resource after a foreign write (what kache's freshness proof relies on), kube-apiserver 1.36 vs kache-sim: at or past the write once a consistent read of the resource followed it, behind it otherwise | the testbed |
//! | `kube_clients` | real clients through kache in front of the real 1.36 cluster with the testbed's token users, compared with the same client direct: kube-rs reflectors (list-then-watch, paginated, streaming lists) on pods and nodes converge to the apiserver's state, paginated lists, gets, a write read back, RBAC refusals; the Python client's lists, pages, watch from a resourceVersion, gets and refusals | the testbed; the Python venv (`scripts/install-test-deps.sh`) |
//! | `kube_protobuf` | every built-in kind of the real kube-apiserver 1.36 (one object of each created first) in protobuf: each object transcoded as the Go encoder does, lists, gets and watches byte for byte and served from memory, no transcoder refusal | the testbed (`kube-proto` too) |
//! | `kube_control` | the control plane's own clients (controller-manager, scheduler, kwok nodes) through kache with their own tokens: nodes Ready, pods bound and Running, scale and delete carried out, leader-election leases renewed | the testbed |
//! | `kube_security` | `--auth=delegated` against the real kube-apiserver's TokenReview and RBAC: the read matrix (users, a group, a service account, a client certificate, a bad token, impersonation) answered as the apiserver answers, directly through kache and through a chain of two kaches; a certificate with a token is the certificate's user; expired, expiring and revoked service-account tokens refused as the apiserver refuses them, within the token cache's TTL | the testbed (`openssl` mints expired tokens) |
//! | `kube_etcd` | etcd as the freshness oracle (`--etcd-endpoints`) in front of the real cluster: consistent get, lists and WatchList linearizable under a writer and foreign writes, across etcd and apiserver restarts and a compaction, served from memory; etcd unreachable falls back without error; etcd revision == resourceVersion | the testbed |
//! | `kube_rs` | kube-rs reflectors and a controller loop through kache, across kache and sim restarts | — |
//! | `kubectl` | every kubectl command against kache and against the sim directly: equal output | `kubectl` |
//! | `list` | differential get and list: bodies, continue tokens, remainingItemCount, served from memory | — |
//! | `memory` | reads from memory streamed with bounded buffers, the read byte budget (429) | — |
//! | `metrics` | instance-scoped metrics: two kaches in one process export independent series | — |
//! | `metrics_move` | every documented metric moves under a workload that exercises all of kache | — |
//! | `negotiation` | content negotiation: every Accept header real clients send, differential | — |
//! | `ops` | the metrics listener, dashboards vs exported names, the metrics table of docs/metrics.md, deploy manifests, a real Prometheus | `prometheus`, `promtool`, `kubectl` (kustomize), the ops venv (kubernetes-validate) |
//! | `protobuf` | the sim's protobuf against the real Go encoder; kubectl's protobuf writes through kache | `kube-proto` (the testbed), `kubectl` |
//! | `protobuf_codec` | kache's protobuf transcoder against the real Go encoder (every schema kind, metadata views, lists, watch frames) and, by proptest, against the sim's encoder | `kube-proto` (the testbed) |
//! | `protobuf_serve` | protobuf get, list and watch from memory, byte-identical to the sim's, decoded equal to kache's JSON; a client-go informer in protobuf through kache; untranscodable objects forwarded | `informer-check` (the testbed) |
//! | `readiness` | `/readyz` fails until discovery and the configured resources' sync, and while the upstream is unreachable past its grace (unreachable and flapping upstreams); `/livez` never does | — |
//! | `python` | the official Kubernetes Python client through kache | the Python venv (`scripts/install-test-deps.sh`) |
//! | `real_apiserver` | kache in front of the real 1.36 apiservers: every read equal byte for byte, watches, compaction, client-go informers | the testbed (bash, curl, python3; Go builds it), `informer-check` |
//! | `resume` | memory per resuming watcher is O(1) however far back it resumes | — |
//! | `sim_vs_real` | kache-sim checked against the real CRD apiserver, directly and through kache | the testbed |
//! | `table` | Table output: `kubectl get` through kache equals the sim's; Table bytes; CRD columns vs the real apiserver | `kubectl`, the testbed |
//! | `table_real` | Tables of kinds without a printer (generic columns) against the real apiservers | the testbed, `kubectl` |
//! | `watch` | watch fan-out, differential watches, slow watchers, event sequences under churn, kube-rs watchers | — |
//!
//! Shared: `common` (tests/common/: start the sim and kache, HTTP helpers, the real apiservers, the rule
//! for missing tools) and `alloc` (the counting global allocator `memory` and `resume` measure with).
//!
//! **Missing tools.** A test whose outside tool is missing prints `SKIPPED: <why>` and passes, unless
//! `KACHE_REQUIRE_TOOLS=1` (set by `.ci/run`): then it fails (`common::tools`). No test installs anything;
//! `scripts/install-test-deps.sh` (run by `test.sh`) does.
//!
//! **One process.** Every test runs on a thread of this one process, so nothing may depend on process-wide
//! state another test changes. Every test binds its own ephemeral ports, uses its own temporary directories
//! (the real apiservers: `target/real-apiserver/<test's own name>`), sets no environment variable and never
//! changes the current directory; kache installs no tracing subscriber in tests. Each kache's state is its
//! own (its metrics, caches, pools and threads: docs/architecture.md), so tests of different kaches never see
//! each other's figures (`instances`). Only heap measurements, which need the whole process quiet (`memory`,
//! `forward::large_bodies_stream_with_bounded_memory`), run alone in a child process of this binary
//! (`common::alone::run_in_own_process`, the parent test fails when the child fails or did not run: the
//! `*_in_own_process` tests, `#[ignore]`d so that only their parent runs them); `resume` counts per thread and
//! needs nothing.

#[path = "../common/mod.rs"]
mod common;

mod alloc;

mod auth;
mod chain;
mod consistency;
mod convergence;
mod demo;
mod filtered;
mod foreign;
mod forward;
mod impersonation;
mod instances;
mod kube_apiserver;
mod kube_bookmarks;
mod kube_clients;
mod kube_control;
mod kube_etcd;
mod kube_protobuf;
mod kube_rs;
mod kube_security;
mod kubectl;
mod list;
mod memory;
mod metrics;
mod metrics_move;
mod negotiation;
mod ops;
mod protobuf;
mod protobuf_codec;
mod protobuf_serve;
mod python;
mod readiness;
mod real_apiserver;
mod resume;
mod sim_vs_real;
mod table;
mod table_real;
mod watch;
