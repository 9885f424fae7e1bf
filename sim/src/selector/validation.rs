//! Name validation with apimachinery's wording (`util/validation/validation.go` and
//! `util/validation/field/errors.go`) for what the sim validates itself (DNS-1123 names, prefixed paths in
//! impersonation), and the `field.Error` / aggregate message formats. Label keys and values are validated
//! by the selector parser of `kache_k8s`.
//!
//! The regular expressions are checked by hand (no regex crate in the sim); the expressions themselves are
//! quoted verbatim in the messages because clients see them.

// === messages (apimachinery constants) ===

/// `dns1123SubdomainFmt`.
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
/// `dns1123SubdomainErrorMsg`.
const DNS1123_SUBDOMAIN_ERR_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// Maximum length of a DNS-1123 subdomain (`DNS1123SubdomainMaxLength`).
pub(crate) const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;

/// `MaxLenError`. Kubernetes ≤ 1.35 says "characters"; the newer `validate/content` package says "bytes".
/// We follow the released apiservers our clients talk to.
fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// `RegexError`: note the double space before each " or ", which is how apimachinery prints it.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(example);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(fmt);
    out.push_str("')");
    out
}

// === character classes ===

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
fn matches_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => ok(first) && ok(last) && b.iter().all(|&c| ok(c) || c == b'-'),
        _ => false,
    }
}

/// `^<dns1123 label>(\.<dns1123 label>)*$`
pub(crate) fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns1123_label)
}

// === validators (each returns the list of problems, empty when valid) ===

/// `IsDNS1123Subdomain`.
pub(crate) fn dns1123_subdomain_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns1123_subdomain(value) {
        errs.push(regex_error(DNS1123_SUBDOMAIN_ERR_MSG, DNS1123_SUBDOMAIN_FMT, &["example.com"]));
    }
    errs
}

/// `IsDNS1123Label`: at most 63 characters of `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
pub(crate) fn is_dns1123_label(value: &str) -> bool {
    value.len() <= 63 && matches_dns1123_label(value)
}

/// `httpPathFmt`, printed in messages.
const HTTP_PATH_FMT: &str = "[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+";

/// `IsDomainPrefixedPath` at `path`: `<DNS-1123 subdomain>/<http path>`; the `field.Error` messages.
pub(crate) fn domain_prefixed_path_errors(path: &str, value: &str) -> Vec<String> {
    if value.is_empty() {
        return vec![format!("{path}: Required value")];
    }
    let Some((host, rest)) = value.split_once('/').filter(|(h, r)| !h.is_empty() && !r.is_empty()) else {
        return vec![field_invalid(path, value, "must be a domain-prefixed path (such as \"acme.io/foo\")")];
    };
    let mut errs: Vec<String> =
        dns1123_subdomain_errors(host).iter().map(|e| field_invalid(path, host, e)).collect();
    let path_char = |c: char| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c);
    if !rest.chars().all(path_char) {
        errs.push(field_invalid(path, rest, &regex_error("Invalid path", HTTP_PATH_FMT, &[])));
    }
    errs
}

// === field.Error formatting ===

/// `field.Invalid(path, value, detail).Error()` for a string value: `<path>: Invalid value: "<value>": <detail>`.
/// A nil path prints as `<nil>`, which is what the label parser's key validation shows.
pub(crate) fn field_invalid(path: &str, value: &str, detail: &str) -> String {
    format!("{path}: Invalid value: {}: {detail}", go_quote(value))
}

/// `utilerrors.NewAggregate(...).Error()` after `ErrorList.ToAggregate()`: duplicates dropped, a single
/// message printed bare, several as `[a, b]`.
pub(crate) fn aggregate(messages: &[String]) -> Option<String> {
    let mut unique: Vec<&str> = Vec::with_capacity(messages.len());
    for m in messages {
        if !unique.contains(&m.as_str()) {
            unique.push(m);
        }
    }
    match unique.as_slice() {
        [] => None,
        [one] => Some((*one).to_string()),
        many => Some(format!("[{}]", many.join(", "))),
    }
}

pub(crate) use kache_k8s::json::go_quote;
