//! Model-based property test: random batches of events, bookmarks, replays and relists against a plain
//! `BTreeMap` model; checks the current state, every retained snapshot, the history, the index and the
//! memory accounting after each step.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::super::config::MAP_ENTRY_OVERHEAD;
use super::super::*;
use super::{pod, pods_info};

#[derive(Debug, Clone)]
enum Op {
    Upsert {
        key: usize,
        node: Option<usize>,
        added: bool,
    },
    Delete {
        key: usize,
    },
    /// Re-send the event at the current RV (a duplicate after a re-watch).
    Replay,
    Progress(u64),
    Relist {
        keep_every: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..12, proptest::option::of(0usize..3), any::<bool>())
            .prop_map(|(key, node, added)| Op::Upsert { key, node, added }),
        2 => (0usize..12).prop_map(|key| Op::Delete { key }),
        1 => Just(Op::Replay),
        1 => (1u64..4).prop_map(Op::Progress),
        1 => (1usize..4).prop_map(|keep_every| Op::Relist { keep_every }),
    ]
}

fn key_of(i: usize) -> String {
    format!("{}/p{}", ["a", "a-b", "b"][i % 3], i)
}

type Model = BTreeMap<String, (u64, Option<String>)>;

struct Harness {
    store: Arc<Store>,
    writer: Writer,
    rv: u64,
    model: Model,
    /// Model states of the current generation by RV (after each change).
    states: Vec<(u64, Model)>,
    /// (rv, key) of each event applied in the current generation.
    events: Vec<(u64, String)>,
    last: Option<Arc<Object>>,
}

impl Harness {
    fn new() -> Self {
        let config = StoreConfig { history_max_events: 6, retain_max: 5, ..StoreConfig::default() };
        let (store, mut writer) = Store::new(pods_info(), config);
        writer.replace([], 1);
        Self {
            store,
            writer,
            rv: 1,
            model: Model::new(),
            states: vec![(1, Model::new())],
            events: vec![],
            last: None,
        }
    }

    fn step(&mut self, batch: &[Op]) {
        let mut items = Vec::new();
        for op in batch {
            match op {
                Op::Upsert { key, node, added } => {
                    self.rv += 1;
                    let node = node.map(|n| format!("node-{n}"));
                    let object = pod(&key_of(*key), self.rv, node.as_deref());
                    self.model.insert(key_of(*key), (self.rv, node));
                    self.events.push((self.rv, key_of(*key)));
                    self.states.push((self.rv, self.model.clone()));
                    self.last = Some(object.clone());
                    items.push((if *added { EventType::Added } else { EventType::Modified }, object));
                }
                Op::Delete { key } => {
                    self.rv += 1;
                    if self.model.remove(&key_of(*key)).is_some() {
                        self.events.push((self.rv, key_of(*key)));
                    }
                    self.states.push((self.rv, self.model.clone()));
                    items.push((EventType::Deleted, pod(&key_of(*key), self.rv, None)));
                }
                Op::Replay => {
                    if let Some(last) = &self.last {
                        items.push((EventType::Modified, last.clone()));
                    }
                }
                Op::Progress(_) | Op::Relist { .. } => {}
            }
        }
        self.writer.apply(items);
        match batch.last() {
            Some(Op::Progress(by)) => {
                self.rv += by;
                self.writer.progress(self.rv);
                self.states.push((self.rv, self.model.clone()));
            }
            Some(Op::Relist { keep_every }) => {
                self.rv += 1;
                let kept: Model =
                    self.model.iter().step_by(*keep_every).map(|(k, v)| (k.clone(), v.clone())).collect();
                let objects: Vec<_> =
                    kept.iter().map(|(k, (rv, node))| pod(k, *rv, node.as_deref())).collect();
                self.writer.replace(objects, self.rv);
                self.model = kept;
                self.states = vec![(self.rv, self.model.clone())];
                self.events.clear();
            }
            _ => {}
        }
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let state = self.store.load();
        let content = |snap: &Snapshot| -> Model {
            snap.objects
                .iter()
                .map(|(k, o)| {
                    (k.to_string(), (o.resource_version, o.fields[0].as_deref().map(str::to_owned)))
                })
                .collect()
        };
        prop_assert_eq!(state.snapshot.rv, self.rv);
        prop_assert_eq!(self.store.resource_version(), self.rv);
        prop_assert_eq!(&content(&state.snapshot), &self.model);
        // Every retained RV, and the RVs between, give the model state as of then.
        let oldest = self.store.oldest_retained_rv().expect("synced");
        for (i, (rv, model)) in self.states.iter().enumerate() {
            let next = self.states.get(i + 1).map_or(rv + 1, |(n, _)| *n);
            for at in [*rv, next - 1] {
                if at >= oldest {
                    let snap = self.store.snapshot_at(at).expect("retained");
                    prop_assert_eq!(&content(&snap), model, "snapshot at {}", at);
                } else {
                    prop_assert!(self.store.snapshot_at(at).is_none());
                }
            }
        }
        // History: the newest events of the generation, above the floor, in order.
        let history: Vec<(u64, String)> =
            state.history.iter().map(|e| (e.rv, e.object.key.to_string())).collect();
        prop_assert!(history.len() <= 6);
        prop_assert_eq!(&history[..], &self.events[self.events.len() - history.len()..]);
        prop_assert!(history.first().is_none_or(|(rv, _)| *rv > state.history_floor));
        let (replayed, _) = self.store.events_after(state.history_floor).expect("floor is servable");
        prop_assert_eq!(replayed.len(), history.len());
        // Index equals a scan.
        for node in ["", "node-0", "node-1", "node-2"] {
            let indexed: Vec<String> =
                state.by_field(0, node, "").expect("pods are indexed").map(|o| o.key.to_string()).collect();
            let scanned: Vec<String> = self
                .model
                .iter()
                .filter(|(_, (_, n))| n.as_deref().unwrap_or("") == node)
                .map(|(k, _)| k.clone())
                .collect();
            prop_assert_eq!(indexed, scanned);
        }
        let live: usize = state.snapshot.objects.values().map(|o| o.heap_bytes() + MAP_ENTRY_OVERHEAD).sum();
        prop_assert_eq!(state.live_bytes, live);
        Ok(())
    }
}

proptest! {
    #[test]
    fn store_matches_model(batches in proptest::collection::vec(proptest::collection::vec(op(), 1..4), 1..40)) {
        let mut h = Harness::new();
        for batch in &batches {
            h.step(batch);
            h.check()?;
        }
    }
}
