//! Rows for a binary `COPY ... FROM STDIN BINARY`, encoded into one
//! buffer and sent as one message.
//!
//! `postgres`'s `BinaryCopyInWriter` hands the connection a message every
//! 4 KB, each a wake-up of the connection's task and a write to the
//! socket: about 35 per batch of 55 steps, inside the org's lock. The
//! format is small and fixed (PostgreSQL's documentation, "COPY", "Binary
//! Format"): a signature, flags and header extension, then per row the
//! number of fields and each field as a length (−1 for NULL) and its
//! binary value, then −1.

use crate::StoreError;
use bytes::{BufMut, Bytes, BytesMut};
use postgres::types::{IsNull, ToSql, Type};

/// The binary format's signature, flags (none) and header extension
/// length (none).
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// Rows of one `COPY`, encoded as they are added.
pub(super) struct CopyRows {
    buf: BytesMut,
    types: &'static [Type],
}

impl CopyRows {
    /// An empty `COPY` of columns of `types`, in order.
    pub(super) fn new(types: &'static [Type], capacity: usize) -> CopyRows {
        let mut buf = BytesMut::with_capacity(HEADER.len() + capacity + 2);
        buf.extend_from_slice(HEADER);
        CopyRows { buf, types }
    }

    /// Appends one row: a value for each column, of its column's type.
    /// A row that fails to encode leaves the rows before it as they were.
    pub(super) fn push(&mut self, values: &[&(dyn ToSql + Sync)]) -> Result<(), StoreError> {
        let start = self.buf.len();
        let pushed = self.encode_row(values);
        if pushed.is_err() {
            self.buf.truncate(start);
        }
        pushed
    }

    fn encode_row(&mut self, values: &[&(dyn ToSql + Sync)]) -> Result<(), StoreError> {
        if values.len() != self.types.len() {
            return Err(StoreError::Corrupt(format!(
                "a COPY row of {} values for {} columns",
                values.len(),
                self.types.len()
            )));
        }
        let fields = i16::try_from(values.len())
            .map_err(|_| StoreError::Corrupt("a COPY row with too many columns".into()))?;
        self.buf.put_i16(fields);
        for (value, ty) in values.iter().zip(self.types) {
            let at = self.buf.len();
            self.buf.put_i32(0);
            let length = match value
                .to_sql_checked(ty, &mut self.buf)
                .map_err(|e| StoreError::Corrupt(format!("encoding a COPY value: {e}")))?
            {
                IsNull::Yes => -1,
                IsNull::No => i32::try_from(self.buf.len() - at - 4)
                    .map_err(|_| StoreError::Corrupt("a COPY value over 2 GB".into()))?,
            };
            self.buf[at..at + 4].copy_from_slice(&length.to_be_bytes());
        }
        Ok(())
    }

    /// The whole `COPY` data, trailer included.
    pub(super) fn finish(mut self) -> Bytes {
        self.buf.put_i16(-1);
        self.buf.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::CopyRows;
    use postgres::types::Type;

    static TYPES: [Type; 3] = [Type::INT8, Type::TEXT, Type::BYTEA];

    #[test]
    fn rows_are_in_the_binary_copy_format() {
        let mut rows = CopyRows::new(&TYPES, 0);
        let none: Option<String> = None;
        rows.push(&[&7_i64, &"ab", &vec![1_u8, 2]])
            .unwrap_or_else(|e| panic!("{e}"));
        rows.push(&[&-1_i64, &none, &Vec::<u8>::new()])
            .unwrap_or_else(|e| panic!("{e}"));
        let mut expected = b"PGCOPY\n\xff\r\n\0".to_vec();
        expected.extend([0; 8]);
        expected.extend(3_i16.to_be_bytes());
        expected.extend(8_i32.to_be_bytes());
        expected.extend(7_i64.to_be_bytes());
        expected.extend(2_i32.to_be_bytes());
        expected.extend(b"ab");
        expected.extend(2_i32.to_be_bytes());
        expected.extend([1, 2]);
        expected.extend(3_i16.to_be_bytes());
        expected.extend(8_i32.to_be_bytes());
        expected.extend((-1_i64).to_be_bytes());
        expected.extend((-1_i32).to_be_bytes());
        expected.extend(0_i32.to_be_bytes());
        expected.extend((-1_i16).to_be_bytes());
        assert_eq!(rows.finish().to_vec(), expected);
    }

    #[test]
    fn a_row_of_the_wrong_width_or_type_is_refused() {
        let mut rows = CopyRows::new(&TYPES, 0);
        assert!(rows.push(&[&7_i64]).is_err());
        assert!(rows.push(&[&7_i64, &"ab", &"not bytes"]).is_err());
        assert_eq!(
            rows.finish().to_vec(),
            CopyRows::new(&TYPES, 0).finish().to_vec(),
            "a refused row leaves nothing behind"
        );
    }
}
