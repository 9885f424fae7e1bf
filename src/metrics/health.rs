//! Health endpoints exactly as the apiserver answers them (`k8s.io/apiserver/pkg/server/healthz`):
//!
//! - `/readyz` → `200 ok`; with `?verbose` one `[+]name ok` line per check then `readyz check passed`.
//! - On failure always verbose, `500`: `[-]name failed: reason withheld` lines then `readyz check failed`.
//! - `?exclude=name` (repeatable) skips a check (`[+]name excluded: ok`); unknown names add a `warn:` line.
//! - `/readyz/<check>` runs one check: `ok`, or `500 internal server error: <reason>`.

/// One health check's outcome: its name and `Err(reason)` when failing.
pub type CheckResult = (String, Result<(), String>);

/// An answer of a health endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthResponse {
    pub status: u16,
    pub body: String,
}

/// The always-passing liveness check every endpoint starts with.
pub(crate) const PING: &str = "ping";

/// Evaluates `checks` for the endpoint `name` (`healthz`, `livez`, `readyz`) with the request's raw query.
pub fn root(name: &str, checks: &[CheckResult], query: Option<&str>) -> HealthResponse {
    let params = parse_query(query.unwrap_or(""));
    let mut excluded: Vec<String> =
        params.iter().filter(|(k, _)| k == "exclude").map(|(_, v)| v.clone()).collect();
    let verbose = params.iter().any(|(k, _)| k == "verbose");
    let mut out = String::new();
    let mut failed = Vec::new();
    for (check, result) in checks {
        if let Some(i) = excluded.iter().position(|e| e == check) {
            excluded.swap_remove(i);
            out.push_str(&format!("[+]{check} excluded: ok\n"));
            continue;
        }
        match result {
            Ok(()) => out.push_str(&format!("[+]{check} ok\n")),
            Err(reason) => {
                // The endpoint is public: the reason goes to the log only.
                out.push_str(&format!("[-]{check} failed: reason withheld\n"));
                tracing::debug!(endpoint = name, check = %check, %reason, "health check failed");
                failed.push(check.as_str());
            }
        }
    }
    if !excluded.is_empty() {
        excluded.sort();
        excluded.dedup();
        let quoted: Vec<String> = excluded.iter().map(|e| format!("{e:?}")).collect();
        out.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            quoted.join(",")
        ));
    }
    if !failed.is_empty() {
        // Go's http.Error appends a newline.
        out.push_str(&format!("{name} check failed\n"));
        return HealthResponse { status: 500, body: out };
    }
    if !verbose {
        return HealthResponse { status: 200, body: "ok".to_owned() };
    }
    out.push_str(&format!("{name} check passed\n"));
    HealthResponse { status: 200, body: out }
}

/// Runs one named check (`/readyz/<check>`); `None` when there is no such check.
pub fn single(checks: &[CheckResult], check: &str) -> Option<HealthResponse> {
    let (_, result) = checks.iter().find(|(name, _)| name == check)?;
    Some(match result {
        Ok(()) => HealthResponse { status: 200, body: "ok".to_owned() },
        Err(reason) => HealthResponse { status: 500, body: format!("internal server error: {reason}\n") },
    })
}

/// `a&b=c&b=d` → `[(a, ""), (b, c), (b, d)]`, percent-decoded like Go's `url.ParseQuery`.
fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// Percent- and `+`-decoding; malformed escapes are kept literally (never an error on input).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match (bytes.get(i + 1).and_then(|&b| hex(b)), bytes.get(i + 2).and_then(|&b| hex(b))) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn checks(ok: bool) -> Vec<CheckResult> {
        vec![
            (PING.to_owned(), Ok(())),
            ("informer-sync-pods".to_owned(), if ok { Ok(()) } else { Err("listing".to_owned()) }),
        ]
    }

    #[test]
    fn passing_is_a_bare_ok() {
        assert_eq!(root("readyz", &checks(true), None), HealthResponse { status: 200, body: "ok".into() });
    }

    #[test]
    fn verbose_lists_every_check() {
        let r = root("readyz", &checks(true), Some("verbose"));
        assert_eq!(r.status, 200);
        assert_eq!(r.body, "[+]ping ok\n[+]informer-sync-pods ok\nreadyz check passed\n");
        let r = root("livez", &checks(true), Some("verbose=true"));
        assert!(r.body.ends_with("livez check passed\n"), "{}", r.body);
    }

    #[test]
    fn failure_is_always_verbose_and_withholds_the_reason() {
        let r = root("readyz", &checks(false), None);
        assert_eq!(r.status, 500);
        assert_eq!(
            r.body,
            "[+]ping ok\n[-]informer-sync-pods failed: reason withheld\nreadyz check failed\n"
        );
        assert!(!r.body.contains("listing"));
    }

    #[test]
    fn excluded_checks_pass_and_unknown_exclusions_warn() {
        let r = root("readyz", &checks(false), Some("exclude=informer-sync-pods&exclude=nope&verbose"));
        assert_eq!(r.status, 200);
        assert_eq!(
            r.body,
            "[+]ping ok\n[+]informer-sync-pods excluded: ok\n\
             warn: some health checks cannot be excluded: no matches for \"nope\"\nreadyz check passed\n"
        );
    }

    #[test]
    fn single_checks_show_their_reason() {
        assert_eq!(single(&checks(true), "ping"), Some(HealthResponse { status: 200, body: "ok".into() }));
        let r = single(&checks(false), "informer-sync-pods").expect("exists");
        assert_eq!(r, HealthResponse { status: 500, body: "internal server error: listing\n".into() });
        assert_eq!(single(&checks(true), "etcd"), None);
    }

    #[test]
    fn queries_decode_like_go() {
        assert_eq!(
            parse_query("exclude=a%2Db&verbose"),
            [("exclude".into(), "a-b".into()), ("verbose".into(), String::new())]
        );
        assert_eq!(decode("a+b%zz%4"), "a b%zz%4");
    }

    proptest! {
        #[test]
        fn any_query_is_answered(query in ".{0,64}") {
            let r = root("readyz", &checks(true), Some(&query));
            prop_assert!(r.status == 200);
        }
    }
}
