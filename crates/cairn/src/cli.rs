//! Command-line parsing and the commands.
//!
//! This file holds what the command line accepts (`Cli`, `Command` and the
//! options of `verify`, `export` and `receipt`) and the helpers every
//! command shares; `run`, which parses the command line and dispatches
//! each command, is in `dispatch`, and the commands in the files of `cli/`
//! (each with its own options where only it reads them).

use crate::{Outcome, UsageError};
use anyhow::{Context as _, Result, anyhow};
use cairn_core::bundle::BundleVerifier;
use cairn_core::detail::DetailLevel;
use cairn_core::note::NoteVerifier;
use cairn_core::record::Limits;
use cairn_core::verify::{Reason, Verdict};
use cairn_core::{Hash, Timestamp};
use cairn_server::render;
use cairn_server::wire::{step_from_json, step_to_json, verdict_to_json};
use cairn_store::now;
use cairn_store::ops::{ExportScope, verify_org, verify_session};
use cairn_store::{
    AppendError, Ledger, LedgerStore, SequencerConfig, SessionFilter, SqliteOptions, SqliteStore,
    WriteRequest, Written,
    pg::{PgOptions, PgStore},
};
use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

mod admin_cmd;
/// Cairn: a tamper-evident ledger of AI agents' reasoning.
///
/// Exit codes: 0 success (verified), 1 verification failed, 2 usage or
/// input error, 3 storage or internal failure.
mod bundle_feed;
mod dispatch;
mod evidence;
mod keys_cmd;
mod ledger_cmd;
mod mcp_cmd;
mod serve_cmd;
mod store_open;
mod transfer_cmd;

use admin_cmd::AdminCommand;
pub use dispatch::run;
use evidence::*;
use ledger_cmd::*;
pub(crate) use serve_cmd::shutdown_signal;
use serve_cmd::*;
use store_open::store_location;
pub(crate) use store_open::{
    no_such_session, open_store, require_existing_store, require_known_org,
};
use transfer_cmd::*;

#[derive(Debug, Parser)]
#[command(name = "cairn", version, about, long_about = None)]
pub(crate) struct Cli {
    /// Data directory of the embedded store (created by the first command
    /// that writes; a reading command refuses one without a store).
    #[arg(
        long,
        global = true,
        help_heading = "Store",
        env = "CAIRN_DATA_DIR",
        default_value = "cairn-data"
    )]
    data_dir: PathBuf,
    /// PostgreSQL connection URL (`postgres://user@host/db`): use that
    /// database instead of the embedded store, so that many servers share
    /// one ledger. The server key stays in the data directory; every server
    /// on one database must have the same key.
    #[arg(
        long,
        global = true,
        help_heading = "Store",
        env = "CAIRN_DATABASE_URL"
    )]
    database: Option<String>,
    /// Seconds after which a PostgreSQL connection that gets no answer from
    /// the network is given up (TCP connect, keepalive and unacknowledged
    /// data): a partition then fails writes with 503 and the next batch
    /// reconnects, instead of waiting for the kernel's minutes.
    #[arg(long, global = true, help_heading = "Store", env = "CAIRN_DATABASE_TIMEOUT", default_value = "30", value_parser = crate::serve_config::seconds)]
    database_timeout: std::time::Duration,
    /// The org (tenant) to work in.
    #[arg(long, global = true, env = "CAIRN_ORG", default_value = "default")]
    pub(crate) org: String,
    /// Name of the server key, used when the data directory is created
    /// (log origins are `<name>/<org>`).
    #[arg(
        long,
        global = true,
        help_heading = "Store",
        env = "CAIRN_SERVER_NAME",
        default_value = "cairn.local"
    )]
    server_name: String,
    /// The server's signing key file, kept outside the data directory so
    /// that a copy of the directory (or access to the database) alone
    /// cannot sign checkpoints; created there on first use (mode 0600).
    /// Default: `server.key` in the data directory. A store records the
    /// key that signs it and refuses to sequence with another.
    #[arg(long, global = true, help_heading = "Store", env = "CAIRN_SERVER_KEY")]
    server_key: Option<PathBuf>,
    /// A command that holds the signing key and signs on request (an HSM
    /// or KMS client, `ssh signer cairn key-agent --key FILE`), so that the
    /// key never enters this process: started once with `sh -c`, spoken to
    /// on stdin and stdout (docs/OPERATIONS.md, "An external signer").
    #[arg(
        long,
        global = true,
        help_heading = "Store",
        env = "CAIRN_SERVER_KEY_COMMAND",
        conflicts_with = "server_key"
    )]
    server_key_command: Option<String>,
    /// Maximum content length per step, in bytes.
    #[arg(
        long,
        global = true,
        help_heading = "Server settings",
        env = "CAIRN_MAX_CONTENT_LENGTH",
        default_value_t = 65_536
    )]
    max_content_length: usize,
    /// Print JSON for scripts.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Seed 000's switch: `false` makes `serve` and `mcp` refuse every write
    /// (503 ledger_disabled) while reads and verification keep working.
    #[arg(long, global = true, help_heading = "Server settings", env = "CAIRN_ENABLED", default_value_t = true, action = clap::ArgAction::Set)]
    enabled: bool,
    /// Seed 000's retention: `serve` erases the payload of sessions whose
    /// last step is older than this many days (hourly, recorded as erasures;
    /// hashes stay and everything still verifies). 0 keeps payloads forever.
    #[arg(
        long,
        global = true,
        help_heading = "Server settings",
        env = "CAIRN_RETENTION_DAYS",
        default_value_t = 90
    )]
    retention_days: u32,
    /// Seed 000's sampling: the fraction of steps embedded for semantic
    /// search (decision, action, error, correction and final answer always).
    #[arg(long, global = true, help_heading = "Server settings", env = "CAIRN_EMBEDDING_SAMPLE_RATE", default_value_t = 0.1, value_parser = parse_rate)]
    embedding_sample_rate: f64,
    /// How far, in seconds, a writer's own `created_at` may lie from the
    /// server's clock: recorded in each new session, refused beyond it
    /// (leave created_at out to use the server's time).
    #[arg(long, global = true, help_heading = "Server settings", env = "CAIRN_MAX_CLOCK_SKEW", default_value_t = cairn_core::record::DEFAULT_MAX_CLOCK_SKEW_S)]
    pub(crate) max_clock_skew: u64,
    /// The most agent keys one org's log may register (revoked keys
    /// count; the last tenth only by an admin): the sequencer and each
    /// verification of the org hold them all in memory, about 800 bytes a
    /// key.
    #[arg(long, global = true, help_heading = "Server settings", env = "CAIRN_MAX_AGENT_KEYS", default_value_t = cairn_store::DEFAULT_MAX_AGENT_KEYS, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_agent_keys: u64,
    /// The embedder of semantic search.
    #[command(flatten, next_help_heading = "Semantic search")]
    pub(crate) embedding: crate::embedding_config::EmbeddingArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP API on the embedded store. On a fresh data directory
    /// an admin key for the org is created and printed once.
    Serve {
        /// Address to listen on.
        #[arg(long, env = "CAIRN_LISTEN", default_value = "127.0.0.1:8714")]
        listen: String,
        /// If the org has no session yet, record seed 000's sample session
        /// (revenue-analysis-q4) and a support agent's refund
        /// (support-refund-1182) so there is something to look at.
        #[arg(long)]
        sample: bool,
        /// Also serve OTLP/HTTP alone on this address (conventionally
        /// 127.0.0.1:4318 or 0.0.0.0:4318), so that exporters work with
        /// OTEL_EXPORTER_OTLP_ENDPOINT=http://host:4318 unchanged. The main
        /// address serves POST /v1/traces too.
        #[arg(long, env = "CAIRN_OTLP_LISTEN")]
        otlp_listen: Option<String>,
        /// Largest OTLP request body, compressed and once decompressed, in
        /// bytes.
        #[arg(long, env = "CAIRN_OTLP_MAX_BODY_BYTES", default_value_t = 16 * 1024 * 1024)]
        otlp_max_body_bytes: usize,
        /// Steps the sequencer may hold before OTLP exports are answered
        /// 429 with Retry-After (exporters retry).
        #[arg(long, env = "CAIRN_OTLP_MAX_BACKLOG", default_value_t = 65_536)]
        otlp_max_backlog: usize,
        /// Seconds an OTLP span that names no session waits for a span of
        /// its trace that names one (exporters send a turn's model and tool
        /// spans before the agent span carrying the conversation id); then
        /// it is written into the session its trace's steps are in (when
        /// its key opened it), else the one named after its trace. 0: never
        /// wait (spans held by an earlier run are written at once).
        #[arg(long, env = "CAIRN_OTLP_HOLD_SECONDS", default_value_t = 120)]
        otlp_hold_seconds: u64,
        /// The most bytes an org's waiting OTLP spans may take in the
        /// store; past it, spans that name no session are written at once.
        #[arg(long, env = "CAIRN_OTLP_MAX_HELD_BYTES", default_value_t = 64 * 1024 * 1024)]
        otlp_max_held_bytes: u64,
        /// Get checkpoints cosigned by this witness: `URL=VKEY`, its
        /// submission URL (http://host:port[/prefix], no `=`) and the
        /// cosignature key `cairn witness` prints. Every new checkpoint is
        /// sent to every witness; refusals are logged as errors and counted
        /// in /metrics. Repeatable (or comma-separated in the environment).
        #[arg(long = "witness", env = "CAIRN_WITNESSES", value_delimiter = ',')]
        witnesses: Vec<String>,
        /// Seconds between two rounds of sending checkpoints to witnesses.
        #[arg(long, env = "CAIRN_WITNESS_INTERVAL", default_value_t = 5)]
        witness_interval: u64,
        /// Also be a witness (C2SP tlog-witness) for another log, from this
        /// process: `ORIGIN=VKEY` as `cairn witness --log`. The witness's
        /// key and state are in `<data dir>/witness` (its own key, never
        /// the server's); it listens on --witness-listen. Repeatable (or
        /// comma-separated in the environment).
        #[arg(
            long = "witness-log",
            env = "CAIRN_WITNESS_LOGS",
            value_delimiter = ','
        )]
        witness_logs: Vec<String>,
        /// Where the hosted witness listens (with --witness-log).
        #[arg(long, env = "CAIRN_WITNESS_LISTEN", default_value = "127.0.0.1:8715")]
        witness_listen: String,
        /// Limits: sizes, timeouts, connections, rates, sessions, SQL.
        #[command(flatten)]
        limits: Box<crate::serve_config::ServeLimits>,
    },
    /// Run a witness (C2SP tlog-witness): cosign checkpoints of the logs
    /// given with --log, only when each extends the last one cosigned.
    Witness(crate::witness_cmd::WitnessArgs),
    /// Follow an org log through its C2SP tlog-tiles API (a monitor):
    /// check every new checkpoint against the last one seen (rollback,
    /// fork), re-verify every record, and stop at the first problem.
    Monitor(crate::monitor_cmd::MonitorArgs),
    /// Hold a key file and sign on request, for another machine's
    /// `--server-key-command` (the line protocol of docs/OPERATIONS.md,
    /// "An external signer", on stdin and stdout).
    KeyAgent {
        /// The key file (a server key, as `cairn` creates them).
        #[arg(long)]
        key: PathBuf,
    },
    /// Record a sample session in memory, verify it, tamper with it, and
    /// show the verdict (no data directory needed).
    Demo,
    /// Record one step (from flags), or many (JSON lines on stdin with
    /// --stdin).
    Log(LogArgs),
    /// List sessions with step counts, first and last step time and chain
    /// validity.
    Sessions {
        /// Only this agent's sessions.
        #[arg(long)]
        agent: Option<String>,
        /// At most this many, newest first.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Continue after this session: the cursor a cut listing names
        /// on stderr (with `--json`, every row carries its own), as REST's
        /// `cursor`.
        #[arg(long)]
        after: Option<String>,
    },
    /// Replay a session.
    Replay {
        /// The session id.
        session: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Verify the chain and include the verdict (with --format markdown,
        /// on standard error; a failed verification exits 1).
        #[arg(long)]
        verify: bool,
        /// Seed 004's detail level: generic, detailed or full (full needs
        /// the session's recorded consent). Default: every field.
        #[arg(long, value_parser = parse_level)]
        level: Option<DetailLevel>,
    },
    /// Verify an org's whole log (every chain, every record, and the log
    /// against every checkpoint; every org with --all-orgs), one session,
    /// or an export bundle offline.
    Verify(VerifyArgs),
    /// Write an export bundle (JSON lines) that verifies offline.
    Export(ExportArgs),
    /// Import a whole-org bundle (exported with --all) into this store,
    /// after verifying all of it. The org keeps its id, seq numbers,
    /// hashes and signatures; if another server signed it, it is a
    /// read-only mirror verified with that server's key.
    Import {
        /// The bundle file.
        bundle: PathBuf,
        /// Trust only this server key (vkey form) instead of the bundle's.
        #[arg(long)]
        key: Option<String>,
        /// The longest line read, in bytes; a longer line refuses the
        /// import, never read into memory whole.
        #[arg(long, env = "CAIRN_MAX_BUNDLE_LINE_BYTES", default_value_t = cairn_store::ops::DEFAULT_MAX_BUNDLE_LINE_BYTES)]
        max_bundle_line_bytes: usize,
    },
    /// Erase a step's payload (content, input, output, metadata): the
    /// values become commitments, every hash stays, the erasure is recorded.
    Erase {
        /// The step's trace id.
        trace_id: String,
        /// Why (recorded with the erasure).
        #[arg(long)]
        reason: String,
    },
    /// Apply retention now: erase the payload of sessions whose last step
    /// is older than --retention-days (or --before).
    Retention {
        /// Erase sessions whose last step is older than this time (RFC
        /// 3339) instead.
        #[arg(long)]
        before: Option<String>,
    },
    /// Open a session explicitly: a strict decision trail (seed 001), or
    /// one continuing a sealed session.
    Start(crate::records::StartArgs),
    /// Seed 002's parseThinking: split thinking text (a file, or stdin)
    /// into thinking, plan, waiting_approval, execute and error steps;
    /// with --session, record them as one turn.
    Thinking(crate::records::ThinkingArgs),
    /// A session's audit trail across its turns, or one turn (seed 002's
    /// Markdown by default).
    Trail {
        /// The session id.
        session: String,
        /// Only this turn.
        #[arg(long)]
        turn: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Markdown)]
        format: Format,
    },
    /// Seed 003's review queue, and review decisions on flagged steps.
    #[command(subcommand)]
    Review(crate::records::ReviewCommand),
    /// Record an audit event (seed 001) that steps can link to.
    AuditEvent(crate::records::AuditEventArgs),
    /// Analyst SQL: one read-only query over the org's views steps,
    /// sessions and records (SQLite or PostgreSQL dialect, as the store).
    Sql {
        /// The query.
        statement: String,
        /// At most this many rows.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// Register an agent's Ed25519 public key (seed 004); prints its key id.
    AgentKey(crate::records::AgentKeyArgs),
    /// Import an agent-signed complete trace (seed 004's format): the
    /// signature is checked against the registered key, the trace kept
    /// whole, its components recorded as a session's steps.
    ImportTrace(crate::records::ImportTraceArgs),
    /// Search the steps of --org: by words (full text), by meaning
    /// (semantic) or both (hybrid, the default), best first, as `GET
    /// /v1/search` does.
    Search(SearchArgs),
    /// Embed again every step that has a vector or that seed 000's rule
    /// selects, with the configured embedder (after changing
    /// --embedding-model or --embedding-endpoint; until then those steps
    /// are not found by meaning). Stop the server first on the embedded
    /// store; on PostgreSQL it runs beside the servers.
    Reindex {
        /// Every org, not only --org.
        #[arg(long)]
        all_orgs: bool,
        /// Instead, restore the rows behind the listing's kind filter
        /// from the log (which a server of an earlier version writing
        /// beside this version's schema leaves out; `cairn verify` names
        /// them).
        #[arg(long)]
        kinds: bool,
    },
    /// Show the server's public key (C2SP vkey form; with --json, every
    /// log key too), or rotate it.
    Keys {
        /// Rotate: add a new key, or retire an old one.
        #[command(subcommand)]
        action: Option<keys_cmd::KeysAction>,
    },
    /// COSE receipts (RFC 9942): verify one offline.
    #[command(subcommand)]
    Receipt(ReceiptCommand),
    /// Serve MCP over stdio (for agents that start Cairn as a subprocess),
    /// acting for --org as its local operator.
    Mcp {
        /// The agent tools act for when their arguments name none (seed
        /// 000's calls leave agent_id out).
        #[arg(long, env = "CAIRN_AGENT")]
        agent: Option<String>,
    },
    /// Manage orgs and API keys on the data directory (no server needed).
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Sign a checkpoint of the org log now and print it (save it to check
    /// the log later with `verify --checkpoint`).
    Checkpoint,
    /// Seal a session: sign its Merkle root; nothing can be appended after.
    /// A strict session must end with a reflection.
    Seal {
        /// The session id.
        session: String,
        /// Refuse unless the last step is a reflection (seed 001's
        /// proof-grade `merkle_finalize`), whatever the session's profile.
        #[arg(long)]
        require_reflection: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Text,
    Json,
    Markdown,
}

#[derive(Debug, clap::Args)]
struct VerifyArgs {
    /// Verify only this session's chain.
    #[arg(long, conflicts_with = "bundle")]
    session: Option<String>,
    /// Verify every org of the store, each as --org would (without it,
    /// only --org's log is verified). --key and --witness then apply to
    /// every org: a mirrored org signed by another server needs that
    /// server's key given too.
    #[arg(long, conflicts_with_all = ["session", "bundle", "checkpoint"])]
    all_orgs: bool,
    /// Verify an export bundle offline (no store needed); `-` reads it
    /// from standard input.
    #[arg(long)]
    bundle: Option<PathBuf>,
    /// A signed checkpoint saved earlier (by an auditor or witness): the
    /// log (or the bundle's checkpoint) must be consistent with it; a file
    /// that cannot be read, or that is not a checkpoint of this log signed
    /// by its key, is an error. Repeatable.
    #[arg(long)]
    checkpoint: Vec<PathBuf>,
    /// Trust only these server keys (vkey form) instead of the one in the
    /// data directory or the bundle. Repeatable.
    #[arg(long)]
    key: Vec<String>,
    /// With --bundle (a partial one): a complete bundle of the same log,
    /// from which the selection is recomputed by the published rule; a
    /// signed selection that differs is a lie the operator signed.
    #[arg(long, requires = "bundle")]
    log: Option<PathBuf>,
    /// A witness's cosignature key (vkey, as `cairn witness` prints it):
    /// the checkpoint that authenticates the verdict (the bundle's, or the
    /// store's latest) must carry valid cosignatures by --witness-quorum
    /// of the witnesses given (reason insufficient-cosignatures).
    /// Repeatable.
    #[arg(long = "witness", conflicts_with = "session")]
    witness: Vec<String>,
    /// How many of the --witness keys must have cosigned (default: all).
    #[arg(long, requires = "witness")]
    witness_quorum: Option<usize>,
    /// With --bundle (and --log): the longest line read, in bytes; a
    /// longer line is an error, never read into memory whole.
    #[arg(long, env = "CAIRN_MAX_BUNDLE_LINE_BYTES", default_value_t = cairn_store::ops::DEFAULT_MAX_BUNDLE_LINE_BYTES)]
    max_bundle_line_bytes: usize,
}

#[derive(Debug, clap::Args)]
struct ExportArgs {
    /// Export one session.
    #[arg(long, conflicts_with_all = ["agent", "since", "all"])]
    session: Option<String>,
    /// Export every session of an agent.
    #[arg(long, conflicts_with_all = ["since", "all"])]
    agent: Option<String>,
    /// Export sessions started at or after this time (RFC 3339, or a date:
    /// its start).
    #[arg(long, requires = "until")]
    since: Option<String>,
    /// ... and before this time (RFC 3339, or a date: that day included).
    #[arg(long, requires = "since")]
    until: Option<String>,
    /// Export the whole org log.
    #[arg(long)]
    all: bool,
    /// Write here instead of stdout.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Seed 004's detail level of the steps: generic, detailed or full
    /// (full needs each session's recorded consent). The bundle verifies
    /// at any level. Default: every field.
    #[arg(long, value_parser = parse_level)]
    level: Option<DetailLevel>,
    /// Include the consistency proof from a log of this size to the
    /// bundle's checkpoint, for a verifier holding a checkpoint of it.
    #[arg(long, conflicts_with = "since_checkpoint")]
    since_size: Option<u64>,
    /// Include the consistency proof from this checkpoint (a file saved
    /// earlier) to the bundle's checkpoint.
    #[arg(long)]
    since_checkpoint: Option<PathBuf>,
    /// Also write one COSE inclusion receipt (RFC 9942) per exported
    /// record into this directory, as `<seq>.cose`, against the bundle's
    /// checkpoint (created if missing).
    #[arg(long, value_name = "DIR")]
    receipts: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum ReceiptCommand {
    /// Verify a COSE receipt (RFC 9942) offline: an inclusion receipt
    /// against a record's leaf hash, or a consistency receipt against the
    /// older root. Exit 0 when it verifies, 1 when not.
    Verify {
        /// The receipt file (CBOR).
        file: PathBuf,
        /// The server key (vkey form, as `cairn keys` prints it).
        #[arg(long)]
        key: String,
        /// An inclusion receipt: the record's RFC 9162 leaf hash (hex).
        #[arg(
            long,
            required_unless_present = "old_root",
            conflicts_with = "old_root"
        )]
        leaf: Option<String>,
        /// A consistency receipt: the older tree's root (hex).
        #[arg(long)]
        old_root: Option<String>,
        /// The root the receipt must lead to (hex), from a checkpoint.
        #[arg(long)]
        root: Option<String>,
    },
}

fn parse_level(text: &str) -> Result<DetailLevel, String> {
    DetailLevel::parse(text).ok_or_else(|| "expected generic, detailed or full".to_owned())
}

pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}

fn progress_bar(total: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({per_sec}, {eta})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    bar
}

impl Command {
    /// Whether the command appends to the ledger: then it must sequence the
    /// store (on the embedded store, hold its lock). Reading commands open
    /// it beside a running server.
    fn writes(&self) -> bool {
        match self {
            Command::Sessions { .. }
            | Command::Replay { .. }
            | Command::Verify(_)
            | Command::Trail { .. }
            | Command::Sql { .. }
            | Command::Search(_)
            | Command::Keys { action: None }
            | Command::Receipt(_)
            | Command::Demo => false,
            // Keys are read and written beside a running server; the tree
            // repair rewrites rows the sequencer writes, so it takes the
            // data directory's lock as every write does.
            Command::Admin(command) => matches!(command, admin_cmd::AdminCommand::RepairTree),
            Command::Review(command) => command.writes(),
            _ => true,
        }
    }
}

impl Command {
    /// Whether the command only reads the store (an export and a search
    /// too, though they may sign a checkpoint or embed what is queued; a
    /// tree repair has nothing to repair in a new store):
    /// such a command refuses a data directory without a store rather than
    /// create one (`require_existing_store`). Creating a key with `admin`
    /// creates the store and its org, as `log` and `serve` do.
    pub(crate) fn only_reads(&self) -> bool {
        match self {
            Command::Export(_) | Command::Search(_) => true,
            // Showing the key of a new data directory makes it (a witness
            // is told a server's key before the server first starts);
            // `keys` then says so on standard error.
            Command::Keys { .. } => false,
            Command::Admin(command) => {
                !matches!(command, admin_cmd::AdminCommand::CreateKey { .. })
            }
            command => !command.writes(),
        }
    }
}

/// A `--limit` read as the API reads its `limit` (1 to the listing's
/// maximum, never clamped): refused with the API's code and field.
pub(crate) fn limit_of(given: usize, limit: cairn_server::ResultLimit) -> Result<usize> {
    cairn_server::result_limit(Some(u64::try_from(given).ok()), limit).map_err(refused)
}

/// The command line's flag for an API member whose flag is named
/// otherwise (`agent_id` is `--agent`), shared by the commands that take
/// them.
pub(crate) fn flag_for_member(member: &str) -> Option<&'static str> {
    match member {
        "agent_id" => Some("--agent"),
        "session_id" => Some("--session"),
        "step_type" => Some("--type"),
        "turn_id" => Some("--turn"),
        "turn_step" => Some("--turn-step"),
        "task_id" => Some("--task"),
        "input_data" => Some("--input"),
        "output_data" => Some("--output"),
        _ => None,
    }
}

/// [`refused`], its message naming the command line's `flag` for the
/// API's field.
pub(crate) fn refused_naming(mut e: cairn_server::ApiError, flag: &str) -> anyhow::Error {
    e.message = format!("{} ({flag})", e.message.trim_end_matches('.'));
    refused(e)
}

/// An input the API would refuse, with the API's code and field.
pub(crate) fn refused(e: cairn_server::ApiError) -> anyhow::Error {
    crate::RefusedError {
        code: e.code,
        field: e.field,
        message: e.message,
    }
    .into()
}

pub(crate) fn append_error(e: AppendError) -> anyhow::Error {
    match e {
        AppendError::Refused(r) => refused(cairn_server::ApiError::from(r)),
        AppendError::Store(e) => {
            anyhow!(
                "storage failure: {e}; {}",
                cairn_server::UNACKNOWLEDGED_WRITE
            )
        }
    }
}

pub(crate) fn parse_json_arg(name: &str, text: &Option<String>) -> Result<Option<Value>> {
    text.as_ref()
        .map(|t| {
            serde_json::from_str(t).map_err(|e| usage(format!("--{name} is not valid JSON: {e}")))
        })
        .transpose()
}

fn parse_rate(text: &str) -> std::result::Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|r| (0.0..=1.0).contains(r))
        .ok_or_else(|| format!("{text:?} is not a rate between 0 and 1"))
}
