//! Strategic merge patch for the built-in kinds, from a table of their list strategies (the
//! `patchStrategy`/`patchMergeKey` tags of the Go types). A list the table does not know is refused
//! (415) rather than guessed, so a result is never silently wrong.
//!
//! Supported directives: `$patch: replace|delete|merge` (maps and list elements), `$setElementOrder/<f>`,
//! `$deleteFromPrimitiveList/<f>`, `$retainKeys`; `null` deletes a key.

use serde_json::{Map, Value};

/// How a list field is patched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListStrategy {
    /// No patch strategy: the patch's list replaces the old one.
    Replace,
    /// Elements are maps merged by this key.
    MergeByKey(&'static str),
    /// A set of scalars: the patch's values are added.
    MergePrimitive,
}

/// Why a strategic merge patch cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmpError {
    /// The patch touches a list whose strategy the sim does not know.
    #[error("unknown list field {0}")]
    UnknownList(String),
    /// The patch is malformed.
    #[error("{0}")]
    Invalid(String),
}

/// List strategies of a pod spec, relative to the spec.
fn pod_spec_list(path: &[&str]) -> Option<ListStrategy> {
    use ListStrategy::*;
    Some(match path {
        ["containers" | "initContainers" | "ephemeralContainers"] => MergeByKey("name"),
        ["containers" | "initContainers" | "ephemeralContainers", rest @ ..] => match rest {
            ["ports"] => MergeByKey("containerPort"),
            ["env"] => MergeByKey("name"),
            ["volumeMounts"] => MergeByKey("mountPath"),
            ["volumeDevices"] => MergeByKey("devicePath"),
            ["resizePolicy"] => MergeByKey("resourceName"),
            ["command" | "args" | "envFrom"] => Replace,
            ["securityContext", "capabilities", "add" | "drop"] => Replace,
            ["lifecycle", ..] | ["livenessProbe" | "readinessProbe" | "startupProbe", ..] => Replace,
            _ => return None,
        },
        ["volumes"] => MergeByKey("name"),
        ["imagePullSecrets"] => MergeByKey("name"),
        ["hostAliases"] => MergeByKey("ip"),
        ["hostAliases", "hostnames"] => Replace,
        ["topologySpreadConstraints"] => MergeByKey("topologyKey"),
        ["resourceClaims" | "schedulingGates"] => MergeByKey("name"),
        ["tolerations" | "readinessGates"] => Replace,
        ["dnsConfig", "nameservers" | "searches" | "options"] => Replace,
        ["volumes", ..] => Replace,
        ["affinity", ..] => Replace,
        _ => return None,
    })
}

/// The strategy of the list at `path` (field names from the object root) for a built-in kind.
fn list_strategy(kind: &str, path: &[&str]) -> Option<ListStrategy> {
    use ListStrategy::*;
    match path {
        ["metadata", "finalizers"] => return Some(MergePrimitive),
        ["metadata", "ownerReferences"] => return Some(MergeByKey("uid")),
        ["metadata", "managedFields"] => return Some(Replace),
        ["status", "conditions"] => return Some(MergeByKey("type")),
        _ => {}
    }
    match (kind, path) {
        ("Pod", ["spec", rest @ ..]) => pod_spec_list(rest),
        ("Pod", ["status", "podIPs" | "hostIPs"]) => Some(MergeByKey("ip")),
        ("Pod", ["status", _]) => Some(Replace),
        ("Deployment" | "ReplicaSet", ["spec", "template", "spec", rest @ ..]) => pod_spec_list(rest),
        ("Deployment" | "ReplicaSet", ["spec", "selector", "matchExpressions"]) => Some(Replace),
        ("Service", ["spec", "ports"]) => Some(MergeByKey("port")),
        ("Service", ["spec", "clusterIPs" | "ipFamilies" | "externalIPs" | "loadBalancerSourceRanges"]) => {
            Some(Replace)
        }
        ("Service", ["status", "loadBalancer", "ingress"]) => Some(Replace),
        ("Node", ["spec", "podCIDRs"]) => Some(MergePrimitive),
        ("Node", ["spec", "taints"]) => Some(Replace),
        ("Node", ["status", "addresses"]) => Some(MergeByKey("type")),
        ("Node", ["status", "images" | "volumesInUse" | "volumesAttached"]) => Some(Replace),
        ("Namespace", ["spec", "finalizers"]) => Some(Replace),
        ("Endpoints", ["subsets", ..]) => Some(Replace),
        ("Event", _) => Some(Replace),
        _ => None,
    }
}

/// Applies a strategic merge patch to an object of a built-in `kind`.
pub fn apply(kind: &str, target: &Value, patch: &Value) -> Result<Value, SmpError> {
    let Value::Object(p) = patch else { return Err(SmpError::Invalid("patch must be a JSON object".into())) };
    let t = target.as_object().cloned().unwrap_or_default();
    merge_map(kind, &mut Vec::new(), t, p).map(|m| m.map(Value::Object).unwrap_or(Value::Null))
}

/// Merges a patch map into a map; None when the directive deletes the map.
fn merge_map<'a>(
    kind: &str,
    path: &mut Vec<&'a str>,
    mut t: Map<String, Value>,
    p: &'a Map<String, Value>,
) -> Result<Option<Map<String, Value>>, SmpError> {
    match p.get("$patch").and_then(Value::as_str) {
        Some("delete") => return Ok(None),
        Some("replace") => {
            let mut out = p.clone();
            out.shift_remove("$patch");
            return Ok(Some(out));
        }
        Some("merge") | None => {}
        Some(other) => return Err(SmpError::Invalid(format!("Unknown patch type: {other}"))),
    }
    let retain: Option<Vec<String>> = p
        .get("$retainKeys")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect());
    for (k, v) in p {
        if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = v.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(a)) = t.get_mut(field) {
                a.retain(|x| !remove.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            return Err(SmpError::Invalid(format!("unknown directive {k}")));
        }
        if v.is_null() {
            t.shift_remove(k);
            continue;
        }
        path.push(k.as_str());
        let merged = match (t.shift_remove(k), v) {
            (Some(Value::Object(tm)), Value::Object(pm)) => merge_map(kind, path, tm, pm)?.map(Value::Object),
            (None, Value::Object(pm)) => merge_map(kind, path, Map::new(), pm)?.map(Value::Object),
            (old, Value::Array(pa)) => {
                let order = p.get(&format!("$setElementOrder/{k}")).and_then(Value::as_array);
                Some(Value::Array(merge_list(kind, path, old, pa, order)?))
            }
            (_, scalar) => Some(scalar.clone()),
        };
        path.pop();
        if let Some(m) = merged {
            t.insert(k.clone(), m);
        }
    }
    if let Some(keep) = retain {
        t.retain(|k, _| keep.contains(k));
    }
    Ok(Some(t))
}

fn merge_list<'a>(
    kind: &str,
    path: &mut Vec<&'a str>,
    old: Option<Value>,
    patch: &'a [Value],
    order: Option<&Vec<Value>>,
) -> Result<Vec<Value>, SmpError> {
    let strategy = list_strategy(kind, path).ok_or_else(|| SmpError::UnknownList(path.join(".")))?;
    let old = match old {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    match strategy {
        ListStrategy::Replace => Ok(patch.to_vec()),
        ListStrategy::MergePrimitive => {
            let mut out = old;
            for v in patch {
                if !out.contains(v) {
                    out.push(v.clone());
                }
            }
            Ok(out)
        }
        ListStrategy::MergeByKey(key) => {
            if patch.iter().any(|e| e.get("$patch").and_then(Value::as_str) == Some("replace")) {
                return Ok(patch.iter().filter(|e| e.get("$patch").is_none()).cloned().collect());
            }
            let mut out = old;
            for e in patch {
                let Some(pm) = e.as_object() else {
                    return Err(SmpError::Invalid(format!(
                        "list element of {} is not an object",
                        path.join(".")
                    )));
                };
                let k = pm.get(key).cloned().ok_or_else(|| {
                    SmpError::Invalid(format!("map: {pm:?} does not contain declared merge key: {key}"))
                })?;
                let pos = out.iter().position(|x| x.get(key) == Some(&k));
                if pm.get("$patch").and_then(Value::as_str) == Some("delete") {
                    if let Some(i) = pos {
                        out.remove(i);
                    }
                    continue;
                }
                match pos {
                    Some(i) => {
                        let cur = out[i].as_object().cloned().unwrap_or_default();
                        match merge_map(kind, path, cur, pm)? {
                            Some(m) => out[i] = Value::Object(m),
                            None => {
                                out.remove(i);
                            }
                        }
                    }
                    None => {
                        if let Some(m) = merge_map(kind, path, Map::new(), pm)? {
                            out.push(Value::Object(m));
                        }
                    }
                }
            }
            if let Some(order) = order {
                let rank =
                    |v: &Value| order.iter().position(|o| o.get(key).is_some() && o.get(key) == v.get(key));
                // Elements named by the order come in that order; the others keep their place after them.
                out.sort_by_key(|v| rank(v).unwrap_or(usize::MAX));
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merges_containers_by_name_like_kubectl_apply() {
        let t = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}});
        let p = json!({"spec": {"$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [{"name": "b", "image": "2"}]}});
        assert_eq!(
            apply("Pod", &t, &p),
            Ok(json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]}}))
        );
        let del = json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}});
        assert_eq!(
            apply("Pod", &t, &del),
            Ok(json!({"spec": {"containers": [{"name": "b", "image": "1"}]}}))
        );
        let env = json!({"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}]}});
        let r = apply("Pod", &t, &env).expect("env merge");
        assert_eq!(r["spec"]["containers"][0]["env"], json!([{"name": "X", "value": "1"}]));
        assert_eq!(r["spec"]["containers"][0]["image"], "1");
    }

    #[test]
    fn replace_lists_primitive_sets_and_directives() {
        let t = json!({"metadata": {"finalizers": ["a"], "labels": {"x": "1", "y": "2"}}, "spec": {"tolerations": [{"key": "k"}]}});
        let p =
            json!({"metadata": {"finalizers": ["b"], "labels": {"x": null}}, "spec": {"tolerations": []}});
        assert_eq!(
            apply("Pod", &t, &p),
            Ok(
                json!({"metadata": {"finalizers": ["a", "b"], "labels": {"y": "2"}}, "spec": {"tolerations": []}})
            )
        );
        let p = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}});
        assert_eq!(apply("Pod", &t, &p).expect("ok")["metadata"]["finalizers"], json!([]));
        let p = json!({"metadata": {"labels": {"$patch": "replace", "z": "3"}}});
        assert_eq!(apply("Pod", &t, &p).expect("ok")["metadata"]["labels"], json!({"z": "3"}));
    }

    #[test]
    fn unknown_lists_are_refused() {
        let t = json!({"spec": {}});
        assert_eq!(
            apply("Pod", &t, &json!({"spec": {"mystery": [1]}})),
            Err(SmpError::UnknownList("spec.mystery".into()))
        );
        assert!(apply("ConfigMap", &json!({}), &json!({"data": {"a": "b"}})).is_ok());
        assert!(apply("Pod", &t, &json!({"$patch": "bogus"})).is_err());
    }
}
