//! Evidence leaving and entering the store: `cairn export` (bundles and
//! their receipts), `cairn verify --receipt`, and `cairn import`.

use super::*;

pub(super) fn export_bundle(
    cli: &Cli,
    store: Arc<dyn LedgerStore>,
    args: &ExportArgs,
) -> Result<Outcome> {
    let scope = match (
        &args.session,
        &args.agent,
        &args.since,
        &args.until,
        args.all,
    ) {
        (Some(s), None, None, None, false) => ExportScope::Session(s.clone()),
        (None, Some(a), None, None, false) => ExportScope::Agent(a.clone()),
        // Read as the API reads them: RFC 3339 or a date (`--until` a
        // date: that day included).
        (None, None, Some(since), Some(until), false) => cairn_server::export_range(since, until)
            .map_err(|e| {
            let flag = if e.field.as_deref() == Some("since") {
                "--since"
            } else {
                "--until"
            };
            refused_naming(e, flag)
        })?,
        (None, None, None, None, true) => ExportScope::All,
        _ => {
            return Err(usage(
                "choose one of --session, --agent, --since/--until or --all",
            ));
        }
    };
    let since_size = match &args.since_checkpoint {
        None => args.since_size,
        Some(path) => {
            let note = std::fs::read_to_string(path)
                .map_err(|e| usage(format!("reading {}: {e}", path.display())))?;
            let cp = cairn_store::ops::trusted_checkpoint(store.as_ref(), &cli.org, &note, &[])
                .map_err(|e| usage(format!("{}: {e}", path.display())))?;
            Some(cp.checkpoint().size)
        }
    };
    let options = cairn_store::ops::ExportOptions {
        level: args.level,
        since_size,
    };
    let plan = plan_cli_export(cli, &store, &scope, options)?;
    let checkpoint = plan.checkpoint().clone();
    let bar = progress_bar(checkpoint.size, "exporting");
    let mut sink: Box<dyn std::io::Write> = match &args.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| usage(format!("creating {}: {e}", path.display())))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let summary = cairn_store::ops::write_export(store.as_ref(), &plan, &mut sink, &mut |n| {
        bar.set_position(n)
    })?;
    drop(sink);
    bar.finish_and_clear();
    let receipts = match &args.receipts {
        Some(dir) => write_receipts(cli, store.as_ref(), &plan, dir)?,
        None => 0,
    };
    if args.output.is_some() || args.receipts.is_some() {
        let mut message = json!({"entries": summary.entries, "sessions": summary.sessions, "checkpoint_size": summary.checkpoint_size});
        if args.receipts.is_some() {
            message["receipts"] = json!(receipts);
        }
        if cli.json {
            println!("{message}");
        } else {
            eprintln!(
                "exported {} entries of {} session(s) under the checkpoint of size {} (not verified here: `cairn verify --bundle` checks the file)",
                summary.entries, summary.sessions, summary.checkpoint_size
            );
            if let Some(dir) = &args.receipts {
                eprintln!(
                    "wrote {receipts} COSE inclusion receipt(s) to {}",
                    dir.display()
                );
            }
        }
    }
    Ok(Outcome::Success)
}

/// One COSE inclusion receipt per entry of the export, against its
/// checkpoint, as `<seq>.cose` in `dir`.
pub(super) fn write_receipts(
    cli: &Cli,
    store: &dyn LedgerStore,
    plan: &cairn_store::ops::ExportPlan,
    dir: &std::path::Path,
) -> Result<u64> {
    use cairn_store::ops::ReceiptOpError;
    std::fs::create_dir_all(dir).map_err(|e| usage(format!("creating {}: {e}", dir.display())))?;
    let receipts = cairn_store::ops::Receipts::new(store, &cli.org, plan.checkpoint()).map_err(
        |e| match e {
            ReceiptOpError::Store(e) => anyhow!(e),
            e => usage(e.to_string()),
        },
    )?;
    let mut written = 0;
    for seq in plan.entry_seqs() {
        let receipt = receipts.inclusion(seq, None).map_err(|e| match e {
            ReceiptOpError::Store(e) => anyhow!(e),
            e => anyhow!("the receipt of entry {seq}: {e}"),
        })?;
        let path = dir.join(format!("{seq}.cose"));
        std::fs::write(&path, receipt).map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
        written += 1;
    }
    Ok(written)
}

/// `cairn receipt verify`: one receipt, offline.
pub(super) fn verify_receipt(cli: &Cli, command: &ReceiptCommand) -> Result<Outcome> {
    use cairn_core::receipt::Receipt;
    let ReceiptCommand::Verify {
        file,
        key,
        leaf,
        old_root,
        root,
    } = command;
    let key = NoteVerifier::parse(key).map_err(|e| usage(format!("--key: {e}")))?;
    let hash =
        |name: &str, text: &str| Hash::from_hex(text).map_err(|e| usage(format!("--{name}: {e}")));
    let root = root.as_deref().map(|r| hash("root", r)).transpose()?;
    let leaf = leaf.as_deref().map(|l| hash("leaf", l)).transpose()?;
    let old_root = old_root
        .as_deref()
        .map(|r| hash("old-root", r))
        .transpose()?;
    let bytes =
        std::fs::read(file).map_err(|e| usage(format!("reading {}: {e}", file.display())))?;
    // Every org's receipts are signed by the one server key: what ties a
    // receipt to the org asked about is its issuer, the log's origin
    // (FORMAT 7.8), compared here with the key's name and `--org`.
    let expected = cairn_core::log::log_origin(key.name(), &cli.org);
    // The signature first: an issuer is compared only once the bytes that
    // state it are the key's.
    let verdict = Receipt::decode(&bytes).and_then(|receipt| {
        match (leaf, old_root) {
            (Some(leaf), _) => receipt
                .verify_inclusion(&key, &leaf, root.as_ref())
                .map(|v| {
                    json!({"verified": true, "kind": "inclusion", "leaf_index": v.leaf_index,
                       "tree_size": v.tree_size, "root": v.root.to_hex(), "issuer": v.issuer})
                }),
            (None, old) => receipt
                .verify_consistency(&key, &old.unwrap_or_default(), root.as_ref())
                .map(|v| {
                    json!({"verified": true, "kind": "consistency", "old_size": v.old_size,
                       "new_size": v.new_size, "root": v.new_root.to_hex(), "issuer": v.issuer})
                }),
        }
        .and_then(|verified| receipt.check_issuer(&expected).map(|()| verified))
    });
    match verdict {
        Ok(v) => {
            if cli.json {
                println!("{v}");
            } else {
                println!("receipt verified: {v}");
            }
            Ok(Outcome::Success)
        }
        Err(e) => {
            if cli.json {
                println!("{}", json!({"verified": false, "reason": e.to_string()}));
            } else {
                println!(
                    "receipt does not verify: {}",
                    render::terminal_safe(&e.to_string())
                );
                if matches!(e, cairn_core::receipt::ReceiptError::OtherLog { .. }) {
                    println!(
                        "  hint: a receipt is checked against --org (CAIRN_ORG); give the org whose record it is"
                    );
                }
            }
            Ok(Outcome::VerificationFailed)
        }
    }
}

/// Plans an export against a fresh checkpoint when this process may sign
/// one (it sequences the store), else against the latest stored one (a
/// server is running on the data directory), planning again when a step
/// was erased after the checkpoint.
pub(super) fn plan_cli_export(
    cli: &Cli,
    store: &Arc<dyn LedgerStore>,
    scope: &ExportScope,
    options: cairn_store::ops::ExportOptions,
) -> Result<cairn_store::ops::ExportPlan> {
    use cairn_store::ops::ExportError;
    let mut attempts = 0;
    loop {
        let checkpoint = match store.as_ref().append_batch(&[WriteRequest::Checkpoint {
            org_id: cli.org.clone(),
        }]) {
            Ok(mut written) => match written.pop() {
                Some(Ok(Written::Checkpoint(cp))) => cp,
                Some(Err(_)) => {
                    return Err(usage(format!("org {} has no records to export", cli.org)));
                }
                other => return Err(anyhow!("unexpected answer {other:?}")),
            },
            // Beside a running server: its latest checkpoint.
            Err(cairn_store::StoreError::ReadOnly(_)) => store
                .latest_checkpoint(&cli.org)?
                .ok_or_else(|| usage(format!("org {} has no checkpoint yet", cli.org)))?,
            Err(e) => return Err(e.into()),
        };
        match cairn_store::ops::plan_export(
            store.as_ref(),
            &cli.org,
            scope,
            options,
            &checkpoint,
            now(),
        ) {
            Ok(plan) => return Ok(plan),
            Err(ExportError::Stale { .. }) if attempts < 3 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(1100));
            }
            Err(e @ (ExportError::Store(_) | ExportError::Write(_))) => return Err(e.into()),
            Err(e) => return Err(usage(e.to_string())),
        }
    }
}

pub(super) fn import(
    cli: &Cli,
    store: &dyn LedgerStore,
    path: &std::path::Path,
    key: Option<&str>,
    max_line: usize,
) -> Result<Outcome> {
    let keys = key
        .map(|k| NoteVerifier::parse(k).map_err(|e| usage(format!("--key: {e}"))))
        .transpose()?
        .into_iter()
        .collect::<Vec<_>>();
    let path_owned = path.to_path_buf();
    let open = move || -> std::io::Result<Box<dyn std::io::BufRead>> {
        Ok(Box::new(std::io::BufReader::new(std::fs::File::open(
            &path_owned,
        )?)))
    };
    if !path.exists() {
        return Err(usage(format!("{} does not exist", path.display())));
    }
    let bar = progress_bar(0, "importing");
    let outcome = cairn_store::ops::import_bundle(store, &open, &keys, max_line, &mut |n| {
        bar.set_position(n)
    });
    bar.finish_and_clear();
    match outcome {
        Ok(cairn_store::ops::ImportOutcome::Imported {
            org_id,
            entries,
            mirror,
        }) => {
            if cli.json {
                println!(
                    "{}",
                    json!({"org_id": org_id, "entries": entries, "mirror": mirror})
                );
            } else {
                println!(
                    "imported {entries} entries as org {org_id}{}",
                    if mirror {
                        " (a read-only mirror, verified with the exporting server's key)"
                    } else {
                        ""
                    }
                );
            }
            Ok(Outcome::Success)
        }
        Ok(cairn_store::ops::ImportOutcome::Rejected(verdict)) => {
            println!("the bundle does not verify; nothing was imported");
            report(cli, &verdict.verdict, Instant::now(), json!({}))
        }
        Err(cairn_store::ImportError::Store(e)) => Err(anyhow!(e)),
        Err(e) => Err(usage(e.to_string())),
    }
}
