//! One object's row: cells that do not depend on the clock are encoded JSON; ages keep their timestamp and
//! are rendered per response, so a row can be computed once per object version and kept.

use std::fmt::Write as _;

use bytes::{BufMut, BytesMut};

use super::age;

/// One cell of a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    /// The cell's JSON, ready to copy.
    Json(Box<str>),
    /// `translateTimestampSince(t)` (None: unset).
    Age(Option<i64>),
    /// A pod's RESTARTS with the time of the last restart: `3 (5m ago)`.
    RestartsAgo { count: i64, at: i64 },
}

/// The printed form of one object version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub cells: Box<[Cell]>,
    /// The row's `conditions` JSON (pods that completed), when any.
    pub conditions: Option<&'static str>,
}

impl Cell {
    pub fn str(s: &str) -> Cell {
        let mut out = BytesMut::with_capacity(s.len() + 2);
        crate::json::write_str(&mut out, s);
        Cell::Json(String::from_utf8(out.to_vec()).unwrap_or_default().into_boxed_str())
    }

    pub fn int(i: i64) -> Cell {
        Cell::Json(i.to_string().into_boxed_str())
    }

    pub fn put(&self, out: &mut BytesMut, now: i64) {
        match self {
            Cell::Json(j) => out.put_slice(j.as_bytes()),
            Cell::Age(t) => crate::json::write_str(out, &age::since(*t, now)),
            Cell::RestartsAgo { count, at } => {
                let mut s = String::new();
                let _ = write!(s, "{count} ({} ago)", age::since(Some(*at), now));
                crate::json::write_str(out, &s);
            }
        }
    }
}

impl Cell {
    /// The cell as a JSON value, its age rendered at `now` (for a writer that builds values, the sim).
    pub fn to_value(&self, now: i64) -> serde_json::Value {
        let mut out = BytesMut::new();
        self.put(&mut out, now);
        serde_json::from_slice(&out).unwrap_or_default()
    }
}

impl Row {
    /// Appends `{"cells":[…]` and the conditions, without the `object` member or the closing brace.
    pub fn put_head(&self, out: &mut BytesMut, now: i64) {
        out.put_slice(b"{\"cells\":[");
        for (i, c) in self.cells.iter().enumerate() {
            if i > 0 {
                out.put_u8(b',');
            }
            c.put(out, now);
        }
        out.put_u8(b']');
        if let Some(c) = self.conditions {
            out.put_slice(b",\"conditions\":");
            out.put_slice(c.as_bytes());
        }
    }

    /// Heap bytes held (for the cache's weight).
    pub fn heap_bytes(&self) -> usize {
        let cells: usize = self
            .cells
            .iter()
            .map(|c| std::mem::size_of::<Cell>() + if let Cell::Json(j) = c { j.len() } else { 0 })
            .sum();
        std::mem::size_of::<Row>() + cells
    }
}
