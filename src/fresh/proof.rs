//! Proving a quiet resource fresh with what the apiserver offers clients: a short watch from the store's
//! resourceVersion that allows bookmarks.
//!
//! After a consistent read (the probe) the apiserver's watch cache is at least at the probed revision
//! (it requested etcd progress while the read waited). A watch that allows bookmarks gets one shortly before
//! its deadline (deadline − 2 s, on the cacher's 1–1.25 s tick) carrying the cache's revision, and a
//! bookmark is only sent after every earlier event of the watch. So a watch from `from` whose *first* frame
//! is a BOOKMARK at `upto` proves the resource has no event in `(from, upto]`. An event, an ERROR (410: the
//! revision is too old) or the end of the stream first proves nothing.
//!
//! Bookmarks that follow each other with no event between prove as much: the proof reads on until one
//! reaches the revision it wants (the upstream's known revision when it started) and keeps the highest. An
//! upstream kache passes its store's progress on as bookmarks at once, so behind a kache the first bookmark
//! may carry a revision it proved just before the reader's probe, and the next one the revision wanted.

use std::time::Duration;

use bytes::BytesMut;
use http::StatusCode;
use http_body_util::BodyExt;

use crate::upstream::Upstream;

/// The proof watch's `timeoutSeconds`: its pre-deadline bookmark comes after ~1–2 s (1.9 s
/// measured on a 1.36 apiserver for a 3 s watch opened right after a consistent read).
pub(crate) const PROOF_WATCH_SECONDS: u64 = 3;
/// A proof watch that has not decided by then has failed (the stream should have ended at 3 s).
pub(crate) const PROOF_TIMEOUT: Duration = Duration::from_secs(5);
/// A proof reads only bookmarks; a frame longer than this is an event.
const MAX_FRAME: usize = 1 << 20;

/// Watches `collection` (the resource's list path, narrowed by `selection`, a filtered mirror's selector
/// query) from `from`; `Ok(Some(upto))` when the stream starts with
/// bookmarks, the last read at `upto` (reading stops at the first at `want` or beyond, at any other frame
/// and at the end of the stream); `Ok(None)` when something else came first or the stream ended.
pub(super) async fn quiet_until(
    upstream: &Upstream,
    collection: &str,
    selection: Option<&str>,
    from: u64,
    want: u64,
) -> Result<Option<u64>, String> {
    let mut path = format!(
        "{collection}?watch=1&allowWatchBookmarks=true&resourceVersion={from}&timeoutSeconds={PROOF_WATCH_SECONDS}"
    );
    if let Some(selection) = selection.filter(|s| !s.is_empty()) {
        path.push('&');
        path.push_str(selection);
    }
    let req = super::probe::json_get(&path)?;
    let resp = upstream.send(req).await.map_err(|e| e.to_string())?;
    if resp.status() != StatusCode::OK {
        return Err(format!("proof watch answered {}", resp.status()));
    }
    let mut body = resp.into_body();
    let mut buf = BytesMut::new();
    let mut run = Bookmarks { upto: None, want };
    loop {
        if let Some(pos) = memchr::memchr(b'\n', &buf) {
            let line = buf.split_to(pos + 1);
            if run.decided(&line) {
                return Ok(run.upto);
            }
            continue;
        }
        if buf.len() > MAX_FRAME {
            return Ok(run.upto);
        }
        match body.frame().await {
            None => return Ok(run.upto),
            Some(Err(_)) if run.upto.is_some() => return Ok(run.upto),
            Some(Err(e)) => return Err(format!("proof watch: {e}")),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                }
            }
        }
    }
}

/// The leading run of bookmarks of a proof watch.
struct Bookmarks {
    /// The highest bookmark so far.
    upto: Option<u64>,
    /// Reading stops at a bookmark this high.
    want: u64,
}

impl Bookmarks {
    /// Takes the next line; true when the proof is decided (`upto` is its outcome).
    fn decided(&mut self, line: &[u8]) -> bool {
        if line.iter().all(u8::is_ascii_whitespace) {
            return false;
        }
        match bookmark_rv(line) {
            Some(rv) => {
                self.upto = Some(self.upto.map_or(rv, |u| u.max(rv)));
                rv >= self.want
            }
            None => true,
        }
    }
}

/// The resourceVersion of a BOOKMARK frame; `None` for any other frame.
fn bookmark_rv(line: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(rename = "resourceVersion")]
        resource_version: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Object {
        metadata: Option<Meta>,
    }
    #[derive(serde::Deserialize)]
    struct Event {
        #[serde(rename = "type")]
        kind: String,
        object: Option<Object>,
    }
    let event: Event = serde_json::from_slice(line).ok()?;
    if event.kind != "BOOKMARK" {
        return None;
    }
    event.object?.metadata?.resource_version?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bookmark_proves() {
        let bookmark = br#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"42"},"spec":{"containers":null},"status":{}}}"#;
        assert_eq!(bookmark_rv(bookmark), Some(42));
        let added = br#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"43"}}}"#;
        assert_eq!(bookmark_rv(added), None);
        let error = br#"{"type":"ERROR","object":{"kind":"Status","code":410}}"#;
        assert_eq!(bookmark_rv(error), None);
        assert_eq!(bookmark_rv(b"not json"), None);
    }

    fn bookmark(rv: u64) -> String {
        format!(r#"{{"type":"BOOKMARK","object":{{"kind":"Pod","metadata":{{"resourceVersion":"{rv}"}}}}}}"#)
    }

    #[test]
    fn a_run_of_bookmarks_proves_up_to_its_highest_until_one_reaches_the_wanted_revision() {
        // Bookmarks below the wanted revision (an upstream kache passing on its progress) are read on.
        let mut run = Bookmarks { upto: None, want: 50 };
        assert!(!run.decided(bookmark(40).as_bytes()));
        assert!(!run.decided(b"\n"));
        assert!(run.decided(bookmark(55).as_bytes()));
        assert_eq!(run.upto, Some(55));
        // An event ends the run: what came before it still holds.
        let mut run = Bookmarks { upto: None, want: 50 };
        assert!(!run.decided(bookmark(40).as_bytes()));
        assert!(run.decided(br#"{"type":"ADDED","object":{"metadata":{"resourceVersion":"45"}}}"#));
        assert_eq!(run.upto, Some(40));
        // An event first proves nothing.
        let mut run = Bookmarks { upto: None, want: 50 };
        assert!(run.decided(br#"{"type":"ERROR","object":{"kind":"Status","code":410}}"#));
        assert_eq!(run.upto, None);
    }
}
