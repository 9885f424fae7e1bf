//! Output views and Accept negotiation (`endpoints/handlers/negotiation` with `munnerz/goautoneg`, and the
//! transformations of `endpoints/handlers/response.go`).
//!
//! The sim encodes JSON (Tables too, see [`crate::table`]) and, for built-in kinds, protobuf
//! ([`crate::proto`]); custom resources are offered JSON and YAML only, as the CRD handler offers them. A
//! clause it cannot produce (YAML, protobuf for a custom resource) is skipped in favour of a later clause,
//! which every real client's Accept list ends with; when none is acceptable the answer is the apiserver's
//! 406. The metadata-only views (`as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`
//! or `v1beta1`) are built here as the apiserver builds them: `meta.AsPartialObjectMetadata` of each object,
//! i.e. its `ObjectMeta` re-encoded in struct order under the `meta.k8s.io` type meta.

use serde_json::{Map, Value, json};

use crate::kinds::{META_ORDER, ResourceDef};
// `goautoneg.ParseAccept` is written once, in kache_k8s (at most 64 clauses); which view a clause asks for
// is the sim's own.
use kache_k8s::negotiate::{Clause, parse_accept};

use crate::status::ApiError;
use crate::store::Obj;

/// Field order of a typed `OwnerReference`.
const OWNER_REFERENCE_ORDER: &[&str] =
    &["apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion"];
/// Field order of a typed `ManagedFieldsEntry`.
const MANAGED_FIELDS_ORDER: &[&str] =
    &["manager", "operation", "apiVersion", "time", "fieldsType", "fieldsV1", "subresource"];

/// The group version of a metadata view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaVersion {
    V1,
    V1beta1,
}

/// What a response carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum View {
    /// The objects themselves.
    #[default]
    Object,
    /// `as=PartialObjectMetadata`: gets and watch events.
    Meta(MetaVersion),
    /// `as=PartialObjectMetadataList`: lists.
    MetaList(MetaVersion),
    /// `as=Table`: gets, lists and watch events as Tables.
    Table(MetaVersion),
}

/// The outcome of negotiating a request's Accept header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Negotiated {
    Json(View),
    /// `application/vnd.kubernetes.protobuf` (built-in kinds only).
    Protobuf(View),
    /// 406; the flag selects the watch wording (only the stream media types).
    NotAcceptable {
        stream: bool,
    },
}

/// The serializers the apiserver offers, in `SupportedMediaTypes` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Json,
    Yaml,
    Protobuf,
}

const OFFERED: &[(&str, &str, Encoding)] = &[
    ("application", "json", Encoding::Json),
    ("application", "yaml", Encoding::Yaml),
    ("application", "vnd.kubernetes.protobuf", Encoding::Protobuf),
];

/// `acceptMediaTypeOptions` with the endpoint's restrictions: the view, or None when the clause is skipped.
/// `Err(())` marks a clause the apiserver would serve in a form the sim cannot produce (YAML/protobuf views).
fn clause_view(c: &Clause, enc: Encoding, watch: bool) -> Option<Result<View, ()>> {
    if let Some(s) = c.param("stream")
        && !s.is_empty()
        && (!watch || s != "watch" || enc == Encoding::Yaml)
    {
        return None;
    }
    if c.param("sv").is_some_and(|sv| !sv.is_empty() && sv != "v1") {
        return None;
    }
    if !["as", "g", "v"].iter().any(|k| c.param(k).is_some()) {
        return Some(Ok(View::Object));
    }
    let version = match (c.param("g"), c.param("v")) {
        (Some("meta.k8s.io"), Some("v1")) => MetaVersion::V1,
        (Some("meta.k8s.io"), Some("v1beta1")) => MetaVersion::V1beta1,
        _ => return None,
    };
    match c.param("as") {
        Some("PartialObjectMetadata") => Some(Ok(View::Meta(version))),
        Some("PartialObjectMetadataList") => Some(Ok(View::MetaList(version))),
        Some("Table") if enc == Encoding::Json => Some(Ok(View::Table(version))),
        Some("Table") if enc != Encoding::Protobuf => Some(Err(())),
        _ => None,
    }
}

/// go-restful's `Route.matchesAccept` for a built-in kind's get or list route: some clause, cut at its
/// first `;` and trimmed of spaces, is `*/*` or exactly a media type the route produces (both routes
/// produce the same bare types; the list route's stream types carry a parameter and never match). No
/// Accept header is `*/*`.
pub fn route_accepts(accept: Option<&str>) -> bool {
    const PRODUCES: [&str; 3] =
        ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"];
    let Some(accept) = accept.filter(|a| !a.is_empty()) else { return true };
    accept.split(',').any(|clause| {
        let media = clause.split(';').next().unwrap_or("").trim_matches(' ');
        media == "*/*" || PRODUCES.contains(&media)
    })
}

/// The encoding of an error Status: the first clause naming JSON or protobuf without a conversion
/// (`as=`/`g=`/`v=`: `DefaultEndpointRestrictions` allows none), protobuf included for custom resources
/// too (a Status has a protobuf form whatever the resource). True for protobuf. A YAML clause is skipped
/// (the sim writes no YAML).
pub fn error_in_protobuf(accept: Option<&str>) -> bool {
    let header = accept.unwrap_or("").trim();
    for c in parse_accept(header) {
        if ["as", "g", "v"].iter().any(|k| c.param(k).is_some()) {
            continue;
        }
        for &(typ, sub, enc) in OFFERED {
            let matches = (c.typ == typ && (c.sub == sub || c.sub == "*")) || (c.typ == "*" && c.sub == "*");
            match enc {
                Encoding::Json if matches => return false,
                Encoding::Protobuf if matches => return true,
                _ => {}
            }
        }
    }
    false
}

/// Negotiates the view of a get, list (`watch` false) or watch; `protobuf` is whether the resource's
/// objects have a protobuf form (built-in kinds; custom resources have it only for their metadata views:
/// the CRD handler's serializers include protobuf, which cannot encode an unstructured object).
pub fn negotiate(accept: Option<&str>, watch: bool, protobuf: bool) -> Negotiated {
    let header = accept.unwrap_or("").trim();
    if header.is_empty() {
        return Negotiated::Json(View::Object);
    }
    let mut other_acceptable = false;
    for c in parse_accept(header) {
        for &(typ, sub, enc) in OFFERED {
            let matches = (c.typ == typ && (c.sub == sub || c.sub == "*")) || (c.typ == "*" && c.sub == "*");
            if !matches {
                continue;
            }
            match clause_view(&c, enc, watch) {
                Some(Ok(view)) if enc == Encoding::Json => return Negotiated::Json(view),
                Some(Ok(View::Object)) if enc == Encoding::Protobuf && !protobuf => {}
                Some(Ok(view)) if enc == Encoding::Protobuf => return Negotiated::Protobuf(view),
                Some(_) => other_acceptable = true,
                None => {}
            }
        }
    }
    // A watch that could only be served as YAML fails the stream negotiation (YAML cannot stream).
    Negotiated::NotAcceptable { stream: watch && other_acceptable }
}

// === PartialObjectMetadata ===

/// The Go package of the object type the apiserver transforms (internal types for built-ins), for the
/// `%T` of its 406 messages.
fn go_type(res: &ResourceDef, list: bool) -> String {
    let suffix = if list { "List" } else { "" };
    if !res.builtin {
        return format!("*unstructured.Unstructured{suffix}");
    }
    let pkg = if res.group.is_empty() { "core" } else { res.group.split('.').next().unwrap_or("core") };
    format!("*{pkg}.{}{suffix}", res.kind)
}

/// 406 for a metadata view that does not fit the response (`asPartialObjectMetadata[List]`).
pub fn mismatch(res: &ResourceDef, view: View, list: bool) -> Option<ApiError> {
    match (view, list) {
        (View::Meta(_), true) => Some(ApiError::not_acceptable_because(format!(
            "you requested PartialObjectMetadata, but the requested object is a list ({})",
            go_type(res, true)
        ))),
        (View::MetaList(_), false) => Some(ApiError::not_acceptable_because(format!(
            "you requested PartialObjectMetadataList, but the requested object is not a list ({})",
            go_type(res, false)
        ))),
        _ => None,
    }
}

fn api_version(v: MetaVersion) -> &'static str {
    match v {
        MetaVersion::V1 => "meta.k8s.io/v1",
        MetaVersion::V1beta1 => "meta.k8s.io/v1beta1",
    }
}

fn reorder_entries(v: Option<&mut Value>, order: &[&str]) {
    if let Some(Value::Array(a)) = v {
        for e in a {
            if let Value::Object(m) = e {
                crate::json::reorder(m, order);
            }
        }
    }
}

/// `meta.AsPartialObjectMetadata`: a typed `ObjectMeta`, encoded in struct order (as are its owner references
/// and managed fields entries). Custom resources are unstructured (keys sorted): their metadata is rebuilt
/// through the getters, which puts it in the same order.
pub fn object_meta(metadata: Option<&Value>) -> Value {
    let mut m = metadata.and_then(Value::as_object).cloned().unwrap_or_default();
    crate::json::reorder(&mut m, META_ORDER);
    reorder_entries(m.get_mut("ownerReferences"), OWNER_REFERENCE_ORDER);
    reorder_entries(m.get_mut("managedFields"), MANAGED_FIELDS_ORDER);
    Value::Object(m)
}

/// One `PartialObjectMetadata` from a full object value.
pub fn partial_value(obj: &Value, version: MetaVersion) -> Value {
    partial_of(obj.get("metadata"), version)
}

/// A `PartialObjectMetadata` of an object's `metadata`.
fn partial_of(metadata: Option<&Value>, version: MetaVersion) -> Value {
    let mut m = Map::new();
    m.insert("kind".into(), json!("PartialObjectMetadata"));
    m.insert("apiVersion".into(), json!(api_version(version)));
    m.insert("metadata".into(), object_meta(metadata));
    Value::Object(m)
}

/// One stored object as a `PartialObjectMetadata`.
pub fn partial(obj: &Obj, version: MetaVersion) -> Value {
    partial_of(obj.metadata_value().as_ref(), version)
}

/// A `PartialObjectMetadataList` (typed: kind, apiVersion, metadata, items; `ListMeta` in struct order).
pub fn encode_list(
    page: &super::list::Page,
    items: &[std::sync::Arc<Obj>],
    version: MetaVersion,
    pretty: bool,
) -> Vec<u8> {
    let mut meta = Map::new();
    meta.insert("resourceVersion".into(), json!(page.rev.to_string()));
    if let Some(c) = &page.cont {
        meta.insert("continue".into(), json!(c));
    }
    if let Some(r) = page.remaining {
        meta.insert("remainingItemCount".into(), json!(r));
    }
    let mut m = Map::new();
    m.insert("kind".into(), json!("PartialObjectMetadataList"));
    m.insert("apiVersion".into(), json!(api_version(version)));
    m.insert("metadata".into(), Value::Object(meta));
    // `Items` is a nil slice until the first append: an empty list encodes as `null`.
    let list_items: Vec<Value> = items.iter().map(|o| partial(o, version)).collect();
    m.insert("items".into(), if list_items.is_empty() { Value::Null } else { Value::Array(list_items) });
    crate::json::body(&Value::Object(m), pretty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{Crd, table};

    #[test]
    fn real_client_headers() {
        let v1 = View::MetaList(MetaVersion::V1);
        let informer = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1,application/json";
        assert_eq!(negotiate(Some(informer), false, true), Negotiated::Json(v1));
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(negotiate(Some(kubectl), false, true), Negotiated::Json(View::Table(MetaVersion::V1)));
        let pb = "application/vnd.kubernetes.protobuf, */*";
        assert_eq!(negotiate(Some(pb), false, true), Negotiated::Protobuf(View::Object));
        // Custom resources have no protobuf form: the next clause wins; their metadata views do.
        assert_eq!(negotiate(Some(pb), false, false), Negotiated::Json(View::Object));
        let watch = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(negotiate(Some(watch), true, true), Negotiated::Protobuf(View::Meta(MetaVersion::V1)));
        assert_eq!(negotiate(Some(watch), true, false), Negotiated::Protobuf(View::Meta(MetaVersion::V1)));
        // Errors: the first clause without a conversion.
        assert!(error_in_protobuf(Some(pb)));
        assert!(!error_in_protobuf(Some(watch)));
        assert!(!error_in_protobuf(None));
        assert!(!error_in_protobuf(Some(
            "application/json;q=0.9, application/vnd.kubernetes.protobuf;q=0.5"
        )));
        // q-values order the clauses before the server's preference does.
        let q = "application/vnd.kubernetes.protobuf;q=0.5, application/json;q=0.9";
        assert_eq!(negotiate(Some(q), false, true), Negotiated::Json(View::Object));
        let q = "application/json;q=0.5, application/vnd.kubernetes.protobuf";
        assert_eq!(negotiate(Some(q), false, true), Negotiated::Protobuf(View::Object));
        // A protobuf Table does not exist: skipped.
        let t = "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json";
        assert_eq!(negotiate(Some(t), false, true), Negotiated::Json(View::Object));
        assert_eq!(negotiate(None, false, true), Negotiated::Json(View::Object));
    }

    #[test]
    fn unacceptable_headers() {
        assert_eq!(negotiate(Some("text/plain"), false, true), Negotiated::NotAcceptable { stream: false });
        assert_eq!(
            negotiate(Some("application/xml"), true, true),
            Negotiated::NotAcceptable { stream: false }
        );
        assert_eq!(
            negotiate(Some("application/yaml"), true, true),
            Negotiated::NotAcceptable { stream: true }
        );
        // A custom resource asked for protobuf only: 406.
        let pb = Some("application/vnd.kubernetes.protobuf");
        assert_eq!(negotiate(pb, false, false), Negotiated::NotAcceptable { stream: false });
        // A conversion outside meta.k8s.io v1/v1beta1 is skipped.
        assert_eq!(
            negotiate(Some("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v2"), false, true),
            Negotiated::NotAcceptable { stream: false }
        );
    }

    #[test]
    fn custom_resource_metadata_is_rebuilt_in_struct_order() {
        let crd = Crd::parse("example.com/v1/Widget/widgets/Namespaced").expect("crd");
        let t = table(&[crd]);
        let w = t.iter().find(|r| r.plural == "widgets").expect("widgets");
        let obj = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {
            "creationTimestamp": "2024-01-01T00:00:00Z", "name": "a", "namespace": "n",
            "ownerReferences": [{"apiVersion": "v1", "controller": true, "kind": "X", "name": "o", "uid": "u"}],
            "resourceVersion": "5", "uid": "x"}, "spec": {}});
        let p = crate::json::compact(&partial_value(&obj, MetaVersion::V1));
        assert_eq!(
            String::from_utf8_lossy(&p),
            r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","namespace":"n","uid":"x","resourceVersion":"5","creationTimestamp":"2024-01-01T00:00:00Z","ownerReferences":[{"apiVersion":"v1","kind":"X","name":"o","uid":"u","controller":true}]}}"#
        );
        let pods = t.iter().find(|r| r.plural == "pods").expect("pods");
        assert_eq!(
            mismatch(pods, View::Meta(MetaVersion::V1), true).map(|e| e.message),
            Some(
                "you requested PartialObjectMetadata, but the requested object is a list (*core.PodList)"
                    .into()
            )
        );
        assert!(mismatch(w, View::MetaList(MetaVersion::V1), true).is_none());
    }
}
