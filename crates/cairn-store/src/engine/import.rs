//! Importing a verified complete-log bundle as the log of a new org.

use super::*;

impl Engine<'_> {
    /// Writes a verified complete-log bundle's entries as the log of a new
    /// org (see `LedgerStore::import_log`); the caller checked the org does
    /// not exist and commits `tx`.
    pub fn import<T: WriteTx + ?Sized>(
        &self,
        tx: &mut T,
        org_id: &str,
        header: &cairn_core::bundle::BundleHeader,
        checkpoint_note: &str,
        entries: &mut dyn Iterator<Item = Result<LogEntry, String>>,
        withheld_ids: &std::collections::HashMap<u64, String>,
    ) -> Result<u64, ImportError> {
        if !header.complete_log {
            return Err(ImportError::Refused(
                "only a bundle of a whole org log (exported with --all) can be imported; a partial bundle can be verified with `cairn verify --bundle`".into(),
            ));
        }
        validate_id("org_id", org_id).map_err(|e| ImportError::Refused(e.to_string()))?;
        if org_id != header.org_id {
            return Err(ImportError::Refused(format!(
                "the bundle's log is signed for org {}, so it is imported under that id",
                header.org_id
            )));
        }
        if tx.org(org_id)?.is_some() {
            return Err(ImportError::Refused(format!(
                "org {org_id} already exists in this store"
            )));
        }
        let same_key = header.server_key == self.key.verifier.to_string()
            && header.server_name == self.key.signer.name();
        let mut org = OrgState {
            id: tx.create_org(org_id)?,
            foreign: !same_key,
            frontier: Frontier::new(),
            checkpoint_size: 0,
            checkpoint_at: None,
            last_logged: Timestamp::default(),
        };
        if !same_key {
            tx.insert_origin(org.id, &header.server_name, &header.server_key)?;
        }
        let mut sids: HashMap<String, i64> = HashMap::new();
        // Per session: (first seq, last seq, last index).
        let mut heads: HashMap<i64, (u64, u64, u64)> = HashMap::new();
        let mut kinds: std::collections::BTreeSet<(i64, cairn_core::kind::StepKind)> =
            std::collections::BTreeSet::new();
        let mut count = 0u64;
        // Withheld traces: (seq, logged_at, hash, leaf).
        let mut withheld = Vec::new();
        for (index, entry) in entries.enumerate() {
            let bad = |reason: String| ImportError::BadEntry {
                index: index as u64,
                reason,
            };
            let entry = entry.map_err(bad)?;
            if entry.seq != org.frontier.size() {
                return Err(bad(format!(
                    "seq {} where {} was expected",
                    entry.seq,
                    org.frontier.size()
                )));
            }
            if entry.logged_at < org.last_logged {
                return Err(bad("logged before the previous entry".into()));
            }
            let leaf = entry.leaf_hash();
            match &entry.record {
                LogRecord::Op { record, .. } => {
                    // The bundle verified, and its seq is the next one, so
                    // writing the record as the sequencer would, at the
                    // time it was logged, is exact.
                    let sid = match record {
                        OpRecord::SessionStart(h) => {
                            let sid = tx.insert_session(org.id, h, &genesis_hash(h), entry.seq)?;
                            sids.insert(h.session_id.clone(), sid);
                            Some(sid)
                        }
                        other => match other.session_id() {
                            None => None,
                            // Cairn writes no record of a session its log
                            // has not started; a store row could not name
                            // one (verification requires the link).
                            Some(s) => Some(*sids.get(s).ok_or_else(|| {
                                bad(format!(
                                    "a {} record names session {s}, which the log has not started",
                                    other.entry_type()
                                ))
                            })?),
                        },
                    };
                    write_op(tx, &mut org, record, entry.logged_at, sid)?;
                }
                // An erased signed trace: its hash in the leaf, no view,
                // no session (the view named it). Its row is written last,
                // below.
                LogRecord::ErasedTrace { hash } => {
                    withheld.push((entry.seq, entry.logged_at, *hash, leaf));
                    push_leaf(tx, &mut org, leaf)?;
                    org.last_logged = entry.logged_at;
                }
                LogRecord::Step(r) => {
                    let s = &r.step;
                    let sid = *sids
                        .get(&s.session_id)
                        .ok_or_else(|| bad(format!("step of unknown session {}", s.session_id)))?;
                    let mut salts = vec![0u8; 16 * cairn_core::commit::FIELD_COUNT];
                    for field in cairn_core::commit::FIELDS {
                        if let Opening::Revealed(salt) = r.openings.get(field) {
                            salts[16 * field.position()..16 * field.position() + 16]
                                .copy_from_slice(salt);
                        }
                    }
                    // The `erased` flag is outside the digest: a bundle line
                    // saying so of a step that hides nothing would leave a
                    // row no reading accepts.
                    let hides = r.openings.0.iter().any(|o| matches!(o, Opening::Hidden(_)));
                    if r.erased && !hides {
                        return Err(bad(format!(
                            "step {} of session {} says it was erased but hides no field",
                            s.step_index, s.session_id
                        )));
                    }
                    // Nor is the flag believed the other way: in a complete
                    // bundle at full level only an erasure hides a field
                    // (the verifier held each hidden field to its erasure
                    // record), so a step that hides one is stored erased
                    // whatever its line says (a courier had flipped the
                    // flag to false, and the mirror showed an erased step
                    // as not erased).
                    let erased = hides;
                    let prev_seq = heads.get(&sid).map(|h| h.1);
                    let head = heads
                        .entry(sid)
                        .or_insert((entry.seq, entry.seq, s.step_index));
                    head.1 = entry.seq;
                    head.2 = s.step_index;
                    kinds.insert((sid, s.kind));
                    tx.insert_step(&StepRow {
                        org: org.id,
                        seq: entry.seq,
                        logged_at: entry.logged_at,
                        sid,
                        step: s,
                        step_index: s.step_index,
                        created_at: s.created_at,
                        hash: &r.hash,
                        leaf: &leaf,
                        digest: &r.digest,
                        prev_hash: &r.prev_hash,
                        seed: None,
                        salts: Some(salts),
                        signature: r.signature.as_ref().map(|sig| &sig.signature),
                        // Set again once this store's embedder made one.
                        has_embedding: false,
                        erased,
                        hidden: hidden_json(&r.openings),
                        prev_seq,
                    })?;
                    // The index and vectors are derived: recompute them.
                    if !erased && let Some(doc) = crate::fulltext::document(s) {
                        tx.insert_search_doc(org.id, entry.seq, &doc, None)?;
                    }
                    // Queued if the source embedded it or this store's rule
                    // selects it (a step still queued at export time too).
                    if !erased
                        && crate::fulltext::document(s).is_some()
                        && (r.has_embedding
                            || crate::embed::should_embed(
                                s.kind,
                                &s.trace_id,
                                self.embedding_sample_rate,
                            ))
                    {
                        tx.queue_embedding(org.id, entry.seq)?;
                    }
                    push_leaf(tx, &mut org, leaf)?;
                    org.last_logged = entry.logged_at;
                }
            }
            count += 1;
        }
        // A withheld trace keeps its id taken, as in the log exported: the
        // id its trace-erasure record states (informative: no verifier
        // can compare it), so it is taken only if nothing else of the log
        // holds it by now, and at most once.
        for (seq, logged_at, hash, leaf) in withheld {
            let stated = withheld_ids.get(&seq).map(String::as_str);
            let free = match stated {
                Some(id) => !tx.trace_id_taken(org.id, id)?,
                None => false,
            };
            tx.insert_op(&OpRow {
                org: org.id,
                seq,
                logged_at,
                op: None,
                withheld_id: stated.filter(|_| free),
                hash: &hash,
                leaf: &leaf,
                sid: None,
                step_index: None,
                agent_id: None,
            })?;
        }
        let text = cairn_core::note::Note::parse(checkpoint_note)
            .map_err(|e| ImportError::Refused(format!("checkpoint: {e}")))?
            .text;
        let cp = cairn_core::checkpoint::Checkpoint::parse(&text)
            .map_err(|e| ImportError::Refused(format!("checkpoint: {e}")))?;
        if cp.size != org.frontier.size() || cp.root != org.frontier.root() {
            return Err(ImportError::Refused(
                "the entries do not match the bundle's checkpoint".into(),
            ));
        }
        tx.insert_checkpoint(
            org.id,
            &StoredCheckpoint {
                org_id: org_id.to_owned(),
                size: cp.size,
                root: cp.root,
                note: checkpoint_note.to_owned(),
                created_at: now(),
            },
        )?;
        tx.put_session_kinds(&kinds.into_iter().collect::<Vec<_>>())?;
        for (sid, (first, last, index)) in heads {
            tx.put_session_head(sid, first, last, index)?;
        }
        Ok(count)
    }
}
