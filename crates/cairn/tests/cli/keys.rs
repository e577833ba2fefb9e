//! The data directory's keys from the command line: API keys made,
//! listed and revoked, a restore under the same server key, and a copy
//! made without its key.

use super::common::{cairn_in, json};
use super::populated;
use std::path::Path;

#[test]
fn a_restore_under_the_same_key_stays_writable() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    let bundle = dir.path().join("backup.bundle");
    assert_eq!(
        cairn_in(
            dir.path(),
            &["export", "--all", "-o", bundle.to_str().unwrap()],
            None
        )
        .code,
        0
    );
    std::fs::remove_file(dir.path().join("data/ledger.db")).unwrap();
    let run = cairn_in(
        dir.path(),
        &["import", bundle.to_str().unwrap(), "--json"],
        None,
    );
    assert_eq!(json(&run)["mirror"], false);
    let run = cairn_in(
        dir.path(),
        &[
            "log",
            "--session",
            "revenue-analysis-q4",
            "--agent",
            "analyst",
            "--type",
            "reflection",
            "--content",
            "done",
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("logged step 4"), "{}", run.stdout);
    assert_eq!(cairn_in(dir.path(), &["verify"], None).code, 0);
}

#[test]
fn admin_commands_manage_keys_on_the_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let run = cairn_in(
        dir.path(),
        &[
            "--org",
            "globex",
            "admin",
            "create-key",
            "--role",
            "writer",
            "--agent",
            "bot",
            "--label",
            "ci",
            "--json",
        ],
        None,
    );
    // A new org's first key cannot manage keys: the command says so.
    assert!(
        run.stderr.contains("org globex has no admin key"),
        "{}",
        run.stderr
    );
    let created = json(&run);
    let admin = cairn_in(
        dir.path(),
        &["--org", "globex", "admin", "create-key", "--role", "admin"],
        None,
    );
    assert!(!admin.stderr.contains("no admin key"), "{}", admin.stderr);
    let token = created["token"].as_str().unwrap();
    assert!(token.starts_with(&format!("cairn_{}_", created["id"].as_str().unwrap())));
    assert_eq!(created["org_id"], "globex");
    let listed = json(&cairn_in(
        dir.path(),
        &["--org", "globex", "admin", "list-keys", "--json"],
        None,
    ));
    assert_eq!(listed[0]["agent_id"], "bot");
    assert!(
        !listed.to_string().contains(token),
        "tokens are never listed"
    );
    assert!(listed[0]["expires_at"].is_null(), "{listed}");
    // A key made to expire: its end is kept and listed; an end in the past
    // is refused.
    let expiring = json(&cairn_in(
        dir.path(),
        &[
            "--org",
            "globex",
            "admin",
            "create-key",
            "--role",
            "reader",
            "--expires-in-days",
            "30",
            "--json",
        ],
        None,
    ));
    let end = expiring["expires_at"].as_str().unwrap().to_owned();
    let listed = cairn_in(dir.path(), &["--org", "globex", "admin", "list-keys"], None);
    assert!(
        listed.stdout.contains(&format!("active until {end}")),
        "{}",
        listed.stdout
    );
    let past = cairn_in(
        dir.path(),
        &[
            "--org",
            "globex",
            "admin",
            "create-key",
            "--role",
            "reader",
            "--expires-at",
            "2020-01-01T00:00:00Z",
        ],
        None,
    );
    assert_eq!(past.code, 2, "{}", past.stderr);
    assert!(past.stderr.contains("not in the future"), "{}", past.stderr);
    assert!(
        cairn_in(dir.path(), &["--org", "globex", "admin", "orgs"], None)
            .stdout
            .contains("globex")
    );
    let id = created["id"].as_str().unwrap();
    assert_eq!(
        cairn_in(
            dir.path(),
            &["--org", "globex", "admin", "revoke-key", id],
            None
        )
        .code,
        0
    );
    assert_eq!(
        cairn_in(
            dir.path(),
            &["--org", "globex", "admin", "revoke-key", id],
            None
        )
        .code,
        2
    );
    // The org's last admin key is kept unless the operator insists.
    let admin_id = admin.stdout.trim().split('_').nth(1).unwrap().to_owned();
    let kept = cairn_in(
        dir.path(),
        &["--org", "globex", "admin", "revoke-key", &admin_id],
        None,
    );
    assert_eq!(kept.code, 2, "{}", kept.stderr);
    assert!(kept.stderr.contains("last admin key"), "{}", kept.stderr);
    let forced = cairn_in(
        dir.path(),
        &[
            "--org",
            "globex",
            "admin",
            "revoke-key",
            &admin_id,
            "--even-the-last-admin",
        ],
        None,
    );
    assert_eq!(forced.code, 0, "{}", forced.stderr);
    assert_eq!(
        cairn_in(
            dir.path(),
            &["--org", "globex", "admin", "create-key", "--role", "boss"],
            None
        )
        .code,
        2
    );
    let listed = json(&cairn_in(
        dir.path(),
        &["--org", "globex", "admin", "list-keys", "--json"],
        None,
    ));
    assert!(listed[0]["revoked_at"].is_string());
}

/// A signing key kept outside the data directory (`--server-key`): a copy
/// of the directory alone cannot sign for the log. A sequencing process
/// with another key refuses to start; an attacker who also deletes the
/// recorded key can sign, but only with a key no verifier pinned to the
/// log's published key accepts.
#[test]
fn a_data_directory_copied_without_its_key_cannot_sign_for_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("keys").join("signing.key");
    let key_arg = format!("--server-key={}", key_file.display());
    let log_step = |dir: &Path, extra: &[&str], content: &str| {
        let mut args: Vec<&str> = extra.to_vec();
        args.extend_from_slice(&[
            "log",
            "--session",
            "s",
            "--agent",
            "a",
            "--type",
            "observation",
            "--content",
            content,
        ]);
        cairn_in(dir, &args, None)
    };
    let first = log_step(dir.path(), &[&key_arg], "one");
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(key_file.exists());
    assert!(
        !dir.path().join("data/server.key").exists(),
        "the key stays outside the data directory"
    );
    let published = json(&cairn_in(dir.path(), &[&key_arg, "--json", "keys"], None))["server_key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        cairn_in(dir.path(), &[&key_arg, "checkpoint"], None).code,
        0
    );

    // The insider copies the data directory, not the key.
    let copy = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(copy.path().join("data")).unwrap();
    for name in ["ledger.db", "ledger.db-wal"] {
        let from = dir.path().join("data").join(name);
        if from.exists() {
            std::fs::copy(&from, copy.path().join("data").join(name)).unwrap();
        }
    }
    let refused = log_step(copy.path(), &[], "two");
    assert_ne!(refused.code, 0, "a store copied without its key sequenced");
    assert!(
        refused.stderr.contains("no server key"),
        "{}",
        refused.stderr
    );
    assert!(
        !copy.path().join("data/server.key").exists(),
        "no key is made for a store that exists"
    );
    // Nor is one shown for it.
    let shown = cairn_in(copy.path(), &["keys"], None);
    assert_eq!(shown.code, 2, "{}", shown.stdout);
    assert!(shown.stderr.contains(&published), "{}", shown.stderr);
    // With a key of its own, a copy is still refused: it is not the
    // key its checkpoints are signed with; nor is that key shown as the
    // store's when the copy is read.
    let stranger = tempfile::tempdir().unwrap();
    assert_eq!(log_step(stranger.path(), &[], "elsewhere").code, 0);
    std::fs::copy(
        stranger.path().join("data/server.key"),
        copy.path().join("data/server.key"),
    )
    .unwrap();
    let shown = cairn_in(copy.path(), &["keys"], None);
    assert_eq!(shown.code, 2, "{}", shown.stdout);
    assert!(
        shown.stderr.contains("not this store's"),
        "{}",
        shown.stderr
    );
    let refused = log_step(copy.path(), &[], "two");
    assert_ne!(refused.code, 0, "a store copied without its key sequenced");
    assert!(refused.stderr.contains("signed by"), "{}", refused.stderr);
    // Still readable and verifiable with the published key.
    let verified = cairn_in(copy.path(), &["verify", "--key", &published], None);
    assert_eq!(verified.code, 0, "{}{}", verified.stdout, verified.stderr);

    // The insider deletes the recorded key: now a new key signs, and no
    // checkpoint it makes verifies against the published key.
    let conn = rusqlite::Connection::open(copy.path().join("data/ledger.db")).unwrap();
    conn.execute("DELETE FROM meta WHERE key = 'server_key'", [])
        .unwrap();
    drop(conn);
    let forged = log_step(copy.path(), &[], "forged");
    assert_eq!(forged.code, 0, "{}", forged.stderr);
    assert_eq!(cairn_in(copy.path(), &["checkpoint"], None).code, 0);
    let verdict = json(&cairn_in(
        copy.path(),
        &["verify", "--json", "--key", &published],
        None,
    ));
    assert_eq!(verdict["verified"], false, "{verdict}");
    assert_eq!(verdict["brokenReason"], "bad-signature", "{verdict}");
}

/// `--max-agent-keys` (`CAIRN_MAX_AGENT_KEYS`) bounds the keys one org's
/// log registers: past it `cairn agent-key` refuses with a message naming
/// the setting (a rotation too, since its new key is one more), and a key
/// registered already is still answered.
#[test]
fn an_org_registers_at_most_max_agent_keys() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let public = |seed: u8| {
        let key = cairn_core::ed25519_dalek::SigningKey::from_bytes(&[seed; 32]);
        base64::engine::general_purpose::STANDARD.encode(key.verifying_key().as_bytes())
    };
    let register = |bound: &str, seed: u8| {
        cairn_in(
            dir.path(),
            &[
                "--max-agent-keys",
                bound,
                "agent-key",
                "--agent",
                "signer",
                "--public-key",
                &public(seed),
            ],
            None,
        )
    };
    let first = register("1", 1);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let refused = register("1", 2);
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    assert!(
        refused.stderr.contains("registers 1 agent key,")
            && refused.stderr.contains("CAIRN_MAX_AGENT_KEYS"),
        "{}",
        refused.stderr
    );
    assert_eq!(register("1", 1).code, 0, "a registered key is answered");
    let raised = register("2", 2);
    assert_eq!(raised.code, 0, "{}", raised.stderr);
    assert_eq!(cairn_in(dir.path(), &["verify"], None).code, 0);
}
