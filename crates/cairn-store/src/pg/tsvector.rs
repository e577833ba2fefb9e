//! A step's full-text document as the `tsvector` Cairn computes itself
//! ([`crate::fulltext::lexemes`]), sent to PostgreSQL in the type's binary
//! format: PostgreSQL checks it (`tsvectorrecv`) but never parses or stems
//! the text.

use crate::fulltext::lexemes::tsvector_binary;
use bytes::BytesMut;
use postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use std::error::Error;

/// A document's lexemes and positions, in `tsvector`'s wire format.
#[derive(Debug, Clone)]
pub(super) struct TsVector(Vec<u8>);

impl TsVector {
    /// The `tsvector` of a segmented document.
    pub(super) fn of(document: &str) -> TsVector {
        TsVector(tsvector_binary(document))
    }

    /// Its size in bytes.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// A `tsvector` already in its binary format, as
    /// [`tsvector_binary`] gives it.
    pub(super) fn from_binary(binary: Vec<u8>) -> TsVector {
        TsVector(binary)
    }
}

impl ToSql for TsVector {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        out.extend_from_slice(&self.0);
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::TS_VECTOR
    }

    to_sql_checked!();
}
