//! The background embedder's work: take queued steps, embed their text,
//! store the vectors. The server runs [`embed_queued`] in a loop beside
//! ingest (ingest only queues: it never waits for a model); `cairn
//! reindex` queues every embedded step again and runs it until the queue
//! is empty.

use crate::embed::{EmbedError, Embedder};
use crate::{LedgerStore, StoreError};

/// Why a round of embedding stopped.
#[derive(Debug, thiserror::Error)]
pub enum EmbedQueueError {
    /// The embedder failed: the steps stay queued (on PostgreSQL, until
    /// their lease expires) and are tried again.
    #[error("the embedder failed: {0}")]
    Embedder(#[from] EmbedError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Embeds up to `batch` queued steps with `embedder` and stores their
/// vectors; returns how many queue entries it settled (0: the queue is
/// empty).
pub fn embed_queued(
    store: &dyn LedgerStore,
    embedder: &dyn Embedder,
    batch: usize,
) -> Result<usize, EmbedQueueError> {
    let pending = store.claim_embeddings(batch.max(1))?;
    if pending.is_empty() {
        return Ok(0);
    }
    let texts: Vec<&str> = pending.iter().filter_map(|p| p.text.as_deref()).collect();
    let embedded = embedder.embed(&texts).and_then(|vectors| {
        if vectors.len() == texts.len() {
            Ok(vectors)
        } else {
            Err(EmbedError(format!(
                "{} vectors for {} texts",
                vectors.len(),
                texts.len()
            )))
        }
    });
    let mut vectors = match embedded {
        Ok(vectors) => vectors.into_iter(),
        Err(e) => {
            let ids: Vec<i64> = pending.iter().map(|p| p.id).collect();
            store.release_embeddings(&ids)?;
            return Err(e.into());
        }
    };
    let done: Vec<_> = pending
        .into_iter()
        .map(|p| {
            let vector = p.text.as_ref().and_then(|_| vectors.next());
            (p, vector)
        })
        .collect();
    store.store_embeddings(embedder.id(), &done)?;
    Ok(done.len())
}

/// Embeds until the queue is empty; returns how many entries it settled.
/// `progress` hears the running total after each batch.
pub fn drain_queue(
    store: &dyn LedgerStore,
    embedder: &dyn Embedder,
    batch: usize,
    progress: &mut dyn FnMut(u64),
) -> Result<u64, EmbedQueueError> {
    let mut total = 0u64;
    loop {
        let settled = embed_queued(store, embedder, batch)?;
        if settled == 0 {
            return Ok(total);
        }
        total += settled as u64;
        progress(total);
    }
}
