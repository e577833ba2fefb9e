//! The SQLite backend: the conformance suite, plus what only an embedded
//! file store has (plain-SQL tampering, crash recovery).

use crate::conformance::{Backend, run_all};
use cairn_store::{LedgerStore, SqliteOptions, SqliteStore};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

struct Sqlite {
    dir: tempfile::TempDir,
}

impl Sqlite {
    fn new() -> Sqlite {
        Sqlite {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

pub fn options() -> SqliteOptions {
    SqliteOptions {
        checkpoint_interval: Duration::from_millis(200),
        ..SqliteOptions::default()
    }
}

impl Backend for Sqlite {
    fn open(&self, name: &str) -> Arc<dyn LedgerStore> {
        Arc::new(SqliteStore::open(&self.path(name), options()).unwrap())
    }
}

#[test]
fn conformance_suite() {
    run_all(&Sqlite::new());
}
