//! Content negotiation of a read of a cached resource: which view memory serves (full objects, the
//! PartialObjectMetadata view, a Table), or whether the upstream answers it, or a 406 now.

use http::{HeaderMap, Response, Uri, header};

use super::stats::ResponseEncoding;
use crate::codec::list::View;
use crate::codec::status::{self, ApiError};
use crate::codec::table::{Include, TableView};
use crate::front::body::Body;
use crate::front::negotiate::{self, Negotiated, ProtoView};
use crate::front::respond;
use crate::front::route::{ResourceRequest, Verb};
use crate::options::query::Query;
use crate::serve::protobuf::ProtoTarget;
use crate::serve::reads::Reads;
use crate::store::Store;

/// What negotiation decided for one read.
pub(super) enum Choice {
    /// Serve from memory in this view (in protobuf, with objects encoded as the target, when set).
    Memory(View, Option<ProtoTarget>),
    /// Forward: the upstream answers this encoding. `counted`: a read of a cached resource in a negotiated
    /// encoding (counted as forwarded in it).
    Forward { counted: bool },
    /// Forward, and learn from the upstream's Table whether the generic convertor prints this kind.
    LearnTable,
    /// Answer now (a 406 kache writes as the apiserver does).
    Respond(Response<Body>),
}

/// The negotiated encoding (for the counters) and the choice.
pub(super) fn choose(
    reads: &Reads,
    headers: &HeaderMap,
    uri: &Uri,
    r: &ResourceRequest,
    store: &Store,
) -> (Option<ResponseEncoding>, Choice) {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    // A typed resource's request reaches its handler through go-restful, whose route selection refuses
    // an Accept header naming nothing the route produces (its own 406 wording) before the apiserver
    // negotiates. Custom resources are served by the apiextensions handler, without that step. The
    // legacy `/watch/` routes produce other types: their 406s are left to the upstream.
    if !store.info().list_items_have_type_meta && matches!(r.verb, Verb::Get | Verb::List | Verb::Watch) {
        let list = r.verb != Verb::Get;
        let produces = if list { status::ROUTE_LIST_PRODUCES } else { status::ROUTE_GET_PRODUCES };
        if !negotiate::route_accepts(accept, produces) {
            if r.legacy_watch_path {
                return (None, Choice::Forward { counted: false });
            }
            let err = ApiError::route_not_acceptable(list);
            // The error itself is negotiated on the same header: `application/*` gets JSON as usual.
            let resp = match negotiate::negotiate(accept) {
                Negotiated::Json { pretty } => respond::error(&err, headers, pretty),
                Negotiated::Protobuf(_) => respond::error(&err, headers, false),
                _ => respond::not_acceptable(&err, headers),
            };
            return (None, Choice::Respond(resp));
        }
    }
    let negotiated =
        if r.verb == Verb::Watch { negotiate::negotiate_watch(accept) } else { negotiate::negotiate(accept) };
    let encoding = ResponseEncoding::of(&negotiated);
    // The PartialObjectMetadata views are served from memory when the view fits the request (a list view
    // for lists, an object view for gets and watch events); any mismatch is forwarded and the upstream
    // answers it (406 with its own wording).
    let choice = match (&negotiated, r.verb) {
        (Negotiated::Json { .. }, _) => Choice::Memory(View::Full, None),
        (Negotiated::JsonPartialMetadata { list: true, .. }, Verb::List)
        | (Negotiated::JsonPartialMetadata { list: false, .. }, Verb::Get | Verb::Watch) => {
            Choice::Memory(View::Metadata, None)
        }
        // Protobuf from memory for the kinds with a schema and the v1 metadata views that fit the request;
        // the rest is forwarded and the upstream answers it (custom resources' objects: its 406 or JSON).
        (Negotiated::Protobuf(ProtoView::Object), _) => match ProtoTarget::for_object(store.info()) {
            Some(target) => Choice::Memory(View::Full, Some(target)),
            None => Choice::Forward { counted: true },
        },
        (Negotiated::Protobuf(ProtoView::PartialMetadata { list: true }), Verb::List)
        | (Negotiated::Protobuf(ProtoView::PartialMetadata { list: false }), Verb::Get | Verb::Watch) => {
            Choice::Memory(View::Metadata, Some(ProtoTarget::Metadata))
        }
        (Negotiated::JsonPartialMetadata { .. }, _) => Choice::Forward { counted: true },
        // A Table from memory for the kinds kache prints exactly (an invalid `includeObject` is the
        // upstream's 400 to write, after its own checks). A typed kind without a printer is forwarded
        // until the upstream's answer has shown it uses the generic convertor (learned from that
        // answer, `table_learn`); custom resources always have their CRD's convertor.
        (Negotiated::JsonTable { v1, .. }, _) => {
            match (reads.table_printer(store, r), include_object(uri.query())) {
                (Some(printer), Ok(include)) => Choice::Memory(
                    View::Table(TableView { printer, include, v1: *v1, tables: reads.tables().clone() }),
                    None,
                ),
                (None, Ok(_)) if r.verb != Verb::Watch && !store.info().list_items_have_type_meta => {
                    Choice::LearnTable
                }
                _ => Choice::Forward { counted: true },
            }
        }
        // A watch that negotiated a type that cannot stream (YAML): the apiserver writes that 406 in the
        // negotiated type (a YAML Status), which is the upstream's to produce.
        (Negotiated::NotAcceptable { stream: true }, _) => Choice::Forward { counted: false },
        (other, _) => match other.error() {
            Some(err) => Choice::Respond(respond::not_acceptable(&err, headers)),
            None => Choice::Forward { counted: true },
        },
    };
    (encoding, choice)
}

/// `includeObject` of a Table request, decoded from the query (the first value counts) and validated.
fn include_object(query: Option<&str>) -> Result<Include, ApiError> {
    Include::from_value(Query::parse(query).get("includeObject").unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn include_object_is_decoded_from_the_query() {
        assert_eq!(include_object(None).ok(), Some(Include::Metadata));
        assert_eq!(include_object(Some("includeObject=Object&x=1")).ok(), Some(Include::Object));
        assert_eq!(include_object(Some("includeObject=None&includeObject=Object")).ok(), Some(Include::None));
        assert_eq!(include_object(Some("includeObject=Foo")).expect_err("400").status_code(), 400);
    }
}
