//! Helpers for selector tests: an object built from parts.

use super::Selectable;

/// An object as selectors see it.
pub struct TestObject {
    ns: Option<String>,
    name: String,
    labels: Vec<(String, String)>,
    fields: Vec<Option<String>>,
    /// The object's JSON (`{}` unless a test sets it).
    pub raw: bytes::Bytes,
}

impl Selectable for TestObject {
    fn name(&self) -> &str {
        &self.name
    }
    fn namespace(&self) -> Option<&str> {
        self.ns.as_deref()
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
    fn extra_field(&self, i: usize) -> Option<&str> {
        self.fields.get(i).and_then(|f| f.as_deref())
    }
    fn raw_json(&self) -> &[u8] {
        &self.raw
    }
}

pub fn object(ns: Option<&str>, name: &str, labels: &[(&str, &str)], fields: &[Option<&str>]) -> TestObject {
    TestObject {
        ns: ns.map(str::to_owned),
        name: name.to_owned(),
        labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        fields: fields.iter().map(|f| f.map(str::to_owned)).collect(),
        raw: bytes::Bytes::from_static(b"{}"),
    }
}
