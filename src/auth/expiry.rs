//! How long a token review may stay cached, given the token's own `exp` claim.
//!
//! A service-account or OIDC token is a JWT that states when it expires. kache reads that claim **without
//! verifying the token**: the claim can only shorten how long a review the upstream already gave is kept,
//! never lengthen it or authenticate anything (a token whose claims were altered fails its review), so an
//! unverified read is safe here. Without it, a token reviewed just before its expiry would keep reading
//! through kache for a whole `--auth-token-ttl` after the apiserver stopped accepting it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// How long a review of a token at or past its `exp` is kept: the apiserver's own token cache TTL
/// (`TokenSuccessCacheTTL`, 10 s), as long as the apiserver itself may keep accepting such a token. Shorter
/// would cost one review per request while the upstream's validator still accepts the token within its
/// clock-skew leeway; the answer kache gives is the review's either way.
pub(super) const PAST_EXPIRY_TTL: Duration = Duration::from_secs(10);

/// The TTL of a review that authenticated `token`: `ttl`, but not past the token's `exp` (when it is a JWT
/// stating one) by more than [`PAST_EXPIRY_TTL`].
pub(super) fn review_ttl(token: &str, ttl: Duration, now: SystemTime) -> Duration {
    match remaining_lifetime(token, now) {
        Some(left) => ttl.min(left.max(PAST_EXPIRY_TTL)),
        None => ttl,
    }
}

/// The time until `token`'s `exp` claim (zero once past), if `token` is a JWT (`header.claims.signature`,
/// base64url) whose claims are a JSON object with a numeric `exp` (seconds since the epoch).
fn remaining_lifetime(token: &str, now: SystemTime) -> Option<Duration> {
    let mut parts = token.split('.');
    let (_header, claims, _signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let claims = URL_SAFE_NO_PAD.decode(claims.trim_end_matches('=')).ok()?;
    let claims: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&claims).ok()?;
    let exp = claims.get("exp")?.as_f64()?;
    let now = now.duration_since(UNIX_EPOCH).ok()?.as_secs_f64();
    Duration::try_from_secs_f64((exp - now).max(0.0)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(120);

    fn jwt(claims: &str) -> String {
        format!("eyJhbGciOiJSUzI1NiJ9.{}.c2lnbmF0dXJl", URL_SAFE_NO_PAD.encode(claims))
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_review_is_kept_no_longer_than_the_token_lives() {
        let now = at(1_000_000);
        let token = jwt(r#"{"exp":1000030,"sub":"system:serviceaccount:a:b"}"#);
        assert_eq!(review_ttl(&token, TTL, now), Duration::from_secs(30));
        assert_eq!(review_ttl(&jwt(r#"{"exp":1003600}"#), TTL, now), TTL, "the flag's TTL when shorter");
        assert_eq!(review_ttl(&jwt(r#"{"exp":1000030.5}"#), TTL, now), Duration::from_secs_f64(30.5));
    }

    #[test]
    fn a_token_at_or_past_its_expiry_is_kept_as_the_apiserver_keeps_it() {
        let now = at(1_000_000);
        for exp in ["1000000", "1000005", "999000", "0", "-5"] {
            let token = jwt(&format!(r#"{{"exp":{exp}}}"#));
            assert_eq!(review_ttl(&token, TTL, now), PAST_EXPIRY_TTL, "exp {exp}");
        }
        assert_eq!(
            review_ttl(&jwt(r#"{"exp":999000}"#), Duration::from_secs(2), now),
            Duration::from_secs(2)
        );
        assert_eq!(
            review_ttl(&jwt(r#"{"exp":999000}"#), Duration::ZERO, now),
            Duration::ZERO,
            "0s: no cache"
        );
    }

    #[test]
    fn tokens_without_a_readable_expiry_keep_the_flags_ttl() {
        let now = at(1_000_000);
        for token in [
            "0123456789abcdef0123456789abcdef".to_owned(),
            "a.b".to_owned(),
            "a.b.c.d".to_owned(),
            "eyJ.!!!.sig".to_owned(),
            jwt("not json"),
            jwt("[1,2]"),
            jwt(r#"{"sub":"x"}"#),
            jwt(r#"{"exp":"1000030"}"#),
            jwt(r#"{"exp":1e300}"#),
        ] {
            assert_eq!(review_ttl(&token, TTL, now), TTL, "{token}");
        }
        // Padded base64url, as some issuers write it.
        let padded = format!("h.{}=.s", URL_SAFE_NO_PAD.encode(r#"{"exp":1000030}"#));
        assert_eq!(review_ttl(&padded, TTL, now), Duration::from_secs(30));
    }
}
