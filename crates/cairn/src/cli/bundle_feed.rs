//! Feeding a bundle to a [`BundleVerifier`] on every core: lines are read
//! in chunks, prepared ([`cairn_core::bundle::PreparedLine::from_vec`]: parsed, decoded, step
//! digests recomputed) by worker threads, and checked in order on the
//! calling thread, so the verdict is the one a sequential read gives.
//! Memory stays bounded: a few chunks per worker are in flight, each
//! bounded by the capacity of its line buffers (and every line by
//! `--max-bundle-line-bytes`).
//!
//! Every block is freed on the thread that allocated it: checked lines go
//! back to the worker that prepared them, which frees what it decoded and
//! hands the line's buffer back to the reader to read another line into.
//! (With glibc's malloc, a thread freeing another thread's blocks takes
//! that thread's arena lock for each one: the threads spent a third of
//! their time on that lock.)

use anyhow::{Context as _, Result};
use cairn_core::bundle::{BundleVerifier, PreparedLine};
use cairn_store::ops::{BundleLineError, read_bundle_line};
use std::io::BufRead;
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};

/// Lines per chunk handed to a worker ...
const CHUNK_LINES: usize = 256;
/// ... or fewer, once the chunk holds this many bytes: memory in flight is
/// bounded in bytes (a few chunks per worker, each held as read and as
/// prepared), whatever the size of the lines.
const CHUNK_BYTES: usize = 1 << 20;
/// Chunks waiting per worker, each way.
const CHUNKS_IN_FLIGHT: usize = 2;
/// A line buffer is read into again only if it is at most this large: the
/// buffers in circulation stay bounded by the lines in flight, not by the
/// longest line ever read.
const REUSED_BUFFER_BYTES: usize = 64 << 10;
/// The capacity of the buffers kept aside for reuse, at most.
const SPARE_BYTES: usize = 2 * CHUNK_BYTES;

/// Line buffers given back by the workers, kept for reading into again up
/// to [`SPARE_BYTES`] of capacity (the rest are freed): the buffers in
/// circulation stay bounded in bytes whatever the mix of line lengths.
#[derive(Default)]
struct Spares {
    buffers: Vec<Vec<u8>>,
    bytes: usize,
}

impl Spares {
    /// Keeps what the workers gave back, as far as the bound allows.
    fn take_back(&mut self, returned: &Receiver<Vec<Vec<u8>>>) {
        while let Ok(buffers) = returned.try_recv() {
            for buffer in buffers {
                if self.bytes + buffer.capacity() <= SPARE_BYTES {
                    self.bytes += buffer.capacity();
                    self.buffers.push(buffer);
                }
            }
        }
    }

    /// A buffer to read the next line into.
    fn next(&mut self, returned: &Receiver<Vec<Vec<u8>>>) -> Vec<u8> {
        if self.buffers.is_empty() {
            self.take_back(returned);
        }
        match self.buffers.pop() {
            Some(buffer) => {
                self.bytes -= buffer.capacity();
                buffer
            }
            None => Vec::new(),
        }
    }
}

/// Reads `reader` line by line into `verifier` until the end or the first
/// failure; `read` is told the bytes read so far (for a progress bar). A
/// line longer than `max_line` bytes is an error (the verdict stands if
/// verification failed before it).
pub(super) fn feed_bundle(
    reader: impl BufRead + Send,
    max_line: usize,
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
        let mut spent_to_workers: Vec<Sender<Vec<PreparedLine>>> = Vec::new();
        let (spare_tx, spare_rx) = channel::<Vec<Vec<u8>>>();
        for _ in 0..workers {
            let (lines_tx, lines_rx) = sync_channel::<Chunk>(CHUNKS_IN_FLIGHT);
            let (prepared_tx, prepared_rx) = sync_channel(CHUNKS_IN_FLIGHT);
            let (spent_tx, spent_rx) = channel::<Vec<PreparedLine>>();
            to_workers.push(lines_tx);
            from_workers.push(prepared_rx);
            spent_to_workers.push(spent_tx);
            let spare_tx = spare_tx.clone();
            let free = move |spent: Vec<PreparedLine>| {
                let buffers: Vec<Vec<u8>> = spent
                    .into_iter()
                    .filter_map(PreparedLine::into_buffer)
                    .filter(|buffer| buffer.capacity() <= REUSED_BUFFER_BYTES)
                    .collect();
                // The reader may have stopped: then they are freed here.
                let _ = spare_tx.send(buffers);
            };
            scope.spawn(move || {
                for (chunk, bytes) in lines_rx {
                    while let Ok(spent) = spent_rx.try_recv() {
                        free(spent);
                    }
                    let prepared = chunk.into_iter().map(PreparedLine::from_vec).collect();
                    if prepared_tx.send((prepared, bytes)).is_err() {
                        break;
                    }
                }
                // No more chunks: the verifier sees this worker's end, and
                // gives back the last lines it checked.
                drop(prepared_tx);
                for spent in spent_rx {
                    free(spent);
                }
            });
        }
        drop(spare_tx);
        // The reader deals chunks to the workers in turn; the verifier
        // takes their answers in the same turn, so lines stay in order.
        let reader_thread = scope.spawn(move || -> Result<()> {
            let mut reader = reader;
            let mut total = 0u64;
            let mut number = 0u64;
            let mut spares = Spares::default();
            for turn in 0.. {
                spares.take_back(&spare_rx);
                let mut chunk = Vec::with_capacity(CHUNK_LINES);
                // Bounded by the buffers' capacity, not the lines' length:
                // a reused buffer may be larger than the line it holds.
                let mut chunk_bytes = 0usize;
                // The end of the input, or why reading stopped.
                let mut stop: Option<Result<()>> = None;
                while chunk.len() < CHUNK_LINES && chunk_bytes < CHUNK_BYTES {
                    let mut line = spares.next(&spare_rx);
                    number += 1;
                    match read_bundle_line(&mut reader, &mut line, max_line) {
                        Ok(0) => {
                            stop = Some(Ok(()));
                            break;
                        }
                        Ok(n) => total += n as u64,
                        Err(BundleLineError::Io(e)) => {
                            stop = Some(Err(e).context("reading the bundle"));
                            break;
                        }
                        Err(refused) => {
                            let message = refused
                                .refusal("the bundle", number)
                                .unwrap_or_else(|| refused.to_string());
                            stop = Some(Err(crate::cli::usage(message)));
                            break;
                        }
                    }
                    chunk_bytes += line.capacity();
                    chunk.push(line);
                }
                // The lines read before a stop are verified first: a
                // failure among them is the verdict, whatever stopped the
                // reading after them.
                if !chunk.is_empty() {
                    let worker = turn % to_workers.len();
                    if to_workers[worker].send((chunk, total)).is_err() {
                        // The verifier stopped (a failure): nothing more to read.
                        return Ok(());
                    }
                }
                if let Some(stop) = stop {
                    return stop;
                }
            }
            Ok(())
        });
        let mut failed = false;
        'turns: for turn in 0.. {
            let worker = turn % workers;
            let Ok((prepared, bytes)) = from_workers[worker].recv() else {
                break;
            };
            for line in &prepared {
                if !verifier.check_prepared(line) {
                    failed = true;
                    break 'turns;
                }
            }
            // A worker that has stopped leaves its lines to be freed here.
            let _ = spent_to_workers[worker].send(prepared);
            read(bytes);
        }
        // Dropping the receivers stops the workers and the reader.
        drop(from_workers);
        drop(spent_to_workers);
        let reading = reader_thread
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the bundle reader panicked")));
        // A read error past the first failing line does not change the
        // verdict (the reader runs ahead of the verifier).
        if failed { Ok(()) } else { reading }
    })
}
