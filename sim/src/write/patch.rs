//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch (for
//! built-in kinds, see `smp`). Anything else is refused with 415 rather than applied wrongly.

use serde_json::{Map, Value};

/// The patch types the sim understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    /// Strategic merge patch (built-in kinds only, like the apiserver).
    Strategic,
}

impl PatchType {
    /// From a Content-Type; None for unsupported ones (including apply patches).
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            _ => None,
        }
    }
}

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch is malformed or does not apply (400/422 to the client).
    #[error("{0}")]
    Invalid(String),
    /// A strategic merge patch the sim cannot apply faithfully (415): a custom resource, or a list
    /// whose strategy it does not know.
    #[error("{0}")]
    Unsupported(String),
}

/// Applies a patch of the given type to `target`, an object of `kind` (`builtin` when typed).
pub fn apply(
    ty: PatchType,
    kind: &str,
    builtin: bool,
    target: &Value,
    patch: &Value,
) -> Result<Value, PatchError> {
    match ty {
        PatchType::Merge => Ok(merge(target, patch)),
        PatchType::Strategic if !builtin => {
            Err(PatchError::Unsupported("strategic merge patch is not supported for custom resources".into()))
        }
        PatchType::Strategic => super::smp::apply(kind, target, patch).map_err(|e| match e {
            super::smp::SmpError::UnknownList(f) => PatchError::Unsupported(format!(
                "strategic merge patch of list {f} is not supported by kache-sim"
            )),
            super::smp::SmpError::Invalid(m) => PatchError::Invalid(m),
        }),
        PatchType::Json => json_patch(target, patch),
    }
}

/// RFC 7386: objects merge recursively, `null` deletes, everything else replaces.
pub fn merge(target: &Value, patch: &Value) -> Value {
    let Value::Object(p) = patch else { return patch.clone() };
    let mut out = match target {
        Value::Object(t) => t.clone(),
        _ => Map::new(),
    };
    for (k, v) in p {
        if v.is_null() {
            out.shift_remove(k);
        } else {
            let merged = merge(out.get(k).unwrap_or(&Value::Null), v);
            out.insert(k.clone(), merged);
        }
    }
    Value::Object(out)
}

/// RFC 6902 operations: add, remove, replace, move, copy, test.
pub fn json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let Value::Array(ops) = patch else {
        return Err(PatchError::Invalid(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch".into(),
        ));
    };
    let mut doc = target.clone();
    for op in ops {
        let name = op.get("op").and_then(Value::as_str).unwrap_or("");
        let path = op.get("path").and_then(Value::as_str);
        let Some(path) = path else {
            return Err(PatchError::Invalid(format!(
                "unable to parse patch operation: missing path in {op}"
            )));
        };
        match name {
            "add" => {
                let v = value_of(op)?;
                add(&mut doc, path, v)?;
            }
            "remove" => {
                remove(&mut doc, path)?;
            }
            "replace" => {
                let v = value_of(op)?;
                remove(&mut doc, path)?;
                add(&mut doc, path, v)?;
            }
            "move" => {
                let from = from_of(op)?;
                let v = remove(&mut doc, from)?;
                add(&mut doc, path, v)?;
            }
            "copy" => {
                let from = from_of(op)?;
                let v = doc.pointer(from).cloned().ok_or_else(|| missing(from))?;
                add(&mut doc, path, v)?;
            }
            "test" => {
                let v = value_of(op)?;
                if doc.pointer(path) != Some(&v) {
                    return Err(PatchError::Invalid(format!("testing value {path} failed: test failed")));
                }
            }
            other => return Err(PatchError::Invalid(format!("Unexpected kind: {other}"))),
        }
    }
    Ok(doc)
}

fn value_of(op: &Value) -> Result<Value, PatchError> {
    op.get("value").cloned().ok_or_else(|| PatchError::Invalid("missing value in patch operation".into()))
}

fn from_of(op: &Value) -> Result<&str, PatchError> {
    op.get("from")
        .and_then(Value::as_str)
        .ok_or_else(|| PatchError::Invalid("missing from in patch operation".into()))
}

fn missing(path: &str) -> PatchError {
    PatchError::Invalid(format!("doc is missing path: \"{path}\": missing value"))
}

/// Splits a JSON pointer into its parent pointer and unescaped last token.
fn split(path: &str) -> Result<(&str, String), PatchError> {
    let i = path.rfind('/').ok_or_else(|| PatchError::Invalid(format!("invalid JSON pointer: {path:?}")))?;
    Ok((&path[..i], path[i + 1..].replace("~1", "/").replace("~0", "~")))
}

fn add(doc: &mut Value, path: &str, v: Value) -> Result<(), PatchError> {
    if path.is_empty() {
        *doc = v;
        return Ok(());
    }
    let (parent, last) = split(path)?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(m)) => {
            m.insert(last, v);
            Ok(())
        }
        Some(Value::Array(a)) => {
            let idx = if last == "-" { a.len() } else { last.parse::<usize>().map_err(|_| missing(path))? };
            if idx > a.len() {
                return Err(PatchError::Invalid(format!(
                    "add operation does not apply: index {idx} out of bounds"
                )));
            }
            a.insert(idx, v);
            Ok(())
        }
        _ => Err(missing(path)),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, PatchError> {
    let (parent, last) = split(path)?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(m)) => m.shift_remove(&last).ok_or_else(|| missing(path)),
        Some(Value::Array(a)) => {
            let idx = last.parse::<usize>().map_err(|_| missing(path))?;
            if idx >= a.len() {
                return Err(missing(path));
            }
            Ok(a.remove(idx))
        }
        _ => Err(missing(path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386() {
        let t = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        let p = json!({"a": {"b": null, "d": 3}, "l": [3]});
        assert_eq!(merge(&t, &p), json!({"a": {"c": 2, "d": 3}, "l": [3]}));
    }

    #[test]
    fn json_patch_ops() {
        let t = json!({"a": [1, 2], "b": {"x/y": 1}});
        let p = json!([
            {"op": "add", "path": "/a/-", "value": 3},
            {"op": "replace", "path": "/b/x~1y", "value": 2},
            {"op": "copy", "from": "/b", "path": "/c"},
            {"op": "move", "from": "/a/0", "path": "/d"},
            {"op": "test", "path": "/d", "value": 1},
            {"op": "remove", "path": "/c"}
        ]);
        assert_eq!(json_patch(&t, &p), Ok(json!({"a": [2, 3], "b": {"x/y": 2}, "d": 1})));
        assert!(json_patch(&t, &json!([{"op": "test", "path": "/a/0", "value": 9}])).is_err());
        assert!(json_patch(&t, &json!([{"op": "remove", "path": "/zz"}])).is_err());
        assert!(json_patch(&t, &json!({"op": "add"})).is_err());
    }

    #[test]
    fn strategic_for_builtins_only() {
        let t = json!({"metadata": {"labels": {"a": "1"}}});
        let ok = json!({"metadata": {"labels": {"b": "2"}}});
        assert_eq!(
            apply(PatchType::Strategic, "Pod", true, &t, &ok),
            Ok(json!({"metadata": {"labels": {"a": "1", "b": "2"}}}))
        );
        assert!(matches!(
            apply(PatchType::Strategic, "Widget", false, &t, &ok),
            Err(PatchError::Unsupported(_))
        ));
        assert_eq!(PatchType::from_content_type("application/apply-patch+yaml"), None);
    }
}
