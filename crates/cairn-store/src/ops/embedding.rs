//! The background embedder's work: take queued steps, embed their text,
//! store the vectors. The server runs [`embed_queued`] in a loop beside
//! ingest (ingest only queues: it never waits for a model); `cairn
//! reindex` queues every embedded step again and runs it until the queue
//! is empty.
//!
//! When the embedder refuses a batch, a short probe text tells whether it
//! is down (then nothing is counted, the steps stay queued and the caller
//! backs off) or refuses these steps: then each is tried alone, and each
//! refused alone counts a failed attempt (after
//! [`crate::embed::MAX_ATTEMPTS`] a step is parked, so a step a service
//! cannot take never holds up the rest, even alone at the queue's head).

use crate::embed::{EmbedError, Embedder};
use crate::{LedgerStore, PendingEmbedding, StoreError};

/// Why a round of embedding stopped.
#[derive(Debug, thiserror::Error)]
pub enum EmbedQueueError {
    /// The embedder failed on every step of the batch: they stay queued
    /// and are tried again.
    #[error("the embedder failed: {0}")]
    Embedder(#[from] EmbedError),
    /// The store's queue is for another embedder (`cairn serve` or `cairn
    /// reindex` chose it): this one takes nothing.
    #[error(
        "the store's embedder is {chosen}, not {ours}: this process leaves the queue to it (restart the servers with one embedder, or run cairn reindex with this one)"
    )]
    OtherEmbedder {
        /// The store's.
        chosen: String,
        /// This process's.
        ours: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A text any working embedder embeds.
const PROBE: &str = "cairn";

/// What a round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmbedRound {
    /// Queue entries settled (embedded, or dropped as erased or empty); 0
    /// when the store kept them queued (rows another transaction held, or
    /// the store's embedder changed meanwhile).
    pub settled: usize,
    /// Steps the embedder refused on their own (an attempt counted).
    pub refused: usize,
}

/// Embeds up to `batch` queued steps with `embedder` and stores their
/// vectors (a round of `settled` 0 and `refused` 0: nothing to take).
pub fn embed_queued(
    store: &dyn LedgerStore,
    embedder: &dyn Embedder,
    batch: usize,
) -> Result<EmbedRound, EmbedQueueError> {
    if let Some(chosen) = store.chosen_embedder()?
        && chosen != embedder.id()
    {
        return Err(EmbedQueueError::OtherEmbedder {
            chosen,
            ours: embedder.id().to_owned(),
        });
    }
    let pending = store.claim_embeddings(batch.max(1))?;
    if pending.is_empty() {
        return Ok(EmbedRound::default());
    }
    let ids: Vec<i64> = pending.iter().map(|p| p.id).collect();
    let outcome = embed_and_store(store, embedder, pending);
    if outcome.is_err() {
        // Back to the queue now rather than when the lease expires.
        let _ = store.release_embeddings(&ids, false);
    }
    outcome
}

fn embed_and_store(
    store: &dyn LedgerStore,
    embedder: &dyn Embedder,
    pending: Vec<PendingEmbedding>,
) -> Result<EmbedRound, EmbedQueueError> {
    let texts: Vec<&str> = pending.iter().filter_map(|p| p.text.as_deref()).collect();
    let vectors: Vec<Option<Vec<f32>>> = match embed_checked(embedder, &texts) {
        Ok(vectors) => vectors.into_iter().map(Some).collect(),
        Err(e) => {
            // Down, or refusing these texts? A down service is asked once
            // more, not once per step.
            if embed_checked(embedder, &[PROBE]).is_err() {
                return Err(e.into());
            }
            texts
                .iter()
                .map(|text| {
                    embed_checked(embedder, &[text])
                        .ok()
                        .and_then(|mut v| v.pop())
                })
                .collect()
        }
    };
    let mut vectors = vectors.into_iter();
    let mut done = Vec::with_capacity(pending.len());
    let mut refused = Vec::new();
    for p in pending {
        match p.text {
            Some(_) => match vectors.next().flatten() {
                Some(vector) => done.push((p, Some(vector))),
                None => refused.push(p.id),
            },
            None => done.push((p, None)),
        }
    }
    let settled = store.store_embeddings(embedder.id(), &done)?;
    if !refused.is_empty() {
        store.release_embeddings(&refused, true)?;
    }
    Ok(EmbedRound {
        settled,
        refused: refused.len(),
    })
}

/// The embedder's vectors, one per text.
fn embed_checked(embedder: &dyn Embedder, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
    let vectors = embedder.embed(texts)?;
    if vectors.len() == texts.len() {
        Ok(vectors)
    } else {
        Err(EmbedError(format!(
            "{} vectors for {} texts",
            vectors.len(),
            texts.len()
        )))
    }
}

/// Embeds until nothing is left to take; returns how many entries it
/// settled. `progress` hears the running total after each round.
pub fn drain_queue(
    store: &dyn LedgerStore,
    embedder: &dyn Embedder,
    batch: usize,
    progress: &mut dyn FnMut(u64),
) -> Result<u64, EmbedQueueError> {
    let mut total = 0u64;
    loop {
        let round = embed_queued(store, embedder, batch)?;
        if round.settled == 0 && round.refused == 0 {
            return Ok(total);
        }
        total += round.settled as u64;
        progress(total);
    }
}
