//! Timestamps and `duration.HumanDuration` (k8s.io/apimachinery/pkg/util/duration), the AGE of every
//! printer and of custom resources' `date` columns. Computed when a response is written, never stored.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Parses RFC 3339 (`2024-01-02T03:04:05Z`, optional fraction, `Z` or `±hh:mm`) to milliseconds since
/// the epoch; None when it is not one (Go's `time.Parse(time.RFC3339, …)`).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let (secs, nanos) = crate::time::parse_rfc3339(s)?;
    Some(secs * 1000 + i64::from(nanos / 1_000_000))
}

/// `Time.UTC().Format(time.RFC3339)` of milliseconds since the epoch (seconds precision).
pub fn format_rfc3339(ms: i64) -> String {
    crate::time::format_rfc3339(ms.div_euclid(1000), None)
}

/// `duration.HumanDuration` of a span in milliseconds.
pub fn human_duration(d_ms: i64) -> String {
    let seconds = d_ms / 1000;
    if seconds < -1 {
        return "<invalid>".into();
    } else if seconds < 0 {
        return "0s".into();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = d_ms / 60_000;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = d_ms / 3_600_000;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    } else if hours < 48 {
        return format!("{hours}h");
    } else if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    } else if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// `translateTimestampSince`: the age of an RFC 3339 timestamp, `<unknown>` when unset or zero.
pub fn since(ts: Option<&str>, now_ms: i64) -> String {
    match ts.and_then(parse_rfc3339) {
        Some(t) if t != ZERO_TIME_MS => human_duration(now_ms - t),
        _ => "<unknown>".into(),
    }
}

/// Go's zero `time.Time` (0001-01-01T00:00:00Z) in milliseconds since the epoch.
pub const ZERO_TIME_MS: i64 = -62_135_596_800_000;
