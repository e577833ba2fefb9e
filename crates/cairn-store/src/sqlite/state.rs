//! Rebuilding the writer's in-memory sequencing state from the tables, at
//! open and after an import: each org's frontier (checked against its
//! latest signed checkpoint and the rows after it) and last logged time.
//! Sessions are not loaded here but on first write
//! (`rows::load_session`), nor an org's agent keys ([`org_keys`]).

use super::tree::{DbTree, frontier_of, latest_checkpoint, log_size_of};
use super::{State, Writer};
use crate::engine::{AgentKey, OrgState, blob_hash, fold_key_record, org_range, row_id};
use crate::{DbContext, StoreError, StoredCheckpoint};
use cairn_core::Timestamp;
use cairn_core::merkle::{Frontier, leaf_hash};
use rusqlite::{Connection, params};
use std::collections::HashMap;

pub(super) fn load_state(conn: Connection) -> Writer {
    match rebuild(&conn) {
        Ok(state) => Writer {
            conn,
            broken: None,
            state,
        },
        Err(e) => Writer {
            conn,
            broken: Some(format!(
                "the store's tables are inconsistent ({e}); it is open for reading and verification only: run `cairn verify`"
            )),
            state: State::default(),
        },
    }
}

/// An org's committed agent key records in log order (below a rowid: the
/// org's size when its keys are first asked for), a search of the partial
/// index `entries_key_records_in_order`.
const ORG_KEY_RECORDS: &str = "SELECT seq, type, view FROM entries
     WHERE org = ?1 AND type IN ('key-registration', 'key-revocation') AND id < ?2 ORDER BY id";

/// The agent keys of org `org` as its committed log of `size` entries
/// registers and revokes them: read the first time the writer needs one
/// of the org's keys, not at start-up (so that opening a store costs the
/// same whatever its orgs' keys), and kept up to date from then on by the
/// batches that write key records. Rows this process wrote but did not
/// commit (at or past `size`) are never read into it.
pub(super) fn org_keys(
    conn: &Connection,
    org: i64,
    size: u64,
) -> Result<HashMap<String, AgentKey>, StoreError> {
    let mut keys = HashMap::new();
    let mut stmt = conn
        .prepare_cached(ORG_KEY_RECORDS)
        .context("loading agent keys")?;
    let mut rows = stmt
        .query(params![org, row_id(org, size)])
        .context("loading agent keys")?;
    while let Some(row) = rows.next().context("loading agent keys")? {
        let seq: i64 = row.get(0).context("loading an agent key")?;
        let entry_type: String = row.get(1).context("loading an agent key")?;
        let view: String = row.get(2).context("loading an agent key")?;
        fold_key_record(&mut keys, seq as u64, &entry_type, &view)?;
    }
    Ok(keys)
}

pub(super) fn rebuild(conn: &Connection) -> Result<State, StoreError> {
    let mut orgs = HashMap::new();
    {
        let mut stmt = conn
            .prepare("SELECT org, name, EXISTS (SELECT 1 FROM org_origins g WHERE g.org = o.org) FROM orgs o")
            .context("listing orgs")?;
        let rows: Vec<(i64, String, bool)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .context("listing orgs")?
            .collect::<Result<_, _>>()
            .context("listing orgs")?;
        for (id, name, foreign) in rows {
            let size = log_size_of(conn, id)?;
            let latest = latest_checkpoint(conn, id, &name)?;
            let frontier = checked_frontier(conn, id, &name, size, latest.as_ref())?;
            let last_logged: i64 = if size == 0 {
                0
            } else {
                conn.query_row(
                    "SELECT logged_at FROM entries WHERE id = ?1",
                    [row_id(id, size - 1)],
                    |r| r.get(0),
                )
                .context("reading the last entry's time")?
            };
            orgs.insert(
                name,
                OrgState {
                    id,
                    foreign,
                    frontier,
                    checkpoint_size: latest.as_ref().map_or(0, |c| c.size),
                    checkpoint_at: None,
                    last_logged: Timestamp::from_micros(last_logged).unwrap_or_default(),
                },
            );
        }
    }
    Ok(State {
        orgs,
        sessions: HashMap::new(),
        keys: HashMap::new(),
        fulltext: Default::default(),
    })
}

/// An org's Merkle frontier for sequencing, not taken on trust from the
/// stored subtrees: at the latest signed checkpoint's size it must give
/// the signed root, and the entries after it are folded again from their
/// rows (each row's leaf recomputed and compared with the stored one).
fn checked_frontier(
    conn: &Connection,
    org: i64,
    name: &str,
    size: u64,
    latest: Option<&StoredCheckpoint>,
) -> Result<Frontier, StoreError> {
    let signed = latest.map_or(0, |c| c.size);
    if signed > size {
        return Err(StoreError::Corrupt(format!(
            "the log of org {name} holds {size} entries, fewer than its latest signed checkpoint ({signed}): entries were removed"
        )));
    }
    let mut frontier = frontier_of(&DbTree {
        conn,
        org,
        size: signed,
    })?;
    if let Some(cp) = latest
        && frontier.root() != cp.root
    {
        return Err(StoreError::Corrupt(format!(
            "the stored tree of org {name} does not give the root its latest checkpoint signed (size {signed})"
        )));
    }
    let (lo, _) = org_range(org);
    let mut stmt = conn
        .prepare(
            "SELECT seq, type, record_hash, logged_at, leaf_hash FROM entries
             WHERE id >= ?1 AND id < ?2 ORDER BY id",
        )
        .context("reading the log's tail")?;
    let mut rows = stmt
        .query(params![row_id(org, signed), lo + (1 << 40)])
        .context("reading the log's tail")?;
    while let Some(row) = rows.next().context("reading the log's tail")? {
        let seq: i64 = row.get(0).context("reading the log's tail")?;
        let entry_type: String = row.get(1).context("reading the log's tail")?;
        let record = blob_hash(row.get(2).context("reading the log's tail")?)?;
        let logged_at = Timestamp::from_micros(row.get(3).context("reading the log's tail")?)
            .ok_or_else(|| StoreError::Corrupt("a logged time out of range".into()))?;
        let stored = blob_hash(row.get(4).context("reading the log's tail")?)?;
        let leaf = leaf_hash(&cairn_core::log::log_leaf_data(
            seq as u64,
            &entry_type,
            &record,
            logged_at,
        ));
        if seq as u64 != frontier.size() || leaf != stored {
            return Err(StoreError::Corrupt(format!(
                "entry {seq} of org {name} does not match its stored leaf or follows a gap"
            )));
        }
        frontier.push(leaf);
    }
    Ok(frontier)
}

#[cfg(test)]
mod tests {
    use super::super::query_plan as plan_of;
    use super::super::{SqliteOptions, SqliteStore};
    use super::ORG_KEY_RECORDS;

    /// An org's key records are read through their partial index, never
    /// by scanning the log (which had made every start linear in it).
    #[test]
    fn key_records_load_without_scanning_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        let writer = store.writer.lock().unwrap();
        let plan = plan_of(&writer.conn, ORG_KEY_RECORDS, [1i64, 2 << 40]);
        assert!(
            plan.iter().any(|step| step.contains("entries_key_records")),
            "{plan:?}"
        );
        assert!(!plan.iter().any(|step| step == "SCAN entries"), "{plan:?}");
    }

    /// The log-key records (every seal and checkpoint verification reads
    /// them) are read through their own partial index: neither the log nor
    /// `entries_ops` (every operational record of every org) is scanned,
    /// nor every org probed; a store without the index (opened only to be
    /// read, before this version's first writable open) still reads them.
    #[test]
    fn log_key_records_are_read_through_their_own_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        let writer = store.writer.lock().unwrap();
        let plan = plan_of(&writer.conn, crate::keys::LOG_KEY_RECORDS, []);
        assert!(
            plan.iter()
                .any(|step| step.starts_with("SCAN e USING INDEX entries_log_keys")),
            "{plan:?}"
        );
        assert!(
            !plan.iter().any(|step| step.starts_with("SCAN o")),
            "{plan:?}"
        );
        drop(writer);
        // (The store's own connections may not change the schema.)
        rusqlite::Connection::open(dir.path().join("ledger.db"))
            .unwrap()
            .execute_batch("DROP INDEX entries_log_keys")
            .unwrap();
        assert!(
            !crate::LedgerStore::log_keys(&store, "acme")
                .unwrap()
                .is_empty()
        );
    }

    /// A page of key records (`GET /v1/agent-keys`) is read through a
    /// partial index in log order: neither the log scanned nor every key
    /// record of the org sorted for each page.
    #[test]
    fn key_record_pages_are_read_in_order_through_their_index() {
        use super::super::reads::{AGENT_KEY_RECORDS, ORG_KEY_RECORDS_PAGE};
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        let writer = store.writer.lock().unwrap();
        for (sql, agent, index) in [
            (ORG_KEY_RECORDS_PAGE, None, "entries_key_records_in_order"),
            (AGENT_KEY_RECORDS, Some("agent"), "entries_key_records"),
        ] {
            let plan = plan_of(&writer.conn, sql, rusqlite::params![1, agent, 0, 100]);
            assert!(
                plan.iter().any(|step| step.contains(&format!("{index} "))),
                "{plan:?}"
            );
            assert!(
                !plan
                    .iter()
                    .any(|step| step.contains("SCAN") || step.contains("B-TREE")),
                "{plan:?}"
            );
        }
    }
}
