//! The org log's other records: reviews, audit events, imported traces,
//! seals, erasures and retention, agent keys.

use super::*;

impl<T: WriteTx + ?Sized> BatchRun<'_, '_, '_, T> {
    /// Records a reviewer's decision on a flagged step.
    pub(super) fn review(
        &mut self,
        org_name: &str,
        trace_id: &str,
        decision: cairn_core::log::ReviewDecision,
        reviewer: &str,
        note: Option<&str>,
    ) -> Outcome<Written> {
        if let Some(refusal) = review_refusal(reviewer, note, &self.engine.limits) {
            return Ok(Err(refusal));
        }
        let unknown = || {
            Ok(Err(Refusal::UnknownStep {
                trace_id: trace_id.to_owned(),
            }))
        };
        let Some(mut org) = self.org(org_name)? else {
            return unknown();
        };
        let Some(step) = self.tx.step_by_trace(org.id, trace_id)? else {
            return unknown();
        };
        if step.record.step.status != cairn_core::record::Status::Flagged {
            return Ok(Err(Refusal::NotFlagged {
                trace_id: trace_id.to_owned(),
            }));
        }
        let review = cairn_core::log::ReviewRecord {
            org_id: org_name.to_owned(),
            trace_id: trace_id.to_owned(),
            session_id: step.record.step.session_id.clone(),
            step_index: step.record.step.step_index,
            decision,
            reviewer: reviewer.to_owned(),
            note: note.map(str::to_owned),
            reviewed_at: self.now,
        };
        let link = self.session_sid(org.id, &review.session_id)?;
        let seq = write_op(
            self.tx,
            &mut org,
            &OpRecord::Review(review.clone()),
            self.now,
            link,
        )?;
        self.overlay.orgs.insert(org_name.to_owned(), org);
        Ok(Ok(Written::Reviewed { seq, review }))
    }

    /// Imports a seed-004 trace: checked whole before anything is written,
    /// then a session, the `signed-trace` record and one step per
    /// component, in this batch.
    pub(super) fn import_trace(
        &mut self,
        org_name: &str,
        session_id: Option<&str>,
        value: &serde_json::Value,
        caller: &str,
    ) -> Outcome<Written> {
        let invalid = |m: String| Ok(Err(Refusal::InvalidRequest(m)));
        let size = cairn_core::jcs::canonical_len(value);
        let most = self.engine.limits.max_content_bytes.saturating_mul(16);
        if size > most {
            return invalid(format!("the trace is {size} bytes; at most {most}"));
        }
        // The trace is kept whole in its record, which a verifier reads by
        // FORMAT.md 2.2's rules: an integer beyond 2^53 − 1 or a member
        // name serde_json reserves anywhere in it (not only in the
        // components' data, which become steps) would make the record
        // unreadable, and the org's verification fail for good.
        if let Err(e) = cairn_core::record::validate_json("trace", value, usize::MAX) {
            return Ok(Err(e.into()));
        }
        let trace = match cairn_core::trace::CompleteTrace::parse(value) {
            Ok(trace) => trace,
            Err(e) => return invalid(e.to_string()),
        };
        // Each component becomes a step: the bound of any write of steps.
        if trace.components.len() > crate::ops::MAX_STEPS_PER_WRITE {
            return invalid(format!(
                "a trace holds at most {} components (each becomes a step); this one has {}",
                crate::ops::MAX_STEPS_PER_WRITE,
                trace.components.len()
            ));
        }
        // Its id names it in a URL path (/v1/signed-traces/{trace_id}).
        if let Err(e) = cairn_core::record::refuse_dot_segment("trace_id", &trace.trace_id)
            .and_then(|()| cairn_core::record::refuse_api_key_id("trace_id", &trace.trace_id))
        {
            return Ok(Err(e.into()));
        }
        // Each component becomes a step whose trace id is the trace's,
        // a dot and its index: said of the trace's id rather than of a
        // component's id the caller never wrote.
        let last_index = trace.components.len().saturating_sub(1).to_string();
        let room = cairn_core::record::MAX_ID_LEN.saturating_sub(1 + last_index.len());
        if trace.trace_id.chars().count() > room {
            return Ok(Err(Refusal::InvalidMember {
                field: "trace_id",
                message: format!(
                    "a trace of {} components has an id of at most {room} characters (each component is recorded as a step whose trace id is the trace's, a dot and its index, up to {last_index}, and ids are at most {} characters); this one has {}",
                    trace.components.len(),
                    cairn_core::record::MAX_ID_LEN,
                    trace.trace_id.chars().count()
                ),
            }));
        }
        let session_id = session_id.unwrap_or(&trace.trace_id).to_owned();
        let org_id = self.org(org_name)?.map(|org| org.id);
        let key =
            match self.registered_key(org_id, &trace.signature_key_id, &trace.agent_id_hash)? {
                Ok(key) => key,
                Err(refusal) => return Ok(Err(refusal)),
            };
        if !trace.verify(&key.key) {
            return Ok(Err(Refusal::BadSignature(
                "the trace's signature does not verify over its components and trace level".into(),
            )));
        }
        if let Some(org) = org_id {
            if self.session(org, &session_id)?.is_some() {
                return Ok(Err(Refusal::SessionExists { session_id }));
            }
            if self.tx.record_type(org, &trace.trace_id)?.is_some() {
                return Ok(Err(Refusal::DuplicateId {
                    id: trace.trace_id.clone(),
                }));
            }
        }
        // Every component is checked as a step before anything is written.
        let mut prepared = Vec::with_capacity(trace.components.len());
        for (i, component) in trace.components.iter().enumerate() {
            let data = &component.data;
            let number = |key: &str| data.get(key).and_then(serde_json::Value::as_u64);
            let step = crate::NewStep {
                org_id: org_name.to_owned(),
                session_id: session_id.clone(),
                agent_id: trace.agent_id_hash.clone(),
                kind_label: component.event_type.clone(),
                output: Some(data.clone()),
                // The component's own time is the agent's claim: kept here
                // (and signed in the trace record); the step is dated by
                // the server like any other.
                metadata: Some(serde_json::json!({
                    "component_type": component.component_type,
                    "event_type": component.event_type,
                    "timestamp": component.timestamp.to_string(),
                    "trace_id": trace.trace_id,
                    "trace_level": trace.level_name,
                })),
                confidence: data
                    .get("selection_confidence")
                    .and_then(serde_json::Value::as_f64),
                duration_ms: number("execution_time_ms"),
                // A sum beyond 2^53 − 1 is left out, as OTLP leaves it.
                token_count: number("tokens_total").or_else(|| {
                    number("tokens_input")?
                        .checked_add(number("tokens_output")?)
                        .filter(|t| *t <= cairn_core::record::MAX_SAFE_INTEGER)
                }),
                turn_id: trace.thought_id.clone(),
                // Numbered within the trace's thought, when it names one.
                turn_step: trace.thought_id.as_ref().map(|_| i as u64),
                task_id: trace.task_id.clone(),
                trace_id: Some(format!("{}.{i}", trace.trace_id)),
                step_index: Some(i as u64),
                caller: caller.to_owned(),
                ..crate::NewStep::default()
            };
            match prepare_step(step, &self.engine.limits, self.engine.embedding_sample_rate) {
                // The components number a new session's turn 0, 1, ...:
                // no number is taken twice.
                Ok(mut p) => {
                    p.turn_step_given = false;
                    prepared.push(p)
                }
                Err(refusal) => return Ok(Err(refusal)),
            }
            if let Some(org) = org_id
                && self
                    .tx
                    .record_type(org, &format!("{}.{i}", trace.trace_id))?
                    .is_some()
            {
                return Ok(Err(Refusal::DuplicateId {
                    id: format!("{}.{i}", trace.trace_id),
                }));
            }
        }
        let header = SessionHeader {
            org_id: org_name.to_owned(),
            session_id: session_id.clone(),
            agent_id: trace.agent_id_hash.clone(),
            started_at: self.now,
            caller: caller.to_owned(),
            profile: Profile::Standard,
            predecessor: None,
            // A full trace exists only where its subject consented.
            full_consent: trace.level == cairn_core::detail::DetailLevel::Full,
            max_clock_skew_s: self.engine.max_clock_skew_s,
        };
        if let Err(e) = header.validate_new() {
            return Ok(Err(e.into()));
        }
        let (_, opened) = self.open_session(&header, genesis_hash(&header))?;
        let mut org = self
            .org(org_name)?
            .ok_or_else(|| StoreError::Corrupt("org vanished inside a batch".into()))?;
        let record = cairn_core::log::SignedTraceRecord {
            org_id: org_name.to_owned(),
            session_id: session_id.clone(),
            trace,
        };
        let link = Some(opened.sid);
        let seq = write_op(
            self.tx,
            &mut org,
            &OpRecord::SignedTrace(record),
            self.now,
            link,
        )?;
        self.overlay.orgs.insert(org_name.to_owned(), org);
        let mut steps = Vec::with_capacity(prepared.len());
        for p in &prepared {
            match self.append_step(p)? {
                Ok(Written::Step { seq, trace_id, .. }) => steps.push((seq, trace_id)),
                // Checked above: a refusal now would leave half a trace, so
                // it fails the whole batch instead.
                other => {
                    return Err(StoreError::Corrupt(format!(
                        "importing a checked trace: {other:?}"
                    )));
                }
            }
        }
        Ok(Ok(Written::TraceImported {
            seq,
            session_id,
            steps,
        }))
    }

    /// Records an audit event.
    pub(super) fn audit_event(
        &mut self,
        org_name: &str,
        event_id: Option<&str>,
        session_id: Option<&str>,
        action: &str,
        detail: Option<&serde_json::Value>,
    ) -> Outcome<Written> {
        // A generated id (UUIDv7) is unique, as a step's is: only a chosen
        // one is looked up below.
        let chosen = event_id.is_some();
        let event_id = event_id.map_or_else(crate::requests::new_id, str::to_owned);
        if let Err(e) = validate_id("org_id", org_name)
            // Its id names it in a URL path (/v1/audit-events/{event_id}).
            .and_then(|()| cairn_core::record::validate_path_id("event_id", &event_id))
        {
            return Ok(Err(e.into()));
        }
        if let Some(refusal) = audit_event_refusal(None, action, detail, &self.engine.limits) {
            return Ok(Err(refusal));
        }
        let org_id = self.org(org_name)?.map(|o| o.id);
        let mut sid = None;
        if let Some(session) = session_id {
            let found = match org_id {
                Some(org) => self.session(org, session)?,
                None => None,
            };
            let Some(found) = found else {
                return Ok(Err(Refusal::UnknownSession {
                    session_id: session.to_owned(),
                }));
            };
            sid = Some(found.sid);
        }
        if chosen
            && let Some(org) = org_id
            && self.tx.record_type(org, &event_id)?.is_some()
        {
            return Ok(Err(Refusal::DuplicateId { id: event_id }));
        }
        let mut org = self.org_or_create(org_name)?;
        let event = cairn_core::log::AuditEvent {
            org_id: org_name.to_owned(),
            event_id: event_id.clone(),
            session_id: session_id.map(str::to_owned),
            action: action.to_owned(),
            detail: detail.cloned(),
            at: self.now,
        };
        let link = sid;
        let seq = write_op(
            self.tx,
            &mut org,
            &OpRecord::AuditEvent(event),
            self.now,
            link,
        )?;
        self.overlay.orgs.insert(org_name.to_owned(), org);
        Ok(Ok(Written::AuditEvent { seq, event_id }))
    }

    pub(super) fn seal(
        &mut self,
        org_name: &str,
        session_id: &str,
        require_reflection: bool,
    ) -> Outcome<Written> {
        let unknown = || {
            Ok(Err(Refusal::UnknownSession {
                session_id: session_id.to_owned(),
            }))
        };
        let Some(mut org) = self.org(org_name)? else {
            return unknown();
        };
        let Some(mut session) = self.session(org.id, session_id)? else {
            return unknown();
        };
        if session.sealed {
            return Ok(Err(Refusal::Sealed {
                session_id: session_id.to_owned(),
            }));
        }
        if session.next_index == 0 {
            return Ok(Err(Refusal::NothingToSeal {
                session_id: session_id.to_owned(),
            }));
        }
        if (require_reflection || session.profile == Profile::Strict)
            && session.last_kind != Some(cairn_core::kind::StepKind::Reflection)
        {
            return Ok(Err(Refusal::ReflectionRequired {
                session_id: session_id.to_owned(),
            }));
        }
        // Walk back from the session's last step (which may be in this
        // batch) along the prev_seq links.
        let mut hashes: Vec<(u64, Hash)> = Vec::with_capacity(session.next_index as usize);
        let mut next = session.last_seq;
        while let Some(seq) = next {
            if hashes.len() as u64 >= session.next_index {
                break;
            }
            let (index, hash, prev) = self.tx.chain_link(org.id, seq)?;
            hashes.push((index, hash));
            next = prev;
        }
        let mut tree = Frontier::new();
        for (index, hash) in hashes.iter().rev() {
            tree.push(leaf_hash(&session_leaf_data(*index, hash)));
        }
        let origin = log_origin(self.engine.key.signer.name(), org_name);
        let seal = SealRecord {
            org_id: org_name.to_owned(),
            session_id: session_id.to_owned(),
            step_count: session.next_index,
            session_root: tree.root(),
            final_hash: session.head,
            sealed_at: self.now,
            note: String::new(),
        }
        .sign(&self.engine.key.signer, &origin)
        .map_err(|e| StoreError::Key(e.to_string()))?;
        let link = Some(session.sid);
        let seq = write_op(
            self.tx,
            &mut org,
            &OpRecord::Seal(seal.clone()),
            self.now,
            link,
        )?;
        session.sealed = true;
        self.overlay
            .sessions
            .insert((org.id, session_id.to_owned()), session);
        self.overlay.orgs.insert(org_name.to_owned(), org);
        Ok(Ok(Written::Sealed { seq, seal }))
    }

    /// Erases one step's payload, in the shape the database allows, and
    /// records the erasure, and the signed trace it came from with it:
    /// the seqs of the erasure record and of the trace-erasure record.
    pub(super) fn erase_step(
        &mut self,
        org_name: &str,
        trace_id: &str,
        reason: &str,
        actor: &str,
    ) -> Outcome<(Option<u64>, Option<u64>)> {
        let unknown = || Refusal::UnknownStep {
            trace_id: trace_id.to_owned(),
        };
        let Some(mut org) = self.org(org_name)? else {
            return Ok(Err(unknown()));
        };
        let Some(stored) = self.tx.step_by_trace(org.id, trace_id)? else {
            return Ok(Err(unknown()));
        };
        let session_id = stored.record.step.session_id.clone();
        let link = self.session_sid(org.id, &session_id)?;
        // A step erased already is refused, unless it is a component of a
        // trace still held (a store written before traces were erased with
        // their steps): erasing it again erases the trace.
        let step_erasure = if stored.record.erased {
            None
        } else {
            Some(self.erase_payload(&mut org, org_name, stored, reason, actor, link)?)
        };
        let trace_erasure = self.withhold_signed_trace(
            &mut org,
            org_name,
            trace_id,
            &session_id,
            (reason, actor),
            link,
        )?;
        if step_erasure.is_none() && trace_erasure.is_none() {
            return Ok(Err(Refusal::AlreadyErased {
                trace_id: trace_id.to_owned(),
            }));
        }
        self.overlay.orgs.insert(org_name.to_owned(), org);
        Ok(Ok((step_erasure, trace_erasure)))
    }

    /// Replaces a step's payload with its commitments, in the shape the
    /// database allows, after the erasure record naming them.
    fn erase_payload(
        &mut self,
        org: &mut OrgState,
        org_name: &str,
        stored: StoredStep,
        reason: &str,
        actor: &str,
        link: Option<i64>,
    ) -> Result<u64, StoreError> {
        let mut record: StepRecord = stored.record;
        let mut commitments = Vec::new();
        for field in cairn_core::commit::FIELDS
            .into_iter()
            .filter(|f| f.is_payload())
        {
            record
                .hide(field)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
            if let Opening::Hidden(c) = record.openings.get(field) {
                commitments.push((field, *c));
            }
        }
        // Every hidden field, the ones hidden before included.
        let hidden = hidden_json(&record.openings)
            .ok_or_else(|| StoreError::Corrupt("an erased step hides nothing".into()))?;
        let erasure = ErasureRecord {
            org_id: org_name.to_owned(),
            session_id: record.step.session_id.clone(),
            step_index: record.step.step_index,
            trace_id: record.step.trace_id.clone(),
            commitments,
            reason: reason.to_owned(),
            actor: actor.to_owned(),
            erased_at: self.now,
        };
        // The record first: the database refuses to erase a step that no
        // erasure record names.
        let seq = write_op(self.tx, org, &OpRecord::Erasure(erasure), self.now, link)?;
        self.tx.erase(org.id, stored.seq, &hidden)?;
        Ok(seq)
    }

    /// When the erased step is a component of an imported signed trace
    /// (its trace id is the trace's, a dot and the component's index, in
    /// the trace's session), the trace's record holds the same content:
    /// its view is withheld behind a `trace-erasure` record (FORMAT.md 8),
    /// once, by the first of its steps erased. Returns the trace-erasure
    /// record's seq if it wrote one.
    fn withhold_signed_trace(
        &mut self,
        org: &mut OrgState,
        org_name: &str,
        step_trace_id: &str,
        session_id: &str,
        (reason, actor): (&str, &str),
        link: Option<i64>,
    ) -> Result<Option<u64>, StoreError> {
        let Some((trace_id, index)) = step_trace_id.rsplit_once('.') else {
            return Ok(None);
        };
        if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(None);
        }
        let Some((trace_seq, trace_session, trace_hash)) =
            self.tx.held_signed_trace(org.id, trace_id)?
        else {
            return Ok(None);
        };
        if trace_session != session_id {
            return Ok(None);
        }
        let record = TraceErasureRecord {
            org_id: org_name.to_owned(),
            session_id: session_id.to_owned(),
            trace_id: trace_id.to_owned(),
            trace_seq,
            trace_hash,
            reason: reason.to_owned(),
            actor: actor.to_owned(),
            erased_at: self.now,
        };
        let seq = write_op(
            self.tx,
            org,
            &OpRecord::TraceErasure(record),
            self.now,
            link,
        )?;
        self.tx.withhold_trace(org.id, trace_seq)?;
        Ok(Some(seq))
    }

    /// Erases every step of every session whose last step is older than
    /// `older_than` (and the signed traces they came from): the seqs of
    /// the erasure records and of the trace-erasure records.
    pub(super) fn retention(
        &mut self,
        org_name: &str,
        older_than: Timestamp,
    ) -> Result<(Vec<u64>, Vec<u64>), StoreError> {
        let Some(org) = self.org(org_name)? else {
            return Ok((Vec::new(), Vec::new()));
        };
        let (mut seqs, mut trace_seqs) = (Vec::new(), Vec::new());
        for sid in self.tx.expired_sessions(org.id, older_than)? {
            for trace in self.tx.unerased_steps(org.id, sid)? {
                if let Ok((step, withheld)) =
                    self.erase_step(org_name, &trace, "retention", "retention")?
                {
                    seqs.extend(step);
                    trace_seqs.extend(withheld);
                }
            }
        }
        Ok((seqs, trace_seqs))
    }

    /// The registry id of a session of `org`, if it exists.
    fn session_sid(&mut self, org: i64, session_id: &str) -> Result<Option<i64>, StoreError> {
        Ok(self.session(org, session_id)?.map(|s| s.sid))
    }

    pub(super) fn register_key(
        &mut self,
        org_name: &str,
        agent_id: &str,
        public_key: VerifyingKey,
        by_admin: bool,
    ) -> Outcome<Written> {
        if let Err(e) = validate_id("org_id", org_name)
            .and_then(|()| validate_id("agent_id", agent_id))
            .and_then(|()| cairn_core::record::refuse_api_key_id("agent_id", agent_id))
        {
            return Ok(Err(e.into()));
        }
        let key_id = agent_key_id(&public_key);
        // The org is created only once the key is known to be written: a
        // refusal leaves no org row that the sequencing state does not
        // know of.
        let existing_org = self.org(org_name)?;
        let known = match &existing_org {
            Some(org) => self.agent_key(org.id, &key_id)?,
            None => None,
        };
        match known {
            Some(existing) if existing.agent_id != agent_id => {
                return Ok(Err(Refusal::KeyConflict {
                    key_id,
                    agent_id: existing.agent_id,
                }));
            }
            Some(AgentKey {
                revoked: Some(seq), ..
            }) => {
                return Ok(Err(Refusal::KeyRevoked { key_id, seq }));
            }
            // Registering a key again is answered with its registration.
            Some(existing) => {
                return Ok(Ok(Written::KeyRegistered {
                    seq: existing.seq,
                    key_id,
                }));
            }
            None => {}
        }
        if let Some(refusal) =
            self.key_room(existing_org.as_ref().map(|o| o.id), by_admin, false)?
        {
            return Ok(Err(refusal));
        }
        let mut org = match existing_org {
            Some(org) => org,
            None => self.org_or_create(org_name)?,
        };
        let seq = self.write_registration(org_name, &mut org, agent_id, public_key)?;
        self.overlay.orgs.insert(org_name.to_owned(), org);
        Ok(Ok(Written::KeyRegistered { seq, key_id }))
    }

    /// Writes a `log-key` record into an existing org's log, its note
    /// signed by the current key.
    pub(super) fn log_key(
        &mut self,
        org_name: &str,
        action: cairn_core::log::LogKeyAction,
        key: &cairn_core::note::NoteVerifier,
    ) -> Outcome<Written> {
        let signer = &self.engine.key.signer;
        if key.name() != signer.name() || key.alg() != cairn_core::note::ALG_ED25519 {
            return Ok(Err(Refusal::InvalidRequest(format!(
                "a log key must be an Ed25519 key named {:?} (the log's origin keeps its name); {key} is not",
                signer.name()
            ))));
        }
        if action == cairn_core::log::LogKeyAction::Add && *key == signer.verifier() {
            return Ok(Err(Refusal::InvalidRequest(
                "a key cannot vouch for itself: add the new key with the current one loaded".into(),
            )));
        }
        let Some(mut org) = self.org(org_name)? else {
            return Ok(Err(Refusal::InvalidRequest(format!(
                "org {org_name} has no log yet"
            ))));
        };
        if org.foreign {
            return Ok(Err(Refusal::InvalidRequest(format!(
                "org {org_name} is an imported log: its keys are its own server's"
            ))));
        }
        let origin = log_origin(signer.name(), org_name);
        let record = cairn_core::log::LogKeyRecord::sign(
            org_name,
            &origin,
            action,
            key.clone(),
            self.now,
            signer,
        )
        .map_err(|e| StoreError::Key(e.to_string()))?;
        let seq = write_op(self.tx, &mut org, &OpRecord::LogKey(record), self.now, None)?;
        self.overlay.orgs.insert(org_name.to_owned(), org);
        Ok(Ok(Written::LogKey { seq }))
    }

    fn write_registration(
        &mut self,
        org_name: &str,
        org: &mut OrgState,
        agent_id: &str,
        public_key: VerifyingKey,
    ) -> Result<u64, StoreError> {
        let key_id = agent_key_id(&public_key);
        let reg = KeyRegistration {
            org_id: org_name.to_owned(),
            agent_id: agent_id.to_owned(),
            key_id: key_id.clone(),
            public_key,
            registered_at: self.now,
        };
        let link = None;
        let seq = write_op(
            self.tx,
            org,
            &OpRecord::KeyRegistration(reg),
            self.now,
            link,
        )?;
        self.overlay.keys.insert(
            (org.id, key_id),
            AgentKey {
                agent_id: agent_id.to_owned(),
                key: public_key,
                seq,
                revoked: None,
            },
        );
        *self.overlay.registered.entry(org.id).or_default() += 1;
        Ok(seq)
    }

    /// Revokes a registered, unrevoked key of `agent_id`; with `successor`
    /// (the key, and whether an admin asks), registers that key in the
    /// same request (a rotation): both records or neither.
    pub(super) fn revoke_key(
        &mut self,
        org_name: &str,
        agent_id: &str,
        key_id: &str,
        reason: &str,
        successor: Option<(VerifyingKey, bool)>,
    ) -> Outcome<Written> {
        if let Some(refusal) = revocation_refusal(reason) {
            return Ok(Err(refusal));
        }
        let unknown = || {
            Ok(Err(Refusal::UnknownKey {
                key_id: key_id.to_owned(),
                agent_id: agent_id.to_owned(),
            }))
        };
        let Some(mut org) = self.org(org_name)? else {
            return unknown();
        };
        let key = match self.agent_key(org.id, key_id)? {
            Some(key) if key.agent_id == agent_id => key,
            _ => return unknown(),
        };
        if let Some(seq) = key.revoked {
            return Ok(Err(Refusal::KeyRevoked {
                key_id: key_id.to_owned(),
                seq,
            }));
        }
        if let Some((new_key, by_admin)) = successor {
            let new_id = agent_key_id(&new_key);
            if let Some(existing) = self.agent_key(org.id, &new_id)? {
                return Ok(Err(if existing.agent_id != agent_id {
                    Refusal::KeyConflict {
                        key_id: new_id,
                        agent_id: existing.agent_id,
                    }
                } else {
                    Refusal::InvalidRequest(format!(
                        "key {new_id} is registered already; rotate to a new key"
                    ))
                }));
            }
            if let Some(refusal) = self.key_room(Some(org.id), by_admin, true)? {
                return Ok(Err(refusal));
            }
        }
        let revocation = KeyRevocation {
            org_id: org_name.to_owned(),
            agent_id: agent_id.to_owned(),
            key_id: key_id.to_owned(),
            reason: reason.to_owned(),
            revoked_at: self.now,
        };
        let link = None;
        let seq = write_op(
            self.tx,
            &mut org,
            &OpRecord::KeyRevocation(revocation),
            self.now,
            link,
        )?;
        self.overlay.keys.insert(
            (org.id, key_id.to_owned()),
            AgentKey {
                revoked: Some(seq),
                ..key
            },
        );
        let successor = match successor {
            Some((new_key, _)) => {
                let at = self.write_registration(org_name, &mut org, agent_id, new_key)?;
                Some((at, agent_key_id(&new_key)))
            }
            None => None,
        };
        self.overlay.orgs.insert(org_name.to_owned(), org);
        Ok(Ok(Written::KeyRevoked {
            seq,
            key_id: key_id.to_owned(),
            successor,
        }))
    }
}

/// What refuses a review whatever the ledger holds (no reviewer, a note
/// past the content limit): checked before it is queued
/// ([`refused_before_queueing`]) and again as it is written.
fn review_refusal(
    reviewer: &str,
    note: Option<&str>,
    limits: &cairn_core::record::Limits,
) -> Option<Refusal> {
    if reviewer.trim().is_empty() {
        return Some(Refusal::InvalidRequest("a review needs a reviewer".into()));
    }
    if note.is_some_and(|n| n.len() > limits.max_content_bytes) {
        return Some(Refusal::InvalidMember {
            field: "note",
            message: format!(
                "the review note is longer than {} bytes",
                limits.max_content_bytes
            ),
        });
    }
    None
}

/// What refuses an audit event whatever the ledger holds (its action's
/// length, its detail's size in canonical form): checked before it is
/// queued ([`refused_before_queueing`]) and again as it is written.
fn audit_event_refusal(
    event_id: Option<&str>,
    action: &str,
    detail: Option<&serde_json::Value>,
    limits: &cairn_core::record::Limits,
) -> Option<Refusal> {
    // In the engine's order: a chosen id's shape first.
    if let Some(Err(e)) = event_id.map(|id| cairn_core::record::validate_path_id("event_id", id)) {
        return Some(e.into());
    }
    if action.trim().is_empty() || action.len() > 256 {
        return Some(Refusal::InvalidMember {
            field: "action",
            message: "an audit event needs an action of 1 to 256 bytes".into(),
        });
    }
    detail
        .and_then(|detail| {
            cairn_core::record::validate_json("detail", detail, limits.max_content_bytes).err()
        })
        .map(Refusal::from)
}

/// What refuses a key's revocation whatever the ledger holds: a reason
/// past 1024 bytes.
fn revocation_refusal(reason: &str) -> Option<Refusal> {
    (reason.len() > 1024).then(|| Refusal::InvalidMember {
        field: "reason",
        message: "a revocation reason is at most 1024 bytes".into(),
    })
}

/// What refuses a caller's erasure whatever the ledger holds: a reason
/// (recorded in the log with the erasure) empty or past the content limit,
/// named as the member `reason` on every surface. Retention's erasures,
/// which give their own reason, are not checked.
pub fn erasure_refusal(reason: &str, limits: &cairn_core::record::Limits) -> Option<Refusal> {
    if reason.trim().is_empty() {
        return Some(Refusal::InvalidMember {
            field: "reason",
            message: "reason must not be empty (it is recorded with the erasure)".into(),
        });
    }
    (reason.len() > limits.max_content_bytes).then(|| Refusal::InvalidMember {
        field: "reason",
        message: format!(
            "an erasure reason is at most {} bytes",
            limits.max_content_bytes
        ),
    })
}

/// The refusal of `request` that depends on nothing the ledger holds, for
/// the requests that carry what a caller sent as sent (a review's note,
/// an audit event's detail, a revocation's or an erasure's reason):
/// [`crate::Ledger::submit`] answers it before queueing, so that an
/// invalid write never waits in the queue holding megabytes (a step's
/// rules are checked the same way, by [`crate::prepare_step`]).
///
/// `limits` is asked for only by the requests it checks: every step a
/// caller prepared itself passes through here on the append path.
pub(crate) fn refused_before_queueing(
    request: &WriteRequest,
    limits: impl FnOnce() -> cairn_core::record::Limits,
) -> Option<Refusal> {
    match request {
        WriteRequest::Review { reviewer, note, .. } => {
            review_refusal(reviewer, note.as_deref(), &limits())
        }
        WriteRequest::AuditEvent {
            event_id,
            action,
            detail,
            ..
        } => audit_event_refusal(event_id.as_deref(), action, detail.as_ref(), &limits()),
        WriteRequest::RevokeKey { reason, .. } => revocation_refusal(reason),
        WriteRequest::Erase { reason, .. } => erasure_refusal(reason, &limits()),
        _ => None,
    }
}
