//! Opening the store a command works on: the embedded store in the data
//! directory or PostgreSQL, with the server key from the data directory, a
//! key file or a signer command.

use super::*;

pub(crate) fn open_store(cli: &Cli, sequencer: bool) -> Result<Arc<dyn LedgerStore>> {
    let limits = Limits {
        max_content_bytes: cli.max_content_length,
        ..Limits::default()
    };
    if let Some(url) = &cli.database {
        let options = PgOptions {
            limits,
            embedding_sample_rate: cli.embedding_sample_rate,
            max_clock_skew_s: cli.max_clock_skew,
            max_agent_keys: cli.max_agent_keys,
            network_timeout: cli.database_timeout,
            vector_memory_bytes: cli.embedding.vector_memory_mb.saturating_mul(1 << 20),
            ..PgOptions::new(url.clone())
        };
        let key_file = match (&cli.server_key_command, &cli.server_key) {
            (Some(_), _) => None,
            (None, Some(file)) => Some(file.clone()),
            (None, None) => Some(cli.data_dir.join(cairn_store::KEY_FILE)),
        };
        // A key file is made only for a database no server has opened: for
        // one that has a key, a missing file is a wrong --data-dir or
        // --server-key, and a fresh key would only be refused.
        let made = key_file.clone().filter(|f| !f.exists());
        if let Some(file) = &made {
            let keys = PgStore::signing_keys(&options).with_context(|| {
                format!("opening the PostgreSQL store at {}", redact_password(url))
            })?;
            if !keys.is_empty() {
                return Err(usage(format!(
                    "no server key at {}, and the database's logs are signed with {}: give this command that server's key (--data-dir or CAIRN_DATA_DIR where `cairn serve` keeps it, --server-key PATH or --server-key-command); no key file was made",
                    std::path::absolute(file).unwrap_or(file.clone()).display(),
                    keys.join(" or ")
                )));
            }
        }
        std::fs::create_dir_all(&cli.data_dir)
            .with_context(|| format!("creating {}", cli.data_dir.display()))?;
        let key = match (&cli.server_key_command, &cli.server_key) {
            (Some(command), _) => cairn_store::command_server_key(command, &cli.server_name)?,
            (None, Some(file)) => cairn_store::load_or_create_key_file(file, &cli.server_name)?,
            (None, None) => {
                cairn_store::load_or_create_server_key(&cli.data_dir, &cli.server_name)?
            }
        };
        let store = match PgStore::open(options, key) {
            Ok(store) => store,
            Err(e) => {
                // Another first server claimed the database between the
                // check above and this open: the key file this command
                // made would only be refused from now on.
                if let (Some(file), cairn_store::StoreError::Key(_)) = (&made, &e) {
                    let _ = std::fs::remove_file(file);
                }
                return Err(anyhow::Error::new(e).context(format!(
                    "opening the PostgreSQL store at {}",
                    redact_password(url)
                )));
            }
        };
        return Ok(Arc::new(store));
    }
    let options = SqliteOptions {
        server_name: cli.server_name.clone(),
        limits,
        embedding_sample_rate: cli.embedding_sample_rate,
        max_clock_skew_s: cli.max_clock_skew,
        max_agent_keys: cli.max_agent_keys,
        vector_memory_bytes: cli.embedding.vector_memory_mb.saturating_mul(1 << 20),
        sequencer,
        key_file: cli.server_key.clone(),
        key: cli
            .server_key_command
            .as_deref()
            .map(|command| cairn_store::command_server_key(command, &cli.server_name))
            .transpose()?,
        ..SqliteOptions::default()
    };
    match SqliteStore::open(&cli.data_dir, options) {
        Ok(store) => Ok(Arc::new(store)),
        Err(cairn_store::StoreError::Busy(m)) => Err(usage(m)),
        // Where the store's key is, is the caller's to say.
        Err(cairn_store::StoreError::Key(m)) if m.starts_with("no server key") => Err(usage(
            format!("opening the store in {}: {m}", cli.data_dir.display()),
        )),
        Err(e) => Err(anyhow::Error::new(e)
            .context(format!("opening the store in {}", cli.data_dir.display()))),
    }
}

/// Refuses a reading command on an embedded store that does not exist:
/// opening it would create an empty store, with a server key of its own,
/// where the user mistyped the data directory (or ran the command from
/// another directory), and answer from that (an empty listing, another
/// key, whose bundles then fail to verify).
pub(crate) fn require_existing_store(cli: &Cli) -> Result<()> {
    if cli.database.is_some() {
        // The log is in the database; the key must be where it was made,
        // or this command would make one (`cairn keys` printing it).
        let key_file = cli
            .server_key
            .clone()
            .unwrap_or_else(|| cli.data_dir.join(cairn_store::KEY_FILE));
        if cli.server_key_command.is_none() && !key_file.exists() {
            return Err(usage(format!(
                "no server key at {}: set --data-dir (CAIRN_DATA_DIR) to the directory `cairn serve` keeps it in, or give it with --server-key PATH or --server-key-command (this command reads; it does not create one)",
                std::path::absolute(&key_file)
                    .unwrap_or(key_file.clone())
                    .display()
            )));
        }
        return Ok(());
    }
    if cli.data_dir.join(cairn_store::DB_FILE).exists() {
        return Ok(());
    }
    Err(usage(format!(
        "no Cairn store in {} (no {}): set --data-dir or CAIRN_DATA_DIR to the data directory `cairn serve` or `cairn log` uses (this command reads; it does not create one)",
        std::path::absolute(&cli.data_dir)
            .unwrap_or_else(|_| cli.data_dir.clone())
            .display(),
        cairn_store::DB_FILE
    )))
}

/// A connection URL fit to print: its password, if any, replaced.
pub(super) fn redact_password(url: &str) -> String {
    // postgres://user:secret@host/db and key=value forms.
    if let Some((scheme, rest)) = url.split_once("://")
        && let Some((userinfo, host)) = rest.split_once('@')
        && let Some((user, _)) = userinfo.split_once(':')
    {
        return format!("{scheme}://{user}:***@{host}");
    }
    url.split_whitespace()
        .map(|part| {
            if part.starts_with("password=") {
                "password=***"
            } else {
                part
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Refuses an org the store does not know (`--org` or `CAIRN_ORG` mistyped,
/// or the wrong `--data-dir`): every command that reads an org answers
/// this alike, rather than an empty listing that looks like an empty org.
/// An org the store knows with nothing recorded yet is not refused.
pub(crate) fn require_known_org(cli: &Cli, store: &dyn cairn_store::LedgerStore) -> Result<()> {
    // An org is known from its first record, or from an API key made for
    // it (`admin orgs` lists both): a fresh server's org has a key and no
    // record yet.
    if store.orgs()?.contains(&cli.org) || store.key_orgs()?.contains(&cli.org) {
        return Ok(());
    }
    Err(usage(format!(
        "org {} has no records ({}); check --org or CAIRN_ORG",
        cli.org,
        store_location(cli)
    )))
}

/// The error for a session the org does not hold, naming where OTLP
/// ingest stores a session of that name when it is not an id as given
/// (the API's 404 says the same).
pub(crate) fn no_such_session(cli: &Cli, session: &str) -> anyhow::Error {
    let hint = cairn_wire::otlp::stored_session_hint(session)
        .map(|hint| format!(" ({hint})"))
        .unwrap_or_default();
    usage(format!(
        "session {session} does not exist in org {}{hint}",
        cli.org
    ))
}

/// Where the store is, for messages.
pub(super) fn store_location(cli: &Cli) -> String {
    match &cli.database {
        Some(url) => format!("database: {}", redact_password(url)),
        None => format!("data: {}", cli.data_dir.display()),
    }
}
