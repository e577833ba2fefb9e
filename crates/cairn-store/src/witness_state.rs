//! A witness's state (`cairn witness`): per log origin, the latest
//! checkpoint it cosigned, in its own small SQLite database
//! (`witness.db`), and a record of every refused request by a known log
//! (evidence of misbehaviour, which C2SP allows a witness to keep).
//!
//! [`WitnessState::add`] reads the latest checkpoint of an origin, runs the
//! caller's consistency check and records its result in one `BEGIN
//! IMMEDIATE` transaction, behind a mutex: two requests can never both pass
//! the check against the same old state, so the witness never cosigns two
//! checkpoints that are inconsistent with each other, even under
//! concurrent requests or two processes on one directory.

use crate::{StoreError, keys};
use cairn_core::hash::Hash;
use cairn_core::witness::Witnessed;
use rusqlite::{Connection, OptionalExtension as _, TransactionBehavior, params};
use std::path::Path;
use std::sync::Mutex;

/// File name of the witness's database inside its directory.
pub const WITNESS_DB: &str = "witness.db";
/// File name of the witness's key inside its directory.
pub const WITNESS_KEY: &str = "witness.key";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS witnessed (
  origin     TEXT    PRIMARY KEY,
  size       INTEGER NOT NULL,
  root       BLOB    NOT NULL,
  note       TEXT    NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS refused (
  id         INTEGER PRIMARY KEY,
  origin     TEXT    NOT NULL,
  status     INTEGER NOT NULL,
  detail     TEXT    NOT NULL,
  body       TEXT    NOT NULL,
  at         INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS refused_by_origin ON refused (origin, id);
";

/// A witness's persistent state.
pub struct WitnessState {
    conn: Mutex<Connection>,
}

fn sql(context: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |e| StoreError::Io {
        context: context.to_owned(),
        source: std::io::Error::other(e),
    }
}

impl WitnessState {
    /// Opens (or creates) `dir/witness.db`, durable on every commit.
    pub fn open(dir: &Path) -> Result<WitnessState, StoreError> {
        create_private_dir(dir)?;
        let conn =
            Connection::open(dir.join(WITNESS_DB)).map_err(sql("opening the witness database"))?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 5000;",
        )
        .map_err(sql("configuring the witness database"))?;
        conn.execute_batch(SCHEMA)
            .map_err(sql("creating the witness schema"))?;
        Ok(WitnessState {
            conn: Mutex::new(conn),
        })
    }

    /// The witness's key (`dir/witness.key`, created with `name` on first
    /// use, mode 0600).
    pub fn key(dir: &Path, name: &str) -> Result<keys::ServerKey, StoreError> {
        create_private_dir(dir)?;
        keys::load_or_create_key(dir, WITNESS_KEY, name)
    }

    /// The latest checkpoint cosigned for `origin`.
    pub fn latest(&self, origin: &str) -> Result<Option<(Witnessed, String)>, StoreError> {
        let conn = self
            .conn
            .lock()
            .map_err(|_| StoreError::Corrupt("the witness state lock is poisoned".into()))?;
        read_latest(&conn, origin)
    }

    /// Atomically: reads the latest checkpoint cosigned for `origin`, runs
    /// `check` on it, and if it passes records the checkpoint it returns
    /// (with its signed `note`) before committing. The outer error is a
    /// storage failure; the inner one is `check`'s refusal.
    pub fn add<E>(
        &self,
        origin: &str,
        note: &str,
        now_micros: i64,
        check: impl FnOnce(Option<&Witnessed>) -> Result<Witnessed, E>,
    ) -> Result<Result<Witnessed, E>, StoreError> {
        let mut conn = self
            .conn
            .lock()
            .map_err(|_| StoreError::Corrupt("the witness state lock is poisoned".into()))?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql("starting a witness transaction"))?;
        let latest = read_latest(&tx, origin)?.map(|(w, _)| w);
        let outcome = check(latest.as_ref());
        if let Ok(accepted) = &outcome {
            let size = i64::try_from(accepted.size).map_err(|_| {
                StoreError::Corrupt(format!("size {} beyond 2^63 - 1", accepted.size))
            })?;
            tx.execute(
                "INSERT INTO witnessed (origin, size, root, note, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (origin) DO UPDATE SET size = excluded.size, root = excluded.root,
                   note = excluded.note, updated_at = excluded.updated_at",
                params![
                    origin,
                    size,
                    &accepted.root.as_bytes()[..],
                    note,
                    now_micros
                ],
            )
            .map_err(sql("recording a cosigned checkpoint"))?;
        }
        tx.commit()
            .map_err(sql("committing a witness transaction"))?;
        Ok(outcome)
    }

    /// Most refused requests kept per origin; older ones are dropped
    /// first.
    pub const MAX_REFUSALS: i64 = 10_000;

    /// Records a refused request by a known log (kept as evidence): the
    /// caller passes what the log signed (`body`: the request's `old` line
    /// and proof, then the checkpoint's text `checkpoint` and its
    /// signatures), not whatever else the request carried. One row per
    /// origin, checkpoint, `old` size and status: the same refusal sent
    /// again with other junk proofs adds nothing, so flooding the witness
    /// with one signed checkpoint cannot push older evidence out, and the
    /// same checkpoint refused for another reason (a fork, after a bad
    /// proof) is kept as well. Each origin keeps its latest
    /// [`Self::MAX_REFUSALS`] other than forks (`409`: another root at the
    /// cosigned size), which are kept for good (only the log can sign
    /// them), so one log's refusals never push out another's.
    pub fn record_refusal(
        &self,
        origin: &str,
        status: u16,
        detail: &str,
        checkpoint: &str,
        body: &str,
        now_micros: i64,
    ) -> Result<(), StoreError> {
        let refused = Refused {
            origin,
            status,
            detail,
            checkpoint,
            body,
            now_micros,
        };
        self.record_refusal_keeping(&refused, Self::MAX_REFUSALS)
    }

    fn record_refusal_keeping(&self, refused: &Refused<'_>, keep: i64) -> Result<(), StoreError> {
        let Refused {
            origin,
            status,
            detail,
            checkpoint,
            body,
            now_micros,
        } = *refused;
        let conn = self
            .conn
            .lock()
            .map_err(|_| StoreError::Corrupt("the witness state lock is poisoned".into()))?;
        // `body` is `old N`, proof lines, a blank line, the checkpoint
        // and its signatures: the checkpoint's text follows the blank line
        // (a note's text holds none).
        let old_line = body.split_inclusive('\n').next().unwrap_or_default();
        let kept_checkpoint = format!("\n\n{checkpoint}\n");
        let inserted = conn
            .execute(
                "INSERT INTO refused (origin, status, detail, body, at)
                 SELECT ?1, ?2, ?3, ?4, ?5
                 WHERE NOT EXISTS (
                   SELECT 1 FROM refused WHERE origin = ?1 AND status = ?2
                     AND substr(body, 1, length(?7)) = ?7 AND instr(body, ?6) > 0
                 )",
                params![
                    origin,
                    status,
                    detail,
                    body,
                    now_micros,
                    kept_checkpoint,
                    old_line
                ],
            )
            .map_err(sql("recording a refused checkpoint"))?;
        if inserted > 0 {
            conn.execute(
                "DELETE FROM refused WHERE id IN (
                   SELECT id FROM refused WHERE origin = ?1 AND status <> 409
                   ORDER BY id DESC LIMIT -1 OFFSET ?2
                 )",
                params![origin, keep],
            )
            .map_err(sql("pruning refused checkpoints"))?;
        }
        Ok(())
    }

    /// How many requests by known logs were refused (all origins).
    pub fn refusals(&self) -> Result<u64, StoreError> {
        let conn = self
            .conn
            .lock()
            .map_err(|_| StoreError::Corrupt("the witness state lock is poisoned".into()))?;
        conn.query_row("SELECT count(*) FROM refused", [], |r| r.get::<_, i64>(0))
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(sql("counting refused checkpoints"))
    }
}

/// A refused request to record.
#[derive(Clone, Copy)]
struct Refused<'a> {
    origin: &'a str,
    status: u16,
    detail: &'a str,
    checkpoint: &'a str,
    body: &'a str,
    now_micros: i64,
}

/// The witness's directory, readable by its owner only.
fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(|source| StoreError::Io {
        context: format!("creating {}", dir.display()),
        source,
    })
}

fn read_latest(conn: &Connection, origin: &str) -> Result<Option<(Witnessed, String)>, StoreError> {
    let row = conn
        .query_row(
            "SELECT size, root, note FROM witnessed WHERE origin = ?1",
            [origin],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Vec<u8>>(1)?,
                    r.get::<_, String>(2)?,
                ))
            },
        )
        .optional()
        .map_err(sql("reading the witness state"))?;
    row.map(|(size, root, note)| {
        let root: [u8; 32] = root
            .try_into()
            .map_err(|_| StoreError::Corrupt(format!("witness state of {origin}: bad root")))?;
        // The log-keys count is read from the note kept (a state written
        // before the witness knew the line holds the note too).
        let log_keys = cairn_core::note::Note::parse(&note)
            .ok()
            .and_then(|parsed| cairn_core::checkpoint::Checkpoint::parse(&parsed.text).ok())
            .and_then(|checkpoint| checkpoint.log_key_count());
        Ok((
            Witnessed {
                size: u64::try_from(size).unwrap_or(0),
                root: Hash(root),
                log_keys,
            },
            note,
        ))
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused<'a>(origin: &'a str, checkpoint: &'a str, body: &'a str) -> Refused<'a> {
        refused_with(422, origin, checkpoint, body)
    }

    fn refused_with<'a>(
        status: u16,
        origin: &'a str,
        checkpoint: &'a str,
        body: &'a str,
    ) -> Refused<'a> {
        Refused {
            origin,
            status,
            detail: "inconsistent",
            checkpoint,
            body,
            now_micros: 1,
        }
    }

    fn rows(state: &WitnessState, origin: &str) -> i64 {
        let conn = state.conn.lock().unwrap();
        conn.query_row(
            "SELECT count(*) FROM refused WHERE origin = ?1",
            [origin],
            |r| r.get(0),
        )
        .unwrap()
    }

    /// One signed checkpoint sent again and again (with other junk
    /// proofs) is kept once, and one origin's refusals never push out
    /// another's.
    #[test]
    fn refusals_are_kept_once_per_checkpoint_and_pruned_per_origin() {
        let dir = tempfile::tempdir().unwrap();
        let state = WitnessState::open(dir.path()).unwrap();
        let a = "log.example/a\n10\nROOT=\n";
        for junk in ["x", "y", "z"] {
            let body = format!("old 5\n{junk}\n\n{a}\n\u{2014} log sig\n");
            state
                .record_refusal_keeping(&refused("log.example/a", a, &body), 3)
                .unwrap();
        }
        assert_eq!(rows(&state, "log.example/a"), 1);
        // The same checkpoint refused for another reason, or from another
        // old size, is another fact: kept too. A fork (409) is never
        // pruned.
        let fork = format!("old 10\n\n{a}\n");
        state
            .record_refusal_keeping(&refused_with(409, "log.example/a", a, &fork), 3)
            .unwrap();
        let other_old = format!("old 7\nq\n\n{a}\n");
        state
            .record_refusal_keeping(&refused("log.example/a", a, &other_old), 3)
            .unwrap();
        assert_eq!(rows(&state, "log.example/a"), 3);
        // The same text inside a longer checkpoint (an extension line
        // after it) is another checkpoint.
        let longer = "log.example/a\n10\nROOT=\next\n";
        let body = format!("old 5\n\n{longer}\n");
        state
            .record_refusal_keeping(&refused("log.example/a", longer, &body), 3)
            .unwrap();
        assert_eq!(rows(&state, "log.example/a"), 4);
        // Another origin's evidence, then a flood of the first origin's
        // distinct checkpoints: the other origin's row stays.
        let b = "log.example/b\n3\nROOT=\n";
        state
            .record_refusal_keeping(&refused("log.example/b", b, &format!("old 0\n\n{b}\n")), 3)
            .unwrap();
        for size in 11..20 {
            let text = format!("log.example/a\n{size}\nROOT=\n");
            let body = format!("old 5\n\n{text}\n");
            state
                .record_refusal_keeping(&refused("log.example/a", &text, &body), 3)
                .unwrap();
        }
        // The latest 3 that are not forks, and the fork.
        assert_eq!(rows(&state, "log.example/a"), 4);
        let conn = state.conn.lock().unwrap();
        let forks: i64 = conn
            .query_row(
                "SELECT count(*) FROM refused WHERE origin = 'log.example/a' AND status = 409",
                [],
                |r| r.get(0),
            )
            .unwrap();
        drop(conn);
        assert_eq!(forks, 1);
        assert_eq!(rows(&state, "log.example/b"), 1);
        assert_eq!(state.refusals().unwrap(), 5);
    }
}
