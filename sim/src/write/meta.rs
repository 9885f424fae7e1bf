//! Server-set metadata: uid, timestamps, generated names, managedFields.

use std::time::{SystemTime, UNIX_EPOCH};

use rand::Rng;
use serde_json::{Map, Value, json};

/// Characters of generated name suffixes (`names.SimpleNameGenerator`: no vowels, no confusables).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// Length of a generated name suffix.
const NAME_SUFFIX_LEN: usize = 5;
/// The apiserver truncates generateName so that the full name fits 63 characters.
const MAX_GENERATED_NAME_LENGTH: usize = 63 - NAME_SUFFIX_LEN;

/// Now as RFC 3339 with second precision in UTC (`metav1.Time`).
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    rfc3339(secs)
}

/// Formats seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn rfc3339(secs: u64) -> String {
    crate::time::format_rfc3339(i64::try_from(secs).unwrap_or(i64::MAX), None)
}

/// A random version-4 UUID.
pub fn new_uid() -> String {
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// `generateName` plus a random suffix, the base truncated like the apiserver does.
pub fn generate_name(base: &str) -> String {
    let base: String = base.chars().take(MAX_GENERATED_NAME_LENGTH).collect();
    let mut rng = rand::rng();
    let suffix: String = (0..NAME_SUFFIX_LEN)
        .map(|_| NAME_ALPHABET[rng.random_range(0..NAME_ALPHABET.len())] as char)
        .collect();
    format!("{base}{suffix}")
}

/// The field manager: `?fieldManager=` or the User-Agent's program name (`prefixFromUserAgent`).
pub fn manager_name(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return m.to_string();
    }
    let ua = user_agent.unwrap_or("");
    let prefix = ua.split('/').next().unwrap_or("");
    prefix.chars().take(128).collect()
}

/// A FieldsV1 set describing the fields present in `obj` (metadata labels/annotations, spec, data...).
pub fn fields_v1(obj: &Map<String, Value>) -> Value {
    let mut out = Map::new();
    for (k, v) in obj {
        match k.as_str() {
            "kind" | "apiVersion" => {}
            "metadata" => {
                let mut meta = Map::new();
                for key in ["labels", "annotations", "finalizers", "ownerReferences"] {
                    if let Some(v) = v.get(key) {
                        meta.insert(format!("f:{key}"), field_set_of(v));
                    }
                }
                if !meta.is_empty() {
                    out.insert("f:metadata".into(), Value::Object(meta));
                }
            }
            _ => {
                out.insert(format!("f:{k}"), field_set_of(v));
            }
        }
    }
    Value::Object(out)
}

fn field_set_of(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (format!("f:{k}"), field_set_of(v))).collect())
        }
        _ => json!({}),
    }
}

/// Records `manager` as the owner of the fields of `obj`, replacing its previous entry for the same
/// operation and subresource (a simple model of server-side field tracking).
pub fn update_managed_fields(
    obj: &mut Map<String, Value>,
    manager: &str,
    api_version: &str,
    subresource: &str,
) {
    let fields = fields_v1(obj);
    let mut entry = Map::new();
    // An empty manager (no fieldManager, no User-Agent) is omitted, as `omitempty` does.
    if !manager.is_empty() {
        entry.insert("manager".into(), json!(manager));
    }
    entry.insert("operation".into(), json!("Update"));
    entry.insert("apiVersion".into(), json!(api_version));
    entry.insert("time".into(), json!(now_rfc3339()));
    entry.insert("fieldsType".into(), json!("FieldsV1"));
    entry.insert("fieldsV1".into(), fields);
    if !subresource.is_empty() {
        entry.insert("subresource".into(), json!(subresource));
    }
    let Some(Value::Object(meta)) = obj.get_mut("metadata") else { return };
    let mut list = match meta.remove("managedFields") {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    list.retain(|e| {
        !(e.get("manager").and_then(Value::as_str).unwrap_or("") == manager
            && e.get("operation").and_then(Value::as_str) == Some("Update")
            && e.get("subresource").and_then(Value::as_str).unwrap_or("") == subresource)
    });
    list.push(Value::Object(entry));
    meta.insert("managedFields".into(), Value::Array(list));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_times_and_uids() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_322_095), "2026-11-22T04:34:55Z");
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }

    #[test]
    fn generated_names_and_managers() {
        let n = generate_name("web-");
        assert!(n.starts_with("web-") && n.len() == 9);
        assert_eq!(manager_name(None, Some("curl/8.5.0")), "curl");
        assert_eq!(manager_name(Some("kubectl-create"), Some("curl/8.5.0")), "kubectl-create");
    }

    #[test]
    fn fields_v1_matches_transcript_shape() {
        let obj = json!({"kind": "Flunder", "metadata": {"name": "f1"}, "spec": {"reference": "x1", "referenceType": "Flunder"}});
        assert_eq!(
            fields_v1(obj.as_object().expect("object")),
            json!({"f:spec": {"f:reference": {}, "f:referenceType": {}}})
        );
    }
}
