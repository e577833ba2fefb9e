//! The embedded store's side of semantic search: the embedding queue, the
//! tagged vectors, the store's chosen embedder, and the in-memory index's
//! view of an org's vectors. One process sequences an embedded store, so
//! the queue needs no leases; every write goes through the writer's lock,
//! which erasure holds too.

use super::SqliteStore;
use super::connection::poisoned;
use crate::engine::org_range;
use crate::{DbContext, EmbeddingBacklog, OrgScope, PendingEmbedding, StoreError};
use rusqlite::{Connection, OptionalExtension as _, params};

/// Failed attempts after which a step is parked (left out of claims).
use crate::embed::MAX_ATTEMPTS;

/// The orgs with claimable (not parked) steps queued, found one after the
/// other through the queue's partial index of claimable steps
/// (`attempts < 5` written out, as the index's, so that SQLite matches
/// them: parked rows are never read).
const CLAIMABLE_ORGS: &str = "WITH RECURSIVE orgs(org) AS (
       SELECT min(org) FROM embedding_queue WHERE attempts < 5
       UNION ALL
       SELECT (SELECT min(org) FROM embedding_queue WHERE org > orgs.org AND attempts < 5)
         FROM orgs WHERE orgs.org IS NOT NULL)
     SELECT org FROM orgs WHERE org IS NOT NULL";

/// An org's oldest claimable steps (`?1` the org, `?2` how many), through
/// the same index.
const OLDEST_CLAIMABLE: &str = "SELECT n, id FROM embedding_queue WHERE org = ?1 AND attempts < 5
     ORDER BY n LIMIT ?2";

impl SqliteStore {
    pub(super) fn semantic_search_in(
        &self,
        org_id: &str,
        embedder: &str,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<(u64, f32)>, StoreError> {
        self.read(|c| {
            let Some(org) = Self::org_id_of(c, org_id)? else {
                return Ok(Vec::new());
            };
            let (lo, hi) = org_range(org);
            if let Some(hits) =
                self.vectors
                    .search(&SqliteVectors(c), org, embedder, query, limit)?
            {
                return Ok(hits
                    .into_iter()
                    .map(|(id, score)| ((id - lo) as u64, score))
                    .collect());
            }
            // Over the memory budget: scored straight from the table.
            let mut stmt = c
                .prepare_cached(
                    "SELECT id, vector FROM vectors WHERE id >= ?1 AND id < ?2 AND embedder = ?3",
                )
                .context("searching embeddings")?;
            let mut rows = stmt
                .query(params![lo, hi, embedder])
                .context("searching embeddings")?;
            let mut best = crate::embed::TopK::new(limit);
            while let Some(row) = rows.next().context("searching embeddings")? {
                let id: i64 = row.get(0).context("searching embeddings")?;
                let bytes: Vec<u8> = row.get(1).context("searching embeddings")?;
                best.offer((id - lo) as u64, query, &bytes);
            }
            Ok(best.finish())
        })
    }

    pub(super) fn claim_embeddings_in(
        &self,
        limit: usize,
    ) -> Result<Vec<PendingEmbedding>, StoreError> {
        const WHAT: &str = "reading the embedding queue";
        let limit = limit.min(i64::MAX as usize);
        self.read(|c| {
            // Orgs take turns (`embed::take_turns`): each org's oldest
            // claimable steps.
            let orgs: Vec<i64> = c
                .prepare_cached(CLAIMABLE_ORGS)
                .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
                .context(WHAT)?;
            let mut oldest = c.prepare_cached(OLDEST_CLAIMABLE).context(WHAT)?;
            let chosen = crate::embed::take_turns(
                &orgs,
                limit,
                crate::embed::next_turn(limit),
                |org, count| {
                    oldest
                        .query_map(params![org, count as i64], |r| Ok((r.get(0)?, r.get(1)?)))
                        .and_then(|rows| rows.collect())
                        .context(WHAT)
                },
            )?;
            let mut entry = c
                .prepare_cached(
                    "SELECT erased, content, input_data, output_data, metadata FROM entries
                     WHERE id = ?1",
                )
                .context(WHAT)?;
            let mut out = Vec::with_capacity(chosen.len());
            for id in chosen {
                let row = entry
                    .query_row([id], |row| {
                        Ok((
                            row.get::<_, Option<bool>>(0)?,
                            row.get::<_, Option<String>>(1)?,
                            [row.get(2)?, row.get(3)?, row.get(4)?],
                        ))
                    })
                    .optional()
                    .context(WHAT)?;
                // A queued id with no entry only leaves the queue.
                let (erased, content, payloads) = row.unwrap_or((None, None, [None, None, None]));
                out.push(PendingEmbedding {
                    id,
                    text: crate::embed::pending_text(erased.unwrap_or(true), content, payloads),
                });
            }
            Ok(out)
        })
    }

    pub(super) fn store_embeddings_in(
        &self,
        embedder: &str,
        done: &[(PendingEmbedding, Option<Vec<f32>>)],
    ) -> Result<usize, StoreError> {
        let mut guard = self.writer.lock().map_err(|_| poisoned())?;
        let tx = guard.conn.transaction().context("storing embeddings")?;
        // Chosen under the same lock: a batch embedded before another
        // embedder was chosen is not stored.
        let chosen = chosen_embedder(&tx)?;
        if chosen.is_some_and(|c| c != embedder) {
            return Ok(0);
        }
        let mut replaced = false;
        for (pending, vector) in done {
            tx.prepare_cached("DELETE FROM embedding_queue WHERE id = ?1")
                .and_then(|mut s| s.execute([pending.id]))
                .context("storing embeddings")?;
            let Some(vector) = vector else { continue };
            // Erasure happens under the same lock: a step erased before
            // this transaction gets no vector, and one erased after loses it.
            let state: Option<(bool, bool)> = tx
                .prepare_cached(
                    "SELECT erased, has_embedding FROM entries WHERE id = ?1 AND type = 'step'",
                )
                .and_then(|mut s| s.query_row([pending.id], |r| Ok((r.get(0)?, r.get(1)?))))
                .optional()
                .context("storing embeddings")?;
            let Some((false, has_embedding)) = state else {
                continue;
            };
            replaced |= has_embedding;
            // The trigger allows the flag only from 0 to 1.
            if !has_embedding {
                tx.prepare_cached("UPDATE entries SET has_embedding = 1 WHERE id = ?1")
                    .and_then(|mut s| s.execute([pending.id]))
                    .context("storing embeddings")?;
            }
            tx.prepare_cached(
                "INSERT OR REPLACE INTO vectors (id, org, embedder, vector)
                 VALUES (?1, ?1 >> 40, ?2, ?3)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    pending.id,
                    embedder,
                    crate::embed::to_bytes(vector)
                ])
            })
            .context("storing embeddings")?;
        }
        if replaced {
            // Vectors replaced under the same ids: searches reload them.
            tx.execute(
                "INSERT INTO embedding_settings (key, value) VALUES ('vectors_version', '1')
                 ON CONFLICT (key) DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)",
                [],
            )
            .context("storing embeddings")?;
        }
        tx.commit().context("storing embeddings")?;
        self.vectors.invalidate();
        Ok(done.len())
    }

    pub(super) fn release_embeddings_in(
        &self,
        ids: &[i64],
        failed: bool,
    ) -> Result<(), StoreError> {
        if !failed {
            return Ok(());
        }
        let mut guard = self.writer.lock().map_err(|_| poisoned())?;
        let tx = guard
            .conn
            .transaction()
            .context("recording failed embeddings")?;
        for id in ids {
            tx.prepare_cached("UPDATE embedding_queue SET attempts = attempts + 1 WHERE id = ?1")
                .and_then(|mut s| s.execute([id]))
                .context("recording failed embeddings")?;
        }
        tx.commit().context("recording failed embeddings")
    }

    pub(super) fn embedding_backlog_in(&self) -> Result<EmbeddingBacklog, StoreError> {
        self.read(|c| {
            c.query_row(
                "SELECT count(*) FILTER (WHERE attempts < ?1), count(*) FILTER (WHERE attempts >= ?1)
                 FROM embedding_queue",
                [MAX_ATTEMPTS],
                |r| {
                    Ok(EmbeddingBacklog {
                        waiting: r.get::<_, i64>(0)?.max(0) as u64,
                        parked: r.get::<_, i64>(1)?.max(0) as u64,
                    })
                },
            )
            .context("counting the embedding queue")
        })
    }

    pub(super) fn queue_reindex_in(&self, org_id: Option<&str>) -> Result<u64, StoreError> {
        let rate = self.embedding_sample_rate;
        let mut guard = self.writer.lock().map_err(|_| poisoned())?;
        let tx = guard
            .conn
            .transaction()
            .context("queueing steps to embed again")?;
        let scope = OrgScope::of(org_id, |name| Self::org_id_of(&tx, name))?;
        if scope == OrgScope::Unknown {
            return Ok(0);
        }
        let org = scope.number();
        let mut queued = 0;
        {
            let mut read = tx
                .prepare(
                    "SELECT id, org, kind, trace_id, has_embedding FROM entries
                     WHERE type = 'step' AND erased = 0 AND (?1 IS NULL OR org = ?1)",
                )
                .context("queueing steps to embed again")?;
            let mut rows = read.query([org]).context("queueing steps to embed again")?;
            // Parked steps get their attempts back.
            let mut insert = tx
                .prepare(
                    "INSERT INTO embedding_queue (id, org) VALUES (?1, ?2)
                     ON CONFLICT (id) DO UPDATE SET attempts = 0",
                )
                .context("queueing steps to embed again")?;
            while let Some(row) = rows.next().context("queueing steps to embed again")? {
                let kind: Option<String> = row.get(2).context("queueing steps to embed again")?;
                let trace_id: String = row.get(3).context("queueing steps to embed again")?;
                let has: bool = row.get(4).context("queueing steps to embed again")?;
                if crate::embed::selected(has, kind.as_deref(), &trace_id, rate) {
                    let id: i64 = row.get(0).context("queueing steps to embed again")?;
                    let org: i64 = row.get(1).context("queueing steps to embed again")?;
                    queued += insert
                        .execute(params![id, org])
                        .context("queueing steps to embed again")?
                        as u64;
                }
            }
        }
        tx.commit().context("queueing steps to embed again")?;
        Ok(queued)
    }

    pub(super) fn vectors_by_embedder_in(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.read(|c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT embedder, count(*) FROM vectors GROUP BY embedder ORDER BY embedder",
                )
                .context("counting vectors")?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)?.max(0) as u64)))
                .context("counting vectors")?
                .collect::<Result<Vec<_>, _>>()
                .context("counting vectors")?;
            Ok(rows)
        })
    }

    pub(super) fn chosen_embedder_in(&self) -> Result<Option<String>, StoreError> {
        self.read(chosen_embedder)
    }

    pub(super) fn choose_embedder_in(&self, id: &str) -> Result<Option<String>, StoreError> {
        let mut guard = self.writer.lock().map_err(|_| poisoned())?;
        let tx = guard
            .conn
            .transaction()
            .context("recording the store's embedder")?;
        let before = chosen_embedder(&tx)?;
        tx.execute(
            "INSERT INTO embedding_settings (key, value) VALUES ('embedder', ?1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [id],
        )
        .context("recording the store's embedder")?;
        tx.commit().context("recording the store's embedder")?;
        Ok(before)
    }

    /// How many of an org's vectors of `embedder` semantic search's graph
    /// covers (0: scored exactly; `None`: not in memory). For benchmarks
    /// and tests, which wait for the background build.
    pub fn vector_graph_covers(&self, org_id: &str, embedder: &str) -> Option<usize> {
        let org = self.read(|c| Self::org_id_of(c, org_id)).ok().flatten()?;
        self.vectors.graph_covers(org, embedder)
    }
}

/// The store's chosen embedder, if any.
fn chosen_embedder(conn: &Connection) -> Result<Option<String>, StoreError> {
    conn.query_row(
        "SELECT value FROM embedding_settings WHERE key = 'embedder'",
        [],
        |r| r.get(0),
    )
    .optional()
    .context("reading the store's embedder")
}

/// Moves the vectors of a store written before vectors were tagged with
/// their embedder (the `embeddings` table, all word-hash) into `vectors`.
pub(super) fn move_untagged_vectors(tx: &Connection) -> Result<(), StoreError> {
    let old: bool = tx
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'embeddings')",
            [],
            |r| r.get(0),
        )
        .context("looking for untagged vectors")?;
    if old {
        tx.execute(
            "INSERT OR IGNORE INTO vectors (id, org, embedder, vector)
             SELECT id, org, ?1, vector FROM embeddings",
            [crate::embed::WORD_HASH_ID],
        )
        .context("moving untagged vectors")?;
        tx.execute("DELETE FROM embeddings", [])
            .context("moving untagged vectors")?;
    }
    Ok(())
}

/// The vectors of an org as the in-memory index reads them.
struct SqliteVectors<'c>(&'c Connection);

impl crate::vector_index::VectorSource for SqliteVectors<'_> {
    fn vector_ids(&self, org: i64, embedder: &str) -> Result<Vec<i64>, StoreError> {
        let (lo, hi) = org_range(org);
        let mut stmt = self
            .0
            .prepare_cached(
                "SELECT id FROM vectors WHERE embedder = ?1 AND id >= ?2 AND id < ?3 ORDER BY id",
            )
            .context("reading vector ids")?;
        let ids = stmt
            .query_map(params![embedder, lo, hi], |r| r.get(0))
            .context("reading vector ids")?
            .collect::<Result<Vec<i64>, _>>()
            .context("reading vector ids")?;
        Ok(ids)
    }

    fn vectors_by_id(
        &self,
        org: i64,
        embedder: &str,
        ids: &[i64],
    ) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
        let (lo, hi) = org_range(org);
        let mut stmt = self
            .0
            .prepare_cached(
                "SELECT id, vector FROM vectors WHERE id = ?1 AND embedder = ?2 AND id >= ?3 AND id < ?4",
            )
            .context("reading vectors")?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(row) = stmt
                .query_row(params![id, embedder, lo, hi], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()
                .context("reading vectors")?
            {
                out.push(row);
            }
        }
        Ok(out)
    }

    fn fingerprint(
        &self,
        org: i64,
        embedder: &str,
    ) -> Result<crate::vector_index::Fingerprint, StoreError> {
        let (lo, hi) = org_range(org);
        self.0
            .prepare_cached(
                "SELECT count(*), max(id), coalesce(sum((id - ?2) & 1048575), 0),
                   (SELECT coalesce(max(CAST(value AS INTEGER)), 0) FROM embedding_settings
                    WHERE key = 'vectors_version')
                 FROM vectors WHERE embedder = ?1 AND id >= ?2 AND id < ?3",
            )
            .and_then(|mut s| {
                s.query_row(params![embedder, lo, hi], |r| {
                    Ok(crate::vector_index::Fingerprint {
                        count: r.get::<_, i64>(0)?.max(0) as u64,
                        max_id: r.get(1)?,
                        id_sum: r.get(2)?,
                        version: r.get(3)?,
                    })
                })
            })
            .context("counting vectors")
    }

    fn vectors_after(
        &self,
        org: i64,
        embedder: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
        let (lo, hi) = org_range(org);
        let mut stmt = self
            .0
            .prepare_cached(
                "SELECT id, vector FROM vectors WHERE embedder = ?1 AND id > ?2 AND id >= ?3 AND id < ?4
                 ORDER BY id LIMIT ?5",
            )
            .context("reading vectors")?;
        let rows = stmt
            .query_map(
                params![embedder, after, lo, hi, limit.min(i64::MAX as usize) as i64],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .context("reading vectors")?
            .collect::<Result<Vec<_>, _>>()
            .context("reading vectors")?;
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::super::query_plan as plan;
    use super::super::{SqliteOptions, SqliteStore};
    use super::{CLAIMABLE_ORGS, OLDEST_CLAIMABLE};

    /// A claim reads only claimable rows: an org's parked steps (oldest in
    /// its queue, so read past on every claim before) are not in the index
    /// the claim's two queries search, and neither query scans the queue.
    /// A store of an earlier version loses its full (org, n) index at the
    /// next open.
    #[test]
    fn claims_never_read_parked_rows() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
            let writer = store.writer.lock().unwrap();
            // 20,000 parked steps of org 1, then one claimable of each org.
            writer
                .conn
                .execute_batch(
                    "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < 20000)
                     INSERT INTO embedding_queue (id, org, attempts) SELECT i, 1, 5 FROM k;
                     INSERT INTO embedding_queue (id, org) VALUES (30000, 1), (30001, 2);
                     ANALYZE;",
                )
                .unwrap();
            for (sql, plan) in [
                (CLAIMABLE_ORGS, plan(&writer.conn, CLAIMABLE_ORGS, [])),
                (
                    OLDEST_CLAIMABLE,
                    plan(&writer.conn, OLDEST_CLAIMABLE, [1, 32]),
                ),
            ] {
                assert!(
                    plan.iter()
                        .all(|step| !step.starts_with("SCAN embedding_queue")),
                    "{sql}: {plan:?}"
                );
                assert!(
                    plan.iter()
                        .any(|step| step.contains("embedding_queue_claimable")),
                    "{sql}: {plan:?}"
                );
            }
            let ids: Vec<i64> = store
                .claim_embeddings_in(32)
                .unwrap()
                .into_iter()
                .map(|p| p.id)
                .collect();
            assert_eq!(ids.len(), 2);
            assert!(ids.contains(&30000) && ids.contains(&30001), "{ids:?}");
            // As an earlier version made it.
            writer
                .conn
                .execute_batch("CREATE INDEX embedding_queue_org ON embedding_queue (org, n);")
                .unwrap();
        }
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        let writer = store.writer.lock().unwrap();
        let indexes: Vec<String> = writer
            .conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'embedding_queue' AND sql IS NOT NULL ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(indexes, ["embedding_queue_claimable"]);
    }
}
