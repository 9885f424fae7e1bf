//! The front's limits: what each bounds, its default and the apiserver counterpart.

use std::time::Duration;

/// Largest request head (request line + headers) accepted; the apiserver's Go server uses
/// `http.DefaultMaxHeaderBytes` (1 MiB).
pub(crate) const DEFAULT_MAX_HEADER_BYTES: usize = 1 << 20;
/// Longest request target (path + query) accepted. Go has no separate bound (the URL counts toward the
/// header bytes); a separate, smaller one gives a clearer error for runaway selectors. It is also the most
/// kache can accept: hyper parses no longer URI (64 KiB − 2 bytes).
pub(crate) const DEFAULT_MAX_URL_BYTES: usize = super::parse_error::HYPER_MAX_URI_LEN;
/// Largest request body; the apiserver's `MaxRequestBodyBytes` (3 MiB).
pub(crate) const DEFAULT_MAX_BODY_BYTES: u64 = 3 << 20;
/// Time a client has to send a complete request head (slow loris); the apiserver's `ReadHeaderTimeout`.
pub(crate) const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(32);
/// Time an open connection may carry no request before it is closed; the apiserver's `IdleTimeout`.
pub(crate) const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Deadline for a non-long-running request to produce its response; the apiserver's `--request-timeout`.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Concurrent forwarded non-long-running requests; the apiserver's `--max-requests-inflight` (400).
pub(crate) const DEFAULT_MAX_IN_FLIGHT: usize = 400;
/// Uncompressed bytes of lists served from memory that may be in flight at once (see `serve::admit`): about
/// five full lists of 100k pods (~400 MB each); more are asked to come back after `Retry-After`. 0 disables
/// the budget.
pub const DEFAULT_MAX_READ_BYTES_IN_FLIGHT: usize = 2 << 30;
/// Bytes of whole-list bodies kept for resending (`serve::bodycache`): a 10k-pod cluster's full pod list is
/// ~35 MiB in JSON and ~20 MiB in protobuf, so both encodings of one such list fit, with the metadata views.
pub const DEFAULT_LIST_BODY_CACHE_BYTES: usize = 96 << 20;

/// Heavy bodies admitted at once per heavy-body producer (see `serve::admit`): every admitted heavy body takes
/// its turn at the producers, so this bounds how long one waits for its next batch.
pub const HEAVY_BODIES_PER_PRODUCER: usize = 8;

/// Heavy-body batches running at once (`serve::admit::produce`): half the cores (at least one), so heavy
/// bodies never take every core from the requests behind them.
pub(crate) fn heavy_body_producers() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)))
}

/// Default for `--max-heavy-bodies-inflight`: [`HEAVY_BODIES_PER_PRODUCER`] per producer.
pub(crate) fn default_max_heavy_bodies() -> usize {
    HEAVY_BODIES_PER_PRODUCER * heavy_body_producers()
}
/// Open client connections; accepting pauses at the bound.
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Concurrent HTTP/2 streams per client connection (watches are streams); kube-apiserver's default for
/// `--http2-max-streams-per-connection` is 1000.
pub(crate) const DEFAULT_H2_MAX_STREAMS: u32 = 1000;
/// How long shutdown waits for in-flight requests after watches were ended, before closing the rest.
pub(crate) const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// `--max-url-bytes`: a number of bytes no larger than what the HTTP parser accepts.
fn parse_max_url_bytes(value: &str) -> Result<usize, String> {
    let n: usize = value.parse().map_err(|e| format!("not a number of bytes: {e}"))?;
    if n > DEFAULT_MAX_URL_BYTES {
        return Err(format!("at most {DEFAULT_MAX_URL_BYTES} (the longest URI the HTTP parser accepts)"));
    }
    Ok(n)
}

/// The front's limits. `Default` gives the documented defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_header_bytes: usize,
    pub max_url_bytes: usize,
    pub max_body_bytes: u64,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub request_timeout: Duration,
    /// Concurrent forwarded requests (the forwarder enforces it with 429).
    pub max_in_flight: usize,
    /// Bytes of memory-served lists in flight (the handler enforces it with 429); 0 is unlimited.
    pub max_read_bytes_in_flight: usize,
    /// Pretty-printed or gzipped list bodies in flight at once (the handler enforces it with 429); 0 is
    /// unlimited.
    pub max_heavy_bodies_in_flight: usize,
    /// Bytes of whole-list bodies kept for resending the same snapshot's list; 0 keeps none.
    pub list_body_cache_bytes: usize,
    pub max_connections: usize,
    pub h2_max_streams: u32,
    pub shutdown_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            max_url_bytes: DEFAULT_MAX_URL_BYTES,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_read_bytes_in_flight: DEFAULT_MAX_READ_BYTES_IN_FLIGHT,
            max_heavy_bodies_in_flight: default_max_heavy_bodies(),
            list_body_cache_bytes: DEFAULT_LIST_BODY_CACHE_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            h2_max_streams: DEFAULT_H2_MAX_STREAMS,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
        }
    }
}

/// Command-line flags for [`Limits`]; flatten into the `serve` command with `#[command(flatten)]`.
#[derive(Clone, Debug, clap::Args)]
pub struct LimitFlags {
    /// Largest request head (request line and headers) in bytes; larger gets 431.
    #[arg(long, default_value_t = DEFAULT_MAX_HEADER_BYTES)]
    pub max_header_bytes: usize,
    /// Longest request URL (path and query) in bytes, at most 65534; longer gets 414.
    #[arg(long, default_value_t = DEFAULT_MAX_URL_BYTES, value_parser = parse_max_url_bytes)]
    pub max_url_bytes: usize,
    /// Largest request body in bytes; larger gets 413.
    #[arg(long, default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_request_body_bytes: u64,
    /// Time allowed to send a request head, e.g. `32s`.
    #[arg(long, default_value = "32s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// Idle connections are closed after this long, e.g. `90s`.
    #[arg(long, default_value = "90s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Deadline for non-long-running requests (watches, exec, logs excepted), e.g. `60s`; 504 after.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// Concurrent forwarded requests (watches and other long-running requests excepted); 429 above.
    #[arg(long, default_value_t = DEFAULT_MAX_IN_FLIGHT)]
    pub max_requests_inflight: usize,
    /// Uncompressed bytes of lists served from memory in flight at once (0: unlimited); a list that would
    /// exceed it while others are in flight gets 429 with Retry-After.
    #[arg(long, default_value_t = DEFAULT_MAX_READ_BYTES_IN_FLIGHT)]
    pub max_read_bytes_inflight: usize,
    /// Pretty-printed or gzipped list bodies served from memory in flight at once (0: unlimited; default 8
    /// per heavy-body producer, half the cores); one more gets 429 with Retry-After. Bounds how long an
    /// admitted body waits for its turn at the producers.
    #[arg(long, default_value_t = default_max_heavy_bodies())]
    pub max_heavy_bodies_inflight: usize,
    /// Bytes of whole-list bodies (no selector, no limit, not pretty, not gzipped) kept as sent, to resend
    /// the same snapshot's list without assembling it again (0: none kept). Least recently used first.
    #[arg(long, default_value_t = DEFAULT_LIST_BODY_CACHE_BYTES)]
    pub list_body_cache_bytes: usize,
    /// Open client connections; accepting pauses at the bound.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Concurrent HTTP/2 streams per client connection.
    #[arg(long, default_value_t = DEFAULT_H2_MAX_STREAMS)]
    pub http2_max_streams_per_connection: u32,
    /// How long shutdown waits for in-flight requests, e.g. `30s`.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,
}

impl From<LimitFlags> for Limits {
    fn from(f: LimitFlags) -> Self {
        Self {
            max_header_bytes: f.max_header_bytes,
            max_url_bytes: f.max_url_bytes,
            max_body_bytes: f.max_request_body_bytes,
            header_read_timeout: f.header_read_timeout,
            idle_timeout: f.idle_timeout,
            request_timeout: f.request_timeout,
            max_in_flight: f.max_requests_inflight,
            max_read_bytes_in_flight: f.max_read_bytes_inflight,
            max_heavy_bodies_in_flight: f.max_heavy_bodies_inflight,
            list_body_cache_bytes: f.list_body_cache_bytes,
            max_connections: f.max_connections,
            h2_max_streams: f.http2_max_streams_per_connection,
            shutdown_timeout: f.shutdown_timeout,
        }
    }
}

/// Parses `1500ms`, `30s`, `5m`, `1h`, `1m30s` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("invalid duration {s:?}: expected a number"));
        }
        let n: u64 = rest[..digits].parse().map_err(|e| format!("invalid duration {s:?}: {e}"))?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            unit => return Err(format!("invalid duration {s:?}: unknown unit {unit:?} (ms, s, m, h)")),
        };
        total = total.saturating_add(part);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        for bad in ["", "s", "10x", "1.5s", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn flags_default_to_the_documented_defaults() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cmd {
            #[command(flatten)]
            limits: LimitFlags,
        }
        let parsed: Limits = Cmd::parse_from(["kache"]).limits.into();
        assert_eq!(parsed, Limits::default());
        let parsed: Limits =
            Cmd::parse_from(["kache", "--request-timeout", "5s", "--max-requests-inflight", "3"])
                .limits
                .into();
        assert_eq!(parsed.request_timeout, Duration::from_secs(5));
        assert_eq!(parsed.max_in_flight, 3);
    }
}
