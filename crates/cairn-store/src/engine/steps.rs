//! Sessions and steps: opening sessions (explicitly, or by a first step),
//! continuity, and appending steps with their links and signatures.

use super::*;

impl<T: WriteTx + ?Sized> BatchRun<'_, '_, '_, T> {
    /// Opens an explicitly requested session.
    pub(super) fn start_session(&mut self, req: &NewSession) -> Outcome<(u64, Hash)> {
        let header = SessionHeader {
            org_id: req.org_id.clone(),
            session_id: req.session_id.clone(),
            agent_id: req.agent_id.clone(),
            started_at: self.now,
            caller: req.caller.clone(),
            profile: req.profile,
            predecessor: req.predecessor,
            full_consent: req.full_consent,
            max_clock_skew_s: self.engine.max_clock_skew_s,
        };
        if let Err(e) = header.validate_new() {
            return Ok(Err(e.into()));
        }
        let org_id = self.org(&req.org_id)?.map(|org| org.id);
        if let Some(org) = org_id
            && self.session(org, &req.session_id)?.is_some()
        {
            return Ok(Err(Refusal::SessionExists {
                session_id: req.session_id.clone(),
            }));
        }
        let mut header = header;
        match self.resolve_predecessor(org_id, req)? {
            Ok(predecessor) => header.predecessor = predecessor,
            Err(refusal) => return Ok(Err(refusal)),
        }
        let genesis = genesis_hash(&header);
        let (seq, _) = self.open_session(&header, genesis)?;
        Ok(Ok((seq, genesis)))
    }

    /// The predecessor hash of a new session: the final hash of the sealed
    /// session it names, checked against the hash it gives, or the hash it
    /// gives, checked to end a sealed session of the org.
    pub(super) fn resolve_predecessor(
        &mut self,
        org: Option<i64>,
        req: &NewSession,
    ) -> Outcome<Option<Hash>> {
        let resolved = self.predecessor_hash(org, req)?;
        if let (Ok(Some(hash)), Some(org)) = (&resolved, org)
            && let Some(other) = self.tx.successor_of(org, hash)?
        {
            return Ok(Err(Refusal::BadPredecessor(format!(
                "session {other} already continues the session ending in {hash}"
            ))));
        }
        Ok(resolved)
    }

    pub(super) fn predecessor_hash(
        &mut self,
        org: Option<i64>,
        req: &NewSession,
    ) -> Outcome<Option<Hash>> {
        let bad = |m: String| Ok(Err(Refusal::BadPredecessor(m)));
        match (&req.predecessor_session, req.predecessor) {
            (None, None) => Ok(Ok(None)),
            (Some(id), given) => {
                let found = match org {
                    Some(org) => self.session(org, id)?,
                    None => None,
                };
                let Some(predecessor) = found else {
                    return bad(format!("session {id} does not exist in org {}", req.org_id));
                };
                if !predecessor.sealed {
                    return bad(format!(
                        "session {id} is not closed: seal it (POST /v1/sessions/{id}/seal, MCP audit_session_end, cairn seal) before continuing it"
                    ));
                }
                if let Some(hash) = given
                    && hash != predecessor.head
                {
                    return bad(format!(
                        "session {id} ends with {}, not {hash}",
                        predecessor.head
                    ));
                }
                if let Some(refusal) = other_agents(req, id, &predecessor.agent_id) {
                    return Ok(Err(refusal));
                }
                Ok(Ok(Some(predecessor.head)))
            }
            (None, Some(hash)) => {
                let found = match org {
                    Some(org) => match self.tx.session_sealed_with(org, &hash)? {
                        Some(id) => self.session(org, &id)?.map(|state| (id, state.agent_id)),
                        None => None,
                    },
                    None => None,
                };
                match found {
                    Some((id, agent)) => match other_agents(req, &id, &agent) {
                        Some(refusal) => Ok(Err(refusal)),
                        None => Ok(Ok(Some(hash))),
                    },
                    None => bad(format!(
                        "no sealed session of org {} ends with {hash}",
                        req.org_id
                    )),
                }
            }
        }
    }

    /// Writes a session's start record and lookup row (the caller checked
    /// it does not exist), creating the org on first use.
    pub(super) fn open_session(
        &mut self,
        header: &SessionHeader,
        genesis: Hash,
    ) -> Result<(u64, SessionState), StoreError> {
        let mut org = self.org_or_create(&header.org_id)?;
        // The registry row first, so that the start record carries its sid.
        let sid = self
            .tx
            .insert_session(org.id, header, &genesis, org.frontier.size())?;
        let link = Some(sid);
        let op = OpRecord::SessionStart(header.clone());
        let seq = write_op(self.tx, &mut org, &op, self.now, link)?;
        let state = SessionState::opened(sid, header, genesis);
        self.overlay
            .sessions
            .insert((org.id, header.session_id.clone()), state.clone());
        self.overlay.orgs.insert(header.org_id.clone(), org);
        Ok((seq, state))
    }

    /// Appends `steps` all or none: each is prepared, then all are appended
    /// in a trial over a [`crate::dry_run::DryRun`] of the transaction (reads
    /// go through, writes are only remembered) with a copy of the overlay;
    /// only if none is refused are they appended for real, where the same
    /// checks on the same state cannot refuse them.
    pub(super) fn append_steps(&mut self, steps: &[crate::NewStep]) -> Outcome<Written> {
        self.append_numbered_steps(steps, None)
    }

    /// [`Self::append_steps`], where `given` (if any) says which steps'
    /// `turn_step` the writer chose: the others were numbered by
    /// [`Self::append_turn`] past the turn's highest, so they need no check.
    fn append_numbered_steps(
        &mut self,
        steps: &[crate::NewStep],
        given: Option<&[bool]>,
    ) -> Outcome<Written> {
        let count = steps.len();
        let many = |index: usize, refusal: Refusal| Refusal::StepOfMany {
            index,
            count,
            refusal: Box::new(refusal),
        };
        let Some(first) = steps.first() else {
            return Ok(Err(Refusal::InvalidRequest("no steps to write".into())));
        };
        if let Some(index) = steps.iter().position(|s| s.org_id != first.org_id) {
            return Ok(Err(many(
                index,
                Refusal::InvalidRequest("the steps of one write belong to one org".into()),
            )));
        }
        let mut prepared = Vec::with_capacity(count);
        for (index, step) in steps.iter().enumerate() {
            match prepare_step(
                step.clone(),
                &self.engine.limits,
                self.engine.embedding_sample_rate,
            ) {
                Ok(mut p) => {
                    if let Some(given) = given {
                        p.turn_step_given = given.get(index).copied().unwrap_or(true);
                    }
                    prepared.push(p)
                }
                Err(refusal) => return Ok(Err(many(index, refusal))),
            }
        }
        // The numbers the writer gave, checked together (one query per
        // turn, not one per step); the refusal is the trial's, at its step.
        let taken = self.first_turn_step_taken(&mut prepared)?;
        {
            let mut dry = crate::dry_run::DryRun::new(&mut *self.tx);
            let mut trial = BatchRun {
                engine: self.engine,
                tx: &mut dry,
                overlay: self.overlay.clone(),
                now: self.now,
            };
            for (index, p) in prepared.iter().enumerate() {
                if let Err(refusal) = trial.append_step(p)? {
                    return Ok(Err(many(index, refusal)));
                }
                // After the step's own checks, as a lone step's (a retried
                // step is a duplicate trace id before its number is taken).
                if let Some((at, refusal)) = &taken
                    && *at == index
                {
                    return Ok(Err(many(index, refusal.clone())));
                }
            }
        }
        let mut written = Vec::with_capacity(count);
        for (index, p) in prepared.iter().enumerate() {
            match self.append_step(p)? {
                Ok(w) => written.push(w),
                // The batch's transaction is rolled back: nothing of it is
                // written.
                Err(refusal) => {
                    return Err(StoreError::Corrupt(format!(
                        "step {index} of an all-or-nothing write passed its trial, then was refused: {refusal}"
                    )));
                }
            }
        }
        Ok(Ok(Written::Steps(written)))
    }

    /// The first of `prepared` whose writer-given `turn_step` another step
    /// of its turn holds (stored, or earlier in this write), with its
    /// refusal. Each turn's numbers are looked up in one query; every step
    /// is then marked checked, so that [`Self::append_step`] does not look
    /// again one step at a time (on PostgreSQL each look would flush the
    /// write's rows).
    /// The steps of one write are of one org (checked before).
    fn first_turn_step_taken(
        &mut self,
        prepared: &mut [PreparedStep],
    ) -> Result<Option<(usize, Refusal)>, StoreError> {
        let given: Vec<usize> = prepared
            .iter_mut()
            .enumerate()
            .filter_map(|(index, p)| std::mem::take(&mut p.turn_step_given).then_some(index))
            .collect();
        let prepared: &[PreparedStep] = prepared;
        // (session, turn) to its given numbers, each with its step.
        let mut turns: std::collections::BTreeMap<(&str, &str), Vec<(usize, u64)>> =
            std::collections::BTreeMap::new();
        let mut taken: Vec<usize> = Vec::new();
        for index in given {
            let p = &prepared[index];
            let (Some(turn_id), Some(number)) = (&p.step.turn_id, p.step.turn_step) else {
                continue;
            };
            let numbers = turns.entry((&p.step.session_id, turn_id)).or_default();
            if numbers.iter().any(|&(_, n)| n == number) {
                taken.push(index);
            }
            numbers.push((index, number));
        }
        let org = match prepared.first() {
            Some(p) if !turns.is_empty() => self.org(&p.step.org_id)?,
            _ => None,
        };
        for ((session_id, turn_id), numbers) in &turns {
            let Some(org) = &org else { break };
            let Some(session) = self.session(org.id, session_id)? else {
                continue;
            };
            let wanted: Vec<u64> = numbers.iter().map(|&(_, n)| n).collect();
            let held = self.tx.turn_steps_taken(session.sid, turn_id, &wanted)?;
            taken.extend(
                numbers
                    .iter()
                    .find(|(_, n)| held.contains(n))
                    .map(|&(index, _)| index),
            );
        }
        Ok(taken.into_iter().min().map(|index| {
            let step = &prepared[index].step;
            (
                index,
                Refusal::TurnStepTaken {
                    session_id: step.session_id.clone(),
                    turn_id: step.turn_id.clone().unwrap_or_default(),
                    turn_step: step.turn_step.unwrap_or_default(),
                },
            )
        }))
    }

    /// Numbers a turn's unnumbered steps where the turn stands now (past
    /// its highest number, skipping the numbers the request's other steps
    /// give), then appends them all or none ([`Self::append_steps`]).
    /// Sequenced requests are ordered (on PostgreSQL by the org's lock), so
    /// two requests of one turn never share a number.
    pub(super) fn append_turn(
        &mut self,
        turn_id: &str,
        steps: &[crate::NewStep],
    ) -> Outcome<Written> {
        let Some(first) = steps.first() else {
            return self.append_steps(steps);
        };
        // The turn's own id is refused as the request's, on every surface,
        // before any of its steps (each of which names it) is looked at.
        if let Err(e) = cairn_core::record::validate_path_id("turn_id", turn_id) {
            return Ok(Err(e.into()));
        }
        let count = steps.len();
        let misplaced = steps.iter().position(|s| {
            s.session_id != first.session_id
                || s.turn_id.as_deref().is_some_and(|other| other != turn_id)
        });
        if let Some(index) = misplaced {
            let step = &steps[index];
            let refusal = if step.session_id != first.session_id {
                Refusal::InvalidMember {
                    field: "session_id",
                    message: format!(
                        "a step of session {} in a turn of session {}",
                        step.session_id, first.session_id
                    ),
                }
            } else {
                Refusal::InvalidMember {
                    field: "turn_id",
                    message: format!(
                        "a step of turn {} in a request of turn {turn_id}",
                        step.turn_id.as_deref().unwrap_or_default()
                    ),
                }
            };
            return Ok(Err(Refusal::StepOfMany {
                index,
                count,
                refusal: Box::new(refusal),
            }));
        }
        let highest = match self.org(&first.org_id)? {
            Some(org) => match self.session(org.id, &first.session_id)? {
                Some(session) => self.tx.turn_highest(session.sid, turn_id)?,
                None => None,
            },
            None => None,
        };
        let given: std::collections::HashSet<u64> =
            steps.iter().filter_map(|s| s.turn_step).collect();
        let mut next = highest.map_or(0, |n| n.saturating_add(1));
        let mut numbered = Vec::with_capacity(count);
        let chosen: Vec<bool> = steps.iter().map(|s| s.turn_step.is_some()).collect();
        for step in steps {
            let turn_step = match step.turn_step {
                Some(number) => number,
                None => {
                    while given.contains(&next) {
                        next = next.saturating_add(1);
                    }
                    if next > cairn_core::record::MAX_SAFE_INTEGER {
                        return Ok(Err(Refusal::InvalidMember {
                            field: "turn_id",
                            message: format!(
                                "turn {turn_id} of session {} is numbered up to 2^53 - 1, the largest number a step may hold: record these steps in another turn",
                                first.session_id
                            ),
                        }));
                    }
                    next += 1;
                    next - 1
                }
            };
            numbered.push(crate::NewStep {
                turn_id: Some(turn_id.to_owned()),
                turn_step: Some(turn_step),
                ..step.clone()
            });
        }
        self.append_numbered_steps(&numbered, Some(&chosen))
    }

    pub(super) fn append_step(&mut self, prepared: &PreparedStep) -> Outcome<Written> {
        // The step as the writer sent it: the two values the sequencer may
        // assign (index, time) are kept beside it, never written into a
        // copy of the whole step.
        let step = &prepared.step;
        let trace_id = step.trace_id.clone();
        let org_id = self.org(&step.org_id)?.map(|org| org.id);
        // Generated ids (UUIDv7) are unique; a writer-chosen one is checked
        // before anything is written, so a refusal leaves nothing behind.
        if prepared.trace_id_given
            && let Some(org) = org_id
            && self.tx.trace_id_taken(org, &trace_id)?
        {
            return Ok(Err(Refusal::DuplicateTraceId { trace_id }));
        }
        let existing = match org_id {
            Some(org) => self.session(org, &step.session_id)?,
            None => None,
        };
        // A step of an unknown session opens it, but only once every check
        // passed: a refused step writes nothing, not even a session start.
        let (mut session, new_session) = match existing {
            Some(s) => (s, None),
            None => {
                // The session starts when the server dated its first step
                // (taken before the batch), so that it never starts after
                // that step; a writer's own `created_at` is not the
                // server's time (FORMAT 5.4: `started_at` is the server's).
                let started_at = if prepared.created_at_given {
                    self.now
                } else {
                    step.created_at.min(self.now)
                };
                let header = SessionHeader {
                    org_id: step.org_id.clone(),
                    session_id: step.session_id.clone(),
                    agent_id: step.agent_id.clone(),
                    started_at,
                    caller: if prepared.caller.is_empty() {
                        "unknown".into()
                    } else {
                        prepared.caller.clone()
                    },
                    profile: Profile::Standard,
                    predecessor: None,
                    full_consent: false,
                    max_clock_skew_s: self.engine.max_clock_skew_s,
                };
                if let Err(e) = header.validate_new() {
                    return Ok(Err(e.into()));
                }
                // Not written yet: checked as if opened, opened below.
                let state = SessionState::opened(0, &header, genesis_hash(&header));
                (state, Some(header))
            }
        };
        if session.sealed {
            return Ok(Err(Refusal::Sealed {
                session_id: step.session_id.clone(),
            }));
        }
        if session.agent_id != step.agent_id {
            return Ok(Err(Refusal::AgentMismatch {
                session_id: step.session_id.clone(),
                session_agent: session.agent_id.clone(),
                step_agent: step.agent_id.clone(),
            }));
        }
        if let Err(e) = session.profile.check(step.kind) {
            return Ok(Err(e.into()));
        }
        if let Some(given) = prepared.expected_index
            && given != session.next_index
        {
            return Ok(Err(Refusal::IndexConflict {
                expected: session.next_index,
                given,
            }));
        }
        let mut commitments = prepared.commitments;
        let step_index = session.next_index;
        if step.step_index != step_index {
            recommit_assigned(
                &mut commitments,
                &prepared.openings,
                Assigned::StepIndex(step_index),
            );
        }
        // The entry is logged at the batch's time (never before the log's
        // last entry; a session start written for it shares that time).
        let logged_at = match self.org(&step.org_id)? {
            Some(org) => next_logged(&org, self.now),
            None => self.now,
        };
        let created_at =
            match self.settle_time(step, &session, prepared.created_at_given, logged_at) {
                Ok(Some(moved)) => {
                    recommit_assigned(
                        &mut commitments,
                        &prepared.openings,
                        Assigned::CreatedAt(moved),
                    );
                    moved
                }
                Ok(None) => step.created_at,
                Err(refusal) => return Ok(Err(refusal)),
            };
        let digest = digest_of_commitments(&commitments);
        if let Some(sig) = &prepared.signature
            && let Err(refusal) = self.check_signature(org_id, step, &digest, sig)?
        {
            return Ok(Err(refusal));
        }
        if let Err(refusal) = self.check_links(org_id, &step.links)? {
            return Ok(Err(refusal));
        }
        // A number the writer gave names one step of its turn: checked
        // after every other check of the step, as a write of many steps
        // checks it, so both answer alike. (A new session holds no turn
        // yet; numbers the sequencer assigns lie past the turn's highest.)
        if prepared.turn_step_given
            && new_session.is_none()
            && let (Some(turn_id), Some(turn_step)) = (&step.turn_id, step.turn_step)
            && !self
                .tx
                .turn_steps_taken(session.sid, turn_id, &[turn_step])?
                .is_empty()
        {
            return Ok(Err(Refusal::TurnStepTaken {
                session_id: step.session_id.clone(),
                turn_id: turn_id.clone(),
                turn_step,
            }));
        }
        if let Some(header) = &new_session {
            session = self.open_session(header, session.head)?.1;
        }
        let mut org = self
            .org(&step.org_id)?
            .ok_or_else(|| StoreError::Corrupt("org vanished inside a batch".into()))?;
        let hash = chain_hash(&session.head, &digest, step_index, created_at);
        let seq = org.frontier.size();
        let logged_at = next_logged(&org, logged_at);
        let leaf = leaf_hash(&cairn_core::log::log_leaf_data(
            seq, "step", &hash, logged_at,
        ));
        self.tx.insert_step(&StepRow {
            org: org.id,
            seq,
            logged_at,
            sid: session.sid,
            step,
            step_index,
            created_at,
            hash: &hash,
            leaf: &leaf,
            digest: &digest,
            prev_hash: &session.head,
            seed: Some(&prepared.seed),
            salts: None,
            signature: prepared.signature.as_ref().map(|sig| &sig.signature),
            // Set by the background embedder once the vector exists.
            has_embedding: false,
            erased: false,
            hidden: None,
            prev_seq: session.last_seq,
        })?;
        if prepared.embed {
            self.tx.queue_embedding(org.id, seq)?;
        }
        if let Some(doc) = &prepared.search_doc {
            self.tx
                .insert_search_doc(org.id, seq, doc, prepared.search_form.as_deref())?;
        }
        push_leaf(self.tx, &mut org, leaf)?;
        org.last_logged = logged_at;
        session.first_seq.get_or_insert(seq);
        session.last_seq = Some(seq);
        session.next_index += 1;
        session.head = hash;
        session.last_created = Some(created_at);
        session.last_kind = Some(step.kind);
        self.overlay.note_kind(&mut session, step.kind);
        self.overlay.touched.insert(session.sid);
        self.overlay
            .sessions
            .insert((org.id, step.session_id.clone()), session);
        self.overlay.orgs.insert(step.org_id.clone(), org);
        Ok(Ok(Written::Step {
            seq,
            trace_id,
            step_index,
            hash,
            created_at,
            session_created: new_session.is_some(),
        }))
    }

    /// Applies the time rules (`docs/FORMAT.md` 5.4) to a step about to be
    /// logged at `logged_at`: a writer's `created_at` must lie within the
    /// session's clock skew of it and not before the session's previous
    /// step (refused otherwise); the server's own `created_at` is moved to
    /// `logged_at` (or the previous step's time) if it would break either
    /// rule (a clock step back, a long queue). Returns the time it moved to,
    /// if it moved.
    fn settle_time(
        &self,
        step: &Step,
        session: &SessionState,
        given: bool,
        logged_at: Timestamp,
    ) -> Result<Option<Timestamp>, Refusal> {
        let max_micros = session.max_clock_skew_s.saturating_mul(1_000_000);
        let skew = step.created_at.as_micros().abs_diff(logged_at.as_micros());
        let regressed = session.last_created.filter(|last| step.created_at < *last);
        if !given {
            if skew <= max_micros && regressed.is_none() {
                return Ok(None);
            }
            return Ok(Some(
                logged_at.max(session.last_created.unwrap_or(logged_at)),
            ));
        }
        if skew > max_micros {
            return Err(Refusal::ClockSkew {
                session_id: step.session_id.clone(),
                created_at: step.created_at,
                logged_at,
                skew_s: skew / 1_000_000,
                max_s: session.max_clock_skew_s,
            });
        }
        if let Some(previous) = regressed {
            return Err(Refusal::TimeRegression {
                session_id: step.session_id.clone(),
                created_at: step.created_at,
                previous,
            });
        }
        Ok(None)
    }

    /// Links to Cairn's own records must name one: `corrects` and `parent`
    /// a step, `audit_event` an audit event, of this org. (Tool calls,
    /// policy decisions and approval requests are other systems' ids.)
    pub(super) fn check_links(&mut self, org: Option<i64>, links: &Links) -> Outcome<()> {
        for (link, id, wanted, expected) in [
            ("corrects", &links.corrects, "step", "a step"),
            ("parent", &links.parent, "step", "a step"),
            (
                "audit_event",
                &links.audit_event,
                "audit-event",
                "an audit event",
            ),
        ] {
            let Some(id) = id else { continue };
            let found = match org {
                Some(org) => self.tx.record_type(org, id)?,
                None => None,
            };
            if found.as_deref() != Some(wanted) {
                return Ok(Err(Refusal::UnknownLink {
                    link: link.to_owned(),
                    id: id.clone(),
                    expected: expected.to_owned(),
                }));
            }
        }
        Ok(Ok(()))
    }

    /// The key `key_id` registered in `org` for `agent`, or why not.
    pub(super) fn registered_key(
        &mut self,
        org: Option<i64>,
        key_id: &str,
        agent: &str,
    ) -> Outcome<AgentKey> {
        let key = match org {
            Some(org) => self.agent_key(org, key_id)?,
            None => None,
        };
        Ok(match key {
            None => Err(Refusal::BadSignature(format!(
                "key {key_id} is not registered"
            ))),
            Some(key) if key.agent_id != agent => Err(Refusal::BadSignature(format!(
                "key {key_id} is registered for agent {}, not {agent}",
                key.agent_id
            ))),
            Some(AgentKey {
                revoked: Some(seq), ..
            }) => Err(Refusal::BadSignature(format!(
                "key {key_id} was revoked at seq {seq}; it signs nothing from then on"
            ))),
            Some(key) => Ok(key),
        })
    }

    pub(super) fn check_signature(
        &mut self,
        org: Option<i64>,
        step: &Step,
        digest: &Hash,
        sig: &AgentSignature,
    ) -> Outcome<()> {
        let key = match self.registered_key(org, &sig.key_id, &step.agent_id)? {
            Ok(key) => key,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if !verify_agent_signature(&key.key, digest, &sig.signature) {
            return Ok(Err(Refusal::BadSignature(
                "the signature does not verify over the step's digest".into(),
            )));
        }
        Ok(Ok(()))
    }
}

/// A key bound to an agent continuing another agent's session: refused
/// (each sealed session is continued once, so it would take that agent's
/// continuation).
fn other_agents(req: &NewSession, predecessor: &str, agent: &str) -> Option<Refusal> {
    let bound = req.bound_agent.as_deref()?;
    // Its own sessions: under its name, or under its name's hash (a
    // session started with `hash_agent_id`).
    let own = bound == agent || cairn_core::record::hashed_agent_id(bound) == agent;
    (!own).then(|| {
        Refusal::BadPredecessor(format!(
            "session {predecessor} is agent {agent}'s: this key is bound to agent {bound} and may continue only that agent's sessions"
        ))
    })
}
