use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::kinds::table;
use crate::options::Query;
use crate::store::{Store, WriteAction};

/// A page as comparable data: revision, items, continue token, remainingItemCount.
type Summary = (u64, Vec<Arc<Obj>>, Option<String>, Option<u64>);

fn summary(p: Result<Page, ReadError>) -> Result<Summary, ReadError> {
    p.map(|p| (p.rev, p.items, p.cont, p.remaining))
}

/// The list path `read_page` replaced: the whole range copied out of the store under its lock, then cut
/// at the limit. Kept verbatim as the reference the lazy walk must agree with byte for byte.
fn read_page_by_range(
    store: &Store,
    id: ResId,
    opts: &ListOptions,
    prefix: &str,
    start: &str,
    at: Option<u64>,
    limit: i64,
) -> Result<Page, ReadError> {
    let (rev, all) = store.range(id, prefix, start, at)?;
    let mut items = Vec::new();
    let mut last_idx = None;
    for (i, (_, obj)) in all.iter().enumerate() {
        if opts.matches(obj) {
            items.push(obj.clone());
            if limit > 0 && items.len() as i64 >= limit {
                last_idx = Some(i);
                break;
            }
        }
    }
    let (cont, remaining) = match last_idx {
        Some(i) if i + 1 < all.len() => {
            let rel = all[i].0.strip_prefix(prefix).unwrap_or(&all[i].0);
            let remaining = opts.predicate_empty().then(|| (all.len() - i - 1) as u64);
            (Some(token::encode(rev as i64, rel)), remaining)
        }
        _ => (None, None),
    };
    Ok(Page { rev, items, cont, remaining })
}

const NAMESPACES: &[&str] = &["a", "ab", "b"];
const NAMES: &[&str] = &["n1", "n10", "n2", "n3", "x"];
const PREFIXES: &[&str] = &["", "a/", "b/"];
const SELECTORS: &[&str] = &["", "labelSelector=", "labelSelector=l%3Dx", "labelSelector=l%21%3Dx,m"];

/// Creates, updates or deletes `ns/name`; a delete of an absent key creates it instead.
fn write(store: &Store, id: ResId, (ns, name, delete, x): (usize, usize, bool, bool)) {
    let (ns, name) = (NAMESPACES[ns], NAMES[name]);
    let mut labels = json!({"l": if x { "x" } else { "y" }});
    if name.len() > 2 {
        labels["m"] = json!("1");
    }
    store
        .write(id, &format!("{ns}/{name}"), None, |cur, rev| {
            let v = json!({"metadata": {"name": name, "namespace": ns, "resourceVersion": rev.to_string(),
                "labels": labels}});
            Ok(if delete && cur.is_some() { WriteAction::Delete(v) } else { WriteAction::Put(v) })
        })
        .expect("write");
}

fn op() -> impl Strategy<Value = (usize, usize, bool, bool)> {
    (0..NAMESPACES.len(), 0..NAMES.len(), prop::bool::weighted(0.3), prop::bool::ANY)
}

proptest! {
    /// A whole page walk (first page, then each continue token at its revision while later writes land)
    /// answers what the full-range read answered: same items, tokens, counts and 410s.
    #[test]
    fn page_walk_agrees_with_full_range_then_cut(
        ops in prop::collection::vec(op(), 0..30),
        between in prop::collection::vec(op(), 0..8),
        compact_back in prop::option::of(0u64..30),
        at_back in prop::option::of(0u64..30),
        prefix in 0..PREFIXES.len(),
        selector in 0..SELECTORS.len(),
        limit in -1i64..4,
    ) {
        let store = Store::new(table(&[]));
        let id = store.find("", "configmaps").expect("configmaps");
        for &o in &ops {
            write(&store, id, o);
        }
        let head = store.current_rev();
        if let Some(b) = compact_back {
            store.compact(Some(head - b.min(head - 1)));
        }
        let res = store.resource(id).clone();
        let opts = ListOptions::from_query(&Query::parse(Some(SELECTORS[selector])), &res, false)
            .expect("valid selector");
        let prefix = PREFIXES[prefix];
        let mut at = at_back.map(|b| head - b.min(head - 1));
        let mut start = String::new();
        let mut between = between.into_iter();
        for _ in 0..=NAMES.len() * NAMESPACES.len() {
            let old = summary(read_page_by_range(&store, id, &opts, prefix, &start, at, limit));
            let new = summary(read_page(&store, id, &opts, prefix, &start, at, limit));
            prop_assert_eq!(&new, &old);
            let Ok((_, _, Some(cont), _)) = new else { break };
            let c = token::decode(&cont).expect("a token the sim wrote decodes");
            start = format!("{prefix}{}", c.start);
            at = Some(c.rv as u64);
            if let Some(o) = between.next() {
                write(&store, id, o);
            }
        }
    }
}
