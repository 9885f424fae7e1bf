//! The kache parser modules, compiled from ../src at their crate paths (see Cargo.toml for why).
#![allow(dead_code, unused_imports)]

#[path = "../../src/codec"]
pub mod codec {
    pub mod proto;
    pub mod status;
    pub mod token;

    /// The JSON helpers of the ingest codec that the selector code uses (`value_at`), with the error type
    /// they need; the rest of `extract` (objects, the store) stays out of the fuzz build.
    pub mod extract {
        #[path = "json.rs"]
        mod json;
        pub use json::value_at;

        #[derive(Debug)]
        pub enum ExtractError {
            Json(serde_json::Error),
            TrailingBytes,
            WrongType(&'static str),
        }
    }
}

#[path = "../../src/front"]
pub mod front {
    pub mod negotiate;
}

#[path = "../../src/options"]
pub mod options {
    pub mod params;
    pub mod query;
    pub mod selector;
}

#[path = "../../src/resource.rs"]
pub mod resource;

#[path = "../../src/store"]
pub mod store {
    mod object;
    pub use object::{Key, Object, make_key};
}
