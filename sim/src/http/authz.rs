//! Authentication, impersonation and authorization of API requests (when the sim runs with an
//! [`AuthConfig`]), and the TokenReview / SubjectAccessReview endpoints. Errors are worded as the apiserver
//! words them.

use http::{Method, Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use serde_json::Value;

use crate::auth::impersonation::{self, Action, ImpersonationError};
use crate::auth::{Attributes, AuthConfig, UserInfo, forbidden_non_resource_status, forbidden_status};
use crate::http::response::Body;
use crate::http::{Ctx, Route, Target};
use crate::options::Query;
use crate::status::ApiError;

/// Group and path of the TokenReview API.
pub const TOKEN_REVIEW_PATH: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
/// Group and path of the SubjectAccessReview API.
pub const SUBJECT_ACCESS_REVIEW_PATH: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
/// Path of the SelfSubjectReview API (`kubectl auth whoami`): who the (possibly impersonated) requester is.
pub const SELF_SUBJECT_REVIEW_PATH: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
/// Path of the SelfSubjectAccessReview API (`kubectl auth can-i`).
pub const SELF_SUBJECT_ACCESS_REVIEW_PATH: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
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

/// Authenticates, applies impersonation (removing its headers) and authorizes a request, as the apiserver's
/// filter chain orders them; `Ok` is the user the request runs as, `Err` the 400/401/403 to answer.
pub fn check(
    ctx: &Ctx,
    auth: &AuthConfig,
    req: &mut Request<Incoming>,
    q: &Query,
    route: &Route,
) -> Result<UserInfo, ApiError> {
    // A header that is not visible ASCII cannot hold a known token: 401, never anonymous.
    let header = match req.headers().get(http::header::AUTHORIZATION) {
        Some(v) => Some(v.to_str().map_err(|_| ApiError::unauthorized())?),
        None => None,
    };
    let requester = auth.authenticate(header).ok_or_else(ApiError::unauthorized)?;
    let action = action(ctx, req, q, route);
    let user = match impersonation::parse_headers(req.headers()).map_err(impersonation_error)? {
        None => requester,
        Some(wanted) => {
            let user = auth.impersonate(&requester, &wanted, &action).map_err(impersonation_error)?;
            impersonation::strip_headers(req.headers_mut());
            user
        }
    };
    if auth.authorize_action(&user, &action) {
        return Ok(user);
    }
    Err(match &action {
        Action::Resource(a) => status_error(&forbidden_status(&user, a)),
        Action::NonResource { verb, path } => status_error(&forbidden_non_resource_status(&user, verb, path)),
    })
}

/// What the authorizer is asked about a request (`RequestInfo`): a resource request for routed resources
/// and the review APIs, else a non-resource request with the lower-cased method as verb.
fn action(ctx: &Ctx, req: &Request<Incoming>, q: &Query, route: &Route) -> Action {
    let path = req.uri().path();
    let review = |group: &str, resource: &str| {
        Action::Resource(Attributes {
            verb: "create".into(),
            group: group.into(),
            resource: resource.into(),
            ..Attributes::default()
        })
    };
    if path == TOKEN_REVIEW_PATH {
        return review("authentication.k8s.io", "tokenreviews");
    }
    if path == SUBJECT_ACCESS_REVIEW_PATH {
        return review("authorization.k8s.io", "subjectaccessreviews");
    }
    if path == SELF_SUBJECT_REVIEW_PATH {
        return review("authentication.k8s.io", "selfsubjectreviews");
    }
    match route {
        Route::Resource(t) => {
            let res = ctx.state.store.resource(t.id);
            Action::Resource(Attributes {
                verb: verb(req.method(), t, q).to_string(),
                group: res.group.clone(),
                resource: res.plural.clone(),
                subresource: t.sub.clone().unwrap_or_default(),
                namespace: t.ns.clone().unwrap_or_default(),
                name: t.name.clone().unwrap_or_default(),
            })
        }
        _ => Action::NonResource { verb: req.method().as_str().to_ascii_lowercase(), path: path.to_string() },
    }
}

fn impersonation_error(e: ImpersonationError) -> ApiError {
    match e {
        ImpersonationError::BadRequest(m) => ApiError::bad_request(m),
        ImpersonationError::Forbidden(status) => status_error(&status),
        ImpersonationError::Internal(m) => ApiError::internal_bare(m),
    }
}

/// A 403 Status built by `kache_sim::auth`'s helpers, as an [`ApiError`] (message and details carried over).
fn status_error(status: &Value) -> ApiError {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let d = &status["details"];
    ApiError::forbidden(s(&status["message"]), &s(&d["name"]), &s(&d["group"]), &s(&d["kind"]))
}

/// Whether `path` is one of the review APIs [`review`] serves.
pub fn is_review(path: &str) -> bool {
    [TOKEN_REVIEW_PATH, SUBJECT_ACCESS_REVIEW_PATH, SELF_SUBJECT_REVIEW_PATH].contains(&path)
}

/// Serves TokenReview, SubjectAccessReview and SelfSubjectReview creates; `user` is who is asking (after
/// impersonation), which a SelfSubjectReview reports.
pub async fn review(ctx: &Ctx, auth: &AuthConfig, user: &UserInfo, req: Request<Incoming>) -> Response<Body> {
    if req.method() != Method::POST {
        return ctx.out.error(&ApiError::method_not_allowed());
    }
    let path = req.uri().path().to_string();
    let body = match Limited::new(req.into_body(), MAX_REVIEW_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return ctx.out.error(&ApiError::bad_request("request body too large")),
    };
    if path == SELF_SUBJECT_REVIEW_PATH {
        // The body carries nothing the answer depends on; it is not decoded.
        let out = serde_json::json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
                                     "metadata": {"creationTimestamp": null}, "status": {"userInfo": user.to_json()}});
        return ctx.out.json(201, &out);
    }
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

/// A SelfSubjectAccessReview (`kubectl auth can-i`) on a sim without authorization: every request is
/// allowed, as by an apiserver with `--authorization-mode=AlwaysAllow`, and the reason says so. The spec is
/// echoed back when it is JSON.
pub async fn allow_all_review(ctx: &Ctx, req: Request<Incoming>) -> Response<Body> {
    if req.method() != Method::POST {
        return ctx.out.error(&ApiError::method_not_allowed());
    }
    let body = match Limited::new(req.into_body(), MAX_REVIEW_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return ctx.out.error(&ApiError::bad_request("request body too large")),
    };
    let spec = serde_json::from_slice::<Value>(&body).map(|v| v["spec"].clone()).unwrap_or(Value::Null);
    let out = serde_json::json!({
        "kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": if spec.is_object() { spec } else { serde_json::json!({}) },
        "status": {"allowed": true,
                   "reason": "this simulated cluster (kache-sim) runs without authorization: every request is allowed"}
    });
    ctx.out.json(201, &out)
}
