//! Embeddings for semantic search, and seed 000's sampling rule.
//!
//! The built-in embedder maps text to a 256-dimension vector by feature
//! hashing: each lower-cased word and each character trigram of a word adds
//! ±1 to one dimension (the bucket and the sign come from the feature's
//! FNV-1a hash), and the vector is L2-normalised, so the dot product of two
//! vectors is their cosine similarity. It is lexical (shared words and word
//! pieces), not a neural model: nothing can be downloaded at run time, and
//! this keeps search useful and reproducible. Vectors are derived data,
//! outside the ledger: erasing a step deletes its vector.

use cairn_core::kind::StepKind;

/// Dimensions of a vector.
pub const DIMENSIONS: usize = 256;

/// The built-in embedder's name, as search results report it: a lexical
/// word-hash, not a model of meaning.
pub const EMBEDDER_NAME: &str = "word-hash (built-in, lexical: no embedding model configured)";

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

fn add_feature(vector: &mut [f32; DIMENSIONS], feature: &[u8], weight: f32) {
    let hash = fnv1a(feature);
    let bucket = (hash % DIMENSIONS as u64) as usize;
    let sign = if hash >> 63 == 0 { 1.0 } else { -1.0 };
    vector[bucket] += sign * weight;
}

/// The vector of a text (all zeros for a text without words).
pub fn embed(text: &str) -> [f32; DIMENSIONS] {
    let mut vector = [0f32; DIMENSIONS];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
    {
        add_feature(&mut vector, word.as_bytes(), 1.0);
        let chars: Vec<char> = format!("#{word}#").chars().collect();
        for window in chars.windows(3) {
            let trigram: String = window.iter().collect();
            add_feature(&mut vector, trigram.as_bytes(), 0.5);
        }
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in &mut vector {
            *x /= norm;
        }
    }
    vector
}

/// Cosine similarity of two normalised vectors.
pub fn similarity(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Seed 000's rule: decision, action, error, correction and final answer
/// are always embedded; other steps with probability `rate`, decided by the
/// trace id's hash so that the same step is always decided the same way.
pub fn should_embed(kind: StepKind, trace_id: &str, rate: f64) -> bool {
    if kind.always_embedded() {
        return true;
    }
    let fraction = cairn_core::Hash::sha256(trace_id.as_bytes()).0[..8]
        .iter()
        .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)) as f64
        / u64::MAX as f64;
    fraction < rate
}

/// Vector to bytes (little-endian f32) and back.
pub fn to_bytes(vector: &[f32; DIMENSIONS]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Bytes to a vector; `None` if the length is wrong.
pub fn from_bytes(bytes: &[u8]) -> Option<Vec<f32>> {
    (bytes.len() == DIMENSIONS * 4).then(|| {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    })
}

/// The best `limit` matches of a stream of scored steps, in bounded
/// memory: both backends rank their stored vectors with it.
pub(crate) struct TopK {
    limit: usize,
    best: Vec<(u64, f32)>,
}

impl TopK {
    /// Keeps the `limit` best.
    pub(crate) fn new(limit: usize) -> TopK {
        TopK {
            limit,
            best: Vec::new(),
        }
    }

    /// Scores a stored vector (skipped if it does not decode) against
    /// `query`.
    pub(crate) fn offer(&mut self, seq: u64, query: &[f32], stored: &[u8]) {
        let Some(vector) = from_bytes(stored) else {
            return;
        };
        self.best.push((seq, similarity(query, &vector)));
        if self.best.len() > self.limit.saturating_mul(4).max(256) {
            self.trim();
        }
    }

    fn trim(&mut self) {
        self.best.sort_by(|a, b| b.1.total_cmp(&a.1));
        self.best.truncate(self.limit);
    }

    /// The best matches, best first.
    pub(crate) fn finish(mut self) -> Vec<(u64, f32)> {
        self.trim();
        self.best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn related_texts_are_closer_than_unrelated_ones() {
        let pricing = embed("We decided to raise the enterprise price by 5%");
        let related = embed("decision about enterprise pricing");
        let unrelated = embed("the weather in Lisbon is sunny");
        assert!(similarity(&pricing, &related) > similarity(&pricing, &unrelated) + 0.1);
        assert!((similarity(&pricing, &pricing) - 1.0).abs() < 1e-5);
        assert_eq!(embed("  ... "), [0f32; DIMENSIONS]);
        assert_eq!(from_bytes(&to_bytes(&pricing)).unwrap(), pricing.to_vec());
    }

    #[test]
    fn sampling_follows_seed_000() {
        for kind in [
            StepKind::Decision,
            StepKind::Action,
            StepKind::Error,
            StepKind::Correction,
            StepKind::FinalAnswer,
        ] {
            assert!(should_embed(kind, "t", 0.0));
        }
        let sampled = (0..10_000)
            .filter(|i| should_embed(StepKind::Reasoning, &format!("trace-{i}"), 0.1))
            .count();
        assert!((800..1200).contains(&sampled), "{sampled}");
        assert_eq!(
            should_embed(StepKind::Reasoning, "x", 0.3),
            should_embed(StepKind::Reasoning, "x", 0.3)
        );
        assert!(!should_embed(StepKind::Observation, "trace-1", 0.0));
        assert!(should_embed(StepKind::Observation, "trace-1", 1.0));
    }
}
