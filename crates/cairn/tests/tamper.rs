//! The tamper suite: every fault class of `docs/FORMAT.md` section 9, by a
//! courier (who may add, drop, reorder or alter any line of a bundle) and by
//! an insider who holds the server key (who may re-sign anything), against
//! real bundles exported from a real store, with the exact reason and
//! position each must produce. Each case is also checked through
//! `cairn verify --bundle` (exit 1, same reason), and written to the shared
//! corpus (`CAIRN_TAMPER_CORPUS`, default `target/tamper-corpus`) that the
//! Python and TypeScript verifiers are run on: they must agree on every one.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

mod common;
mod corpus;
mod tamper_forms;
mod tamper_notes;
mod tamper_traces;
mod tamper_world;
use corpus::*;
use tamper_world::*;

use cairn_core::Hash;
use cairn_core::bundle::{checkpoint_line, consistency_line, decode_entry, encode_entry};
use cairn_core::commit::{Field, chain_hash};
use cairn_core::detail::DetailLevel;
use cairn_core::log::{LogEntry, LogRecord, OpRecord};
use cairn_core::merkle::{MemoryTree, consistency_proof};
use cairn_core::note::NoteSigner;
use cairn_core::selection::Scope;
use cairn_core::verify::Reason;
use cairn_store::ops::ExportScope;
use serde_json::{Value, json};

#[test]
fn every_fault_class_is_named_by_every_verifier() {
    let w = world();
    let key = w.server.verifier().to_string();
    let pinned = std::slice::from_ref(&key);
    let entries = w.entries();
    let n = entries.len() as u64;

    // Genuine bundles of every scope and level verify.
    let complete = w.export(ExportScope::All, None);
    case("genuine-complete", &complete, pinned, &[], None);
    let s1 = w.export(ExportScope::Session("s1".into()), None);
    case("genuine-s1-full", &s1, pinned, &[], None);
    let s2 = w.export(
        ExportScope::Session("s2".into()),
        Some(DetailLevel::Generic),
    );
    case("genuine-s2-generic", &s2, &[], &[], None);
    let analyst = w.export(
        ExportScope::Agent("analyst".into()),
        Some(DetailLevel::Detailed),
    );
    case("genuine-analyst-detailed", &analyst, pinned, &[], None);
    tamper_notes::witness_policies(&complete, pinned, &w.server);
    tamper_forms::courier_forms(&complete, &s1, pinned);
    tamper_forms::witness_key_in_the_header(&complete);
    tamper_forms::keys_of_another_name(&complete, pinned, &w.server);

    // --- A courier: entries no checkpoint covers.
    let mut appended = complete.clone();
    let mut extra = entries[entries.len() - 1].clone();
    let head = match &extra.record {
        LogRecord::Step(r) => r.hash,
        _ => panic!(),
    };
    extra.seq = n;
    recompute(&mut extra, head, |s| {
        s.step_index += 1;
        s.content = Some("forged".into());
    });
    appended.insert(appended.len() - 1, encode_entry(&extra, None));
    set_end(&mut appended, n + 1);
    case(
        "complete-appended-entry",
        &appended,
        pinned,
        &[],
        Some(&Expected {
            seq: Some(n),
            ..at_line(Reason::UncoveredEntry, 2 + n + 1)
        }),
    );
    let older = w
        .store
        .checkpoints(ORG)
        .unwrap()
        .into_iter()
        .find(|c| c.size < n - 2)
        .unwrap();
    let mut swapped = complete.clone();
    swapped[1] = checkpoint_line(&older.note);
    case(
        "complete-older-checkpoint",
        &swapped,
        pinned,
        &[],
        Some(&Expected {
            seq: Some(older.size),
            ..at_line(Reason::UncoveredEntry, 2 + older.size + 1)
        }),
    );

    // --- A courier: dropping what a partial bundle holds.
    let last_s2 = line_of(&s2, seq_of(&entries, |e| is_step_of(e, "s2", 2)) as u64);
    let mut short = s2.clone();
    short.remove(last_s2);
    fix_end(&mut short);
    case(
        "partial-unsealed-tail-dropped",
        &short,
        &[],
        &[],
        Some(&Expected {
            reason: Reason::MissingRecord,
            line: None,
            seq: None,
            session_id: Some("s2".into()),
            step_index: Some(2),
        }),
    );
    for (name, entry_type) in [
        ("partial-erasure-dropped", "erasure"),
        ("partial-review-dropped", "review"),
        ("partial-audit-event-dropped", "audit-event"),
        ("partial-key-registration-dropped", "key-registration"),
        ("partial-seal-dropped", "seal"),
    ] {
        let seq = seq_of(&entries, |e| is_op(e, entry_type)) as u64;
        let at = line_of(&s1, seq);
        let mut dropped = s1.clone();
        dropped.remove(at);
        fix_end(&mut dropped);
        // Reported at the line after it, where the gap shows, naming the
        // listed record's seq (or at the end, for the last record).
        let expected = if at + 1 < dropped.len() - 1 {
            Expected {
                seq: Some(seq),
                ..at_line(Reason::MissingRecord, at as u64 + 1)
            }
        } else {
            Expected {
                reason: Reason::MissingRecord,
                line: None,
                seq: Some(seq),
                session_id: None,
                step_index: None,
            }
        };
        case(name, &dropped, pinned, &[], Some(&expected));
    }
    // A whole session dropped from an agent's export.
    let b_start = seq_of(
        &entries,
        |e| matches!(&e.record, LogRecord::Op { record: OpRecord::SessionStart(h), .. } if h.session_id == "s2"),
    ) as u64;
    let mut no_s2: Vec<String> = analyst
        .iter()
        .filter(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["fields"]["session_id"] != "s2" && v["seq"].as_u64() != Some(b_start)
        })
        .cloned()
        .collect();
    fix_end(&mut no_s2);
    case(
        "agent-export-session-dropped",
        &no_s2,
        pinned,
        &[],
        Some(&Expected {
            reason: Reason::MissingRecord,
            line: None,
            seq: Some(b_start),
            session_id: None,
            step_index: None,
        }),
    );
    // An entry of another export, with its genuine proof, added.
    let b1 = w.export(ExportScope::Session("b1".into()), None);
    let foreign = b1[b1.len() - 2].clone();
    let foreign_seq: u64 = serde_json::from_str::<Value>(&foreign).unwrap()["seq"]
        .as_u64()
        .unwrap();
    let mut added = s2.clone();
    let insert_at = added.len() - 1;
    added.insert(insert_at, foreign);
    fix_end(&mut added);
    case(
        "partial-foreign-entry-added",
        &added,
        &[],
        &[],
        Some(&Expected {
            seq: Some(foreign_seq),
            ..at_line(Reason::UnlistedEntry, insert_at as u64 + 1)
        }),
    );
    let mut unselected = s2.clone();
    unselected.remove(2);
    case(
        "partial-selection-removed",
        &unselected,
        &[],
        &[],
        Some(&at_line(Reason::MissingProof, 3)),
    );
    let mut edited = s2.clone();
    edit_line(&mut edited, 2, |v| {
        v["selection"]["sessions"][0]["steps"] = json!(2);
    });
    case(
        "partial-selection-edited",
        &edited,
        &[],
        &[],
        Some(&at_line(Reason::DigestMismatch, 3)),
    );
    let mut unproven = s2.clone();
    edit_line(&mut unproven, 4, |v| {
        v.as_object_mut().unwrap().remove("proof");
    });
    case(
        "partial-proof-removed",
        &unproven,
        &[],
        &[],
        Some(&at_line(Reason::MissingProof, 5)),
    );
    let mut bent = s2.clone();
    edit_line(&mut bent, 4, |v| {
        let p = v["proof"][0].as_str().unwrap().to_owned();
        v["proof"][0] = json!(format!(
            "{}{}",
            if p.starts_with('0') { "1" } else { "0" },
            &p[1..]
        ));
    });
    case(
        "partial-proof-altered",
        &bent,
        &[],
        &[],
        Some(&at_line(Reason::InclusionMismatch, 5)),
    );

    // --- A courier: edits.
    let content_seq = seq_of(&entries, |e| is_step_of(e, "s1", 0)) as u64;
    let mut content = complete.clone();
    let at = line_of(&content, content_seq);
    edit_line(&mut content, at, |v| {
        v["fields"]["content"] = json!("user asked for less")
    });
    case(
        "complete-content-edited",
        &content,
        pinned,
        &[],
        Some(&Expected {
            seq: Some(content_seq),
            ..at_line(Reason::DigestMismatch, at as u64 + 1)
        }),
    );
    let mut hidden = complete.clone();
    edit_line(&mut hidden, at, |v| {
        let salt = v["salts"]["content"].clone();
        let _ = salt;
        let mut e = decode_entry(&v.to_string()).unwrap().0;
        let LogRecord::Step(r) = &mut e.record else {
            panic!()
        };
        r.hide(Field::Content).unwrap();
        *v = serde_json::from_str(&encode_entry(&e, None)).unwrap();
    });
    case(
        "complete-unrecorded-erasure",
        &hidden,
        pinned,
        &[],
        Some(&Expected {
            reason: Reason::ErasureMismatch,
            line: None,
            seq: Some(content_seq),
            session_id: Some("s1".into()),
            step_index: Some(0),
        }),
    );
    let mut dup = complete.clone();
    dup[at] = dup[at].replacen("{\"digest\"", "{\"digest\":\"x\",\"digest\"", 1);
    case(
        "complete-duplicate-member",
        &dup,
        pinned,
        &[],
        Some(&at_line(Reason::MalformedRecord, at as u64 + 1)),
    );
    let mut upper = complete.clone();
    edit_line(&mut upper, at, |v| {
        v["digest"] = json!(v["digest"].as_str().unwrap().to_uppercase());
    });
    case(
        "complete-uppercase-hex",
        &upper,
        pinned,
        &[],
        Some(&Expected {
            seq: Some(content_seq),
            ..at_line(Reason::MalformedRecord, at as u64 + 1)
        }),
    );
    let mut huge = complete.clone();
    huge[at] = huge[at].replacen("\"seq\":", "\"big\":9007199254740993,\"seq\":", 1);
    case(
        "complete-integer-beyond-doubles",
        &huge,
        pinned,
        &[],
        Some(&at_line(Reason::MalformedRecord, at as u64 + 1)),
    );
    let mut unknown = complete.clone();
    edit_line(&mut unknown, at, |v| v["note"] = json!("hello"));
    case(
        "complete-unknown-member",
        &unknown,
        pinned,
        &[],
        Some(&at_line(Reason::MalformedRecord, at as u64 + 1)),
    );
    let mut late = complete.clone();
    edit_line(&mut late, at, |v| {
        v["logged_at"] = json!("2099-01-01T00:00:00.000000Z");
    });
    // (A step's created_at is then far from its logged_at: caught at once.)
    case(
        "complete-logged-at-edited",
        &late,
        pinned,
        &[],
        Some(&at_line(Reason::BadTimestamp, at as u64 + 1)),
    );
    let mut after_end = complete.clone();
    after_end.push(complete[2].clone());
    case(
        "complete-line-after-end",
        &after_end,
        pinned,
        &[],
        Some(&at_line(Reason::MalformedRecord, after_end.len() as u64)),
    );
    let mut wrong_end = complete.clone();
    set_end(&mut wrong_end, n + 1);
    case(
        "complete-end-count",
        &wrong_end,
        pinned,
        &[],
        Some(&at_line(Reason::MalformedRecord, wrong_end.len() as u64)),
    );
    let truncated = complete[..complete.len() - 1].to_vec();
    case(
        "complete-truncated",
        &truncated,
        pinned,
        &[],
        Some(&at_line(Reason::MissingRecord, complete.len() as u64)),
    );
    let mut v1 = complete.clone();
    edit_line(&mut v1, 0, |v| v["cairn_bundle"] = json!(1));
    case(
        "format-1-header",
        &v1,
        pinned,
        &[],
        Some(&at_line(Reason::MalformedRecord, 1)),
    );
    let stranger = NoteSigner::from_seed("cairn.test", &[1; 32]).unwrap();
    let mut forged_cp = complete.clone();
    let cp_text = cairn_core::note::Note::parse(
        serde_json::from_str::<Value>(&complete[1]).unwrap()["checkpoint"]
            .as_str()
            .unwrap(),
    )
    .unwrap()
    .text;
    forged_cp[1] = checkpoint_line(&stranger.sign(&cp_text).unwrap());
    case(
        "checkpoint-by-another-key",
        &forged_cp,
        pinned,
        &[],
        Some(&at_line(Reason::BadSignature, 2)),
    );
    let mut other_origin = complete.clone();
    edit_line(&mut other_origin, 0, |v| {
        v["org_id"] = json!("other");
        v["origin"] = json!("cairn.test/other");
    });
    case(
        "checkpoint-of-another-origin",
        &other_origin,
        pinned,
        &[],
        Some(&at_line(Reason::MalformedRecord, 2)),
    );

    // --- An insider holding the key: rewritten history, re-signed.
    let early = w
        .store
        .checkpoints(ORG)
        .unwrap()
        .into_iter()
        .find(|c| c.size > content_seq + 1 && c.size < n)
        .unwrap()
        .note;
    let mut rewritten_entries = entries.clone();
    let genesis = match &entries[content_seq as usize].record {
        LogRecord::Step(r) => r.prev_hash,
        _ => panic!(),
    };
    recompute(&mut rewritten_entries[content_seq as usize], genesis, |s| {
        s.content = Some("rewritten".into());
    });
    let new_hash = match &rewritten_entries[content_seq as usize].record {
        LogRecord::Step(r) => r.hash,
        _ => panic!(),
    };
    let _ = new_hash;
    relink(&mut rewritten_entries, &w.server);
    let rewritten = w.signed_complete(&rewritten_entries);
    case(
        "insider-rewrite-alone-verifies",
        &rewritten,
        pinned,
        &[],
        None,
    );
    // On its own it fails only where the signed step no longer matches its
    // signature or later links; against the auditor's checkpoint it is named.
    let early_size: u64 = early.lines().nth(1).unwrap().parse().unwrap();
    let verdict = verify_lines(&rewritten, pinned, std::slice::from_ref(&early));
    let f = verdict.verdict.failure.unwrap();
    assert!(
        matches!(
            f.reason,
            Reason::InconsistentCheckpoint | Reason::BadSignature
        ),
        "{f:?}"
    );
    case(
        "insider-rewrite-vs-trusted-checkpoint",
        &rewritten,
        pinned,
        std::slice::from_ref(&early),
        Some(&Expected {
            reason: f.reason,
            line: f.at.line,
            seq: f.at.seq,
            session_id: None,
            step_index: None,
        }),
    );
    let _ = early_size;
    // The same rewrite as a partial bundle, with a consistency line from the
    // auditor's size: the proof cannot lead from the old root.
    let selection = selection_of(
        &rewritten_entries,
        Scope::Session("s2".into()),
        DetailLevel::Full,
    );
    let mut partial = w.signed_partial(&rewritten_entries, &selection);
    let mut tree = MemoryTree::new();
    rewritten_entries
        .iter()
        .for_each(|e| tree.push(e.leaf_hash()));
    partial.insert(
        2,
        consistency_line(
            early_size,
            &consistency_proof(&tree, early_size, n).unwrap(),
        ),
    );
    case(
        "insider-rewrite-partial-consistency",
        &partial,
        pinned,
        std::slice::from_ref(&early),
        Some(&at_line(Reason::InconsistentCheckpoint, 3)),
    );
    let mut no_line = partial.clone();
    no_line.remove(2);
    case(
        "partial-trusted-without-consistency",
        &no_line,
        pinned,
        std::slice::from_ref(&early),
        Some(&at_line(Reason::MissingProof, 3)),
    );
    let latest = w.checkpoint().note;
    let mut old_bundle = s2.clone();
    old_bundle[1] = checkpoint_line(&early);
    case(
        "bundle-older-than-trusted",
        &old_bundle,
        pinned,
        std::slice::from_ref(&latest),
        Some(&at_line(Reason::MissingProof, 2)),
    );
    // A trusted checkpoint of size 0 is compared only with a bundle of
    // size 0 (FORMAT 10.2): whatever root it claims, a longer log extends
    // the empty one.
    let empty_elsewhere =
        cairn_core::log::org_checkpoint("cairn.test", ORG, 0, Hash::sha256(b"not the empty tree"))
            .sign(&w.server)
            .unwrap();
    for (name, bundle) in [
        ("trusted-size-0-other-root-complete", &complete),
        ("trusted-size-0-other-root-partial", &s2),
    ] {
        case(
            name,
            bundle,
            pinned,
            std::slice::from_ref(&empty_elsewhere),
            None,
        );
    }

    tamper_notes::note_signature_bounds(&complete, pinned, &w.checkpoint().note);
    tamper_traces::erased_traces(&w, &complete, &entries, pinned);

    // --- An insider: records the rules refuse, however well signed.
    let mut twice = entries.clone();
    let seal = seq_of(&entries, |e| is_op(e, "seal"));
    let mut again = entries[seal].clone();
    again.seq = n;
    again.logged_at = entries[entries.len() - 1].logged_at;
    twice.push(again);
    case(
        "insider-sealed-twice",
        &w.signed_complete(&twice),
        pinned,
        &[],
        Some(&Expected {
            seq: Some(n),
            ..at_line(Reason::DuplicateRecord, 2 + n + 1)
        }),
    );
    // A session start whose stated genesis is not its header's.
    let start = seq_of(&entries, |e| is_op(e, "session-start"));
    let mut genesis_bundle = complete.clone();
    edit_line(&mut genesis_bundle, 2 + start, |v| {
        let g = v["view"]["genesis"].as_str().unwrap().to_owned();
        v["view"]["genesis"] = json!(format!(
            "{}{}",
            if g.starts_with('0') { "1" } else { "0" },
            &g[1..]
        ));
    });
    case(
        "genesis-does-not-recompute",
        &genesis_bundle,
        pinned,
        &[],
        Some(&Expected {
            seq: Some(start as u64),
            ..at_line(Reason::DigestMismatch, 2 + start as u64 + 1)
        }),
    );
    // A step signed by the agent's key after its revocation.
    let mut revoked = entries.clone();
    let reg = seq_of(&entries, |e| is_op(e, "key-registration"));
    let LogRecord::Op {
        record: OpRecord::KeyRegistration(k),
        ..
    } = &entries[reg].record
    else {
        panic!()
    };
    let revocation = OpRecord::KeyRevocation(cairn_core::log::KeyRevocation {
        org_id: ORG.into(),
        agent_id: "analyst".into(),
        key_id: k.key_id.clone(),
        reason: "compromised".into(),
        revoked_at: entries[reg].logged_at,
    });
    revoked.insert(
        reg + 1,
        LogEntry {
            seq: 0,
            logged_at: entries[reg].logged_at,
            record: LogRecord::Op {
                hash: revocation.hash(),
                record: revocation,
            },
        },
    );
    for (i, e) in revoked.iter_mut().enumerate() {
        e.seq = i as u64;
    }
    let signed_seq = seq_of(
        &revoked,
        |e| matches!(&e.record, LogRecord::Step(r) if r.signature.is_some()),
    ) as u64;
    case(
        "signed-after-revocation",
        &w.signed_complete(&revoked),
        pinned,
        &[],
        Some(&Expected {
            seq: Some(signed_seq),
            ..at_line(Reason::BadSignature, 2 + signed_seq + 1)
        }),
    );
    // A key registered for a second agent.
    let mut rebound = entries.clone();
    let mut second = entries[reg].clone();
    if let LogRecord::Op {
        record: OpRecord::KeyRegistration(k),
        hash,
    } = &mut second.record
    {
        k.agent_id = "mallory".into();
        *hash = OpRecord::KeyRegistration(k.clone()).hash();
    }
    second.seq = n;
    second.logged_at = entries[entries.len() - 1].logged_at;
    rebound.push(second);
    case(
        "key-registered-twice",
        &w.signed_complete(&rebound),
        pinned,
        &[],
        Some(&Expected {
            seq: Some(n),
            ..at_line(Reason::DuplicateRecord, 2 + n + 1)
        }),
    );
    // Time running backwards in a session, re-signed.
    let mut backwards = entries.clone();
    let s2_1 = seq_of(&entries, |e| is_step_of(e, "s2", 1));
    let s2_0_hash = match &entries[s2_1].record {
        LogRecord::Step(r) => r.prev_hash,
        _ => panic!(),
    };
    let t0 = match &entries[seq_of(&entries, |e| is_step_of(e, "s2", 0))].record {
        LogRecord::Step(r) => r.step.created_at,
        _ => panic!(),
    };
    recompute(&mut backwards[s2_1], s2_0_hash, |s| {
        s.created_at = cairn_core::Timestamp::from_micros(t0.as_micros() - 1).unwrap();
    });
    let h = match &backwards[s2_1].record {
        LogRecord::Step(r) => r.hash,
        _ => panic!(),
    };
    let s2_2 = seq_of(&entries, |e| is_step_of(e, "s2", 2));
    if let LogRecord::Step(r) = &mut backwards[s2_2].record {
        r.prev_hash = h;
        r.hash = chain_hash(&h, &r.digest, r.step.step_index, r.step.created_at);
    }
    case(
        "time-runs-backwards",
        &w.signed_complete(&backwards),
        pinned,
        &[],
        Some(&Expected {
            seq: Some(s2_1 as u64),
            ..at_line(Reason::BadTimestamp, 2 + s2_1 as u64 + 1)
        }),
    );
    // A step dated a year from when the server logged it.
    let mut drifted = entries.clone();
    let b1_0 = seq_of(&entries, |e| is_step_of(e, "b1", 0));
    let b1_genesis = match &entries[b1_0].record {
        LogRecord::Step(r) => r.prev_hash,
        _ => panic!(),
    };
    recompute(&mut drifted[b1_0], b1_genesis, |s| {
        s.created_at =
            cairn_core::Timestamp::from_micros(s.created_at.as_micros() - 365 * 86_400_000_000)
                .unwrap();
    });
    let h = match &drifted[b1_0].record {
        LogRecord::Step(r) => r.hash,
        _ => panic!(),
    };
    let b1_1 = seq_of(&entries, |e| is_step_of(e, "b1", 1));
    if let LogRecord::Step(r) = &mut drifted[b1_1].record {
        r.prev_hash = h;
        r.hash = chain_hash(&h, &r.digest, r.step.step_index, r.step.created_at);
    }
    case(
        "created-at-beyond-skew",
        &w.signed_complete(&drifted),
        pinned,
        &[],
        Some(&Expected {
            seq: Some(b1_0 as u64),
            ..at_line(Reason::BadTimestamp, 2 + b1_0 as u64 + 1)
        }),
    );
    // A selection that lies about a session's head, or lists one its scope
    // does not select.
    let mut lying = selection_of(&entries, Scope::Session("s2".into()), DetailLevel::Full);
    lying.sessions[0].head = Hash::sha256(b"elsewhere");
    case(
        "selection-claims-another-head",
        &w.signed_partial(&entries, &lying),
        pinned,
        &[],
        Some(&Expected {
            reason: Reason::SelectionMismatch,
            line: None,
            seq: None,
            session_id: Some("s2".into()),
            step_index: None,
        }),
    );
    let mut short_claim = selection_of(&entries, Scope::Session("s2".into()), DetailLevel::Full);
    short_claim.sessions[0].steps = 2;
    let lines = w.signed_partial(&entries, &short_claim);
    case(
        "selection-claims-fewer-steps",
        &lines,
        pinned,
        &[],
        Some(&Expected {
            reason: Reason::UnlistedEntry,
            line: None,
            seq: Some(s2_2 as u64),
            session_id: None,
            step_index: None,
        }),
    );
    // An erasure record naming a step that shows its payload.
    let mut shown = entries.clone();
    let personal = seq_of(
        &entries,
        |e| matches!(&e.record, LogRecord::Step(r) if r.erased),
    );
    let stored = w.store.step_by_trace(ORG, "signed-1").unwrap().unwrap();
    let _ = stored;
    // Put back the erased step's payload from nothing: impossible without
    // the salt, so instead point the erasure at the signed step.
    let erasure = seq_of(&entries, |e| is_op(e, "erasure"));
    if let LogRecord::Op {
        record: OpRecord::Erasure(e),
        hash,
    } = &mut shown[erasure].record
    {
        e.step_index = 1;
        e.trace_id = "signed-1".into();
        *hash = OpRecord::Erasure(e.clone()).hash();
    }
    case(
        "erasure-names-a-shown-step",
        &w.signed_complete(&shown),
        pinned,
        &[],
        Some(&Expected {
            seq: Some(erasure as u64),
            ..at_line(Reason::ErasureMismatch, 2 + erasure as u64 + 1)
        }),
    );
    let _ = personal;
    let _ = w.agent_key.verifying_key();
    let _ = &w.data;

    // A selection that omits a session of its scope altogether is consistent
    // on its own (a lie the operator signed): the complete log disproves it.
    let mut omitted = selection_of(&entries, Scope::Agent("analyst".into()), DetailLevel::Full);
    let s2_start = seq_of(
        &entries,
        |e| matches!(&e.record, LogRecord::Op { record: OpRecord::SessionStart(h), .. } if h.session_id == "s2"),
    ) as u64;
    omitted.sessions.retain(|c| c.session_id != "s2");
    omitted.records.retain(|(seq, _)| *seq != s2_start);
    let lie = w.signed_partial(&entries, &omitted);
    case(
        "selection-omits-a-session-consistently",
        &lie,
        pinned,
        &[],
        None,
    );
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("log.bundle");
    std::fs::write(&log_path, w.signed_complete(&entries).join("\n") + "\n").unwrap();
    // `cairn verify --json --bundle LINES --log <the complete log>`: its
    // exit code and verdict.
    let against_the_log = |name: &str, lines: &[String]| {
        let path = dir.path().join(name);
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        let run = common::cairn_in(
            dir.path(),
            &[
                "verify",
                "--json",
                "--bundle",
                path.to_str().unwrap(),
                "--log",
                log_path.to_str().unwrap(),
                "--key",
                &key,
            ],
            None,
        );
        let verdict: Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("{name}: {e}: {} {}", run.stdout, run.stderr));
        (run.code, verdict)
    };
    let (code, verdict) = against_the_log("lie.bundle", &lie);
    assert_eq!(code, 1, "{verdict}");
    assert_eq!(verdict["brokenReason"], "selection-mismatch", "{verdict}");
    // The honest selection passes the same check.
    let (code, verdict) = against_the_log("honest.bundle", &analyst);
    assert_eq!(code, 0, "{verdict}");
    // A selection of a scope that holds no session: consistent on its own,
    // but no export of it exists (the server refuses an empty one), so
    // the complete log disproves it (it had been the caller's mistake,
    // exit 2).
    let empty = cairn_core::selection::Selection {
        checkpoint_size: entries.len() as u64,
        scope: Scope::Agent("nobody".into()),
        level: DetailLevel::Full,
        sessions: Vec::new(),
        records: Vec::new(),
    };
    let (code, verdict) = against_the_log("empty.bundle", &w.signed_partial(&entries, &empty));
    assert_eq!(code, 1, "{verdict}");
    assert_eq!(verdict["brokenReason"], "selection-mismatch", "{verdict}");
    tamper_traces::selection_of_a_trace_erased_later(&w, &entries, &key);
    tamper_traces::import_of_stated_ids(&w, &entries);
}
