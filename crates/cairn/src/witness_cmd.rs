//! `cairn witness`: a C2SP tlog-witness for Cairn logs (and any log that
//! signs C2SP checkpoints with Ed25519), and the witness options of `cairn
//! serve` and `cairn verify`.

use crate::Outcome;
use crate::cli::usage;
use anyhow::{Context as _, Result};
use cairn_core::checkpoint::Cosigner;
use cairn_core::note::NoteVerifier;
use cairn_core::witness::WitnessPolicy;
use cairn_store::witness_state::WitnessState;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The options of `cairn witness`.
#[derive(Debug, clap::Args)]
pub struct WitnessArgs {
    /// Directory of the witness's key (`witness.key`, created on first
    /// start, mode 0600) and state (`witness.db`). Keep it apart from any
    /// log's data directory: a witness must not share its log's key.
    #[arg(long, env = "CAIRN_WITNESS_DIR", default_value = "cairn-witness")]
    pub dir: PathBuf,
    /// The witness's name, used when its key is created (a schema-less URL
    /// that identifies it, e.g. witness.example.com/w1).
    #[arg(
        long,
        env = "CAIRN_WITNESS_NAME",
        default_value = "cairn-witness.local"
    )]
    pub name: String,
    /// Address to listen on.
    #[arg(long, env = "CAIRN_WITNESS_LISTEN", default_value = "127.0.0.1:8715")]
    pub listen: String,
    /// A log to witness: `ORIGIN=VKEY`, the log's origin line (for Cairn,
    /// `<server name>/<org>`) and its checkpoint key (the vkey `cairn
    /// serve` logs and `cairn keys` prints). The origin is everything
    /// before the first `=`. Repeatable; at least one.
    #[arg(long = "log", required = true)]
    pub logs: Vec<String>,
}

/// Parses `ORIGIN=VKEY` specs into trusted keys per origin.
fn logs(specs: &[String]) -> Result<HashMap<String, Vec<NoteVerifier>>> {
    let mut logs: HashMap<String, Vec<NoteVerifier>> = HashMap::new();
    for spec in specs {
        let (origin, vkey) = spec
            .split_once('=')
            .ok_or_else(|| usage(format!("--log takes ORIGIN=VKEY, not {spec:?}")))?;
        if origin.is_empty() || origin.contains(char::is_whitespace) {
            return Err(usage(format!(
                "--log {spec:?}: the origin must be one non-empty line"
            )));
        }
        let key = NoteVerifier::parse(vkey)
            .map_err(|e| usage(format!("--log {spec:?}: the log key: {e}")))?;
        if key.alg() != cairn_core::note::ALG_ED25519 {
            return Err(usage(format!(
                "--log {spec:?}: the log key must be an Ed25519 note key (algorithm 0x01)"
            )));
        }
        logs.entry(origin.to_owned()).or_default().push(key);
    }
    Ok(logs)
}

/// A witness of the logs `specs` (`ORIGIN=VKEY`) with its key and state in
/// `dir` (the key named `name` when it is created): for `cairn witness`,
/// and for `cairn serve --witness-log`, which witnesses other logs from
/// the log server's process.
pub fn build(
    dir: &std::path::Path,
    name: &str,
    specs: &[String],
) -> Result<Arc<cairn_server::witness::Witness>> {
    let logs = logs(specs)?;
    let key = WitnessState::key(dir, name)
        .with_context(|| format!("loading the witness key in {}", dir.display()))?;
    if key.signer.name() != name {
        eprintln!(
            "cairn witness: {} holds a key named {}; the name {name} is only used when the key is created",
            dir.join(cairn_store::witness_state::WITNESS_KEY).display(),
            key.signer.name(),
        );
    }
    let cosigner = Cosigner::from_note_signer(&key.signer)
        .ok_or_else(|| anyhow::anyhow!("a witness's key is a key file"))?;
    let state = WitnessState::open(dir)
        .with_context(|| format!("opening the witness state in {}", dir.display()))?;
    Ok(Arc::new(cairn_server::witness::Witness {
        cosigner,
        logs,
        state,
    }))
}

/// Runs the witness until interrupted.
pub fn run(args: &WitnessArgs) -> Result<Outcome> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAIRN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    let witness = build(&args.dir, &args.name, &args.logs)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .map_err(|e| usage(format!("cannot listen on {}: {e}", args.listen)))?;
        let address = listener
            .local_addr()
            .context("reading the listening address")?;
        println!("witness vkey: {}", witness.cosigner.verifier());
        println!(
            "cairn witness {} listening on http://{address} ({} log(s))",
            witness.cosigner.verifier().name(),
            witness.logs.len()
        );
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        cairn_server::serve_witness(
            listener,
            witness,
            &cairn_server::Limits::default(),
            crate::cli::shutdown_signal(),
        )
        .await
        .context("serving the witness")?;
        Ok::<(), anyhow::Error>(())
    })?;
    Ok(Outcome::Success)
}

/// The witness policy of `cairn verify --witness VKEY --witness-quorum K`
/// (the quorum defaults to all the witnesses given).
pub fn policy(witnesses: &[String], quorum: Option<usize>) -> Result<Option<WitnessPolicy>> {
    if witnesses.is_empty() {
        return Ok(None);
    }
    let keys = witnesses
        .iter()
        .map(|vkey| {
            NoteVerifier::parse(vkey).map_err(|e| usage(format!("--witness {vkey:?}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let quorum = quorum.unwrap_or(keys.len());
    WitnessPolicy::new(keys, quorum)
        .map(Some)
        .map_err(|e| usage(format!("the witness policy: {e}")))
}
