//! Watch fan-out against any apiserver: `watchers` watches of one namespace opened directly and as many
//! through kache, at the same time, while one object of that namespace is patched `rate` times a second
//! (directly on the apiserver). Every patch carries a sequence number in an annotation; every watcher notes
//! when the event carrying it arrives. Latency = arrival − the patch's send time, so both targets are
//! measured against the same writes in the same run; kache's figure includes the upstream watch it relays.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt as _;
use tokio::sync::Barrier;
use tokio::task::JoinSet;

use super::Procs;
use super::setup::Target;
use crate::http::{self, Client};
use crate::results::{Latency, histogram, record};

/// The annotation that carries a patch's sequence number.
const KEY: &str = "loadtest/fanout";
/// Time allowed for the last events to arrive after the last patch.
const DRAIN: Duration = Duration::from_secs(5);

/// What one fan-out measured, per target (0: direct, 1: through kache).
pub struct FanOut {
    pub watchers: usize,
    pub writes: usize,
    pub latency: [Latency; 2],
    /// Events carrying a sequence number received, over all watchers.
    pub received: [u64; 2],
    /// Watches that failed to open or broke.
    pub failed: [u64; 2],
    pub cpu: Vec<(String, f64)>,
}

/// One object's collection path (namespaced), the object's name, and the parameters.
pub struct Spec<'a> {
    pub collection: &'a str,
    pub name: &'a str,
    pub watchers: usize,
    pub rate: f64,
    pub secs: f64,
}

pub async fn run(client: &Client, targets: [&Target; 2], spec: &Spec<'_>, procs: &Procs) -> FanOut {
    let writes = ((spec.rate * spec.secs).round() as usize).max(1);
    let sent: Arc<Vec<OnceLock<Instant>>> = Arc::new((0..writes).map(|_| OnceLock::new()).collect());
    // Sequence numbers unique to this run, so an older annotation in the initial state is not counted.
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let ready = Arc::new(Barrier::new(2 * spec.watchers + 1));
    let deadline = Arc::new(OnceLock::<Instant>::new());
    // A watcher that misses events stops at the latest here (the writer sets an earlier deadline when done).
    let give_up = Instant::now() + Duration::from_secs_f64(spec.secs) + Duration::from_secs(60);
    let mut set = JoinSet::new();
    for (ti, t) in targets.iter().enumerate() {
        let url = http::url(&t.base, spec.collection, "watch=1&resourceVersion=0&allowWatchBookmarks=true");
        for _ in 0..spec.watchers {
            let (client, url, sent, ready, deadline) =
                (client.clone(), url.clone(), sent.clone(), ready.clone(), deadline.clone());
            set.spawn(async move {
                let opened = http::open(&client, &url).await;
                ready.wait().await;
                let mut body = match opened {
                    Ok(resp) => resp.into_body(),
                    Err(_) => return (ti, Vec::new(), true),
                };
                let mut buf = BytesMut::new();
                let mut got = Vec::new();
                loop {
                    let end = deadline.get().copied().unwrap_or(give_up);
                    let frame = match tokio::time::timeout_at(end.into(), body.frame()).await {
                        Err(_) => return (ti, got, false),
                        Ok(None) | Ok(Some(Err(_))) => return (ti, got, deadline.get().is_none()),
                        Ok(Some(Ok(frame))) => frame,
                    };
                    let Ok(data) = frame.into_data() else { continue };
                    buf.extend_from_slice(&data);
                    let now = Instant::now();
                    http::drain_lines(&mut buf, |line| {
                        if let Some(k) = seq(line).and_then(|s| s.checked_sub(base))
                            && let Some(at) = sent.get(k as usize).and_then(OnceLock::get)
                        {
                            got.push(now.saturating_duration_since(*at));
                        }
                    });
                    if got.len() >= sent.len() {
                        return (ti, got, false);
                    }
                }
            });
        }
    }
    ready.wait().await;
    let cpu0 = procs.cpu();
    let start = Instant::now();
    let url = http::url(&targets[0].base, &format!("{}/{}", spec.collection, spec.name), "");
    for k in 0..writes {
        let at = start + Duration::from_secs_f64(k as f64 / spec.rate);
        tokio::time::sleep_until(at.into()).await;
        let body = format!(r#"{{"metadata":{{"annotations":{{"{KEY}":"{}"}}}}}}"#, base + k as u64);
        let send = http::Send {
            content_type: Some("application/merge-patch+json"),
            body: Bytes::from(body),
            bearer: targets[0].bearer.as_deref(),
            ..Default::default()
        };
        let _ = sent[k].set(Instant::now());
        let _ = http::request(client, http::Method::PATCH, &url, &send).await;
    }
    let _ = deadline.set(Instant::now() + DRAIN);
    let mut hists = [histogram(), histogram()];
    let (mut received, mut failed) = ([0u64; 2], [0u64; 2]);
    while let Some(done) = set.join_next().await {
        let Ok((ti, got, broke)) = done else { continue };
        received[ti] += got.len() as u64;
        failed[ti] += u64::from(broke);
        for d in got {
            record(&mut hists[ti], d);
        }
    }
    let cpu1 = procs.cpu();
    let cpu = cpu1.iter().map(|(n, v1)| (n.clone(), v1 - cpu0.get(n).copied().unwrap_or(*v1))).collect();
    FanOut {
        watchers: spec.watchers,
        writes,
        latency: [Latency::of(&hists[0]), Latency::of(&hists[1])],
        received,
        failed,
        cpu,
    }
}

/// The sequence number in a watch event's `loadtest/fanout` annotation.
fn seq(line: &[u8]) -> Option<u64> {
    let needle = format!("\"{KEY}\":\"");
    let at = memchr::memmem::find(line, needle.as_bytes())? + needle.len();
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&line[at..at + digits]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_sequence_number_of_an_event() {
        let line = br#"{"type":"MODIFIED","object":{"metadata":{"annotations":{"loadtest/fanout":"1234"}}}}"#;
        assert_eq!(seq(line), Some(1234));
        assert_eq!(seq(br#"{"type":"BOOKMARK","object":{}}"#), None);
    }
}
