//! The semantic-search half of the backend contract: the embedding queue
//! (sampling, background embedding, parking, fairness across orgs, the
//! store's chosen embedder), tagged vectors, reindexing, and erasure
//! removing vectors; run by `conformance::run_all` on every backend.

use crate::conformance::{Backend, ORG, append, assert_verifies, ledger, step};
use cairn_store::{LedgerStore, NewStep, WriteRequest, Written};
use std::sync::Arc;

/// Every test of this module, on `backend`.
pub(crate) fn run_all(backend: &dyn Backend) {
    sampled_steps_are_searchable(backend);
    a_step_the_embedder_refuses_is_parked_not_blocking(backend);
    the_queue_is_taken_oldest_first_across_orgs(backend);
    orgs_take_turns_in_the_queue(backend);
    only_the_stores_embedder_takes_from_the_queue(backend);
    vectors_replaced_in_place_are_searched_at_once(backend);
}

/// An embedder that is not the word hash (another "model"), or one whose
/// service is down.
#[derive(Debug)]
struct OtherEmbedder {
    fails: bool,
}

impl cairn_store::embed::Embedder for OtherEmbedder {
    fn id(&self) -> &str {
        "test-other"
    }
    fn description(&self) -> &str {
        "another embedder"
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, cairn_store::embed::EmbedError> {
        if self.fails {
            return Err(cairn_store::embed::EmbedError("down".into()));
        }
        cairn_store::embed::WordHash.embed(texts)
    }
}

fn drain(store: &dyn LedgerStore, embedder: &dyn cairn_store::embed::Embedder) -> u64 {
    cairn_store::ops::drain_queue(store, embedder, 7, &mut |_| {}).unwrap()
}

fn sampled_steps_are_searchable(backend: &dyn Backend) {
    use cairn_store::embed::{WORD_HASH_ID, WordHash, embed, should_embed};
    let store = backend.open("search");
    assert!(
        (store.embedding_sample_rate() - 0.1).abs() < 1e-9,
        "seed 000's default rate"
    );
    let ledger = ledger(Arc::clone(&store));
    let Written::Step {
        trace_id: pricing, ..
    } = append(
        &ledger,
        step(
            "s1",
            "Decision",
            "Raise the enterprise price by five percent next quarter",
        ),
    )
    .unwrap()
    else {
        panic!()
    };
    append(
        &ledger,
        step(
            "s1",
            "FinalAnswer",
            "The weather in Lisbon will be sunny tomorrow",
        ),
    )
    .unwrap();
    append(&ledger, step("s1", "Error", "The orders query timed out")).unwrap();
    // Observations are sampled at 10%: of 40, some but not all are embedded.
    // Sampling follows the trace id, so fixed ids make this deterministic.
    let mut sampled = 0;
    for i in 0..40 {
        let mut s = step("s2", "Observation", &format!("observation number {i}"));
        s.trace_id = Some(format!("observation-{i:02}"));
        sampled += u64::from(should_embed(
            cairn_core::kind::StepKind::Observation,
            s.trace_id.as_deref().unwrap(),
            0.1,
        ));
        append(&ledger, s).unwrap();
    }
    assert!((1..40).contains(&sampled), "{sampled} of 40 sampled");
    let embedded_in = |session: &str| {
        let mut embedded = 0;
        store
            .read_session(ORG, session, &mut |s| {
                embedded += u64::from(s.record.has_embedding);
                true
            })
            .unwrap();
        embedded
    };
    // Ingest only queued them: no vector yet, nothing found by meaning.
    assert_eq!(store.embedding_backlog().unwrap().waiting, 3 + sampled);
    assert_eq!(embedded_in("s2"), 0);
    let query = embed("decision about enterprise pricing");
    assert!(
        store
            .semantic_search(ORG, WORD_HASH_ID, &query, 3)
            .unwrap()
            .is_empty()
    );
    // A failing embedder leaves the queue as it was.
    assert!(
        cairn_store::ops::embed_queued(store.as_ref(), &OtherEmbedder { fails: true }, 8).is_err()
    );
    assert_eq!(store.embedding_backlog().unwrap().waiting, 3 + sampled);
    assert_eq!(drain(store.as_ref(), &WordHash), 3 + sampled);
    assert_eq!(store.embedding_backlog().unwrap().waiting, 0);
    assert_eq!(embedded_in("s2"), sampled);
    assert_eq!(embedded_in("s1"), 3);
    assert_eq!(
        store.vectors_by_embedder().unwrap(),
        [(WORD_HASH_ID.to_owned(), 3 + sampled)]
    );
    let hits = store.semantic_search(ORG, WORD_HASH_ID, &query, 3).unwrap();
    assert!(hits.len() == 3 && hits[0].1 > hits[1].1, "{hits:?}");
    let best = store.step_by_trace(ORG, &pricing).unwrap().unwrap();
    assert_eq!(hits[0].0, best.seq);
    // Vectors of another embedder are not compared with this one's.
    assert!(
        store
            .semantic_search(ORG, "test-other", &query, 3)
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .semantic_search("other-org", WORD_HASH_ID, &embed("pricing"), 3)
            .unwrap()
            .is_empty()
    );
    // A step erased while queued leaves the queue without a vector.
    let Written::Step {
        trace_id: queued, ..
    } = append(
        &ledger,
        step("s3", "Decision", "Lower the enterprise price for schools"),
    )
    .unwrap()
    else {
        panic!()
    };
    ledger
        .write(WriteRequest::Erase {
            org_id: ORG.into(),
            trace_id: queued.clone(),
            reason: "test".into(),
            actor: "test".into(),
        })
        .unwrap();
    append(
        &ledger,
        step("s3", "Decision", "Keep the enterprise price for charities"),
    )
    .unwrap();
    assert_eq!(drain(store.as_ref(), &WordHash), 1);
    assert_eq!(embedded_in("s3"), 1);
    // Erasure removes the vector with the content.
    ledger
        .write(WriteRequest::Erase {
            org_id: ORG.into(),
            trace_id: pricing.clone(),
            reason: "test".into(),
            actor: "test".into(),
        })
        .unwrap();
    let hits = store
        .semantic_search(ORG, WORD_HASH_ID, &query, 10)
        .unwrap();
    assert!(hits.iter().all(|(seq, _)| *seq != best.seq));
    assert!(
        !store
            .step_by_trace(ORG, &pricing)
            .unwrap()
            .unwrap()
            .record
            .has_embedding
    );
    // Reindexing with another embedder replaces every vector (the flag
    // stays set) and skips erased steps.
    let queued_again = store.queue_reindex(Some(ORG)).unwrap();
    assert_eq!(queued_again, 3 + sampled);
    assert_eq!(store.queue_reindex(Some("no-such-org")).unwrap(), 0);
    assert_eq!(
        drain(store.as_ref(), &OtherEmbedder { fails: false }),
        3 + sampled
    );
    assert_eq!(
        store.vectors_by_embedder().unwrap(),
        [("test-other".to_owned(), 3 + sampled)]
    );
    assert!(
        store
            .semantic_search(ORG, WORD_HASH_ID, &query, 3)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .semantic_search(ORG, "test-other", &query, 50)
            .unwrap()
            .len() as u64,
        3 + sampled
    );
    assert_eq!(embedded_in("s2"), sampled);
    assert_verifies(store.as_ref());
}

/// Refuses texts over 2,000 characters, as services with a token limit
/// and no truncation do.
#[derive(Debug)]
struct RefusesLongTexts;

impl cairn_store::embed::Embedder for RefusesLongTexts {
    fn id(&self) -> &str {
        cairn_store::embed::WORD_HASH_ID
    }
    fn description(&self) -> &str {
        "refuses long texts"
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, cairn_store::embed::EmbedError> {
        if texts.iter().any(|t| t.chars().count() > 2_000) {
            return Err(cairn_store::embed::EmbedError("input too long".into()));
        }
        cairn_store::embed::WordHash.embed(texts)
    }
}

fn org_step(org: &str, session: &str, content: &str) -> NewStep {
    NewStep {
        org_id: org.into(),
        ..step(session, "Decision", content)
    }
}

/// One step the embedder cannot take does not hold up the others (of any
/// org): refused alone, it counts attempts and is parked after five; the
/// rest is embedded; `queue_reindex` gives it its attempts back.
fn a_step_the_embedder_refuses_is_parked_not_blocking(backend: &dyn Backend) {
    use cairn_store::embed::{MAX_ATTEMPTS, WORD_HASH_ID, embed};
    let store = backend.open("poison");
    let ledger = ledger(Arc::clone(&store));
    append(&ledger, org_step("evil", "s", &"word ".repeat(1_000))).unwrap();
    append(&ledger, org_step("victim", "s", "retire the airship fleet")).unwrap();
    let round = cairn_store::ops::embed_queued(store.as_ref(), &RefusesLongTexts, 32).unwrap();
    assert_eq!((round.settled, round.refused), (1, 1));
    let victim = store
        .semantic_search("victim", WORD_HASH_ID, &embed("airship fleet"), 5)
        .unwrap();
    assert_eq!(victim.len(), 1, "the other org's step was embedded");
    // A service that is down refuses everything, the probe too: nothing
    // is counted.
    for _ in 0..3 {
        assert!(
            cairn_store::ops::embed_queued(store.as_ref(), &OtherEmbedder { fails: true }, 32)
                .is_err()
        );
    }
    assert_eq!(
        store.embedding_backlog().unwrap(),
        cairn_store::EmbeddingBacklog {
            waiting: 1,
            parked: 0
        }
    );
    // Refused alone while the service answers the probe: each round counts
    // an attempt, up to parking, even with nothing else queued.
    for _ in 1..MAX_ATTEMPTS {
        let round = cairn_store::ops::embed_queued(store.as_ref(), &RefusesLongTexts, 1).unwrap();
        assert_eq!((round.settled, round.refused), (0, 1));
    }
    assert_eq!(
        store.embedding_backlog().unwrap(),
        cairn_store::EmbeddingBacklog {
            waiting: 0,
            parked: 1
        }
    );
    assert_eq!(
        cairn_store::ops::drain_queue(store.as_ref(), &RefusesLongTexts, 32, &mut |_| {}).unwrap(),
        0
    );
    // Reindex unparks it (and queues the rest again).
    store.queue_reindex(Some("evil")).unwrap();
    assert_eq!(store.embedding_backlog().unwrap().parked, 0);
    assert_eq!(
        cairn_store::ops::drain_queue(
            store.as_ref(),
            &cairn_store::embed::WordHash,
            32,
            &mut |_| {}
        )
        .unwrap(),
        1
    );
    ledger.close();
}

/// The queue is taken in the order steps were queued within each org and
/// within each turn, whatever the orgs' numbers.
fn the_queue_is_taken_oldest_first_across_orgs(backend: &dyn Backend) {
    let store = backend.open("fair");
    let ledger = ledger(Arc::clone(&store));
    append(&ledger, org_step("first", "s", "creates org one")).unwrap();
    cairn_store::ops::drain_queue(
        store.as_ref(),
        &cairn_store::embed::WordHash,
        8,
        &mut |_| {},
    )
    .unwrap();
    append(&ledger, org_step("second", "s", "the oldest queued step")).unwrap();
    for i in 0..3 {
        append(&ledger, org_step("first", "s", &format!("newer step {i}"))).unwrap();
    }
    // Two orgs, a claim of two: each org's oldest, in queue order.
    let claimed = store.claim_embeddings(2).unwrap();
    let texts: Vec<_> = claimed.iter().map(|p| p.text.as_deref()).collect();
    assert_eq!(
        texts,
        [Some("the oldest queued step"), Some("newer step 0")]
    );
    let ids: Vec<i64> = claimed.iter().map(|p| p.id).collect();
    store.release_embeddings(&ids, false).unwrap();
    ledger.close();
}

/// Orgs take turns: a burst one org queued first does not keep another
/// org's step waiting behind it (a batch takes each org's oldest step in
/// turn), and within each org the queue's order holds.
fn orgs_take_turns_in_the_queue(backend: &dyn Backend) {
    let store = backend.open("turns");
    let ledger = ledger(Arc::clone(&store));
    for i in 0..40 {
        append(&ledger, org_step("burst", "s", &format!("burst step {i}"))).unwrap();
    }
    append(&ledger, org_step("quiet", "q", "the quiet org's step")).unwrap();
    let claimed = store.claim_embeddings(4).unwrap();
    let texts: Vec<_> = claimed.iter().map(|p| p.text.clone().unwrap()).collect();
    assert_eq!(
        texts,
        [
            "burst step 0",
            "burst step 1",
            "burst step 2",
            "the quiet org's step"
        ],
        "{texts:?}"
    );
    let ids: Vec<i64> = claimed.iter().map(|p| p.id).collect();
    store.release_embeddings(&ids, false).unwrap();
    ledger.close();
}

/// Once a store's embedder is chosen, a process with another one takes
/// nothing from the queue (its vectors would be invisible to the
/// servers' searches).
fn only_the_stores_embedder_takes_from_the_queue(backend: &dyn Backend) {
    use cairn_store::embed::WORD_HASH_ID;
    let store = backend.open("chosen");
    assert_eq!(store.chosen_embedder().unwrap(), None);
    assert_eq!(store.choose_embedder("test-other").unwrap(), None);
    assert_eq!(
        store.choose_embedder(WORD_HASH_ID).unwrap().as_deref(),
        Some("test-other")
    );
    let ledger = ledger(Arc::clone(&store));
    append(&ledger, step("s", "Decision", "a decision")).unwrap();
    let refused =
        cairn_store::ops::embed_queued(store.as_ref(), &OtherEmbedder { fails: false }, 8);
    assert!(
        matches!(
            refused,
            Err(cairn_store::ops::EmbedQueueError::OtherEmbedder { .. })
        ),
        "{refused:?}"
    );
    assert_eq!(store.embedding_backlog().unwrap().waiting, 1);
    assert_eq!(drain(store.as_ref(), &cairn_store::embed::WordHash), 1);
    assert_eq!(
        store.chosen_embedder().unwrap().as_deref(),
        Some(WORD_HASH_ID)
    );
    ledger.close();
}

/// The same embedder id with other vectors (a service that updated its
/// model under the same name), after `cairn reindex`.
#[derive(Debug)]
struct UpdatedModel;

impl cairn_store::embed::Embedder for UpdatedModel {
    fn id(&self) -> &str {
        cairn_store::embed::WORD_HASH_ID
    }
    fn description(&self) -> &str {
        "updated"
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, cairn_store::embed::EmbedError> {
        Ok(texts
            .iter()
            .map(|_| cairn_store::embed::embed("airship fleet").to_vec())
            .collect())
    }
}

/// Vectors replaced under the same ids and embedder are what the next
/// search compares with (the in-memory index reloads them).
fn vectors_replaced_in_place_are_searched_at_once(backend: &dyn Backend) {
    use cairn_store::embed::{WORD_HASH_ID, WordHash, embed};
    let store = backend.open("replaced");
    let ledger = ledger(Arc::clone(&store));
    for content in ["retire the airship fleet", "lower prices", "hire a pilot"] {
        append(&ledger, step("s", "Decision", content)).unwrap();
    }
    drain(store.as_ref(), &WordHash);
    let query = embed("airship fleet");
    let before = store.semantic_search(ORG, WORD_HASH_ID, &query, 3).unwrap();
    assert!(before[2].1 < 0.9, "{before:?}");
    store.queue_reindex(Some(ORG)).unwrap();
    drain(store.as_ref(), &UpdatedModel);
    let after = store.semantic_search(ORG, WORD_HASH_ID, &query, 3).unwrap();
    assert!(after.iter().all(|(_, s)| *s > 0.999), "{after:?}");
    ledger.close();
}
