//! Recording and reading from the command line: `log` (with its options),
//! `sessions`, `replay`.

use super::*;

#[derive(Debug, clap::Args)]
pub(super) struct LogArgs {
    /// Read steps as JSON lines from stdin (seed 000 member names:
    /// session_id, step_type, content, input_data, output_data, ...).
    #[arg(long, conflicts_with_all = ["session", "step_type"])]
    stdin: bool,
    /// Session id.
    #[arg(long, required_unless_present = "stdin")]
    session: Option<String>,
    /// Agent id (default for --stdin lines without agent_id).
    #[arg(long, env = "CAIRN_AGENT")]
    agent: Option<String>,
    /// Step type, in any seed's spelling (Observation, ToolCall, plan,
    /// thinking, execute, ...).
    #[arg(
        long = "type",
        visible_alias = "kind",
        id = "step_type",
        required_unless_present = "stdin"
    )]
    step_type: Option<String>,
    /// The reasoning text.
    #[arg(long)]
    content: Option<String>,
    /// Input JSON.
    #[arg(long)]
    input: Option<String>,
    /// Output JSON.
    #[arg(long)]
    output: Option<String>,
    /// Confidence, 0 to 1.
    #[arg(long)]
    confidence: Option<f64>,
    /// Model name.
    #[arg(long)]
    model: Option<String>,
    /// Metadata JSON.
    #[arg(long)]
    metadata: Option<String>,
    /// Turn id.
    #[arg(long)]
    turn: Option<String>,
    /// The step's number within its turn.
    #[arg(long, requires = "turn")]
    turn_step: Option<u64>,
    /// A link, `name=id` (tool_call, policy_decision, approval_request,
    /// audit_event, corrects, parent). Repeatable.
    #[arg(long = "link", value_name = "NAME=ID")]
    links: Vec<String>,
    /// Task id.
    #[arg(long)]
    task: Option<String>,
    /// Flag the step for review.
    #[arg(long)]
    flagged: bool,
    /// Record the hash of the agent id instead of its name (seed 004).
    #[arg(long)]
    hash_agent_id: bool,
}

pub(super) fn log(cli: &Cli, store: Arc<dyn LedgerStore>, args: &LogArgs) -> Result<Outcome> {
    let ledger = Ledger::new(store, SequencerConfig::default());
    if !args.stdin {
        let mut object = serde_json::Map::new();
        object.insert("session_id".into(), json!(args.session));
        object.insert("step_type".into(), json!(args.step_type));
        object.insert("content".into(), json!(args.content));
        object.insert("confidence".into(), json!(args.confidence));
        object.insert("model".into(), json!(args.model));
        object.insert("turn_id".into(), json!(args.turn));
        object.insert("turn_step".into(), json!(args.turn_step));
        object.insert("task_id".into(), json!(args.task));
        let mut links = serde_json::Map::new();
        for link in &args.links {
            let (name, id) = link
                .split_once('=')
                .ok_or_else(|| usage(format!("--link {link}: expected name=id")))?;
            links.insert(name.to_owned(), json!(id));
        }
        if !links.is_empty() {
            object.insert("links".into(), Value::Object(links));
        }
        object.insert(
            "input_data".into(),
            parse_json_arg("input", &args.input)?.unwrap_or(Value::Null),
        );
        object.insert(
            "output_data".into(),
            parse_json_arg("output", &args.output)?.unwrap_or(Value::Null),
        );
        object.insert(
            "metadata".into(),
            parse_json_arg("metadata", &args.metadata)?.unwrap_or(Value::Null),
        );
        if args.flagged {
            object.insert("status".into(), json!("flagged"));
        }
        if args.hash_agent_id {
            object.insert("hash_agent_id".into(), json!(true));
        }
        // A refusal, the step's or the ledger's, with the API's code and
        // field, the message naming the flag.
        let naming_the_flag = |e: cairn_server::ApiError| {
            let flag = e.field.as_deref().map(|field| match field {
                "status" => "--flagged".to_owned(),
                f if f == "links" || f.starts_with("links.") => "--link".to_owned(),
                other => flag_for_member(other)
                    .map_or_else(|| format!("--{}", other.replace('_', "-")), str::to_owned),
            });
            match flag {
                Some(flag) => refused_naming(e, &flag),
                None => refused(e),
            }
        };
        // Read as REST reads a body: a link of an unknown name is the
        // unknown member `links.<name>`.
        cairn_server::refuse_unknown_step_members(&object).map_err(naming_the_flag)?;
        let step = step_from_json(
            Value::Object(object),
            &cli.org,
            args.agent.as_deref(),
            "cli",
        )
        .map_err(|e| naming_the_flag(e.into()))?;
        let written = ledger
            .write(WriteRequest::Step(Box::new(step)))
            .map_err(|e| match e {
                AppendError::Refused(r) => naming_the_flag(cairn_server::ApiError::from(r)),
                other => append_error(other),
            })?;
        if cli.json {
            println!("{}", cairn_server::wire::written_to_json(&written));
        } else if let Written::Step {
            trace_id,
            step_index,
            hash,
            ..
        } = &written
        {
            println!("logged step {step_index} as {trace_id}, hash {hash}");
        }
        return Ok(Outcome::Success);
    }
    // Many steps: keep up to STDIN_IN_FLIGHT submitted before waiting for
    // the oldest, so the sequencer group-commits large batches while
    // memory stays bounded whatever the input's length. Answers are
    // printed in input order.
    const STDIN_IN_FLIGHT: usize = 16_384;
    // The window is bounded by memory too: the steps in flight (queued
    // for the sequencer, which a slow disk or database holds back) and the
    // copies kept of those that name their trace id (to answer a re-run,
    // below), as `NewStep::approx_memory` counts them; the window is
    // answered from its oldest end while they pass this.
    const STDIN_KEPT_BYTES: usize = 64 << 20;
    // Lines answered together once the window is full: their duplicate
    // trace ids are compared with the recorded steps in chunks.
    const ANSWERED_AT_ONCE: usize = 256;
    // A line in flight: its number, its write (or the refusal it met
    // before it was submitted) with the copy kept to answer a re-run, and
    // the bytes it counts against STDIN_KEPT_BYTES.
    type InFlight = (
        usize,
        std::result::Result<(cairn_store::Pending, Option<cairn_store::NewStep>), Value>,
        usize,
    );
    let mut kept_bytes = 0usize;
    let stdin = std::io::stdin();
    let mut pending = std::collections::VecDeque::with_capacity(STDIN_IN_FLIGHT);
    let mut failures = 0usize;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    // A line refused before it was submitted waits in the queue with its
    // answer, so that answers come in input order.
    // A step that names its trace id is kept with its pending write: if
    // the ledger refuses it as a duplicate, it may be a re-run of input
    // recorded before (answered as its first write, as REST answers a
    // retry: `cairn_store::answer_retries`).
    let store = ledger.store_arc();
    // Answers the `count` oldest lines in flight, in input order. Their
    // outcomes are awaited first, so that the lines refused as duplicate
    // trace ids are compared with their recorded steps a chunk at a time
    // (`answer_retries`), each line as a request of its own.
    let mut answer_oldest = |pending: &mut std::collections::VecDeque<InFlight>,
                             count: usize,
                             kept_bytes: &mut usize,
                             out: &mut dyn std::io::Write|
     -> Result<()> {
        let oldest: Vec<InFlight> = pending.drain(..count.min(pending.len())).collect();
        let mut outcomes = Vec::with_capacity(oldest.len());
        let mut refused_early = Vec::with_capacity(oldest.len());
        for (line, p, bytes) in oldest {
            *kept_bytes -= bytes;
            refused_early.push(match p {
                Ok((p, retry)) => {
                    outcomes.push((retry, p.wait()));
                    (line, None)
                }
                Err(refusal) => (line, Some(refusal)),
            });
        }
        let mut answers = cairn_store::answer_retries(
            store.as_ref(),
            outcomes,
            cairn_store::RepeatedIds::AnswerEach,
        )
        .into_iter();
        for (line, refusal) in refused_early {
            if let Some(refusal) = refusal {
                failures += 1;
                writeln!(out, "{refusal}")?;
                continue;
            }
            let written = answers.next().context("a line in flight lost its answer")?;
            match written {
                Ok(w) => {
                    // A step request is only ever answered with a step.
                    let step = cairn_server::wire::step_written(&w)
                        .with_context(|| format!("line {line} was answered with {w:?}"))?;
                    let written = cairn_server::wire::LineWritten { line, step: &step };
                    serde_json::to_writer(&mut *out, &written)?;
                    out.write_all(b"\n")?;
                }
                Err(e) => {
                    failures += 1;
                    // The ledger's refusal with the code and field REST
                    // gives it.
                    let e = cairn_server::ApiError::from(e);
                    writeln!(
                        out,
                        "{}",
                        json!({"line": line, "error": cairn_server::without_tokens(&e.message), "code": e.code, "field": e.field.as_deref().map(cairn_server::without_tokens)})
                    )?;
                }
            }
        }
        Ok(())
    };
    let mut steps_read = 0usize;
    for (number, line) in stdin.lock().lines().enumerate() {
        let line = line.context("reading stdin")?;
        if line.trim().is_empty() {
            continue;
        }
        steps_read += 1;
        // Read as a REST body is (`wire::parse_strict`'s reading): a member
        // given twice or an integer beyond 64 bits is refused, never read
        // one way here and another there.
        // A refused line names its error as REST answers it (the code, the
        // member, the message, an unknown member's nearest known name).
        // As REST answers, without what looks like an API key.
        let refused_as = |code: &str, field: Option<String>, message: String| json!({"line": number + 1, "error": cairn_server::without_tokens(&message), "code": code, "field": field.as_deref().map(cairn_server::without_tokens)});
        let parsed =
            cairn_core::json::from_slice_with(line.as_bytes(), cairn_core::json::Integers::Bits64)
                .map_err(|e| refused_as("invalid_json", None, format!("not JSON: {e}")))
                .and_then(|v| {
                    if let Some(object) = v.as_object() {
                        cairn_server::refuse_unknown_step_members(object)
                            .map_err(|e| refused_as(e.code, e.field, e.message))?;
                    }
                    step_from_json(v, &cli.org, args.agent.as_deref(), "cli")
                        .map_err(|e| refused_as(e.code, e.field, e.message))
                });
        let kept = match &parsed {
            Ok(step) => step.approx_memory() * (1 + usize::from(step.trace_id.is_some())),
            Err(_) => 0,
        };
        while pending.len() == STDIN_IN_FLIGHT
            || (kept_bytes + kept > STDIN_KEPT_BYTES && !pending.is_empty())
        {
            // A window full by count answers a group at once; one full by
            // memory (lines of large steps: a few hundred may fill it)
            // answers a chunk, so that the steps still in flight keep the
            // sequencer busy while it waits.
            let count = if pending.len() == STDIN_IN_FLIGHT {
                ANSWERED_AT_ONCE
            } else {
                cairn_store::RETRY_LOOKUP_CHUNK
            };
            answer_oldest(&mut pending, count, &mut kept_bytes, &mut out)?;
        }
        kept_bytes += kept;
        pending.push_back((
            number + 1,
            parsed.map(|step| {
                let retry = step.trace_id.is_some().then(|| step.clone());
                (ledger.submit(WriteRequest::Step(Box::new(step))), retry)
            }),
            kept,
        ));
    }
    while !pending.is_empty() {
        answer_oldest(&mut pending, ANSWERED_AT_ONCE, &mut kept_bytes, &mut out)?;
    }
    out.flush()?;
    if steps_read == 0 {
        // Not an error (a pipeline may have nothing to record), but said:
        // an empty file or a mistyped pipe otherwise looks like success.
        eprintln!("cairn: stdin held no steps (one JSON object a line); nothing was recorded");
    }
    if failures > 0 {
        return Err(usage(format!(
            "{failures} line(s) were not recorded; see the error lines above"
        )));
    }
    Ok(Outcome::Success)
}

pub(super) fn sessions(
    cli: &Cli,
    store: &dyn LedgerStore,
    agent: Option<&str>,
    limit: usize,
    after: Option<&str>,
) -> Result<Outcome> {
    require_known_org(cli, store)?;
    let mut filter = SessionFilter::agent(agent);
    if let Some(text) = after {
        filter.after = Some(cairn_server::parse_cursor(text).ok_or_else(|| {
            usage(format!(
                "--after {}: not a cursor of this listing; give the one a cut listing names (or a --json row's cursor)",
                render::terminal_safe(text)
            ))
        })?);
    }
    // One more than shown: whether the listing was cut, said on stderr
    // (the JSON answer stays an array of sessions).
    let mut list = store.list_sessions(&cli.org, &filter, limit + 1)?;
    if list.len() > limit {
        list.truncate(limit);
        if let Some(last) = list.last() {
            eprintln!(
                "cairn: {limit} sessions are shown; more exist: the next ones with --after {} (or --limit up to {}, --agent)",
                render::terminal_safe(&cairn_server::cursor_text(
                    &cairn_store::SessionCursor::after(last)
                )),
                cairn_server::SESSIONS_LIMIT.max
            );
        }
    }
    let mut rows = Vec::new();
    // The org's keys, read at most once (for a verdict failing on a
    // signature); each session is checked against its agent's first.
    let mut org_keys = cairn_store::ops::OrgKeys::default();
    for s in &list {
        let valid =
            cairn_store::ops::verify_session_with(store, &cli.org, &s.session_id, &mut org_keys)?
                .is_some_and(|v| v.verified);
        rows.push((s, valid));
    }
    if cli.json {
        let v: Vec<Value> = rows
            .iter()
            .map(|(s, valid)| {
                json!({
                    "session_id": s.session_id, "agent_id": s.agent_id, "step_count": s.step_count,
                    "first_step_at": s.first_step_at.map(|t| t.to_string()),
                    "last_step_at": s.last_step_at.map(|t| t.to_string()),
                    "chain_valid": valid, "sealed": s.sealed,
                    "cursor": cairn_server::cursor_text(&cairn_store::SessionCursor::after(s)),
                })
            })
            .collect();
        println!("{}", Value::Array(v));
    } else {
        println!(
            "{:<32} {:<16} {:>6}  {:<27}  {:<27}  chain",
            "session", "agent", "steps", "first step", "last step"
        );
        for (s, valid) in rows {
            println!(
                "{:<32} {:<16} {:>6}  {:<27}  {:<27}  {}{}",
                s.session_id,
                s.agent_id,
                s.step_count,
                s.first_step_at.map(|t| t.to_string()).unwrap_or_default(),
                s.last_step_at.map(|t| t.to_string()).unwrap_or_default(),
                if valid { "valid" } else { "BROKEN" },
                if s.sealed { ", sealed" } else { "" }
            );
        }
    }
    Ok(Outcome::Success)
}

pub(super) fn replay(
    cli: &Cli,
    store: &dyn LedgerStore,
    session: &str,
    format: Format,
    verify: bool,
    level: Option<DetailLevel>,
) -> Result<Outcome> {
    // `--json` asks for JSON: another format asked for too is a
    // contradiction, said rather than silently dropped.
    if cli.json && matches!(format, Format::Markdown) {
        return Err(usage(
            "--json and --format markdown ask for two formats: give one (--format json is what --json gives)",
        ));
    }
    let info = store
        .session(&cli.org, session)?
        .ok_or_else(|| no_such_session(cli, session))?;
    if level == Some(DetailLevel::Full) && !info.header.full_consent {
        return Err(usage(format!(
            "session {session} has no recorded consent to full-detail sharing; use --level detailed or generic"
        )));
    }
    let verdict = if verify {
        verify_session(store, &cli.org, session)?
    } else {
        None
    };
    // The steps are read a few at a time as they are written, whatever
    // the session's length: its positions first (their count heads the
    // JSON and the text), then each step, redacted to `level`.
    let seqs = store.session_seqs(&cli.org, session)?.unwrap_or_default();
    let redacted = |step: &mut cairn_store::StoredStep| -> Result<()> {
        if let Some(level) = level {
            step.record.redact(level)?;
        }
        Ok(())
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let format = if cli.json { Format::Json } else { format };
    match format {
        Format::Json => {
            // The members in the order a JSON object of them prints
            // (sorted): the head up to `step_count`, the steps, then the
            // verdict.
            let mut head = json!({
                "session_id": session,
                "agent_id": info.header.agent_id,
                "step_count": seqs.len(),
                "sealed": info.seal.is_some(),
            });
            if let Some(verdict) = &verdict {
                head["chain_valid"] = json!(verdict.verified);
            }
            let mut opening = head.to_string();
            opening.pop();
            write!(out, "{opening},\"steps\":[")?;
            crate::session_out::visit(store, &cli.org, session, &seqs, &mut |position, mut s| {
                redacted(&mut s)?;
                if position > 0 {
                    out.write_all(b",")?;
                }
                write!(out, "{}", step_to_json(s.seq, &s.record))?;
                Ok(())
            })?;
            match &verdict {
                Some(verdict) => writeln!(
                    out,
                    "],\"verdict\":{}}}",
                    verdict_to_json(verdict, 0, now())
                )?,
                None => writeln!(out, "]}}")?,
            }
        }
        Format::Text => {
            write!(
                out,
                "{}",
                render::terminal_safe(&render::text_heading(
                    session,
                    &info.header.agent_id,
                    seqs.len()
                ))
            )?;
            crate::session_out::visit(store, &cli.org, session, &seqs, &mut |_, mut s| {
                redacted(&mut s)?;
                write!(
                    out,
                    "{}",
                    render::terminal_safe(&render::text_line(&s.record))
                )?;
                Ok(())
            })?;
            if let Some(v) = &verdict {
                writeln!(out, "{}", describe(v))?;
            }
        }
        Format::Markdown => {
            let form = cairn_wire::trail::TurnsForm::TrailMarkdown;
            let (steps, writer) =
                crate::session_out::plan(store, &cli.org, session, &seqs, (form, level))?;
            crate::session_out::write_turns(
                store, &cli.org, session, &steps, &writer, level, &mut out,
            )?;
            // Seed 002's Markdown has no place for a verdict: it goes to
            // standard error, so that standard output stays the Markdown.
            if let Some(v) = &verdict {
                out.flush()?;
                eprintln!("{}", describe(v));
            }
        }
    }
    out.flush()?;
    Ok(match verdict {
        Some(v) if !v.verified => Outcome::VerificationFailed,
        _ => Outcome::Success,
    })
}

/// `cairn search`: the options of `GET /v1/search`.
#[derive(Debug, clap::Args)]
pub(crate) struct SearchArgs {
    /// What to look for: words, "a phrase", prefix*, -excluded (full
    /// text), or any text (semantic).
    query: String,
    /// fulltext, semantic or hybrid.
    #[arg(long, default_value = "hybrid")]
    mode: String,
    /// Only this agent's steps.
    #[arg(long)]
    agent: Option<String>,
    /// Only this session's steps.
    #[arg(long)]
    session: Option<String>,
    /// Only steps of this kind.
    #[arg(long)]
    kind: Option<String>,
    /// ok or flagged.
    #[arg(long)]
    status: Option<String>,
    /// Only steps created at or after: RFC 3339 or a date.
    #[arg(long)]
    since: Option<String>,
    /// Only steps created before: RFC 3339 or a date (the whole day
    /// included).
    #[arg(long)]
    until: Option<String>,
    /// At most this many results (1 to 100).
    #[arg(long, default_value_t = 10)]
    limit: usize,
}

pub(super) fn search(cli: &Cli, store: &dyn LedgerStore, args: &SearchArgs) -> Result<Outcome> {
    // The same reading of the same parameters as the API.
    let given: std::collections::HashMap<String, String> = [
        ("q", Some(args.query.clone())),
        ("mode", Some(args.mode.clone())),
        ("agent_id", args.agent.clone()),
        ("session_id", args.session.clone()),
        ("kind", args.kind.clone()),
        ("status", args.status.clone()),
        ("since", args.since.clone()),
        ("until", args.until.clone()),
        ("limit", Some(args.limit.to_string())),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v)))
    .collect();
    // Refused with the API's code and field, the message naming the
    // command line's own argument.
    let request = cairn_server::search_input(&given).map_err(|e| {
        let argument = e.field.as_deref().map(|field| match field {
            "q" => "the QUERY argument".to_owned(),
            other => flag_for_member(other).map_or_else(|| format!("--{other}"), str::to_owned),
        });
        match argument {
            Some(argument) => refused_naming(e, &argument),
            None => refused(e),
        }
    })?;
    require_known_org(cli, store)?;
    let embedder = if request.mode == cairn_store::ops::SearchMode::FullText {
        Arc::new(cairn_store::embed::WordHash)
    } else {
        let embedder = cli.embedding.embedder()?;
        let backlog = store.embedding_backlog()?.waiting;
        let chosen = store.chosen_embedder()?;
        if let Some(chosen) = chosen.as_deref().filter(|c| *c != embedder.id())
            && !cli.json
        {
            println!(
                "(the store's embedder is {chosen}: this search, with {}, finds only steps that one embedded; give the same embedder settings as the server)",
                embedder.id()
            );
        }
        if backlog > 0 {
            if cli.database.is_none()
                && !store.is_read_only()
                && chosen.as_deref().is_none_or(|c| c == embedder.id())
            {
                // No server holds this store, so none will embed its queue.
                let bar = progress_bar(backlog, "embedding queued steps");
                cairn_store::ops::drain_queue(
                    store,
                    embedder.as_ref(),
                    cli.embedding.embedding_batch as usize,
                    &mut |done| bar.set_position(done),
                )
                .map_err(|e| anyhow!("{e}"))?;
                bar.finish_and_clear();
            } else if !cli.json {
                println!(
                    "({backlog} step(s) wait for the server's background embedder and are not found by meaning yet)"
                );
            }
        }
        embedder
    };
    // This process sequences the store when no server does: then its own
    // index thread is bringing the full-text index up to date with the
    // log (a lost or stale fulltext.db), and there is no server to finish
    // that later, so the search waits for it rather than failing. On
    // PostgreSQL each try writes documents still queued itself, so trying
    // again gets there too.
    let retry_while_busy = cli.database.is_some() || !store.is_read_only();
    let mut told = false;
    let answer = loop {
        match cairn_store::ops::search(store, embedder.as_ref(), &cli.org, &request) {
            Err(cairn_store::ops::SearchError::Store(cairn_store::StoreError::Busy(why)))
                if retry_while_busy =>
            {
                if !told {
                    eprintln!("({why}; waiting for it)");
                    told = true;
                }
            }
            Ok(answer) => break answer,
            Err(cairn_store::ops::SearchError::Query(e)) => return Err(usage(e.to_string())),
            Err(cairn_store::ops::SearchError::Store(cairn_store::StoreError::Busy(why))) => {
                return Err(anyhow!("{why}"));
            }
            Err(cairn_store::ops::SearchError::Store(e)) => {
                return Err(anyhow!("storage failure: {e}"));
            }
            Err(cairn_store::ops::SearchError::Embedder(e)) => {
                return Err(anyhow!("the embedder failed: {e}"));
            }
        }
    };
    if let Some(why) = &answer.semantic_unavailable
        && !cli.json
    {
        println!("(ranked by words alone: the embedder failed: {why})");
    }
    let answer = cairn_server::wire::search_results(request.mode, embedder.description(), answer);
    if cli.json {
        println!("{}", cairn_server::wire::to_json(&answer));
    } else {
        if request.mode != cairn_store::ops::SearchMode::FullText {
            println!("(meaning ranked by {})", answer.embedder);
        }
        for hit in &answer.results {
            println!(
                "{:.3}  {} #{} {} [{}]: {}",
                hit.score,
                hit.step.session_id,
                hit.step.step_index,
                hit.step.step_type,
                hit.matched_by.join("+"),
                render::terminal_safe(&cairn_core::thinking::one_line(&hit.snippet))
            );
        }
        if answer.truncated {
            println!(
                "(more steps matched: these fill the {} MiB one answer may hold; narrow the query or its filters)",
                cairn_store::ops::SEARCH_ANSWER_BYTES >> 20
            );
        }
    }
    Ok(Outcome::Success)
}

/// `cairn reindex`: queue the steps to embed again, then embed them.
pub(super) fn reindex(cli: &Cli, store: &dyn LedgerStore, all_orgs: bool) -> Result<Outcome> {
    let embedder = cli.embedding.embedder()?;
    // From now on the queue is for this embedder: servers configured with
    // another stop taking from it.
    if let Some(before) = store.choose_embedder(embedder.id())?
        && before != embedder.id()
        && !cli.json
    {
        println!(
            "the store's embedder was {before}; it is now {} (restart servers with the same setting)",
            embedder.id()
        );
    }
    let queued = store.queue_reindex((!all_orgs).then_some(cli.org.as_str()))?;
    let backlog = store.embedding_backlog()?.waiting;
    let bar = progress_bar(backlog, "embedding");
    let settled = cairn_store::ops::drain_queue(
        store,
        embedder.as_ref(),
        cli.embedding.embedding_batch as usize,
        &mut |done| bar.set_position(done),
    )
    .map_err(|e| anyhow!("{e}"))?;
    bar.finish_and_clear();
    let scope = if all_orgs {
        "every org".to_owned()
    } else {
        format!("org {}", cli.org)
    };
    if cli.json {
        println!(
            "{}",
            serde_json::json!({
                "queued": queued,
                "settled": settled,
                "embedder": embedder.description(),
                "embedder_id": embedder.id(),
            })
        );
    } else {
        println!(
            "queued {queued} step(s) of {scope}; embedded {settled} queued step(s) with {}",
            embedder.description()
        );
    }
    Ok(Outcome::Success)
}

/// `cairn reindex --kinds`: the kind rows the log's steps call for and
/// the table lacks, written.
pub(super) fn restore_kinds(cli: &Cli, store: &dyn LedgerStore, all_orgs: bool) -> Result<Outcome> {
    let restored = store.restore_session_kinds((!all_orgs).then_some(cli.org.as_str()))?;
    if cli.json {
        println!("{}", serde_json::json!({ "kind_rows_restored": restored }));
    } else {
        let scope = if all_orgs {
            "every org".to_owned()
        } else {
            format!("org {}", cli.org)
        };
        println!("restored {restored} kind row(s) of the sessions of {scope}");
    }
    Ok(Outcome::Success)
}
