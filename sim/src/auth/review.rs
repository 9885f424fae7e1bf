//! The TokenReview (`authentication.k8s.io`) and SubjectAccessReview (`authorization.k8s.io`) APIs over the
//! sim's static tokens and rules, answering with the request's spec echoed and a status, like the
//! apiserver's `tokenreview` and `subjectaccessreview` REST storages.

use serde_json::{Value, json};

use super::{Attributes, AuthConfig, UserInfo, review_response};

const AUTHENTICATION_VERSIONS: [&str; 2] = ["authentication.k8s.io/v1", "authentication.k8s.io/v1beta1"];
const AUTHORIZATION_VERSIONS: [&str; 2] = ["authorization.k8s.io/v1", "authorization.k8s.io/v1beta1"];

/// A review request the apiserver refuses, with the code it answers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    /// 400 BadRequest: an undecodable body, a TokenReview without a token.
    #[error("{0}")]
    BadRequest(String),
    /// 422 Invalid: the spec fails validation. `causes` are `(field, message without the field)`.
    #[error("{message}")]
    Invalid { message: String, causes: Vec<(String, String)> },
}

impl ReviewError {
    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            ReviewError::BadRequest(_) => 400,
            ReviewError::Invalid { .. } => 422,
        }
    }

    /// The Status body the apiserver sends (for a SubjectAccessReview when Invalid).
    pub fn status(&self) -> Value {
        let mut status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": self.to_string()});
        match self {
            ReviewError::BadRequest(_) => status["reason"] = json!("BadRequest"),
            ReviewError::Invalid { causes, .. } => {
                status["reason"] = json!("Invalid");
                let causes: Vec<Value> = causes
                    .iter()
                    .map(|(field, message)| json!({"reason": "FieldValueInvalid", "message": message, "field": field}))
                    .collect();
                status["details"] =
                    json!({"group": "authorization.k8s.io", "kind": "SubjectAccessReview", "causes": causes});
            }
        }
        status["code"] = json!(self.code());
        status
    }
}

fn decode(kind: &str, body: &[u8]) -> Result<Value, ReviewError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ReviewError::BadRequest(format!("couldn't decode {kind}: json parse error: {e}")))?;
    if !value.is_object() {
        return Err(ReviewError::BadRequest(format!("couldn't decode {kind}: not a JSON object")));
    }
    Ok(value)
}

/// The request's apiVersion when it is one the apiserver serves for this API, else the preferred one.
fn api_version<'a>(req: &'a Value, served: &[&'static str; 2]) -> &'a str {
    match req["apiVersion"].as_str() {
        Some(v) if served.contains(&v) => v,
        _ => served[0],
    }
}

fn string_list(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect()).unwrap_or_default()
}

/// `tokenreview.REST.Create`: the audiences to check are the requested ones or else the API audiences; a
/// static token is audience-agnostic, so it authenticates for the intersection with the API audiences, and
/// not at all when that intersection is empty.
pub(super) fn token_review(cfg: &AuthConfig, body: &[u8]) -> Result<Vec<u8>, ReviewError> {
    let req = decode("TokenReview", body)?;
    let spec = req.get("spec").cloned().unwrap_or_else(|| json!({}));
    let token = spec["token"].as_str().unwrap_or("");
    if token.is_empty() {
        return Err(ReviewError::BadRequest(
            "token is required for TokenReview in authentication".to_string(),
        ));
    }
    let requested = string_list(&spec["audiences"]);
    let targets = if requested.is_empty() { cfg.api_audiences.clone() } else { requested };
    let audiences: Vec<&String> = cfg.api_audiences.iter().filter(|a| targets.contains(a)).collect();
    let status = match cfg.lookup_token(token) {
        Some(user) if targets.is_empty() || !audiences.is_empty() => {
            let mut status = json!({"authenticated": true, "user": user.to_json()});
            if !audiences.is_empty() {
                status["audiences"] = json!(audiences);
            }
            status
        }
        _ => json!({"user": {}}),
    };
    review_response("TokenReview", api_version(&req, &AUTHENTICATION_VERSIONS), &spec, status)
        .map_err(ReviewError::BadRequest)
}

/// `subjectaccessreview.REST.Create`: validation (422 `... is invalid: ...` messages), then the rules.
pub(super) fn subject_access_review(cfg: &AuthConfig, body: &[u8]) -> Result<Vec<u8>, ReviewError> {
    let req = decode("SubjectAccessReview", body)?;
    let spec = req.get("spec").cloned().unwrap_or_else(|| json!({}));
    let resource = spec.get("resourceAttributes").filter(|v| v.is_object());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| v.is_object());
    let name = spec["user"].as_str().unwrap_or("").to_string();
    // v1 calls the list "groups", v1beta1 "group".
    let mut groups = string_list(&spec["groups"]);
    if groups.is_empty() {
        groups = string_list(&spec["group"]);
    }

    // (field, ErrorBody) pairs, as `field.Error` splits them.
    let mut errs: Vec<(String, String)> = Vec::new();
    match (resource, non_resource) {
        (Some(_), Some(nra)) => errs.push((
            "spec.nonResourceAttributes".into(),
            format!("Invalid value: {nra}: cannot be specified in combination with resourceAttributes"),
        )),
        (None, None) => errs.push((
            "spec.resourceAttributes".into(),
            "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified"
                .into(),
        )),
        _ => {}
    }
    if name.is_empty() && groups.is_empty() {
        errs.push((
            "spec.user".into(),
            "Invalid value: \"\": at least one of user or group must be specified".into(),
        ));
    }
    if !errs.is_empty() {
        // `NewInvalid`: `<Kind>.<group> "<name>" is invalid: <aggregate>`, one error bare, several as [a, b].
        let full: Vec<String> = errs.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        let aggregate = if full.len() == 1 { full[0].clone() } else { format!("[{}]", full.join(", ")) };
        return Err(ReviewError::Invalid {
            message: format!("SubjectAccessReview.authorization.k8s.io \"\" is invalid: {aggregate}"),
            causes: errs,
        });
    }

    // `spec.extra` is map[string][]string, `spec.uid` a string; both are kept on the user (RBAC matches
    // neither, but they are part of who is asking).
    let extra = spec["extra"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), string_list(v))).collect())
        .unwrap_or_default();
    let user = UserInfo { name, groups, uid: spec["uid"].as_str().unwrap_or("").to_string(), extra };
    let s = |v: &Value, k: &str| v[k].as_str().unwrap_or("").to_string();
    let reason = match (resource, non_resource) {
        (Some(ra), _) => {
            let attrs = Attributes {
                verb: s(ra, "verb"),
                group: s(ra, "group"),
                resource: s(ra, "resource"),
                subresource: s(ra, "subresource"),
                namespace: s(ra, "namespace"),
                name: s(ra, "name"),
            };
            cfg.allowing_rule(&user, |r| r.allows_resource(&attrs))
        }
        (None, Some(nra)) => {
            let (verb, path) = (s(nra, "verb"), s(nra, "path"));
            cfg.allowing_rule(&user, |r| r.allows_non_resource(&verb, &path))
        }
        (None, None) => None,
    };
    let status = match reason {
        Some(reason) if reason.is_empty() => json!({"allowed": true}),
        Some(reason) => json!({"allowed": true, "reason": reason}),
        None => json!({"allowed": false}),
    };
    review_response("SubjectAccessReview", api_version(&req, &AUTHORIZATION_VERSIONS), &spec, status)
        .map_err(ReviewError::BadRequest)
}
