//! Ages: `duration.HumanDuration` of the time since an RFC 3339 timestamp (the AGE of every printer and of
//! custom resources' `date` columns), and timestamps as Go's `time.RFC3339` layout prints them. An age is
//! the only part of a row that moves with the clock, so a row keeps the timestamp and the age is rendered
//! when a response is written.

use std::time::{SystemTime, UNIX_EPOCH};

/// Go's zero `time.Time` (0001-01-01T00:00:00Z) as milliseconds since the Unix epoch.
pub const GO_ZERO_MS: i64 = -62_135_596_800_000;

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Days since 1970-01-01 of a Gregorian calendar date (Howard Hinnant's algorithm).
fn epoch_days(year: i64, month: i64, day: i64) -> i64 {
    let y = year - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
}

/// `time.Parse(time.RFC3339, s)` in milliseconds since the epoch (sub-millisecond digits dropped).
pub fn parse(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let digits = |from: usize, n: usize| -> Option<i64> {
        let part = b.get(from..from + n)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0i64, |a, d| a * 10 + i64::from(d - b'0')))
    };
    let sep = |at: usize, c: &[u8]| b.get(at).is_some_and(|x| c.contains(x));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hour, min, sec) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 59 {
        return None;
    }
    let mut at = 19;
    let mut millis = 0;
    if b.get(at) == Some(&b'.') {
        let start = at + 1;
        at = start;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            if at - start < 3 {
                millis = millis * 10 + i64::from(b[at] - b'0');
            }
            at += 1;
        }
        if at == start {
            return None;
        }
        for _ in (at - start)..3 {
            millis *= 10;
        }
    }
    let offset_secs = match b.get(at)? {
        b'Z' | b'z' if at + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if at + 6 == b.len() && b[at + 3] == b':' => {
            let off = digits(at + 1, 2)? * 3600 + digits(at + 4, 2)? * 60;
            if *sign == b'-' { -off } else { off }
        }
        _ => return None,
    };
    let secs = epoch_days(year, month, day) * 86_400 + hour * 3600 + min * 60 + sec - offset_secs;
    Some(secs * 1000 + millis)
}

/// `duration.HumanDuration`.
pub fn human(elapsed_ms: i64) -> String {
    let secs = elapsed_ms / 1000;
    if secs < -1 {
        return "<invalid>".to_owned();
    }
    if secs < 0 {
        return "0s".to_owned();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let mins = elapsed_ms / 60_000;
    let hours = elapsed_ms / 3_600_000;
    let days = hours / 24;
    let with = |big: i64, unit: &str, small: i64, small_unit: &str| {
        if small == 0 { format!("{big}{unit}") } else { format!("{big}{unit}{small}{small_unit}") }
    };
    match () {
        _ if mins < 10 => with(mins, "m", secs % 60, "s"),
        _ if mins < 180 => format!("{mins}m"),
        _ if hours < 8 => with(hours, "h", mins % 60, "m"),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 24 * 8 => with(days, "d", hours % 24, "h"),
        _ if hours < 24 * 365 * 2 => format!("{days}d"),
        _ if hours < 24 * 365 * 8 => with(days / 365, "y", days % 365, "d"),
        _ => format!("{}y", days / 365),
    }
}

/// `translateTimestampSince`: `<unknown>` for an unset or zero timestamp.
pub fn since(at: Option<i64>, now: i64) -> String {
    match at {
        Some(t) if t != GO_ZERO_MS => human(now - t),
        _ => "<unknown>".to_owned(),
    }
}

/// `Time.UTC().Format(time.RFC3339)` of milliseconds since the epoch: whole seconds, in UTC.
pub fn format_rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        let cases = [
            (-2_000, "<invalid>"),
            (-999, "0s"),
            (119_999, "119s"),
            (120_000, "2m"),
            (125_000, "2m5s"),
            (600_000, "10m"),
            (3 * 3_600_000, "3h"),
            (3 * 3_600_000 + 120_000, "3h2m"),
            (47 * 3_600_000, "47h"),
            (49 * 3_600_000, "2d1h"),
            (9 * 86_400_000, "9d"),
            (800 * 86_400_000, "2y70d"),
            (4000 * 86_400_000, "10y"),
        ];
        for (ms, want) in cases {
            assert_eq!(human(ms), want, "{ms}");
        }
    }

    #[test]
    fn parses_rfc3339() {
        assert_eq!(parse("1970-01-01T00:00:01Z"), Some(1000));
        assert_eq!(parse("1970-01-01T01:00:01+01:00"), Some(1000));
        assert_eq!(parse("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(parse("0001-01-01T00:00:00Z"), Some(GO_ZERO_MS));
        assert_eq!(parse("2026-11-26T12:57:50Z"), Some(1_795_697_870_000));
        assert_eq!(parse("nope"), None);
    }

    #[test]
    fn formats_go_rfc3339() {
        assert_eq!(format_rfc3339(GO_ZERO_MS), "0001-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(1_795_697_870_999), "2026-11-26T12:57:50Z");
        assert_eq!(parse("2026-11-26T12:57:50.123456Z"), Some(1_795_697_870_123));
        assert_eq!(parse("2026-11-26T13:57:50+01:00"), Some(1_795_697_870_000));
    }
}
