//! Commands for seeds 001 to 003 beyond logging: opening a session (strict,
//! or continuing a sealed one), `parseThinking` and recording a turn, a
//! session's audit trail, the review queue and review decisions, and
//! audit events.

use crate::Outcome;
use crate::cli::{Cli, Format, append_error, parse_json_arg, usage};
use anyhow::{Context as _, Result};
use cairn_core::record::Profile;
use cairn_server::{render, wire};
use cairn_store::{
    Ledger, LedgerStore, NewSession, NewStep, SequencerConfig, WriteRequest, Written,
};
use cairn_wire::trail::TurnsForm;
use serde_json::{Value, json};
use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::sync::Arc;

/// `cairn start`.
#[derive(Debug, clap::Args)]
pub struct StartArgs {
    /// The session id.
    session: String,
    /// The agent running it.
    #[arg(long, env = "CAIRN_AGENT")]
    agent: String,
    /// A seed 001 decision trail: only plan, analysis, decision and
    /// reflection, and it seals only after a closing reflection.
    #[arg(long)]
    strict: bool,
    /// Continue this sealed session: its final hash enters the genesis.
    #[arg(long, conflicts_with = "predecessor")]
    predecessor_session: Option<String>,
    /// Continue the sealed session that ends with this hash (hex).
    #[arg(long)]
    predecessor: Option<String>,
    /// Record the hash of the agent id instead of its name (seed 004).
    #[arg(long)]
    hash_agent_id: bool,
    /// The subject consented to full-detail exports of this session.
    #[arg(long)]
    full_consent: bool,
}

/// `cairn thinking`.
#[derive(Debug, clap::Args)]
pub struct ThinkingArgs {
    /// The thinking text; stdin when absent.
    file: Option<PathBuf>,
    /// Record the parsed steps as one turn of this session.
    #[arg(long)]
    session: Option<String>,
    /// The agent (with --session).
    #[arg(long, env = "CAIRN_AGENT", requires = "session")]
    agent: Option<String>,
    /// The turn id (with --session); a new one when absent.
    #[arg(long, requires = "session")]
    turn: Option<String>,
    /// The model that thought it (with --session).
    #[arg(long, requires = "session")]
    model: Option<String>,
}

impl ThinkingArgs {
    /// Whether this only parses (no store needed).
    pub fn session_is_none(&self) -> bool {
        self.session.is_none()
    }
}

/// `cairn review ...`.
#[derive(Debug, clap::Subcommand)]
pub enum ReviewCommand {
    /// Flagged steps waiting for a decision (pending or escalated).
    Queue {
        /// Include approved and rejected ones.
        #[arg(long)]
        all: bool,
        /// At most this many, oldest first.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Approve, reject or escalate a flagged step (recorded in the log).
    Decide {
        /// The flagged step's trace id.
        trace_id: String,
        /// approve, reject or escalate.
        #[arg(long)]
        decision: String,
        /// The reviewer's note.
        #[arg(long)]
        note: Option<String>,
        /// Who reviews (recorded).
        #[arg(long, env = "USER", default_value = "cli")]
        reviewer: String,
    },
}

impl ReviewCommand {
    /// Whether the command appends to the ledger.
    pub fn writes(&self) -> bool {
        matches!(self, ReviewCommand::Decide { .. })
    }
}

/// `cairn audit-event`.
#[derive(Debug, clap::Args)]
pub struct AuditEventArgs {
    /// What happened: a tool name, an action.
    #[arg(long)]
    action: String,
    /// The event id (unique in the org); a new one when absent.
    #[arg(long)]
    id: Option<String>,
    /// The session it belongs to.
    #[arg(long)]
    session: Option<String>,
    /// Details, as JSON.
    #[arg(long)]
    detail: Option<String>,
}

/// A file's text, or stdin's when no file is given.
fn read_input(file: Option<&std::path::Path>) -> Result<String> {
    match file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| usage(format!("reading {}: {e}", path.display()))),
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading stdin")?;
            Ok(text)
        }
    }
}

fn ledger(store: Arc<dyn LedgerStore>) -> Ledger {
    Ledger::new(store, SequencerConfig::default())
}

/// Opens a session.
pub fn start(cli: &Cli, store: Arc<dyn LedgerStore>, args: &StartArgs) -> Result<Outcome> {
    let predecessor = args
        .predecessor
        .as_deref()
        .map(cairn_core::Hash::from_hex)
        .transpose()
        .map_err(|e| usage(format!("--predecessor: {e}")))?;
    let request = WriteRequest::StartSession(NewSession {
        org_id: cli.org.clone(),
        session_id: args.session.clone(),
        agent_id: if args.hash_agent_id {
            cairn_core::record::hashed_agent_id(&args.agent)
        } else {
            args.agent.clone()
        },
        caller: "cli".into(),
        profile: if args.strict {
            Profile::Strict
        } else {
            Profile::Standard
        },
        predecessor,
        predecessor_session: args.predecessor_session.clone(),
        bound_agent: None,
        full_consent: args.full_consent,
    });
    match ledger(store).write(request).map_err(append_error)? {
        Written::Session { seq, genesis } => {
            if cli.json {
                println!(
                    "{}",
                    json!({"session_id": args.session, "seq": seq, "genesis": genesis.to_hex()})
                );
            } else {
                println!(
                    "started session {} (genesis {genesis}, log record {seq})",
                    args.session
                );
            }
            Ok(Outcome::Success)
        }
        other => Err(anyhow::anyhow!("unexpected answer {other:?}")),
    }
}

/// Parses thinking text, and records it as a turn with `--session`.
pub fn thinking(
    cli: &Cli,
    store: Option<Arc<dyn LedgerStore>>,
    args: &ThinkingArgs,
) -> Result<Outcome> {
    let text = read_input(args.file.as_deref())?;
    let (Some(session), Some(store)) = (&args.session, store) else {
        // The same bound as a turn's and the API's parse.
        let parsed = cairn_core::thinking::parse_thinking_at_most(
            &text,
            cairn_store::ops::MAX_STEPS_PER_WRITE,
        )
        .map_err(|e| {
            usage(format!(
                "{e}: one request records at most that many steps of a turn, so split the text"
            ))
        })?;
        if cli.json {
            let steps: Vec<Value> = parsed
                .iter()
                .map(|p| json!({"phase": p.phase, "label": p.kind.bracket_label(), "content": p.content}))
                .collect();
            println!("{}", json!({ "steps": steps }));
        } else {
            for p in parsed {
                println!(
                    "{} {}",
                    p.kind.bracket_label(),
                    render::terminal_safe(&cairn_core::thinking::one_line(&p.content))
                );
            }
        }
        return Ok(Outcome::Success);
    };
    let agent = args
        .agent
        .clone()
        .ok_or_else(|| usage("--agent (or CAIRN_AGENT) is required to record a turn"))?;
    let template = NewStep {
        org_id: cli.org.clone(),
        session_id: session.clone(),
        agent_id: agent,
        kind_label: "thinking".into(),
        model: args.model.clone(),
        caller: "cli".into(),
        ..NewStep::default()
    };
    let turn = args.turn.clone().unwrap_or_else(cairn_store::new_id);
    let steps = cairn_store::ops::turn_steps(&template, &turn, Some(&text), Vec::new())
        .map_err(|e| usage(e.to_string()))?;
    if steps.is_empty() {
        return Err(usage("the thinking text is empty"));
    }
    let ledger = ledger(store);
    // A turn is one unit: all its steps, or none.
    let results = match ledger
        .submit(WriteRequest::Turn {
            turn_id: turn.clone(),
            steps,
        })
        .wait()
        .map_err(append_error)?
    {
        cairn_store::Written::Steps(results) => results,
        other => return Err(anyhow::anyhow!("unexpected answer {other:?}")),
    };
    if cli.json {
        let steps: Vec<Value> = results
            .iter()
            .map(cairn_server::wire::written_to_json)
            .collect();
        println!(
            "{}",
            json!({"session_id": session, "turn_id": turn, "steps": steps})
        );
    } else {
        println!(
            "recorded turn {turn} of {session}: {} step(s)",
            results.len()
        );
    }
    Ok(Outcome::Success)
}

/// Prints a session's trail, or one turn.
pub fn trail(
    cli: &Cli,
    store: &dyn LedgerStore,
    session: &str,
    turn: Option<&str>,
    format: Format,
) -> Result<Outcome> {
    if store.session(&cli.org, session)?.is_none() {
        return Err(crate::cli::no_such_session(cli, session));
    }
    // The positions (one turn's through the index of turns), then their
    // trail order planned from each step's turn and number: the steps are
    // read a few at a time as they are written, whatever the session's
    // length.
    let seqs = match turn {
        Some(id) => store.turn_seqs(&cli.org, session, id)?,
        None => store.session_seqs(&cli.org, session)?,
    }
    .unwrap_or_default();
    if let Some(id) = turn
        && seqs.is_empty()
    {
        return Err(usage(format!("turn {id} is not in session {session}")));
    }
    let format = if cli.json { Format::Json } else { format };
    let form = match (format, turn) {
        (Format::Markdown, Some(_)) => TurnsForm::TurnMarkdown,
        (Format::Markdown, None) => TurnsForm::TrailMarkdown,
        // One turn as JSON is a trail of that turn; text is written here.
        (Format::Json | Format::Text, _) => TurnsForm::TrailJson,
    };
    let (steps, writer) = crate::session_out::plan(store, &cli.org, session, &seqs, (form, None))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if !matches!(format, Format::Text) {
        crate::session_out::write_turns(store, &cli.org, session, &steps, &writer, None, &mut out)?;
        return Ok(Outcome::Success);
    }
    crate::session_out::visit(store, &cli.org, session, &steps, &mut |position, step| {
        let (_, starts) = writer
            .place(position, step.seq, &step.record)
            .map_err(|e| anyhow::anyhow!(e))?;
        let s = &step.record.step;
        if starts {
            writeln!(out, "turn {}", s.turn_id.as_deref().unwrap_or("(none)"))?;
        }
        writeln!(
            out,
            "  {:>3} {:<16} {}",
            s.turn_step.map_or("-".into(), |n| n.to_string()),
            render::terminal_safe(&s.kind_label),
            render::terminal_safe(
                &s.content
                    .as_deref()
                    .map_or_else(|| "(erased)".into(), cairn_core::thinking::one_line)
            )
        )?;
        Ok(())
    })?;
    out.flush()?;
    Ok(Outcome::Success)
}

/// The review queue and decisions.
pub fn review(cli: &Cli, store: Arc<dyn LedgerStore>, command: &ReviewCommand) -> Result<Outcome> {
    match command {
        ReviewCommand::Queue { all, limit } => {
            let limit = crate::cli::limit_of(*limit, cairn_server::REVIEWS_LIMIT)?;
            crate::cli::require_known_org(cli, store.as_ref())?;
            let page = cairn_store::ops::review_queue(
                store.as_ref(),
                &cli.org,
                *all,
                limit,
                cairn_store::ops::REVIEW_QUEUE_BYTES,
            )?;
            let items = page.items;
            if cli.json {
                let truncated = page.truncated;
                let items: Vec<Value> = items.iter().map(wire::review_item_to_json).collect();
                println!("{}", json!({ "items": items, "truncated": truncated }));
            } else if items.is_empty() {
                println!("no flagged step waits for review");
            } else {
                for item in &items {
                    let s = &item.step.record.step;
                    println!(
                        "{:<9} {} {}#{} {}: {}",
                        item.state(),
                        s.trace_id,
                        s.session_id,
                        s.step_index,
                        render::terminal_safe(&s.kind_label),
                        render::terminal_safe(
                            &s.content
                                .as_deref()
                                .map_or_else(|| "(erased)".into(), cairn_core::thinking::one_line)
                        )
                    );
                }
                if page.truncated {
                    println!(
                        "(more flagged steps wait: these fill the {} MiB one answer may hold; decide on them first)",
                        cairn_store::ops::REVIEW_QUEUE_BYTES >> 20
                    );
                }
            }
            Ok(Outcome::Success)
        }
        ReviewCommand::Decide {
            trace_id,
            decision,
            note,
            reviewer,
        } => {
            // Read as the API reads it (the nearest decision suggested).
            let decision = cairn_server::review_decision(Some(decision))
                .map_err(|e| crate::cli::refused_naming(e, "--decision"))?;
            let request = WriteRequest::Review {
                org_id: cli.org.clone(),
                trace_id: trace_id.clone(),
                decision,
                reviewer: reviewer.clone(),
                note: note.clone(),
            };
            match ledger(store).write(request).map_err(append_error)? {
                Written::Reviewed { seq, review } => {
                    if cli.json {
                        println!("{}", wire::review_to_json(seq, &review));
                    } else {
                        println!(
                            "{} {trace_id} (review record {seq})",
                            review.decision.as_str()
                        );
                    }
                    Ok(Outcome::Success)
                }
                other => Err(anyhow::anyhow!("unexpected answer {other:?}")),
            }
        }
    }
}

/// Records an audit event.
pub fn audit_event(
    cli: &Cli,
    store: Arc<dyn LedgerStore>,
    args: &AuditEventArgs,
) -> Result<Outcome> {
    let request = WriteRequest::AuditEvent {
        org_id: cli.org.clone(),
        event_id: args.id.clone(),
        session_id: args.session.clone(),
        action: args.action.clone(),
        detail: parse_json_arg("detail", &args.detail)?,
    };
    match ledger(store).write(request).map_err(append_error)? {
        Written::AuditEvent { seq, event_id } => {
            if cli.json {
                println!("{}", json!({"seq": seq, "event_id": event_id}));
            } else {
                println!("recorded audit event {event_id} (log record {seq})");
            }
            Ok(Outcome::Success)
        }
        other => Err(anyhow::anyhow!("unexpected answer {other:?}")),
    }
}

/// `cairn agent-key`.
#[derive(Debug, clap::Args)]
pub struct AgentKeyArgs {
    /// The agent (for imported traces: their agent_id_hash).
    #[arg(long, env = "CAIRN_AGENT")]
    agent: String,
    /// The Ed25519 public key, base64 of its 32 bytes: registered (or, with
    /// --rotate, the key that replaces the old one).
    #[arg(long, required_unless_present = "revoke")]
    public_key: Option<String>,
    /// Revoke this key id (`agent-` + 12 hex digits): it signs nothing
    /// from then on; what it signed before stays valid.
    #[arg(long, conflicts_with_all = ["rotate", "public_key"])]
    revoke: Option<String>,
    /// Rotate: revoke this key id and register --public-key, at once.
    #[arg(long, requires = "public_key")]
    rotate: Option<String>,
    /// Why the key is revoked (recorded).
    #[arg(long, default_value = "revoked")]
    reason: String,
}

/// Registers, revokes or rotates an agent's public key.
pub fn agent_key(cli: &Cli, store: Arc<dyn LedgerStore>, args: &AgentKeyArgs) -> Result<Outcome> {
    use base64::Engine as _;
    let public_key = args
        .public_key
        .as_deref()
        .map(|k| {
            base64::engine::general_purpose::STANDARD
                .decode(k.trim())
                .ok()
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .and_then(|b| cairn_core::ed25519_dalek::VerifyingKey::from_bytes(&b).ok())
                .ok_or_else(|| usage("--public-key must be base64 of a 32-byte Ed25519 public key"))
        })
        .transpose()?;
    let request = match (&args.revoke, &args.rotate, public_key) {
        (Some(key_id), _, _) => WriteRequest::RevokeKey {
            org_id: cli.org.clone(),
            agent_id: args.agent.clone(),
            key_id: key_id.clone(),
            reason: args.reason.clone(),
        },
        (None, Some(old), Some(public_key)) => WriteRequest::RotateKey {
            org_id: cli.org.clone(),
            agent_id: args.agent.clone(),
            old_key_id: old.clone(),
            public_key,
            by_admin: true,
        },
        (None, None, Some(public_key)) => WriteRequest::RegisterKey {
            org_id: cli.org.clone(),
            agent_id: args.agent.clone(),
            public_key,
            by_admin: true,
        },
        (None, _, None) => return Err(usage("--public-key is required")),
    };
    match ledger(store).write(request).map_err(append_error)? {
        Written::KeyRegistered { seq, key_id } => {
            if cli.json {
                println!("{}", json!({"key_id": key_id, "seq": seq}));
            } else {
                println!("{key_id}");
            }
            Ok(Outcome::Success)
        }
        Written::KeyRevoked {
            seq,
            key_id,
            successor,
        } => {
            if cli.json {
                println!(
                    "{}",
                    json!({"revoked": key_id, "seq": seq,
                           "key_id": successor.as_ref().map(|s| &s.1), "registered_seq": successor.as_ref().map(|s| s.0)})
                );
            } else {
                match successor {
                    Some((_, new_id)) => println!("{new_id} (replaces {key_id})"),
                    None => println!("{key_id} revoked"),
                }
            }
            Ok(Outcome::Success)
        }
        other => Err(anyhow::anyhow!("unexpected answer {other:?}")),
    }
}

/// `cairn import-trace`.
#[derive(Debug, clap::Args)]
pub struct ImportTraceArgs {
    /// The trace (seed 004's JSON); stdin when absent.
    file: Option<PathBuf>,
    /// The session its components become steps of (default: the trace id).
    #[arg(long)]
    session: Option<String>,
}

/// Imports a seed-004 trace.
pub fn import_trace(
    cli: &Cli,
    store: Arc<dyn LedgerStore>,
    args: &ImportTraceArgs,
) -> Result<Outcome> {
    let text = read_input(args.file.as_deref())?;
    let trace: Value =
        serde_json::from_str(&text).map_err(|e| usage(format!("the trace is not JSON: {e}")))?;
    let request = WriteRequest::ImportTrace {
        org_id: cli.org.clone(),
        session_id: args.session.clone(),
        trace,
        caller: "cli".into(),
    };
    match ledger(store).write(request).map_err(append_error)? {
        Written::TraceImported {
            seq,
            session_id,
            steps,
        } => {
            if cli.json {
                println!(
                    "{}",
                    json!({"seq": seq, "session_id": session_id, "steps": steps.len()})
                );
            } else {
                println!(
                    "imported the signed trace into session {session_id}: {} step(s), signed original at log record {seq}",
                    steps.len()
                );
            }
            Ok(Outcome::Success)
        }
        other => Err(anyhow::anyhow!("unexpected answer {other:?}")),
    }
}

/// Runs analyst SQL and prints the rows (tab-separated, or JSON).
pub fn sql(cli: &Cli, store: &dyn LedgerStore, statement: &str, limit: usize) -> Result<Outcome> {
    use cairn_store::analyst::AnalystError;
    crate::cli::require_known_org(cli, store)?;
    let result = match store.analyst_query(&cli.org, statement, limit) {
        Ok(result) => result,
        Err(AnalystError::Refused(m)) => return Err(usage(format!("refused: {m}"))),
        Err(AnalystError::Failed(m)) => return Err(usage(format!("the query failed: {m}"))),
        Err(e @ (AnalystError::TimedOut(_) | AnalystError::TooLarge(_))) => {
            return Err(usage(e.to_string()));
        }
        Err(e) => return Err(e.into()),
    };
    if cli.json {
        println!(
            "{}",
            json!({"columns": result.columns, "rows": result.rows, "truncated": result.truncated})
        );
        return Ok(Outcome::Success);
    }
    // One row a line, cells apart by tabs: a cell's own tabs and line
    // breaks become spaces, its other control characters escapes.
    let cell_text =
        |s: &str| render::terminal_safe(&s.replace(['\t', '\n', '\r'], " ")).into_owned();
    let columns: Vec<String> = result.columns.iter().map(|c| cell_text(c)).collect();
    println!("{}", columns.join("\t"));
    for row in &result.rows {
        let cells: Vec<String> = row
            .iter()
            .map(|v| match v {
                Value::String(s) => cell_text(s),
                Value::Null => String::new(),
                other => other.to_string(),
            })
            .collect();
        println!("{}", cells.join("\t"));
    }
    if result.truncated {
        let more = if limit < cairn_store::analyst::MAX_ROWS {
            format!(
                "; --limit asks for up to {}",
                cairn_store::analyst::MAX_ROWS
            )
        } else {
            "; narrow the query (WHERE, LIMIT, OFFSET) to see the rest".to_owned()
        };
        eprintln!(
            "(first {} rows: the query has more{more})",
            result.rows.len()
        );
    }
    Ok(Outcome::Success)
}
