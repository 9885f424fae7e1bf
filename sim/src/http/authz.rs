//! Authentication and authorization of API requests (when the sim runs with an [`AuthConfig`]), and the
//! TokenReview / SubjectAccessReview endpoints. Errors are worded as the apiserver words them.

use http::{Method, Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::auth::{Attributes, AuthConfig, UserInfo};
use crate::http::response::Body;
use crate::http::{Ctx, Route, Target};
use crate::options::Query;
use crate::status::ApiError;

/// Group and path of the TokenReview API.
pub const TOKEN_REVIEW_PATH: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
/// Group and path of the SubjectAccessReview API.
pub const SUBJECT_ACCESS_REVIEW_PATH: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
/// Review bodies are small; this bounds them.
const MAX_REVIEW_BODY: usize = 64 * 1024;

/// The verb of a resource request, as `RequestInfo` derives it.
pub fn verb(method: &Method, t: &Target, q: &Query) -> &'static str {
    let watch = t.watch_path || q.flag("watch");
    match (method.as_str(), t.name.is_some()) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "",
    }
}

/// Authenticates and authorizes a request; Err is the 401/403 to answer.
pub fn check(
    ctx: &Ctx,
    auth: &AuthConfig,
    req: &Request<Incoming>,
    q: &Query,
    route: &Route,
) -> Result<(), ApiError> {
    let header = req.headers().get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let user = auth.authenticate(header).ok_or_else(ApiError::unauthorized)?;
    let path = req.uri().path();
    match route {
        Route::Resource(t) => {
            let res = ctx.state.store.resource(t.id);
            let attrs = Attributes {
                verb: verb(req.method(), t, q).to_string(),
                group: res.group.clone(),
                resource: res.plural.clone(),
                subresource: t.sub.clone().unwrap_or_default(),
                namespace: t.ns.clone().unwrap_or_default(),
                name: t.name.clone().unwrap_or_default(),
            };
            if auth.authorize(&user, &attrs) {
                Ok(())
            } else {
                Err(forbidden(&user, &attrs, &res.qualified()))
            }
        }
        _ => {
            let verb = req.method().as_str().to_ascii_lowercase();
            if auth.authorize_non_resource(&user, &verb, path) {
                Ok(())
            } else {
                Err(ApiError::forbidden(
                    format!("forbidden: User \"{}\" cannot {verb} path \"{path}\"", user.name),
                    "",
                    "",
                    "",
                ))
            }
        }
    }
}

/// `pods "x" is forbidden: User "u" cannot get resource "pods" in API group "" in the namespace "ns"`.
fn forbidden(user: &UserInfo, a: &Attributes, qualified: &str) -> ApiError {
    let subject =
        if a.name.is_empty() { qualified.to_string() } else { format!("{qualified} \"{}\"", a.name) };
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let scope = if a.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", a.namespace)
    };
    let msg = format!(
        "{subject} is forbidden: User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
        user.name, a.verb, a.group
    );
    ApiError::forbidden(msg, &a.name, &a.group, &a.resource)
}

/// Serves TokenReview and SubjectAccessReview creates.
pub async fn review(ctx: &Ctx, auth: &AuthConfig, req: Request<Incoming>) -> Response<Body> {
    if req.method() != Method::POST {
        return ctx.out.error(&ApiError::method_not_allowed());
    }
    let path = req.uri().path().to_string();
    let body = match Limited::new(req.into_body(), MAX_REVIEW_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return ctx.out.error(&ApiError::bad_request("request body too large")),
    };
    let r =
        if path == TOKEN_REVIEW_PATH { auth.token_review(&body) } else { auth.subject_access_review(&body) };
    match r {
        Ok(bytes) => match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(v) => ctx.out.json(201, &v),
            Err(e) => ctx.out.error(&ApiError::internal(e.to_string())),
        },
        Err(msg) => ctx.out.error(&ApiError::bad_request(msg)),
    }
}
