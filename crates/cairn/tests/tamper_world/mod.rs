//! The tamper suite's world (`tamper.rs`): a real store with every kind of
//! record, exported as real bundles, and an insider's tools: bundles
//! re-signed with the server key, steps recomputed after an edit, a whole
//! log re-chained, and the selection the published rule gives.

use cairn_core::Hash;
use cairn_core::bundle::{
    BundleHeader, checkpoint_line, decode_entry, encode_entry, end_line, selection_line,
};
use cairn_core::commit::{
    AgentSignature, Openings, agent_key_id, chain_hash, signed_step_message, step_digest,
};
use cairn_core::detail::DetailLevel;
use cairn_core::ed25519_dalek::{Signer as _, SigningKey};
use cairn_core::log::{LogEntry, LogRecord, OpRecord, org_checkpoint};
use cairn_core::merkle::{MemoryTree, SubtreeHashes as _, inclusion_proof};
use cairn_core::note::NoteSigner;
use cairn_core::record::Step;
use cairn_core::selection::{Scope, Selection, Selector};
use cairn_store::ops::{ExportOptions, ExportScope, export_at};
use cairn_store::{
    Ledger, LedgerStore, NewSession, NewStep, SequencerConfig, SqliteOptions, SqliteStore,
    WriteRequest, Written,
};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

pub const ORG: &str = "acme";

/// A store with every kind of record, and what the cases need of it.
pub struct World {
    _dir: tempfile::TempDir,
    pub data: PathBuf,
    pub store: Arc<dyn LedgerStore>,
    pub server: NoteSigner,
    pub agent_key: SigningKey,
}

fn step(session: &str, agent: &str, kind: &str, content: &str) -> NewStep {
    NewStep {
        org_id: ORG.into(),
        session_id: session.into(),
        agent_id: agent.into(),
        kind_label: kind.into(),
        content: Some(content.into()),
        caller: "tamper".into(),
        ..NewStep::default()
    }
}

fn write(ledger: &Ledger, request: WriteRequest) -> Written {
    ledger.write(request).unwrap()
}

/// Session s1 (analyst): a signed step, a flagged step reviewed, an audit
/// event, an erased step, sealed; s2 continues it, unsealed; b1 (bob).
pub fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let store: Arc<dyn LedgerStore> = Arc::new(
        SqliteStore::open(
            &data,
            SqliteOptions {
                server_name: "cairn.test".into(),
                embedding_sample_rate: 0.0,
                ..SqliteOptions::default()
            },
        )
        .unwrap(),
    );
    let ledger = Ledger::new(Arc::clone(&store), SequencerConfig::default());
    let agent_key = SigningKey::from_bytes(&[7; 32]);
    let key_id = agent_key_id(&agent_key.verifying_key());
    write(
        &ledger,
        WriteRequest::RegisterKey {
            org_id: ORG.into(),
            agent_id: "analyst".into(),
            public_key: agent_key.verifying_key(),
            by_admin: true,
        },
    );
    write(
        &ledger,
        WriteRequest::Step(Box::new(step("s1", "analyst", "Observation", "user asks"))),
    );
    // A step the agent signs itself (FORMAT.md 7.3).
    let created_at = cairn_store::now();
    let seed = [3u8; 32];
    let mut core = Step::new("signed-1", ORG, "analyst", "s1", 1, "Decision", created_at).unwrap();
    core.content = Some("approve".into());
    core.signer_key_id = Some(key_id.clone());
    let digest = step_digest(&core, &Openings::from_seed(&seed));
    let mut signed = step("s1", "analyst", "Decision", "approve");
    signed.trace_id = Some("signed-1".into());
    signed.created_at = Some(created_at);
    signed.step_index = Some(1);
    signed.seed = Some(seed);
    signed.signature = Some(AgentSignature {
        key_id,
        signature: agent_key.sign(&signed_step_message(&digest)).to_bytes(),
    });
    write(&ledger, WriteRequest::Step(Box::new(signed)));
    let mut flagged = step("s1", "analyst", "ToolCall", "rm -rf /tmp/cache");
    flagged.status = cairn_core::record::Status::Flagged;
    flagged.trace_id = Some("flagged-1".into());
    write(&ledger, WriteRequest::Step(Box::new(flagged)));
    write(
        &ledger,
        WriteRequest::Review {
            org_id: ORG.into(),
            trace_id: "flagged-1".into(),
            decision: cairn_core::log::ReviewDecision::Approve,
            reviewer: "auditor".into(),
            note: Some("fine".into()),
        },
    );
    // A checkpoint an auditor keeps, mid-way through the log.
    write(&ledger, WriteRequest::Checkpoint { org_id: ORG.into() });
    write(
        &ledger,
        WriteRequest::AuditEvent {
            org_id: ORG.into(),
            event_id: Some("event-1".into()),
            session_id: Some("s1".into()),
            action: "shell".into(),
            detail: Some(json!({"exit": 0})),
        },
    );
    let mut personal = step(
        "s1",
        "analyst",
        "Observation",
        "the user lives at 1 Main St",
    );
    personal.trace_id = Some("personal-1".into());
    write(&ledger, WriteRequest::Step(Box::new(personal)));
    write(
        &ledger,
        WriteRequest::Erase {
            org_id: ORG.into(),
            trace_id: "personal-1".into(),
            reason: "request".into(),
            actor: "dpo".into(),
        },
    );
    write(
        &ledger,
        WriteRequest::Step(Box::new(step("s1", "analyst", "Reflection", "done"))),
    );
    write(
        &ledger,
        WriteRequest::Seal {
            org_id: ORG.into(),
            session_id: "s1".into(),
            require_reflection: false,
        },
    );
    write(
        &ledger,
        WriteRequest::StartSession(NewSession {
            org_id: ORG.into(),
            session_id: "s2".into(),
            agent_id: "analyst".into(),
            caller: "tamper".into(),
            profile: cairn_core::record::Profile::Standard,
            predecessor: None,
            predecessor_session: Some("s1".into()),
            bound_agent: None,
            full_consent: true,
        }),
    );
    for content in ["next task", "thinking", "answer"] {
        write(
            &ledger,
            WriteRequest::Step(Box::new(step("s2", "analyst", "Reasoning", content))),
        );
    }
    // Two signed traces (seed 004) of agent `tracer`: trace-a's first
    // component erased, which withholds its record (FORMAT.md 8);
    // trace-b kept whole.
    let tracer = SigningKey::from_bytes(&[9; 32]);
    write(
        &ledger,
        WriteRequest::RegisterKey {
            org_id: ORG.into(),
            agent_id: "tracer".into(),
            public_key: tracer.verifying_key(),
            by_admin: true,
        },
    );
    for trace_id in ["trace-a", "trace-b"] {
        write(
            &ledger,
            WriteRequest::ImportTrace {
                org_id: ORG.into(),
                session_id: None,
                trace: signed_trace(&tracer, trace_id),
                caller: "tamper".into(),
            },
        );
    }
    write(
        &ledger,
        WriteRequest::Erase {
            org_id: ORG.into(),
            trace_id: "trace-a.0".into(),
            reason: "request".into(),
            actor: "dpo".into(),
        },
    );
    for content in ["bob looks", "bob answers"] {
        write(
            &ledger,
            WriteRequest::Step(Box::new(step("b1", "bob", "Observation", content))),
        );
    }
    ledger.close();
    let server = cairn_store::load_or_create_server_key(&data, "cairn.test")
        .unwrap()
        .signer;
    World {
        _dir: dir,
        data,
        store,
        server,
        agent_key,
    }
}

/// A seed-004 trace of agent `tracer`, signed by `key`, at level generic.
pub fn signed_trace(key: &SigningKey, trace_id: &str) -> serde_json::Value {
    use base64::Engine as _;
    let mut trace = json!({
        "trace_id": trace_id,
        "agent_id_hash": "tracer",
        "started_at": "2026-02-08T12:34:56.123Z",
        "trace_level": "generic",
        "components": [
            {"component_type": "observation", "event_type": "THOUGHT_START",
             "timestamp": "2026-02-08T12:34:56.123Z", "data": {"note": "the user lives at 2 Elm St"}},
            {"component_type": "action", "event_type": "ACTION_RESULT",
             "timestamp": "2026-02-08T12:34:57.000Z", "data": {"execution_success": true}},
        ],
        "signature": "A".repeat(86) + "==",
        "signature_key_id": agent_key_id(&key.verifying_key()),
    });
    let payload = cairn_core::trace::CompleteTrace::parse(&trace)
        .unwrap()
        .signed_payload();
    trace["signature"] =
        json!(base64::engine::general_purpose::STANDARD.encode(key.sign(&payload).to_bytes()));
    trace
}

impl World {
    pub fn checkpoint(&self) -> cairn_store::StoredCheckpoint {
        let mut written = self
            .store
            .append_batch(&[WriteRequest::Checkpoint { org_id: ORG.into() }])
            .unwrap();
        match written.pop() {
            Some(Ok(Written::Checkpoint(cp))) => cp,
            other => panic!("{other:?}"),
        }
    }

    pub fn export(&self, scope: ExportScope, level: Option<DetailLevel>) -> Vec<String> {
        let cp = self.checkpoint();
        let mut out = Vec::new();
        export_at(
            self.store.as_ref(),
            ORG,
            &scope,
            ExportOptions {
                level,
                since_size: None,
            },
            &cp,
            cairn_store::now(),
            &mut out,
            &mut |_| {},
        )
        .unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    pub fn entries(&self) -> Vec<LogEntry> {
        let lines = self.export(ExportScope::All, None);
        lines[2..lines.len() - 1]
            .iter()
            .map(|l| decode_entry(l).unwrap().0)
            .collect()
    }

    fn header(&self, complete: bool) -> BundleHeader {
        BundleHeader {
            server_name: "cairn.test".into(),
            org_id: ORG.into(),
            server_key: self.server.verifier().to_string(),
            log_keys: Vec::new(),
            complete_log: complete,
            exported_at: cairn_store::now(),
        }
    }

    /// A complete bundle of `entries`, signed by the server key (as an
    /// insider could).
    pub fn signed_complete(&self, entries: &[LogEntry]) -> Vec<String> {
        let mut tree = MemoryTree::new();
        entries.iter().for_each(|e| tree.push(e.leaf_hash()));
        let cp = org_checkpoint("cairn.test", ORG, tree.size(), tree.root_at(tree.size()))
            .sign(&self.server)
            .unwrap();
        let mut lines = vec![self.header(true).to_line(), checkpoint_line(&cp)];
        lines.extend(entries.iter().map(|e| encode_entry(e, None)));
        lines.push(end_line(entries.len() as u64));
        lines
    }

    /// A partial bundle of `entries` (the whole log) under `selection`,
    /// signed by the server key, with every listed entry.
    pub fn signed_partial(&self, entries: &[LogEntry], selection: &Selection) -> Vec<String> {
        let mut tree = MemoryTree::new();
        entries.iter().for_each(|e| tree.push(e.leaf_hash()));
        let size = selection.checkpoint_size;
        let root = tree.root_at(size);
        let cp = org_checkpoint("cairn.test", ORG, size, root)
            .sign(&self.server)
            .unwrap();
        let note = selection
            .sign(&self.server, &format!("cairn.test/{ORG}"), &root)
            .unwrap();
        let mut lines = vec![
            self.header(false).to_line(),
            checkpoint_line(&cp),
            selection_line(selection, &note),
        ];
        let sessions: Vec<&str> = selection
            .sessions
            .iter()
            .map(|c| c.session_id.as_str())
            .collect();
        let mut count = 0;
        for e in entries.iter().filter(|e| e.seq < size) {
            let keep = match &e.record {
                LogRecord::Step(r) => sessions.contains(&r.step.session_id.as_str()),
                LogRecord::Op { .. } | LogRecord::ErasedTrace { .. } => {
                    selection.records.iter().any(|(s, _)| *s == e.seq)
                }
            };
            if keep {
                let mut e = e.clone();
                if let LogRecord::Step(r) = &mut e.record {
                    r.redact(selection.level).unwrap();
                }
                let proof = inclusion_proof(&tree, e.seq, size).unwrap();
                lines.push(encode_entry(&e, Some(&proof)));
                count += 1;
            }
        }
        lines.push(end_line(count));
        lines
    }
}

/// The selection the published rule gives for `scope` over `entries`.
pub fn selection_of(entries: &[LogEntry], scope: Scope, level: DetailLevel) -> Selection {
    let mut s = Selector::new(scope, level, entries.len() as u64);
    entries.iter().for_each(|e| s.first_pass(e));
    entries.iter().for_each(|e| s.second_pass(e));
    s.finish().unwrap()
}

/// A step's entry rebuilt after `edit`, with its own digest and chain hash
/// recomputed (what an insider with the seeds could write).
pub fn recompute(entry: &mut LogEntry, head: Hash, edit: impl FnOnce(&mut Step)) {
    let LogRecord::Step(r) = &mut entry.record else {
        panic!("not a step")
    };
    edit(&mut r.step);
    r.prev_hash = head;
    r.digest = r.recompute_digest();
    r.hash = chain_hash(&head, &r.digest, r.step.step_index, r.step.created_at);
}

/// Re-chains a whole log after an edit, as an insider holding the server
/// key would: every step's prev_hash and hash follow its session again,
/// continued sessions name their predecessor's new final hash, and seals
/// are recomputed and re-signed. Digests (and so agent signatures) stay.
pub fn relink(entries: &mut [LogEntry], server: &NoteSigner) {
    use cairn_core::commit::{genesis_hash, session_leaf_data};
    use cairn_core::merkle::{Frontier, leaf_hash};
    use std::collections::HashMap;
    let mut heads: HashMap<String, (Hash, Frontier, u64)> = HashMap::new();
    let mut finals: HashMap<Hash, Hash> = HashMap::new();
    for e in entries.iter_mut() {
        match &mut e.record {
            LogRecord::Step(r) => {
                let (head, tree, count) = heads.get_mut(&r.step.session_id).unwrap();
                r.prev_hash = *head;
                r.hash = chain_hash(head, &r.digest, r.step.step_index, r.step.created_at);
                *head = r.hash;
                tree.push(leaf_hash(&session_leaf_data(r.step.step_index, &r.hash)));
                *count += 1;
            }
            LogRecord::Op { record, hash } => {
                match record {
                    OpRecord::SessionStart(h) => {
                        if let Some(p) = h.predecessor {
                            h.predecessor = Some(finals.get(&p).copied().unwrap_or(p));
                        }
                        heads.insert(h.session_id.clone(), (genesis_hash(h), Frontier::new(), 0));
                    }
                    OpRecord::Seal(seal) => {
                        let (head, tree, count) = &heads[&seal.session_id];
                        finals.insert(seal.final_hash, *head);
                        let fresh = cairn_core::log::SealRecord {
                            step_count: *count,
                            session_root: tree.root(),
                            final_hash: *head,
                            note: String::new(),
                            ..seal.clone()
                        }
                        .sign(server, &format!("cairn.test/{ORG}"))
                        .unwrap();
                        *seal = fresh;
                    }
                    _ => {}
                }
                *hash = record.hash();
            }
            // Its hash cannot be recomputed: it stays.
            LogRecord::ErasedTrace { .. } => {}
        }
    }
}

pub fn seq_of(entries: &[LogEntry], pick: impl Fn(&LogEntry) -> bool) -> usize {
    entries.iter().position(pick).unwrap()
}

pub fn is_step_of(e: &LogEntry, session: &str, index: u64) -> bool {
    matches!(&e.record, LogRecord::Step(r) if r.step.session_id == session && r.step.step_index == index)
}

pub fn is_op(e: &LogEntry, entry_type: &str) -> bool {
    matches!(&e.record, LogRecord::Op { record, .. } if record.entry_type() == entry_type)
}
