//! Passages as Qdrant points and back: ids, payloads, filters.

use std::collections::HashMap;

use capstan_indexer::{Location, Metadata, Passage};
use capstan_retriever::{Filter, PassageKey};
use qdrant_client::qdrant::point_id::PointIdOptions;
use qdrant_client::qdrant::{
    Condition, Filter as QdrantFilter, NamedVectors, PointId, PointStruct, Value, Vector,
};
use qdrant_client::Payload;
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use xxhash_rust::xxh3::Xxh3;

use crate::schema::{field, BM25, DENSE};
use crate::sparse::Sparse;

/// The namespace of point ids (UUIDv5 of `"{doc_id}#{n}"` in it).
const NAMESPACE: Uuid = Uuid::from_u128(0x6361_7073_7461_6e00_9a1e_5e3d_4c0f_2b17);

/// The id of passage `n` of a document: the same on every run and machine,
/// so writing a passage twice overwrites it.
pub fn point_uuid(doc_id: &str, n: u32) -> Uuid {
    Uuid::new_v5(&NAMESPACE, format!("{doc_id}#{n}").as_bytes())
}

/// [`point_uuid`] as Qdrant's id type.
pub(crate) fn point_id(doc_id: &str, n: u32) -> PointId {
    PointId::from(point_uuid(doc_id, n).to_string())
}

/// The retriever's key of a point id (`None` for ids Capstan never writes).
pub(crate) fn key_of(id: Option<&PointId>) -> Option<PassageKey> {
    match id?.point_id_options.as_ref()? {
        PointIdOptions::Uuid(s) => Uuid::parse_str(s).ok().map(|u| u.as_u128()),
        PointIdOptions::Num(_) => None,
    }
}

/// A key back to Qdrant's id type.
pub(crate) fn id_of(key: PassageKey) -> PointId {
    PointId::from(Uuid::from_u128(key).to_string())
}

/// What identifies a document's content: when a point carries the hash of
/// the document being written, that passage is already there.
pub(crate) fn document_hash(title: &str, text: &str, metadata: Option<&Metadata>) -> String {
    let mut h = Xxh3::new();
    for part in [title.as_bytes(), b"\0", text.as_bytes(), b"\0"] {
        h.update(part);
    }
    if let Some(m) = metadata {
        h.update(serde_json::to_string(m).unwrap_or_default().as_bytes());
    }
    format!("{:032x}", h.digest128())
}

/// A point's payload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PassagePayload {
    pub doc_id: String,
    pub passage_no: u32,
    /// Passages of its document.
    pub passages: u32,
    pub doc_hash: String,
    pub title: String,
    pub text: String,
    pub char_start: u64,
    pub char_end: u64,
    #[serde(flatten)]
    pub location: Location,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
}

impl PassagePayload {
    pub fn into_passage(self) -> Passage {
        Passage {
            id: format!("{}#{}", self.doc_id, self.passage_no),
            doc_id: self.doc_id,
            title: self.title,
            text: self.text,
            index: self.passage_no,
            char_start: self.char_start as usize,
            char_end: self.char_end as usize,
            location: self.location,
        }
    }
}

/// The point of a passage with its vectors.
pub(crate) fn passage_point(
    passage: &Passage,
    passages: u32,
    doc_hash: &str,
    metadata: Option<&Metadata>,
    dense: Vec<f32>,
    sparse: Sparse,
) -> PointStruct {
    let payload = PassagePayload {
        doc_id: passage.doc_id.clone(),
        passage_no: passage.index,
        passages,
        doc_hash: doc_hash.to_string(),
        title: passage.title.clone(),
        text: passage.text.clone(),
        char_start: passage.char_start as u64,
        char_end: passage.char_end as u64,
        location: passage.location.clone(),
        metadata: metadata.cloned(),
    };
    let payload = Payload::try_from(serde_json::to_value(payload).expect("a payload serialises"))
        .expect("a payload is a JSON object");
    let vectors = NamedVectors::default()
        .add_vector(DENSE, Vector::new_dense(dense))
        .add_vector(BM25, Vector::new_sparse(sparse.indices, sparse.values));
    PointStruct::new(point_id(&passage.doc_id, passage.index), vectors, payload)
}

/// A point's payload back to a passage (`None` if it is not Capstan's).
pub(crate) fn passage_of(payload: HashMap<String, Value>) -> Option<Passage> {
    Payload::from(payload)
        .deserialize::<PassagePayload>()
        .ok()
        .map(PassagePayload::into_passage)
}

/// A metadata filter as Qdrant's: every field of the document's metadata
/// object equals its value.
pub(crate) fn qdrant_filter(filter: &Filter) -> Option<QdrantFilter> {
    if filter.is_empty() {
        return None;
    }
    let conditions = filter.equals.iter().filter_map(|(key, value)| {
        let field = format!("{}.{key}", field::METADATA);
        match value {
            serde_json::Value::String(s) => Some(Condition::matches(field, s.clone())),
            serde_json::Value::Bool(b) => Some(Condition::matches(field, *b)),
            serde_json::Value::Number(n) => n.as_i64().map(|i| Condition::matches(field, i)),
            // Filter::validate admits nothing else.
            _ => None,
        }
    });
    Some(QdrantFilter::must(conditions))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_round_trip() {
        let a = point_uuid("doc-1", 0);
        assert_eq!(a, point_uuid("doc-1", 0));
        assert_ne!(a, point_uuid("doc-1", 1));
        assert_ne!(a, point_uuid("doc-10", 0));
        assert_eq!(a.get_version_num(), 5);
        let key = key_of(Some(&point_id("doc-1", 0))).unwrap();
        assert_eq!(key, a.as_u128());
        assert_eq!(key_of(Some(&id_of(key))), Some(key));
        assert_eq!(key_of(Some(&PointId::from(7u64))), None);
    }

    #[test]
    fn a_payload_round_trips_to_the_passage() {
        let passage = Passage {
            id: "d#2".into(),
            doc_id: "d".into(),
            title: "T".into(),
            text: "some text".into(),
            index: 2,
            char_start: 10,
            char_end: 19,
            location: Location {
                page_start: Some(3),
                page_end: Some(4),
                section: Some("Intro".into()),
            },
        };
        let meta: Metadata = serde_json::from_str(r#"{"lang":"en","year":2024}"#).unwrap();
        let hash = document_hash("T", "body", Some(&meta));
        assert_ne!(hash, document_hash("T", "body", None));
        let point = passage_point(
            &passage,
            3,
            &hash,
            Some(&meta),
            vec![0.0; 4],
            Sparse::default(),
        );
        assert_eq!(point.payload["passages"].clone().into_json(), 3);
        assert_eq!(passage_of(point.payload), Some(passage));
    }
}
