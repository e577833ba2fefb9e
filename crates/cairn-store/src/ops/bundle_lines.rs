//! Reading a bundle from a file or a stream line by line, each line
//! bounded: a bundle is outside bytes (an auditor verifies what a courier
//! brought), and a "line" of gigabytes without a line end must not be read
//! into memory whole.

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

/// Why a line was not read.
#[derive(Debug, thiserror::Error)]
pub enum BundleLineError {
    /// The line has more than the given number of bytes before its `\n`.
    #[error("a line is longer than {0} bytes")]
    TooLong(usize),
    /// Reading failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Appends the next line of `reader` to `line`, with its line end if it
/// has one, and returns the bytes read (0 at the end). A line with more
/// than `max` bytes before its `\n` is an error, after reading at most
/// `max + 1` of its bytes.
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
}
