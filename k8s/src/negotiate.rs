//! Content negotiation as the apiserver does it (`endpoints/handlers/negotiation/negotiate.go` with
//! `munnerz/goautoneg`), the gzip decision (`responsewriters/compression.go`) and pretty printing.
//!
//! kache serves JSON (and the `PartialObjectMetadata` views) from memory, and protobuf (objects and the v1
//! metadata views) for the kinds it has a protobuf schema for; every other outcome (Table, YAML, CBOR,
//! v1beta1 metadata views, protobuf without a schema) is forwarded so the upstream produces it. A 406 is answered
//! locally only when no clause of the Accept header can match anything the apiserver offers.

use crate::status::ApiError;

/// Maximum Accept clauses examined; real clients send a handful. Bounds work on hostile headers.
pub const MAX_ACCEPT_CLAUSES: usize = 64;

/// The outcome of negotiation for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Negotiated {
    /// `application/json` (also `*/*`, `application/*`, no Accept). `pretty` is the `;pretty=1` parameter.
    Json { pretty: bool },
    /// `application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`.
    JsonPartialMetadata { list: bool, pretty: bool },
    /// `application/json;as=Table;g=meta.k8s.io;v=v1|v1beta1`: served from memory for the kinds kache has
    /// a printer for, else forwarded.
    JsonTable { v1: bool, pretty: bool },
    /// `as=Table` as YAML: forwarded.
    Table,
    /// `application/vnd.kubernetes.protobuf` (also its `;stream=watch` type), with or without a metadata
    /// view: served from memory for kinds with a protobuf schema (see `serve::protobuf`), else forwarded.
    Protobuf(ProtoView),
    /// `application/yaml` (with or without a metadata view): forwarded.
    Yaml,
    /// `application/cbor` (alpha on the apiserver): forwarded, the upstream decides.
    Cbor,
    /// `as=PartialObjectMetadata[List]` with `v=v1beta1`: forwarded.
    PartialMetadataV1beta1,
    /// Nothing acceptable: 406. `stream` selects the watch wording (stream media types).
    NotAcceptable { stream: bool },
}

/// The transformation a protobuf clause asks for (Tables have no protobuf form: such clauses are skipped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtoView {
    /// The object (or its list kind) itself.
    Object,
    /// `as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`.
    PartialMetadata { list: bool },
    /// The `v1beta1` metadata views: forwarded.
    PartialMetadataV1beta1,
}

// === impl Negotiated ===

impl Negotiated {
    /// Whether kache can answer this from memory (everything else is forwarded or a 406).
    pub fn served_from_memory(&self) -> bool {
        matches!(self, Self::Json { .. } | Self::JsonPartialMetadata { .. } | Self::JsonTable { .. })
    }

    /// The 406 to answer, for [`Negotiated::NotAcceptable`].
    pub fn error(&self) -> Option<ApiError> {
        match self {
            Self::NotAcceptable { stream } => Some(ApiError::not_acceptable(*stream)),
            _ => None,
        }
    }

    /// Whether the `;pretty=1` media type parameter asked for indentation.
    pub fn pretty(&self) -> bool {
        matches!(
            self,
            Self::Json { pretty: true }
                | Self::JsonPartialMetadata { pretty: true, .. }
                | Self::JsonTable { pretty: true, .. }
        )
    }
}

/// One serializer the apiserver offers (`runtime.SerializerInfo`), in `SupportedMediaTypes` order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Json,
    Yaml,
    Protobuf,
    Cbor,
}

/// (type, subtype, encoding, has a stream serializer).
const SUPPORTED: &[(&str, &str, Encoding, bool)] = &[
    ("application", "json", Encoding::Json, true),
    ("application", "yaml", Encoding::Yaml, false),
    ("application", "vnd.kubernetes.protobuf", Encoding::Protobuf, true),
    ("application", "cbor", Encoding::Cbor, true),
];

/// One parsed Accept clause (`goautoneg.Accept`).
#[derive(Clone, Debug, PartialEq)]
pub struct Clause {
    /// The media type's type (`application`, `*`).
    pub typ: String,
    /// The media type's subtype (`json`, `*`).
    pub sub: String,
    /// The quality, 1 when absent, 0 when unparsable.
    pub q: f64,
    /// The parameters other than `q`, in header order.
    pub params: Vec<(String, String)>,
}

impl Clause {
    /// The last value of a parameter (Go stores params in a map: later duplicates win).
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// `goautoneg.ParseAccept`: split on `,` and `;`, trim spaces only, `q` parsed untrimmed (a bad q is 0),
/// then sorted with goautoneg's comparator using Go's insertion sort (what `sort.Sort` does for the short
/// lists real headers are), so ties keep header order.
pub fn parse_accept(header: &str) -> Vec<Clause> {
    let mut out: Vec<Clause> = Vec::new();
    for part in header.split(',').take(MAX_ACCEPT_CLAUSES) {
        let mut mrp = part.split(';');
        let media_range = mrp.next().unwrap_or("");
        let sp: Vec<&str> = media_range.split('/').collect();
        let typ = sp[0].trim_matches(' ');
        let (typ, sub) = match sp.len() {
            1 if typ == "*" => ("*".to_owned(), "*".to_owned()),
            2 => (typ.to_owned(), sp[1].trim_matches(' ').to_owned()),
            _ => continue,
        };
        let mut clause = Clause { typ, sub, q: 1.0, params: Vec::new() };
        for param in mrp {
            let Some((k, v)) = param.split_once('=') else { continue };
            let k = k.trim_matches(' ');
            if k == "q" {
                clause.q = v.parse::<f32>().map_or(0.0, f64::from);
            } else {
                clause.params.push((k.to_owned(), v.trim_matches(' ').to_owned()));
            }
        }
        out.push(clause);
    }
    let less = |a: &Clause, b: &Clause| {
        a.q > b.q || (a.typ != "*" && b.typ == "*") || (a.sub != "*" && b.sub == "*")
    };
    for i in 1..out.len() {
        let mut j = i;
        while j > 0 && less(&out[j], &out[j - 1]) {
            out.swap(j, j - 1);
            j -= 1;
        }
    }
    out
}

/// The transformation a clause asks for (`as`/`g`/`v`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum View {
    Object,
    Table { v1: bool },
    PartialMetadata { list: bool, v1: bool },
}

/// `acceptMediaTypeOptions` with the RequestScope's restrictions: `None` when the clause must be skipped.
fn accept_options(clause: &Clause, enc: Encoding, has_stream: bool) -> Option<(View, bool)> {
    if let Some(stream) = clause.param("stream")
        && !stream.is_empty()
        && (!has_stream || stream != "watch")
    {
        return None;
    }
    // RequestScope.AllowsServerVersion: only the meta group version of the server (v1).
    if let Some(sv) = clause.param("sv")
        && !sv.is_empty()
        && sv != "v1"
    {
        return None;
    }
    let pretty = clause.param("pretty") == Some("1");
    let converting = ["as", "g", "v"].iter().any(|k| clause.param(k).is_some());
    if !converting {
        return Some((View::Object, pretty));
    }
    let (kind, group, version) =
        (clause.param("as").unwrap_or(""), clause.param("g").unwrap_or(""), clause.param("v").unwrap_or(""));
    if group != "meta.k8s.io" || !(version == "v1" || version == "v1beta1") {
        return None;
    }
    let view = match kind {
        // Tables are only produced as JSON or YAML.
        "Table" if matches!(enc, Encoding::Json | Encoding::Yaml) => View::Table { v1: version == "v1" },
        "PartialObjectMetadata" => View::PartialMetadata { list: false, v1: version == "v1" },
        "PartialObjectMetadataList" => View::PartialMetadata { list: true, v1: version == "v1" },
        _ => return None,
    };
    Some((view, pretty))
}

/// Negotiates the response for a get or list (`NegotiateOutputMediaType`). `accept` is the first Accept
/// header value (Go's `Header.Get`).
pub fn negotiate(accept: Option<&str>) -> Negotiated {
    negotiate_inner(accept).map_or(Negotiated::NotAcceptable { stream: false }, |(n, _)| n)
}

/// Negotiates a watch: the normal negotiation, then the chosen serializer must be able to stream
/// (`NegotiateOutputMediaTypeStream`); YAML cannot, which is a 406 listing the stream media types.
pub fn negotiate_watch(accept: Option<&str>) -> Negotiated {
    match negotiate_inner(accept) {
        None => Negotiated::NotAcceptable { stream: false },
        Some((_, false)) => Negotiated::NotAcceptable { stream: true },
        Some((n, true)) => n,
    }
}

fn negotiate_inner(accept: Option<&str>) -> Option<(Negotiated, bool)> {
    let header = accept.unwrap_or("");
    if header.is_empty() {
        return Some((Negotiated::Json { pretty: false }, true));
    }
    for clause in parse_accept(header) {
        for &(typ, sub, enc, has_stream) in SUPPORTED {
            let matches = (clause.typ == typ && (clause.sub == sub || clause.sub == "*"))
                || (clause.typ == "*" && clause.sub == "*");
            if !matches {
                continue;
            }
            let Some((view, pretty)) = accept_options(&clause, enc, has_stream) else { continue };
            let n = match (enc, view) {
                (Encoding::Json, View::Table { v1 }) => Negotiated::JsonTable { v1, pretty },
                (_, View::Table { .. }) => Negotiated::Table,
                (Encoding::Json, View::Object) => Negotiated::Json { pretty },
                (Encoding::Json, View::PartialMetadata { list, v1: true }) => {
                    Negotiated::JsonPartialMetadata { list, pretty }
                }
                (Encoding::Json, View::PartialMetadata { v1: false, .. }) => {
                    Negotiated::PartialMetadataV1beta1
                }
                (Encoding::Yaml, _) => Negotiated::Yaml,
                (Encoding::Protobuf, View::PartialMetadata { list, v1: true }) => {
                    Negotiated::Protobuf(ProtoView::PartialMetadata { list })
                }
                (Encoding::Protobuf, View::PartialMetadata { v1: false, .. }) => {
                    Negotiated::Protobuf(ProtoView::PartialMetadataV1beta1)
                }
                (Encoding::Protobuf, _) => Negotiated::Protobuf(ProtoView::Object),
                (Encoding::Cbor, _) => Negotiated::Cbor,
            };
            return Some((n, has_stream));
        }
    }
    None
}

/// Whether an error's Status can be negotiated on this Accept header (`WriteObjectNegotiated` with
/// `DefaultEndpointRestrictions`: no `as=`/`g=`/`v=` transformation, no `sv=`). When it cannot — a header
/// asking only for a Table or a metadata view — the apiserver writes the error with `WriteRawJSON`
/// (indented, no trailing newline) and its own status code.
pub fn error_negotiable(accept: Option<&str>) -> bool {
    let header = accept.unwrap_or("");
    if header.is_empty() {
        return true;
    }
    parse_accept(header).iter().any(|clause| {
        let converting = ["as", "g", "v"].iter().any(|k| clause.param(k).is_some());
        let sv = clause.param("sv").is_some_and(|v| !v.is_empty());
        let stream = clause.param("stream").is_some_and(|v| !v.is_empty() && v != "watch");
        !converting
            && !sv
            && !stream
            && SUPPORTED.iter().any(|&(typ, sub, _, _)| {
                (clause.typ == typ && (clause.sub == sub || clause.sub == "*"))
                    || (clause.typ == "*" && clause.sub == "*")
            })
    })
}

/// Whether an error's Status is written in protobuf: the first clause that the error's negotiation accepts
/// (no `as`/`g`/`v` transformation, no `sv`, a stream type only as `watch`) names protobuf rather than JSON
/// or YAML (`WriteObjectNegotiated`: a Status has a protobuf form whatever the resource). `*/*` and
/// `application/*` pick JSON, the first serializer offered.
pub fn error_in_protobuf(accept: Option<&str>) -> bool {
    let header = accept.unwrap_or("");
    for clause in parse_accept(header) {
        let converting = ["as", "g", "v"].iter().any(|k| clause.param(k).is_some());
        let sv = clause.param("sv").is_some_and(|v| !v.is_empty() && v != "v1");
        let stream = clause.param("stream").is_some_and(|v| !v.is_empty() && v != "watch");
        if converting || sv || stream {
            continue;
        }
        for &(typ, sub, enc, _) in SUPPORTED {
            let matches = (clause.typ == typ && (clause.sub == sub || clause.sub == "*"))
                || (clause.typ == "*" && clause.sub == "*");
            if matches {
                return enc == Encoding::Protobuf;
            }
        }
    }
    false
}

/// go-restful's `Route.matchesAccept`, which selects a typed resource's route before the apiserver's own
/// negotiation runs: some comma-separated clause, its parameters cut at the first `;` and spaces trimmed,
/// is `*/*` or exactly one of `produces` (case-sensitive; no `type/*` wildcards). No Accept header counts
/// as `*/*` (`RouterJSR311.detectRoute`). `false` is go-restful's 406.
pub fn route_accepts(accept: Option<&str>, produces: &[&str]) -> bool {
    let Some(accept) = accept.filter(|a| !a.is_empty()) else { return true };
    accept.split(',').take(MAX_ACCEPT_CLAUSES).any(|clause| {
        let media = clause.split(';').next().unwrap_or("").trim_matches(' ');
        media == "*/*" || produces.contains(&media)
    })
}

/// Whether to gzip (`negotiateContentEncoding`): some comma-separated token of the first
/// Accept-Encoding value is exactly `gzip` after trimming whitespace (`gzip;q=1.0` does not count).
/// The caller still applies the size threshold and never compresses watches.
pub fn accepts_gzip(accept_encoding: &str) -> bool {
    accept_encoding.split(',').any(|t| t.trim() == "gzip")
}

/// `isPrettyPrint`: a non-empty `pretty` query parameter decides (`strconv.ParseBool`, invalid is
/// false); otherwise User-Agents of humans (curl, Wget, browsers) get indented JSON.
pub fn wants_pretty(pretty_param: Option<bool>, user_agent: Option<&str>) -> bool {
    if let Some(p) = pretty_param {
        return p;
    }
    let ua = user_agent.unwrap_or("");
    ua.starts_with("curl") || ua.starts_with("Wget") || ua.starts_with("Mozilla/5.0")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn n(accept: &str) -> Negotiated {
        negotiate(Some(accept))
    }

    #[test]
    fn real_client_headers() {
        // kubectl get (Table), kubectl get -o json, client-go JSON and protobuf defaults, metadata informers.
        assert_eq!(
            n(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
            ),
            Negotiated::JsonTable { v1: true, pretty: false }
        );
        assert_eq!(n("application/json"), Negotiated::Json { pretty: false });
        assert_eq!(n("application/json, */*"), Negotiated::Json { pretty: false });
        assert_eq!(n("application/vnd.kubernetes.protobuf, */*"), Negotiated::Protobuf(ProtoView::Object));
        assert_eq!(
            n(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1,application/json"
            ),
            Negotiated::JsonPartialMetadata { list: true, pretty: false }
        );
        assert_eq!(
            n("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"),
            Negotiated::JsonPartialMetadata { list: false, pretty: false }
        );
        assert_eq!(n("*/*"), Negotiated::Json { pretty: false });
        assert_eq!(negotiate(None), Negotiated::Json { pretty: false });
        assert_eq!(
            n("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
            Negotiated::Json { pretty: false }
        );
        assert_eq!(n("application/*"), Negotiated::Json { pretty: false });
        assert_eq!(n("application/yaml"), Negotiated::Yaml);
        assert_eq!(n("application/cbor"), Negotiated::Cbor);
        assert_eq!(n("application/json;pretty=1"), Negotiated::Json { pretty: true });
    }

    #[test]
    fn preference_and_restrictions() {
        assert_eq!(n("application/json;q=0.5, application/yaml"), Negotiated::Yaml);
        assert_eq!(n("application/yaml;q=0.1, application/json;q=0.9"), Negotiated::Json { pretty: false });
        // Table only as JSON or YAML: a protobuf Table clause is skipped.
        assert_eq!(
            n("application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1, application/json"),
            Negotiated::Json { pretty: false }
        );
        assert_eq!(
            n("application/json;as=Table;g=meta.k8s.io;v=v1"),
            Negotiated::JsonTable { v1: true, pretty: false }
        );
        assert_eq!(
            n("application/json;as=Table;g=meta.k8s.io;v=v1beta1"),
            Negotiated::JsonTable { v1: false, pretty: false }
        );
        assert_eq!(n("application/yaml;as=Table;g=meta.k8s.io;v=v1"), Negotiated::Table);
        // An error's Status cannot be a Table: without a plain clause it is written raw.
        assert!(!error_negotiable(Some("application/json;as=Table;g=meta.k8s.io;v=v1")));
        assert!(error_negotiable(Some("application/json;as=Table;g=meta.k8s.io;v=v1, application/json")));
        assert!(error_negotiable(Some("application/json;as=Table;g=meta.k8s.io;v=v1, */*")));
        assert!(error_negotiable(None));
        assert!(!error_negotiable(Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")));
        assert_eq!(
            n("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1"),
            Negotiated::PartialMetadataV1beta1
        );
        assert_eq!(
            n("application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
            Negotiated::Protobuf(ProtoView::PartialMetadata { list: true })
        );
        // What client-go's metadata informers send (protobuf first, JSON as the fallback).
        assert_eq!(
            n(
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
            ),
            Negotiated::Protobuf(ProtoView::PartialMetadata { list: false })
        );
        assert_eq!(
            n("application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1"),
            Negotiated::Protobuf(ProtoView::PartialMetadataV1beta1)
        );
        // q-values order the clauses, as for JSON.
        assert_eq!(
            n("application/vnd.kubernetes.protobuf;q=0.5, application/json"),
            Negotiated::Json { pretty: false }
        );
        assert_eq!(
            n("application/json;q=0.5, application/vnd.kubernetes.protobuf"),
            Negotiated::Protobuf(ProtoView::Object)
        );
        // Unknown transformations and groups are not acceptable.
        assert_eq!(
            n("application/json;as=Foo;g=meta.k8s.io;v=v1"),
            Negotiated::NotAcceptable { stream: false }
        );
        assert_eq!(n("application/json;as=Table"), Negotiated::NotAcceptable { stream: false });
        assert_eq!(n("text/plain"), Negotiated::NotAcceptable { stream: false });
        assert_eq!(n(" "), Negotiated::NotAcceptable { stream: false });
        assert_eq!(n("application/json;stream=other"), Negotiated::NotAcceptable { stream: false });
        assert_eq!(n("application/yaml;stream=watch, application/json"), Negotiated::Json { pretty: false });
        assert_eq!(n("application/json;sv=v2"), Negotiated::NotAcceptable { stream: false });
        // Case matters, like in the apiserver.
        assert_eq!(n("Application/JSON"), Negotiated::NotAcceptable { stream: false });
        assert_eq!(n("text/plain").error().expect("406").status_code(), 406);
    }

    #[test]
    fn errors_in_protobuf_follow_the_first_plain_clause() {
        assert!(error_in_protobuf(Some("application/vnd.kubernetes.protobuf, application/json")));
        assert!(error_in_protobuf(Some("application/vnd.kubernetes.protobuf;stream=watch")));
        assert!(!error_in_protobuf(Some("application/json, application/vnd.kubernetes.protobuf")));
        assert!(!error_in_protobuf(Some("*/*")));
        assert!(!error_in_protobuf(None));
        // A metadata view cannot carry a Status: the next plain clause decides.
        assert!(!error_in_protobuf(Some(
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
        )));
        assert!(error_in_protobuf(Some(
            "application/json;as=Table;g=meta.k8s.io;v=v1, application/vnd.kubernetes.protobuf"
        )));
        assert!(!error_in_protobuf(Some("application/vnd.kubernetes.protobuf;q=0.5, application/json")));
    }

    #[test]
    fn watch_negotiation() {
        assert_eq!(
            negotiate_watch(Some("application/json;stream=watch")),
            Negotiated::Json { pretty: false }
        );
        assert_eq!(
            negotiate_watch(Some("application/vnd.kubernetes.protobuf;stream=watch")),
            Negotiated::Protobuf(ProtoView::Object)
        );
        assert_eq!(negotiate_watch(Some("application/yaml")), Negotiated::NotAcceptable { stream: true });
        assert_eq!(
            negotiate_watch(Some("application/yaml, application/json")),
            Negotiated::NotAcceptable { stream: true }
        );
        assert_eq!(negotiate_watch(Some("text/plain")), Negotiated::NotAcceptable { stream: false });
        assert_eq!(
            negotiate_watch(Some("application/yaml")).error().expect("406").to_string(),
            "only the following media types are accepted: application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch"
        );
    }

    #[test]
    fn route_selection_is_go_restful() {
        use crate::status::{ROUTE_GET_PRODUCES, ROUTE_LIST_PRODUCES};
        let get = |a: &str| route_accepts(Some(a), ROUTE_GET_PRODUCES);
        assert!(route_accepts(None, ROUTE_GET_PRODUCES));
        assert!(route_accepts(Some(""), ROUTE_GET_PRODUCES));
        assert!(get("application/json;as=Foo;g=meta.k8s.io;v=v1"));
        assert!(get("text/plain, */*;q=0.1"));
        assert!(get(" application/yaml ;q=0.5"));
        for refused in ["application/*", "APPLICATION/JSON", "image/*", "text/plain", "application/xml", " "]
        {
            assert!(!get(refused), "{refused}");
        }
        // The stream types never match: a clause is cut at its first `;`.
        assert!(!route_accepts(Some("application/json;stream=watch"), &ROUTE_LIST_PRODUCES[3..]));
        assert_eq!(
            crate::status::ApiError::route_not_acceptable(false).to_raw_json(),
            "{\n  \"kind\": \"Status\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {},\n  \"status\": \"Failure\",\n  \"message\": \"406: Not Acceptable\\n\\nAvailable representations: application/json, application/yaml, application/vnd.kubernetes.protobuf\",\n  \"reason\": \"NotAcceptable\",\n  \"details\": {},\n  \"code\": 406\n}"
        );
    }

    #[test]
    fn gzip_token_must_be_exact() {
        assert!(accepts_gzip("gzip"));
        assert!(accepts_gzip("gzip, deflate, br"));
        assert!(accepts_gzip("deflate, , gzip,"));
        assert!(!accepts_gzip("gzip;q=1.0"));
        assert!(!accepts_gzip("x-gzip"));
        assert!(!accepts_gzip(""));
    }

    #[test]
    fn pretty_printing() {
        assert!(wants_pretty(None, Some("curl/8.5.0")));
        assert!(wants_pretty(None, Some("Wget/1.21")));
        assert!(wants_pretty(None, Some("Mozilla/5.0 (X11)")));
        assert!(!wants_pretty(None, Some("kubectl/v1.34.0")));
        assert!(!wants_pretty(Some(false), Some("curl/8.5.0")));
        assert!(wants_pretty(Some(true), None));
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,80}") {
            let _ = negotiate(Some(&s));
            let _ = negotiate_watch(Some(&s));
            let _ = accepts_gzip(&s);
        }

        #[test]
        fn sorted_by_quality(a in 0u8..10, b in 0u8..10) {
            let h = format!("application/yaml;q=0.{a}, application/json;q=0.{b}");
            let expect = if b > a { Negotiated::Json { pretty: false } } else { Negotiated::Yaml };
            prop_assert_eq!(n(&h), expect);
        }
    }
}
