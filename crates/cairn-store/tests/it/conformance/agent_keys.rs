//! Agent keys as the writer sees them: bounded per org, read from the log
//! when first needed, and kept current across reopening and (PostgreSQL)
//! across the servers of a fleet.

use super::*;
use cairn_core::commit::agent_key_id;
use cairn_core::ed25519_dalek::SigningKey;

/// An admin's registration of the key of `seed`.
fn register(org: &str, agent: &str, seed: u8) -> WriteRequest {
    register_as(org, agent, seed, true)
}

fn register_as(org: &str, agent: &str, seed: u8, by_admin: bool) -> WriteRequest {
    WriteRequest::RegisterKey {
        org_id: org.into(),
        agent_id: agent.into(),
        public_key: SigningKey::from_bytes(&[seed; 32]).verifying_key(),
        by_admin,
    }
}

/// An admin's rotation.
fn rotate(agent: &str, old: u8, new: u8) -> WriteRequest {
    rotate_as(agent, old, new, true)
}

fn rotate_as(agent: &str, old: u8, new: u8, by_admin: bool) -> WriteRequest {
    WriteRequest::RotateKey {
        org_id: ORG.into(),
        agent_id: agent.into(),
        old_key_id: id_of(old),
        public_key: SigningKey::from_bytes(&[new; 32]).verifying_key(),
        by_admin,
    }
}

/// The refusal of a registration (or a rotation) past the bound.
fn full(held: u64, bound: u64, admins_only: bool, rotation: bool) -> Refusal {
    Refusal::TooManyKeys {
        held,
        bound,
        admins_only,
        rotation,
    }
}

fn id_of(seed: u8) -> String {
    agent_key_id(&SigningKey::from_bytes(&[seed; 32]).verifying_key())
}

fn registered(outcome: Result<Written, Refusal>) -> u64 {
    match outcome {
        Ok(Written::KeyRegistered { seq, .. }) => seq,
        other => panic!("expected a registration, got {other:?}"),
    }
}

/// An org's log registers at most the store's bound of keys, revoked ones
/// and rotations' new keys included, counted over committed batches and
/// the running one; a key registered again is answered, not refused; the
/// bound is per org; a reopened store counts and finds the keys its log
/// holds.
pub(crate) fn agent_keys_are_bounded_per_org(backend: &dyn Backend) {
    let store = backend.open_with_max_agent_keys("bounded-keys", 3);
    let one = |request: WriteRequest| {
        let mut outcomes = store.append_batch(&[request]).unwrap();
        outcomes.pop().unwrap()
    };
    let first = registered(one(register(ORG, "analyst", 1)));
    registered(one(register(ORG, "analyst", 2)));
    // A rotation registers a third key (the revoked one still counts).
    assert!(matches!(
        one(rotate("analyst", 1, 3)),
        Ok(Written::KeyRevoked {
            successor: Some(_),
            ..
        })
    ));
    let size = store.log_size(ORG).unwrap();
    assert_eq!(
        one(register(ORG, "analyst", 4)).unwrap_err(),
        full(3, 3, false, false)
    );
    // A rotation past the bound is refused whole: its old key stays.
    assert_eq!(
        one(rotate("analyst", 2, 5)).unwrap_err(),
        full(3, 3, false, true)
    );
    assert_eq!(
        store.log_size(ORG).unwrap(),
        size,
        "a refusal writes nothing"
    );
    // At the bound, a key the log holds is answered as before: a revoked
    // one as revoked, a live one with its registration.
    assert_eq!(
        one(register(ORG, "analyst", 1)).unwrap_err(),
        Refusal::KeyRevoked {
            key_id: id_of(1),
            seq: first + 2
        }
    );
    assert_eq!(registered(one(register(ORG, "analyst", 2))), first + 1);
    // Another org has its own bound; one batch counts its own
    // registrations: the fourth in it is refused, the three before it
    // written.
    let batch: Vec<WriteRequest> = (11..15).map(|seed| register("other", "a", seed)).collect();
    let outcomes = store.append_batch(&batch).unwrap();
    assert!(outcomes[..3].iter().all(|o| o.is_ok()), "{outcomes:?}");
    assert_eq!(outcomes[3].as_ref().unwrap_err(), &full(3, 3, false, false));
    drop(store);

    // Reopened: the keys are read from the log when first needed.
    let store = backend.open_with_max_agent_keys("bounded-keys", 3);
    assert_eq!(
        store
            .append_batch(&[register(ORG, "analyst", 6)])
            .unwrap()
            .pop()
            .unwrap()
            .unwrap_err(),
        full(3, 3, false, false)
    );
    drop(store);
    let store = backend.open_with_max_agent_keys("bounded-keys", 4);
    let outcomes = store
        .append_batch(&[
            // Known after reopening: a conflict, a revoked key, a rotation
            // of a live key (the fourth registration) ...
            register(ORG, "mallory", 2),
            register(ORG, "analyst", 1),
            rotate("analyst", 2, 7),
            // ... and nothing past the new bound.
            register(ORG, "analyst", 8),
        ])
        .unwrap();
    assert_eq!(
        outcomes[0].as_ref().unwrap_err(),
        &Refusal::KeyConflict {
            key_id: id_of(2),
            agent_id: "analyst".into()
        }
    );
    assert!(matches!(
        outcomes[1].as_ref().unwrap_err(),
        &Refusal::KeyRevoked { .. }
    ));
    assert!(outcomes[2].is_ok(), "{:?}", outcomes[2]);
    assert_eq!(outcomes[3].as_ref().unwrap_err(), &full(4, 4, false, false));
    assert_verifies(store.as_ref());
}

/// The last tenth of the bound is an admin's: others' registrations and
/// rotations stop at nine tenths, so that a writer's key registering in a
/// loop cannot leave the org's admins unable to rotate a leaked key; an
/// admin stops at the bound; each refusal says which.
pub(crate) fn the_last_tenth_of_the_bound_is_for_admins(backend: &dyn Backend) {
    let store = backend.open_with_max_agent_keys("admin-keys", 10);
    let one = |request: WriteRequest| store.append_batch(&[request]).unwrap().pop().unwrap();
    for seed in 1..=9 {
        registered(one(register_as(ORG, "bot", seed, false)));
    }
    assert_eq!(
        one(register_as(ORG, "bot", 10, false)).unwrap_err(),
        full(9, 10, true, false)
    );
    assert_eq!(
        one(rotate_as("bot", 1, 10, false)).unwrap_err(),
        full(9, 10, true, true)
    );
    // The admin rotates the leaked key with the tenth left to admins.
    assert!(one(rotate("bot", 1, 10)).is_ok());
    assert_eq!(
        one(register(ORG, "analyst", 11)).unwrap_err(),
        full(10, 10, false, false)
    );
    assert_eq!(
        one(register_as(ORG, "bot", 11, false)).unwrap_err(),
        full(10, 10, false, false)
    );
    // Revoking alone is never refused.
    assert!(
        one(WriteRequest::RevokeKey {
            org_id: ORG.into(),
            agent_id: "bot".into(),
            key_id: id_of(2),
            reason: "leaked".into(),
        })
        .is_ok()
    );
    // The admins' tenth is rounded up: under a bound of 1 it is the one
    // key.
    let tiny = backend.open_with_max_agent_keys("tiny-keys", 1);
    let on_tiny = |request: WriteRequest| tiny.append_batch(&[request]).unwrap().pop().unwrap();
    assert_eq!(
        on_tiny(register_as(ORG, "bot", 1, false)).unwrap_err(),
        full(0, 1, true, false)
    );
    registered(on_tiny(register(ORG, "bot", 1)));
    let message = full(9, 10, true, true).to_string();
    assert!(
        message.contains("ask an admin") && message.contains("the old key is still live"),
        "{message}"
    );
}

/// Two servers on one database (PostgreSQL): each sees the key records the
/// other wrote since it last read the org's keys (registrations,
/// revocations, and their count against the bound).
pub(crate) fn servers_see_each_others_keys(backend: &dyn Backend) {
    let a = backend.open_with_max_agent_keys("fleet-keys", 3);
    let Some(b) = backend.open_beside("fleet-keys") else {
        return;
    };
    let on = |store: &Arc<dyn LedgerStore>, request: WriteRequest| {
        store.append_batch(&[request]).unwrap().pop().unwrap()
    };
    // Server a reads the org's keys (and caches them).
    registered(on(&a, register(ORG, "analyst", 1)));
    // Server b registers a key and revokes a's.
    registered(on(&b, register(ORG, "analyst", 2)));
    assert!(
        on(
            &b,
            WriteRequest::RevokeKey {
                org_id: ORG.into(),
                agent_id: "analyst".into(),
                key_id: id_of(1),
                reason: "stolen".into(),
            }
        )
        .is_ok()
    );
    // Server a knows both.
    assert_eq!(
        on(&a, register(ORG, "mallory", 2)).unwrap_err(),
        Refusal::KeyConflict {
            key_id: id_of(2),
            agent_id: "analyst".into()
        }
    );
    assert!(matches!(
        on(&a, register(ORG, "analyst", 1)).unwrap_err(),
        Refusal::KeyRevoked { .. }
    ));
    // And counts b's registration: a third fits, a fourth does not.
    registered(on(&b, register(ORG, "analyst", 3)));
    assert_eq!(
        on(&a, register(ORG, "analyst", 4)).unwrap_err(),
        full(3, 3, false, false)
    );
    assert_verifies(a.as_ref());
}

/// Keys kept across a listing's sessions (`OrgKeys`) and brought up to
/// date as records are appended between them give, for every agent, what
/// a fresh read of the log gives: registrations, revocations (also of keys
/// registered after an earlier read) and rotations of the agent and of
/// another agent, in every order; and keys already handed out do not move.
pub(crate) fn kept_agent_keys_follow_the_log(backend: &dyn Backend) {
    let store = backend.open("kept-agent-keys");
    let on = |request: WriteRequest| store.append_batch(&[request]).unwrap().pop().unwrap();
    let revoke = |agent: &str, seed: u8| WriteRequest::RevokeKey {
        org_id: ORG.into(),
        agent_id: agent.into(),
        key_id: id_of(seed),
        reason: "rotated out".into(),
    };
    let fresh = |agent: &str| {
        cairn_store::ops::OrgKeys::default()
            .agent_keys(store.as_ref(), ORG, agent)
            .unwrap()
    };
    let mut kept = cairn_store::ops::OrgKeys::default();
    let check = |kept: &mut cairn_store::ops::OrgKeys| {
        for agent in ["analyst", "other", "nobody"] {
            let keys = kept.agent_keys(store.as_ref(), ORG, agent).unwrap();
            assert_eq!(*keys, *fresh(agent), "{agent}");
        }
    };
    registered(on(register(ORG, "analyst", 1)));
    registered(on(register(ORG, "other", 2)));
    check(&mut kept);
    let first = kept.agent_keys(store.as_ref(), ORG, "analyst").unwrap();
    let before = (*first).clone();
    on(revoke("analyst", 1)).unwrap();
    registered(on(register(ORG, "analyst", 3)));
    on(rotate("analyst", 3, 4)).unwrap();
    on(revoke("other", 2)).unwrap();
    check(&mut kept);
    assert_eq!(*first, before);
    registered(on(register(ORG, "analyst", 5)));
    on(revoke("analyst", 5)).unwrap();
    on(revoke("analyst", 4)).unwrap();
    registered(on(register(ORG, "other", 6)));
    check(&mut kept);
    // A revocation read before the key it revokes was read for this
    // agent (another agent's listing read it first).
    registered(on(register(ORG, "analyst", 7)));
    on(revoke("analyst", 7)).unwrap();
    kept.agent_keys(store.as_ref(), ORG, "other").unwrap();
    check(&mut kept);
    // ... and one of a key this agent's keys already hold.
    registered(on(register(ORG, "analyst", 8)));
    check(&mut kept);
    on(revoke("analyst", 8)).unwrap();
    kept.agent_keys(store.as_ref(), ORG, "other").unwrap();
    check(&mut kept);
    assert_ne!(
        *kept.agent_keys(store.as_ref(), ORG, "analyst").unwrap(),
        before
    );
}
