//! The generic table convertor (k8s.io/apiserver `registry/rest/table.go`, `NewDefaultTableConvertor`):
//! what an apiserver prints for a kind that has no printer of its own — aggregated servers' kinds such as
//! the sample apiserver's flunders. Two columns, `Name` and `Created At`; the cells are the object's name
//! and its `creationTimestamp` formatted as RFC 3339 in UTC (`0001-01-01T00:00:00Z` when unset: Go's zero
//! time), never an age. An empty list has `"rows":null` (the convertor appends to a nil slice).
//!
//! Which resources use it cannot be read from discovery, and the column descriptions are the upstream
//! build's swagger text of ObjectMeta, so kache learns both from the upstream itself: the first forwarded
//! Table answer for a resource ([`learn`]) is checked to be exactly the generic convertor's (the two
//! columns with their names, types, formats and priorities, and every row it carries whose object has
//! metadata printed as this module prints it); only then is the resource's Table served from memory, with
//! the column definitions copied from that answer. Anything else — a printer with other columns, a body
//! kache cannot read — leaves the resource forwarded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::{BufMut, BytesMut};
use serde_json::Value;

use super::age;
use super::row::{Cell, Row};
use kache_k8s::json;

/// Resources (group/version/resource) whose learned columns are kept at most: a bound on what an upstream
/// with very many aggregated kinds can make this registry hold. Past it, further resources stay forwarded.
pub const MAX_RESOURCES: usize = 4096;
/// Bytes of a forwarded Table answer read to learn from. The column definitions come first, so any
/// answer longer than this still teaches them; its rows past this point are simply not checked.
pub(crate) const LEARN_PREFIX_BYTES: usize = 64 * 1024;

/// The learned `columnDefinitions` of one upstream build (interned; a [`super::Printer::Generic`] names
/// one by index, so rows cached under different descriptions never mix).
fn sets() -> &'static Mutex<Vec<Arc<[u8]>>> {
    static SETS: OnceLock<Mutex<Vec<Arc<[u8]>>>> = OnceLock::new();
    SETS.get_or_init(|| Mutex::new(Vec::new()))
}

fn resources() -> &'static Mutex<HashMap<String, u32>> {
    static RESOURCES: OnceLock<Mutex<HashMap<String, u32>>> = OnceLock::new();
    RESOURCES.get_or_init(|| Mutex::new(HashMap::new()))
}

fn key(group: &str, version: &str, resource: &str) -> String {
    format!("{group}/{version}/{resource}")
}

/// The generic printer learned for a resource, if its upstream answered a Table with the generic columns.
pub fn lookup(group: &str, version: &str, resource: &str) -> Option<u32> {
    resources().lock().unwrap_or_else(|p| p.into_inner()).get(&key(group, version, resource)).copied()
}

/// How many resources have learned generic columns (`kache_table_generic_resources`).
pub(crate) fn learned_resources() -> usize {
    resources().lock().unwrap_or_else(|p| p.into_inner()).len()
}

/// The encoded `columnDefinitions` of a learned set.
pub(crate) fn columns_json(id: u32) -> Option<Arc<[u8]>> {
    sets().lock().unwrap_or_else(|p| p.into_inner()).get(id as usize).cloned()
}

/// Learns from a forwarded Table answer (or the first [`LEARN_PREFIX_BYTES`] of it): when it is the generic
/// convertor's, the resource's Tables are served from memory from now on. Returns whether it learned.
pub(crate) fn learn(group: &str, version: &str, resource: &str, body: &[u8]) -> bool {
    let Some(columns) = generic_columns(body) else { return false };
    let mut sets = sets().lock().unwrap_or_else(|p| p.into_inner());
    let id = match sets.iter().position(|s| **s == columns[..]) {
        Some(i) => i,
        None if sets.len() < MAX_RESOURCES => {
            sets.push(columns.into());
            sets.len() - 1
        }
        None => return false,
    };
    let Ok(id) = u32::try_from(id) else { return false };
    drop(sets);
    let mut resources = resources().lock().unwrap_or_else(|p| p.into_inner());
    if resources.len() >= MAX_RESOURCES && !resources.contains_key(&key(group, version, resource)) {
        return false;
    }
    resources.insert(key(group, version, resource), id);
    true
}

/// The compact `columnDefinitions` of a Table answer when they, and the rows it carries, are exactly the
/// generic convertor's.
fn generic_columns(body: &[u8]) -> Option<Vec<u8>> {
    let columns = member_value(body, b"\"columnDefinitions\"")?;
    let columns = columns.as_array()?;
    let expected = [("Name", "string", "name"), ("Created At", "date", "")];
    if columns.len() != expected.len() {
        return None;
    }
    let mut out = BytesMut::new();
    out.put_u8(b'[');
    for (i, (c, (name, ty, format))) in columns.iter().zip(expected).enumerate() {
        let c = c.as_object()?;
        let description = c.get("description")?.as_str()?;
        let known = ["name", "type", "format", "description", "priority"];
        if c.get("name")? != name
            || c.get("type")? != ty
            || c.get("format")? != format
            || c.get("priority")?.as_i64()? != 0
            || c.keys().any(|k| !known.contains(&k.as_str()))
        {
            return None;
        }
        if i > 0 {
            out.put_u8(b',');
        }
        out.put_slice(b"{\"name\":");
        json::write_str(&mut out, name);
        out.put_slice(b",\"type\":");
        json::write_str(&mut out, ty);
        out.put_slice(b",\"format\":");
        json::write_str(&mut out, format);
        out.put_slice(b",\"description\":");
        json::write_str(&mut out, description);
        out.put_slice(b",\"priority\":0}");
    }
    out.put_u8(b']');
    // A whole answer: every row whose object has metadata must be what this module prints for it.
    if let Ok(table) = serde_json::from_slice::<Value>(body) {
        for r in table.get("rows").and_then(Value::as_array).into_iter().flatten() {
            let cells = r.get("cells")?;
            if let Some(meta) = r.pointer("/object/metadata") {
                let object = serde_json::json!({ "metadata": meta });
                let want = [name_of(&object), created_at(&object)];
                if cells.as_array()?.iter().map(Value::as_str).ne(want.iter().map(|s| Some(s.as_str()))) {
                    return None;
                }
            }
        }
    }
    Some(out.to_vec())
}

/// The value of the first member named `key` (with its quotes) in a JSON prefix, compact or indented.
fn member_value(body: &[u8], key: &[u8]) -> Option<Value> {
    let at = body.windows(key.len()).position(|w| w == key)? + key.len();
    let rest = body[at..].trim_ascii_start().strip_prefix(b":")?;
    let mut values = serde_json::Deserializer::from_slice(rest).into_iter::<Value>();
    values.next()?.ok()
}

fn name_of(o: &Value) -> String {
    o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned()
}

/// `creationTimestamp.Time.UTC().Format(time.RFC3339)`.
fn created_at(o: &Value) -> String {
    let at = o.pointer("/metadata/creationTimestamp").and_then(Value::as_str).and_then(age::parse);
    format_rfc3339(at.unwrap_or(age::GO_ZERO_MS))
}

/// RFC 3339 in UTC with whole seconds, as Go's `time.RFC3339` layout prints it.
pub fn format_rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The generic row of one object: its name and its creation time.
pub fn row(o: &Value) -> Row {
    Row { cells: Box::new([Cell::str(&name_of(o)), Cell::str(&created_at(o))]), conditions: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: &str = r#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"3"},"columnDefinitions":[{"name":"Name","type":"string","format":"name","description":"N","priority":0},{"name":"Created At","type":"date","format":"","description":"C","priority":0}],"rows":[{"cells":["a","2026-11-26T16:20:08Z"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","creationTimestamp":"2026-11-26T16:20:08Z"}}}]}"#;

    #[test]
    fn formats_go_rfc3339() {
        assert_eq!(format_rfc3339(age::GO_ZERO_MS), "0001-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(1_795_697_870_999), "2026-11-26T12:57:50Z");
        let o =
            serde_json::json!({"metadata": {"name": "x", "creationTimestamp": "2026-11-26T13:57:50+01:00"}});
        assert_eq!(created_at(&o), "2026-11-26T12:57:50Z");
        assert_eq!(created_at(&serde_json::json!({})), "0001-01-01T00:00:00Z");
    }

    #[test]
    fn learns_only_the_generic_columns() {
        let want = br#"[{"name":"Name","type":"string","format":"name","description":"N","priority":0},{"name":"Created At","type":"date","format":"","description":"C","priority":0}]"#;
        assert_eq!(generic_columns(REAL.as_bytes()).as_deref(), Some(&want[..]));
        // Indented (pretty) answers, and a prefix cut inside the rows, teach the same columns.
        let pretty =
            serde_json::to_vec_pretty(&serde_json::from_str::<Value>(REAL).expect("json")).expect("pretty");
        assert_eq!(generic_columns(&pretty).as_deref(), Some(&want[..]));
        let cut = &REAL.as_bytes()[..REAL.find("\"rows\"").expect("rows") + 12];
        assert_eq!(generic_columns(cut).as_deref(), Some(&want[..]));
        // Other columns, another type, an extra column, or a row printed otherwise: not generic.
        for bad in [
            REAL.replace("Created At", "Age"),
            REAL.replace(r#""type":"date""#, r#""type":"string""#),
            REAL.replace(
                r#""priority":0}]"#,
                r#""priority":0},{"name":"X","type":"string","format":"","description":"","priority":1}]"#,
            ),
            REAL.replace(r#""cells":["a","#, r#""cells":["b","#),
            REAL.replace(r#"["a","2026-11-26T16:20:08Z"]"#, r#"["a","5m"]"#),
            "{}".to_owned(),
        ] {
            assert_eq!(generic_columns(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn learned_resources_are_served() {
        assert_eq!(lookup("g.example", "v1", "widgets-learn"), None);
        assert!(!learn("g.example", "v1", "widgets-learn", br#"{"columnDefinitions":[]}"#));
        assert_eq!(lookup("g.example", "v1", "widgets-learn"), None);
        assert!(learn("g.example", "v1", "widgets-learn", REAL.as_bytes()));
        let id = lookup("g.example", "v1", "widgets-learn").expect("learned");
        assert!(columns_json(id).expect("set").starts_with(br#"[{"name":"Name""#));
        assert_eq!(lookup("g.example", "v2", "widgets-learn"), None);
    }

    #[test]
    fn rows_are_name_and_creation_time() {
        let o = serde_json::json!({"metadata": {"name": "a", "creationTimestamp": "2026-11-26T16:20:08Z"}});
        let mut out = BytesMut::new();
        row(&o).put_head(&mut out, 0);
        assert_eq!(&out[..], br#"{"cells":["a","2026-11-26T16:20:08Z"]"#);
    }
}
