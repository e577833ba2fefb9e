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
//!
//! An [`Embedder`] is anything that turns texts into vectors: this word
//! hash, a sentence-transformers model run in process
//! (`sentence_model`, feature `model`) or an embedding service (the
//! server's `--embedding-endpoint`). Each stored vector is tagged with its
//! embedder's [`Embedder::id`], and semantic search compares a query only
//! with vectors of the same embedder: after a model change the old vectors
//! are not found until `cairn reindex` re-embeds them.

use cairn_core::kind::StepKind;
use cairn_core::record::Step;

/// Dimensions of a word-hash vector.
pub const DIMENSIONS: usize = 256;

/// The built-in embedder's description, as search results report it: a
/// lexical word-hash, not a model of meaning.
pub const EMBEDDER_NAME: &str = "word-hash (built-in, lexical: no embedding model configured)";

/// The built-in embedder's [`Embedder::id`] (vectors written before
/// embedders were tagged carry it too).
pub const WORD_HASH_ID: &str = "word-hash-256";

/// Characters of a step's text that are embedded (models truncate to
/// their own token limit; this bounds what is sent and tokenized).
pub const MAX_EMBEDDED_CHARS: usize = 8192;

/// Failed attempts of a step on its own (the embedder refused it while
/// embedding others) after which it is parked.
pub const MAX_ATTEMPTS: i64 = 5;
// The claim queries and the queue's partial index (`schema.sql`,
// `pg_schema.sql`, `pg::schema::ADDITIONS`) write `attempts < 5` out, so
// that the databases can match the index to the query.
const _: () = assert!(MAX_ATTEMPTS == 5, "update the literal 5 in the queue's SQL");

/// Why texts could not be embedded.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct EmbedError(pub String);

/// Turns texts into vectors. Implementations are blocking: callers run
/// them off the async executor.
pub trait Embedder: Send + Sync + std::fmt::Debug {
    /// A stable identifier stored with each vector (a changed model must
    /// have a different one).
    fn id(&self) -> &str;
    /// What search answers and `cairn serve` say ranked by meaning.
    fn description(&self) -> &str;
    /// The vectors of `texts`, in order, each L2-normalised.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// Whether embedding takes this machine's CPU for long (a model run in
    /// process): the background embedder then runs it at the lowest
    /// priority.
    fn in_process(&self) -> bool {
        false
    }
    /// Whether its vectors stand for words, not meaning (the built-in
    /// word-hash, [`words`]): hybrid search then adds a step full text did
    /// not find only if it shares a word with the query (its other
    /// neighbours share hash buckets or letter triples, not words).
    fn lexical(&self) -> bool {
        false
    }
}

/// The built-in lexical embedder (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct WordHash;

impl Embedder for WordHash {
    fn id(&self) -> &str {
        WORD_HASH_ID
    }

    fn description(&self) -> &str {
        EMBEDDER_NAME
    }

    fn lexical(&self) -> bool {
        true
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| embed(t).to_vec()).collect())
    }
}

/// The text of a step that is embedded: its content, then the words of
/// its input, output and metadata (as full-text search reads them), at
/// most [`MAX_EMBEDDED_CHARS`] characters; `None` if there is none.
pub fn text_of(step: &Step) -> Option<String> {
    text_of_parts(crate::fulltext::display_text(step))
}

/// [`text_of`] from a step's display text.
pub(crate) fn text_of_parts(text: String) -> Option<String> {
    let text = match text.char_indices().nth(MAX_EMBEDDED_CHARS) {
        Some((end, _)) => text[..end].to_owned(),
        None => text,
    };
    (!text.trim().is_empty()).then_some(text)
}

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
    for word in words(text) {
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

/// The words the word-hash embedder reads in `text`: runs of letters and
/// digits, lower-cased.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// Cosine similarity of two normalised vectors (their dot product).
pub fn similarity(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent sums: a single running sum is one long chain of
    // dependent float additions the compiler may not reorder, so it would
    // not use SIMD; this runs about five times faster on 384 dimensions.
    let mut lanes = [0f32; 8];
    let (a_chunks, b_chunks) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for lane in 0..8 {
            lanes[lane] += x[lane] * y[lane];
        }
    }
    lanes.iter().sum::<f32>() + tail
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

/// The text to embed of a queued step, from its stored columns (payloads
/// as stored JSON); `None` if it was erased or has no text.
pub(crate) fn pending_text(
    erased: bool,
    content: Option<String>,
    payloads: [Option<String>; 3],
) -> Option<String> {
    if erased {
        return None;
    }
    text_of_parts(crate::fulltext::stored_display_text(
        content.as_deref(),
        payloads.each_ref().map(Option::as_deref),
    ))
}

/// Which queued steps a claim of `limit` takes: orgs take turns, so that
/// one org's burst of queued steps delays no other org's by more than a
/// share of each batch. The orgs are taken in rotation from position
/// `turn` ([`next_turn`]: with more orgs than `limit`, each claim serves
/// the next `limit` of them, and every org is served within about orgs /
/// `limit` claims); among the orgs a claim serves, turn r takes each
/// one's r-th oldest claimable step, and the batch is the first `limit` of
/// turn 1, then turn 2, and so on. `oldest(org, count)` gives the org's
/// `count` oldest claimable steps as (n, id), oldest first. Returns their
/// ids in queue order. Each org is asked for its oldest step until `limit`
/// orgs have one; if fewer than `limit` have, each of those is asked once
/// more for `limit` steps (at most `limit` squared rows), so that a batch
/// is filled from the orgs that have more.
pub(crate) fn take_turns<E>(
    orgs: &[i64],
    limit: usize,
    turn: usize,
    mut oldest: impl FnMut(i64, usize) -> Result<Vec<(i64, i64)>, E>,
) -> Result<Vec<i64>, E> {
    if limit == 0 || orgs.is_empty() {
        return Ok(Vec::new());
    }
    let first = turn % orgs.len();
    let mut heads = Vec::new();
    for &org in orgs[first..].iter().chain(&orgs[..first]) {
        if heads.len() == limit {
            break;
        }
        if let Some(&head) = oldest(org, 1)?.first() {
            heads.push((org, head));
        }
    }
    // (turn, n, id)
    let mut taken: Vec<(usize, i64, i64)> = Vec::new();
    if heads.len() >= limit {
        taken.extend(heads.iter().map(|&(_, (n, id))| (0, n, id)));
    } else {
        for &(org, head) in &heads {
            let steps = if limit > 1 {
                oldest(org, limit)?
            } else {
                vec![head]
            };
            taken.extend(
                steps
                    .into_iter()
                    .enumerate()
                    .map(|(turn, (n, id))| (turn, n, id)),
            );
        }
    }
    taken.sort_unstable();
    taken.truncate(limit);
    // Handed out in queue order, as before turns were taken.
    taken.sort_unstable_by_key(|&(_, n, _)| n);
    Ok(taken.into_iter().map(|(_, _, id)| id).collect())
}

/// Where this process's next claim starts in the rotation of orgs
/// ([`take_turns`]): each claim moves it on by what it may take.
pub(crate) fn next_turn(limit: usize) -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    NEXT.fetch_add(limit.max(1), std::sync::atomic::Ordering::Relaxed)
}

/// Whether `cairn reindex` queues a step: it has a vector, or seed 000's
/// rule selects it (by its stored kind and trace id) at `rate`.
pub(crate) fn selected(has_vector: bool, kind: Option<&str>, trace_id: &str, rate: f64) -> bool {
    has_vector
        || kind
            .and_then(StepKind::parse)
            .is_some_and(|kind| should_embed(kind, trace_id, rate))
}

/// Vector to bytes (little-endian f32) and back.
pub fn to_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Bytes to a vector; `None` if they are not a whole, non-empty number of
/// f32s.
pub fn from_bytes(bytes: &[u8]) -> Option<Vec<f32>> {
    (!bytes.is_empty() && bytes.len().is_multiple_of(4)).then(|| {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    })
}

/// The best `limit` matches of a stream of scored steps, in bounded
/// memory: both backends rank their stored vectors with it.
pub(crate) struct TopK<K = u64> {
    limit: usize,
    best: Vec<(K, f32)>,
}

impl<K: Copy> TopK<K> {
    /// Keeps the `limit` best.
    pub(crate) fn new(limit: usize) -> TopK<K> {
        TopK {
            limit,
            best: Vec::new(),
        }
    }

    /// Scores a stored vector against `query` (skipped if it does not
    /// decode to a vector of the query's length).
    pub(crate) fn offer(&mut self, key: K, query: &[f32], stored: &[u8]) {
        if stored.len() != query.len() * 4 {
            return;
        }
        let Some(vector) = from_bytes(stored) else {
            return;
        };
        self.offer_score(key, similarity(query, &vector));
    }

    /// Offers a scored key.
    pub(crate) fn offer_score(&mut self, key: K, score: f32) {
        self.best.push((key, score));
        if self.best.len() > self.limit.saturating_mul(4).max(256) {
            self.trim();
        }
    }

    fn trim(&mut self) {
        self.best.sort_by(|a, b| b.1.total_cmp(&a.1));
        self.best.truncate(self.limit);
    }

    /// The best matches, best first.
    pub(crate) fn finish(mut self) -> Vec<(K, f32)> {
        self.trim();
        self.best
    }
}

#[cfg(test)]
mod tests {
    /// Orgs take turns: a burst of one org waits behind one step of each
    /// other org per turn, and within a turn the older step goes first.
    #[test]
    fn orgs_take_turns_in_a_claim() {
        // org 1: n = 1..=100 (a burst); org 2: n = 101, 102; org 3: n = 50.
        let queue = |org: i64| -> Vec<(i64, i64)> {
            match org {
                1 => (1..=100).map(|n| (n, 1000 + n)).collect(),
                2 => vec![(101, 2101), (102, 2102)],
                3 => vec![(50, 3050)],
                _ => vec![],
            }
        };
        let mut asked = 0;
        let mut claim = |limit| {
            take_turns(&[1, 2, 3, 4], limit, 0, |org, count| {
                asked += 1;
                Ok::<_, ()>(queue(org).into_iter().take(count).collect())
            })
            .unwrap()
        };
        assert_eq!(claim(3), vec![1001, 3050, 2101]);
        // Two of three orgs with steps: the first two in the rotation.
        assert_eq!(claim(2), vec![1001, 2101]);
        assert_eq!(claim(5), vec![1001, 1002, 3050, 2101, 2102]);
        assert_eq!(
            claim(8),
            vec![1001, 1002, 1003, 1004, 1005, 3050, 2101, 2102]
        );
        assert_eq!(claim(0), Vec::<i64>::new());
        assert!(asked > 0);
        // No org: nothing, and no division by zero.
        assert!(
            take_turns(&[], 8, 3, |_, _| Ok::<_, ()>(vec![]))
                .unwrap()
                .is_empty()
        );
    }

    /// With more orgs than a claim takes, orgs are served in rotation: an
    /// org that queued last, behind 39 busy orgs, is served within ten
    /// claims of four (by age alone it would wait for all of them).
    #[test]
    fn with_more_orgs_than_a_claim_orgs_are_served_in_rotation() {
        let orgs: Vec<i64> = (1..=40).collect();
        // Org k's steps: n = k * 1000 + i (the last org's are the newest).
        let oldest = |org: i64, count: usize| -> Result<Vec<(i64, i64)>, ()> {
            Ok((0..count as i64)
                .map(|i| (org * 1000 + i, org * 1000 + i))
                .collect())
        };
        let mut served = std::collections::BTreeSet::new();
        for claim in 0..10 {
            for id in take_turns(&orgs, 4, claim * 4, oldest).unwrap() {
                served.insert(id / 1000);
            }
        }
        assert_eq!(served.len(), 40, "{served:?}");
    }

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
