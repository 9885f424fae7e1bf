//! The generic table convertor (k8s.io/apiserver `registry/rest/table.go`, `NewDefaultTableConvertor`):
//! what an apiserver prints for a kind that has no printer of its own — aggregated servers' kinds such as
//! the sample apiserver's flunders. Two columns, `Name` and `Created At`; the cells are the object's name
//! and its `creationTimestamp` formatted as RFC 3339 in UTC (`0001-01-01T00:00:00Z` when unset: Go's zero
//! time), never an age. An empty list has `"rows":null` (the convertor appends to a nil slice).
//!
//! The column descriptions are the serving build's swagger text of ObjectMeta, so a reader that cannot
//! know them (kache) learns them from an answer: [`answer_columns`] says whether a Table answer is exactly
//! this convertor's and returns its column definitions.

use serde_json::Value;

use super::Column;
use super::age;
use super::row::{Cell, Row};

/// The encoded `columnDefinitions` with these descriptions of `metadata.name` and
/// `metadata.creationTimestamp`.
pub fn columns_json(name_description: &str, created_description: &str) -> Vec<u8> {
    super::encode_columns([
        Column { name: "Name", ty: "string", format: "name", description: name_description, priority: 0 },
        Column { name: "Created At", ty: "date", format: "", description: created_description, priority: 0 },
    ])
}

/// The compact `columnDefinitions` of a Table answer when they, and the rows it carries, are exactly the
/// generic convertor's.
pub fn answer_columns(body: &[u8]) -> Option<Vec<u8>> {
    let columns = member_value(body, b"\"columnDefinitions\"")?;
    let columns = columns.as_array()?;
    let expected = [("Name", "string", "name"), ("Created At", "date", "")];
    if columns.len() != expected.len() {
        return None;
    }
    let mut descriptions = Vec::with_capacity(2);
    for (c, (name, ty, format)) in columns.iter().zip(expected) {
        let c = c.as_object()?;
        let known = ["name", "type", "format", "description", "priority"];
        if c.get("name")? != name
            || c.get("type")? != ty
            || c.get("format")? != format
            || c.get("priority")?.as_i64()? != 0
            || c.keys().any(|k| !known.contains(&k.as_str()))
        {
            return None;
        }
        descriptions.push(c.get("description")?.as_str()?);
    }
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
    Some(columns_json(descriptions[0], descriptions[1]))
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
    age::format_rfc3339(at.unwrap_or(age::GO_ZERO_MS))
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
    fn created_at_is_go_rfc3339() {
        let o =
            serde_json::json!({"metadata": {"name": "x", "creationTimestamp": "2026-11-26T13:57:50+01:00"}});
        assert_eq!(created_at(&o), "2026-11-26T12:57:50Z");
        assert_eq!(created_at(&serde_json::json!({})), "0001-01-01T00:00:00Z");
    }

    #[test]
    fn recognises_only_the_generic_columns() {
        let want = br#"[{"name":"Name","type":"string","format":"name","description":"N","priority":0},{"name":"Created At","type":"date","format":"","description":"C","priority":0}]"#;
        assert_eq!(answer_columns(REAL.as_bytes()).as_deref(), Some(&want[..]));
        // Indented (pretty) answers, and a prefix cut inside the rows, teach the same columns.
        let pretty =
            serde_json::to_vec_pretty(&serde_json::from_str::<Value>(REAL).expect("json")).expect("pretty");
        assert_eq!(answer_columns(&pretty).as_deref(), Some(&want[..]));
        let cut = &REAL.as_bytes()[..REAL.find("\"rows\"").expect("rows") + 12];
        assert_eq!(answer_columns(cut).as_deref(), Some(&want[..]));
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
            assert_eq!(answer_columns(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn rows_are_name_and_creation_time() {
        let o = serde_json::json!({"metadata": {"name": "a", "creationTimestamp": "2026-11-26T16:20:08Z"}});
        let mut out = bytes::BytesMut::new();
        row(&o).put_head(&mut out, 0);
        assert_eq!(&out[..], br#"{"cells":["a","2026-11-26T16:20:08Z"]"#);
    }
}
