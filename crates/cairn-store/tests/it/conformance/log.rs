//! The log itself through every backend: sequencing and reading, gap-free
//! chains under concurrent writers, refusals that write nothing, proofs,
//! checkpoints and hash tiles, log keys, reopening, listing and lookup.

use super::*;

pub(super) fn appends_are_sequenced_and_readable(backend: &dyn Backend) {
    let store = backend.open("sequenced");
    let ledger = ledger(Arc::clone(&store));
    let first = append(
        &ledger,
        step("s1", "Observation", "User asked for Q4 revenue"),
    )
    .unwrap();
    let Written::Step {
        seq,
        step_index,
        session_created,
        ..
    } = first
    else {
        panic!()
    };
    // The implicit session start is recorded first.
    assert_eq!((seq, step_index, session_created), (1, 0, true));
    let second = append(&ledger, step("s1", "ToolCall", "Querying orders")).unwrap();
    let Written::Step {
        seq,
        step_index,
        session_created,
        hash,
        ..
    } = second
    else {
        panic!()
    };
    assert_eq!((seq, step_index, session_created), (2, 1, false));

    let mut entries = Vec::new();
    store
        .read_log(ORG, 0, 10, &mut |e| {
            entries.push(e.entry.unwrap());
            true
        })
        .unwrap();
    assert_eq!(entries.len(), 3);
    assert!(
        matches!(&entries[0].record, LogRecord::Op { record: OpRecord::SessionStart(h), .. } if h.session_id == "s1" && h.caller == "test")
    );
    // A session a step opens never starts after that step.
    let (
        LogRecord::Op {
            record: OpRecord::SessionStart(header),
            ..
        },
        LogRecord::Step(first_step),
    ) = (&entries[0].record, &entries[1].record)
    else {
        panic!("a session start, then its first step")
    };
    assert!(
        header.started_at <= first_step.step.created_at,
        "started {:?}, first step {:?}",
        header.started_at,
        first_step.step.created_at
    );
    // Entries by seq: the ones the log holds, in order, as read_log
    // reads them; seqs past the log (or past any log) are left out.
    let mut picked = Vec::new();
    store
        .read_entries(ORG, &[0, 2, 7, 1 << 40, u64::MAX], &mut |e| {
            picked.push((e.seq, e.leaf, e.entry.unwrap()));
            true
        })
        .unwrap();
    let mut ranged = Vec::new();
    for seq in [0, 2] {
        store
            .read_log(ORG, seq, seq + 1, &mut |e| {
                ranged.push((e.seq, e.leaf, e.entry.unwrap()));
                true
            })
            .unwrap();
    }
    assert_eq!(picked.len(), 2);
    assert_eq!(format!("{picked:?}"), format!("{ranged:?}"));
    let mut stopped = 0;
    store
        .read_entries(ORG, &[0, 1, 2], &mut |_| {
            stopped += 1;
            false
        })
        .unwrap();
    assert_eq!(stopped, 1, "visit returning false stops the read");
    store
        .read_entries("other-org", &[0, 1], &mut |_| panic!("another org's log"))
        .unwrap();
    let mut steps = Vec::new();
    store
        .read_session(ORG, "s1", &mut |s| {
            steps.push(s);
            true
        })
        .unwrap();
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[1].record.hash, hash);
    assert_eq!(steps[1].record.prev_hash, steps[0].record.hash);
    assert_eq!(steps[0].record.step.kind_label, "Observation");
    assert_eq!(
        steps[1].record.step.content.as_deref(),
        Some("Querying orders")
    );
    // The same steps fetched a few at a time, by the positions of the
    // session's walk; nothing of another session or org.
    let seqs = store.session_seqs(ORG, "s1").unwrap().unwrap();
    assert_eq!(seqs, steps.iter().map(|s| s.seq).collect::<Vec<_>>());
    let fetched = store.steps_at(ORG, "s1", &seqs[1..]).unwrap();
    assert_eq!(format!("{fetched:?}"), format!("{:?}", &steps[1..]));
    // Visited one at a time: a visitor that stops is given no more.
    let mut visited = Vec::new();
    store
        .visit_steps_at(ORG, "s1", &seqs, &mut |s| {
            visited.push(s.seq);
            false
        })
        .unwrap();
    assert_eq!(visited, seqs[..1]);
    assert_eq!(store.session_seqs(ORG, "nothing").unwrap(), None);
    assert_eq!(store.session_seqs("other-org", "s1").unwrap(), None);
    let other: Vec<u64> = (0..store.log_size(ORG).unwrap())
        .filter(|seq| !seqs.contains(seq))
        .collect();
    assert!(store.steps_at(ORG, "s1", &other).unwrap().is_empty());
    assert!(store.steps_at("other-org", "s1", &seqs).unwrap().is_empty());
    let info = store.session(ORG, "s1").unwrap().unwrap();
    assert_eq!((info.step_count, info.head, info.seal), (2, hash, None));
    assert_eq!(
        verify_session(store.as_ref(), ORG, "s1")
            .unwrap()
            .map(|v| v.verified),
        Some(true)
    );
    assert!(store.session(ORG, "nope").unwrap().is_none());
    assert!(store.session("other-org", "s1").unwrap().is_none());
    assert_verifies(store.as_ref());
}

pub(super) fn concurrent_writers_get_gap_free_chains(backend: &dyn Backend) {
    let store = backend.open("concurrent");
    let ledger = Arc::new(ledger(Arc::clone(&store)));
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let ledger = Arc::clone(&ledger);
            std::thread::spawn(move || {
                for i in 0..25 {
                    let mut s = step(
                        &format!("s{}", w % 4),
                        "Reasoning",
                        &format!("writer {w} step {i}"),
                    );
                    s.agent_id = format!("agent-{}", w % 4);
                    append(&ledger, s).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(store.log_size(ORG).unwrap(), 16 * 25 + 4);
    for s in 0..4 {
        let mut indexes = Vec::new();
        store
            .read_session(ORG, &format!("s{s}"), &mut |st| {
                indexes.push(st.record.step.step_index);
                true
            })
            .unwrap();
        assert_eq!(indexes, (0..100).collect::<Vec<u64>>());
    }
    assert_verifies(store.as_ref());
}

pub(super) fn refusals_write_nothing(backend: &dyn Backend) {
    let store = backend.open("refusals");
    let ledger = ledger(Arc::clone(&store));
    append(&ledger, step("s1", "plan", "first")).unwrap();
    let size = store.log_size(ORG).unwrap();

    assert!(matches!(
        refused(append(&ledger, step("s2", "Informational", "x"))),
        Refusal::Invalid(RecordError::UnknownKind { .. })
    ));
    let mut s = step("s1", "plan", "x");
    s.confidence = Some(1.5);
    assert!(matches!(
        refused(append(&ledger, s)),
        Refusal::Invalid(RecordError::ConfidenceOutOfRange { .. })
    ));
    let s = step("s1", "plan", &"x".repeat(65_537));
    assert!(matches!(
        refused(append(&ledger, s)),
        Refusal::Invalid(RecordError::ContentTooLong { .. })
    ));
    let s = step("bad session id", "plan", "x");
    assert!(matches!(
        refused(append(&ledger, s)),
        Refusal::Invalid(RecordError::MalformedId { .. })
    ));
    let mut s = step("s1", "plan", "x");
    s.agent_id = "someone-else".into();
    assert!(matches!(
        refused(append(&ledger, s)),
        Refusal::AgentMismatch { .. }
    ));
    let mut s = step("s1", "plan", "x");
    s.step_index = Some(5);
    assert_eq!(
        refused(append(&ledger, s)),
        Refusal::IndexConflict {
            expected: 1,
            given: 5
        }
    );
    let mut s = step("s1", "plan", "x");
    let Written::Step { trace_id, .. } = append(&ledger, step("s1", "plan", "second")).unwrap()
    else {
        panic!()
    };
    s.trace_id = Some(trace_id.clone());
    assert_eq!(
        refused(append(&ledger, s)),
        Refusal::DuplicateTraceId {
            trace_id: trace_id.clone()
        }
    );
    // A duplicate trace id in a step that would open a new session leaves
    // no session behind.
    let mut s = step("s-new", "plan", "x");
    s.trace_id = Some(trace_id);
    assert!(matches!(
        refused(append(&ledger, s)),
        Refusal::DuplicateTraceId { .. }
    ));
    assert!(store.session(ORG, "s-new").unwrap().is_none());
    // So does a wrong expected index, or a signature by an unknown key.
    let mut s = step("s-new", "plan", "x");
    s.step_index = Some(3);
    assert!(matches!(
        refused(append(&ledger, s)),
        Refusal::IndexConflict { .. }
    ));
    let mut s = step("s-new", "plan", "x");
    s.trace_id = Some("0198c0de-0000-7000-8000-000000000001".into());
    s.created_at = Some(cairn_store::now());
    s.step_index = Some(0);
    s.seed = Some([7; 32]);
    s.signature = Some(AgentSignature {
        key_id: "agent-000000000000".into(),
        signature: [0; 64],
    });
    assert!(matches!(
        refused(append(&ledger, s)),
        Refusal::BadSignature(_)
    ));
    assert!(store.session(ORG, "s-new").unwrap().is_none());

    let strict = NewSession {
        org_id: ORG.into(),
        session_id: "trail".into(),
        agent_id: "analyst".into(),
        caller: "test".into(),
        profile: Profile::Strict,
        predecessor: None,
        predecessor_session: None,
        bound_agent: None,
        full_consent: false,
    };
    assert!(matches!(
        ledger
            .write(WriteRequest::StartSession(strict.clone()))
            .unwrap(),
        Written::Session { .. }
    ));
    assert_eq!(
        refused(ledger.write(WriteRequest::StartSession(strict))),
        Refusal::SessionExists {
            session_id: "trail".into()
        }
    );
    assert!(matches!(
        refused(append(&ledger, step("trail", "ToolCall", "x"))),
        Refusal::Invalid(RecordError::NotInStrictProfile { .. })
    ));
    append(&ledger, step("trail", "analysis", "allowed")).unwrap();
    // Exactly the successful writes reached the log: second step, trail
    // start, trail step.
    assert_eq!(store.log_size(ORG).unwrap(), size + 3);
    assert_verifies(store.as_ref());
}

pub(super) fn proofs_and_checkpoints_verify(backend: &dyn Backend) {
    let store = backend.open("proofs");
    let ledger = ledger(Arc::clone(&store));
    let mut checkpoints = Vec::new();
    for i in 0..70 {
        append(
            &ledger,
            step(&format!("s{}", i % 3), "Reasoning", &format!("r{i}")),
        )
        .unwrap();
        if i % 23 == 0 {
            checkpoints.push(checkpoint(&ledger));
        }
    }
    checkpoints.push(checkpoint(&ledger));
    let size = store.log_size(ORG).unwrap();
    let last = checkpoints.last().unwrap();
    assert_eq!(last.size, size);
    assert_eq!(store.latest_checkpoint(ORG).unwrap().as_ref(), Some(last));
    // Every checkpoint oldest first; the latest ones newest first, read
    // without the rest.
    let all = store.checkpoints(ORG).unwrap();
    // A batch may also sign one when the last is older than the store's
    // interval (a slow machine takes longer than that between the explicit
    // ones), so the stored sizes hold every explicit one, each size once.
    let sizes: Vec<u64> = all.iter().map(|c| c.size).collect();
    assert!(
        sizes.windows(2).all(|w| w[0] < w[1]),
        "one stored checkpoint a size, oldest first: {sizes:?}"
    );
    for explicit in &checkpoints {
        assert!(
            sizes.contains(&explicit.size),
            "{} in {sizes:?}",
            explicit.size
        );
    }
    assert!(
        checkpoints.windows(2).any(|w| w[0].size == w[1].size),
        "the test asks twice at one size"
    );
    let latest = store.latest_checkpoints(ORG, 2).unwrap();
    let expected: Vec<_> = all.iter().rev().take(2).cloned().collect();
    assert_eq!(latest, expected);
    assert_eq!(store.latest_checkpoints(ORG, 100).unwrap().len(), all.len());
    assert!(store.latest_checkpoints("nobody", 5).unwrap().is_empty());
    // Pages from a size on, smallest first, as verification reads them.
    let mut paged = Vec::new();
    let mut from = 0;
    loop {
        let page = store.checkpoints_from(ORG, from, 2).unwrap();
        assert!(page.len() <= 2);
        assert!(page.iter().all(|c| c.size >= from), "{from}");
        let Some(last) = page.last() else { break };
        from = last.size + 1;
        paged.extend(page);
    }
    assert_eq!(paged, all);
    assert_eq!(
        store.checkpoints_from(ORG, all[1].size, 100).unwrap(),
        all[1..].to_vec()
    );
    assert!(store.checkpoints_from(ORG, size + 1, 5).unwrap().is_empty());
    assert!(store.checkpoints_from(ORG, u64::MAX, 5).unwrap().is_empty());
    assert!(store.checkpoints_from("nobody", 0, 5).unwrap().is_empty());
    let origin = format!("{}/{ORG}", store.server_name());
    for cp in &checkpoints {
        let verified = cairn_core::checkpoint::verify_checkpoint(
            &cp.note,
            &origin,
            std::slice::from_ref(store.server_key()),
        )
        .unwrap();
        assert_eq!(verified.checkpoint().root, cp.root);
        assert_eq!(store.root_at(ORG, cp.size).unwrap(), cp.root);
    }
    let mut leaves = Vec::new();
    store
        .read_log(ORG, 0, size, &mut |e| {
            assert_eq!(e.entry.unwrap().leaf_hash(), e.leaf);
            leaves.push(e.leaf);
            true
        })
        .unwrap();
    for seq in 0..size {
        let proof = store.inclusion_proof(ORG, seq, size).unwrap();
        assert_eq!(
            verify_inclusion(&leaves[seq as usize], seq, size, &proof, &last.root),
            Ok(())
        );
    }
    for pair in checkpoints.windows(2) {
        let proof = store
            .consistency_proof(ORG, pair[0].size, pair[1].size)
            .unwrap();
        assert_eq!(
            verify_consistency(
                pair[0].size,
                pair[1].size,
                &pair[0].root,
                &pair[1].root,
                &proof
            ),
            Ok(())
        );
    }
    assert!(store.inclusion_proof(ORG, size, size).is_err());
    assert_verifies(store.as_ref());
}

/// C2SP tlog-tiles hash tiles read from the store are the tree's, at every
/// level, full and partial, and a tile the log does not hold yet is
/// `NotFound`.
pub(super) fn hash_tiles_are_the_trees(backend: &dyn Backend) {
    use cairn_core::tiles::{Tile, TileKind, tile_hashes, tiles_of_size};
    let store = backend.open("tiles");
    let ledger = ledger(Arc::clone(&store));
    for i in 0..300 {
        append(&ledger, step("s", "Reasoning", &format!("r{i}"))).unwrap();
    }
    let size = store.log_size(ORG).unwrap();
    let mut tree = cairn_core::merkle::MemoryTree::new();
    store
        .read_log(ORG, 0, size, &mut |e| {
            tree.push(e.leaf);
            true
        })
        .unwrap();
    let tiles = tiles_of_size(size);
    assert!(tiles.iter().any(|t| t.is_full()) && tiles.iter().any(|t| t.level() == 1));
    for tile in &tiles {
        assert_eq!(
            store.hash_tile(ORG, tile).unwrap(),
            tile_hashes(&tree, tile).unwrap(),
            "{}",
            tile.path()
        );
    }
    let beyond = Tile {
        kind: TileKind::Hashes(0),
        index: 1,
        width: size - 256 + 1,
    };
    assert!(matches!(
        store.hash_tile(ORG, &beyond),
        Err(StoreError::NotFound(_))
    ));
}

/// A `log-key` record is written and signed by the current key, the
/// store's metadata lists the added key, and the log still verifies (the
/// record checked by the rules of FORMAT.md 7.10); refusals for a key of
/// another name and for the current key vouching for itself.
pub(super) fn log_keys_are_added_and_retired(backend: &dyn Backend) {
    use cairn_core::log::LogKeyAction;
    use cairn_core::note::NoteSigner;
    let store = backend.open("log-keys");
    let ledger = ledger(Arc::clone(&store));
    append(&ledger, step("s", "Reasoning", "before")).unwrap();
    let new_key = NoteSigner::from_seed(store.server_name(), &[9; 32]).unwrap();
    let stranger = NoteSigner::from_seed("elsewhere.example", &[9; 32]).unwrap();
    for (key, why) in [
        (stranger.verifier(), "another name"),
        (store.server_key().clone(), "the current key"),
    ] {
        let refused = ledger.write(WriteRequest::LogKey {
            org_id: ORG.into(),
            action: LogKeyAction::Add,
            key,
        });
        assert!(
            matches!(
                refused,
                Err(AppendError::Refused(Refusal::InvalidRequest(_)))
            ),
            "{why}: {refused:?}"
        );
    }
    let Written::LogKey { seq } = ledger
        .write(WriteRequest::LogKey {
            org_id: ORG.into(),
            action: LogKeyAction::Add,
            key: new_key.verifier(),
        })
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(seq, 2);
    store
        .record_log_key(LogKeyAction::Add, &new_key.verifier())
        .unwrap();
    let keys = store.log_keys(ORG).unwrap();
    assert!(keys.contains(&new_key.verifier()) && keys.contains(store.server_key()));
    let records = store.op_records(ORG, "log-key", 0, 10).unwrap();
    assert_eq!(records.len(), 1);
    checkpoint(&ledger);
    assert_verifies(store.as_ref());
}

pub(super) fn state_survives_reopen(backend: &dyn Backend) {
    let (root, head) = {
        let store = backend.open("reopen");
        let ledger = ledger(Arc::clone(&store));
        for i in 0..37 {
            append(&ledger, step("s1", "Reasoning", &format!("r{i}"))).unwrap();
        }
        append(&ledger, step("s2", "plan", "p")).unwrap();
        ledger
            .write(WriteRequest::Seal {
                org_id: ORG.into(),
                session_id: "s2".into(),
                require_reflection: false,
            })
            .unwrap();
        let cp = checkpoint(&ledger);
        ledger.close();
        (cp.root, store.session(ORG, "s1").unwrap().unwrap().head)
    };
    let store = backend.open("reopen");
    assert_eq!(
        store.root_at(ORG, store.log_size(ORG).unwrap()).unwrap(),
        root
    );
    let ledger = ledger(Arc::clone(&store));
    let Written::Step {
        step_index, seq, ..
    } = append(&ledger, step("s1", "Reasoning", "after restart")).unwrap()
    else {
        panic!()
    };
    assert_eq!((step_index, seq), (37, 41));
    let mut last = None;
    store
        .read_session(ORG, "s1", &mut |s| {
            last = Some(s);
            true
        })
        .unwrap();
    assert_eq!(last.unwrap().record.prev_hash, head);
    assert_eq!(
        refused(append(&ledger, step("s2", "plan", "late"))),
        Refusal::Sealed {
            session_id: "s2".into()
        }
    );
    let cp = checkpoint(&ledger);
    assert_eq!(cp.size, 42);
    assert_verifies(store.as_ref());
}

pub(super) fn listing_and_lookup(backend: &dyn Backend) {
    let store = backend.open("listing");
    let ledger = ledger(Arc::clone(&store));
    for (session, agent, steps) in [("a1", "alpha", 3), ("b1", "beta", 1), ("a2", "alpha", 2)] {
        for i in 0..steps {
            let mut s = step(session, "Observation", &format!("{session}-{i}"));
            s.agent_id = agent.into();
            append(&ledger, s).unwrap();
        }
    }
    let alpha = store
        .list_sessions(ORG, &SessionFilter::agent(Some("alpha")), 10)
        .unwrap();
    assert_eq!(
        alpha
            .iter()
            .map(|s| (s.session_id.as_str(), s.step_count))
            .collect::<Vec<_>>(),
        vec![("a2", 2), ("a1", 3)]
    );
    assert!(
        alpha
            .iter()
            .all(|s| s.first_step_at <= s.last_step_at && !s.sealed)
    );
    assert_eq!(
        store
            .list_sessions(ORG, &SessionFilter::all(), 2)
            .unwrap()
            .len(),
        2
    );
    assert!(
        store
            .list_sessions("nobody", &SessionFilter::all(), 10)
            .unwrap()
            .is_empty()
    );
    let mut first = None;
    store
        .read_session(ORG, "b1", &mut |s| {
            first = Some(s);
            false
        })
        .unwrap();
    let first = first.unwrap();
    let found = store
        .step_by_trace(ORG, &first.record.step.trace_id)
        .unwrap()
        .unwrap();
    assert_eq!(found, first);
    assert!(
        store
            .step_by_trace("other-org", &first.record.step.trace_id)
            .unwrap()
            .is_none()
    );
    assert_eq!(store.orgs().unwrap(), vec![ORG.to_owned()]);
}
