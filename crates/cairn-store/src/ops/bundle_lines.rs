//! Reading a bundle from a file or a stream line by line, each line
//! bounded: a bundle is outside bytes (an auditor verifies what a courier
//! brought), and a "line" of gigabytes without a line end must not be read
//! into memory whole, nor a line whose parsed form would take a hundred
//! times its size (16 MiB of `{"":0}` had taken 1.6 GB).

use std::io::{BufRead, Read as _};

/// The longest bundle line read by default, in bytes (line end excluded):
/// what the server accepts (`CAIRN_MAX_BUNDLE_LINE_BYTES`). A step's
/// request is at most a few MiB, and its entry line, with hashes, salts
/// and JSON escapes, stays well under this.
pub const DEFAULT_MAX_BUNDLE_LINE_BYTES: usize = 16 * 1024 * 1024;

/// What a person is told of a line too long: line `line` (counted from 1)
/// of `source` (`the bundle`, `--log <path>`), the bound and the setting
/// that raises it. The CLI and the server word it alike.
pub fn line_too_long(source: &str, line: u64, max: usize) -> String {
    format!(
        "line {line} of {source} is longer than {max} bytes (--max-bundle-line-bytes, CAIRN_MAX_BUNDLE_LINE_BYTES)"
    )
}

/// The most memory a bundle line may take once parsed, as
/// [`line_memory`] counts it, for a line limit of `max_line` bytes: 64
/// times it (1 GiB by default). What Cairn writes stays under it: a
/// step's line, mostly strings, counts about twice its size; a selection
/// line of nothing but `[seq, "type"]` pairs about 50 times (an export
/// refuses a selection line past the line limit); a step or signed trace
/// of small values within the default 2 MiB request body at most 220
/// times that. Only lines of many tiny objects or arrays pass it
/// (`{"":0}` repeated counts about 220 times its size).
pub fn line_memory_limit(max_line: usize) -> usize {
    max_line.saturating_mul(64)
}

/// What `line` may take once parsed, as counted against
/// [`line_memory_limit`]: twice [`cairn_core::json::parsed_memory_bound`]
/// (a verifier holds the line's JSON tree and the record decoded from it,
/// whose payloads are copies of the tree's, at once; a review measured
/// 1 GB for a line counted 432 MiB once) for a line that could pass
/// `limit`, its length otherwise (the bound adds at most 672 bytes per
/// byte, a `{`, so a line of up to `limit / 2048` bytes, 512 KiB by
/// default, is not scanned).
pub fn line_memory(line: &[u8], limit: usize) -> usize {
    if line.len() <= limit / 2048 {
        line.len()
    } else {
        cairn_core::json::parsed_memory_bound(line).saturating_mul(2)
    }
}

/// Why a line was not read.
#[derive(Debug, thiserror::Error)]
pub enum BundleLineError {
    /// The line has more than the given number of bytes before its `\n`.
    #[error("a line is longer than {0} bytes")]
    TooLong(usize),
    /// Once parsed, the line could take more than the limit
    /// ([`line_memory_limit`]).
    #[error("a line could take {bound} bytes once parsed, more than {limit}")]
    TooComplex {
        /// What the line could take.
        bound: usize,
        /// The most a line may take.
        limit: usize,
    },
    /// Reading failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl BundleLineError {
    /// What a person is told when line `line` of `source` was refused as
    /// input (too long, too complex), or `None` for a reading failure. The
    /// CLI and the server word it alike.
    pub fn refusal(&self, source: &str, line: u64) -> Option<String> {
        match self {
            BundleLineError::TooLong(max) => Some(line_too_long(source, line, *max)),
            BundleLineError::TooComplex { bound, limit } => {
                Some(line_too_complex(source, line, *bound, *limit))
            }
            BundleLineError::Io(_) => None,
        }
    }
}

/// What `line` (of a bundle whose lines may be `max_line` bytes) is
/// counted as taking once parsed ([`line_memory`]), or why it is refused
/// (past [`line_memory_limit`]): the one check every reader of bundle
/// lines makes before the line is parsed, from a file
/// ([`read_bundle_line`]) or from an upload.
pub fn checked_line_memory(line: &[u8], max_line: usize) -> Result<usize, BundleLineError> {
    let limit = line_memory_limit(max_line);
    let bound = line_memory(line, limit);
    if bound > limit {
        return Err(BundleLineError::TooComplex { bound, limit });
    }
    Ok(bound)
}

/// What a person is told of a line whose parsed form could take `bound`
/// bytes, more than `limit`.
pub fn line_too_complex(source: &str, line: u64, bound: usize, limit: usize) -> String {
    format!(
        "line {line} of {source} could take {} MiB of memory once parsed, more than the {} MiB a line may (64 times --max-bundle-line-bytes, CAIRN_MAX_BUNDLE_LINE_BYTES): JSON of many tiny objects or arrays; no line Cairn writes is so",
        bound.div_ceil(1 << 20),
        limit >> 20
    )
}

/// Appends the next line of `reader` to `line`, with its line end if it
/// has one, and returns the bytes read (0 at the end). A line with more
/// than `max` bytes before its `\n` is an error, after reading at most
/// `max + 1` of its bytes; so is one that could take more than
/// [`line_memory_limit`] once parsed ([`line_memory`]).
pub fn read_bundle_line(
    reader: &mut dyn BufRead,
    line: &mut Vec<u8>,
    max: usize,
) -> Result<usize, BundleLineError> {
    let start = line.len();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    let read = reader.take(limit).read_until(b'\n', line)?;
    let ended = line.len() > start && line.last() == Some(&b'\n');
    if read - usize::from(ended) > max {
        return Err(BundleLineError::TooLong(max));
    }
    checked_line_memory(&line[start..], max)?;
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<Result<Vec<u8>, String>> {
        let mut reader = std::io::BufReader::with_capacity(3, input);
        let mut out = Vec::new();
        loop {
            let mut line = Vec::new();
            match read_bundle_line(&mut reader, &mut line, max) {
                Ok(0) => return out,
                Ok(n) => {
                    assert_eq!(n, line.len());
                    out.push(Ok(line));
                }
                Err(e) => {
                    out.push(Err(e.to_string()));
                    return out;
                }
            }
        }
    }

    #[test]
    fn lines_up_to_the_bound_are_read_whole_with_their_ends() {
        let got = lines(b"abcd\nab\r\nabcd", 4);
        assert_eq!(
            got,
            vec![
                Ok(b"abcd\n".to_vec()),
                Ok(b"ab\r\n".to_vec()),
                Ok(b"abcd".to_vec())
            ]
        );
    }

    #[test]
    fn a_longer_line_is_refused_wherever_it_is() {
        assert_eq!(
            lines(b"abcde\n", 4),
            vec![Err("a line is longer than 4 bytes".into())]
        );
        assert_eq!(
            lines(b"ab\nabcdefgh", 4),
            vec![
                Ok(b"ab\n".to_vec()),
                Err("a line is longer than 4 bytes".into())
            ]
        );
        // The `\r` of a `\r\n` counts, as the server counts it.
        assert_eq!(
            lines(b"abcd\r\n", 4),
            vec![Err("a line is longer than 4 bytes".into())]
        );
    }

    #[test]
    fn an_endless_line_is_not_read_into_memory() {
        // A reader that never ends: only max + 1 bytes are taken from it.
        let mut endless = std::io::BufReader::new(std::io::repeat(b'x'));
        let mut line = Vec::new();
        let result = read_bundle_line(&mut endless, &mut line, 1000);
        assert!(matches!(result, Err(BundleLineError::TooLong(1000))));
        assert_eq!(line.len(), 1001);
    }

    /// A line of many tiny objects is refused before it is parsed; the
    /// longest lines Cairn writes, filling the line limit, are read: a
    /// selection of nothing but `[seq, "type"]` pairs, a step's text.
    #[test]
    fn a_line_that_would_parse_into_too_much_memory_is_refused() {
        let max = 64 * 1024;
        let filled = |item: &str| {
            let mut text = String::from("[");
            while text.len() + 2 * item.len() + 4 < max {
                text.push_str(item);
                text.push(',');
            }
            text.push_str(item);
            text.push_str("]\n");
            text.into_bytes()
        };
        let read = |input: &[u8]| {
            let mut line = Vec::new();
            read_bundle_line(&mut std::io::BufReader::new(input), &mut line, max)
        };
        let tiny = filled(r#"{"":0}"#);
        match read(&tiny) {
            Err(e @ BundleLineError::TooComplex { bound, limit }) => {
                assert_eq!(limit, 64 * max);
                assert!(bound > limit);
                let said = e.refusal("the bundle", 3).unwrap();
                assert!(
                    said.starts_with("line 3 of the bundle could take"),
                    "{said}"
                );
            }
            other => panic!("{other:?}"),
        }
        for fine in [
            filled(r#"[1234567,"erasure"]"#),
            filled(r#""prose of a step""#),
        ] {
            assert_eq!(read(&fine).unwrap(), fine.len());
        }
        // Short lines are not scanned at all.
        assert_eq!(line_memory(b"{{{{", 64 * max), 4);
    }
}
