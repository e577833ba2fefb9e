//! Evidence checked: `verify` (a store, a session, a bundle, with trusted
//! checkpoints, pinned keys and witness policies); exports, receipts and
//! imports are in `transfer_cmd.rs`.

use super::*;

/// A verdict in words, for a terminal: a failure's location and detail
/// may quote what a bundle or a store holds, shown with its control
/// characters escaped ([`render::terminal_safe`]) so that no text of the
/// evidence can redraw the verdict line.
pub(super) fn describe(verdict: &Verdict) -> String {
    render::terminal_safe(&describe_raw(verdict)).into_owned()
}

fn describe_raw(verdict: &Verdict) -> String {
    match &verdict.failure {
        None => format!("VERIFIED: {} records checked", verdict.records_checked),
        Some(f) => format!(
            "{}: first failing record: {}\n  reason: {} ({})\n  records checked: {}, last valid: {}",
            headline(f, verdict.records_checked),
            f.at,
            f.reason,
            f.detail,
            verdict.records_checked,
            verdict
                .last_valid
                .as_ref()
                .map_or("none".to_owned(), |l| l.to_string())
        ),
    }
}

/// A failed verdict's first word: `TAMPERED` when the evidence
/// contradicts itself or its signatures, but not when it merely lacks what
/// the check needs (a proof, enough cosignatures): that proves nothing
/// either way, and the same records with their proof may verify. Nor when
/// nothing of a bundle was read (its first line is no bundle header, or
/// there is no line): the wrong file, or nothing at all, was given.
fn headline(failure: &cairn_core::verify::Failure, records_checked: u64) -> &'static str {
    let first_line = failure.at.line == Some(1) && records_checked == 0;
    match failure.reason {
        Reason::MissingProof => "NOT PROVEN",
        Reason::InsufficientCosignatures => "NOT COSIGNED ENOUGH",
        Reason::MalformedRecord
            if first_line && failure.detail.starts_with(cairn_core::bundle::NOT_A_BUNDLE) =>
        {
            "NOT A BUNDLE"
        }
        // No line at all (an empty file).
        Reason::MissingRecord if first_line => "NO BUNDLE",
        _ => "TAMPERED",
    }
}

pub(super) fn pinned_keys(args: &VerifyArgs) -> Result<Vec<NoteVerifier>> {
    args.key
        .iter()
        .map(|k| NoteVerifier::parse(k).map_err(|e| usage(format!("--key: {e}"))))
        .collect()
}

/// The checkpoint files given with `--checkpoint`, read: a file that
/// cannot be read is an error, never ignored.
pub(super) fn read_checkpoints(args: &VerifyArgs) -> Result<Vec<(PathBuf, String)>> {
    args.checkpoint
        .iter()
        .map(|p| {
            std::fs::read_to_string(p)
                .map(|note| (p.clone(), note))
                .map_err(|e| usage(format!("reading checkpoint {}: {e}", p.display())))
        })
        .collect()
}

pub(super) fn verify_store(
    cli: &Cli,
    store: &dyn LedgerStore,
    args: &VerifyArgs,
) -> Result<Outcome> {
    let started = Instant::now();
    if args.all_orgs {
        return verify_every_org(cli, store, args, started);
    }
    // A name the orgs table gives twice stands for one of two logs: a
    // verdict that says so (as `--all-orgs` and the server give), not a
    // store error.
    let orgs = store.orgs()?;
    if orgs.iter().filter(|org| **org == cli.org).count() > 1 {
        let verdict = cairn_store::ops::repeated_org_name_verdict(&cli.org);
        return report(
            cli,
            &verdict,
            started,
            json!({"org_id": cli.org, "repeated_org_names": [cli.org]}),
        );
    }
    if let Some(session) = &args.session {
        let verdict = verify_session(store, &cli.org, session)?
            .ok_or_else(|| no_such_session(cli, session))?;
        return report(cli, &verdict, started, json!({"session_id": session}));
    }
    require_known_org(cli, store)?;
    let (verdict, extra) = verify_one_org(cli, store, &cli.org, args)?;
    let others = orgs.iter().filter(|o| **o != cli.org).count();
    if !cli.json && others > 0 {
        println!(
            "(this store holds {others} other org(s), not verified here: --all-orgs verifies every one)"
        );
    }
    report(cli, &verdict.verdict, started, extra)
}

/// `cairn verify --all-orgs`: every org of the store in turn, a verdict
/// each; verified only if every one is.
fn verify_every_org(
    cli: &Cli,
    store: &dyn LedgerStore,
    args: &VerifyArgs,
    started: Instant,
) -> Result<Outcome> {
    let mut all_verified = true;
    let mut results = Vec::new();
    let mut checked_orgs = 0;
    // An empty store (a fresh server's) verifies: nothing in it is false.
    let orgs = store.orgs()?;
    // A name the orgs table gives twice (its key removed) would stand for
    // one of two logs and hide the other: named, and neither verified.
    let mut seen = std::collections::HashSet::new();
    let repeated: std::collections::BTreeSet<&String> =
        orgs.iter().filter(|org| !seen.insert(*org)).collect();
    if !repeated.is_empty() {
        all_verified = false;
        if !cli.json {
            println!(
                "TAMPERED: the orgs table names {} more than once (one of the logs would stand for the other)",
                repeated
                    .iter()
                    .map(|o| o.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    for org in orgs.iter().filter(|org| !repeated.contains(org)) {
        let (verdict, extra) = verify_one_org(cli, store, org, args)?;
        all_verified &= verdict.verdict.verified;
        checked_orgs += 1;
        if !cli.json && !verdict.verdict.verified {
            println!("org {org}:");
        }
        if cli.json {
            results.push(verdict_json(&verdict.verdict, started, extra));
        } else {
            println!("{}", describe(&verdict.verdict));
        }
    }
    // An org whose row was deleted is in no list above, while its log is
    // still in the store: named, and the store is not verified.
    let unlisted = store.unlisted_log_orgs()?;
    if !unlisted.is_empty() {
        all_verified = false;
        if !cli.json {
            println!(
                "TAMPERED: the store holds records, tree nodes or checkpoints of org number(s) {} that the orgs table does not name (a deleted org row hides that org's whole log)",
                unlisted
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    if cli.json {
        let mut answer = json!({"verified": all_verified, "orgs": results, "elapsed_ms": started.elapsed().as_millis()});
        if !unlisted.is_empty() {
            answer["unlisted_org_numbers"] = json!(unlisted);
        }
        if !repeated.is_empty() {
            answer["repeated_org_names"] = json!(repeated);
        }
        println!("{answer}");
    } else {
        // The orgs verified one by one (as many as the JSON answer's
        // `orgs`); a repeated name was reported above and verified as
        // neither of its orgs.
        println!(
            "{checked_orgs} org(s) checked: {}",
            if !all_verified {
                "TAMPERED (see above)".to_owned()
            } else if checked_orgs == 0 {
                // Verified (nothing in it is false), but an empty store is
                // as often a wrong --data or --database as a fresh one.
                format!(
                    "the store holds no records ({}), so nothing was false",
                    store_location(cli)
                )
            } else {
                "all VERIFIED".to_owned()
            }
        );
    }
    Ok(if all_verified {
        Outcome::Success
    } else {
        Outcome::VerificationFailed
    })
}

/// Verifies org `org`'s whole log as `args` asks; prints its summary line
/// (unless `--json`) and returns its verdict with the members its JSON
/// answer adds.
fn verify_one_org(
    cli: &Cli,
    store: &dyn LedgerStore,
    org: &str,
    args: &VerifyArgs,
) -> Result<(cairn_store::ops::StoreVerdict, Value)> {
    let keys = pinned_keys(args)?;
    let external = read_checkpoints(args)?
        .iter()
        .map(|(path, note)| {
            cairn_store::ops::trusted_checkpoint(store, org, note, &keys)
                .map_err(|e| usage(format!("{}: {e}", path.display())))
        })
        .collect::<Result<Vec<_>>>()?;
    let total = store.log_size(org)?;
    let bar = progress_bar(total, "verifying");
    let policy = crate::witness_cmd::policy(&args.witness, args.witness_quorum)?;
    let mut verdict = verify_org(store, org, &external, &keys, &mut |n| bar.set_position(n))?;
    bar.finish_and_clear();
    // What no checkpoint covers rests on this database alone (SECURITY,
    // "The operator's database").
    // (Given for a verified log only: a failed one's checkpoints were
    // checked only as far as verification got.)
    let covered = verdict.checkpoint_size.unwrap_or(0).min(verdict.log_size);
    let uncovered = verdict.log_size - covered;
    let mut extra = json!({
        "org_id": org, "log_size": verdict.log_size,
        "checkpoints_checked": verdict.checkpoints_checked, "checkpoint_size": verdict.checkpoint_size,
        "uncovered_records": verdict.verdict.verified.then_some(uncovered),
    });
    if let Some(policy) = &policy {
        let report = cairn_store::ops::apply_witness_policy(store, org, policy, &mut verdict)?;
        extra["witnessed"] = report.to_json(policy.quorum());
        if !cli.json {
            let runs = |runs: &[[u64; 2]]| {
                let shown: Vec<String> = runs
                    .iter()
                    .take(8)
                    .map(|[first, last]| {
                        if first == last {
                            first.to_string()
                        } else {
                            format!("{first} to {last}")
                        }
                    })
                    .collect();
                let more = runs.len().saturating_sub(shown.len());
                let more = if more > 0 {
                    format!(" and {more} more run(s)")
                } else {
                    String::new()
                };
                format!("{}{more}", shown.join(", "))
            };
            println!(
                "witnesses ({} of {}): {} checkpoint(s) with a quorum, {} without{}",
                policy.quorum(),
                policy.witnesses().len(),
                report.cosigned_count,
                report.uncosigned_count,
                if report.uncosigned.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (stored checkpoints of sizes {})",
                        runs(&report.uncosigned)
                    )
                }
            );
        }
    }
    if !cli.json && verdict.verdict.verified {
        println!(
            "org {}: {} records, {} checkpoint(s) checked (largest size {})",
            org,
            verdict.log_size,
            verdict.checkpoints_checked,
            verdict
                .checkpoint_size
                .map_or("none".into(), |s| s.to_string())
        );
    }
    if !cli.json && verdict.verdict.verified && uncovered > 0 {
        println!(
            "  records {covered} to {} ({uncovered}) are covered by no checkpoint yet: until the next is signed they rest on this database alone, as would records whose stored checkpoints were deleted; a checkpoint kept outside it (--checkpoint) or a witness policy (--witness) is what shows they were not rewritten",
            verdict.log_size - 1
        );
    }
    Ok((verdict, extra))
}

/// A verdict's JSON answer with the members `extra` adds.
fn verdict_json(verdict: &Verdict, started: Instant, extra: Value) -> Value {
    let mut v = verdict_to_json(verdict, started.elapsed().as_millis(), now());
    if let (Some(obj), Value::Object(more)) = (v.as_object_mut(), extra) {
        obj.extend(more);
    }
    v
}

pub(super) fn report(
    cli: &Cli,
    verdict: &Verdict,
    started: Instant,
    extra: Value,
) -> Result<Outcome> {
    if cli.json {
        println!("{}", verdict_json(verdict, started, extra));
    } else {
        println!("{}", describe(verdict));
    }
    Ok(if verdict.verified {
        Outcome::Success
    } else {
        Outcome::VerificationFailed
    })
}

pub(super) fn verify_bundle(cli: &Cli, args: &VerifyArgs) -> Result<Outcome> {
    let started = Instant::now();
    let path = args
        .bundle
        .as_deref()
        .ok_or_else(|| usage("--bundle is required"))?;
    // `-` is standard input, as for other tools that read a file.
    let path = if path == std::path::Path::new("-") {
        std::path::Path::new("/dev/stdin")
    } else {
        path
    };
    if path.is_dir() {
        return Err(usage(format!(
            "{} is a directory, not a bundle file",
            path.display()
        )));
    }
    let file =
        std::fs::File::open(path).map_err(|e| usage(format!("opening {}: {e}", path.display())))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = progress_bar(total, "verifying bundle");
    let mut verifier = BundleVerifier::new(pinned_keys(args)?);
    if let Some(policy) = crate::witness_cmd::policy(&args.witness, args.witness_quorum)? {
        verifier.require_witnesses(policy);
    }
    for (path, note) in read_checkpoints(args)? {
        // Not a checkpoint at all is an input mistake, as in a store's
        // verification; one signed by another key stays a verdict.
        cairn_core::checkpoint::checkpoint_note_shape(&note).map_err(|e| {
            usage(format!(
                "{}: not a signed note ({e}); give a file `cairn checkpoint` wrote",
                path.display()
            ))
        })?;
        verifier.trust_checkpoint(note);
    }
    super::bundle_feed::feed_bundle(
        std::io::BufReader::new(file),
        args.max_bundle_line_bytes,
        &mut verifier,
        &mut |read| bar.set_position(read),
    )
    .with_context(|| format!("reading {}", path.display()))?;
    bar.finish_and_clear();
    let result = verifier.finish();
    let hint = (!result.verdict.verified)
        .then(|| failure_hint(path, args, &result.verdict, total))
        .flatten();
    let extra = json!({
        "bundle": path.display().to_string(),
        "org_id": result.header.as_ref().map(|h| h.org_id.clone()),
        "hint": hint,
        "server_key": result.server_key,
        "key_pinned": result.key_pinned,
        "checkpoint_size": result.checkpoint.map(|c| c.0),
        "checkpoint_root": result.checkpoint.map(|c| c.1.to_hex()),
        "trusted_checkpoints": result.trusted_sizes,
        "cosigned_by": cairn_server::wire::cosigned_by_to_json(result.cosigned_by.as_ref()),
        "selection": result.selection.as_ref().map(|s| s.to_value()),
    });
    if let Some(header) = &result.header {
        // A bundle names its own org, which --org does not choose: said
        // when a user gave another one, as if to check the bundle is of it.
        let org_given = std::env::var_os("CAIRN_ORG").is_some()
            || std::env::args().any(|a| a == "--org" || a.starts_with("--org="));
        if org_given && header.org_id != cli.org {
            eprintln!(
                "cairn: note: this bundle is of org {}, not --org {} (a bundle is verified on its own; --org does not apply to it)",
                render::terminal_safe(&header.org_id),
                cli.org
            );
        }
        if !cli.json {
            println!(
                "bundle of org {} from server {}",
                render::terminal_safe(&header.org_id),
                render::terminal_safe(&header.server_name)
            );
        }
    }
    if !cli.json {
        if let Some(key) = &result.server_key {
            println!(
                "server key {}{}",
                render::terminal_safe(&key.to_string()),
                if result.key_pinned {
                    " (pinned)"
                } else {
                    " (from the bundle: compare it with the operator's published key, or pass --key)"
                }
            );
        }
        if let Some((size, root)) = result.checkpoint {
            println!("checkpoint: size {size}, root {root}");
        }
        if let Some(selection) = &result.selection {
            println!(
                "selection (signed): {} at level {}: {} session(s), {} other record(s)",
                render::terminal_safe(&selection.scope.to_value().to_string()),
                selection.level,
                selection.sessions.len(),
                selection.records.len()
            );
        }
        if result.verdict.verified {
            for size in &result.trusted_sizes {
                println!("consistent with the trusted checkpoint of size {size}");
            }
            if let Some((by, quorum)) = &result.cosigned_by {
                println!(
                    "cosigned by {} of the witnesses given (quorum {quorum}): {}",
                    by.len(),
                    render::terminal_safe(&by.join(", "))
                );
            }
        }
    }
    if result.verdict.verified
        && let (Some(log), Some(selection)) = (&args.log, &result.selection)
    {
        let mismatch = match recompute_selection(args, log, selection, result.checkpoint)? {
            Some((recomputed, undecided)) => (!selection.is_recomputed(
                &recomputed,
                &undecided,
                &result.listed_traces,
            ))
            .then(|| {
                format!(
                    "the bundle's signed selection is not what the log in {} gives for its scope and level: the operator signed a false statement (recomputed: {})",
                    log.display(),
                    recomputed.to_value()
                )
            }),
            // No export of an empty scope exists (the server refuses it):
            // a selection of one is a statement the log does not back.
            None => Some(format!(
                "the log in {} holds no session in the bundle's selection's scope, so no export of it exists: the operator signed a false statement",
                log.display()
            )),
        };
        if let Some(detail) = mismatch {
            let mut verdict = result.verdict.clone();
            verdict.verified = false;
            verdict.failure = Some(cairn_core::verify::Failure {
                at: cairn_core::verify::Location::default(),
                reason: cairn_core::verify::Reason::SelectionMismatch,
                detail,
            });
            return report(cli, &verdict, started, extra);
        }
        if !cli.json {
            println!(
                "the selection is what the complete log in {} gives",
                log.display()
            );
        }
    }
    let outcome = report(cli, &result.verdict, started, extra);
    if let Some(hint) = &hint
        && !cli.json
    {
        println!("  hint: {}", render::terminal_safe(hint));
    }
    outcome
}

/// What a user most likely did when a bundle fails in one of the ways a
/// mistake, not an attack, usually explains: the file is empty or holds a
/// server's error answer (a failed `curl` saved as a bundle), or the key
/// given with `--key` is not the one the bundle names. The verdict is
/// unchanged (the published reasons); this only says what to check.
fn failure_hint(
    path: &std::path::Path,
    args: &VerifyArgs,
    verdict: &Verdict,
    size: u64,
) -> Option<String> {
    use cairn_core::verify::Reason;
    let reason = verdict.failure.as_ref()?.reason;
    // The file's name as typed, but with any control character escaped
    // (a name may hold a terminal's escape sequences).
    let name = path.display().to_string();
    let name = if name.chars().any(char::is_control) {
        format!("{name:?}")
    } else {
        name
    };
    // (A pipe's size says nothing: only a file is empty.)
    let is_file = std::fs::metadata(path).is_ok_and(|m| m.is_file());
    if size == 0 && is_file {
        return Some(format!(
            "{name} is empty: the export that wrote it failed or was cut off"
        ));
    }
    // The first line, no further than a header can be.
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::Read::take(
            std::io::BufReader::new(std::fs::File::open(path).ok()?),
            64 * 1024,
        ),
        &mut first,
    )
    .ok()?;
    let header: Value = serde_json::from_str(first.trim_end()).ok()?;
    // Exactly a server's error answer (`{"error": {"code", "message"}}`
    // and nothing else, in a file of that one line), its words quoted with
    // every control character escaped: they come from the file.
    if reason == Reason::MalformedRecord
        && is_file
        && size == first.len() as u64
        && let Some(object) = header.as_object()
        && object.len() == 1
        && let Some(error) = object.get("error")
        && let (Some(code), Some(message)) = (error["code"].as_str(), error["message"].as_str())
    {
        let shown = |text: &str| format!("{:?}", text.chars().take(200).collect::<String>());
        return Some(format!(
            "{name} holds an error answer from a Cairn server, not a bundle ({}: {}): the export failed; check the session id, the org and the API key used to export",
            shown(code),
            shown(message),
        ));
    }
    if reason == Reason::MissingProof && !args.checkpoint.is_empty() {
        // Most often no attack: a bundle exported before (or without
        // regard to) a checkpoint kept since, as the README's quickstart
        // does when a step is recorded between its two exports.
        return Some(
            "a checkpoint given with --checkpoint is not proven by this bundle: one newer than the bundle's needs a newer export, one older a consistency proof, which `cairn export --since-checkpoint FILE` (GET /v1/export?since_size=N) adds; only a bundle that still fails then is evidence against the log".to_owned(),
        );
    }
    if reason == Reason::InsufficientCosignatures {
        // Most often no attack: the server signs a new checkpoint for an
        // export and sends it to its witnesses only at its next round.
        return Some(
            "the bundle's checkpoint lacks the cosignatures --witness and --witness-quorum ask for: if it was exported within a few seconds of its last record, its witnesses had not cosigned it yet (servers send checkpoints every --witness-interval, 5 s by default); export again a little later, or check that the witness keys are the server's witnesses'".to_owned(),
        );
    }
    if reason == Reason::BadSignature && !args.key.is_empty() {
        // `name+hexid+base64`: the base64 may hold `+` too.
        let mut parts = header.get("server_key")?.as_str()?.splitn(3, '+');
        let named_id = format!("{}+{}", parts.next()?, parts.next()?);
        if !args
            .key
            .iter()
            .any(|k| k.starts_with(&format!("{named_id}+")))
        {
            return Some(format!(
                "the bundle names its server key {named_id}, and no key given with --key is that key: if you ran `cairn keys` for --key, run it where the server's data is (CAIRN_DATA_DIR); if you trust only the keys you gave, this bundle is not from their server"
            ));
        }
    }
    None
}

/// The selection the published rule gives for `selection`'s scope and
/// level over the complete bundle at `path`, which must verify and cover
/// the same checkpoint (its root at the selection's size the same), and
/// the signed traces it may list or not
/// ([`cairn_core::selection::Selector::undecided`]).
///
/// The bundle is read twice, line by line (memory flat in its size, each
/// line bounded by `--max-bundle-line-bytes`; a pipe is first copied to an
/// unnamed temporary file): the first pass verifies it,
/// folds the tree and runs the selector's first pass; the second runs the
/// selector's second pass. Both fold a hash of every line, and differing
/// folds (the file changed between the passes) are an error. `None` when
/// the log holds no session in the selection's scope (no export of it
/// exists: the server refuses an empty one).
pub(super) fn recompute_selection(
    args: &VerifyArgs,
    path: &std::path::Path,
    selection: &cairn_core::selection::Selection,
    checkpoint: Option<(u64, cairn_core::Hash)>,
) -> Result<Option<(cairn_core::selection::Selection, Vec<u64>)>> {
    use cairn_core::selection::Selector;
    use cairn_store::ops::{BundleLineError, read_bundle_line};
    let max_line = args.max_bundle_line_bytes;
    let unreadable = |e: std::io::Error| usage(format!("reading {}: {e}", path.display()));
    // A pipe (`--log <(zcat all.bundle.gz)`) cannot be read twice: it is
    // copied to an unnamed temporary file first.
    let spooled = match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => None,
        _ => {
            let mut spool = tempfile::tempfile().map_err(unreadable)?;
            let mut source = std::fs::File::open(path).map_err(unreadable)?;
            std::io::copy(&mut source, &mut spool).map_err(unreadable)?;
            Some(spool)
        }
    };
    let open = || -> std::io::Result<std::fs::File> {
        use std::io::Seek as _;
        match &spooled {
            None => std::fs::File::open(path),
            Some(spool) => {
                let mut file = spool.try_clone()?;
                file.seek(std::io::SeekFrom::Start(0))?;
                Ok(file)
            }
        }
    };
    // Calls `visit` with every line (line end trimmed) until it says stop;
    // returns the fold of the lines' hashes.
    let pass = |visit: &mut dyn FnMut(&[u8]) -> bool| -> Result<cairn_core::Hash> {
        let mut reader = std::io::BufReader::new(open().map_err(unreadable)?);
        let mut line = Vec::new();
        let mut fold = cairn_core::Hash::ZERO;
        for number in 1u64.. {
            line.clear();
            match read_bundle_line(&mut reader, &mut line, max_line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(BundleLineError::Io(e)) => return Err(unreadable(e)),
                Err(refused) => {
                    let source = format!("--log {}", path.display());
                    let message = refused
                        .refusal(&source, number)
                        .unwrap_or_else(|| refused.to_string());
                    return Err(usage(message));
                }
            }
            let text = cairn_core::bundle::trim_line_end(&line);
            let mut pair = [0u8; 64];
            pair[..32].copy_from_slice(&fold.0);
            pair[32..].copy_from_slice(&cairn_core::Hash::sha256(text).0);
            fold = cairn_core::Hash::sha256(&pair);
            if !visit(text) {
                break;
            }
        }
        Ok(fold)
    };
    let entry_of = |text: &[u8]| {
        let text = std::str::from_utf8(text).ok()?;
        cairn_core::bundle::decode_entry(text).ok().map(|(e, _)| e)
    };
    let mut verifier = BundleVerifier::new(pinned_keys(args)?);
    let mut selector = Selector::new(
        selection.scope.clone(),
        selection.level,
        selection.checkpoint_size,
    );
    let mut tree = cairn_core::merkle::Frontier::new();
    let mut root_at = None;
    let first = pass(&mut |text| {
        if !verifier.push_bytes(text) {
            return false;
        }
        if let Some(entry) = entry_of(text) {
            if tree.size() < selection.checkpoint_size {
                tree.push(entry.leaf_hash());
                if tree.size() == selection.checkpoint_size {
                    root_at = Some(tree.root());
                }
            }
            selector.first_pass(&entry);
        }
        true
    })?;
    let complete = verifier.finish();
    if !complete.verdict.verified || !complete.header.as_ref().is_some_and(|h| h.complete_log) {
        return Err(usage(format!(
            "--log {} is not a complete bundle that verifies",
            path.display()
        )));
    }
    if root_at != checkpoint.map(|c| c.1) {
        return Err(usage(format!(
            "--log {} is not the log the bundle's checkpoint covers (its root at size {} differs, or it is shorter)",
            path.display(),
            selection.checkpoint_size
        )));
    }
    let second = pass(&mut |text| {
        if let Some(entry) = entry_of(text) {
            selector.second_pass(&entry);
        }
        true
    })?;
    if second != first {
        return Err(usage(format!(
            "--log {} changed while it was read",
            path.display()
        )));
    }
    let undecided = selector.undecided();
    Ok(selector.finish().map(|recomputed| (recomputed, undecided)))
}
