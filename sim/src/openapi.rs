//! OpenAPI v3 documents with the built-in kinds' schemas, as a kube-apiserver serves them, so that
//! `kubectl explain` and kubectl's validation work against the sim; and the strict field validation of
//! writes (`?fieldValidation=Strict`, what kubectl sends) against those schemas ([`unknown_fields`]).
//!
//! The documents of the built-in group-versions are a real kube-apiserver's own, as it serves them
//! (`sim/openapi/`: captured from the testbed's kube-apiserver, default feature gates, by
//! `sim/openapi/update.sh`; the release in `sim/openapi/VERSION`), committed gzipped and inflated once on
//! first use. Declared custom resources get a minimal generated document (`http/discovery.rs`).

use std::collections::HashMap;
use std::io::Read;
use std::sync::OnceLock;

use bytes::Bytes;
use serde_json::{Map, Value};

/// A committed document: its group-version path (`api/v1`, `apis/{g}/{v}`) and its gzipped JSON.
struct Captured {
    path: &'static str,
    gz: &'static [u8],
}

/// The group-versions of the sim's built-in kinds (`kinds.rs`), from the release in `sim/openapi/VERSION`.
const CAPTURED: &[Captured] = &[
    Captured { path: "api/v1", gz: include_bytes!("../openapi/api__v1.json.gz") },
    Captured { path: "apis/apps/v1", gz: include_bytes!("../openapi/apis__apps__v1.json.gz") },
    Captured {
        path: "apis/coordination.k8s.io/v1",
        gz: include_bytes!("../openapi/apis__coordination.k8s.io__v1.json.gz"),
    },
];

/// The committed document of a group-version path, if there is one.
pub fn document(path: &str) -> Option<Bytes> {
    static INFLATED: OnceLock<Vec<OnceLock<Bytes>>> = OnceLock::new();
    let i = CAPTURED.iter().position(|c| c.path == path)?;
    let cells = INFLATED.get_or_init(|| CAPTURED.iter().map(|_| OnceLock::new()).collect());
    Some(cells[i].get_or_init(|| inflate(CAPTURED[i].gz)).clone())
}

/// The hash the index names a committed document by (`?hash=`): the apiserver's is the document's
/// SHA-512; this is the gzip trailer's CRC-32 and length of the inflated document, which changes whenever
/// the document does (all a client's cache needs) without hashing 2 MB at start.
pub fn hash(path: &str) -> Option<String> {
    let c = CAPTURED.iter().find(|c| c.path == path)?;
    let trailer = c.gz.get(c.gz.len().checked_sub(8)?..)?;
    Some(trailer.iter().rev().map(|b| format!("{b:02X}")).collect())
}

/// Schemas of the committed documents by name, and the name of each kind's schema by (group, version,
/// kind).
struct Schemas {
    by_name: Map<String, Value>,
    by_kind: HashMap<(String, String, String), String>,
}

fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let mut by_name = Map::new();
        for c in CAPTURED {
            let doc: Value = serde_json::from_slice(&document(c.path).expect("committed"))
                .expect("the committed OpenAPI documents are JSON (checked by a test)");
            if let Value::Object(m) = &doc["components"]["schemas"] {
                by_name.extend(m.clone());
            }
        }
        let mut by_kind = HashMap::new();
        for (name, schema) in &by_name {
            for gvk in schema["x-kubernetes-group-version-kind"].as_array().into_iter().flatten() {
                let s = |k: &str| gvk[k].as_str().unwrap_or_default().to_string();
                by_kind.insert((s("group"), s("version"), s("kind")), name.clone());
            }
        }
        Schemas { by_name, by_kind }
    })
}

/// The fields of `obj` that its kind's schema does not have, as the apiserver's strict decoding names
/// them (`spec.containers[0].imagee`), in document order; None when the kind has no committed schema
/// (custom resources). The apiserver decodes into Go structs, which have exactly the schema's fields.
pub fn unknown_fields(group: &str, version: &str, kind: &str, obj: &Value) -> Option<Vec<String>> {
    let s = schemas();
    let name = s.by_kind.get(&(group.to_string(), version.to_string(), kind.to_string()))?;
    let mut out = Vec::new();
    walk(s, obj, s.by_name.get(name)?, "", &mut out);
    Some(out)
}

/// Depth of `$ref`/`allOf` indirections followed for one value (the documents use one or two).
const MAX_INDIRECTIONS: usize = 8;

fn walk(s: &Schemas, v: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
    let mut schema = schema;
    for _ in 0..MAX_INDIRECTIONS {
        let next = match (schema.get("$ref"), schema["allOf"].as_array()) {
            (Some(r), _) => r.as_str().and_then(|r| r.strip_prefix("#/components/schemas/")),
            (None, Some(all)) if all.len() == 1 => {
                all[0]["$ref"].as_str().and_then(|r| r.strip_prefix("#/components/schemas/"))
            }
            _ => None,
        };
        match next.and_then(|n| s.by_name.get(n)) {
            Some(resolved) => schema = resolved,
            None => break,
        }
    }
    if schema["x-kubernetes-preserve-unknown-fields"] == true {
        return;
    }
    match v {
        Value::Object(m) => {
            let props = schema["properties"].as_object();
            let extra = schema.get("additionalProperties").filter(|a| a.is_object());
            if props.is_none() && extra.is_none() {
                return; // free-form (RawExtension, FieldsV1)
            }
            for (k, child) in m {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                match (props.and_then(|ps| ps.get(k)), extra) {
                    (Some(sub), _) | (None, Some(sub)) => walk(s, child, sub, &p, out),
                    (None, None) => out.push(p),
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for (i, child) in items.iter().enumerate() {
                    walk(s, child, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn inflate(gz: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(gz.len() * 12);
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut out)
        .expect("the committed OpenAPI documents are valid gzip (checked by a test)");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_documents_inflate_to_schemas_of_their_group_version() {
        for c in CAPTURED {
            let doc: serde_json::Value = serde_json::from_slice(&document(c.path).expect("committed"))
                .unwrap_or_else(|e| panic!("{}: {e}", c.path));
            let schemas = doc["components"]["schemas"].as_object().expect("schemas");
            assert!(schemas.len() > 10, "{}: {} schemas", c.path, schemas.len());
            assert!(
                doc["paths"]
                    .as_object()
                    .expect("paths")
                    .keys()
                    .all(|p| p.starts_with(&format!("/{}/", c.path)))
            );
            assert_eq!(hash(c.path).map(|h| h.len()), Some(16));
        }
        let v1: serde_json::Value = serde_json::from_slice(&document("api/v1").expect("core")).expect("json");
        assert!(v1["components"]["schemas"]["io.k8s.api.core.v1.Pod"]["properties"]["spec"].is_object());
        assert!(document("apis/example.com/v1").is_none());
    }

    #[test]
    fn unknown_fields_are_named_by_their_path() {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"any": "thing"}, "annotations": {"a": "b"}, "colour": "red"},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "1"}}},
                                    {"name": "d", "imagee": "i", "ports": [{"containerPort": 80, "prot": 1}]}],
                     "nodeSelector": {"k": "v"}},
            "status": {"phase": "Running"},
            "extra": true
        });
        assert_eq!(
            unknown_fields("", "v1", "Pod", &pod),
            Some(vec![
                "metadata.colour".to_string(),
                "spec.containers[1].imagee".to_string(),
                "spec.containers[1].ports[0].prot".to_string(),
                "extra".to_string(),
            ])
        );
        let deploy = serde_json::json!({"spec": {"replicas": 1, "template": {"spec": {"containers": []}},
                                                 "replicaz": 2}});
        assert_eq!(
            unknown_fields("apps", "v1", "Deployment", &deploy),
            Some(vec!["spec.replicaz".to_string()])
        );
        assert_eq!(unknown_fields("example.com", "v1", "Widget", &deploy), None);
    }
}
