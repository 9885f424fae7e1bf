//! TokenReview and SubjectAccessReview against the upstream: request bodies out, decisions in.

use std::collections::BTreeMap;

use http::{Method, Request, header};
use serde::Deserialize;
use serde_json::json;

use super::{Attributes, Identity};
use crate::front::body;
use crate::upstream::{Upstream, read_body};

pub(super) const TOKEN_REVIEW_PATH: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
pub(super) const SUBJECT_ACCESS_REVIEW_PATH: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
/// Review responses are small objects; anything larger is not a review.
const MAX_REVIEW_RESPONSE: usize = 1 << 20;

/// A review could not be obtained (never cached: the next request asks again).
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("sending the {kind} upstream failed: {reason}")]
    Upstream { kind: &'static str, reason: String },
    #[error("the upstream answered the {kind} with HTTP {status}")]
    Status { kind: &'static str, status: u16 },
    #[error("the upstream's {kind} response is not a review: {reason}")]
    Decode { kind: &'static str, reason: String },
}

/// The user a TokenReview authenticated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Reviewed {
    pub user: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
    pub audiences: Vec<String>,
}

#[derive(Deserialize)]
struct TokenReviewResponse {
    #[serde(default)]
    status: TokenReviewStatus,
}

#[derive(Deserialize, Default)]
struct TokenReviewStatus {
    #[serde(default)]
    authenticated: bool,
    #[serde(default)]
    user: ReviewUser,
    #[serde(default)]
    audiences: Vec<String>,
}

#[derive(Deserialize, Default)]
struct ReviewUser {
    #[serde(default)]
    username: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    extra: BTreeMap<String, Vec<String>>,
}

#[derive(Deserialize)]
struct AccessReviewResponse {
    #[serde(default)]
    status: AccessReviewStatus,
}

/// A SubjectAccessReview decision.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub(super) struct AccessReviewStatus {
    #[serde(default)]
    pub allowed: bool,
    #[serde(default)]
    pub reason: String,
}

/// POSTs a review and decodes its response.
async fn post<T: for<'de> Deserialize<'de>>(
    upstream: &Upstream,
    kind: &'static str,
    path: &'static str,
    body: Vec<u8>,
) -> Result<T, ReviewError> {
    let req = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json")
        .body(body::full(body))
        .expect("static request parts are valid");
    let resp = upstream.send(req).await.map_err(|e| ReviewError::Upstream { kind, reason: e.to_string() })?;
    let status = resp.status();
    let body = resp.into_body();
    let bytes = read_body(
        http_body_util::BodyExt::boxed(http_body_util::BodyExt::map_err(body, |e| {
            Box::new(e) as crate::front::body::BoxError
        })),
        MAX_REVIEW_RESPONSE,
    )
    .await
    .map_err(|e| ReviewError::Upstream { kind, reason: e.to_string() })?;
    if !status.is_success() {
        return Err(ReviewError::Status { kind, status: status.as_u16() });
    }
    serde_json::from_slice(&bytes).map_err(|e| ReviewError::Decode { kind, reason: e.to_string() })
}

/// `None` when the token is not authenticated (for the requested audiences, if any).
pub(super) async fn token_review(
    upstream: &Upstream,
    token: &str,
    audiences: &[String],
) -> Result<Option<Reviewed>, ReviewError> {
    let mut spec = json!({ "token": token });
    if !audiences.is_empty() {
        spec["audiences"] = json!(audiences);
    }
    let body = json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec });
    let resp: TokenReviewResponse =
        post(upstream, "TokenReview", TOKEN_REVIEW_PATH, body.to_string().into_bytes()).await?;
    Ok(decide_token(resp.status, audiences))
}

/// The webhook token authenticator's rule: authenticated, and when audiences were requested, at least one
/// of them confirmed.
fn decide_token(status: TokenReviewStatus, audiences: &[String]) -> Option<Reviewed> {
    if !status.authenticated || status.user.username.is_empty() {
        return None;
    }
    if !audiences.is_empty() && !status.audiences.iter().any(|a| audiences.contains(a)) {
        return None;
    }
    Some(Reviewed {
        user: status.user.username,
        uid: status.user.uid,
        groups: status.user.groups,
        extra: status.user.extra,
        audiences: status.audiences,
    })
}

/// The SubjectAccessReview body for `id` doing `attrs`.
pub(super) fn access_review_body(id: &Identity, attrs: &Attributes) -> Vec<u8> {
    let mut spec = json!({
        "resourceAttributes": {
            "namespace": attrs.namespace,
            "verb": attrs.verb,
            "group": attrs.group,
            "version": attrs.version,
            "resource": attrs.resource,
            "subresource": attrs.subresource,
            "name": attrs.name,
        },
        "user": id.user,
        "groups": id.groups,
    });
    if !id.uid.is_empty() {
        spec["uid"] = json!(id.uid);
    }
    if !id.extra.is_empty() {
        spec["extra"] = json!(id.extra);
    }
    json!({ "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec })
        .to_string()
        .into_bytes()
}

pub(super) async fn subject_access_review(
    upstream: &Upstream,
    id: &Identity,
    attrs: &Attributes,
) -> Result<AccessReviewStatus, ReviewError> {
    let resp: AccessReviewResponse =
        post(upstream, "SubjectAccessReview", SUBJECT_ACCESS_REVIEW_PATH, access_review_body(id, attrs))
            .await?;
    Ok(resp.status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(v: serde_json::Value) -> TokenReviewStatus {
        serde_json::from_value::<TokenReviewResponse>(json!({ "status": v })).expect("decodes").status
    }

    #[test]
    fn token_decisions() {
        let ok = json!({"authenticated": true, "user": {"username": "alice", "groups": ["g"]}, "audiences": ["a"]});
        let r = decide_token(status(ok.clone()), &[]).expect("authenticated");
        assert_eq!((r.user.as_str(), r.groups.as_slice()), ("alice", &["g".to_string()][..]));
        assert!(decide_token(status(ok.clone()), &["a".into()]).is_some());
        assert!(decide_token(status(ok), &["b".into()]).is_none(), "audience not confirmed");
        assert!(decide_token(status(json!({"authenticated": false})), &[]).is_none());
        assert!(decide_token(status(json!({"authenticated": true})), &[]).is_none(), "no username");
        assert!(decide_token(status(json!({})), &[]).is_none());
    }

    #[test]
    fn access_review_body_names_the_exact_request() {
        let id = Identity::bearer("alice", "u1", vec!["g1".into()], BTreeMap::new());
        let attrs = Attributes {
            verb: "list".into(),
            group: "apps".into(),
            version: "v1".into(),
            resource: "deployments".into(),
            subresource: String::new(),
            namespace: "ns".into(),
            name: String::new(),
        };
        let v: serde_json::Value = serde_json::from_slice(&access_review_body(&id, &attrs)).expect("json");
        assert_eq!(v["kind"], "SubjectAccessReview");
        assert_eq!(v["spec"]["user"], "alice");
        assert_eq!(v["spec"]["uid"], "u1");
        assert_eq!(v["spec"]["groups"], json!(["g1"]));
        assert_eq!(v["spec"]["resourceAttributes"]["verb"], "list");
        assert_eq!(v["spec"]["resourceAttributes"]["namespace"], "ns");
        assert_eq!(v["spec"]["resourceAttributes"]["group"], "apps");
        assert!(v["spec"].get("extra").is_none());
    }
}
