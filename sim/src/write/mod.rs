//! Writes with the apiserver's registry semantics: create (generateName, 409 AlreadyExists), update with
//! a resourceVersion precondition (409 Conflict), patch, delete with preconditions and finalizers,
//! deletecollection, the status subresource and dryRun. HTTP handlers and the Rust API both call these.

pub mod meta;
pub mod patch;
mod smp;
#[cfg(test)]
mod tests;

use serde_json::{Map, Value, json};

use crate::kinds::ResourceDef;
use crate::status::{ApiError, Cause, invalid_cause, required_cause};
use crate::store::{ResId, Store, WriteAction};
pub use patch::PatchType;

/// How many generated names are tried before giving up with 409 (`RetryGenerateName`).
const GENERATE_NAME_ATTEMPTS: usize = 8;

/// Options shared by all writes.
#[derive(Debug, Clone, Default)]
pub struct WriteOpts {
    /// `dryRun=All`: validate and answer, but persist nothing.
    pub dry_run: bool,
    /// The field manager recorded in managedFields.
    pub manager: String,
}

/// Which part of the object a write targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Main,
    Status,
}

/// DeleteOptions preconditions.
#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// The result of a delete.
#[derive(Debug, Clone)]
pub enum Deleted {
    /// The object is gone; this is its last state.
    Gone(Value),
    /// Finalizers keep it: deletionTimestamp is set; this is the updated object.
    Pending(Value),
}

/// The storage key of an object.
pub fn key(res: &ResourceDef, ns: Option<&str>, name: &str) -> String {
    match (res.namespaced, ns) {
        (true, Some(ns)) => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

fn meta_str<'a>(obj: &'a Value, k: &str) -> &'a str {
    meta(obj).and_then(|m| m.get(k)).and_then(Value::as_str).unwrap_or("")
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj.as_object_mut().expect("objects are maps").insert("metadata".into(), json!({}));
    }
    obj.get_mut("metadata").and_then(Value::as_object_mut).expect("metadata was just made a map")
}

fn has_finalizers(obj: &Value) -> bool {
    meta(obj).and_then(|m| m.get("finalizers")).and_then(Value::as_array).is_some_and(|a| !a.is_empty())
}

/// Checks TypeMeta of a request body and the body's shape (400 on mismatch).
fn check_body(res: &ResourceDef, body: &Value) -> Result<(), ApiError> {
    let Some(m) = body.as_object() else {
        return Err(ApiError::bad_request("the body of the request must be a JSON object"));
    };
    if let Some(av) = m.get("apiVersion").and_then(Value::as_str)
        && !av.is_empty()
        && av != res.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            res.api_version()
        )));
    }
    if let Some(k) = m.get("kind").and_then(Value::as_str)
        && !k.is_empty()
        && k != res.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            res.kind
        )));
    }
    if m.get("metadata").is_some_and(|v| !v.is_object() && !v.is_null()) {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    check_meta_types(res, m.get("metadata"))
}

/// The typed decoder rejects ObjectMeta fields of the wrong JSON type; so does the sim (400).
fn check_meta_types(res: &ResourceDef, meta: Option<&Value>) -> Result<(), ApiError> {
    let Some(Value::Object(meta)) = meta else { return Ok(()) };
    let bad = |field: &str, go_type: &str, v: &Value| {
        let got = match v {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        ApiError::bad_request(format!(
            "json: cannot unmarshal {got} into Go struct field ObjectMeta.metadata.{field} of type {go_type} ({} {})",
            res.kind,
            res.api_version()
        ))
    };
    for field in ["name", "generateName", "namespace", "resourceVersion", "uid"] {
        if let Some(v) = meta.get(field).filter(|v| !v.is_string() && !v.is_null()) {
            return Err(bad(field, "string", v));
        }
    }
    for field in ["labels", "annotations"] {
        match meta.get(field) {
            Some(Value::Object(m)) => {
                if let Some(v) = m.values().find(|v| !v.is_string()) {
                    return Err(bad(field, "string", v));
                }
            }
            Some(v) if !v.is_null() => return Err(bad(field, "map[string]string", v)),
            _ => {}
        }
    }
    match meta.get("finalizers") {
        Some(Value::Array(a)) => {
            if let Some(v) = a.iter().find(|v| !v.is_string()) {
                return Err(bad("finalizers", "string", v));
            }
        }
        Some(v) if !v.is_null() => return Err(bad("finalizers", "[]string", v)),
        _ => {}
    }
    Ok(())
}

/// Validates an object name: DNS-1123 label for namespaces, subdomain otherwise.
fn validate_name(res: &ResourceDef, name: &str) -> Vec<Cause> {
    let label = res.builtin && res.plural == "namespaces";
    let max = if label { 63 } else { 253 };
    let ok_chars =
        name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    let parts_ok = name.split('.').all(|p| {
        !p.is_empty()
            && p.as_bytes()[0].is_ascii_alphanumeric()
            && p.as_bytes()[p.len() - 1].is_ascii_alphanumeric()
            && !p.contains('.')
    });
    let mut causes = Vec::new();
    if !ok_chars || !parts_ok || (label && name.contains('.')) {
        let what = if label {
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must \
             start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for \
             validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        } else {
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and \
             must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation \
             is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        };
        causes.push(invalid_cause("metadata.name", name, what));
    }
    if name.len() > max {
        causes.push(Cause {
            reason: "FieldValueTooLong".into(),
            message: format!("Too long: may not be more than {max} bytes"),
            field: "metadata.name".into(),
        });
    }
    causes
}

/// Fills server-owned metadata of a new object and puts keys in serialisation order.
fn prepare_new(res: &ResourceDef, mut obj: Value, rev: u64, opts: &WriteOpts) -> Value {
    let m = obj.as_object_mut().expect("checked by check_body");
    m.insert("kind".into(), json!(res.kind));
    m.insert("apiVersion".into(), json!(res.api_version()));
    let meta = meta_mut(&mut obj);
    meta.insert("uid".into(), json!(meta::new_uid()));
    meta.insert("resourceVersion".into(), json!(rev.to_string()));
    meta.insert("creationTimestamp".into(), json!(meta::now_rfc3339()));
    for k in ["deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
        meta.remove(k);
    }
    if res.has_generation {
        meta.insert("generation".into(), json!(1));
    } else {
        meta.remove("generation");
    }
    if res.builtin && res.plural == "namespaces" {
        let m = obj.as_object_mut().expect("objects are maps");
        let spec = m.entry("spec").or_insert_with(|| json!({}));
        if let Some(s) = spec.as_object_mut() {
            s.entry("finalizers").or_insert_with(|| json!(["kubernetes"]));
        }
        let status = m.entry("status").or_insert_with(|| json!({}));
        if let Some(s) = status.as_object_mut() {
            s.insert("phase".into(), json!("Active"));
        }
    }
    finish(res, obj, opts, "", None)
}

/// Records managedFields and normalises key order. Like the apiserver, managedFields a client sets
/// itself (non-empty and different from the stored ones, `prev`) are kept as sent.
fn finish(
    res: &ResourceDef,
    mut obj: Value,
    opts: &WriteOpts,
    subresource: &str,
    prev: Option<&Value>,
) -> Value {
    let given =
        obj.pointer("/metadata/managedFields").filter(|v| v.as_array().is_some_and(|a| !a.is_empty()));
    let user_set = given.is_some() && given != prev.and_then(|p| p.pointer("/metadata/managedFields"));
    if !user_set && let Some(m) = obj.as_object_mut() {
        meta::update_managed_fields(m, &opts.manager, &res.api_version(), subresource);
    }
    res.normalize(&mut obj);
    obj
}

/// Applies dryRun: the computed action is answered but not stored.
fn dry(action: WriteAction, opts: &WriteOpts) -> WriteAction {
    if !opts.dry_run {
        return action;
    }
    match action {
        WriteAction::Put(v) | WriteAction::Delete(v) => WriteAction::Unchanged(v),
        a => a,
    }
}

/// Creates an object (POST). `ns` is the URL namespace for namespaced resources.
pub fn create(
    store: &Store,
    id: ResId,
    ns: Option<&str>,
    body: Value,
    opts: &WriteOpts,
) -> Result<Value, ApiError> {
    let res = store.resource(id).clone();
    check_body(&res, &body)?;
    let mut body = body;
    let body_ns = meta_str(&body, "namespace").to_string();
    if res.namespaced {
        let Some(ns) = ns else { return Err(ApiError::path_not_found()) };
        if !body_ns.is_empty() && body_ns != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        meta_mut(&mut body).insert("namespace".into(), json!(ns));
    } else {
        meta_mut(&mut body).remove("namespace");
    }
    let requested = meta_str(&body, "name").to_string();
    let generate = meta_str(&body, "generateName").to_string();
    if requested.is_empty() && generate.is_empty() {
        let c = required_cause("metadata.name", "name or generateName is required");
        return Err(ApiError::invalid_object(&res, "", vec![c]));
    }
    let attempts = if requested.is_empty() { GENERATE_NAME_ATTEMPTS } else { 1 };
    let mut last_err = None;
    for _ in 0..attempts {
        let name = if requested.is_empty() { meta::generate_name(&generate) } else { requested.clone() };
        let causes = validate_name(&res, &name);
        if !causes.is_empty() {
            return Err(ApiError::invalid_object(&res, &name, causes));
        }
        // A named create has one attempt: the body can move instead of being copied.
        let mut obj = if requested.is_empty() { body.clone() } else { std::mem::take(&mut body) };
        meta_mut(&mut obj).insert("name".into(), json!(name));
        if res.builtin && res.plural == "namespaces" {
            let labels = meta_mut(&mut obj).entry("labels").or_insert_with(|| json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
        }
        let k = key(&res, ns, &name);
        let need_ns = if res.namespaced { ns } else { None };
        let r = store.write(id, &k, need_ns, |cur, rev| {
            if cur.is_some() {
                return Err(ApiError::already_exists(&res, &name));
            }
            let mut v = prepare_new(&res, obj, rev, opts);
            if opts.dry_run {
                meta_mut(&mut v).remove("resourceVersion");
            }
            Ok(dry(WriteAction::Put(v), opts))
        });
        match r {
            Ok(w) => return Ok(w.obj),
            Err(e) if e.reason == "AlreadyExists" && requested.is_empty() => last_err = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_err.unwrap_or_else(|| ApiError::internal("generateName retries exhausted")))
}

/// The spec-like content of an object: everything except metadata and status (generation tracking).
fn spec_part(obj: &Value) -> Value {
    let mut m = obj.as_object().cloned().unwrap_or_default();
    for k in ["metadata", "status", "kind", "apiVersion"] {
        m.shift_remove(k);
    }
    Value::Object(m)
}

/// Whether two states differ other than in resourceVersion and managedFields (a no-op update does not
/// write, as the apiserver skips writes with identical bytes).
fn same_content(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
            m.remove("managedFields");
        }
        v
    };
    strip(a) == strip(b)
}

/// Replaces an object (PUT), or its status with `Part::Status`.
pub fn update(
    store: &Store,
    id: ResId,
    ns: Option<&str>,
    name: &str,
    body: Value,
    part: Part,
    opts: &WriteOpts,
) -> Result<Value, ApiError> {
    let res = store.resource(id).clone();
    check_body(&res, &body)?;
    let body_name = meta_str(&body, "name");
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if res.namespaced {
        let body_ns = meta_str(&body, "namespace");
        if !body_ns.is_empty() && Some(body_ns) != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    let k = key(&res, ns, name);
    let w = store.write(id, &k, None, |cur, rev| {
        let cur = cur.ok_or_else(|| ApiError::not_found(&res, name))?.value();
        let action = next_state(&res, &cur, body, part, rev, opts)?;
        Ok(dry(action, opts))
    })?;
    Ok(w.obj)
}

/// Computes the state after an update of `cur` with `body` (preconditions, immutable metadata, status
/// split, generation, finalizer-completed deletion, no-op detection).
fn next_state(
    res: &ResourceDef,
    cur: &Value,
    body: Value,
    part: Part,
    rev: u64,
    opts: &WriteOpts,
) -> Result<WriteAction, ApiError> {
    let name = meta_str(cur, "name").to_string();
    let want_rv = meta_str(&body, "resourceVersion");
    if !want_rv.is_empty() && want_rv != meta_str(cur, "resourceVersion") {
        return Err(ApiError::conflict(
            res,
            &name,
            "the object has been modified; please apply your changes to the latest version and try again",
        ));
    }
    let want_uid = meta_str(&body, "uid");
    if !want_uid.is_empty() && want_uid != meta_str(cur, "uid") {
        return Err(ApiError::conflict(
            res,
            &name,
            &format!(
                "Precondition failed: UID in precondition: {want_uid}, UID in object meta: {}",
                meta_str(cur, "uid")
            ),
        ));
    }
    let mut next = match part {
        Part::Status => {
            let mut n = cur.clone();
            let status = body.get("status").cloned().unwrap_or_else(|| json!({}));
            n.as_object_mut().expect("stored objects are maps").insert("status".into(), status);
            n
        }
        Part::Main => {
            let mut n = body;
            let m = n.as_object_mut().expect("checked by check_body");
            if res.has_status && res.builtin {
                match cur.get("status") {
                    Some(s) => m.insert("status".into(), s.clone()),
                    None => m.shift_remove("status"),
                };
            }
            n
        }
    };
    {
        let m = next.as_object_mut().expect("objects are maps");
        m.insert("kind".into(), json!(res.kind));
        m.insert("apiVersion".into(), json!(res.api_version()));
    }
    let cur_meta = meta(cur).cloned().unwrap_or_default();
    let nm = meta_mut(&mut next);
    for k in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match cur_meta.get(k) {
            Some(v) => nm.insert(k.into(), v.clone()),
            None => nm.remove(k),
        };
    }
    if part == Part::Status {
        // Status writes cannot change metadata except through the main resource.
        *nm = cur_meta.clone();
    }
    nm.insert("resourceVersion".into(), json!(cur_meta.get("resourceVersion").cloned().unwrap_or(json!(""))));
    if res.has_generation && spec_part(&next) != spec_part(cur) {
        let g = cur_meta.get("generation").and_then(Value::as_i64).unwrap_or(0) + 1;
        meta_mut(&mut next).insert("generation".into(), json!(g));
    }
    let mut normalized = next.clone();
    res.normalize(&mut normalized);
    if same_content(&normalized, cur) {
        return Ok(WriteAction::Unchanged(cur.clone()));
    }
    meta_mut(&mut next).insert("resourceVersion".into(), json!(rev.to_string()));
    let sub = if part == Part::Status { "status" } else { "" };
    let next = finish(res, next, opts, sub, Some(cur));
    let deleting = meta(&next).is_some_and(|m| m.contains_key("deletionTimestamp"));
    if deleting && !has_finalizers(&next) {
        return Ok(WriteAction::Delete(next));
    }
    Ok(WriteAction::Put(next))
}

/// Patches an object (PATCH) of the given type.
#[allow(clippy::too_many_arguments)]
pub fn patch(
    store: &Store,
    id: ResId,
    ns: Option<&str>,
    name: &str,
    ty: PatchType,
    patch_body: &Value,
    part: Part,
    opts: &WriteOpts,
) -> Result<Value, ApiError> {
    let res = store.resource(id).clone();
    let k = key(&res, ns, name);
    let w = store.write(id, &k, None, |cur, rev| {
        let cur = cur.ok_or_else(|| ApiError::not_found(&res, name))?.value();
        let patched = patch::apply(ty, &res.kind, res.builtin, &cur, patch_body).map_err(|e| match e {
            patch::PatchError::Unsupported(why) => ApiError::unsupported_patch(&why),
            patch::PatchError::Invalid(m) => ApiError::bad_request(m),
        })?;
        if !patched.is_object() {
            return Err(ApiError::bad_request("the patched object must be a JSON object"));
        }
        check_body(&res, &patched)?;
        // A patch carries a precondition only when it sets resourceVersion itself.
        let mut patched = patched;
        if patch_sets_rv(ty, patch_body) {
            let rv = meta_str(&patched, "resourceVersion").to_string();
            meta_mut(&mut patched).insert("resourceVersion".into(), json!(rv));
        } else {
            meta_mut(&mut patched).remove("resourceVersion");
        }
        let action = next_state(&res, &cur, patched, part, rev, opts)?;
        Ok(dry(action, opts))
    })?;
    Ok(w.obj)
}

fn patch_sets_rv(ty: PatchType, p: &Value) -> bool {
    match ty {
        PatchType::Json => p.as_array().is_some_and(|ops| {
            ops.iter().any(|op| op.get("path").and_then(Value::as_str) == Some("/metadata/resourceVersion"))
        }),
        _ => p.pointer("/metadata/resourceVersion").is_some_and(|v| !v.is_null()),
    }
}

/// Deletes an object, honouring preconditions and finalizers.
pub fn delete(
    store: &Store,
    id: ResId,
    ns: Option<&str>,
    name: &str,
    pre: &Preconditions,
    opts: &WriteOpts,
) -> Result<Deleted, ApiError> {
    let res = store.resource(id).clone();
    let k = key(&res, ns, name);
    let mut pending = false;
    let w = store.write(id, &k, None, |cur, rev| {
        let cur = &cur.ok_or_else(|| ApiError::not_found(&res, name))?.value();
        if let Some(uid) = pre.uid.as_deref()
            && uid != meta_str(cur, "uid")
        {
            return Err(ApiError::conflict(
                &res,
                name,
                &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", meta_str(cur, "uid")),
            ));
        }
        if let Some(rv) = pre.resource_version.as_deref()
            && rv != meta_str(cur, "resourceVersion")
        {
            return Err(ApiError::conflict(
                &res,
                name,
                &format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). \
                     The object might have been modified",
                    meta_str(cur, "resourceVersion")
                ),
            ));
        }
        let mut next = cur.clone();
        if has_finalizers(cur) {
            pending = true;
            if meta(cur).is_some_and(|m| m.contains_key("deletionTimestamp")) {
                return Ok(WriteAction::Unchanged(cur.clone()));
            }
            let m = meta_mut(&mut next);
            m.insert("deletionTimestamp".into(), json!(meta::now_rfc3339()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            m.insert("resourceVersion".into(), json!(rev.to_string()));
            res.normalize(&mut next);
            return Ok(dry(WriteAction::Put(next), opts));
        }
        meta_mut(&mut next).insert("resourceVersion".into(), json!(rev.to_string()));
        Ok(dry(WriteAction::Delete(next), opts))
    })?;
    if pending {
        return Ok(Deleted::Pending(w.obj));
    }
    let last = w.prev.map(|p| p.value()).unwrap_or(w.obj);
    if res.builtin && res.plural == "namespaces" && !opts.dry_run {
        delete_namespace_contents(store, name, opts);
    }
    Ok(Deleted::Gone(last))
}

/// The namespace controller's job, done at once: every object in a deleted namespace is deleted
/// (objects with finalizers get their deletionTimestamp and stay until the finalizers are removed).
fn delete_namespace_contents(store: &Store, ns: &str, opts: &WriteOpts) {
    for (id, res) in store.resources().iter().enumerate() {
        if !res.namespaced {
            continue;
        }
        let Ok((_, items)) = store.range(id, &format!("{ns}/"), "", None) else { continue };
        for (_, obj) in items {
            // NotFound here means a concurrent delete won; nothing to do.
            let _ = delete(store, id, Some(ns), &obj.name, &Preconditions::default(), opts);
        }
    }
}
