//! The server's Ed25519 key: created on first start in the data directory
//! (`server.key`, mode 0600), loaded on every later start.

use crate::StoreError;
use cairn_core::note::{NoteSigner, NoteVerifier};
use std::io::Write as _;
use std::path::Path;

/// The server's signing key and its public half.
#[derive(Debug, Clone)]
pub struct ServerKey {
    /// Signs checkpoints and seals.
    pub signer: NoteSigner,
    /// The public key, published in vkey form.
    pub verifier: NoteVerifier,
}

/// File name of the key inside the data directory.
pub const KEY_FILE: &str = "server.key";

/// Loads `data_dir/server.key`, or creates it with a fresh key named
/// `name` if it does not exist. The file holds the C2SP private key string
/// (`PRIVATE+KEY+name+id+key`) and is created with mode 0600.
///
/// Creation is atomic: the key is written and synced to a temporary file
/// that is then hard-linked into place, which fails if another process
/// (a second server starting on the same directory) got there first; that
/// process's key is then loaded. No process ever reads a half-written key.
pub fn load_or_create_server_key(data_dir: &Path, name: &str) -> Result<ServerKey, StoreError> {
    load_or_create_key(data_dir, KEY_FILE, name)
}

/// Loads the key file at `path` (created, with its directory, if missing),
/// for a server key kept outside the data directory.
pub fn load_or_create_key_file(path: &Path, name: &str) -> Result<ServerKey, StoreError> {
    let (Some(dir), Some(file)) = (path.parent(), path.file_name().and_then(|f| f.to_str())) else {
        return Err(StoreError::Key(format!(
            "{} is not a key file path",
            path.display()
        )));
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
        context: format!("creating {}", dir.display()),
        source,
    })?;
    load_or_create_key(dir, file, name)
}

/// Loads `dir/file`, or creates it with a fresh Ed25519 key named `name`,
/// as [`load_or_create_server_key`] does (a witness keeps its key this way).
pub fn load_or_create_key(dir: &Path, file: &str, name: &str) -> Result<ServerKey, StoreError> {
    let path = dir.join(file);
    if let Some(key) = load(&path)? {
        return Ok(key);
    }
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|e| StoreError::Key(format!("no entropy source for the server key: {e}")))?;
    let signer = NoteSigner::from_seed(name, &seed).map_err(|e| StoreError::Key(e.to_string()))?;
    let private = signer
        .to_private_string()
        .ok_or_else(|| StoreError::Key("a fresh key is in memory".into()))?;
    let io = |context: String| move |source| StoreError::Io { context, source };
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce)
        .map_err(|e| StoreError::Key(format!("no entropy source for the server key: {e}")))?;
    let temp = dir.join(format!(".{file}.{}", hex::encode(nonce)));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let written = options
        .open(&temp)
        .and_then(|mut file| {
            file.write_all(format!("{private}\n").as_bytes())?;
            file.sync_all()
        })
        .map_err(io(format!("writing {}", temp.display())));
    let linked = written.and_then(|()| match std::fs::hard_link(&temp, &path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(StoreError::Io {
            context: format!("creating {}", path.display()),
            source: e,
        }),
    });
    let _ = std::fs::remove_file(&temp);
    if linked? {
        let verifier = signer.verifier();
        return Ok(ServerKey { signer, verifier });
    }
    load(&path)?.ok_or_else(|| StoreError::Key(format!("{} vanished", path.display())))
}

/// A fresh key named `name`, kept in memory only: what a store opened to
/// be read holds when its key file is not where the command looks (it
/// signs nothing; see `LedgerStore::holds_server_key`).
pub fn ephemeral_key(name: &str) -> Result<ServerKey, StoreError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|e| StoreError::Key(format!("no entropy source for a key: {e}")))?;
    let signer = NoteSigner::from_seed(name, &seed).map_err(|e| StoreError::Key(e.to_string()))?;
    let verifier = signer.verifier();
    Ok(ServerKey { signer, verifier })
}

fn load(path: &Path) -> Result<Option<ServerKey>, StoreError> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let signer = NoteSigner::parse(text.trim()).map_err(|e| {
                StoreError::Key(format!("{} does not hold a valid key: {e}", path.display()))
            })?;
            let verifier = signer.verifier();
            Ok(Some(ServerKey { signer, verifier }))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::Io {
            context: format!("reading {}", path.display()),
            source: e,
        }),
    }
}

/// Prefix of the metadata rows that record a log key's addition.
pub(crate) const ADDED_PREFIX: &str = "log_key_added:";
/// Prefix of the metadata rows that record a log key's retirement.
pub(crate) const RETIRED_PREFIX: &str = "log_key_retired:";

/// The metadata row recording `action` on `key`.
pub(crate) fn log_key_row(action: cairn_core::log::LogKeyAction, key: &NoteVerifier) -> String {
    match action {
        cairn_core::log::LogKeyAction::Add => format!("{ADDED_PREFIX}{key}"),
        cairn_core::log::LogKeyAction::Retire => format!("{RETIRED_PREFIX}{key}"),
    }
}

/// The log keys recorded in a store's metadata: its first key, then the
/// added ones in the order given (the rows' keys, any order of prefixes).
pub(crate) fn log_keys_from_meta(
    first: Option<&str>,
    rows: &[String],
) -> Result<Vec<NoteVerifier>, StoreError> {
    let mut keys: Vec<NoteVerifier> = Vec::new();
    let added = rows.iter().filter_map(|r| r.strip_prefix(ADDED_PREFIX));
    for text in first.into_iter().chain(added) {
        let key = NoteVerifier::parse(text)
            .map_err(|e| StoreError::Corrupt(format!("a recorded log key {text:?}: {e}")))?;
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    Ok(keys)
}

/// The query of every `log-key` record of the store's own orgs (not of
/// imported ones), as `(seq, view, org name)`, on both backends: the
/// only partial index its condition implies is `entries_log_keys` (those
/// records alone), so its cost grows with the log-key records (one per
/// org a rotation reached), not with the orgs or their other records. A
/// SQLite store without that index (opened only to be read, before the
/// first writable open of this version created it) runs
/// [`LOG_KEY_RECORDS_SCAN`] instead; PostgreSQL's migration creates it
/// before any query runs.
pub(crate) const LOG_KEY_RECORDS: &str = "SELECT e.seq, e.view, o.name FROM entries e
     JOIN orgs o ON o.org = e.org
     WHERE e.type = 'log-key' AND e.org NOT IN (SELECT org FROM org_origins)";

/// [`LOG_KEY_RECORDS`] for a SQLite store without `entries_log_keys`:
/// the partial index `entries_ops` scanned (`type <> 'step'` lets the
/// query use it).
pub(crate) const LOG_KEY_RECORDS_SCAN: &str = "SELECT e.seq, e.view, o.name FROM entries e
     JOIN orgs o ON o.org = e.org
     WHERE e.type = 'log-key' AND e.type <> 'step'
       AND e.org NOT IN (SELECT org FROM org_origins)";

/// The log keys an unpinned verification trusts: the process's own key,
/// the store's first key (its `server_key` row), and the keys the log
/// vouches for.
///
/// The metadata is the operator's database: a row naming a key of the
/// editor's own (`log_key_added:…`) would otherwise make every signature
/// of that key count, valid from the first entry (FORMAT.md 7.10: a
/// trusted key with no `add` record is valid from 0). So an added key
/// counts only when a `log-key add` record of one of the store's own orgs
/// adds it, the record names the org its row is in, its note states
/// exactly that addition (`log_key_note_text` with that org's origin, as
/// FORMAT 7.10 requires, so that no other note a key signed, a checkpoint
/// say, can stand for it), and a key that counts signed the note; repeated
/// until nothing more is vouched for. A record that does not parse vouches
/// for nothing (its org's verification reports it). The records vouch for
/// nothing else: each is checked again where it stands when its log is
/// verified.
pub(crate) fn vouched_log_keys(
    own: &NoteVerifier,
    first: Option<&str>,
    added_rows: &[String],
    adds: &[(u64, String, String)],
) -> Result<Vec<NoteVerifier>, StoreError> {
    use cairn_core::log::{LogKeyAction, OpRecord, log_key_note_text, log_origin};
    let recorded = log_keys_from_meta(first, added_rows)?;
    let mut trusted: Vec<NoteVerifier> = Vec::new();
    if let Some(first) = first {
        trusted.push(
            NoteVerifier::parse(first)
                .map_err(|e| StoreError::Corrupt(format!("the store's first key: {e}")))?,
        );
    }
    if !trusted.contains(own) {
        trusted.push(own.clone());
    }
    let mut pending = Vec::new();
    for (seq, view, org) in adds {
        if let Ok(OpRecord::LogKey(record)) = crate::engine::op_from_view(*seq, "log-key", view)
            && record.action == LogKeyAction::Add
            && record.org_id == *org
        {
            let stated = log_key_note_text(
                &log_origin(record.key.name(), org),
                LogKeyAction::Add,
                &record.key_text,
                record.at,
            );
            pending.push((record, stated));
        }
    }
    loop {
        let before = trusted.len();
        pending.retain(|(record, stated)| {
            if trusted.contains(&record.key) {
                return false;
            }
            let vouched = cairn_core::note::Note::parse(&record.note)
                .is_ok_and(|note| note.text == *stated && note.verify(&trusted).is_ok());
            if vouched {
                trusted.push(record.key.clone());
            }
            !vouched
        });
        if trusted.len() == before {
            break;
        }
    }
    // The recorded order first (the first key, then additions), then any
    // key only the log or this process names.
    let mut keys: Vec<NoteVerifier> = recorded
        .into_iter()
        .filter(|k| trusted.contains(k))
        .collect();
    for key in trusted {
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    Ok(keys)
}

/// Whether a process whose key is `ours` may sign for a store whose first
/// key is `first` and whose metadata rows are `rows`: the first key or an
/// added one, never a retired one. The error says what to do.
pub(crate) fn check_key_allowed(
    first: &str,
    rows: &[String],
    ours: &NoteVerifier,
    from: &str,
) -> Result<(), StoreError> {
    let text = ours.to_string();
    if rows
        .iter()
        .any(|r| r.strip_prefix(RETIRED_PREFIX) == Some(text.as_str()))
    {
        return Err(StoreError::Key(format!(
            "the key loaded from {from} ({text}) was retired as a log key (`cairn keys retire`): \
             start with the current key"
        )));
    }
    if first == text
        || rows
            .iter()
            .any(|r| r.strip_prefix(ADDED_PREFIX) == Some(text.as_str()))
    {
        return Ok(());
    }
    Err(StoreError::Key(format!(
        "this store's checkpoints are signed by {first}, but the key loaded from {from} is {text}: \
         give the store's own key (--server-key PATH / CAIRN_SERVER_KEY), or add this one first \
         with `cairn keys rotate`; a store copied without its key cannot sign for its log"
    )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Servers starting at once on one directory end up with one key.
    #[test]
    fn concurrent_first_starts_agree_on_one_key() {
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let keys: Vec<String> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..4)
                    .map(|_| {
                        scope.spawn(|| {
                            load_or_create_server_key(dir.path(), "fleet.example")
                                .unwrap()
                                .verifier
                                .to_string()
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert!(keys.windows(2).all(|w| w[0] == w[1]), "{keys:?}");
            let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
            assert_eq!(files.len(), 1, "no temporary file left behind");
        }
    }
}
