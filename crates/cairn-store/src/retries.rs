//! Answering retried writes: steps refused as duplicate trace ids that are
//! the very steps recorded under those ids ([`NewStep::recorded_as`]) are
//! answered as their first write was. One rule for every surface that
//! writes many steps at once (a REST batch, `cairn log --stdin`), reading
//! the recorded steps a chunk at a time.

use crate::{AppendError, LedgerStore, NewStep, Refusal, StoredStep, Written};
use std::collections::{HashMap, HashSet};

/// Recorded steps read at once: bounds what a caller holds beside its own
/// steps, uncounted by the memory budget (16 steps of the largest size the
/// input limits allow: about 13 MB, twice that while PostgreSQL's rows are
/// decoded).
pub const RETRY_LOOKUP_CHUNK: usize = 16;

/// How [`answer_retries`] answers a trace id that an earlier write of the
/// same call was answered as written under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepeatedIds {
    /// The writes are one request (a REST batch): a later copy stays the
    /// duplicate it was refused as, whichever copy matched.
    StayDuplicates,
    /// Each write is a request of its own (the lines of `cairn log
    /// --stdin`, as a repeated `POST /v1/steps`): each copy is answered as
    /// the first was.
    AnswerEach,
}

/// Whether `refused` (the refusal of a step that named its trace id) may
/// be a retry's: a duplicate trace id, which is compared with the step
/// recorded under it ([`answer_retries`], [`NewStep::retried`]).
pub fn may_be_retry(refused: &AppendError) -> bool {
    matches!(
        refused,
        AppendError::Refused(Refusal::DuplicateTraceId { .. })
    )
}

/// The outcomes of writes of steps, in their order, with each step refused
/// as a duplicate trace id answered as its first write when the step
/// recorded under that id is this very step (each outcome's step is the
/// copy kept of a write that named its trace id, `None` for the others).
///
/// The recorded steps are read [`RETRY_LOOKUP_CHUNK`] at a time, in one
/// query each where the store allows ([`LedgerStore::steps_by_trace`]). A
/// failed read answers nothing: those refusals stand.
pub fn answer_retries(
    store: &dyn LedgerStore,
    outcomes: Vec<(Option<NewStep>, Result<Written, AppendError>)>,
    repeats: RepeatedIds,
) -> Vec<Result<Written, AppendError>> {
    // Which outcomes may be retries: refused as a duplicate trace id.
    let candidates: Vec<Option<String>> = outcomes
        .iter()
        .map(|(retry, outcome)| {
            retry
                .as_ref()
                .and_then(|s| s.trace_id.clone())
                .filter(|_| outcome.as_ref().err().is_some_and(may_be_retry))
        })
        .collect();
    let mut recorded: HashMap<String, StoredStep> = HashMap::new();
    let mut read_until = 0;
    let mut answered = HashSet::new();
    outcomes
        .into_iter()
        .enumerate()
        .map(|(index, (retry, outcome))| {
            let trace_id = retry.as_ref().and_then(|s| s.trace_id.clone());
            let outcome = match (outcome, retry, &candidates[index]) {
                (Err(refused), Some(step), Some(id)) if !answered.contains(id) => {
                    if index >= read_until {
                        // The next chunk of candidates, from this one on
                        // (the previous chunk's steps are let go).
                        let chunk: Vec<(usize, &String)> = candidates[index..]
                            .iter()
                            .enumerate()
                            .filter_map(|(offset, id)| Some((index + offset, id.as_ref()?)))
                            .take(RETRY_LOOKUP_CHUNK)
                            .collect();
                        read_until = chunk.last().map_or(index, |&(last, _)| last) + 1;
                        let ids: Vec<String> = chunk.iter().map(|(_, id)| (*id).clone()).collect();
                        recorded = store
                            .steps_by_trace(&step.org_id, &ids)
                            .unwrap_or_default()
                            .into_iter()
                            .map(|s| (s.record.step.trace_id.clone(), s))
                            .collect();
                    }
                    recorded
                        .get(id)
                        .and_then(|stored| step.recorded_as(stored))
                        .ok_or(refused)
                }
                (outcome, _, _) => outcome,
            };
            if repeats == RepeatedIds::StayDuplicates
                && let (Ok(_), Some(id)) = (&outcome, trace_id)
            {
                answered.insert(id);
            }
            outcome
        })
        .collect()
}
