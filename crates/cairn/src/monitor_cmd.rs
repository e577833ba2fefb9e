//! `cairn monitor URL`: follows an org log through its C2SP tlog-tiles read
//! API, re-verifying every record, and exits on the first problem
//! ([`cairn_server::monitor`]).

use crate::Outcome;
use crate::cli::usage;
use anyhow::{Context as _, Result};
use cairn_core::note::NoteVerifier;
use cairn_server::monitor::{Monitor, MonitorConfig};
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
    /// A file keeping the last checkpoint seen, read at start and written
    /// after every good poll, so that a rollback or fork between two runs
    /// is caught too (the log is mirrored again from its first entry).
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
    let last_seen = match &args.state {
        Some(path) if path.exists() => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading the monitor state {}", path.display()))?,
        ),
        _ => None,
    };
    let mut monitor = Monitor::new(MonitorConfig {
        prefix,
        api_key: args.api_key.clone(),
        log_keys,
        max_response_bytes: args.max_response_bytes,
        last_seen,
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
                        "ok: size {} root {} ({} new records verified, {} in all)",
                        report.size,
                        report.root,
                        report.new_records,
                        monitor.records_verified()
                    );
                    if let (Some(path), Some(note)) = (&args.state, monitor.last_note()) {
                        save_state(path, note)?;
                    }
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

/// Writes the state file whole or not at all.
fn save_state(path: &std::path::Path, note: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, note)
        .and_then(|()| std::fs::rename(&tmp, path))
        .with_context(|| format!("writing the monitor state {}", path.display()))
}
