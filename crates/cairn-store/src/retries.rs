//! Answering retried writes: steps refused as duplicate trace ids that are
//! the very steps recorded under those ids ([`NewStep::recorded_as`]) are
//! answered as their first write was. One rule for every surface that
//! writes many steps at once (a REST batch, `cairn log --stdin`), reading
//! the recorded steps a chunk at a time.

use crate::{AppendError, LedgerStore, NewStep, Refusal, StoredStep, Written};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

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
/// failed read answers the steps it was to compare with the store's
/// failure (`AppendError::Store`: try again), not with the duplicate
/// refusals, which would tell a client that retried after a lost answer
/// that its step conflicts with another.
pub fn answer_retries(
    store: &dyn LedgerStore,
    outcomes: Vec<(Option<NewStep>, Result<Written, AppendError>)>,
    repeats: RepeatedIds,
) -> Vec<Result<Written, AppendError>> {
    answer_retries_with(|org, ids| store.steps_by_trace(org, ids), outcomes, repeats)
}

/// [`answer_retries`] with the recorded steps read through `lookup` (the
/// org and a chunk of trace ids).
fn answer_retries_with(
    mut lookup: impl FnMut(&str, &[String]) -> Result<Vec<StoredStep>, crate::StoreError>,
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
    let mut recorded: Result<HashMap<String, StoredStep>, Arc<crate::StoreError>> =
        Ok(HashMap::new());
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
                        recorded = lookup(&step.org_id, &ids)
                            .map(|steps| {
                                steps
                                    .into_iter()
                                    .map(|s| (s.record.step.trace_id.clone(), s))
                                    .collect()
                            })
                            .map_err(Arc::new);
                    }
                    match &recorded {
                        Ok(recorded) => recorded
                            .get(id)
                            .and_then(|stored| step.recorded_as(stored))
                            .ok_or(refused),
                        Err(failed) => Err(AppendError::Store(Arc::clone(failed))),
                    }
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

#[cfg(test)]
mod tests {
    use super::{RETRY_LOOKUP_CHUNK, RepeatedIds, answer_retries_with};
    use crate::{AppendError, NewStep, Refusal, StoreError};

    fn duplicate(i: usize) -> (Option<NewStep>, Result<crate::Written, AppendError>) {
        let id = format!("id-{i}");
        let step = NewStep {
            org_id: "org".into(),
            session_id: "s".into(),
            trace_id: Some(id.clone()),
            ..NewStep::default()
        };
        (
            Some(step),
            Err(AppendError::Refused(Refusal::DuplicateTraceId {
                trace_id: id,
            })),
        )
    }

    /// A failed read of the recorded steps answers the steps it was to
    /// compare with the store's failure, chunk by chunk; a chunk read
    /// that finds nothing leaves their duplicate refusals; other
    /// outcomes pass as they were.
    #[test]
    fn a_failed_read_is_the_stores_failure_not_a_duplicate() {
        let count = RETRY_LOOKUP_CHUNK + 3;
        let mut outcomes: Vec<_> = (0..count).map(duplicate).collect();
        let other = Err(AppendError::Refused(Refusal::InvalidRequest("bad".into())));
        outcomes.insert(1, (None, other));
        let mut reads = 0;
        let answers = answer_retries_with(
            |org, ids| {
                assert_eq!(org, "org");
                reads += 1;
                // The first chunk's read fails, the second finds nothing.
                if reads == 1 {
                    assert_eq!(ids.len(), RETRY_LOOKUP_CHUNK);
                    Err(StoreError::Corrupt("the read failed".into()))
                } else {
                    assert_eq!(ids.len(), 3);
                    Ok(Vec::new())
                }
            },
            outcomes,
            RepeatedIds::StayDuplicates,
        );
        assert_eq!(reads, 2);
        assert_eq!(answers.len(), count + 1);
        assert!(
            matches!(
                &answers[1],
                Err(AppendError::Refused(Refusal::InvalidRequest(_)))
            ),
            "{:?}",
            answers[1]
        );
        let failed = answers
            .iter()
            .filter(|a| matches!(a, Err(AppendError::Store(e)) if e.to_string().contains("the read failed")))
            .count();
        assert_eq!(failed, RETRY_LOOKUP_CHUNK);
        for answer in &answers[RETRY_LOOKUP_CHUNK + 1..] {
            assert!(
                matches!(
                    answer,
                    Err(AppendError::Refused(Refusal::DuplicateTraceId { .. }))
                ),
                "{answer:?}"
            );
        }
    }
}
