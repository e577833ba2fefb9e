//! What the store keeps beside the log through every backend: witnesses'
//! cosignatures and API keys (stored hashed, revocable, the last admin
//! key kept).

use super::*;

/// Witnesses' cosignature lines: kept per org, checkpoint size and witness,
/// in witness order; a witness's later line replaces its earlier one.
pub(super) fn cosignatures_are_kept_per_checkpoint_and_witness(backend: &dyn Backend) {
    let store = backend.open("cosignatures");
    assert!(store.cosignatures(ORG, 5).unwrap().is_empty());
    store
        .put_cosignature(ORG, 5, "w2.example", "— w2.example BBBB")
        .unwrap();
    store
        .put_cosignature(ORG, 5, "w1.example", "— w1.example AAAA")
        .unwrap();
    store
        .put_cosignature(ORG, 6, "w1.example", "— w1.example CCCC")
        .unwrap();
    store
        .put_cosignature("other", 5, "w1.example", "— w1.example DDDD")
        .unwrap();
    assert_eq!(
        store.cosignatures(ORG, 5).unwrap(),
        ["— w1.example AAAA", "— w2.example BBBB"]
    );
    store
        .put_cosignature(ORG, 5, "w1.example", "— w1.example EEEE")
        .unwrap();
    assert_eq!(
        store.cosignatures(ORG, 5).unwrap(),
        ["— w1.example EEEE", "— w2.example BBBB"]
    );
    assert_eq!(
        store.cosignatures("other", 5).unwrap(),
        ["— w1.example DDDD"]
    );
}

pub(super) fn api_keys_are_stored_hashed_and_revocable(backend: &dyn Backend) {
    use cairn_store::{ApiKey, Role, token_hash};
    let store = backend.open("keys");
    let now = Timestamp::from_micros(1_800_000_000_000_000).unwrap();
    let (writer, token) =
        ApiKey::generate(ORG, Role::Writer, Some("analyst"), "agent key", now).unwrap();
    let (admin, admin_token) = ApiKey::generate(ORG, Role::Admin, None, "bootstrap", now).unwrap();
    store.put_api_key(&writer).unwrap();
    store.put_api_key(&admin).unwrap();
    assert!(token.starts_with(&format!("cairn_{}_", writer.id)));
    assert_ne!(token, admin_token);
    assert_eq!(
        store.api_key_by_hash(&token_hash(&token)).unwrap(),
        Some(writer.clone())
    );
    assert_eq!(
        store
            .api_key_by_hash(&token_hash("cairn_nope_nope"))
            .unwrap(),
        None
    );
    assert_eq!(store.api_keys(ORG).unwrap().len(), 2);
    assert!(store.api_keys("other").unwrap().is_empty());
    // An org with keys and no log yet is listed once.
    let (late, _) = ApiKey::generate("b-late", Role::Reader, None, "", now).unwrap();
    store.put_api_key(&late).unwrap();
    assert_eq!(store.key_orgs().unwrap(), [ORG, "b-late"]);
    assert!(
        !store.revoke_api_key("other", &writer.id, now).unwrap(),
        "keys of another org cannot be revoked"
    );
    assert!(store.revoke_api_key(ORG, &writer.id, now).unwrap());
    assert_eq!(
        store
            .api_key_by_hash(&token_hash(&token))
            .unwrap()
            .unwrap()
            .revoked_at,
        Some(now)
    );
    assert!(!store.revoke_api_key(ORG, &writer.id, now).unwrap());
    // A key made to expire keeps its end, and is usable until then only.
    let (mut expiring, expiring_token) =
        ApiKey::generate(ORG, Role::Reader, None, "a day", now).unwrap();
    let end = Timestamp::from_micros(now.as_micros() + 86_400_000_000).unwrap();
    expiring.expires_at = Some(end);
    store.put_api_key(&expiring).unwrap();
    let read = store
        .api_key_by_hash(&token_hash(&expiring_token))
        .unwrap()
        .unwrap();
    assert_eq!(read, expiring);
    assert!(read.usable_at(now));
    assert!(!read.usable_at(end));
    assert_eq!(
        store
            .api_keys(ORG)
            .unwrap()
            .iter()
            .find(|k| k.id == expiring.id),
        Some(&expiring)
    );
}

/// The org's last admin key in use not bound to an agent is kept, also
/// when two admins revoke each other at once through two handles of one
/// store (two servers of a PostgreSQL fleet, or a server and the CLI on
/// one data directory; on SQLite, which has one writing process per data
/// directory, two threads of one handle): exactly one of the two
/// revocations succeeds.
pub(super) fn last_admin_key_is_kept(backend: &dyn Backend) {
    use cairn_store::{ApiKey, KeyRevocation, Role};
    let first = backend.open("last-admin");
    let second = backend
        .open_beside("last-admin")
        .unwrap_or_else(|| Arc::clone(&first));
    let now = Timestamp::from_micros(1_800_000_000_000_000).unwrap();
    let key = |role, agent: Option<&str>| {
        let (key, _) = ApiKey::generate(ORG, role, agent, "", now).unwrap();
        first.put_api_key(&key).unwrap();
        key
    };
    // Neither counts as an admin key of the whole org.
    let bound_admin = key(Role::Admin, Some("analyst"));
    let writer = key(Role::Writer, Some("analyst"));
    let mut kept = key(Role::Admin, None);
    assert_eq!(
        first
            .revoke_api_key_unless_last_admin(ORG, &kept.id, None, now)
            .unwrap(),
        KeyRevocation::LastAdmin
    );
    // A caller bound to an agent reaches that agent's keys only.
    assert_eq!(
        first
            .revoke_api_key_unless_last_admin(ORG, &kept.id, Some("analyst"), now)
            .unwrap(),
        KeyRevocation::Unknown
    );
    assert_eq!(
        first
            .revoke_api_key_unless_last_admin(ORG, &writer.id, Some("other-agent"), now)
            .unwrap(),
        KeyRevocation::Unknown
    );
    assert_eq!(
        first
            .revoke_api_key_unless_last_admin("other", &writer.id, None, now)
            .unwrap(),
        KeyRevocation::Unknown
    );
    assert_eq!(
        first
            .revoke_api_key_unless_last_admin(ORG, &writer.id, Some("analyst"), now)
            .unwrap(),
        KeyRevocation::Revoked
    );
    assert_eq!(
        first
            .revoke_api_key_unless_last_admin(ORG, &writer.id, None, now)
            .unwrap(),
        KeyRevocation::Unknown,
        "a revoked key is not revoked again"
    );
    assert_eq!(
        second
            .revoke_api_key_unless_last_admin(ORG, &bound_admin.id, None, now)
            .unwrap(),
        KeyRevocation::Revoked
    );
    // Two admins revoke each other at once, through the two handles.
    for round in 0..24 {
        let other = key(Role::Admin, None);
        let barrier = std::sync::Barrier::new(2);
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| {
                barrier.wait();
                first
                    .revoke_api_key_unless_last_admin(ORG, &other.id, None, now)
                    .unwrap()
            });
            let b = s.spawn(|| {
                barrier.wait();
                second
                    .revoke_api_key_unless_last_admin(ORG, &kept.id, None, now)
                    .unwrap()
            });
            (a.join().unwrap(), b.join().unwrap())
        });
        let in_use: Vec<ApiKey> = second
            .api_keys(ORG)
            .unwrap()
            .into_iter()
            .filter(|k| k.role == Role::Admin && k.agent_id.is_none() && k.revoked_at.is_none())
            .collect();
        assert_eq!(in_use.len(), 1, "round {round}: {a:?}, {b:?}");
        let mut outcomes = [a, b];
        outcomes.sort_by_key(|o| format!("{o:?}"));
        assert_eq!(
            outcomes,
            [KeyRevocation::LastAdmin, KeyRevocation::Revoked],
            "round {round}"
        );
        kept = in_use.into_iter().next().unwrap();
    }
    // An admin key that has expired does not count as another admin.
    let (mut expired, _) = ApiKey::generate(ORG, Role::Admin, None, "", now).unwrap();
    expired.expires_at = Some(now);
    first.put_api_key(&expired).unwrap();
    assert_eq!(
        first
            .revoke_api_key_unless_last_admin(ORG, &kept.id, None, now)
            .unwrap(),
        KeyRevocation::LastAdmin
    );
    // And it can itself be revoked: it is not the key kept in use.
    assert_eq!(
        first
            .revoke_api_key_unless_last_admin(ORG, &expired.id, None, now)
            .unwrap(),
        KeyRevocation::Revoked
    );
}
