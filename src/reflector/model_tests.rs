//! Model-based test: a reflector against a randomly faulty upstream that serves a known history.
//!
//! The upstream's truth is a random sequence of changes (one per resourceVersion). Every request is answered
//! from that truth, with a random fault plan applied to the first requests: HTTP errors, refused connections,
//! garbage and truncated frames, objects without metadata, ERROR events (410 and 500), compaction, streams that
//! stay open silently (stall detection) or end early. Invariants checked after every step:
//! - the store never holds anything but the truth at its own resourceVersion (never corrupt, never partial);
//! - once the faults run out, the store reaches the final state, byte for byte, in a bounded number of steps.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use proptest::prelude::*;

use super::config::ReflectorConfig;
use super::machine::{Reflector, State};
use super::status::StatusCell;
use super::tests::{bookmark, error_event, ev, pod, pod_item, pods_info, status_json};
use crate::front::body::{self, Body, BoxError};
use crate::store::Store;
use crate::upstream::{BoxFuture, Transport, UpstreamError};

const PAGE: usize = 3;

#[derive(Clone, Copy, Debug)]
enum Op {
    Put,
    Delete,
}

/// The upstream's history: change `i` has resourceVersion `i + 1`.
#[derive(Debug)]
struct Truth {
    changes: Vec<(String, Op)>,
}

impl Truth {
    fn last(&self) -> u64 {
        self.changes.len() as u64
    }

    /// key → (rv, bytes) at `rv`.
    fn state_at(&self, rv: u64) -> BTreeMap<String, (u64, Bytes)> {
        let mut state = BTreeMap::new();
        for (i, (name, op)) in self.changes.iter().enumerate().take(rv as usize) {
            let at = i as u64 + 1;
            match op {
                Op::Put => state.insert(format!("default/{name}"), (at, Bytes::from(pod(name, at)))),
                Op::Delete => state.remove(&format!("default/{name}")),
            };
        }
        state
    }

    /// Watch lines of every change in `(from, to]`.
    fn events(&self, from: u64, to: u64) -> Vec<String> {
        let mut live: BTreeMap<&str, bool> = BTreeMap::new();
        for (name, op) in self.changes.iter().take(from as usize) {
            live.insert(name, matches!(op, Op::Put));
        }
        let mut out = Vec::new();
        for (i, (name, op)) in self.changes.iter().enumerate().take(to as usize).skip(from as usize) {
            let at = i as u64 + 1;
            let existed = live.get(name.as_str()).copied().unwrap_or(false);
            let kind = match (op, existed) {
                (Op::Put, false) => "ADDED",
                (Op::Put, true) => "MODIFIED",
                (Op::Delete, _) => "DELETED",
            };
            live.insert(name, matches!(op, Op::Put));
            out.push(ev(kind, &pod(name, at)));
        }
        out
    }
}

/// One planned fault, applied to one request.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Clean,
    Status(u16),
    Refused,
    /// A garbage line after `n` events.
    Garbage(usize),
    /// A cut frame after `n` events, then the end.
    Truncate(usize),
    /// An object without metadata after `n` events (skipped; the stream goes on).
    BadObject(usize),
    /// An ERROR event after `n` events.
    ErrorEvent(usize, u16),
    /// History before the current head is gone: watches from older RVs get 410.
    Compact,
    /// The response stays open after its events (the stall detector must fire).
    StayOpen,
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        Just(Fault::Clean),
        prop::sample::select(vec![500u16, 503, 429, 410, 422]).prop_map(Fault::Status),
        Just(Fault::Refused),
        (0usize..4).prop_map(Fault::Garbage),
        (0usize..4).prop_map(Fault::Truncate),
        (0usize..4).prop_map(Fault::BadObject),
        ((0usize..4), prop::sample::select(vec![410u16, 500])).prop_map(|(n, c)| Fault::ErrorEvent(n, c)),
        Just(Fault::Compact),
        Just(Fault::StayOpen),
    ]
}

struct Upstream {
    truth: Truth,
    plan: Mutex<VecDeque<(Fault, u64)>>,
    /// The upstream's current resourceVersion; advances with each request, up to the truth's last.
    head: Mutex<u64>,
    /// Watches from below this RV are 410.
    floor: Mutex<u64>,
}

fn query<'a>(uri: &'a str, key: &str) -> Option<&'a str> {
    let q = uri.split_once('?')?.1;
    q.split('&').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

fn respond(code: u16, body: String) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(code).expect("valid"))
        .body(body::full(body))
        .expect("valid")
}

/// A 200 watch body of `lines`, then either the end or silence.
fn watch_body(mut lines: Vec<String>, tail: Option<String>, stay_open: bool) -> Response<Body> {
    let mut text = String::new();
    for l in lines.drain(..) {
        text.push_str(&l);
        text.push('\n');
    }
    if let Some(t) = tail {
        text.push_str(&t);
    }
    let head = futures_util::stream::iter([Ok::<_, BoxError>(Frame::data(Bytes::from(text)))]);
    let body: Body = if stay_open {
        BodyExt::boxed(StreamBody::new(head.chain(futures_util::stream::pending())))
    } else {
        BodyExt::boxed(StreamBody::new(head))
    };
    Response::new(body)
}

/// Inserts the fault's extra line after `n` events (or cuts the stream there).
fn inject(lines: &mut Vec<String>, fault: Fault) -> Option<String> {
    let at = |n: usize, lines: &Vec<String>| n.min(lines.len());
    match fault {
        Fault::Garbage(n) => lines.insert(at(n, lines), "{\"type\":\"ADDED\",\"object\":{\"kind\":".into()),
        Fault::BadObject(n) => {
            lines.insert(at(n, lines), ev("MODIFIED", r#"{"kind":"Pod","apiVersion":"v1"}"#))
        }
        Fault::ErrorEvent(n, code) => {
            let i = at(n, lines);
            lines.truncate(i);
            lines.push(error_event(code, if code == 410 { "Expired" } else { "InternalError" }));
        }
        Fault::Truncate(n) => {
            let i = at(n, lines);
            let cut =
                lines.get(i).map(|l| l[..l.len() / 2].to_owned()).unwrap_or_else(|| "{\"type\":".into());
            lines.truncate(i);
            return Some(cut);
        }
        _ => {}
    }
    None
}

impl Upstream {
    fn answer(&self, uri: &str) -> Result<Response<Body>, UpstreamError> {
        let (fault, advance) = self.plan.lock().unwrap().pop_front().unwrap_or((Fault::StayOpen, u64::MAX));
        let last = self.truth.last();
        let head = {
            let mut head = self.head.lock().unwrap();
            *head = head.saturating_add(advance).min(last);
            *head
        };
        match fault {
            Fault::Status(code) => return Ok(respond(code, status_json(code, "Scripted"))),
            Fault::Refused => {
                return Err(UpstreamError::Transport(Box::new(std::io::Error::from(
                    std::io::ErrorKind::ConnectionRefused,
                ))));
            }
            Fault::Compact => *self.floor.lock().unwrap() = head,
            _ => {}
        }
        let stay_open = matches!(fault, Fault::StayOpen);
        if uri.contains("sendInitialEvents=true") {
            let mut lines: Vec<String> =
                self.truth.state_at(head).keys().map(|k| self.truth_line(k, head)).collect();
            lines.push(bookmark(head, true));
            let tail = inject(&mut lines, fault);
            return Ok(watch_body(lines, tail, stay_open));
        }
        if let Some(rv) = query(uri, "resourceVersion") {
            let rv: u64 = rv.parse().expect("the reflector sends numeric RVs");
            if rv < *self.floor.lock().unwrap() {
                return Ok(watch_body(vec![error_event(410, "Expired")], None, false));
            }
            let mut lines = self.truth.events(rv.min(head), head);
            lines.push(bookmark(head, false));
            let tail = inject(&mut lines, fault);
            return Ok(watch_body(lines, tail, stay_open));
        }
        // A list page: the continue token is `rv-offset`.
        let (at, offset) = match query(uri, "continue") {
            Some(token) => {
                let (rv, off) = token.split_once('-').expect("our token");
                (rv.parse::<u64>().expect("rv"), off.parse::<usize>().expect("offset"))
            }
            None => (head, 0),
        };
        if at < *self.floor.lock().unwrap() {
            return Ok(respond(410, status_json(410, "Expired")));
        }
        let state = self.truth.state_at(at);
        let items: Vec<String> =
            state.iter().skip(offset).take(PAGE).map(|(k, (rv, _))| pod_item(name(k), *rv)).collect();
        let more = offset + PAGE < state.len();
        let cont = if more { format!(r#","continue":"{at}-{}""#, offset + PAGE) } else { String::new() };
        let page = format!(
            r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{at}"{cont}}},"items":[{}]}}"#,
            items.join(",")
        );
        Ok(respond(200, page))
    }

    fn truth_line(&self, key: &str, head: u64) -> String {
        let state = self.truth.state_at(head);
        ev("ADDED", &pod(name(key), state[key].0))
    }
}

fn name(key: &str) -> &str {
    key.split_once('/').map_or(key, |(_, n)| n)
}

impl Transport for Upstream {
    fn send(&self, req: Request<Body>) -> BoxFuture<'_, Result<Response<Body>, UpstreamError>> {
        let answer = self.answer(&req.uri().to_string());
        Box::pin(async move { answer })
    }
}

fn store_state(store: &Store) -> BTreeMap<String, (u64, Bytes)> {
    store
        .current()
        .objects
        .values()
        .map(|o| (o.key.to_string(), (o.resource_version, o.raw.clone())))
        .collect()
}

fn changes() -> impl Strategy<Value = Vec<(String, Op)>> {
    prop::collection::vec((0u8..6, any::<bool>()), 1..40).prop_map(|raw| {
        let mut live = [false; 6];
        raw.into_iter()
            .map(|(n, del)| {
                let i = n as usize;
                let op = if live[i] && del { Op::Delete } else { Op::Put };
                live[i] = matches!(op, Op::Put);
                (format!("p{n}"), op)
            })
            .collect()
    })
}

fn run(changes: Vec<(String, Op)>, plan: Vec<(Fault, u64)>, watch_list: bool) -> Result<(), TestCaseError> {
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("rt");
    rt.block_on(async move {
        let upstream = Arc::new(Upstream {
            truth: Truth { changes },
            plan: Mutex::new(plan.into()),
            head: Mutex::new(0),
            floor: Mutex::new(0),
        });
        let config = ReflectorConfig { watch_list, page_size: PAGE as u32, ..ReflectorConfig::default() };
        let (store, writer) = Store::new(pods_info(), config.store.clone());
        let status = Arc::new(StatusCell::new(pods_info().gvr, true));
        let mut reflector = Reflector::new(upstream.clone(), writer, Arc::new(config), status.clone());
        let last = upstream.truth.last();
        let want = upstream.truth.state_at(last);
        let mut state = State::Sync;
        for _ in 0..400 {
            state = reflector.step(state).await;
            if store.is_synced() {
                let rv = store.resource_version();
                prop_assert_eq!(
                    store_state(&store),
                    upstream.truth.state_at(rv),
                    "store differs from the truth at {}",
                    rv
                );
                if rv >= last && upstream.plan.lock().unwrap().is_empty() {
                    prop_assert_eq!(store_state(&store), want);
                    return Ok(());
                }
            }
        }
        prop_assert!(
            false,
            "did not converge: {:?} store at {} of {}",
            status.snapshot(),
            store.resource_version(),
            last
        );
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn converges_through_any_faults(
        changes in changes(),
        plan in prop::collection::vec((fault(), 0u64..6), 0..14),
        watch_list in any::<bool>(),
    ) {
        run(changes, plan, watch_list)?;
    }
}
