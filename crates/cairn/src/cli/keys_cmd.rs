//! `cairn keys`: the server's log keys, and their rotation without a flag
//! day (`docs/FORMAT.md` 7.10, `docs/OPERATIONS.md` "Rotating the server
//! key").

use super::*;
use cairn_core::log::{LogKeyAction, OpRecord};
use cairn_core::note::NoteVerifier;

/// What `cairn keys` does besides showing the keys.
#[derive(Debug, clap::Subcommand)]
pub enum KeysAction {
    /// Add a new log key: create it at PATH (or load it, if the file
    /// exists), with the server's name, and write a `log-key add` record
    /// signed by the current key into every org's log. Then restart the
    /// servers one by one with `--server-key PATH`.
    Rotate {
        /// Where the new key is (created if absent, mode 0600). Keep it
        /// outside the data directory.
        #[arg(long)]
        new_key: PathBuf,
    },
    /// Retire a log key once no server signs with it: write a `log-key
    /// retire` record, signed by the current key, into every org's log. A
    /// server holding the retired key then refuses to start.
    Retire {
        /// The key to retire (its vkey, as `cairn keys` lists it).
        key: String,
    },
}

/// `cairn keys [rotate|retire]`.
pub(super) fn keys(
    cli: &Cli,
    store: Arc<dyn LedgerStore>,
    action: Option<&KeysAction>,
) -> Result<Outcome> {
    match action {
        None => show(cli, store.as_ref()),
        Some(KeysAction::Rotate { new_key }) => {
            let loaded = cairn_store::load_or_create_key_file(new_key, store.server_name())
                .with_context(|| format!("loading or creating {}", new_key.display()))?;
            if loaded.signer.name() != store.server_name() {
                return Err(usage(format!(
                    "{} holds a key named {}, not {}: a log key must have the server's name",
                    new_key.display(),
                    loaded.signer.name(),
                    store.server_name()
                )));
            }
            let key = loaded.verifier;
            apply(cli, store, LogKeyAction::Add, &key)?;
            println!("added log key {key}");
            println!(
                "restart each server with --server-key {} (or CAIRN_SERVER_KEY); give verifiers both keys",
                new_key.display()
            );
            Ok(Outcome::Success)
        }
        Some(KeysAction::Retire { key }) => {
            let key = NoteVerifier::parse(key).map_err(|e| usage(format!("{key:?}: {e}")))?;
            if key == *store.server_key() {
                return Err(usage(
                    "this process holds the key to retire: run `cairn keys retire` with the new key loaded (--server-key)",
                ));
            }
            apply(cli, store, LogKeyAction::Retire, &key)?;
            println!("retired log key {key}");
            Ok(Outcome::Success)
        }
    }
}

fn show(cli: &Cli, store: &dyn LedgerStore) -> Result<Outcome> {
    let key = store.server_key().to_string();
    if cli.json {
        let all: Vec<String> = store
            .log_keys(&cli.org)
            .map(|keys| keys.iter().map(ToString::to_string).collect())
            .unwrap_or_else(|_| vec![key.clone()]);
        println!(
            "{}",
            json!({"server_key": key, "name": store.server_name(), "log_keys": all})
        );
    } else {
        println!("{key}");
    }
    Ok(Outcome::Success)
}

/// Writes the record into every org of this server that does not have it
/// yet (so that a run cut short can be repeated), then records the key's
/// new state in the store's metadata.
fn apply(
    cli: &Cli,
    store: Arc<dyn LedgerStore>,
    action: LogKeyAction,
    key: &NoteVerifier,
) -> Result<()> {
    let orgs = store.orgs()?;
    let ledger = Ledger::new(Arc::clone(&store), SequencerConfig::default());
    let mut written = 0;
    let mut held = 0;
    for org in &orgs {
        // An imported log keeps its own server's keys.
        let (_, signer) = store.log_signer(org)?;
        if signer != *store.server_key() {
            continue;
        }
        let done = store
            .op_records(org, "log-key", 0, 100_000)?
            .into_iter()
            .any(|(_, record)| matches!(record, OpRecord::LogKey(r) if r.action == action && r.key == *key));
        if done {
            held += 1;
            continue;
        }
        match ledger.write(WriteRequest::LogKey {
            org_id: org.clone(),
            action,
            key: key.clone(),
        }) {
            Ok(Written::LogKey { seq }) => {
                written += 1;
                held += 1;
                if !cli.json {
                    println!("{org}: log-key {} at seq {seq}", action.as_str());
                }
            }
            Ok(other) => return Err(anyhow!("unexpected answer {other:?}")),
            Err(e) => return Err(append_error(e)),
        }
    }
    ledger.close();
    // A verifier trusts an added key only where a log's add record vouches
    // for it (SECURITY, "Which keys an unpinned verification trusts"): an
    // addition no log holds would leave every later signature of the key
    // unverifiable without --key.
    if action == LogKeyAction::Add && held == 0 {
        return Err(usage(
            "no org of this store has a log of its own yet, so no log could record the new key: record a first step (cairn log), then add the key",
        ));
    }
    store.record_log_key(action, key)?;
    if cli.json {
        println!(
            "{}",
            json!({"action": action.as_str(), "key": key.to_string(), "orgs_written": written})
        );
    }
    Ok(())
}

/// `cairn key-agent --key FILE`: answers `public-key` and `sign <base64>`
/// lines on stdin, one line each on stdout, until stdin closes. A request
/// it does not understand is answered `error ...` (which the requester
/// treats as a failed signature).
pub(super) fn key_agent(key: &std::path::Path) -> Result<Outcome> {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD as B64;
    use std::io::{BufRead as _, Write as _};
    let loaded = cairn_store::load_or_create_key_file(key, "cairn-key-agent")
        .with_context(|| format!("loading {}", key.display()))?;
    let raw = loaded.verifier.public_key().as_bytes().to_vec();
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = line.context("reading a request")?;
        let answer = match line.split_once(' ') {
            None if line == "public-key" => B64.encode(&raw),
            Some(("sign", message)) => match B64.decode(message) {
                Ok(bytes) => match loaded.signer.sign_raw(&bytes) {
                    Ok(signature) => B64.encode(signature),
                    Err(e) => format!("error {e}"),
                },
                Err(_) => "error the message is not base64".to_owned(),
            },
            _ => "error unknown request".to_owned(),
        };
        writeln!(stdout, "{answer}").context("answering")?;
        stdout.flush().context("answering")?;
    }
    Ok(Outcome::Success)
}
