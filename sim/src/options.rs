//! Query parsing and ListOptions validation, in the apiserver's order (staging/src/k8s.io/apiserver/pkg/
//! endpoints/handlers/get.go: ListResource; apimachinery's internalversion SetListOptionsDefaults and
//! validation.ValidateListOptions):
//! decoding (400), watch defaulting, ListOptions validation (422), field-label conversion (400), then
//! storage validation of continue/resourceVersion (400).

use std::collections::HashMap;

use crate::kinds::ResourceDef;
use crate::selector::{self, FieldSelector, LabelSelector};
use crate::status::{ApiError, forbidden_cause, unsupported_cause};
use crate::store::Obj;
use crate::token::{self, Continue};

/// Decoded query parameters (first value wins, like `url.Values.Get`).
#[derive(Debug, Default, Clone)]
pub struct Query {
    params: HashMap<String, Vec<String>>,
}

// === impl Query ===

impl Query {
    /// Parses a raw query string like Go's `url.ParseQuery` (`+` is a space; bad escapes are kept).
    pub fn parse(raw: Option<&str>) -> Query {
        let mut params: HashMap<String, Vec<String>> = HashMap::new();
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            params.entry(unescape(k)).or_default().push(unescape(v));
        }
        Query { params }
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.params.get(k).and_then(|v| v.first()).map(String::as_str)
    }

    pub fn has(&self, k: &str) -> bool {
        self.params.contains_key(k)
    }

    /// A boolean as apimachinery converts query strings: absent, "0" or "false" (any case) is false.
    pub fn flag(&self, k: &str) -> bool {
        self.get(k).is_some_and(go_query_bool)
    }
}

fn go_query_bool(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

/// Percent-decoding with `+` as space; invalid escapes are left as they are.
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex =
                    std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(x) => {
                        out.push(x);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `strconv.ParseInt(v, 10, 64)` with Go's error text.
fn parse_i64(v: &str) -> Result<i64, ApiError> {
    v.parse::<i64>().map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => "value out of range",
            _ => "invalid syntax",
        };
        ApiError::bad_request(format!("strconv.ParseInt: parsing {v:?}: {why}"))
    })
}

/// `strconv.ParseUint(v, 10, 64)` text used in resourceVersion errors.
pub fn parse_rv(v: &str) -> Result<u64, String> {
    if v.starts_with('+') {
        return Err(format!("strconv.ParseUint: parsing {v:?}: invalid syntax"));
    }
    v.parse::<u64>().map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow => "value out of range",
            _ => "invalid syntax",
        };
        format!("strconv.ParseUint: parsing {v:?}: {why}")
    })
}

/// The resourceVersion a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rv {
    /// Unset or "".
    Unset,
    /// "0": any freshness.
    Zero,
    /// A positive revision.
    At(u64),
}

/// resourceVersionMatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rvm {
    Unset,
    Exact,
    NotOlderThan,
}

/// Validated options of a list or watch.
#[derive(Debug, Clone)]
pub struct ListOptions {
    pub watch: bool,
    pub rv: Rv,
    pub rvm: Rvm,
    pub limit: i64,
    pub cont: Option<Continue>,
    pub labels: Option<LabelSelector>,
    pub fields: Option<FieldSelector>,
    pub send_initial_events: Option<bool>,
    pub allow_bookmarks: bool,
    pub timeout_seconds: Option<i64>,
}

impl ListOptions {
    /// Parses and validates a list or watch request for `res`. `watch` is true for `?watch=` or a
    /// `/watch/` path.
    pub fn from_query(q: &Query, res: &ResourceDef, watch: bool) -> Result<ListOptions, ApiError> {
        // 1. Decoding: numbers and selectors (400).
        let limit = q.get("limit").filter(|v| !v.is_empty()).map(parse_i64).transpose()?.unwrap_or(0);
        let timeout_seconds = q.get("timeoutSeconds").filter(|v| !v.is_empty()).map(parse_i64).transpose()?;
        let labels = match q.get("labelSelector").filter(|s| !s.is_empty()) {
            Some(s) => Some(LabelSelector::parse(s).map_err(ApiError::bad_request)?),
            None => None,
        };
        let raw_fields = match q.get("fieldSelector").filter(|s| !s.is_empty()) {
            Some(s) => Some(FieldSelector::parse(s).map_err(ApiError::bad_request)?),
            None => None,
        };
        let mut send_initial_events =
            if q.has("sendInitialEvents") { Some(q.flag("sendInitialEvents")) } else { None };
        let raw_rv = q.get("resourceVersion").unwrap_or("");
        let raw_rvm = q.get("resourceVersionMatch").unwrap_or("");
        let raw_cont = q.get("continue").unwrap_or("");

        // 2. Defaulting (WatchList on): legacy ""/"0" watches become watch-lists.
        let mut rvm_str = raw_rvm.to_string();
        if watch
            && send_initial_events.is_none()
            && rvm_str.is_empty()
            && (raw_rv.is_empty() || raw_rv == "0")
        {
            send_initial_events = Some(true);
            rvm_str = "NotOlderThan".to_string();
        }

        // 3. ListOptions validation (422).
        let mut causes = Vec::new();
        let rvm = match rvm_str.as_str() {
            "" => Rvm::Unset,
            "Exact" => Rvm::Exact,
            "NotOlderThan" => Rvm::NotOlderThan,
            _ => Rvm::Unset,
        };
        if watch {
            if send_initial_events.is_some() && rvm_str != "NotOlderThan" {
                causes.push(forbidden_cause(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if !rvm_str.is_empty() {
                if send_initial_events.is_none() {
                    causes.push(forbidden_cause(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    ));
                }
                if rvm_str != "NotOlderThan" {
                    causes.push(unsupported_cause("resourceVersionMatch", &rvm_str, &["NotOlderThan"]));
                }
                if !raw_cont.is_empty() {
                    causes.push(forbidden_cause(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
            }
        } else {
            if !rvm_str.is_empty() {
                if raw_rv.is_empty() {
                    causes.push(forbidden_cause(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ));
                }
                if !raw_cont.is_empty() {
                    causes.push(forbidden_cause(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
                match rvm_str.as_str() {
                    "Exact" if raw_rv == "0" => causes.push(forbidden_cause(
                        "resourceVersionMatch",
                        "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                    )),
                    "Exact" | "NotOlderThan" => {}
                    other => causes.push(unsupported_cause(
                        "resourceVersionMatch",
                        other,
                        &["Exact", "NotOlderThan", ""],
                    )),
                }
            }
            if q.has("sendInitialEvents") {
                causes.push(forbidden_cause("sendInitialEvents", "sendInitialEvents is forbidden for list"));
            }
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid_list_options(causes));
        }

        // 4. Field-label conversion (400).
        let fields = match raw_fields {
            Some(f) => Some(if res.builtin {
                selector::convert_fields(&res.group, &res.kind, &f).map_err(ApiError::bad_request)?
            } else {
                selector::convert_custom_fields(res.namespaced, &f).map_err(ApiError::bad_request)?
            }),
            None => None,
        };

        // 5. Storage validation (400): the continue token first, then the RV. Watches ignore continue.
        let mut cont = None;
        if !watch && !raw_cont.is_empty() {
            let c = token::decode(raw_cont)
                .map_err(|e| ApiError::bad_request(format!("invalid continue token: {e}")))?;
            if !raw_rv.is_empty() && raw_rv != "0" {
                return Err(ApiError::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
            cont = Some(c);
        }
        let rv = match raw_rv {
            "" => Rv::Unset,
            v => match parse_rv(v) {
                Ok(0) => Rv::Zero,
                Ok(n) => Rv::At(n),
                Err(e) => {
                    let msg = format!("resourceVersion: Invalid value: {v:?}: {e}");
                    return Err(if watch {
                        ApiError::internal_bare(msg)
                    } else {
                        ApiError::bad_request(format!("invalid resource version: {msg}"))
                    });
                }
            },
        };
        Ok(ListOptions {
            watch,
            rv,
            rvm,
            limit,
            cont,
            labels,
            fields,
            send_initial_events,
            allow_bookmarks: q.flag("allowWatchBookmarks"),
            timeout_seconds,
        })
    }

    /// Whether the object passes both selectors.
    pub fn matches(&self, obj: &Obj) -> bool {
        if let Some(l) = &self.labels
            && !l.is_empty()
            && !l.matches(&obj.labels)
        {
            return false;
        }
        self.fields.as_ref().is_none_or(|f| f.is_empty() || f.matches(&obj.fields))
    }

    /// True when no label or field selector restricts the result (remainingItemCount rule).
    pub fn predicate_empty(&self) -> bool {
        self.labels.as_ref().is_none_or(|l| l.is_empty()) && self.fields.as_ref().is_none_or(|f| f.is_empty())
    }

    /// The name an exact `metadata.name=` term pins, if any.
    pub fn pinned_name(&self) -> Option<&str> {
        self.fields.as_ref().and_then(|f| f.requires_exact_match("metadata.name"))
    }

    /// The namespace an exact `metadata.namespace=` term pins, if any.
    pub fn pinned_namespace(&self) -> Option<&str> {
        self.fields.as_ref().and_then(|f| f.requires_exact_match("metadata.namespace"))
    }
}

#[cfg(test)]
mod tests;
