//! SHA-256 values and the one framing every Cairn hash input uses.
//!
//! Every hash Cairn computes (except the RFC 9162 Merkle leaf and node
//! hashes, whose layout the RFC fixes) is `SHA-256(frame(tag; parts...))`:
//!
//! ```text
//! frame(tag; p1, ..., pn) = u8(len(tag)) || tag || u32be(len(p1)) || p1 || ... || u32be(len(pn)) || pn
//! ```
//!
//! The tag names the purpose (`cairn/v2/chain`, `cairn/v2/field`, ...), so a
//! hash computed for one purpose can never be replayed as another, and every
//! part carries its length, so no two different part lists frame to the same
//! bytes. `docs/FORMAT.md` lists every tag.

/// SHA-256's initial hash value (FIPS 180-4, 5.3.3).
const SHA256_INITIAL_STATE: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

use std::fmt;

/// A SHA-256 output. Displayed and parsed as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Hash(pub [u8; 32]);

impl Hash {
    /// The all-zero hash. Never the output of a real computation; used as
    /// a placeholder only where `docs/FORMAT.md` says so.
    pub const ZERO: Hash = Hash([0; 32]);

    /// SHA-256 of `bytes`, without framing. Used for the RFC 9162 hashes
    /// and for key ids, whose layouts are fixed by their specifications.
    ///
    /// One-shot: whole blocks go to the compression function straight from
    /// `bytes`, and the padded tail is built on the stack. Most of Cairn's
    /// hash inputs are one or two blocks (salts, field commitments, tree
    /// nodes), where the streaming hasher's buffering cost about as much as
    /// the compression itself (docs/PERFORMANCE.md, "Where verification
    /// time goes").
    pub fn sha256(bytes: &[u8]) -> Hash {
        let mut state = SHA256_INITIAL_STATE;
        let (blocks, tail) = bytes.as_chunks::<64>();
        if !blocks.is_empty() {
            sha2::block_api::compress256(&mut state, blocks);
        }
        let mut last = [[0u8; 64]; 2];
        let flat = last.as_flattened_mut();
        flat[..tail.len()].copy_from_slice(tail);
        flat[tail.len()] = 0x80;
        let used = if tail.len() < 56 { 1 } else { 2 };
        let bits = (bytes.len() as u64).wrapping_mul(8);
        flat[used * 64 - 8..used * 64].copy_from_slice(&bits.to_be_bytes());
        sha2::block_api::compress256(&mut state, &last[..used]);
        Hash::of_state(state)
    }

    /// SHA-256 of the bytes in `scratch`, which this pads in place (the
    /// buffer's contents are padding-extended afterwards; callers clear
    /// it before reuse). For hashes framed in a reused buffer (field
    /// commitments, [`framed_hash`]): [`Hash::sha256`] would copy the tail
    /// into a zeroed stack block, a library call per hash that cost about
    /// 3% of a full verification (docs/PERFORMANCE.md, "Where verification
    /// time goes").
    pub fn sha256_padding_in_place(scratch: &mut Vec<u8>) -> Hash {
        let bits = (scratch.len() as u64).wrapping_mul(8);
        let padded = sha256_padded_len(scratch.len());
        scratch.push(0x80);
        scratch.resize(padded - 8, 0);
        scratch.extend_from_slice(&bits.to_be_bytes());
        let (blocks, tail) = scratch.as_chunks::<64>();
        debug_assert!(tail.is_empty());
        let mut state = SHA256_INITIAL_STATE;
        sha2::block_api::compress256(&mut state, blocks);
        Hash::of_state(state)
    }

    /// The hash a final SHA-256 state gives (its words big-endian).
    /// Always inlined: as a call, the chain hash (one block) was 2% slower
    /// in the core bench.
    #[inline(always)]
    fn of_state(state: [u32; 8]) -> Hash {
        let mut out = [0u8; 32];
        for (chunk, word) in out.chunks_exact_mut(4).zip(state) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        Hash(out)
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 64 lowercase hex digits, the one spelling Cairn writes (an
    /// uppercase digit is another spelling of the same bytes, which a
    /// verifier must not accept).
    pub fn from_hex(text: &str) -> Result<Hash, HashParseError> {
        let mut out = [0u8; 32];
        if !decode_lower_hex(text, &mut out) {
            return Err(HashParseError {
                input: text.chars().take(80).collect(),
            });
        }
        Ok(Hash(out))
    }

    /// Standard base64 with padding, as used by RFC 9162 tooling and C2SP
    /// checkpoints.
    pub fn to_base64(&self) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(self.0)
    }

    /// Parses standard base64 of exactly 32 bytes.
    pub fn from_base64(text: &str) -> Result<Hash, HashParseError> {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|_| HashParseError {
                input: text.chars().take(80).collect(),
            })?;
        let array: [u8; 32] = bytes.try_into().map_err(|_| HashParseError {
            input: text.chars().take(80).collect(),
        })?;
        Ok(Hash(array))
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({})", self.to_hex())
    }
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// A string that is not a valid 32-byte hash in the expected encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a 32-byte hash: {input:?}")]
pub struct HashParseError {
    /// The offending input (truncated to 80 characters).
    pub input: String,
}

/// Builder for `SHA-256(frame(tag; parts...))`.
///
/// Parts are fed in order; each is length-prefixed as it is added, so the
/// caller never concatenates by hand. The frame is assembled in one buffer
/// and hashed in a single call: many small `update` calls cost more than
/// the copy on the append hot path.
pub struct Framer {
    buf: Vec<u8>,
}

impl Framer {
    /// Starts a frame with `tag`. Tags are ASCII and shorter than 256 bytes
    /// (all of Cairn's are constants).
    pub fn new(tag: &str) -> Framer {
        Framer::with_capacity(tag, 128)
    }

    /// Starts a frame expecting about `capacity` bytes of parts.
    pub fn with_capacity(tag: &str, capacity: usize) -> Framer {
        debug_assert!(tag.len() < 256 && tag.is_ascii());
        let mut buf = Vec::with_capacity(1 + tag.len() + capacity);
        buf.push(tag.len() as u8);
        buf.extend_from_slice(tag.as_bytes());
        Framer { buf }
    }

    /// Appends one length-prefixed part.
    pub fn part(mut self, bytes: &[u8]) -> Framer {
        self.push(bytes);
        self
    }

    /// Appends one length-prefixed part, in place.
    pub fn push(&mut self, bytes: &[u8]) {
        let len = u32::try_from(bytes.len()).expect("hash parts are smaller than 4 GiB");
        self.buf.extend_from_slice(&len.to_be_bytes());
        self.buf.extend_from_slice(bytes);
    }

    /// Appends a `u64` as an 8-byte big-endian part.
    pub fn u64(self, value: u64) -> Framer {
        self.part(&value.to_be_bytes())
    }

    /// Finishes the frame and returns its SHA-256.
    pub fn finish(self) -> Hash {
        Hash::sha256(&self.buf)
    }
}

/// Hashes `frame(tag; parts...)` using `scratch` as the buffer, so that hot
/// loops allocate nothing.
pub fn framed_hash(scratch: &mut Vec<u8>, tag: &str, parts: &[&[u8]]) -> Hash {
    scratch.clear();
    scratch.push(tag.len() as u8);
    scratch.extend_from_slice(tag.as_bytes());
    for part in parts {
        let len = u32::try_from(part.len()).expect("hash parts are smaller than 4 GiB");
        scratch.extend_from_slice(&len.to_be_bytes());
        scratch.extend_from_slice(part);
    }
    Hash::sha256_padding_in_place(scratch)
}

/// The length of a `len`-byte message once SHA-256 has padded it (the
/// 0x80 byte, zeros, the 8-byte bit length; whole 64-byte blocks): the
/// capacity a buffer given to [`Hash::sha256_padding_in_place`] needs.
pub fn sha256_padded_len(len: usize) -> usize {
    (len + 9).next_multiple_of(64)
}

/// Writes `frame(tag; parts...)` into a byte vector (rather than hashing
/// it): used where the framed bytes are themselves the input of another
/// hash with its own layout, as Merkle leaf data is.
pub fn frame_bytes(tag: &str, parts: &[&[u8]]) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(1 + tag.len() + parts.iter().map(|p| 4 + p.len()).sum::<usize>());
    out.push(tag.len() as u8);
    out.extend_from_slice(tag.as_bytes());
    for part in parts {
        let len = u32::try_from(part.len()).expect("frame parts are smaller than 4 GiB");
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

/// Decodes lowercase hex into exactly `out.len()` bytes; false if `text`
/// is anything else.
pub fn decode_lower_hex(text: &str, out: &mut [u8]) -> bool {
    // A table instead of branches per digit (bundle verification decodes
    // 22 salts and a few hashes per line): 0..=15 for a digit, 0xff for
    // anything else, so one OR over every nibble finds a bad digit.
    const NIBBLES: [u8; 256] = {
        let mut table = [0xff; 256];
        let mut i = 0;
        while i < 10 {
            table[b'0' as usize + i] = i as u8;
            i += 1;
        }
        let mut i = 0;
        while i < 6 {
            table[b'a' as usize + i] = 10 + i as u8;
            i += 1;
        }
        table
    };
    let text = text.as_bytes();
    if text.len() != 2 * out.len() {
        return false;
    }
    let mut bad = 0u8;
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        let high = NIBBLES[usize::from(pair[0])];
        let low = NIBBLES[usize::from(pair[1])];
        bad |= high | low;
        *byte = high << 4 | low;
    }
    bad & 0xf0 == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The one-shot hash is SHA-256, at every length around the block
        /// and padding boundaries and beyond.
        #[test]
        fn one_shot_sha256_is_sha256(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            use sha2::Digest as _;
            let expected: [u8; 32] = sha2::Sha256::digest(&bytes).into();
            proptest::prop_assert_eq!(Hash::sha256(&bytes).0, expected);
        }

        /// Padding in the caller's buffer gives the same hash, whatever
        /// the buffer's spare capacity.
        #[test]
        fn in_place_sha256_is_sha256(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            spare in 0usize..80,
        ) {
            use sha2::Digest as _;
            let expected: [u8; 32] = sha2::Sha256::digest(&bytes).into();
            let mut scratch = Vec::with_capacity(bytes.len() + spare);
            scratch.extend_from_slice(&bytes);
            proptest::prop_assert_eq!(Hash::sha256_padding_in_place(&mut scratch).0, expected);
        }
    }

    #[test]
    fn lowercase_hex_decodes_and_nothing_else_does() {
        let mut out = [0u8; 2];
        assert!(decode_lower_hex("0aff", &mut out));
        assert_eq!(out, [0x0a, 0xff]);
        for bad in ["0AFF", "0af", "0afff", "0ag0", "0a f", "", "é0"] {
            assert!(!decode_lower_hex(bad, &mut out), "{bad}");
        }
        for byte in 0..=255u8 {
            let mut one = [0u8; 1];
            assert!(decode_lower_hex(&format!("{byte:02x}"), &mut one));
            assert_eq!(one[0], byte);
        }
        let is_digit = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
        let chars = (0u8..128).map(char::from).chain(['é', '\u{ff}', '\u{130}']);
        for high in chars.clone() {
            for low in chars.clone() {
                let mut one = [0u8; 1];
                let text = format!("{high}{low}");
                let valid = is_digit(high) && is_digit(low);
                assert_eq!(decode_lower_hex(&text, &mut one), valid, "{text:?}");
            }
        }
    }

    #[test]
    fn one_shot_sha256_at_every_boundary() {
        use sha2::Digest as _;
        // FIPS 180-2 test vector, then every length up to three blocks,
        // one shot and padded in place.
        assert_eq!(
            Hash::sha256(b"abc").to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let data: Vec<u8> = (0..200u8).collect();
        for n in 0..=data.len() {
            let expected: [u8; 32] = sha2::Sha256::digest(&data[..n]).into();
            assert_eq!(Hash::sha256(&data[..n]).0, expected, "length {n}");
            let mut scratch = data[..n].to_vec();
            assert_eq!(
                Hash::sha256_padding_in_place(&mut scratch).0,
                expected,
                "length {n}, padded in place"
            );
        }
    }

    #[test]
    fn framer_matches_frame_bytes() {
        let framed = frame_bytes("t", &[b"ab", b"", b"c"]);
        assert_eq!(
            framed,
            [
                1, b't', 0, 0, 0, 2, b'a', b'b', 0, 0, 0, 0, 0, 0, 0, 1, b'c'
            ]
        );
        let streamed = Framer::new("t").part(b"ab").part(b"").part(b"c").finish();
        assert_eq!(streamed, Hash::sha256(&framed));
    }

    #[test]
    fn framing_is_unambiguous_where_concatenation_is_not() {
        let a = Framer::new("t").part(b"ab").part(b"c").finish();
        let b = Framer::new("t").part(b"a").part(b"bc").finish();
        assert_ne!(a, b);
    }

    #[test]
    fn hex_and_base64_round_trip() {
        let h = Hash::sha256(b"cairn");
        assert_eq!(Hash::from_hex(&h.to_hex()), Ok(h));
        assert_eq!(Hash::from_base64(&h.to_base64()), Ok(h));
        assert!(Hash::from_hex("abc").is_err());
        assert!(Hash::from_base64("AAAA").is_err());
    }
}
