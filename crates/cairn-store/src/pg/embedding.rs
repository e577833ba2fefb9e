//! The fleet store's side of semantic search: the embedding queue (leased
//! to the server embedding a batch, so servers sharing the database take
//! different steps), the tagged vectors, the store's chosen embedder, the
//! in-memory index's view of an org's vectors, and the upgrade of
//! databases written before any of it.

use super::connection::{Db, col, u64_of};
use super::{PAGE, PgStore};
use crate::embed::MAX_ATTEMPTS;
use crate::engine::org_range;
use crate::{DbContext, EmbeddingBacklog, OrgScope, PendingEmbedding, StoreError};
use std::collections::{HashMap, HashSet};

/// The orgs with claimable (not parked) steps queued, found one after the
/// other through the queue's partial index of them (`attempts < 5`
/// written out, as the index's, so that any plan can use it: parked rows
/// are never read).
const CLAIMABLE_ORGS: &str = "WITH RECURSIVE orgs(org) AS (
       (SELECT org FROM embedding_queue WHERE attempts < 5 ORDER BY org LIMIT 1)
       UNION ALL
       SELECT (SELECT q.org FROM embedding_queue q WHERE q.org > o.org AND q.attempts < 5
                ORDER BY q.org LIMIT 1)
         FROM orgs o WHERE o.org IS NOT NULL)
     SELECT org FROM orgs WHERE org IS NOT NULL";

/// An org's oldest claimable steps not leased to another server (`$1` the
/// org, `$2` how many), through the same index.
const OLDEST_CLAIMABLE: &str = "SELECT n, id FROM embedding_queue
      WHERE org = $1 AND attempts < 5 AND (claimed_until IS NULL OR claimed_until < now())
      ORDER BY n LIMIT $2";

impl PgStore {
    pub(super) fn semantic_search_in(
        &self,
        org_id: &str,
        embedder: &str,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<(u64, f32)>, StoreError> {
        self.read(|db| {
            let Some(org) = Self::org_id_of(db, org_id)? else {
                return Ok(Vec::new());
            };
            let (lo, hi) = org_range(org);
            let source = PgVectors(std::cell::RefCell::new(db));
            let cached = self.vectors.search(&source, org, embedder, query, limit)?;
            let db = source.0.into_inner();
            if let Some(hits) = cached {
                return Ok(hits
                    .into_iter()
                    .map(|(id, score)| (u64_of(id - lo), score))
                    .collect());
            }
            // Over the memory budget: scored straight from the table.
            let mut best = crate::embed::TopK::new(limit);
            let mut next = lo;
            loop {
                let rows = db.query(
                    "SELECT id, vector FROM vectors WHERE id >= $1 AND id < $2 AND embedder = $4
                     ORDER BY id LIMIT $3",
                    &[&next, &hi, &PAGE, &embedder],
                    "searching embeddings",
                )?;
                let Some(last) = rows.last() else { break };
                next = col::<i64>(last, 0)? + 1;
                for row in &rows {
                    let id: i64 = col(row, 0)?;
                    best.offer(u64_of(id - lo), query, &col::<Vec<u8>>(row, 1)?);
                }
            }
            Ok(best.finish())
        })
    }

    pub(super) fn claim_embeddings_in(
        &self,
        limit: usize,
    ) -> Result<Vec<PendingEmbedding>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(|db| {
            // A lease of five minutes, so that servers sharing the database
            // embed different steps; a server that dies leaves its lease
            // to expire.
            // Orgs take turns (`embed::take_turns`), as on SQLite: the
            // orgs found through the queue's (org, n) index one after the
            // other, each one's oldest claimable steps.
            let orgs: Vec<i64> = db
                .query(CLAIMABLE_ORGS, &[], "reading the embedding queue")?
                .iter()
                .map(|row| col(row, 0))
                .collect::<Result<_, _>>()?;
            let chosen = crate::embed::take_turns(
                &orgs,
                usize::try_from(limit).unwrap_or(0),
                crate::embed::next_turn(usize::try_from(limit).unwrap_or(0)),
                |org, count| {
                    db.query(
                        OLDEST_CLAIMABLE,
                        &[&org, &i64::try_from(count).unwrap_or(i64::MAX)],
                        "reading the embedding queue",
                    )?
                    .iter()
                    .map(|row| Ok((col(row, 0)?, col(row, 1)?)))
                    .collect::<Result<Vec<_>, StoreError>>()
                },
            )?;
            // Leased only if still claimable: another server may have taken
            // some meanwhile.
            let claimed = db.query(
                "UPDATE embedding_queue SET claimed_until = now() + interval '5 minutes'
                 WHERE id IN (SELECT id FROM embedding_queue
                              WHERE id = ANY($1) AND attempts < $2
                                AND (claimed_until IS NULL OR claimed_until < now())
                              FOR UPDATE SKIP LOCKED)
                 RETURNING id, n",
                &[&chosen, &MAX_ATTEMPTS],
                "reading the embedding queue",
            )?;
            let mut order = claimed
                .iter()
                .map(|row| Ok((col::<i64>(row, 1)?, col::<i64>(row, 0)?)))
                .collect::<Result<Vec<_>, StoreError>>()?;
            order.sort_unstable();
            let ids: Vec<i64> = order.iter().map(|(_, id)| *id).collect();
            let rows = db.query(
                "SELECT id, erased, content, input_data, output_data, metadata FROM entries
                 WHERE id = ANY($1) AND type = 'step'",
                &[&ids],
                "reading the embedding queue",
            )?;
            let mut texts = HashMap::new();
            for row in &rows {
                texts.insert(
                    col::<i64>(row, 0)?,
                    crate::embed::pending_text(
                        col(row, 1)?,
                        col(row, 2)?,
                        [col(row, 3)?, col(row, 4)?, col(row, 5)?],
                    ),
                );
            }
            Ok(ids
                .into_iter()
                .map(|id| PendingEmbedding {
                    id,
                    text: texts.remove(&id).flatten(),
                })
                .collect())
        })
    }

    pub(super) fn store_embeddings_in(
        &self,
        embedder: &str,
        done: &[(PendingEmbedding, Option<Vec<f32>>)],
    ) -> Result<usize, StoreError> {
        let all: Vec<i64> = done.iter().map(|(p, _)| p.id).collect();
        let made: HashMap<i64, Vec<u8>> = done
            .iter()
            .filter_map(|(p, v)| v.as_ref().map(|v| (p.id, crate::embed::to_bytes(v))))
            .collect();
        let stored = self.read(|db| {
            db.client
                .batch_execute("BEGIN")
                .context("storing embeddings")?;
            let outcome = (|| {
                // The chosen embedder, locked against a change until this
                // commits: a batch embedded before another was chosen is
                // given back, not stored.
                let chosen: Option<String> = db
                    .query_opt(
                        "SELECT value FROM embedding_settings WHERE key = 'embedder' FOR SHARE",
                        &[],
                        "storing embeddings",
                    )?
                    .map(|row| col(&row, 0))
                    .transpose()?;
                if chosen.is_some_and(|c| c != embedder) {
                    db.execute(
                        "UPDATE embedding_queue SET claimed_until = NULL WHERE id = ANY($1)",
                        &[&all],
                        "storing embeddings",
                    )?;
                    return Ok(0);
                }
                // Shared row locks, skipping rows another transaction
                // holds (an erasure in the sequencer's batch): waiting for
                // them could deadlock with it. Skipped steps stay queued.
                let locked = db.query(
                    "SELECT id, erased, has_embedding FROM entries
                     WHERE id = ANY($1) AND type = 'step' ORDER BY id FOR SHARE SKIP LOCKED",
                    &[&all],
                    "storing embeddings",
                )?;
                let mut settled = HashSet::new();
                let (mut live, mut unflagged, mut vectors) = (Vec::new(), Vec::new(), Vec::new());
                for row in &locked {
                    let id: i64 = col(row, 0)?;
                    settled.insert(id);
                    if col::<bool>(row, 1)? {
                        continue;
                    }
                    if let Some(vector) = made.get(&id) {
                        if !col::<bool>(row, 2)? {
                            unflagged.push(id);
                        }
                        live.push(id);
                        vectors.push(vector.clone());
                    }
                }
                // A queued id with no step row at all only leaves the queue.
                let skipped: Vec<i64> = all
                    .iter()
                    .copied()
                    .filter(|id| !settled.contains(id))
                    .collect();
                let present: HashSet<i64> = db
                    .query(
                        "SELECT id FROM entries WHERE id = ANY($1)",
                        &[&skipped],
                        "storing embeddings",
                    )?
                    .iter()
                    .map(|row| col(row, 0))
                    .collect::<Result<_, _>>()?;
                let (busy, gone): (Vec<i64>, Vec<i64>) =
                    skipped.into_iter().partition(|id| present.contains(id));
                settled.extend(gone);
                let settled: Vec<i64> = settled.into_iter().collect();
                db.execute(
                    "UPDATE entries SET has_embedding = TRUE WHERE id = ANY($1)",
                    &[&unflagged],
                    "storing embeddings",
                )?;
                if live.len() > unflagged.len() {
                    // Vectors replaced under the same ids: every server's
                    // searches reload them.
                    db.execute(
                        "INSERT INTO embedding_settings (key, value) VALUES ('vectors_version', '1')
                         ON CONFLICT (key) DO UPDATE SET value = (embedding_settings.value::int8 + 1)::text",
                        &[],
                        "storing embeddings",
                    )?;
                }
                db.execute(
                    "INSERT INTO vectors (id, org, embedder, vector)
                     SELECT id, id >> 40, $2, vector FROM UNNEST($1::int8[], $3::bytea[]) AS t(id, vector)
                     ON CONFLICT (id) DO UPDATE SET embedder = EXCLUDED.embedder, vector = EXCLUDED.vector",
                    &[&live, &embedder, &vectors],
                    "storing embeddings",
                )?;
                db.execute(
                    "DELETE FROM embedding_queue WHERE id = ANY($1)",
                    &[&settled],
                    "storing embeddings",
                )?;
                db.execute(
                    "UPDATE embedding_queue SET claimed_until = NULL WHERE id = ANY($1)",
                    &[&busy],
                    "storing embeddings",
                )?;
                Ok(settled.len())
            })();
            let end = if outcome.is_ok() { "COMMIT" } else { "ROLLBACK" };
            let ended = db.client.batch_execute(end).context("storing embeddings");
            ended.and(outcome)
        });
        self.vectors.invalidate();
        stored
    }

    pub(super) fn release_embeddings_in(
        &self,
        ids: &[i64],
        failed: bool,
    ) -> Result<(), StoreError> {
        let counted = i64::from(failed);
        self.read(|db| {
            db.execute(
                "UPDATE embedding_queue SET claimed_until = NULL, attempts = attempts + $2
                 WHERE id = ANY($1)",
                &[&ids, &counted],
                "releasing queued steps",
            )?;
            Ok(())
        })
    }

    pub(super) fn embedding_backlog_in(&self) -> Result<EmbeddingBacklog, StoreError> {
        self.read(|db| {
            let row = db.query_one(
                "SELECT count(*) FILTER (WHERE attempts < $1), count(*) FILTER (WHERE attempts >= $1)
                 FROM embedding_queue",
                &[&MAX_ATTEMPTS],
                "counting the embedding queue",
            )?;
            Ok(EmbeddingBacklog {
                waiting: u64_of(col(&row, 0)?),
                parked: u64_of(col(&row, 1)?),
            })
        })
    }

    pub(super) fn queue_reindex_in(&self, org_id: Option<&str>) -> Result<u64, StoreError> {
        let rate = self.embedding_sample_rate;
        self.read(|db| {
            let scope = OrgScope::of(org_id, |name| Self::org_id_of(db, name))?;
            if scope == OrgScope::Unknown {
                return Ok(0);
            }
            let org = scope.number();
            let mut queued = 0;
            let mut next = i64::MIN;
            loop {
                let rows = db.query(
                    "SELECT id, kind, trace_id, has_embedding FROM entries
                     WHERE type = 'step' AND NOT erased AND id > $1
                       AND ($2::int8 IS NULL OR org = $2)
                     ORDER BY id LIMIT $3",
                    &[&next, &org, &PAGE],
                    "queueing steps to embed again",
                )?;
                let Some(last) = rows.last() else { break };
                next = col(last, 0)?;
                let mut ids = Vec::new();
                for row in &rows {
                    let kind: Option<String> = col(row, 1)?;
                    let trace_id: String = col(row, 2)?;
                    if crate::embed::selected(col(row, 3)?, kind.as_deref(), &trace_id, rate) {
                        ids.push(col::<i64>(row, 0)?);
                    }
                }
                // A step already queued keeps its lease (the server holding
                // it stores it anyway) and gets its attempts back.
                queued += db.execute(
                    "INSERT INTO embedding_queue (id, org) SELECT id, id >> 40 FROM UNNEST($1::int8[]) AS t(id)
                     ON CONFLICT (id) DO UPDATE SET attempts = 0",
                    &[&ids],
                    "queueing steps to embed again",
                )?;
            }
            Ok(queued)
        })
    }

    pub(super) fn vectors_by_embedder_in(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.read(|db| {
            db.query(
                "SELECT embedder, count(*) FROM vectors GROUP BY embedder ORDER BY embedder",
                &[],
                "counting vectors",
            )?
            .iter()
            .map(|row| Ok((col(row, 0)?, u64_of(col::<i64>(row, 1)?))))
            .collect()
        })
    }

    pub(super) fn chosen_embedder_in(&self) -> Result<Option<String>, StoreError> {
        self.read(chosen_embedder)
    }

    pub(super) fn choose_embedder_in(&self, id: &str) -> Result<Option<String>, StoreError> {
        self.read(|db| {
            let before = chosen_embedder(db)?;
            db.execute(
                "INSERT INTO embedding_settings (key, value) VALUES ('embedder', $1)
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                &[&id],
                "recording the store's embedder",
            )?;
            Ok(before)
        })
    }
}

/// The store's chosen embedder, if any.
fn chosen_embedder(db: &mut Db<'_, postgres::Client>) -> Result<Option<String>, StoreError> {
    db.query_opt(
        "SELECT value FROM embedding_settings WHERE key = 'embedder'",
        &[],
        "reading the store's embedder",
    )?
    .map(|row| col(&row, 0))
    .transpose()
}

/// Moves the vectors of a database written before vectors were tagged
/// with their embedder (the `embeddings` table, all word-hash) into
/// `vectors` in one statement, and gives the roles that could write the old
/// table the same rights on the new ones (servers of the old version must
/// be stopped first: they would keep writing the old table).
pub(super) fn upgrade_vectors(tx: &mut postgres::Transaction<'_>) -> Result<(), StoreError> {
    let old: bool = tx
        .query_one("SELECT to_regclass('embeddings') IS NOT NULL", &[])
        .context("looking for untagged vectors")?
        .get(0);
    if !old {
        return Ok(());
    }
    tx.execute(
        "WITH moved AS (DELETE FROM embeddings RETURNING id, org, vector)
         INSERT INTO vectors (id, org, embedder, vector)
         SELECT id, org, $1, vector FROM moved ON CONFLICT DO NOTHING",
        &[&crate::embed::WORD_HASH_ID],
    )
    .context("moving untagged vectors")?;
    super::schema::grant_to_writers_of(
        tx,
        "embeddings",
        &[
            "GRANT SELECT, INSERT, UPDATE, DELETE ON vectors, embedding_queue",
            "GRANT SELECT, INSERT, UPDATE ON embedding_settings",
            "GRANT USAGE ON SEQUENCE embedding_queue_n_seq",
        ],
    )?;
    Ok(())
}

/// Refuses to start a server whose role cannot use the derived tables (embedding queue and vectors, session kinds)
/// (grants not updated after an upgrade): otherwise every batch with a
/// sampled step would fail.
pub(super) fn check_embedding_grants(client: &mut postgres::Client) -> Result<(), StoreError> {
    let allowed: bool = client
        .query_one(
            "SELECT has_table_privilege('embedding_queue', 'INSERT')
                AND has_table_privilege('vectors', 'INSERT')
                AND has_table_privilege('embedding_settings', 'SELECT')
                AND has_sequence_privilege('embedding_queue_n_seq', 'USAGE')
                AND has_table_privilege('session_kinds', 'INSERT')
                AND has_table_privilege('step_search', 'INSERT')
                AND has_table_privilege('search_queue', 'INSERT')
                AND has_table_privilege('search_queue', 'UPDATE')
                AND has_table_privilege('search_queue', 'DELETE')",
            &[],
        )
        .context("checking the role's grants")?
        .get(0);
    if allowed {
        Ok(())
    } else {
        Err(StoreError::Corrupt(
            "this role cannot write the derived tables (vectors, embedding_queue, embedding_settings, session_kinds, step_search, search_queue): as the schema owner, apply the grants of docs/OPERATIONS.md (\"The role Cairn runs as\") to it".into(),
        ))
    }
}

/// The vectors of an org as the in-memory index reads them.
struct PgVectors<'d, 'c>(std::cell::RefCell<&'d mut Db<'c, postgres::Client>>);

impl crate::vector_index::VectorSource for PgVectors<'_, '_> {
    fn vector_ids(&self, org: i64, embedder: &str) -> Result<Vec<i64>, StoreError> {
        let (lo, hi) = org_range(org);
        self.0
            .borrow_mut()
            .query(
                "SELECT id FROM vectors WHERE embedder = $1 AND id >= $2 AND id < $3 ORDER BY id",
                &[&embedder, &lo, &hi],
                "reading vector ids",
            )?
            .iter()
            .map(|row| col(row, 0))
            .collect()
    }

    fn vectors_by_id(
        &self,
        org: i64,
        embedder: &str,
        ids: &[i64],
    ) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
        let (lo, hi) = org_range(org);
        self.0
            .borrow_mut()
            .query(
                "SELECT id, vector FROM vectors WHERE id = ANY($1) AND embedder = $2 AND id >= $3 AND id < $4",
                &[&ids, &embedder, &lo, &hi],
                "reading vectors",
            )?
            .iter()
            .map(|row| Ok((col(row, 0)?, col(row, 1)?)))
            .collect()
    }

    fn fingerprint(
        &self,
        org: i64,
        embedder: &str,
    ) -> Result<crate::vector_index::Fingerprint, StoreError> {
        let (lo, hi) = org_range(org);
        let row = self.0.borrow_mut().query_one(
            "SELECT count(*), max(id), coalesce(sum((id - $2) & 1048575), 0)::int8,
               (SELECT coalesce(max(value::int8), 0) FROM embedding_settings WHERE key = 'vectors_version')
             FROM vectors WHERE embedder = $1 AND id >= $2 AND id < $3",
            &[&embedder, &lo, &hi],
            "counting vectors",
        )?;
        Ok(crate::vector_index::Fingerprint {
            count: u64_of(col::<i64>(&row, 0)?),
            max_id: col(&row, 1)?,
            id_sum: col(&row, 2)?,
            version: col(&row, 3)?,
        })
    }

    fn vectors_after(
        &self,
        org: i64,
        embedder: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
        let (lo, hi) = org_range(org);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.0
            .borrow_mut()
            .query(
                "SELECT id, vector FROM vectors WHERE embedder = $1 AND id > $2 AND id >= $3 AND id < $4
                 ORDER BY id LIMIT $5",
                &[&embedder, &after, &lo, &hi, &limit],
                "reading vectors",
            )?
            .iter()
            .map(|row| Ok((col(row, 0)?, col(row, 1)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{CLAIMABLE_ORGS, OLDEST_CLAIMABLE};
    use crate::load_or_create_server_key;
    use crate::pg::{PgOptions, PgStore};
    use cairn_testkit::PgCluster;

    /// A claim reads only claimable rows: an org's parked steps (oldest in
    /// its queue, so read past on every claim before) are not in the index
    /// the claim's two queries search. A database of an earlier version
    /// loses its full (org, n) index at the schema owner's next start.
    #[test]
    fn claims_never_read_parked_rows() {
        let Some(cluster) = PgCluster::start() else {
            return;
        };
        let url = cluster.create_database("parked_rows");
        let keys = tempfile::tempdir().unwrap();
        let open = || {
            let key = load_or_create_server_key(keys.path(), "cairn.local").unwrap();
            PgStore::open(PgOptions::new(url.clone()), key).unwrap()
        };
        let store = open();
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        admin
            .batch_execute(
                "INSERT INTO embedding_queue (id, org, attempts) SELECT i, 1, 5 FROM generate_series(1, 20000) i;
                 INSERT INTO embedding_queue (id, org) VALUES (30000, 1), (30001, 2);
                 ANALYZE embedding_queue;",
            )
            .unwrap();
        let explain = |admin: &mut postgres::Client,
                       sql: &str,
                       params: &[&(dyn postgres::types::ToSql + Sync)]| {
            let rows = admin.query(&format!("EXPLAIN {sql}"), params).unwrap();
            rows.iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<_>>()
                .join("\n")
        };
        for plan in [
            explain(&mut admin, CLAIMABLE_ORGS, &[]),
            explain(&mut admin, OLDEST_CLAIMABLE, &[&1_i64, &32_i64]),
        ] {
            assert!(plan.contains("embedding_queue_claimable"), "{plan}");
            assert!(!plan.contains("Seq Scan on embedding_queue"), "{plan}");
        }
        let mut ids: Vec<i64> = store
            .claim_embeddings_in(32)
            .unwrap()
            .into_iter()
            .map(|p| p.id)
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, [30000, 30001]);
        drop(store);
        // As an earlier version made it.
        admin
            .batch_execute("CREATE INDEX embedding_queue_org ON embedding_queue (org, n)")
            .unwrap();
        drop(open());
        let indexes: Vec<String> = admin
            .query(
                "SELECT indexname::text FROM pg_indexes WHERE tablename = 'embedding_queue' ORDER BY 1",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(
            indexes,
            [
                "embedding_queue_claimable",
                "embedding_queue_n_key",
                "embedding_queue_pkey"
            ]
        );
    }
}
