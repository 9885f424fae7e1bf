//! Helpers for selector tests: build a stored [`Object`] from parts.

use bytes::Bytes;

use crate::store::{Object, make_key};

pub fn object(ns: Option<&str>, name: &str, labels: &[(&str, &str)], fields: &[Option<&str>]) -> Object {
    let (key, ns_len) = make_key(ns, name);
    let mut labels: Vec<(Box<str>, Box<str>)> =
        labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
    labels.sort();
    Object {
        key,
        ns_len,
        uid: "uid".into(),
        resource_version: 1,
        labels: labels.into_boxed_slice(),
        fields: fields.iter().map(|f| f.map(Box::from)).collect(),
        raw: Bytes::from_static(b"{}"),
        body_offset: 1,
        metadata_range: 0..0,
        proto: Default::default(),
    }
}
