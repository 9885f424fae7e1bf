//! Timestamped writes: the writer patches a few small pods with the annotation `loadtest/sent-at` (nanos
//! since the epoch, read just before the request is sent); a watcher takes the latency of delivery from the
//! event line without decoding it.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hdrhistogram::Histogram;
use tokio::sync::Mutex;
use tokio::task::JoinSet;

use crate::http::{self, Client, HttpError};
use crate::results::{histogram, record};

/// The annotation carrying the send time.
pub const SENT_AT: &str = "loadtest/sent-at";
/// How the annotation appears in a compact JSON event line.
const SENT_AT_NEEDLE: &[u8] = b"\"loadtest/sent-at\":\"";
/// Pods the writer cycles through (a few, so each write is an update of a small object).
pub const WRITER_PODS: usize = 10;
/// Namespace of the writer's pods (the sim's workload always seeds `ns-0`).
pub const WRITER_NAMESPACE: &str = "ns-0";

/// Nanoseconds since the Unix epoch.
pub fn now_nanos() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// The send time carried by an event line, if it has one.
pub fn parse_sent_at(line: &[u8]) -> Option<u128> {
    let start = memchr::memmem::find(line, SENT_AT_NEEDLE)? + SENT_AT_NEEDLE.len();
    let digits = &line[start..];
    let end = digits.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

/// The send time carried by a protobuf watch frame, if it has one: the annotation is a map entry of the
/// object's `ObjectMeta`, its key (field 1) then its value (field 2, tag `0x12`, a one-byte length for the
/// digits of a nanosecond time).
pub fn parse_sent_at_proto(frame: &[u8]) -> Option<u128> {
    let key = SENT_AT.as_bytes();
    let start = memchr::memmem::find(frame, key)? + key.len();
    let (&tag, rest) = frame[start..].split_first()?;
    let (&len, rest) = rest.split_first()?;
    if tag != 0x12 || len >= 0x80 {
        return None;
    }
    let digits = rest.get(..usize::from(len))?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Delivery latency of a protobuf watch frame received now.
pub fn latency_of_proto(frame: &[u8]) -> Option<Duration> {
    latency_since(parse_sent_at_proto(frame)?)
}

fn latency_since(sent: u128) -> Option<Duration> {
    let nanos = now_nanos().saturating_sub(sent);
    Some(Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)))
}

/// Delivery latency of an event line received now.
pub fn latency_of(line: &[u8]) -> Option<Duration> {
    let sent = parse_sent_at(line)?;
    let nanos = now_nanos().saturating_sub(sent);
    Some(Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)))
}

pub fn pod_name(i: usize) -> String {
    format!("lt-w-{i}")
}

/// A minimal valid pod.
fn pod(name: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{WRITER_NAMESPACE}","labels":{{"app":"loadtest"}}}},"spec":{{"containers":[{{"name":"c","image":"busybox"}}]}}}}"#
    ))
}

/// Creates the writer's pods through `base` (already existing ones are fine).
pub async fn create_pods(client: &Client, base: &str) -> anyhow::Result<()> {
    for i in 0..WRITER_PODS {
        let url = format!("{base}/api/v1/namespaces/{WRITER_NAMESPACE}/pods");
        let send = http::Send {
            content_type: Some("application/json"),
            body: pod(&pod_name(i)),
            ..Default::default()
        };
        match http::request(client, http::Method::POST, &url, &send).await {
            Ok(_) => {}
            Err(HttpError::Status { status, .. }) if status == http::StatusCode::CONFLICT => {}
            Err(e) => return Err(anyhow::anyhow!("creating {}: {e}", pod_name(i))),
        }
    }
    Ok(())
}

/// One timestamped write to pod `i`.
pub async fn write(client: &Client, base: &str, i: usize) -> Result<Duration, HttpError> {
    let url = format!("{base}/api/v1/namespaces/{WRITER_NAMESPACE}/pods/{}", pod_name(i % WRITER_PODS));
    let body = Bytes::from(format!(r#"{{"metadata":{{"annotations":{{"{SENT_AT}":"{}"}}}}}}"#, now_nanos()));
    let send = http::Send { content_type: Some("application/merge-patch+json"), body, ..Default::default() };
    http::request(client, http::Method::PATCH, &url, &send).await.map(|f| f.elapsed)
}

/// What a writer run did.
pub struct WriterStats {
    pub ok: u64,
    pub errors: Vec<String>,
    pub latency: Histogram<u64>,
}

/// Writes at `rate` per second for `duration` (open loop: a slow write does not delay the next).
pub async fn run(client: &Client, base: &str, rate: f64, duration: Duration) -> WriterStats {
    let n = (rate * duration.as_secs_f64()).round().max(0.0) as usize;
    let interval = Duration::from_secs_f64(1.0 / rate.max(0.001));
    let hist = Arc::new(Mutex::new(histogram()));
    let start = tokio::time::Instant::now();
    let mut set = JoinSet::new();
    for i in 0..n {
        tokio::time::sleep_until(start + interval.mul_f64(i as f64)).await;
        let (client, base, hist) = (client.clone(), base.to_string(), hist.clone());
        set.spawn(async move {
            let r = write(&client, &base, i).await;
            if let Ok(d) = &r {
                record(&mut *hist.lock().await, *d);
            }
            r.map_err(|e| e.to_string())
        });
    }
    let results = set.join_all().await;
    let ok = results.iter().filter(|r| r.is_ok()).count() as u64;
    let errors = results.into_iter().filter_map(Result::err).collect();
    let latency = hist.lock().await.clone();
    WriterStats { ok, errors, latency }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_send_time_from_an_event_line() {
        let line = br#"{"type":"MODIFIED","object":{"metadata":{"annotations":{"loadtest/sent-at":"1234567"},"name":"x"}}}"#;
        assert_eq!(parse_sent_at(line), Some(1_234_567));
        assert_eq!(parse_sent_at(br#"{"type":"BOOKMARK"}"#), None);
        assert_eq!(parse_sent_at(br#""loadtest/sent-at":"12"#), None);
    }

    #[test]
    fn latency_is_never_negative() {
        let future = format!(r#""loadtest/sent-at":"{}""#, now_nanos() + 10_000_000_000);
        assert_eq!(latency_of(future.as_bytes()), Some(Duration::ZERO));
    }

    #[test]
    fn pods_are_json() {
        let v: serde_json::Value = serde_json::from_slice(&pod("lt-w-3")).expect("json");
        assert_eq!(v["metadata"]["name"], "lt-w-3");
    }
}
