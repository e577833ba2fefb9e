//! Feeding a bundle to a [`BundleVerifier`] on every core: lines are read
//! in chunks, prepared ([`cairn_core::bundle::PreparedLine::from_vec`]: parsed, decoded, step
//! digests recomputed) by worker threads, and pushed in order on the
//! calling thread, so the verdict is the one a sequential read gives.
//! Memory stays bounded: a few chunks per worker are in flight.

use anyhow::{Context as _, Result};
use cairn_core::bundle::{BundleVerifier, PreparedLine};
use std::io::BufRead;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

/// Lines per chunk handed to a worker ...
const CHUNK_LINES: usize = 256;
/// ... or fewer, once the chunk holds this many bytes: memory in flight is
/// bounded in bytes (a few chunks per worker, each held as read and as
/// prepared), whatever the size of the lines.
const CHUNK_BYTES: usize = 1 << 20;
/// Chunks waiting per worker, each way.
const CHUNKS_IN_FLIGHT: usize = 2;

/// Reads `reader` line by line into `verifier` until the end or the first
/// failure; `read` is told the bytes read so far (for a progress bar).
pub(super) fn feed_bundle(
    reader: impl BufRead + Send,
    verifier: &mut BundleVerifier,
    read: &mut dyn FnMut(u64),
) -> Result<()> {
    let workers = std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(1)
        .clamp(1, 8);
    std::thread::scope(|scope| {
        // A chunk of lines and the bytes read up to its end.
        type Chunk = (Vec<Vec<u8>>, u64);
        let mut to_workers: Vec<SyncSender<Chunk>> = Vec::new();
        let mut from_workers: Vec<Receiver<(Vec<PreparedLine>, u64)>> = Vec::new();
        for _ in 0..workers {
            let (lines_tx, lines_rx) = sync_channel::<Chunk>(CHUNKS_IN_FLIGHT);
            let (prepared_tx, prepared_rx) = sync_channel(CHUNKS_IN_FLIGHT);
            to_workers.push(lines_tx);
            from_workers.push(prepared_rx);
            scope.spawn(move || {
                for (chunk, bytes) in lines_rx {
                    let prepared = chunk.into_iter().map(PreparedLine::from_vec).collect();
                    if prepared_tx.send((prepared, bytes)).is_err() {
                        break;
                    }
                }
            });
        }
        // The reader deals chunks to the workers in turn; the verifier
        // takes their answers in the same turn, so lines stay in order.
        let reader_thread = scope.spawn(move || -> Result<()> {
            let mut reader = reader;
            let mut total = 0u64;
            for turn in 0.. {
                let mut chunk = Vec::with_capacity(CHUNK_LINES);
                let mut chunk_bytes = 0usize;
                let mut ended = false;
                while chunk.len() < CHUNK_LINES && chunk_bytes < CHUNK_BYTES {
                    let mut line = Vec::new();
                    let n = reader
                        .read_until(b'\n', &mut line)
                        .context("reading the bundle")?;
                    if n == 0 {
                        ended = true;
                        break;
                    }
                    total += n as u64;
                    chunk_bytes += n;
                    chunk.push(line);
                }
                if chunk.is_empty() {
                    return Ok(());
                }
                let worker = turn % to_workers.len();
                if to_workers[worker].send((chunk, total)).is_err() {
                    // The verifier stopped (a failure): nothing more to read.
                    return Ok(());
                }
                if ended {
                    return Ok(());
                }
            }
            Ok(())
        });
        let mut failed = false;
        'turns: for turn in 0.. {
            let Ok((prepared, bytes)) = from_workers[turn % workers].recv() else {
                break;
            };
            for line in prepared {
                if !verifier.push_prepared(line) {
                    failed = true;
                    break 'turns;
                }
            }
            read(bytes);
        }
        // Dropping the receivers stops the workers and the reader.
        drop(from_workers);
        let reading = reader_thread
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the bundle reader panicked")));
        // A read error past the first failing line does not change the
        // verdict (the reader runs ahead of the verifier).
        if failed { Ok(()) } else { reading }
    })
}
