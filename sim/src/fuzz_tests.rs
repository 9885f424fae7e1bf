//! Property tests: parsers of untrusted input never panic and round-trip what they produce.

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::kinds::table;
use crate::options::{ListOptions, Query};
use crate::token;
use crate::write::patch::{PatchType, apply};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-z$/]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z$/]{1,5}|\\$patch|containers|op|path|value", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn continue_tokens_round_trip(rv in 1i64..i64::MAX, key in "[a-z0-9-]{1,12}(/[a-z0-9.-]{1,12})?") {
        let t = token::encode(rv, &key);
        let c = token::decode(&t).expect("own tokens decode");
        prop_assert_eq!(c.rv, rv);
        prop_assert_eq!(c.start, format!("{key}\u{0}"));
    }

    #[test]
    fn token_decoding_never_panics(s in ".{0,64}") {
        let _ = token::decode(&s);
    }

    #[test]
    fn query_and_list_options_never_panic(raw in "[a-zA-Z=&%+0-9,!()<>. -]{0,80}", watch in any::<bool>()) {
        let pods = table(&[]).into_iter().find(|r| r.plural == "pods").expect("pods");
        let q = Query::parse(Some(&raw));
        let _ = ListOptions::from_query(&q, &pods, watch);
        for key in ["labelSelector", "fieldSelector", "resourceVersion", "continue", "limit"] {
            let q = Query::parse(Some(&format!("{key}={raw}")));
            let _ = ListOptions::from_query(&q, &pods, watch);
        }
    }

    #[test]
    fn patches_never_panic(target in json_value(), patch in json_value()) {
        for ty in [PatchType::Merge, PatchType::Json, PatchType::Strategic] {
            let _ = apply(ty, "Pod", true, &target, &patch);
        }
    }
}
