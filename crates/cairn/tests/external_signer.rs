//! The server key held by another process (`--server-key-command`): the
//! data directory never holds a key, everything signed verifies with the
//! signer's public key, a signer that lies is caught, and the store refuses
//! a signer with another key.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

fn agent(key: &Path) -> String {
    format!(
        "{} key-agent --key {}",
        env!("CARGO_BIN_EXE_cairn"),
        key.display()
    )
}

#[test]
fn a_key_held_by_a_signer_process_signs_and_never_enters_the_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("held-elsewhere.key");
    let command = agent(&key);
    let run = |args: &[&str], stdin: Option<&str>| {
        let mut all = vec!["--server-key-command", command.as_str()];
        all.extend_from_slice(args);
        common::cairn_in(dir.path(), &all, stdin)
    };
    let line = r#"{"session_id":"s1","agent_id":"a","step_type":"observation","content":"one"}"#;
    let logged = run(&["log", "--stdin"], Some(line));
    assert_eq!(logged.code, 0, "{}", logged.stderr);
    assert_eq!(run(&["seal", "s1"], None).code, 0);
    assert!(!dir.path().join("data/server.key").exists());
    let vkey = common::json(&run(&["--json", "keys"], None))["server_key"]
        .as_str()
        .unwrap()
        .to_owned();
    // The key file's key is the one that signs.
    let from_file = common::cairn_in(
        dir.path(),
        &["--server-key", key.to_str().unwrap(), "--json", "keys"],
        None,
    );
    let raw = |vkey: &str| vkey.splitn(3, '+').nth(2).unwrap().to_owned();
    let file_key = common::json(&from_file)["server_key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(raw(&file_key), raw(&vkey));
    let bundle = dir.path().join("all.ndjson");
    let exported = run(&["export", "--all", "-o", bundle.to_str().unwrap()], None);
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    let verified = common::cairn_in(
        dir.path(),
        &[
            "verify",
            "--bundle",
            bundle.to_str().unwrap(),
            "--key",
            &vkey,
        ],
        None,
    );
    assert_eq!(verified.code, 0, "{}", verified.stdout);
    assert_eq!(run(&["verify"], None).code, 0);

    // Another signer's key: the store refuses to sequence with it.
    let other = agent(&dir.path().join("another.key"));
    let refused = common::cairn_in(
        dir.path(),
        &["--server-key-command", &other, "log", "--stdin"],
        Some(line),
    );
    assert_eq!(refused.code, 3, "{}", refused.stderr);
    assert!(refused.stderr.contains("signed by"), "{}", refused.stderr);

    // A signer that answers with someone else's signatures is caught at
    // start, before anything is signed.
    // (Its first character always changes: to B if it was A, else to A;
    // rewriting only letters and digits let a signature starting with
    // `A`, `+` or `/` through about one run in twenty.)
    let liar = format!(
        "{} | sed -u -e '1!{{s/^A/#/;s/^[^#]/A/;s/^#/B/}}'",
        agent(&key)
    );
    let caught = common::cairn_in(
        dir.path(),
        &["--server-key-command", &liar, "log", "--stdin"],
        Some(line),
    );
    assert_eq!(caught.code, 3, "{}", caught.stderr);
    assert!(
        caught.stderr.contains("external signer"),
        "{}",
        caught.stderr
    );
    // A command that does not start is an error that says so.
    let missing = common::cairn_in(
        dir.path(),
        &["--server-key-command", "exit 3", "log", "--stdin"],
        Some(line),
    );
    assert_eq!(missing.code, 3, "{}", missing.stderr);
    assert!(
        missing.stderr.contains("server key command"),
        "{}",
        missing.stderr
    );
}
