//! `cairn monitor URL`: follows an org log through its C2SP tlog-tiles read
//! API, re-verifying every record, and exits on the first problem
//! ([`cairn_server::monitor`]).

use crate::Outcome;
use crate::cli::usage;
use anyhow::{Context as _, Result};
use cairn_core::note::NoteVerifier;
use cairn_server::monitor::{Monitor, MonitorConfig, PendingErasure, Problem};
use cairn_server::render::terminal_safe;
use std::path::PathBuf;
use std::time::Duration;

/// The options of `cairn monitor`.
#[derive(Debug, clap::Args)]
pub struct MonitorArgs {
    /// The log's tlog-tiles prefix: for Cairn, `http://HOST:PORT/v1/tlog`
    /// (the org is the API key's).
    pub url: String,
    /// An auditor or admin key of the org (record tiles carry the whole
    /// content).
    #[arg(long, env = "CAIRN_API_KEY", hide_env_values = true)]
    pub api_key: String,
    /// The log's checkpoint key (vkey, as `cairn serve` logs it); repeat
    /// for the keys of a rotation. Checkpoints signed by no key given are
    /// refused.
    #[arg(long = "log-key", required = true)]
    pub log_keys: Vec<String>,
    /// Seconds between two polls.
    #[arg(long, default_value_t = 10)]
    pub interval: u64,
    /// Poll once and exit (0 if the log checked out, 1 on a problem).
    #[arg(long)]
    pub once: bool,
    /// A file keeping the last checkpoint seen and the erasures still
    /// awaited, read at start and written after every good poll, so that a
    /// rollback or fork between two runs is caught too (the log is mirrored
    /// again from its first entry), and an entry read erased without its
    /// erasure record is found by a later run as by one long-running
    /// monitor.
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// The largest answer read, in bytes (a record tile holds 256 records).
    #[arg(long, default_value_t = 512 * 1024 * 1024)]
    pub max_response_bytes: usize,
}

/// Runs the monitor until the first problem (or one poll with `--once`).
pub fn run(args: &MonitorArgs) -> Result<Outcome> {
    let prefix = args.url.trim_end_matches('/').to_owned();
    if !prefix.starts_with("http://") {
        return Err(usage(format!(
            "{prefix:?} must start with http:// (reach a remote log through a TLS proxy: every \
             answer is verified, so the channel needs no trust)"
        )));
    }
    let log_keys = args
        .log_keys
        .iter()
        .map(|k| NoteVerifier::parse(k).map_err(|e| usage(format!("--log-key {k:?}: {e}"))))
        .collect::<Result<Vec<_>>>()?;
    let state = match &args.state {
        Some(path) if path.exists() => read_state(path)?,
        _ => State::default(),
    };
    let mut monitor = Monitor::new(MonitorConfig {
        prefix,
        api_key: args.api_key.clone(),
        log_keys,
        max_response_bytes: args.max_response_bytes,
        last_seen: state.checkpoint,
        pending_erasures: state.pending_erasures,
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        loop {
            match monitor.poll().await {
                Ok(report) => {
                    println!(
                        "ok: size {} root {} ({} records verified by this poll, {} since the monitor started)",
                        report.size,
                        report.root,
                        report.new_records,
                        monitor.records_verified()
                    );
                    if let (Some(path), Some(note)) = (&args.state, monitor.last_note()) {
                        save_state(
                            path,
                            &State {
                                checkpoint: Some(note.to_owned()),
                                pending_erasures: monitor.pending_erasures(),
                            },
                        )?;
                    }
                }
                Err(Problem::Refused(why)) => {
                    return Err(usage(format!(
                        "the log refused the monitor: {}",
                        terminal_safe(&why)
                    )));
                }
                Err(problem) if problem.is_finding() => {
                    println!("PROBLEM: {}", terminal_safe(&problem.to_string()));
                    return Ok(Outcome::VerificationFailed);
                }
                Err(problem) if args.once => anyhow::bail!("{problem}"),
                Err(problem) => eprintln!(
                    "cairn monitor: {}; polling again",
                    terminal_safe(&problem.to_string())
                ),
            }
            if args.once {
                return Ok(Outcome::Success);
            }
            tokio::time::sleep(Duration::from_secs(args.interval.max(1))).await;
        }
    })
}

/// What `--state` keeps between runs: a JSON object (a file written
/// before the erasures were kept holds the checkpoint note alone, and is
/// read as such).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct State {
    /// The last checkpoint note that verified.
    checkpoint: Option<String>,
    /// The erasures still awaited.
    #[serde(default)]
    pending_erasures: Vec<PendingErasure>,
}

fn read_state(path: &std::path::Path) -> Result<State> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the monitor state {}", path.display()))?;
    if !text.starts_with('{') {
        // A checkpoint note (it starts with its origin).
        return Ok(State {
            checkpoint: Some(text),
            pending_erasures: Vec::new(),
        });
    }
    serde_json::from_str(&text).map_err(|e| {
        usage(format!(
            "the monitor state {} is not one this cairn wrote ({e}): remove it to start over (a rollback or fork against what it held is then not caught)",
            path.display()
        ))
    })
}

/// Writes the state file whole or not at all.
fn save_state(path: &std::path::Path, state: &State) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let text = serde_json::to_string(state).context("writing the monitor state")?;
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .with_context(|| format!("writing the monitor state {}", path.display()))
}
