//! `cairn serve`: the HTTP API, MCP, OTLP and witnessing over one
//! `Ledger`, the sample session, and retention.

use super::*;

/// Prints a line of what the server says at start-up: a standard output
/// closed early (`cairn serve | head -1`) is no reason to stop serving,
/// where `println!` would panic at the next line.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// The witness options of `cairn serve`: the witnesses it sends its
/// checkpoints to, and the witness it hosts for other logs.
pub(super) struct Witnessing<'a> {
    /// Witnesses to get checkpoints cosigned by.
    pub targets: Vec<cairn_server::witness_push::WitnessTarget>,
    /// Time between two rounds of sending.
    pub interval: std::time::Duration,
    /// A witness of other logs, and where it listens.
    pub hosted: Option<(Arc<cairn_server::witness::Witness>, &'a str)>,
}

pub(super) fn serve(
    cli: &Cli,
    listen: &str,
    sample: bool,
    otlp_listen: Option<&str>,
    otlp: cairn_server::otlp::OtlpConfig,
    limits: &crate::serve_config::ServeLimits,
    witnessing: Witnessing<'_>,
) -> Result<Outcome> {
    let Witnessing {
        targets: witnesses,
        interval: witness_interval,
        hosted: hosted_witness,
    } = witnessing;
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAIRN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a terminal: a log redirected to a file or a
    // collector keeps plain text.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    cairn_server::check_cors_origins(&limits.cors_origins()).map_err(usage)?;
    let store = open_store(cli, true)?;
    // Loaded before anything listens: a bad model stops the start.
    let embedder = cli.embedding.embedder()?;
    // Every address bound before a fresh directory's admin key is made
    // and printed: a busy port must stop the start before the one key
    // shown once is shown (and lost with the failed start's output).
    let bind = |at: &str| -> Result<std::net::TcpListener> {
        let listener = std::net::TcpListener::bind(at)
            .map_err(|e| usage(format!("cannot listen on {at}: {e}")))?;
        listener
            .set_nonblocking(true)
            .with_context(|| format!("listening on {at}"))?;
        Ok(listener)
    };
    let api_socket = bind(listen)?;
    let otlp_socket = otlp_listen.map(bind).transpose()?;
    let witness_socket = hosted_witness
        .as_ref()
        .map(|(_, at)| bind(at))
        .transpose()?;
    let fresh_key = cairn_server::bootstrap_admin_key(store.as_ref(), &cli.org)?;
    if let Some(token) = &fresh_key {
        say!(
            "admin API key for org {} (shown once, keep it): {token}",
            cli.org
        );
    }
    let ledger = Arc::new(Ledger::new(Arc::clone(&store), SequencerConfig::default()));
    let sample_session = if sample
        && store
            .list_sessions(&cli.org, &SessionFilter::all(), 1)?
            .is_empty()
    {
        record_sample(&ledger, &cli.org)?;
        Some(crate::demo::SAMPLE_SESSION)
    } else {
        if sample {
            // Served again on the same directory (the README's first
            // command run twice): say why nothing was recorded, and where
            // the key went.
            say!(
                "--sample: org {} already holds sessions, so no sample was recorded",
                cli.org
            );
        }
        None
    };
    if fresh_key.is_none() {
        say!(
            "org {} has API keys already (an admin key is printed only when an org's first key is made); `cairn admin create-key --role admin` makes another, `cairn admin list-keys` lists them",
            cli.org
        );
    }
    if cli.enabled {
        spawn_retention(Arc::clone(&ledger), cli.retention_days);
    }
    // Store calls block: made before the async runtime starts. This
    // server's embedder becomes the store's: servers of a fleet still
    // configured with another stop taking from the queue.
    let replaced = store
        .choose_embedder(embedder.id())?
        .filter(|before| before != embedder.id());
    let others: Vec<String> = store
        .vectors_by_embedder()?
        .into_iter()
        .filter(|(id, _)| id != embedder.id())
        .map(|(id, n)| format!("{n} by {id}"))
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::from_std(api_socket)
            .with_context(|| format!("listening on {listen}"))?;
        let address = listener
            .local_addr()
            .context("reading the listening address")?;
        let otlp_listener = otlp_socket
            .map(tokio::net::TcpListener::from_std)
            .transpose()
            .context("listening for OTLP")?;
        let config = cairn_server::ServerConfig {
            otlp,
            embedder: Arc::clone(&embedder),
            embedding_batch: cli.embedding.embedding_batch as usize,
            ..limits.config(cli.enabled, &address)
        };
        // The witness listener (--witness-log) has the API's limits.
        let witness_limits = config.limits.clone();
        let state = cairn_server::AppState::new(Arc::clone(&ledger), config);
        say!(
            "cairn listening on http://{address} ({}, org: {})",
            store_location(cli),
            cli.org
        );
        say!("web UI: open http://{address}/ and sign in with an API key");
        say!("semantic search: {}", embedder.description());
        if let Some(before) = &replaced {
            say!("the store's embedder was {before}; it is now {}", embedder.id());
        }
        if !others.is_empty() {
            let how = if cli.database.is_some() {
                "run `cairn reindex` with the same embedder settings (beside the servers)"
            } else {
                "stop this server and run `cairn reindex` with the same embedder settings"
            };
            say!(
                "note: stored vectors made by another embedder ({}) are not compared with this one's: {how} to find those steps by meaning again",
                others.join(", ")
            );
        }
        let witness_listener = match (&hosted_witness, witness_socket) {
            (Some((witness, _)), Some(socket)) => {
                let l = tokio::net::TcpListener::from_std(socket)
                    .context("listening for the witness")?;
                let witness_address = l.local_addr().context("reading the witness address")?;
                say!("witness vkey: {}", witness.cosigner.verifier());
                say!(
                    "witnessing {} log(s) on http://{witness_address}",
                    witness.logs.len()
                );
                Some((l, Arc::clone(witness)))
            }
            _ => None,
        };
        if let Some(l) = &otlp_listener {
            let otlp_address = l.local_addr().context("reading the OTLP address")?;
            say!(
                "OTLP/HTTP on http://{otlp_address} (OTEL_EXPORTER_OTLP_ENDPOINT=http://{otlp_address})"
            );
        }
        if let Some(session) = sample_session {
            say!(
                "sample session recorded: curl -H \"Authorization: Bearer $KEY\" \"http://{address}/v1/sessions/{session}?verify=true\""
            );
        }
        if !witnesses.is_empty() {
            say!(
                "sending checkpoints to {} witness(es) every {} s",
                witnesses.len(),
                witness_interval.as_secs()
            );
            let pusher = cairn_server::witness_push::Pusher::new(Arc::clone(&state), witnesses);
            tokio::spawn(pusher.run(witness_interval));
        }
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        tracing::info!(%address, "serving");
        let main = cairn_server::serve(listener, Arc::clone(&state), shutdown_signal());
        let otlp = async {
            match otlp_listener {
                Some(l) => cairn_server::serve_otlp(l, state, shutdown_signal()).await,
                None => Ok(()),
            }
        };
        let witness = async {
            match witness_listener {
                Some((l, w)) => {
                    cairn_server::serve_witness(l, w, &witness_limits, shutdown_signal()).await
                }
                None => Ok(()),
            }
        };
        tokio::try_join!(main, otlp, witness).context("serving HTTP")?;
        Ok::<(), anyhow::Error>(())
    })?;
    // Requests are done. Work they left on the blocking pool (a request
    // answered 503 at its deadline whose read still runs) is waited for
    // at most this long, not to its end: a stop had waited 19 minutes for
    // two abandoned searches. Such work is reads, or writes no client was
    // answered for; what was acknowledged is already durable.
    runtime.shutdown_timeout(BLOCKING_WORK_AT_STOP);
    // Flush what the sequencer still holds.
    match Arc::try_unwrap(ledger) {
        Ok(ledger) => ledger.close(),
        // Work left running past the wait still holds it: the process ends
        // without the sequencer's last flush (what was acknowledged is
        // durable; the full-text index catches up at the next start).
        Err(_) => tracing::warn!(
            "work of finished requests was still running {} s after the stop: exiting without closing the ledger (nothing acknowledged is lost)",
            BLOCKING_WORK_AT_STOP.as_secs()
        ),
    }
    tracing::info!("stopped");
    Ok(Outcome::Success)
}

/// How long a stopping server waits for work still running on the
/// blocking pool once every connection is done.
const BLOCKING_WORK_AT_STOP: std::time::Duration = std::time::Duration::from_secs(10);

pub(crate) async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
    tracing::info!("shutting down: finishing requests in flight");
}

/// Records seed 000's usage example as a sealed session.
pub(super) fn record_sample(ledger: &Ledger, org: &str) -> Result<()> {
    for (kind, content, input, confidence) in crate::demo::sample_steps() {
        let step = cairn_store::NewStep {
            org_id: org.to_owned(),
            session_id: crate::demo::SAMPLE_SESSION.to_owned(),
            agent_id: "analyst".into(),
            kind_label: kind.to_owned(),
            content: Some(content.to_owned()),
            input,
            confidence,
            caller: "sample".into(),
            ..cairn_store::NewStep::default()
        };
        ledger
            .write(WriteRequest::Step(Box::new(step)))
            .map_err(append_error)?;
    }
    let seal = WriteRequest::Seal {
        org_id: org.to_owned(),
        session_id: crate::demo::SAMPLE_SESSION.to_owned(),
        require_reflection: false,
    };
    ledger.write(seal).map_err(append_error)?;
    record_support_sample(ledger, org)
}

/// A second sample: a support agent's refund in one turn (seed 002's
/// phases), with a tool call and its result, an audit event, a decision
/// flagged for review (seed 003), its correction, and the closing
/// reflection before the seal (seed 001). It leaves one item in the
/// review queue.
fn record_support_sample(ledger: &Ledger, org: &str) -> Result<()> {
    use cairn_core::record::{Links, Status};
    const SESSION: &str = "support-refund-1182";
    let step = |phase: u64, kind: &str, content: &str| cairn_store::NewStep {
        org_id: org.to_owned(),
        session_id: SESSION.to_owned(),
        agent_id: "support-agent".into(),
        kind_label: kind.to_owned(),
        content: Some(content.to_owned()),
        model: Some("claude-sonnet-4-5".into()),
        turn_id: Some("turn-1".into()),
        turn_step: Some(phase),
        caller: "sample".into(),
        ..cairn_store::NewStep::default()
    };
    let write = |request: WriteRequest| ledger.write(request).map_err(append_error);
    let mut observe = step(
        0,
        "observation",
        "Customer asks for a refund of order #1182: the blender arrived cracked.",
    );
    observe.token_count = Some(212);
    write(WriteRequest::Step(Box::new(observe)))?;
    write(WriteRequest::AuditEvent {
        org_id: org.to_owned(),
        event_id: Some("sample-order-lookup".into()),
        session_id: Some(SESSION.to_owned()),
        action: "orders.lookup".into(),
        detail: Some(serde_json::json!({"order_id": "1182", "rows": 1, "latency_ms": 38})),
    })?;
    let mut think = step(
        1,
        "thinking",
        "Refunds above $200 need a human's approval. Look the order up first.",
    );
    think.confidence = Some(0.82);
    write(WriteRequest::Step(Box::new(think)))?;
    let mut call = step(2, "ToolCall", "lookup_order");
    call.trace_id = Some("sample-call-lookup".into());
    call.input =
        Some(serde_json::json!({"tool": "lookup_order", "arguments": {"order_id": "1182"}}));
    call.links = Links {
        audit_event: Some("sample-order-lookup".into()),
        ..Links::default()
    };
    call.duration_ms = Some(38);
    write(WriteRequest::Step(Box::new(call)))?;
    let mut result = step(
        3,
        "ToolResult",
        "Order #1182: $249.00, delivered 2026-11-20, damage photo attached.",
    );
    result.output = Some(
        serde_json::json!({"order_id": "1182", "total": 249.0, "currency": "USD", "status": "delivered", "photos": 1}),
    );
    result.links = Links {
        tool_call: Some("sample-call-lookup".into()),
        ..Links::default()
    };
    write(WriteRequest::Step(Box::new(result)))?;
    let mut decide = step(4, "decision", "Refund $249.00 as store credit.");
    decide.trace_id = Some("sample-refund-decision".into());
    decide.confidence = Some(0.74);
    decide.status = Status::Flagged;
    write(WriteRequest::Step(Box::new(decide)))?;
    let mut correct = step(
        5,
        "correction",
        "Refund to the original card, not store credit: the policy says damaged goods are refunded in kind.",
    );
    correct.links = Links {
        corrects: Some("sample-refund-decision".into()),
        ..Links::default()
    };
    write(WriteRequest::Step(Box::new(correct)))?;
    write(WriteRequest::Step(Box::new(step(
        6,
        "reflection",
        "Checking the policy before the lookup saved a round trip; the amount is over $200, so the decision waits for a reviewer.",
    ))))?;
    write(WriteRequest::Seal {
        org_id: org.to_owned(),
        session_id: SESSION.to_owned(),
        require_reflection: true,
    })?;
    Ok(())
}

/// What a retention run erased: steps, and signed traces withheld with
/// them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Retained {
    /// Steps whose payload was erased.
    pub steps: usize,
    /// Signed traces whose record was withheld (FORMAT.md 8).
    pub traces: usize,
}

/// Erases what is older than `days` in `org`.
pub(super) fn apply_retention(ledger: &Ledger, org: &str, days: u32) -> Result<Retained> {
    if days == 0 {
        return Ok(Retained::default());
    }
    let cutoff =
        cairn_core::Timestamp::from_micros(now().as_micros() - i64::from(days) * 86_400_000_000)
            .ok_or_else(|| anyhow!("retention cutoff out of range"))?;
    retention_before(ledger, org, cutoff)
}

/// Erases the payload of every session of `org` whose last step is older
/// than `cutoff`.
pub(super) fn retention_before(ledger: &Ledger, org: &str, cutoff: Timestamp) -> Result<Retained> {
    match ledger.write(WriteRequest::Retention {
        org_id: org.to_owned(),
        older_than: cutoff,
    }) {
        Ok(Written::Erased { seqs, trace_seqs }) => Ok(Retained {
            steps: seqs.len(),
            traces: trace_seqs.len(),
        }),
        Ok(other) => Err(anyhow!("unexpected answer {other:?}")),
        // A read-only mirror keeps its payloads: its owner applies retention.
        Err(AppendError::Refused(cairn_store::Refusal::ReadOnlyOrg { .. })) => {
            Ok(Retained::default())
        }
        Err(e) => Err(append_error(e)),
    }
}

/// Runs retention for every org now and then every hour, on its own thread.
pub(super) fn spawn_retention(ledger: Arc<Ledger>, days: u32) {
    if days == 0 {
        return;
    }
    let weak = Arc::downgrade(&ledger);
    drop(ledger);
    let _ = std::thread::Builder::new().name("cairn-retention".into()).spawn(move || {
        loop {
            let Some(ledger) = weak.upgrade() else { return };
            let orgs = ledger.store().orgs().unwrap_or_default();
            for org in orgs {
                match apply_retention(&ledger, &org, days) {
                    Ok(Retained { steps: 0, .. }) => {}
                    Ok(n) => tracing::info!(org = %org, erased = n.steps, traces_withheld = n.traces, days, "retention applied"),
                    Err(e) => tracing::warn!(org = %org, error = %e, "retention failed; retrying in an hour"),
                }
            }
            drop(ledger);
            // Sleep in short steps so that shutdown is not held up.
            for _ in 0..3600 {
                if weak.strong_count() == 0 {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
    });
}
