//! Label values. Every label set is bounded: fixed sets are enums, verbs are normalised to the apiserver's
//! fixed list, status codes to the valid HTTP range, and resource names to the configured/discovered set
//! (see `resource`: at most [`MAX_RESOURCES`](super::resource::MAX_RESOURCES) distinct resources).

use std::sync::OnceLock;

use crate::resource::{Gvr, ResourceInfo};

/// Where a response came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// Served by kache from its stores.
    Memory,
    /// Forwarded to the upstream apiserver.
    Upstream,
}

/// What kind of request was passed through to the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ForwardKind {
    /// get/list/watch that kache could not serve from memory (not cached, not synced, not fresh, ...).
    Read,
    /// create/update/patch/delete.
    Write,
    /// Upgraded connections: exec, attach, port-forward, proxy.
    Upgrade,
    /// Everything else (discovery, non-resource URLs, ...).
    Other,
}

/// Why a request to the upstream failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UpstreamErrorReason {
    /// TCP connection refused, reset or unreachable.
    Connect,
    /// No response (or no progress) within the deadline.
    Timeout,
    /// TLS handshake or certificate failure.
    Tls,
    /// 429 Too Many Requests (API priority and fairness).
    Throttled,
    /// 410 Gone: the resourceVersion is too old (the reflector relists).
    Gone,
    /// Any other 5xx.
    Server,
    /// Any other 4xx.
    Client,
    /// A response that could not be decoded.
    Decode,
    /// A watch stream that ended or broke unexpectedly.
    Stream,
    Other,
}

/// How a consistent read's freshness check ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FreshnessOutcome {
    /// The store reached the upstream's revision: served from memory.
    Fresh,
    /// The store did not reach the probed revision in time.
    Lagging,
    /// The probe of the upstream's revision failed.
    ProbeError,
    /// Behind the upstream's known revision with no advance expected soon: forwarded without a probe.
    Quiet,
    /// Too small for a probe to pay off (a get, a small list): forwarded without a probe.
    Small,
    /// The upstream answered the freshness steps too slowly: cut short at the read's cutoff and forwarded.
    Slow,
}

/// Why kache refused a request itself (a 429 or 504 of its own, not the upstream's relayed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// 504: neither the store nor the upstream reached the requested resourceVersion in the block timeout
    /// (the apiserver answers the same).
    TooLargeResourceVersion,
    /// 429: a consistent read not proven fresh, where the operator chose `--consistent-read-fallback=429`.
    ConsistentReadFallback,
    /// 429: the read byte budget of reads from memory is spent.
    ReadBytes,
    /// 429: too many watchers of the resource.
    Watchers,
}

/// Whether an auth decision came from kache's cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuthResult {
    Hit,
    Miss,
}

/// The auth decision itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuthDecision {
    Allow,
    Deny,
    /// The review could not be completed (upstream error).
    Error,
}

/// A bounded resource whose limit refused a request or connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    /// Concurrent client connections.
    Connections,
    /// Concurrent in-flight (non-watch) requests.
    Inflight,
    /// Concurrent watchers.
    Watchers,
    /// Request body size.
    RequestBody,
    /// Request header size or count.
    Headers,
    /// Requests per client (`--client-qps`).
    Requests,
    /// TokenReviews per source address (unseen tokens).
    TokenReviews,
    /// SubjectAccessReviews per user (decisions not cached): a read over it is forwarded instead.
    AccessReviews,
    /// Concurrent consistent reads falling back upstream.
    Fallbacks,
    /// Size of an upstream response kache buffers.
    ResponseBody,
    /// Bytes of memory-served lists in flight (`--max-read-bytes-inflight`).
    ReadBytes,
    /// Heavy (pretty-printed or gzipped) list bodies in flight: 8 per heavy-body producer.
    HeavyBodies,
}

/// How the list body cache answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BodyCacheResult {
    Hit,
    Coalesced,
    Miss,
}

/// How the gzip cache answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GzipCacheResult {
    Hit,
    Coalesced,
    Miss,
    Bypass,
}

/// Why a gzip cache entry was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GzipEviction {
    Replaced,
    Idle,
    Size,
}

/// A response's content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    Json,
    Protobuf,
    Cbor,
    Other,
}

/// Whether a response was assembled by kache or passed through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Served {
    Memory,
    Forwarded,
}

macro_rules! label_values {
    ($ty:ty { $($variant:ident => $s:literal),+ $(,)? }) => {
        impl $ty {
            /// Every value, for pre-registering series at zero.
            pub const ALL: &'static [$ty] = &[$(<$ty>::$variant),+];

            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self { $(<$ty>::$variant => $s),+ }
            }
        }
    };
}

label_values!(Source { Memory => "memory", Upstream => "upstream" });
label_values!(ForwardKind { Read => "read", Write => "write", Upgrade => "upgrade", Other => "other" });
label_values!(UpstreamErrorReason {
    Connect => "connect", Timeout => "timeout", Tls => "tls", Throttled => "throttled", Gone => "gone",
    Server => "server", Client => "client", Decode => "decode", Stream => "stream", Other => "other",
});
label_values!(FreshnessOutcome {
    Fresh => "fresh", Lagging => "lagging", ProbeError => "probe_error", Quiet => "quiet",
    Small => "small", Slow => "slow",
});
label_values!(Refusal {
    TooLargeResourceVersion => "too_large_resource_version", ConsistentReadFallback => "consistent_read_fallback",
    ReadBytes => "read_bytes", Watchers => "watchers",
});
label_values!(AuthResult { Hit => "hit", Miss => "miss" });
label_values!(AuthDecision { Allow => "allow", Deny => "deny", Error => "error" });
label_values!(Limit {
    Connections => "connections", Inflight => "inflight", Watchers => "watchers", RequestBody => "request_body",
    Headers => "headers", Fallbacks => "fallbacks", ResponseBody => "response_body",
    Requests => "requests", TokenReviews => "token_reviews", AccessReviews => "access_reviews", ReadBytes => "read_bytes", HeavyBodies => "heavy_bodies",
});
label_values!(GzipCacheResult { Hit => "hit", Coalesced => "coalesced", Miss => "miss", Bypass => "bypass" });
label_values!(BodyCacheResult { Hit => "hit", Coalesced => "coalesced", Miss => "miss" });
label_values!(GzipEviction { Replaced => "replaced", Idle => "idle", Size => "size" });
label_values!(Encoding { Json => "json", Protobuf => "protobuf", Cbor => "cbor", Other => "other" });
label_values!(Served { Memory => "memory", Forwarded => "forwarded" });

impl UpstreamErrorReason {
    /// The reason for an upstream HTTP status that is an error (≥ 400), `None` otherwise.
    pub fn from_status(code: u16) -> Option<Self> {
        match code {
            410 => Some(Self::Gone),
            429 => Some(Self::Throttled),
            400..=499 => Some(Self::Client),
            500..=599 => Some(Self::Server),
            _ => None,
        }
    }
}

impl Encoding {
    /// The encoding of a `Content-Type` header value (parameters ignored).
    pub fn from_content_type(content_type: &str) -> Self {
        // Parameters (`;stream=watch`, `;charset=utf-8`) do not change the encoding.
        let media = content_type.split(';').next().unwrap_or("").trim();
        let is = |m: &str| media.eq_ignore_ascii_case(m);
        if is("application/json") {
            Self::Json
        } else if is("application/vnd.kubernetes.protobuf") {
            Self::Protobuf
        } else if is("application/cbor") || is("application/cbor-seq") {
            Self::Cbor
        } else {
            Self::Other
        }
    }
}

/// The apiserver's reported verbs (`validRequestMethods`); anything else is reported as `other`.
const VERBS: &[&str] = &[
    "APPLY",
    "CONNECT",
    "CREATE",
    "DELETE",
    "DELETECOLLECTION",
    "GET",
    "LIST",
    "PATCH",
    "POST",
    "PROXY",
    "PUT",
    "UPDATE",
    "WATCH",
    "WATCHLIST",
];
/// The apiserver's label for verbs outside [`VERBS`] (`OtherRequestMethod`).
const OTHER_VERB: &str = "other";

/// The verb label: one of the apiserver's verbs in upper case (matched case-insensitively), else `other`.
pub fn verb(verb: &str) -> &'static str {
    VERBS.iter().find(|v| v.eq_ignore_ascii_case(verb)).copied().unwrap_or(OTHER_VERB)
}

/// Highest status code given its own label value; anything outside 100..=599 is reported as `0`
/// (no response, or a code no HTTP peer should send).
const MAX_CODE: u16 = 599;

/// The status code label. Allocation-free: the strings are built once.
pub fn code(code: u16) -> &'static str {
    static CODES: OnceLock<Vec<String>> = OnceLock::new();
    let codes = CODES.get_or_init(|| (0..=MAX_CODE).map(|c| c.to_string()).collect());
    let index = if (100..=MAX_CODE).contains(&code) { usize::from(code) } else { 0 };
    codes[index].as_str()
}

/// Something that names a resource for labels: `group` and `resource` (plural), as the apiserver labels them.
pub trait AsResource {
    fn group(&self) -> &str;
    fn resource(&self) -> &str;
}

impl AsResource for Gvr {
    fn group(&self) -> &str {
        &self.group
    }
    fn resource(&self) -> &str {
        &self.resource
    }
}

impl AsResource for ResourceInfo {
    fn group(&self) -> &str {
        &self.gvr.group
    }
    fn resource(&self) -> &str {
        &self.gvr.resource
    }
}

/// A group-resource string as the apiserver prints `schema.GroupResource`: `pods`, `deployments.apps`.
impl AsResource for str {
    fn group(&self) -> &str {
        self.split_once('.').map_or("", |(_, group)| group)
    }
    fn resource(&self) -> &str {
        self.split_once('.').map_or(self, |(resource, _)| resource)
    }
}

impl AsResource for String {
    fn group(&self) -> &str {
        self.as_str().group()
    }
    fn resource(&self) -> &str {
        self.as_str().resource()
    }
}

impl<T: AsResource + ?Sized> AsResource for &T {
    fn group(&self) -> &str {
        (**self).group()
    }
    fn resource(&self) -> &str {
        (**self).resource()
    }
}

/// The longest group name Kubernetes accepts (a DNS subdomain).
const MAX_NAME_LEN: usize = 253;

/// Whether a group or resource name may become a label value: the characters Kubernetes allows in them
/// (lower-case DNS names). Anything else came from a malformed request and is reported as `other`.
pub(crate) fn valid_name(name: &str) -> bool {
    name.len() <= MAX_NAME_LEN
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_normalise_to_the_apiserver_set() {
        assert_eq!(verb("list"), "LIST");
        assert_eq!(verb("WATCH"), "WATCH");
        assert_eq!(verb("deletecollection"), "DELETECOLLECTION");
        assert_eq!(verb("BREW"), "other");
        assert_eq!(verb(""), "other");
    }

    #[test]
    fn codes_are_bounded() {
        assert_eq!(code(200), "200");
        assert_eq!(code(410), "410");
        assert_eq!(code(599), "599");
        assert_eq!(code(600), "0");
        assert_eq!(code(99), "0");
        assert_eq!(code(u16::MAX), "0");
    }

    #[test]
    fn group_resource_strings_split_like_the_apiserver() {
        assert_eq!(("pods".group(), "pods".resource()), ("", "pods"));
        let gr = "deployments.apps";
        assert_eq!((gr.group(), gr.resource()), ("apps", "deployments"));
        let crd = String::from("flunders.wardle.example.com");
        assert_eq!((crd.group(), crd.resource()), ("wardle.example.com", "flunders"));
        let gvr = Gvr::new("apps", "v1", "deployments");
        let by_ref: &Gvr = &gvr;
        assert_eq!((by_ref.group(), AsResource::resource(&by_ref)), ("apps", "deployments"));
    }

    #[test]
    fn names_outside_the_kubernetes_alphabet_are_rejected() {
        assert!(valid_name("pods"));
        assert!(valid_name("wardle.example.com"));
        assert!(valid_name(""));
        assert!(!valid_name("Pods"));
        assert!(!valid_name("pods\"}"));
        assert!(!valid_name(&"a".repeat(254)));
    }

    #[test]
    fn content_types_map_to_encodings() {
        assert_eq!(Encoding::from_content_type("application/json"), Encoding::Json);
        assert_eq!(Encoding::from_content_type("application/json; charset=utf-8"), Encoding::Json);
        assert_eq!(Encoding::from_content_type("application/vnd.kubernetes.protobuf"), Encoding::Protobuf);
        assert_eq!(Encoding::from_content_type("application/cbor"), Encoding::Cbor);
        assert_eq!(Encoding::from_content_type("text/html"), Encoding::Other);
        assert_eq!(Encoding::from_content_type(""), Encoding::Other);
    }

    #[test]
    fn statuses_classify_into_reasons() {
        assert_eq!(UpstreamErrorReason::from_status(410), Some(UpstreamErrorReason::Gone));
        assert_eq!(UpstreamErrorReason::from_status(429), Some(UpstreamErrorReason::Throttled));
        assert_eq!(UpstreamErrorReason::from_status(403), Some(UpstreamErrorReason::Client));
        assert_eq!(UpstreamErrorReason::from_status(503), Some(UpstreamErrorReason::Server));
        assert_eq!(UpstreamErrorReason::from_status(200), None);
        assert_eq!(UpstreamErrorReason::ALL.len(), 10);
    }
}
