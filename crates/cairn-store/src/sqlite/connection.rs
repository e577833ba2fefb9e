//! The embedded store's connections and its data directory: how the
//! writer and readers are configured, the authorizer that refuses DROP and
//! ALTER on Cairn's own connections, the background WAL checkpointer, the
//! directory's permissions and the sequencer's lock. Kept apart from the
//! ledger's queries: none of this reads or writes a row.

use super::LOCK_FILE;
use crate::{DbContext, StoreError};
use rusqlite::{Connection, OpenFlags};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

/// Copies committed WAL frames into the database file in the background,
/// so the writer never pays for it inside a commit (the writer connection
/// runs with `wal_autocheckpoint = 0`).
pub(super) struct Checkpointer {
    stop: std::sync::Arc<(Mutex<bool>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    pub(super) fn start(path: &Path) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open(path).context("opening the checkpointer")?;
        conn.busy_timeout(Duration::from_secs(10))
            .context("setting the busy timeout")?;
        let stop = std::sync::Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let flag = std::sync::Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("cairn-wal-checkpoint".into())
            .spawn(move || {
                let (lock, wake) = &*flag;
                let Ok(mut stopped) = lock.lock() else { return };
                while !*stopped {
                    // PASSIVE never blocks the writer or readers; a busy
                    // database just means fewer frames copied this round.
                    let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                    stopped = match wake.wait_timeout(stopped, Duration::from_millis(100)) {
                        Ok((guard, _)) => guard,
                        Err(_) => return,
                    };
                }
            })
            .map_err(|source| StoreError::Io {
                context: "starting the checkpointer thread".into(),
                source,
            })?;
        Ok(Checkpointer {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        if let Ok(mut stopped) = self.stop.0.lock() {
            *stopped = true;
        }
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

pub(super) fn configure(conn: &Connection) -> Result<(), StoreError> {
    conn.busy_timeout(Duration::from_secs(10))
        .context("setting the busy timeout")?;
    // `secure_delete = FAST`: what an erasure or a deleted row frees is
    // zeroed in its page where that costs no more I/O (SQLite would leave
    // the erased payload's bytes in the page's free space).
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = FULL;
         PRAGMA foreign_keys = OFF;
         PRAGMA cache_size = -65536;
         PRAGMA temp_store = MEMORY;
         PRAGMA secure_delete = FAST;",
    )
    .context("configuring the connection")
}

/// Opens a read-only connection that waits for the writer rather than
/// failing at once, and refuses structural changes.
pub(super) fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let mut c = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .context("opening a reader")?;
    c.busy_timeout(Duration::from_secs(10))
        .context("setting the busy timeout")?;
    forbid_structural_changes(&mut c)?;
    Ok(c)
}

/// Refuses, on Cairn's own connections, statements that would remove
/// ledger structure: DROP of anything and ALTER TABLE. (A user of the plain
/// `sqlite3` shell is not bound by this; the triggers and verification
/// are what stand there.)
pub(super) fn forbid_structural_changes(conn: &mut Connection) -> Result<(), StoreError> {
    use rusqlite::hooks::{AuthAction, Authorization};
    conn.authorizer(Some(|ctx: rusqlite::hooks::AuthContext<'_>| {
        match ctx.action {
            // The one index an upgrade replaces (schema.sql): a derived
            // table's, holding no evidence.
            AuthAction::DropIndex {
                index_name: "embedding_queue_org",
                table_name: "embedding_queue",
            } => Authorization::Allow,
            AuthAction::DropTable { .. }
            | AuthAction::DropIndex { .. }
            | AuthAction::DropTrigger { .. }
            | AuthAction::DropView { .. }
            | AuthAction::AlterTable { .. } => Authorization::Deny,
            _ => Authorization::Allow,
        }
    }))
    .context("installing the authorizer")
}

/// Creates the data directory readable by its owner only (it holds every
/// tenant's content and the hashes of their API keys).
pub(super) fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    let io = |source| StoreError::Io {
        context: format!("creating data directory {}", dir.display()),
        source,
    };
    if !dir.exists() {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir).map_err(io)?;
    }
    Ok(())
}

/// Makes a database file readable by its owner only.
pub(super) fn restrict_file(path: &Path) -> Result<(), StoreError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(
            |source| StoreError::Io {
                context: format!("restricting {}", path.display()),
                source,
            },
        )?;
    }
    Ok(())
}

/// How long `take_lock` waits for a lock held elsewhere, and how often it
/// tries.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// Takes the sequencer's lock on a data directory, or says who holds it:
/// two processes sequencing one embedded store would each keep their own
/// idea of the next index.
pub(super) fn take_lock(dir: &Path) -> Result<std::fs::File, StoreError> {
    use std::io::{Read as _, Seek as _, Write as _};
    let path = dir.join(LOCK_FILE);
    let io = |source| StoreError::Io {
        context: format!("locking {}", path.display()),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    // A lock can be held for a moment by no cairn process at all: a child
    // forked (by any thread of this or the holder's process) between fork
    // and exec shares the holder's open file, so its lock. Only a lock still
    // held after a short wait is another process's.
    let mut waited = std::time::Duration::ZERO;
    let outcome = loop {
        match file.try_lock() {
            Err(std::fs::TryLockError::WouldBlock) if waited < LOCK_PATIENCE => {
                std::thread::sleep(LOCK_RETRY);
                waited += LOCK_RETRY;
            }
            other => break other,
        }
    };
    match outcome {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(StoreError::Busy(format!(
                "the data directory {} is in use by another cairn process ({}): stop it, or write through it (its HTTP API or MCP); read-only commands (verify, export, replay, sessions) work beside it",
                dir.display(),
                if holder.is_empty() {
                    "pid unknown".to_owned()
                } else {
                    holder.to_owned()
                }
            )));
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    let command: Vec<String> = std::env::args().take(3).collect();
    write!(file, "pid {}, `{}`", std::process::id(), command.join(" ")).map_err(io)?;
    file.flush().map_err(io)?;
    Ok(file)
}

pub(super) fn poisoned() -> StoreError {
    StoreError::Corrupt("a previous panic poisoned the store's lock".into())
}

#[cfg(test)]
mod tests {
    use super::super::{SqliteOptions, SqliteStore};
    use super::open_reader;

    /// The authorizer is a second line behind the analyst SQL guard and
    /// the triggers: on the writer and on a reader, DROP and ALTER are
    /// refused by SQLite itself, while ordinary statements still run.
    #[test]
    fn cairn_connections_refuse_structural_changes() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        let structural = [
            "DROP TABLE entries",
            "DROP TRIGGER entries_no_delete",
            "DROP INDEX entries_by_trace",
            "ALTER TABLE entries ADD COLUMN forged TEXT",
            "ALTER TABLE entries RENAME TO entries_old",
        ];
        {
            let writer = store.writer.lock().unwrap();
            for sql in structural {
                let err = writer.conn.execute_batch(sql).unwrap_err();
                assert!(
                    err.to_string().contains("not authorized"),
                    "{sql} on the writer: {err}"
                );
            }
            writer
                .conn
                .execute_batch("CREATE TEMP TABLE scratch (x); INSERT INTO scratch VALUES (1);")
                .unwrap();
        }
        let reader = open_reader(store.path()).unwrap();
        for sql in structural {
            let err = reader.execute_batch(sql).unwrap_err();
            assert!(
                err.to_string().contains("not authorized"),
                "{sql} on a reader: {err}"
            );
        }
        let entries: i64 = reader
            .query_row("SELECT count(*) FROM entries", [], |r| r.get(0))
            .unwrap();
        assert_eq!(entries, 0);
    }
}
