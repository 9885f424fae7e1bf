//! A generator of realistic, adversarial object documents and a serde_json oracle of what
//! `object_from_json` must extract from them.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{Map, Value, json};

use crate::resource::{FieldKind, Gvr, ResourceInfo};
use crate::store::Object;

/// One generated document.
#[derive(Debug, Clone)]
pub struct Doc {
    pub text: String,
    group: &'static str,
    kind: &'static str,
    namespaced: bool,
    /// The first two members are `kind` and `apiVersion` (in some order).
    type_meta_first: bool,
}

impl Doc {
    pub fn info(&self) -> ResourceInfo {
        ResourceInfo {
            gvr: Gvr::new(self.group, "v1", "things"),
            kind: self.kind.to_owned(),
            list_kind: format!("{}List", self.kind),
            namespaced: self.namespaced,
            list_items_have_type_meta: false,
        }
    }
}

const KINDS: &[(&str, &str, bool)] = &[
    ("", "Pod", true),
    ("", "Node", false),
    ("", "Event", true),
    ("apps", "ReplicaSet", true),
    ("", "Secret", true),
    ("", "Service", true),
    ("example.com", "Widget", true),
    ("example.com", "Thing", false),
];

/// Strings with the characters that trip decoders: quotes, backslashes, `<>&` (Go escapes them),
/// non-ASCII, U+2028, and `/` (invalid in names).
fn tricky() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9.-]{1,10}",
        1 => "[a-z<>&\"\\\\é\u{2028}/ ]{0,8}",
        1 => Just(String::new()),
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => tricky().prop_map(Value::from),
        1 => any::<bool>().prop_map(Value::from),
        1 => (0u32..1000).prop_map(Value::from),
        1 => Just(Value::Null),
    ]
}

fn junk() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn maybe<T: std::fmt::Debug + Clone>(s: impl Strategy<Value = T>) -> impl Strategy<Value = Option<T>> {
    proptest::option::weighted(0.8, s)
}

fn resource_version() -> impl Strategy<Value = Value> {
    prop_oneof![
        24 => any::<u64>().prop_map(|n| Value::from(n.to_string())),
        1 => "[0-9a-z+ -]{0,4}".prop_map(Value::from),
        1 => (0u32..9).prop_map(Value::from),
    ]
}

fn labels() -> impl Strategy<Value = Value> {
    prop_oneof![
        12 => proptest::collection::btree_map(tricky(), tricky().prop_map(Value::from), 0..5)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        1 => Just(Value::Null),
        1 => Just(json!({"a": 1})),
    ]
}

fn metadata() -> impl Strategy<Value = Value> {
    let name = || prop_oneof![12 => "[a-z0-9.-]{1,10}".prop_map(Value::from), 1 => tricky().prop_map(Value::from), 1 => scalar()];
    (
        proptest::option::weighted(0.97, name()),
        proptest::option::weighted(0.97, name()),
        maybe(tricky().prop_map(Value::from)),
        proptest::option::weighted(0.97, resource_version()),
        maybe(labels()),
        maybe(junk()),
    )
        .prop_map(|(name, namespace, uid, rv, labels, annotations)| {
            let mut m = Map::new();
            for (k, v) in [
                ("annotations", annotations),
                ("name", name),
                ("namespace", namespace),
                ("uid", uid),
                ("resourceVersion", rv),
                ("labels", labels),
            ] {
                if let Some(v) = v {
                    m.insert(k.to_owned(), v);
                }
            }
            Value::Object(m)
        })
}

/// An object with some of the given keys set to scalars, plus junk.
fn section(keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
    (proptest::collection::vec(maybe(scalar()), keys.len()), junk()).prop_map(move |(values, extra)| {
        let mut m = Map::new();
        m.insert("zz".to_owned(), extra);
        for (k, v) in keys.iter().zip(values) {
            if let Some(v) = v {
                m.insert((*k).to_owned(), v);
            }
        }
        Value::Object(m)
    })
}

fn pod_ips() -> impl Strategy<Value = Value> {
    proptest::collection::vec(maybe(tricky()), 0..3).prop_map(|ips| {
        Value::from(
            ips.into_iter().map(|ip| ip.map_or(json!({}), |ip| json!({ "ip": ip }))).collect::<Vec<_>>(),
        )
    })
}

pub fn document() -> impl Strategy<Value = Doc> {
    let spec = section(&[
        "nodeName",
        "restartPolicy",
        "schedulerName",
        "serviceAccountName",
        "hostNetwork",
        "unschedulable",
        "clusterIP",
        "type",
    ]);
    let status = (section(&["phase", "podIP", "nominatedNodeName", "replicas"]), maybe(pod_ips())).prop_map(
        |(mut status, ips)| {
            if let (Some(ips), Some(m)) = (ips, status.as_object_mut()) {
                m.insert("podIPs".to_owned(), ips);
            }
            status
        },
    );
    // Empty objects and nulls on lookup paths send extraction down its general path.
    let spec = prop_oneof![8 => spec, 1 => Just(json!({})), 1 => Just(Value::Null)];
    let status = prop_oneof![8 => status, 1 => Just(json!({})), 1 => Just(json!([]))];
    let event = (section(&["kind", "name", "namespace", "uid", "fieldPath"]), section(&["component"]));
    (
        0..KINDS.len(),
        prop_oneof![14 => metadata().prop_map(Some), 1 => Just(None), 1 => junk().prop_map(Some)],
        spec,
        status,
        event,
        (maybe(scalar()), maybe(scalar()), maybe(scalar())),
        0usize..4,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(k, meta, spec, status, (involved, source), (reason, ty, rc), type_meta, swap, pretty, go)| {
                let (group, kind, namespaced) = KINDS[k];
                let api_version = if group.is_empty() { "v1".to_owned() } else { format!("{group}/v1") };
                let mut members: Vec<(&str, Value)> = Vec::new();
                let mut tail: Vec<(&str, Value)> = vec![
                    ("spec", spec),
                    ("status", status),
                    ("involvedObject", involved),
                    ("source", source),
                ];
                for (key, v) in [("reason", reason), ("type", ty), ("reportingComponent", rc)] {
                    if let Some(v) = v {
                        tail.push((key, v));
                    }
                }
                if let Some(meta) = meta {
                    tail.insert(swap as usize, ("metadata", meta));
                }
                let (a, b) = if swap { ("apiVersion", "kind") } else { ("kind", "apiVersion") };
                let av = |key: &str| {
                    if key == "kind" { Value::from(kind) } else { Value::from(api_version.clone()) }
                };
                // 0: both first; 1: only one of them; 2: none; 3: both, but after metadata.
                match type_meta {
                    0 => members.extend([(a, av(a)), (b, av(b))]),
                    1 => members.push((a, av(a))),
                    2 => {}
                    _ => tail.extend([(a, av(a)), (b, av(b))]),
                }
                members.extend(tail);
                let sep = if pretty { ",\n  " } else { "," };
                let colon = if pretty { ": " } else { ":" };
                let body: Vec<String> = members
                    .iter()
                    .map(|(k, v)| {
                        format!("{}{colon}{}", Value::from(*k), serde_json::to_string(v).expect("json"))
                    })
                    .collect();
                let mut text = if pretty {
                    format!("{{\n  {}\n}}\n", body.join(sep))
                } else {
                    format!("{{{}}}", body.join(sep))
                };
                if go {
                    // Go's encoder escapes these inside strings; outside strings they never occur.
                    text = text.replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026");
                }
                Doc { text, group, kind, namespaced, type_meta_first: type_meta == 0 }
            },
        )
}

/// What the oracle expects.
#[derive(Debug)]
pub(crate) struct Expected {
    key: String,
    ns_len: u32,
    uid: String,
    rv: u64,
    labels: Vec<(String, String)>,
    fields: Vec<Option<String>>,
    metadata: Value,
    object: Value,
}

fn opt_str<'a>(m: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!("{key} is {other}")),
    }
}

fn render(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The oracle: decode everything with serde_json and apply the apiserver's rules.
pub fn expected(text: &str, info: &ResourceInfo) -> Result<Expected, String> {
    let object: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let top = object.as_object().ok_or("not an object")?;
    let meta = match top.get("metadata") {
        Some(Value::Object(m)) => m,
        _ => return Err("no metadata".into()),
    };
    let name = opt_str(meta, "name")?.filter(|n| !n.is_empty()).ok_or("no name")?;
    let namespace = opt_str(meta, "namespace")?;
    let uid = opt_str(meta, "uid")?.unwrap_or("").to_owned();
    let rv_text = opt_str(meta, "resourceVersion")?.unwrap_or("");
    if rv_text.is_empty() || !rv_text.bytes().all(|b| b.is_ascii_digit()) {
        return Err("bad rv".into());
    }
    let rv: u64 = rv_text.parse().map_err(|_| "rv overflow")?;
    let mut labels = Vec::new();
    match meta.get("labels") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                match v {
                    Value::String(s) => labels.push((k.clone(), s.clone())),
                    Value::Null => labels.push((k.clone(), String::new())),
                    _ => return Err("label value".into()),
                }
            }
        }
        Some(_) => return Err("labels".into()),
    }
    labels.sort();
    if name.contains('/') {
        return Err("slash".into());
    }
    let (key, ns_len) = if info.namespaced {
        let ns = namespace.filter(|n| !n.is_empty()).ok_or("no namespace")?;
        if ns.contains('/') {
            return Err("slash".into());
        }
        (format!("{ns}/{name}"), ns.len() as u32)
    } else {
        (name.to_owned(), 0)
    };
    let get = |path: &str| -> Option<&Value> {
        let mut cur = &object;
        for seg in path.split('.') {
            cur = cur.as_object()?.get(seg)?;
        }
        Some(cur)
    };
    let kind = info.field_kind();
    let fields = kind
        .extra_fields()
        .iter()
        .map(|path| match (kind, *path) {
            (FieldKind::Pod, "spec.hostNetwork") | (FieldKind::Node, "spec.unschedulable") => {
                Some(render(get(path)).unwrap_or_else(|| "false".into()))
            }
            (FieldKind::ReplicaSet | FieldKind::ReplicationController, "status.replicas") => {
                Some(render(get(path)).unwrap_or_else(|| "0".into()))
            }
            (FieldKind::Pod, "status.podIP") => match get("status.podIPs").and_then(Value::as_array) {
                Some(ips) if !ips.is_empty() => Some(render(ips[0].get("ip")).unwrap_or_default()),
                _ => render(get(path)),
            },
            (FieldKind::Event, "source") => match render(get("source.component")) {
                Some(c) if !c.is_empty() => Some(c),
                _ => render(get("reportingComponent")),
            },
            _ => render(get(path)),
        })
        .collect();
    Ok(Expected {
        key,
        ns_len,
        uid,
        rv,
        labels,
        fields,
        metadata: Value::Object(meta.clone()),
        object: object.clone(),
    })
}

pub(crate) fn assert_object(got: &Object, want: &Expected, doc: &Doc) -> Result<(), TestCaseError> {
    prop_assert_eq!(&*got.key, want.key.as_str());
    prop_assert_eq!(got.ns_len, want.ns_len);
    prop_assert_eq!(&*got.uid, want.uid.as_str());
    prop_assert_eq!(got.resource_version, want.rv);
    let labels: Vec<(String, String)> =
        got.labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    prop_assert_eq!(&labels, &want.labels);
    let fields: Vec<Option<String>> = got.fields.iter().map(|f| f.as_deref().map(str::to_owned)).collect();
    prop_assert_eq!(&fields, &want.fields);
    let raw = &got.raw;
    let meta: Value =
        serde_json::from_slice(&raw[got.metadata_range.start as usize..got.metadata_range.end as usize])
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&meta, &want.metadata);
    if doc.type_meta_first {
        let mut body = b"{".to_vec();
        body.extend_from_slice(&raw[got.body_offset as usize..]);
        let body: Value = serde_json::from_slice(&body).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut without = want.object.clone();
        if let Some(m) = without.as_object_mut() {
            m.remove("kind");
            m.remove("apiVersion");
        }
        prop_assert_eq!(body, without);
    } else {
        prop_assert_eq!(got.body_offset, 1);
    }
    Ok(())
}
