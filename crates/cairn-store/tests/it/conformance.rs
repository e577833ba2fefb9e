//! The conformance suite: the contract of [`LedgerStore`] and the
//! sequencer, written once and run against every backend. A backend's test
//! module calls [`run_all`] with a factory that opens a fresh store, and a
//! reopen function that opens the same store again.
//!
//! This file holds the kit every check shares (steps, sessions, appends,
//! checkpoints, bundles) and [`run_all`]; the checks are grouped by what
//! they cover: the log itself (`log`), the seeds' records (`records`),
//! the ids and turn numbers writers choose (`chosen_ids`), evidence
//! leaving and entering a store (`evidence`).

use cairn_core::Timestamp;
use cairn_core::commit::{
    AgentSignature, Openings, agent_key_id, signed_step_message, step_digest,
};
use cairn_core::detail::DetailLevel;
use cairn_core::ed25519_dalek::{Signer as _, SigningKey};
use cairn_core::log::{LogRecord, OpRecord};
use cairn_core::merkle::{verify_consistency, verify_inclusion};
use cairn_core::record::{Profile, RecordError, Step};
use cairn_store::ops::{ExportScope, ReviewItem, export, export_at, verify_org, verify_session};
use cairn_store::{
    AppendError, Ledger, LedgerStore, NewSession, NewStep, Refusal, SequencerConfig, SessionFilter,
    StoreError, WriteRequest, Written,
};
use std::sync::Arc;

mod agent_keys;
mod chosen_ids;
mod erasure_seals_signatures;
mod evidence;
mod held_spans;
mod keys;
mod log;
pub(crate) mod records;

/// Opens a backend: `open(name)` opens (or reopens) the store called
/// `name`, fresh the first time.
pub trait Backend {
    /// Opens the store `name`.
    fn open(&self, name: &str) -> Arc<dyn LedgerStore>;
    /// Opens the store `name` with a bound on each org's agent keys.
    fn open_with_max_agent_keys(&self, name: &str, max: u64) -> Arc<dyn LedgerStore>;
    /// Gathers the planner's statistics of the store `name` (as a
    /// production database's autovacuum would) and makes its planner
    /// prefer plans that scan whole tables, for stores opened after.
    fn analyze(&self, _name: &str) {}
    /// A second handle of the store `name`, open beside the first, as a
    /// second server of a fleet holds one; `None` where the backend has
    /// one writer per store (SQLite: one process per data directory).
    fn open_beside(&self, _name: &str) -> Option<Arc<dyn LedgerStore>> {
        None
    }
}

pub const ORG: &str = "acme";

pub fn step(session: &str, kind: &str, content: &str) -> NewStep {
    NewStep {
        org_id: ORG.into(),
        session_id: session.into(),
        agent_id: "analyst".into(),
        kind_label: kind.into(),
        content: Some(content.into()),
        caller: "test".into(),
        ..NewStep::default()
    }
}

pub(crate) fn ledger(store: Arc<dyn LedgerStore>) -> Ledger {
    Ledger::new(store, SequencerConfig::default())
}

pub(crate) fn append(ledger: &Ledger, s: NewStep) -> Result<Written, AppendError> {
    ledger.write(WriteRequest::Step(Box::new(s)))
}

fn refused(result: Result<Written, AppendError>) -> Refusal {
    match result {
        Err(AppendError::Refused(r)) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn checkpoint(ledger: &Ledger) -> cairn_store::StoredCheckpoint {
    match ledger.write(WriteRequest::Checkpoint { org_id: ORG.into() }) {
        Ok(Written::Checkpoint(cp)) => cp,
        other => panic!("checkpoint: {other:?}"),
    }
}

/// Imports `bundle` (its bytes) into `target`, every key accepted.
pub(crate) fn import_bytes(
    target: &dyn LedgerStore,
    bundle: &[u8],
) -> Result<cairn_store::ops::ImportOutcome, cairn_store::ImportError> {
    let open = || -> std::io::Result<Box<dyn std::io::BufRead>> {
        Ok(Box::new(std::io::Cursor::new(bundle.to_vec())))
    };
    cairn_store::ops::import_bundle(
        target,
        &open,
        &[],
        cairn_store::ops::DEFAULT_MAX_BUNDLE_LINE_BYTES,
        &mut |_| {},
    )
}

pub(crate) fn assert_verifies(store: &dyn LedgerStore) {
    let verdict = verify_org(store, ORG, &[], &[], &mut |_| {}).unwrap();
    assert!(verdict.verdict.verified, "{:?}", verdict.verdict.failure);
}

/// Exports `scope` of the org at `level` (None: as stored) as bundle text.
fn bundle_text(
    store: &dyn LedgerStore,
    scope: ExportScope,
    level: Option<DetailLevel>,
    cp: &cairn_store::StoredCheckpoint,
    exported_at: Timestamp,
) -> String {
    let mut out = Vec::new();
    export_at(
        store,
        ORG,
        &scope,
        cairn_store::ops::ExportOptions {
            level,
            since_size: None,
        },
        cp,
        exported_at,
        &mut out,
        &mut |_| {},
    )
    .unwrap();
    String::from_utf8(out).unwrap()
}

/// The verdict on bundle text, with the store's key pinned.
fn verify_text(store: &dyn LedgerStore, text: &str) -> cairn_core::bundle::BundleVerdict {
    let mut v = cairn_core::bundle::BundleVerifier::new(vec![store.server_key().clone()]);
    for line in text.lines() {
        v.push_line(line);
    }
    v.finish()
}

pub fn run_all(backend: &dyn Backend) {
    log::appends_are_sequenced_and_readable(backend);
    log::concurrent_writers_get_gap_free_chains(backend);
    log::refusals_write_nothing(backend);
    erasure_seals_signatures::seals_close_sessions(backend);
    erasure_seals_signatures::signed_steps_are_checked(backend);
    agent_keys::agent_keys_are_bounded_per_org(backend);
    agent_keys::servers_see_each_others_keys(backend);
    agent_keys::the_last_tenth_of_the_bound_is_for_admins(backend);
    agent_keys::kept_agent_keys_follow_the_log(backend);
    log::proofs_and_checkpoints_verify(backend);
    log::hash_tiles_are_the_trees(backend);
    log::log_keys_are_added_and_retired(backend);
    log::state_survives_reopen(backend);
    log::listing_and_lookup(backend);
    crate::listing::session_listing_filters_and_pages(backend);
    crate::search::full_text_search_finds_and_forgets(backend);
    evidence::exports_verify_offline(backend);
    evidence::large_records_are_read_whole_across_pages(backend);
    evidence::exports_refuse_a_selection_line_verifiers_would_not_read(backend);
    evidence::imports_round_trip(backend);
    keys::api_keys_are_stored_hashed_and_revocable(backend);
    keys::last_admin_key_is_kept(backend);
    keys::cosignatures_are_kept_per_checkpoint_and_witness(backend);
    erasure_seals_signatures::erasure_and_retention_keep_everything_verifiable(backend);
    crate::embedding::run_all(backend);
    records::decision_trail_lifecycle(backend);
    records::links_name_existing_records(backend);
    records::reviews_form_a_queue(backend);
    records::signed_traces_import_and_verify(backend);
    records::turns_are_numbered_per_session(backend);
    chosen_ids::a_turn_step_names_one_step(backend);
    chosen_ids::ids_chosen_within_one_batch_are_checked_in_order(backend);
    chosen_ids::retried_writes_are_answered_as_their_first(backend);
    chosen_ids::a_retried_turn_is_answered_as_its_first_write(backend);
    chosen_ids::text_with_nul_is_refused_with_its_request(backend);
    evidence::analyst_sql_reads_one_org_and_writes_nothing(backend);
    held_spans::spans_wait_durably_until_released(backend);
    held_spans::a_traces_sessions_are_named_latest_first(backend);
}

fn session(id: &str, profile: Profile) -> NewSession {
    NewSession {
        org_id: ORG.into(),
        session_id: id.into(),
        agent_id: "analyst".into(),
        caller: "test".into(),
        profile,
        predecessor: None,
        predecessor_session: None,
        bound_agent: None,
        full_consent: false,
    }
}
