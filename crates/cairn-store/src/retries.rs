//! Answering retried writes: steps refused as duplicate trace ids that are
//! the very steps recorded under those ids ([`NewStep::recorded_as`]) are
//! answered as their first write was. One rule for every surface that
//! writes many steps at once (a REST batch, `cairn log --stdin`), reading
//! the recorded steps a chunk at a time.

use crate::{AppendError, LedgerStore, NewStep, Refusal, StoredStep, Written};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Candidates whose recorded steps are read at once (each id once): bounds
/// what a caller holds beside its own steps, uncounted by the memory
/// budget. A recorded step is held parsed to be compared, and a payload
/// of many small values takes tens of times its stored text parsed (the
/// largest step the input limits allow, three payloads of 130,000 zeros,
/// about 12 MB): four such steps, about 50 MB. The server runs these
/// comparisons on its CPU pool, one per core at a time, so that requests
/// naming taken trace ids cannot hold many such reads at once (32 batches
/// of 16 such ids had held 5.8 GB).
pub const RETRY_LOOKUP_CHUNK: usize = 4;

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
/// query each where the store allows ([`LedgerStore::steps_by_trace`]).
/// When a chunk's read fails on a row that does not decode, its steps are
/// read one at a time, so that one unreadable row fails only the step
/// that names it; any other failure fails the chunk's steps. Such a step
/// is answered with the store's failure (`AppendError::Store`: try again),
/// not with the duplicate refusal, which would tell a client that retried
/// after a lost answer that its step conflicts with another.
pub fn answer_retries(
    store: &dyn LedgerStore,
    outcomes: Vec<(Option<NewStep>, Result<Written, AppendError>)>,
    repeats: RepeatedIds,
) -> Vec<Result<Written, AppendError>> {
    answer_retries_with(|org, ids| store.steps_by_trace(org, ids), outcomes, repeats)
}

/// The recorded steps' answers (each step's, in order), if `steps` (the
/// steps of a turn's write, [`crate::WriteRequest::Turn`], refused as a
/// duplicate trace id) are the very steps recorded under their trace ids
/// ([`NewStep::recorded_as`]), standing one after the other in the org's
/// log in this order, as a turn's write leaves them: what a turn retried
/// after its answer was lost meets. Which write recorded them is not
/// asked (as a batch's items are answered whichever write recorded them):
/// a part of a recorded turn, or steps recorded one after the other by
/// other writes with the same fields, match too; nothing is written twice
/// either way. A step that gave no `turn_step` matches whatever number it
/// was recorded with. `None` when a step names no trace id (a thinking
/// text's phases never do: such a turn is never recognised), when one is
/// not recorded or differs, or when the recorded steps do not stand one
/// after the other in this order. The recorded steps are read
/// [`RETRY_LOOKUP_CHUNK`] at a time, the reading stopping at the first
/// that differs; a failed read is the store's failure (try again), never
/// the refusal.
pub fn turn_retried(
    store: &dyn LedgerStore,
    steps: &[NewStep],
) -> Result<Option<Vec<Written>>, crate::StoreError> {
    let Some(first) = steps.first() else {
        return Ok(None);
    };
    let Some(ids) = steps
        .iter()
        .map(|s| s.trace_id.clone())
        .collect::<Option<Vec<String>>>()
    else {
        return Ok(None);
    };
    let mut written: Vec<Written> = Vec::with_capacity(steps.len());
    let mut first_seq = None;
    let all = visit_recorded(store, &first.org_id, &ids, &mut |index, stored| {
        // One write's steps take consecutive positions in the org's log,
        // in the order the write gave them.
        let first = *first_seq.get_or_insert(stored.seq);
        if stored.seq.checked_sub(first) != Some(index as u64) {
            return false;
        }
        match steps[index].recorded_as_numbered(&stored, true) {
            Some(answer) => {
                written.push(answer);
                true
            }
            None => false,
        }
    })?;
    Ok(all.then_some(written))
}

/// Gives `each` the step recorded under each of `ids` (of `org_id`), in
/// the order of `ids`, with its index there, reading them
/// [`RETRY_LOOKUP_CHUNK`] at a time (each held parsed only until `each`
/// has it and the rest of its chunk is read): what a retry's comparison
/// with what is recorded reads. `Ok(false)` as soon as an id has no
/// recorded step or `each` answers false; a failed read is the store's
/// failure.
pub fn visit_recorded(
    store: &dyn LedgerStore,
    org_id: &str,
    ids: &[String],
    each: &mut dyn FnMut(usize, StoredStep) -> bool,
) -> Result<bool, crate::StoreError> {
    for (chunk_at, chunk) in ids.chunks(RETRY_LOOKUP_CHUNK).enumerate() {
        let mut recorded: HashMap<String, StoredStep> = store
            .steps_by_trace(org_id, chunk)?
            .into_iter()
            .map(|s| (s.record.step.trace_id.clone(), s))
            .collect();
        for (offset, id) in chunk.iter().enumerate() {
            let Some(stored) = recorded.remove(id) else {
                return Ok(false);
            };
            if !each(chunk_at * RETRY_LOOKUP_CHUNK + offset, stored) {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// The recorded steps of a chunk of ids by trace id, or the failed read
/// that stands for an id's step.
type Recorded = HashMap<String, Result<StoredStep, Arc<crate::StoreError>>>;

/// Reads the recorded steps of `ids` at once; when that read fails on a
/// row that does not decode, one id at a time, each failed read kept as
/// the answer for its id.
fn read_chunk(
    lookup: &mut impl FnMut(&str, &[String]) -> Result<Vec<StoredStep>, crate::StoreError>,
    org: &str,
    ids: &[String],
) -> Recorded {
    match lookup(org, ids) {
        Ok(steps) => steps
            .into_iter()
            .map(|s| (s.record.step.trace_id.clone(), Ok(s)))
            .collect(),
        // A row that does not decode fails the read of its chunk: each id
        // is read alone, so that it fails only its own step. Any other
        // failure (the database unreachable) would fail each read again.
        Err(crate::StoreError::Corrupt(_)) if ids.len() > 1 => ids
            .iter()
            .flat_map(|id| read_chunk(lookup, org, std::slice::from_ref(id)))
            .collect(),
        Err(failed) => {
            let failed = Arc::new(failed);
            ids.iter()
                .map(|id| (id.clone(), Err(Arc::clone(&failed))))
                .collect()
        }
    }
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
    let mut recorded = Recorded::new();
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
                        // Each id read once, however often the chunk names it.
                        let mut ids: Vec<String> = Vec::with_capacity(chunk.len());
                        for (_, id) in &chunk {
                            if !ids.contains(id) {
                                ids.push((*id).clone());
                            }
                        }
                        recorded = read_chunk(&mut lookup, &step.org_id, &ids);
                    }
                    match recorded.get(id) {
                        Some(Ok(stored)) => step.recorded_as(stored).ok_or(refused),
                        Some(Err(failed)) => Err(AppendError::Store(Arc::clone(failed))),
                        None => Err(refused),
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

    /// A chunk reads each trace id once, however often its steps name it.
    #[test]
    fn a_chunk_reads_each_id_once() {
        let outcomes: Vec<_> = (0..RETRY_LOOKUP_CHUNK).map(|_| duplicate(7)).collect();
        let mut reads = Vec::new();
        let answers = answer_retries_with(
            |_, ids| {
                reads.push(ids.to_vec());
                Ok(Vec::new())
            },
            outcomes,
            RepeatedIds::AnswerEach,
        );
        assert_eq!(reads, [vec!["id-7".to_owned()]]);
        assert_eq!(answers.len(), RETRY_LOOKUP_CHUNK);
    }

    /// A chunk whose read fails on a row that does not decode is read
    /// again one id at a time: the one step whose recorded row cannot be
    /// read is answered with the store's failure, the others of its chunk
    /// as their rows say (here none is recorded: they stay duplicates). A
    /// chunk whose read fails otherwise (the database gone) is not read
    /// again: its steps are answered with the failure. Other outcomes
    /// pass as they were.
    #[test]
    fn a_failed_read_fails_only_the_step_it_names() {
        let count = RETRY_LOOKUP_CHUNK + 3;
        let unreadable = "id-1".to_owned();
        let mut outcomes: Vec<_> = (0..count).map(duplicate).collect();
        let other = Err(AppendError::Refused(Refusal::InvalidRequest("bad".into())));
        outcomes.insert(1, (None, other));
        let mut reads = Vec::new();
        let answers = answer_retries_with(
            |org, ids| {
                assert_eq!(org, "org");
                reads.push(ids.len());
                if ids.contains(&unreadable) {
                    Err(StoreError::Corrupt("the row does not parse".into()))
                } else if ids.len() == 3 {
                    Err(StoreError::Closed)
                } else {
                    Ok(Vec::new())
                }
            },
            outcomes,
            RepeatedIds::StayDuplicates,
        );
        // The first chunk, each of its ids alone, then the second chunk.
        let mut expected = vec![RETRY_LOOKUP_CHUNK];
        expected.extend(std::iter::repeat_n(1, RETRY_LOOKUP_CHUNK));
        expected.push(3);
        assert_eq!(reads, expected);
        assert_eq!(answers.len(), count + 1);
        for (i, answer) in answers.iter().enumerate() {
            match i {
                1 => assert!(
                    matches!(
                        answer,
                        Err(AppendError::Refused(Refusal::InvalidRequest(_)))
                    ),
                    "{answer:?}"
                ),
                // id-1, after the other outcome inserted at 1.
                2 => assert!(
                    matches!(answer, Err(AppendError::Store(e)) if e.to_string().contains("does not parse")),
                    "{answer:?}"
                ),
                // The second chunk, whose read failed as a whole.
                i if i > RETRY_LOOKUP_CHUNK => assert!(
                    matches!(answer, Err(AppendError::Store(e)) if matches!(**e, StoreError::Closed)),
                    "{i}: {answer:?}"
                ),
                _ => assert!(
                    matches!(
                        answer,
                        Err(AppendError::Refused(Refusal::DuplicateTraceId { .. }))
                    ),
                    "{i}: {answer:?}"
                ),
            }
        }
    }
}
