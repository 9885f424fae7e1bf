//! Single-object HTTP handlers: get, create, update, patch, delete, deletecollection.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::Value;

use crate::http::list::{self, Page};
use crate::http::response::Body;
use crate::http::view::{self, MetaVersion, View};
use crate::http::{Ctx, Target};
use crate::options::{ListOptions, Query, parse_rv};
use crate::status::{ApiError, success_status};
use crate::store::{Obj, ResId};
use crate::write::{self, Deleted, Part, PatchType, Preconditions, WriteOpts};

/// Request bodies above this are refused (the apiserver's 3 MiB `MaxRequestBodyBytes`).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// GET of one object (staging/src/k8s.io/apiserver/pkg/storage/cacher/delegator.go: CacheDelegator.Get):
/// RV="" reads the latest; any other RV waits for freshness.
pub async fn get(
    ctx: &Ctx,
    id: ResId,
    ns: Option<&str>,
    name: &str,
    q: &Query,
) -> Result<Response<Body>, ApiError> {
    let store = &ctx.state.store;
    let res = store.resource(id).clone();
    match q.get("resourceVersion").unwrap_or("") {
        "" | "0" => {}
        v => {
            let n = parse_rv(v).map_err(|e| {
                ApiError::bad_request(format!(
                    "invalid resource version: resourceVersion: Invalid value: {v:?}: {e}"
                ))
            })?;
            list::wait_fresh(ctx, n).await?;
        }
    }
    let key = write::key(&res, ns, name);
    match store.get(id, &key, None) {
        Ok(Some(obj)) if matches!(ctx.view, View::Table(_)) => {
            let View::Table(version) = ctx.view else { unreachable!("matched above") };
            let include = crate::table::Include::from_query(q)?;
            Ok(ctx.out.json(200, &crate::table::object_table(&res, &obj, include, version)))
        }
        Ok(Some(obj)) if ctx.view != View::Object => {
            if let Some(e) = view::mismatch(&res, ctx.view, false) {
                return Err(e);
            }
            let version = match ctx.view {
                View::Meta(v) | View::MetaList(v) | View::Table(v) => v,
                View::Object => MetaVersion::V1,
            };
            Ok(ctx.out.json(200, &view::partial(&obj, version)))
        }
        Ok(Some(obj)) if ctx.out.pretty || ctx.out.proto => Ok(ctx.out.json(200, &obj.value())),
        Ok(Some(obj)) => {
            let mut body = obj.full_json().to_vec();
            body.push(b'\n');
            Ok(ctx.out.bytes(200, body, "application/json"))
        }
        _ => Err(ApiError::not_found(&res, name)),
    }
}

async fn read_body(req: Request<Incoming>) -> Result<(http::HeaderMap, Bytes), ApiError> {
    let (parts, body) = req.into_parts();
    let bytes = Limited::new(body, MAX_BODY_BYTES)
        .collect()
        .await
        .map_err(|_| ApiError::bad_request(format!("Request entity too large: limit is {MAX_BODY_BYTES}")))?
        .to_bytes();
    Ok((parts.headers, bytes))
}

fn content_type(h: &http::HeaderMap) -> String {
    h.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string()
}

/// Parses a JSON request body as the apiserver's decoder reports failures.
fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}")))
}

/// The encoding of a create/update body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyType {
    Json,
    Protobuf,
}

/// The body's media type among those the resource's serializers decode: JSON, and protobuf for built-in
/// kinds (custom resources have no protobuf serializer: 415).
fn body_type(h: &http::HeaderMap, res: &crate::kinds::ResourceDef) -> Result<BodyType, ApiError> {
    let ct = content_type(h);
    let mt = ct.split(';').next().unwrap_or("").trim();
    if mt.is_empty() || mt == "application/json" || mt == "*/*" {
        Ok(BodyType::Json)
    } else if mt == crate::proto::MEDIA_TYPE && res.builtin {
        Ok(BodyType::Protobuf)
    } else {
        Err(ApiError::unsupported_media_type(&ct))
    }
}

/// Decodes a create/update body into the object's JSON. A protobuf body that does not decode is a 400
/// worded as the apiserver's `transformDecodeError` words it.
fn parse_body(body: &[u8], ty: BodyType, res: &crate::kinds::ResourceDef) -> Result<Value, ApiError> {
    match ty {
        BodyType::Json => parse_json(body),
        BodyType::Protobuf => crate::proto::envelope::decode_object(body).map_err(|e| {
            ApiError::bad_request(format!(
                "the object provided is unrecognized (must be of type {}): {e} ({})",
                res.kind,
                summarize(body)
            ))
        }),
    }
}

/// `summarizeData`: the body's first 30 bytes, as text when it looks like JSON, hex otherwise.
fn summarize(b: &[u8]) -> String {
    const MAX: usize = 30;
    let cut = &b[..b.len().min(MAX)];
    let more = if b.len() > MAX { " ..." } else { "" };
    match b.first() {
        None => "<empty>".into(),
        Some(b'{') => format!("{}{more}", String::from_utf8_lossy(cut)),
        Some(_) => format!("{}{more}", cut.iter().map(|c| format!("{c:02x}")).collect::<String>()),
    }
}

/// WriteOpts from the query: dryRun and the field manager.
fn write_opts(q: &Query, h: &http::HeaderMap) -> Result<WriteOpts, ApiError> {
    let dry_run = match q.get("dryRun") {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: \"{other}\": supported values: \"All\""
            )));
        }
    };
    let ua = h.get(http::header::USER_AGENT).and_then(|v| v.to_str().ok());
    Ok(WriteOpts { dry_run, manager: write::meta::manager_name(q.get("fieldManager"), ua) })
}

/// `?fieldValidation=Strict` (what kubectl sends): a body with fields its kind does not have is refused
/// as the apiserver's strict decoding refuses it. Built-in kinds only (custom resources have no committed
/// schema); `Warn` and `Ignore` (and no parameter) accept the body as it is.
fn check_fields(q: &Query, res: &crate::kinds::ResourceDef, obj: &Value) -> Result<(), ApiError> {
    if q.get("fieldValidation") != Some("Strict") || !res.builtin {
        return Ok(());
    }
    match crate::openapi::unknown_fields(&res.group, &res.version, &res.kind, obj) {
        Some(fields) if !fields.is_empty() => {
            let fields: Vec<String> = fields.iter().map(|f| format!("unknown field \"{f}\"")).collect();
            Err(ApiError::bad_request(format!(
                "{kind} in version \"{v}\" cannot be handled as a {kind}: strict decoding error: {}",
                fields.join(", "),
                kind = res.kind,
                v = res.version
            )))
        }
        _ => Ok(()),
    }
}

fn part(t: &Target) -> Part {
    if t.sub.as_deref() == Some("status") { Part::Status } else { Part::Main }
}

pub async fn create(
    ctx: &Ctx,
    req: Request<Incoming>,
    q: &Query,
    t: &Target,
) -> Result<Response<Body>, ApiError> {
    let (h, body) = read_body(req).await?;
    let res = ctx.state.store.resource(t.id).clone();
    let ty = body_type(&h, &res)?;
    let opts = write_opts(q, &h)?;
    let obj = parse_body(&body, ty, &res)?;
    check_fields(q, &res, &obj)?;
    let created = write::create(&ctx.state.store, t.id, t.ns.as_deref(), obj, &opts)?;
    Ok(ctx.out.json(201, &created))
}

pub async fn update(
    ctx: &Ctx,
    req: Request<Incoming>,
    q: &Query,
    t: &Target,
) -> Result<Response<Body>, ApiError> {
    let (h, body) = read_body(req).await?;
    let res = ctx.state.store.resource(t.id).clone();
    let ty = body_type(&h, &res)?;
    let opts = write_opts(q, &h)?;
    let obj = parse_body(&body, ty, &res)?;
    check_fields(q, &res, &obj)?;
    let name = t.name.as_deref().unwrap_or("");
    let updated = write::update(&ctx.state.store, t.id, t.ns.as_deref(), name, obj, part(t), &opts)?;
    Ok(ctx.out.json(200, &updated))
}

pub async fn patch(
    ctx: &Ctx,
    req: Request<Incoming>,
    q: &Query,
    t: &Target,
) -> Result<Response<Body>, ApiError> {
    let (h, body) = read_body(req).await?;
    let ct = content_type(&h);
    let ty = PatchType::from_content_type(&ct).ok_or_else(|| {
        if ct.starts_with("application/apply-patch") {
            ApiError::no_server_side_apply()
        } else {
            ApiError::unsupported_media_type(&ct)
        }
    })?;
    let opts = write_opts(q, &h)?;
    let p = parse_json(&body)?;
    let name = t.name.as_deref().unwrap_or("");
    let patched = write::patch(&ctx.state.store, t.id, t.ns.as_deref(), name, ty, &p, part(t), &opts)?;
    Ok(ctx.out.json(200, &patched))
}

/// DeleteOptions from the body (optional) and the query.
fn delete_options(
    q: &Query,
    body: &[u8],
    h: &http::HeaderMap,
) -> Result<(Preconditions, WriteOpts), ApiError> {
    let mut opts = write_opts(q, h)?;
    let mut pre = Preconditions::default();
    if !body.iter().all(u8::is_ascii_whitespace) {
        // client-go sends DeleteOptions in the request's content type.
        let v = if content_type(h).starts_with(crate::proto::MEDIA_TYPE) {
            crate::proto::envelope::decode_object(body).map_err(|e| {
                ApiError::bad_request(format!(
                    "the object provided is unrecognized (must be of type DeleteOptions): {e} ({})",
                    summarize(body)
                ))
            })?
        } else {
            parse_json(body)?
        };
        if let Some(p) = v.get("preconditions") {
            pre.uid = p.get("uid").and_then(Value::as_str).map(str::to_string);
            pre.resource_version = p.get("resourceVersion").and_then(Value::as_str).map(str::to_string);
        }
        if let Some(d) = v.get("dryRun").and_then(Value::as_array) {
            opts.dry_run |= d.iter().any(|x| x.as_str() == Some("All"));
        }
    }
    Ok((pre, opts))
}

pub async fn delete(
    ctx: &Ctx,
    req: Request<Incoming>,
    q: &Query,
    t: &Target,
) -> Result<Response<Body>, ApiError> {
    let (h, body) = read_body(req).await?;
    let (pre, opts) = delete_options(q, &body, &h)?;
    let name = t.name.as_deref().unwrap_or("");
    let res = ctx.state.store.resource(t.id).clone();
    match write::delete(&ctx.state.store, t.id, t.ns.as_deref(), name, &pre, &opts)? {
        Deleted::Pending(obj) => Ok(ctx.out.json(200, &obj)),
        Deleted::Gone(obj) if res.delete_returns_object => Ok(ctx.out.json(200, &obj)),
        Deleted::Gone(obj) => {
            let uid = obj.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("");
            Ok(ctx.out.json(200, &success_status(&res, name, uid)))
        }
    }
}

/// DELETE on a collection: deletes every object the selectors match and answers them as a list.
pub async fn delete_collection(ctx: &Ctx, q: &Query, t: &Target) -> Result<Response<Body>, ApiError> {
    let store = &ctx.state.store;
    let res = store.resource(t.id).clone();
    let lopts = ListOptions::from_query(q, &res, false)?;
    let opts = write_opts(q, &http::HeaderMap::new())?;
    let page = list::list(ctx, t.id, t.ns.as_deref(), &ListOptions { limit: 0, cont: None, ..lopts }).await?;
    let mut deleted = Vec::with_capacity(page.items.len());
    for obj in &page.items {
        let ns = Some(obj.namespace.as_str()).filter(|n| !n.is_empty());
        match write::delete(store, t.id, ns, &obj.name, &Preconditions::default(), &opts) {
            Ok(Deleted::Gone(o) | Deleted::Pending(o)) => deleted.push(Arc::new(Obj::new(&res, &o))),
            // Deleted concurrently: it is gone either way.
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let page = Page { rev: store.current_rev(), items: deleted, cont: None, remaining: None };
    if ctx.out.proto {
        let body = list::encode_list_proto(&res, View::Object, &page)?;
        return Ok(ctx.out.bytes(200, body, crate::proto::MEDIA_TYPE));
    }
    let meta = list::list_meta(&res, &page);
    Ok(ctx.out.bytes(200, list::encode_list(&res, meta, &page.items, ctx.out.pretty), "application/json"))
}
