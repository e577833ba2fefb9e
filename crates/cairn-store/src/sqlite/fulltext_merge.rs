//! When the full-text index merges its segments. FTS5 writes each
//! transaction's documents as a new segment and merges a level's segments
//! into one of the next level when enough have gathered (`automerge`); a
//! document is rewritten once per level it climbs. With FTS5's default (4
//! segments) those merges were a quarter of the index thread's time while
//! ingesting, on the same two cores as the sequencer. The index merges
//! only at 16 segments while documents keep coming ([`AUTOMERGE`]: each
//! document climbs half as many levels), and its thread brings every level
//! back under [`USERMERGE`] segments when it has nothing queued, one
//! bounded step at a time ([`merge_step`]): a busy index writes less, an
//! idle one is as compact for searches as FTS5's default leaves it.

use crate::{DbContext, StoreError};
use rusqlite::{Connection, OptionalExtension as _, params};
use std::time::Duration;

/// Segments of one level that FTS5 merges on its own while documents are
/// written (its default is 4).
pub(super) const AUTOMERGE: i64 = 16;

/// Segments of one level past which an idle step merges them.
pub(super) const USERMERGE: i64 = 4;

/// Segments of level 0 at which FTS5 merges the level whole within the
/// write (and then each level above that reached as many): four times
/// [`AUTOMERGE`], FTS5's own ratio. At 16, as its default, every level's
/// merge would become one such whole merge as soon as it started, a write
/// of hundreds of megabytes holding the index's connection at ten
/// million documents; above [`AUTOMERGE`] the incremental merges (each
/// write merges about as many pages as it wrote, times the levels) keep
/// level 0 below it.
pub(super) const CRISISMERGE: i64 = 4 * AUTOMERGE;

/// Leaf pages one idle merge step writes (4 KB each: about 1 MB, some tens
/// of milliseconds): the longest a search's flush, an erasure or a batch's
/// documents wait for the index's connection because of a merge.
const MERGE_PAGES: i64 = 256;

/// How long the index's connection waits for the file's lock, outside
/// idle merges (which never wait: another holder means the file is not
/// idle).
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Sets the merge thresholds of the index's table (stored in the file, so
/// an index written by an older version gets them at its next open). Only
/// reads when they are set already: the open of a sequencing process must
/// not wait for the file's write lock (another process may hold it).
pub(super) fn configure(conn: &Connection) -> Result<(), StoreError> {
    let set = |key: &str, value: i64| -> Result<(), StoreError> {
        let current: Option<i64> = conn
            .query_row("SELECT v FROM steps_fts_config WHERE k = ?1", [key], |r| {
                r.get(0)
            })
            .optional()
            .context("reading the full-text index's merge settings")?;
        if current != Some(value) {
            conn.execute(
                "INSERT INTO steps_fts (steps_fts, rank) VALUES (?1, ?2)",
                params![key, value],
            )
            .context("configuring the full-text index's merges")?;
        }
        Ok(())
    };
    set("automerge", AUTOMERGE)?;
    set("crisismerge", CRISISMERGE)?;
    set("usermerge", USERMERGE)
}

/// One idle merge step: merges up to [`MERGE_PAGES`] pages of the level
/// that has [`USERMERGE`] segments or more (or finishes a merge in
/// progress). Returns whether there was anything to merge. Never waits
/// for the file's lock: `Err` when someone else holds it.
pub(super) fn merge_step(conn: &Connection) -> Result<bool, StoreError> {
    let before = conn.total_changes();
    conn.busy_timeout(Duration::ZERO)
        .context("setting the busy timeout")?;
    let merged = conn.execute(
        "INSERT INTO steps_fts (steps_fts, rank) VALUES ('merge', ?1)",
        [MERGE_PAGES],
    );
    conn.busy_timeout(BUSY_TIMEOUT)
        .context("setting the busy timeout")?;
    merged.context("merging the full-text index's segments")?;
    // FTS5 documents this test: a step with nothing to merge changes at
    // most one row (its structure record).
    Ok(conn.total_changes() - before >= 2)
}
