//! `cairn search` on a store no server holds, whose full-text index is
//! behind the log (a stale or lost `fulltext.db`): this process's own
//! index thread brings it up to date in the background, and the search
//! waits for it, saying so, instead of failing.
#![allow(clippy::unwrap_used)]

mod common;

use common::{cairn_in, json};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn step(content: &str) -> String {
    format!(
        "{{\"agent_id\":\"a\",\"session_id\":\"s\",\"step_type\":\"Reasoning\",\"content\":\"{content}\"}}\n"
    )
}

/// Copies an index file and its WAL (the shared memory is rebuilt).
fn copy_index(from: &Path, to: &Path) {
    for suffix in ["", "-wal"] {
        let (mut src, mut dst) = (from.as_os_str().to_owned(), to.as_os_str().to_owned());
        src.push(suffix);
        dst.push(suffix);
        let _ = std::fs::remove_file(&dst);
        if Path::new(&src).exists() {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
    let mut shm = to.as_os_str().to_owned();
    shm.push("-shm");
    let _ = std::fs::remove_file(shm);
}

#[test]
fn a_search_waits_for_the_index_to_catch_up_with_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("data").join("fulltext.db");
    let saved = dir.path().join("saved-fulltext.db");
    let first = cairn_in(
        dir.path(),
        &["log", "--stdin"],
        Some(&step("the first step")),
    );
    assert_eq!(first.code, 0, "{}", first.stderr);
    copy_index(&index, &saved);
    let more: String = (0..50)
        .map(|i| {
            if i == 30 {
                step("the zeppelin departs at noon")
            } else {
                step(&format!("filler {i}"))
            }
        })
        .collect();
    let logged = cairn_in(dir.path(), &["log", "--stdin"], Some(&more));
    assert_eq!(logged.code, 0, "{}", logged.stderr);
    // The index as it was after the first step, and another program
    // holding its write lock: the catch-up cannot advance for a while.
    copy_index(&saved, &index);
    let blocker = rusqlite::Connection::open(&index).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let search = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["search", "zeppelin", "--mode", "fulltext", "--json"])
        .env("CAIRN_DATA_DIR", dir.path().join("data"))
        .env("CAIRN_ORG", "acme")
        .env_remove("CAIRN_DATABASE_URL")
        .env_remove("CAIRN_EMBEDDING_MODEL")
        .env_remove("CAIRN_EMBEDDING_ENDPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Longer than a search waits inside the store (2 s), shorter than the
    // index connection's busy timeout (10 s).
    std::thread::sleep(Duration::from_secs(4));
    blocker.execute_batch("ROLLBACK").unwrap();
    let out = search.wait_with_output().unwrap();
    let run = common::Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("steps to go") && run.stderr.contains("waiting for it"),
        "the wait is not said: {}",
        run.stderr
    );
    let found = json(&run);
    let hits = found["results"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{found}");
    assert_eq!(
        (
            hits[0]["session_id"].as_str(),
            hits[0]["step_index"].as_u64()
        ),
        (Some("s"), Some(31)),
        "{found}"
    );
}
