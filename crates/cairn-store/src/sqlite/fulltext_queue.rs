//! The full-text index's queue: the documents of committed batches waiting
//! for the index's thread, in order, and how they are taken a chunk at a
//! time ([`Queue::take_chunk`]) and what they count against the backlog
//! (see `fulltext_index.rs` for the thread, the sequencer's waits and the
//! invariants the order keeps).

use super::fulltext_file::org_of;
use cairn_core::Hash;
use std::collections::{BTreeMap, VecDeque};

/// Queued bytes past which the sequencer, before its next batch, waits for
/// the index thread's writes to bring the queue back under (the thread fell
/// behind: memory stays bounded and ingest slows to the index's pace).
pub(super) const BACKLOG_BYTES: usize = 64 << 20;

/// One write of the index (one transaction) takes whole batches up to
/// about this many documents...
pub(super) const CHUNK_DOCS: usize = 4096;
/// ... or bytes: what bounds how long an erasure, a search's flush or a
/// backlogged sequencer waits for the writing connection.
pub(super) const CHUNK_BYTES: usize = 4 << 20;
/// What a queued document weighs beyond its text (its id, its `String`,
/// the allocator's share), so that short documents count what they hold.
pub(super) const DOC_OVERHEAD: usize = 64;
/// What a queued batch weighs beyond its documents, and each org's size
/// it carries.
pub(super) const BATCH_OVERHEAD: usize = 96;
pub(super) const SIZE_OVERHEAD: usize = 64;

/// The bytes a queued document counts for.
pub(super) fn doc_cost(doc: &str) -> usize {
    doc.len() + DOC_OVERHEAD
}

/// The bytes a queued batch (or part) counts for.
pub(super) fn batch_cost(docs: &[(i64, String)], sizes: &[(i64, u64, Hash)]) -> usize {
    BATCH_OVERHEAD
        + sizes.len() * SIZE_OVERHEAD
        + docs.iter().map(|(_, d)| doc_cost(d)).sum::<usize>()
}

/// What one committed batch left for the index: its documents and, per org
/// it wrote to, the committed log size and root once they are in. A batch
/// larger than a chunk is written in parts: a part carries the batch's
/// first documents and no sizes, and is not `whole`.
pub(super) struct QueuedBatch {
    pub(super) docs: Vec<(i64, String)>,
    pub(super) bytes: usize,
    pub(super) sizes: Vec<(i64, u64, Hash)>,
    pub(super) whole: bool,
}

#[derive(Default)]
pub(super) struct Queue {
    /// Committed batches not yet written, oldest first. The index is
    /// written whole batches at a time, in this order, so that the progress
    /// recorded with a write (the sizes of its last batches) never passes a
    /// step whose document is still queued.
    pub(super) batches: VecDeque<QueuedBatch>,
    /// Documents and bytes queued, over every batch.
    pub(super) docs: usize,
    pub(super) bytes: usize,
    /// Batches ever queued, and ever written (or dropped when the index
    /// stopped): a flush writes until `written` reaches what `queued` was
    /// when it started.
    pub(super) queued: u64,
    pub(super) written: u64,
    /// Per org, the number (`queued` once it was queued) of the last batch
    /// that held documents of it: a search of the org waits for the index
    /// to be written that far, not for every org's backlog (a review: one
    /// org's flood of large steps made another org's search, with nothing
    /// of its own queued, wait 8-13 s).
    pub(super) last_of_org: std::collections::HashMap<i64, u64>,
    /// Writes of the index tried so far, and whether the last one failed
    /// (a backlogged sequencer waits for the next, and goes on if it fails).
    pub(super) attempts: u64,
    pub(super) last_write_failed: bool,
    pub(super) stop: bool,
    /// Why the index stopped taking writes (an erasure it could not
    /// apply): it then takes no more documents and answers no search until
    /// the next sequencing open mends it.
    pub(super) failed: Option<String>,
    /// While the index's thread catches up with the log after a sequencing
    /// open (`fulltext_mend::index_chunk`): per org, the log size to index
    /// up to from the log itself, and how many steps that leaves. Queued
    /// batches wait behind it (their progress must not pass a step not yet
    /// indexed); past the backlog's bound they join it instead
    /// ([`Queue::absorb`]): their steps are in the log, to be read again.
    pub(super) catching_up: Option<CatchUp>,
}

/// What is left of a catch-up with the log.
#[derive(Debug, Default)]
pub(super) struct CatchUp {
    /// Per org, the log size to index up to.
    pub(super) targets: BTreeMap<i64, u64>,
    /// Per org, steps left to index, about (for the message an org's
    /// search gets: its own count, never the other orgs').
    pub(super) left: BTreeMap<i64, u64>,
}

impl CatchUp {
    /// Steps left to index for `org`, or for every org if `None`.
    pub(super) fn left_for(&self, org: Option<i64>) -> u64 {
        match org {
            Some(org) => self.left.get(&org).copied().unwrap_or(0),
            None => self.left.values().sum(),
        }
    }
}

impl Queue {
    /// Whether the index thread fell more than the backlog's bound behind.
    pub(super) fn backlogged(&self) -> bool {
        self.bytes >= BACKLOG_BYTES
    }

    /// While a catch-up goes on, whether `org`'s documents are all in the
    /// index even so: it has no catch-up target (nothing to catch up when
    /// the store opened, or its own target reached, absorbed batches
    /// included) and no queued batch wrote to it (nothing queued is
    /// written during a catch-up; an import queues every org). Its
    /// searches need not wait for the other orgs' catch-up. Scans the
    /// queued batches: bounded by the backlog, past which they are
    /// absorbed.
    pub(super) fn complete_while_catching_up(&self, org: i64) -> bool {
        self.catching_up
            .as_ref()
            .is_some_and(|catch_up| !catch_up.targets.contains_key(&org))
            && !self
                .batches
                .iter()
                .any(|batch| batch.sizes.iter().any(|(of, _, _)| *of == org))
    }

    /// Stops the index: what is queued is dropped (the next sequencing
    /// open indexes it from the recorded progress).
    pub(super) fn fail(&mut self, reason: String) {
        self.failed = Some(reason);
        self.batches.clear();
        self.docs = 0;
        self.bytes = 0;
        self.written = self.queued;
    }

    /// While catching up, drops every queued batch into the catch-up: each
    /// org's target grows to the largest size a batch carries, and the
    /// documents are let go (the thread reads them again from the log).
    /// Memory stays bounded however long the catch-up takes, and ingest
    /// never waits for it. False when not catching up.
    pub(super) fn absorb(&mut self) -> bool {
        let Some(catch_up) = self.catching_up.as_mut() else {
            return false;
        };
        for batch in self.batches.drain(..) {
            for (id, _) in &batch.docs {
                *catch_up.left.entry(org_of(*id)).or_insert(0) += 1;
            }
            for (org, size, _) in batch.sizes {
                let target = catch_up.targets.entry(org).or_insert(size);
                *target = (*target).max(size);
            }
        }
        self.docs = 0;
        self.bytes = 0;
        self.written = self.queued;
        true
    }

    /// Takes the oldest whole batches that fit in a chunk of documents
    /// and bytes; if the oldest alone does not fit, its first documents as
    /// a part (at least one document).
    pub(super) fn take_chunk(&mut self) -> Vec<QueuedBatch> {
        let (mut docs, mut bytes) = (0, 0);
        let mut chunk = Vec::new();
        while let Some(batch) = self.batches.front_mut() {
            let fits = docs + batch.docs.len() <= CHUNK_DOCS && bytes + batch.bytes <= CHUNK_BYTES;
            if !fits && !chunk.is_empty() {
                break;
            }
            // A part (put back after a failed write) was cut to a chunk
            // already, give or take its own overhead or one document larger
            // than a chunk: it is taken whole, never cut again, so that only
            // the oldest batch is ever a part.
            if fits || !batch.whole {
                docs += batch.docs.len();
                bytes += batch.bytes;
                chunk.extend(self.batches.pop_front());
                continue;
            }
            let (mut n, mut part_bytes) = (0, 0);
            while n < batch.docs.len()
                && n < CHUNK_DOCS
                && (n == 0 || part_bytes + doc_cost(&batch.docs[n].1) <= CHUNK_BYTES)
            {
                part_bytes += doc_cost(&batch.docs[n].1);
                n += 1;
            }
            let part: Vec<(i64, String)> = batch.docs.drain(..n).collect();
            // The rest stays queued as the batch; the part counts as one
            // more batch if it is put back.
            batch.bytes -= part_bytes;
            docs += part.len();
            bytes += part_bytes;
            chunk.push(QueuedBatch {
                bytes: batch_cost(&part, &[]),
                docs: part,
                sizes: Vec::new(),
                whole: false,
            });
            break;
        }
        self.docs -= docs;
        self.bytes -= bytes;
        chunk
    }

    /// Puts a chunk that could not be written back in front of what came
    /// since, in order.
    pub(super) fn put_back(&mut self, chunk: Vec<QueuedBatch>) {
        if self.failed.is_some() {
            // Stopped meanwhile: the next sequencing open indexes them.
            return;
        }
        for batch in chunk.into_iter().rev() {
            self.docs += batch.docs.len();
            self.bytes += batch.bytes;
            self.batches.push_front(batch);
        }
    }
}
