//! When the full-text index merges its segments. FTS5 writes each
//! transaction's documents as a new segment and merges a level's segments
//! into one of the next level when enough have gathered (`automerge`); a
//! document is rewritten once per level it climbs. With FTS5's default (4
//! segments) those merges were a quarter of the index thread's time while
//! ingesting, on the same two cores as the sequencer. The index merges
//! only at 16 segments while documents keep coming ([`AUTOMERGE`]: each
//! document climbs half as many levels), and its thread brings every level
//! back under [`USERMERGE`] segments once it has nothing queued, one step
//! at a time ([`merge_step`]) after every write (a chunk, an erasure, a
//! catch-up's chunk, a search's flush): a busy index writes less, an idle
//! one is as compact for searches as FTS5's defaults leave it.

use super::fulltext_file::{BUSY_TIMEOUT, orgs_with_tables, table};
use crate::{DbContext, StoreError};
use rusqlite::{Connection, params};
use std::time::Duration;

/// Segments of one level that FTS5 merges on its own while documents are
/// written (its default is 4).
pub(super) const AUTOMERGE: i64 = 16;

/// Segments of one level past which an idle step merges them.
pub(super) const USERMERGE: i64 = 4;

/// Segments of level 0 at which FTS5 merges the level whole within the
/// write (and then each level above that reached as many): four times
/// [`AUTOMERGE`], FTS5's own ratio. At 16, its default, every level's
/// merge would become one such whole merge as soon as it started, a write
/// of hundreds of megabytes holding the index's connection at ten
/// million documents; above [`AUTOMERGE`] the incremental merges keep
/// level 0 below it while documents come, and idle steps when they stop.
pub(super) const CRISISMERGE: i64 = 4 * AUTOMERGE;

/// The thresholds each org's table is given, by FTS5's option names.
const THRESHOLDS: [(&str, i64); 3] = [
    ("automerge", AUTOMERGE),
    ("crisismerge", CRISISMERGE),
    ("usermerge", USERMERGE),
];

/// Leaf pages one idle merge step asks FTS5 to write (4 KB each: about 1
/// MB). FTS5 checks the budget between terms, so a step writes at least
/// one term's whole postings in the segments it merges: a common word's
/// at millions of documents can be tens of megabytes. A search's flush,
/// an erasure or a backlogged batch waits for the step in progress
/// (`slowest_index_chunk_micros` counts steps with the chunks).
#[cfg(not(test))]
const MERGE_PAGES: i64 = 256;
/// Small in tests, so that a merge takes several steps.
#[cfg(test)]
const MERGE_PAGES: i64 = 2;

/// Sets the merge thresholds of org `org`'s table of documents, kept in
/// the file (so that a table written by an older version gets them at the
/// next open).
/// Never waits for the file's lock and never fails the open: if another
/// program holds the lock, or the settings cannot be written, the index
/// keeps what it has (FTS5's defaults at worst: correct, only more merge
/// work) until a later open. Reads first, and writes only what differs.
pub(super) fn configure(conn: &Connection, org: i64) {
    // Best effort by design (see above): an error leaves the settings as
    // they were, which every search and write handles.
    let _ = write_settings(conn, org);
}

fn write_settings(conn: &Connection, org: i64) -> rusqlite::Result<()> {
    // The shadow table of settings: the table's name with `_config`.
    let config = format!("{}_config\"", table(org).trim_end_matches('"'));
    let mut set = 0;
    for (key, value) in THRESHOLDS {
        let kept: bool = conn.query_row(
            &format!("SELECT EXISTS (SELECT 1 FROM {config} WHERE k = ?1 AND v = ?2)"),
            params![key, value],
            |r| r.get(0),
        )?;
        set += usize::from(kept);
    }
    if set == THRESHOLDS.len() {
        return Ok(());
    }
    without_waiting(conn, || {
        let tx = conn.unchecked_transaction()?;
        set_thresholds(&tx, org)?;
        tx.commit()
    })
}

/// Writes the thresholds into org `org`'s table (within the caller's
/// transaction: a table just created gets them with its first documents).
pub(super) fn set_thresholds(conn: &Connection, org: i64) -> rusqlite::Result<()> {
    let table = table(org);
    for (key, value) in THRESHOLDS {
        conn.execute(
            &format!("INSERT INTO {table} ({table}, rank) VALUES (?1, ?2)"),
            params![key, value],
        )?;
    }
    Ok(())
}

/// Runs `write` on `conn` with no busy timeout (`SQLITE_BUSY` at once if
/// another connection holds the file's write lock), then puts the
/// index's usual timeout back, whatever `write` returned.
fn without_waiting<T>(
    conn: &Connection,
    write: impl FnOnce() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    conn.busy_timeout(Duration::ZERO)?;
    let written = write();
    conn.busy_timeout(BUSY_TIMEOUT)?;
    written
}

/// One idle merge step: merges about [`MERGE_PAGES`] pages of the level
/// that has [`USERMERGE`] segments or more (or continues a merge in
/// progress, or rewrites a level that erasures left a tenth tombstones)
/// in the first org's table (by number) that has anything to merge.
/// Returns whether one had. Never waits for the file's lock: `Err` when
/// someone else holds it.
pub(super) fn merge_step(conn: &Connection) -> Result<bool, StoreError> {
    for org in orgs_with_tables(conn)? {
        let table = table(org);
        let before = conn.total_changes();
        without_waiting(conn, || {
            conn.execute(
                &format!("INSERT INTO {table} ({table}, rank) VALUES ('merge', ?1)"),
                [MERGE_PAGES],
            )
        })
        .context("merging the full-text index's segments")?;
        // FTS5's documented test: the command itself counts one change; a
        // step that merged anything also rewrote the index's structure
        // record and pages.
        if conn.total_changes() - before >= 2 {
            return Ok(true);
        }
    }
    Ok(false)
}
