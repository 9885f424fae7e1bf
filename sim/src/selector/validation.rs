//! Name and value validation with apimachinery's wording (`util/validation/validation.go` and
//! `util/validation/field/errors.go`): qualified names (label keys), label values, DNS-1123 subdomains,
//! and the `field.Error` / aggregate message formats built on top of them.
//!
//! The regular expressions are checked by hand (no regex crate in the sim); the expressions themselves are
//! quoted verbatim in the messages because clients see them.

// === messages (apimachinery constants) ===

/// `qualifiedNameFmt`, printed in messages.
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
/// `qualifiedNameErrMsg`.
const QUALIFIED_NAME_ERR_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
/// `labelValueFmt`.
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
/// `labelValueErrMsg`.
const LABEL_VALUE_ERR_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
/// `dns1123SubdomainFmt`.
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
/// `dns1123SubdomainErrorMsg`.
const DNS1123_SUBDOMAIN_ERR_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// Maximum length of the name part of a qualified name (`qualifiedNameMaxLength`).
pub(crate) const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
/// Maximum length of a label value (`LabelValueMaxLength`).
pub(crate) const LABEL_VALUE_MAX_LENGTH: usize = 63;
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

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`
fn matches_qualified_name(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            is_alnum(first)
                && is_alnum(last)
                && b.iter().all(|&c| is_alnum(c) || c == b'-' || c == b'_' || c == b'.')
        }
        _ => false,
    }
}

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

/// `IsQualifiedName`: an optional DNS subdomain prefix and `/`, then a name of at most 63 characters.
pub(crate) fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(dns1123_subdomain_errors(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(format!("name part {}", max_len_error(QUALIFIED_NAME_MAX_LENGTH)));
    }
    if !matches_qualified_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(QUALIFIED_NAME_ERR_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
        ));
    }
    errs
}

/// `IsValidLabelValue`.
pub(crate) fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !value.is_empty() && !matches_qualified_name(value) {
        errs.push(regex_error(LABEL_VALUE_ERR_MSG, LABEL_VALUE_FMT, &["MyValue", "my_value", "12345"]));
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

/// Go's `%q` / `strconv.Quote` for the characters that can reach it: `"` and `\` escaped, the usual
/// short escapes, other control characters as `\xHH` (ASCII) or `\uHHHH`, printable text as is.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
