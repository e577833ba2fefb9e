//! `run`: the command line parsed and each command dispatched, opening
//! the store first (to write, or beside a running server to read) for the
//! commands that need one; the small commands (`erase`, `retention`,
//! `checkpoint`, `seal`) are written out here. Apart from the options in
//! `cli.rs` so that what the command line accepts reads on its own.

use super::admin_cmd::admin;
use super::mcp_cmd::mcp_stdio;
use super::*;

/// Parses the command line and runs the command.
pub fn run() -> Result<Outcome> {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version are printed as asked; a usage mistake is an
        // error like any other (exit 2, JSON too with --json), in clap's
        // words.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => return Err(usage(e.render().to_string().trim_end().to_owned())),
    };
    match &cli.command {
        Command::Demo => crate::demo::run(),
        Command::Serve {
            listen,
            sample,
            otlp_listen,
            otlp_max_body_bytes,
            otlp_max_backlog,
            otlp_hold_seconds,
            otlp_max_held_bytes,
            witnesses,
            witness_interval,
            witness_logs,
            witness_listen,
            limits,
        } => {
            let mut otlp = cairn_server::otlp::OtlpConfig {
                max_body_bytes: *otlp_max_body_bytes,
                max_backlog: *otlp_max_backlog,
                hold_for: std::time::Duration::from_secs(*otlp_hold_seconds),
                max_held_bytes: *otlp_max_held_bytes,
                ..cairn_server::otlp::OtlpConfig::default()
            };
            otlp.decode.max_decompressed_bytes = *otlp_max_body_bytes;
            let witnesses = witnesses
                .iter()
                .map(|spec| cairn_server::witness_push::WitnessTarget::parse(spec).map_err(usage))
                .collect::<Result<Vec<_>>>()?;
            let interval = std::time::Duration::from_secs((*witness_interval).max(1));
            let hosted = if witness_logs.is_empty() {
                None
            } else {
                let dir = cli.data_dir.join("witness");
                let name = format!("{}-witness", cli.server_name);
                let witness = crate::witness_cmd::build(&dir, &name, witness_logs)?;
                Some((witness, witness_listen.as_str()))
            };
            serve(
                &cli,
                listen,
                *sample,
                otlp_listen.as_deref(),
                otlp,
                limits,
                serve_cmd::Witnessing {
                    targets: witnesses,
                    interval,
                    hosted,
                },
            )
        }
        Command::Witness(args) => crate::witness_cmd::run(args),
        Command::Monitor(args) => crate::monitor_cmd::run(args),
        Command::KeyAgent { key } => keys_cmd::key_agent(key),
        Command::Mcp { agent } => mcp_stdio(&cli, agent.clone()),
        Command::Verify(args) if args.bundle.is_some() => verify_bundle(&cli, args),
        Command::Receipt(command) => verify_receipt(&cli, command),
        Command::Thinking(args) if args.session_is_none() => {
            crate::records::thinking(&cli, None, args)
        }
        command => {
            if command.only_reads() {
                require_existing_store(&cli)?;
            }
            let fresh = cli.database.is_none() && !cli.data_dir.join(cairn_store::DB_FILE).exists();
            let store = match command {
                // An export signs a fresh checkpoint when it may, and reads
                // beside a running server otherwise.
                // So does a search of the embedded store, which then embeds
                // what no server is there to embed.
                Command::Export(_) | Command::Search(_) => open_store(&cli, true).or_else(|e| {
                    if e.downcast_ref::<UsageError>().is_some() {
                        open_store(&cli, false)
                    } else {
                        Err(e)
                    }
                })?,
                _ => open_store(&cli, command.writes())?,
            };
            // Opened to be read without its key file: what would show or
            // sign with the store's key cannot run on a stand-in.
            if !store.holds_server_key()
                && matches!(command, Command::Keys { .. } | Command::Export(_))
            {
                // (Not the stand-in, which the store lists as its own.)
                let keys: Vec<String> = store
                    .log_keys(&cli.org)
                    .map(|keys| {
                        keys.iter()
                            .filter(|k| *k != store.server_key())
                            .map(ToString::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                return Err(usage(format!(
                    "the server key at {} is missing or not this store's: give the store's key with --server-key PATH (CAIRN_SERVER_KEY) or --server-key-command; the keys its log for org {} is signed with: {}",
                    cli.server_key
                        .clone()
                        .unwrap_or_else(|| cli.data_dir.join(cairn_store::KEY_FILE))
                        .display(),
                    cli.org,
                    if keys.is_empty() {
                        "none recorded".to_owned()
                    } else {
                        keys.join(", ")
                    }
                )));
            }
            // Commands that name a session or a step of the org: an org the
            // store does not hold is said as such, not as a missing session.
            if matches!(
                command,
                Command::Trail { .. }
                    | Command::Replay { .. }
                    | Command::Seal { .. }
                    | Command::Erase { .. }
                    | Command::Export(_)
            ) {
                require_known_org(&cli, store.as_ref())?;
            }
            match command {
                Command::Log(args) => log(&cli, store, args),
                Command::Start(args) => crate::records::start(&cli, store, args),
                Command::Thinking(args) => crate::records::thinking(&cli, Some(store), args),
                Command::Trail {
                    session,
                    turn,
                    format,
                } => crate::records::trail(&cli, store.as_ref(), session, turn.as_deref(), *format),
                Command::Review(command) => crate::records::review(&cli, store, command),
                Command::AuditEvent(args) => crate::records::audit_event(&cli, store, args),
                Command::AgentKey(args) => crate::records::agent_key(&cli, store, args),
                Command::Sql { statement, limit } => crate::records::sql(
                    &cli,
                    store.as_ref(),
                    statement,
                    limit_of(*limit, cairn_server::SQL_ROWS_LIMIT)?,
                ),
                Command::ImportTrace(args) => crate::records::import_trace(&cli, store, args),
                Command::Sessions {
                    agent,
                    limit,
                    after,
                } => sessions(
                    &cli,
                    store.as_ref(),
                    agent.as_deref(),
                    limit_of(*limit, cairn_server::SESSIONS_LIMIT)?,
                    after.as_deref(),
                ),
                Command::Replay {
                    session,
                    format,
                    verify,
                    level,
                } => replay(&cli, store.as_ref(), session, *format, *verify, *level),
                Command::Verify(args) => verify_store(&cli, store.as_ref(), args),
                Command::Export(args) => export_bundle(&cli, store, args),
                Command::Import {
                    bundle,
                    key,
                    max_bundle_line_bytes,
                } => import(
                    &cli,
                    store.as_ref(),
                    bundle,
                    key.as_deref(),
                    *max_bundle_line_bytes,
                ),
                Command::Admin(command) => admin(&cli, store.as_ref(), command),
                Command::Search(args) => search(&cli, store.as_ref(), args),
                Command::Reindex {
                    all_orgs,
                    kinds: true,
                } => restore_kinds(&cli, store.as_ref(), *all_orgs),
                Command::Reindex {
                    all_orgs,
                    kinds: false,
                } => reindex(&cli, store.as_ref(), *all_orgs),
                Command::Erase { trace_id, reason } => {
                    let ledger = Ledger::new(store, SequencerConfig::default());
                    let request = WriteRequest::Erase {
                        org_id: cli.org.clone(),
                        trace_id: trace_id.clone(),
                        reason: reason.clone(),
                        actor: "cli".into(),
                    };
                    let (step, trace) = match ledger.write(request).map_err(append_error)? {
                        Written::Erased { seqs, trace_seqs } => {
                            (seqs.first().copied(), trace_seqs.first().copied())
                        }
                        other => return Err(anyhow!("unexpected answer {other:?}")),
                    };
                    if cli.json {
                        println!(
                            "{}",
                            json!({"trace_id": trace_id, "erased": true, "erasure_seq": step, "trace_erasure_seq": trace})
                        );
                        return Ok(Outcome::Success);
                    }
                    println!(
                        "erased the payload of {trace_id}; its hashes and every chain still verify"
                    );
                    if let Some(seq) = trace {
                        println!(
                            "it came from an agent-signed trace: that trace's record is withheld too (trace-erasure record at seq {seq}; its hash stays in the log)"
                        );
                    }
                    Ok(Outcome::Success)
                }
                Command::Retention { before } => {
                    require_known_org(&cli, store.as_ref())?;
                    let ledger = Ledger::new(store, SequencerConfig::default());
                    match before {
                        Some(text) => {
                            // Read as a listing's `since` (a date is its
                            // start); a cutoff past what a step may be
                            // dated (now and the clock skew) would erase the
                            // payloads of sessions still being written.
                            let cutoff = cairn_server::listing_time("before", text, false)
                                .map_err(|e| refused_naming(e, "--before"))?;
                            let latest = now().as_micros().saturating_add(
                                i64::try_from(cli.max_clock_skew)
                                    .unwrap_or(i64::MAX)
                                    .saturating_mul(1_000_000),
                            );
                            if cutoff.as_micros() > latest {
                                return Err(usage(format!(
                                    "--before {text} is in the future (now {}): retention erases the payloads of the sessions whose last step is before it, so it would erase every session's; give a time in the past",
                                    now()
                                )));
                            }
                            let erased = retention_before(&ledger, &cli.org, cutoff)?;
                            report_retention(&cli, &format!("before {cutoff}"), erased);
                        }
                        None => {
                            let erased = apply_retention(&ledger, &cli.org, cli.retention_days)?;
                            report_retention(&cli, &format!("{} days", cli.retention_days), erased);
                        }
                    }
                    Ok(Outcome::Success)
                }
                Command::Keys { action } => {
                    if fresh {
                        eprintln!(
                            "cairn: note: {} held no store: a new one was made, with a new server key (if you meant a server's key, set --data-dir or CAIRN_DATA_DIR to its data directory)",
                            cli.data_dir.display()
                        );
                    }
                    keys_cmd::keys(&cli, store, action.as_ref())
                }
                Command::Checkpoint => {
                    require_known_org(&cli, store.as_ref())?;
                    if store.log_size(&cli.org)? == 0 {
                        return Err(usage(format!(
                            "org {} has nothing recorded yet, so there is no checkpoint to sign ({}); record a step first",
                            cli.org,
                            store_location(&cli)
                        )));
                    }
                    let ledger = Ledger::new(store, SequencerConfig::default());
                    let cp = match ledger.write(WriteRequest::Checkpoint {
                        org_id: cli.org.clone(),
                    }) {
                        Ok(Written::Checkpoint(cp)) => cp,
                        Ok(other) => return Err(anyhow!("unexpected answer {other:?}")),
                        Err(e) => return Err(append_error(e)),
                    };
                    if cli.json {
                        println!(
                            "{}",
                            json!({"size": cp.size, "root": cp.root.to_hex(), "note": cp.note})
                        );
                    } else {
                        print!("{}", cp.note);
                    }
                    Ok(Outcome::Success)
                }
                Command::Seal {
                    session,
                    require_reflection,
                } => {
                    let ledger = Ledger::new(store, SequencerConfig::default());
                    let request = WriteRequest::Seal {
                        org_id: cli.org.clone(),
                        session_id: session.clone(),
                        require_reflection: *require_reflection,
                    };
                    match ledger.write(request) {
                        Ok(Written::Sealed { seq, seal }) => {
                            if cli.json {
                                println!(
                                    "{}",
                                    json!({"seq": seq, "session_id": seal.session_id, "step_count": seal.step_count,
                                           "merkle_root": seal.session_root.to_hex(), "final_hash": seal.final_hash.to_hex(),
                                           "note": seal.note})
                                );
                            } else {
                                println!(
                                    "sealed {} at {} steps, root {}",
                                    seal.session_id, seal.step_count, seal.session_root
                                );
                                print!("{}", seal.note);
                            }
                            Ok(Outcome::Success)
                        }
                        Ok(other) => Err(anyhow!("unexpected answer {other:?}")),
                        Err(e) => Err(append_error(e)),
                    }
                }
                Command::Demo
                | Command::Serve { .. }
                | Command::Mcp { .. }
                | Command::Witness(_)
                | Command::Monitor(_)
                | Command::KeyAgent { .. }
                | Command::Receipt(_) => {
                    unreachable!("handled above")
                }
            }
        }
    }
}

/// Prints what a `cairn retention` run erased (`--json`: an object).
fn report_retention(cli: &Cli, scope: &str, erased: serve_cmd::Retained) {
    if cli.json {
        println!(
            "{}",
            json!({"erased_steps": erased.steps, "withheld_traces": erased.traces})
        );
        return;
    }
    println!("retention ({scope}): erased {} step(s)", erased.steps);
    if erased.traces > 0 {
        println!(
            "and withheld the records of {} agent-signed trace(s) those steps came from (their hashes stay in the log)",
            erased.traces
        );
    }
}
