//! Rows for a binary `COPY ... FROM STDIN BINARY`, encoded as they come
//! and written to the connection in messages of about a megabyte.
//!
//! `postgres`'s `BinaryCopyInWriter` hands the connection a message every
//! 4 KB, each a wake-up of the connection's task and a write to the
//! socket: about 35 per batch of 55 steps, inside the org's lock. One
//! message for a whole batch would do for a usual one, but PostgreSQL
//! refuses a message over 1 GB (it closes the connection), and a batch
//! of the largest steps can pass that. The format is small and fixed
//! (PostgreSQL's documentation, "COPY", "Binary Format"): a signature,
//! flags and header extension, then per row the number of fields and each
//! field as a length (−1 for NULL) and its binary value, then −1.

use crate::StoreError;
use bytes::{BufMut, BytesMut};
use postgres::types::{IsNull, ToSql, Type};
use std::io::Write;

/// The binary format's signature, flags (none) and header extension
/// length (none).
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// Encoded bytes beyond which they are written and flushed to the sink
/// (for a `COPY`, sent as one message).
pub(super) const MESSAGE_BYTES: usize = 1 << 20;

/// Rows of one `COPY`, encoded as they are added and written to `sink`.
pub(super) struct CopyRows<W: Write> {
    buf: BytesMut,
    types: &'static [Type],
    sink: W,
}

impl<W: Write> CopyRows<W> {
    /// A `COPY` of columns of `types`, in order, into `sink`.
    pub(super) fn new(sink: W, types: &'static [Type]) -> CopyRows<W> {
        let mut buf = BytesMut::with_capacity(MESSAGE_BYTES);
        buf.extend_from_slice(HEADER);
        CopyRows { buf, types, sink }
    }

    /// Appends one row: a value for each column, of its column's type.
    /// A row that fails to encode leaves the rows before it as they were.
    pub(super) fn push(&mut self, values: &[&(dyn ToSql + Sync)]) -> Result<(), StoreError> {
        let start = self.buf.len();
        let pushed = self.encode_row(values);
        if pushed.is_err() {
            self.buf.truncate(start);
            return pushed;
        }
        if self.buf.len() >= MESSAGE_BYTES {
            self.send()?;
        }
        Ok(())
    }

    /// Writes the trailer and everything not written yet; returns the sink.
    pub(super) fn finish(mut self) -> Result<W, StoreError> {
        self.buf.put_i16(-1);
        self.send()?;
        Ok(self.sink)
    }

    fn send(&mut self) -> Result<(), StoreError> {
        let io = |source| StoreError::Io {
            context: "writing COPY rows".into(),
            source,
        };
        self.sink.write_all(&self.buf).map_err(io)?;
        self.sink.flush().map_err(io)?;
        self.buf.clear();
        Ok(())
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
}

#[cfg(test)]
mod tests {
    use super::{CopyRows, MESSAGE_BYTES};
    use postgres::types::Type;
    use std::io::Write;

    static TYPES: [Type; 3] = [Type::INT8, Type::TEXT, Type::BYTEA];

    /// A sink that records each flushed message's size.
    #[derive(Default)]
    struct Messages {
        pending: Vec<u8>,
        all: Vec<u8>,
        sizes: Vec<usize>,
    }

    impl Write for Messages {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.pending.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            self.sizes.push(self.pending.len());
            self.all.append(&mut self.pending);
            Ok(())
        }
    }

    #[test]
    fn rows_are_in_the_binary_copy_format() {
        let mut rows = CopyRows::new(Vec::new(), &TYPES);
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
        assert_eq!(rows.finish().unwrap_or_else(|e| panic!("{e}")), expected);
    }

    #[test]
    fn a_row_of_the_wrong_width_or_type_is_refused() {
        let mut rows = CopyRows::new(Vec::new(), &TYPES);
        assert!(rows.push(&[&7_i64]).is_err());
        assert!(rows.push(&[&7_i64, &"ab", &"not bytes"]).is_err());
        assert_eq!(
            rows.finish().unwrap_or_else(|e| panic!("{e}")),
            CopyRows::new(Vec::new(), &TYPES)
                .finish()
                .unwrap_or_else(|e| panic!("{e}")),
            "a refused row leaves nothing behind"
        );
    }

    /// 40 MB of rows go out as messages of about a megabyte (never more
    /// than a megabyte and a row), and nothing is lost or reordered.
    #[test]
    fn rows_are_written_in_messages_of_about_a_megabyte() {
        let text = "x".repeat(100_000);
        let mut rows = CopyRows::new(Messages::default(), &TYPES);
        let mut single = CopyRows::new(Vec::new(), &TYPES);
        for i in 0..400_i64 {
            let values: [&(dyn postgres::types::ToSql + Sync); 3] = [&i, &text, &vec![7_u8; 3]];
            rows.push(&values).unwrap_or_else(|e| panic!("{e}"));
            single.push(&values).unwrap_or_else(|e| panic!("{e}"));
        }
        let sent = rows.finish().unwrap_or_else(|e| panic!("{e}"));
        assert!(sent.sizes.len() >= 36, "{:?}", sent.sizes);
        assert!(
            sent.sizes.iter().all(|&n| n < MESSAGE_BYTES + 100_100),
            "{:?}",
            sent.sizes
        );
        assert_eq!(sent.all, single.finish().unwrap_or_else(|e| panic!("{e}")));
    }
}
