//! The binary on PostgreSQL, against a throwaway cluster the tests start
//! themselves: every tamper case of the embedded store's tests, done with
//! `psql` as a superuser, caught by `cairn verify`; and a fleet of three
//! `cairn serve` processes on one database, one killed with SIGKILL under
//! load, that loses no acknowledged step and agrees on every checkpoint
//! and proof. Under `CI=true` a missing PostgreSQL fails these tests.

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod common;

use cairn_testkit::PgCluster;
use cairn_testkit::http::{call, try_call};
use common::{Target, expect_broken, json, populated, serve};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Runs SQL with psql as the superuser, with triggers off
/// (`session_replication_role = replica`), as an attacker holding the
/// database would; returns the output.
fn attack(cluster: &PgCluster, db: &str, sql: &str) -> String {
    let (ok, out) = cluster.psql(
        db,
        &format!("SET session_replication_role = replica; {sql}"),
    );
    assert!(ok, "{sql}: {out}");
    out
}

fn seq_of(cluster: &PgCluster, db: &str, session: &str, index: i64) -> i64 {
    let (ok, out) = cluster.psql(
        db,
        &format!(
            "SELECT e.seq FROM entries e JOIN sessions s ON s.sid = e.sid
             WHERE s.session_id = '{session}' AND e.step_index = {index}"
        ),
    );
    assert!(ok, "{out}");
    out.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// Where a tamper case keeps a complete export of its database, made
/// before the attack.
fn bundle_path(db: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("cairn-pg-{}-{db}.bundle", std::process::id()))
}

#[test]
fn every_kind_of_psql_tampering_is_caught_at_its_record() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    type Tamper = fn(&PgCluster, &str) -> (i64, &'static str);
    let cases: Vec<(&str, Tamper)> = vec![
        ("content edited", |c, db| {
            let seq = seq_of(c, db, "revenue-analysis-q4", 2);
            attack(
                c,
                db,
                &format!("UPDATE entries SET content = 'Enterprise grew 2%' WHERE seq = {seq}"),
            );
            (seq, "digest-mismatch")
        }),
        (
            "a JSON member repeated, the original value last",
            |c, db| {
                let seq = seq_of(c, db, "revenue-analysis-q4", 1);
                attack(
                    c,
                    db,
                    &format!(
                        "UPDATE entries SET input_data = '{{\"sql\":\"DROP TABLE users\",' || substr(input_data, 2) WHERE seq = {seq}"
                    ),
                );
                (seq, "malformed-record")
            },
        ),
        ("the sessions table names another agent", |c, db| {
            let out = attack(
                c,
                db,
                "UPDATE sessions SET agent_id = 'mallory' WHERE session_id = 'revenue-analysis-q4' RETURNING start_seq",
            );
            let seq = out
                .lines()
                .find_map(|l| l.trim().parse().ok())
                .unwrap_or_else(|| panic!("{out:?}"));
            (seq, "malformed-record")
        }),
        (
            "a step's kind respelled as the parser would still read it",
            |c, db| {
                let seq = seq_of(c, db, "revenue-analysis-q4", 1);
                attack(
                    c,
                    db,
                    &format!(
                        "UPDATE entries SET kind = '[' || upper(kind) || ']' WHERE seq = {seq}"
                    ),
                );
                (seq, "malformed-record")
            },
        ),
        (
            "a step's row joined to a session of another org",
            |c, db| {
                // The session id the digest commits is read through the join:
                // a same-named session of another org keeps every hash.
                let seq = seq_of(c, db, "revenue-analysis-q4", 2);
                attack(
                c,
                db,
                &format!(
                    "INSERT INTO orgs (org, name) VALUES (9999, 'elsewhere');
                     INSERT INTO sessions (sid, org, session_id, agent_id, profile, started_at, start_seq, genesis, max_clock_skew_s)
                       SELECT 999999, 9999, session_id, agent_id, profile, started_at, start_seq, genesis, max_clock_skew_s
                       FROM sessions WHERE session_id = 'revenue-analysis-q4';
                     UPDATE entries SET sid = 999999 WHERE seq = {seq}"
                ),
            );
                (seq, "malformed-record")
            },
        ),
        ("a step's predecessor column pointed elsewhere", |c, db| {
            let seq = seq_of(c, db, "revenue-analysis-q4", 2);
            attack(
                c,
                db,
                &format!("UPDATE entries SET prev_seq = 999999 WHERE seq = {seq}"),
            );
            (seq, "malformed-record")
        }),
        ("a session's head row moved back a step", |c, db| {
            // Retention and analyst SQL read the head row.
            let seq = seq_of(c, db, "revenue-analysis-q4", 3);
            let before = seq_of(c, db, "revenue-analysis-q4", 2);
            attack(
                c,
                db,
                &format!(
                    "UPDATE session_heads SET last_seq = {before}, last_index = 2
                     WHERE sid = (SELECT sid FROM sessions WHERE session_id = 'revenue-analysis-q4')"
                ),
            );
            (seq, "malformed-record")
        }),
        ("a kind row added to a session", |c, db| {
            let seq = seq_of(c, db, "revenue-analysis-q4", 3);
            attack(
                c,
                db,
                "INSERT INTO session_kinds (sid, kind)
                 SELECT sid, 'correction' FROM sessions WHERE session_id = 'revenue-analysis-q4'",
            );
            (seq, "malformed-record")
        }),
        ("metadata edited", |c, db| {
            let seq = seq_of(c, db, "revenue-analysis-q4", 1);
            attack(
                c,
                db,
                &format!("UPDATE entries SET metadata = '{{\"tool\":\"none\"}}' WHERE seq = {seq}"),
            );
            (seq, "digest-mismatch")
        }),
        ("timestamp edited", |c, db| {
            let seq = seq_of(c, db, "revenue-analysis-q4", 3);
            attack(
                c,
                db,
                &format!(
                    "UPDATE entries SET created_at = created_at - 3600000000 WHERE seq = {seq}"
                ),
            );
            (seq, "digest-mismatch")
        }),
        ("step reordered", |c, db| {
            let a = seq_of(c, db, "revenue-analysis-q4", 1);
            let b = seq_of(c, db, "revenue-analysis-q4", 2);
            attack(
                c,
                db,
                &format!(
                    "UPDATE entries SET seq = -1 WHERE seq = {a};
                     UPDATE entries SET seq = {a} WHERE seq = {b};
                     UPDATE entries SET seq = {b} WHERE seq = -1;"
                ),
            );
            (a, "sequence-gap")
        }),
        ("step deleted", |c, db| {
            let seq = seq_of(c, db, "revenue-analysis-q4", 1);
            attack(c, db, &format!("DELETE FROM entries WHERE seq = {seq}"));
            (seq, "sequence-gap")
        }),
        ("step inserted", |c, db| {
            // A copy of step 1 inserted right after it; later entries are
            // renumbered (id and seq) to make room.
            let seq = seq_of(c, db, "revenue-analysis-q4", 1);
            attack(
                c,
                db,
                // Indexes that would refuse the copy (one successor per
                // step) are dropped first, as a superuser may.
                &format!(
                    "DROP INDEX entries_next;
                     UPDATE entries SET id = -(id + 1), seq = seq + 1 WHERE seq > {seq};
                     UPDATE entries SET id = -id WHERE id < 0;
                     CREATE TEMP TABLE copy AS SELECT * FROM entries WHERE seq = {seq};
                     UPDATE copy SET id = id + 1, seq = seq + 1, trace_id = 'forged-trace';
                     INSERT INTO entries SELECT * FROM copy;"
                ),
            );
            (seq + 1, "sequence-gap")
        }),
        ("tail truncated", |c, db| {
            let (ok, out) = c.psql(db, "SELECT max(seq) FROM entries");
            assert!(ok, "{out}");
            let max: i64 = out.trim().parse().unwrap();
            attack(
                c,
                db,
                &format!("DELETE FROM entries WHERE seq >= {}", max - 1),
            );
            (max - 1, "missing-record")
        }),
        ("payload erased without an erasure record", |c, db| {
            let seq = seq_of(c, db, "revenue-analysis-q4", 2);
            let hidden =
                common::erasure_shape(&std::fs::read_to_string(bundle_path(db)).unwrap(), seq);
            attack(
                c,
                db,
                &format!(
                    "UPDATE entries SET content = NULL, input_data = NULL, output_data = NULL,
                       metadata = NULL, erased = TRUE, hidden = '{hidden}' WHERE seq = {seq}"
                ),
            );
            (seq, "erasure-mismatch")
        }),
        ("logged time moved back", |c, db| {
            let seq = seq_of(c, db, "revenue-analysis-q4", 2);
            attack(
                c,
                db,
                &format!(
                    "UPDATE entries SET logged_at = logged_at - 86400000000 WHERE seq = {seq}"
                ),
            );
            (seq, "bad-timestamp")
        }),
        ("whole session deleted", |c, db| {
            let (ok, out) = c.psql(
                db,
                "SELECT start_seq FROM sessions WHERE session_id = 'other'",
            );
            assert!(ok, "{out}");
            let start: i64 = out.trim().parse().unwrap();
            attack(
                c,
                db,
                &format!(
                    "DELETE FROM entries WHERE seq = {start}
                       OR sid = (SELECT sid FROM sessions WHERE session_id = 'other');
                     DELETE FROM sessions WHERE session_id = 'other';"
                ),
            );
            (start, "sequence-gap")
        }),
    ];
    for (i, (name, tamper)) in cases.into_iter().enumerate() {
        let db = format!("tamper_{i}");
        let url = cluster.create_database(&db);
        let dir = tempfile::tempdir().unwrap();
        let target = Target {
            dir: dir.path(),
            database: Some(&url),
        };
        populated(target);
        assert_eq!(target.run(&["verify"], None).code, 0, "{name}: clean");
        let bundle = bundle_path(&db);
        // Removed when the case ends, passed or failed.
        let _removed = tempfile::TempPath::try_from_path(bundle.clone()).unwrap();
        assert_eq!(
            target
                .run(&["export", "--all", "-o", bundle.to_str().unwrap()], None)
                .code,
            0
        );
        // Without replica mode even the superuser is refused.
        let (ok, out) = cluster.psql(&db, "UPDATE entries SET content = 'x'");
        assert!(!ok && out.contains("cairn:"), "{name}: {out}");
        let (seq, reason) = tamper(&cluster, &db);
        expect_broken(target, &[], seq, reason);
        eprintln!("{name}: caught at seq {seq} as {reason}");
    }
}

/// The stored subtree hashes are compared with the log on PostgreSQL too
/// (as `file_tampering::tree_rows::stored_tree_nodes_are_compared_with_the_log`): an
/// edited, missing or unusable row fails at the entry closing its subtree,
/// and readers compute a missing one from below (its proofs still verify);
/// `cairn admin repair-tree` restores the rows the appends wrote.
#[test]
fn stored_tree_nodes_are_compared_with_the_log() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    for (i, (name, sql, seq)) in common::node_tamperings(true).into_iter().enumerate() {
        let db = format!("nodes_{i}");
        let url = cluster.create_database(&db);
        let dir = tempfile::tempdir().unwrap();
        let target = Target {
            dir: dir.path(),
            database: Some(&url),
        };
        populated(target);
        common::log_many(target, 300);
        assert_eq!(target.run(&["verify"], None).code, 0, "{name}: clean");
        let digest = || {
            let (ok, out) = cluster.psql(&db, common::NODES_DIGEST_SQL);
            assert!(ok, "{out}");
            out
        };
        let before = digest();
        attack(&cluster, &db, &sql);
        assert!(
            before != digest() || sql.starts_with("UPDATE"),
            "{name}: nothing changed"
        );
        common::expect_node_verdict(target, name, seq);
        common::expect_tree_repaired(target, name);
        assert_eq!(before, digest(), "{name}: the rows after the repair");
    }
}

/// An org's row deleted hides its log from every listing of orgs;
/// `verify --all-orgs` names it (as
/// `file_tampering::an_org_hidden_by_deleting_its_row_fails_all_orgs`).
#[test]
fn an_org_hidden_by_deleting_its_row_fails_all_orgs() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.create_database("hidden_org");
    let dir = tempfile::tempdir().unwrap();
    let target = Target {
        dir: dir.path(),
        database: Some(&url),
    };
    for org in ["acme", "beta", "gamma"] {
        let run = target.run(
            &["--org", org, "log", "--stdin", "--agent", "a"],
            Some("{\"session_id\":\"s\",\"step_type\":\"plan\",\"content\":\"x\"}\n"),
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    assert_eq!(target.run(&["verify", "--all-orgs"], None).code, 0);
    let out = attack(
        &cluster,
        "hidden_org",
        "DELETE FROM orgs WHERE name = 'beta' RETURNING org",
    );
    let number: i64 = out
        .lines()
        .find_map(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("{out:?}"));
    let run = target.run(&["--json", "verify", "--all-orgs"], None);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let verdict = json(&run);
    assert_eq!(
        verdict["unlisted_org_numbers"],
        json!([number]),
        "{verdict}"
    );
    assert_eq!(verdict["orgs"].as_array().unwrap().len(), 2, "{verdict}");
    // A name given twice (its unique key dropped): the org's verification
    // and a session's, by the CLI and by the server, are one verdict.
    attack(
        &cluster,
        "hidden_org",
        "ALTER TABLE orgs DROP CONSTRAINT orgs_name_key; UPDATE orgs SET name = 'acme' WHERE name = 'gamma'",
    );
    for args in [
        &["--json", "--org", "acme", "verify"][..],
        &["--json", "--org", "acme", "verify", "--session", "s"][..],
    ] {
        let run = target.run(args, None);
        assert_eq!(run.code, 1, "{args:?}: {} {}", run.stdout, run.stderr);
        let verdict = json(&run);
        assert_eq!(verdict["brokenReason"], "malformed-record", "{verdict}");
        assert_eq!(verdict["repeated_org_names"], json!(["acme"]), "{verdict}");
    }
    let (server, admin) = serve(dir.path(), Some(&url));
    let admin = admin.expect("a database without API keys prints an admin key");
    for path in ["/v1/verify", "/v1/sessions/s/verify"] {
        let reply = cairn_testkit::http::call(server.addr, "GET", path, Some(&admin), None);
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        assert_eq!(reply.json()["brokenReason"], "malformed-record", "{path}");
    }
}

/// A data directory without the key file of a database's servers gets an
/// error naming the database's key from every command, writing and
/// reading, and no key file is made there (it would only be refused: the
/// database's logs are signed with another key).
#[test]
fn a_directory_without_the_fleets_key_makes_no_key_file() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.create_database("foreign_key_file");
    let first = tempfile::tempdir().unwrap();
    let first = Target {
        dir: first.path(),
        database: Some(&url),
    };
    let run = first.run(
        &["log", "--stdin", "--agent", "a"],
        Some("{\"session_id\":\"s\",\"step_type\":\"plan\",\"content\":\"x\"}\n"),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let keys = first.run(&["keys"], None);
    assert_eq!(keys.code, 0, "{}", keys.stderr);
    let other = tempfile::tempdir().unwrap();
    let second = Target {
        dir: other.path(),
        database: Some(&url),
    };
    for args in [
        &["keys"][..],
        &[
            "log",
            "--session",
            "s",
            "--agent",
            "a",
            "--type",
            "plan",
            "--content",
            "y",
        ][..],
        &["verify"][..],
    ] {
        let run = second.run(args, None);
        assert_eq!(run.code, 2, "{args:?}: {} {}", run.stdout, run.stderr);
        assert!(
            run.stderr.contains("no server key at"),
            "{args:?}: {}",
            run.stderr
        );
        assert!(
            !other.path().join("data").join("server.key").exists(),
            "{args:?} made a key file"
        );
    }
    let run = second.run(
        &[
            "log",
            "--session",
            "s",
            "--agent",
            "a",
            "--type",
            "plan",
            "--content",
            "y",
        ],
        None,
    );
    assert!(
        run.stderr
            .contains("the database's logs are signed with cairn.local+"),
        "{}",
        run.stderr
    );
    // After a rotation and the old key's retirement, the error names the
    // key in use, not the retired one.
    let old_key = json(&first.run(&["--json", "keys"], None))["server_key"]
        .as_str()
        .unwrap()
        .to_owned();
    let new_file = first.dir.join("next.key");
    let rotated = first.run(
        &["keys", "rotate", "--new-key", new_file.to_str().unwrap()],
        None,
    );
    assert_eq!(rotated.code, 0, "{}", rotated.stderr);
    let new_key = rotated
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("added log key "))
        .unwrap()
        .to_owned();
    let retired = first.run(
        &[
            "--server-key",
            new_file.to_str().unwrap(),
            "keys",
            "retire",
            &old_key,
        ],
        None,
    );
    assert_eq!(retired.code, 0, "{}", retired.stderr);
    let run = second.run(&["keys"], None);
    assert!(run.stderr.contains(&new_key), "{}", run.stderr);
    assert!(!run.stderr.contains(&old_key), "{}", run.stderr);
}

/// What a client got acknowledged: trace id -> (session, index).
type Acked = Arc<Mutex<HashMap<String, (String, u64)>>>;

#[test]
fn three_servers_on_one_database_survive_sigkill_and_agree() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.create_database("fleet");
    let dir = tempfile::tempdir().unwrap();
    let (first, admin) = serve(dir.path(), Some(&url));
    let admin = admin.expect("the first server prints an admin key");
    let (second, none) = serve(dir.path(), Some(&url));
    assert!(none.is_none(), "the org already has a key");
    let (third, _) = serve(dir.path(), Some(&url));
    let mut servers = [first, second, third];
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();

    // Three clients per server, all appending to the same four sessions.
    let acked: Acked = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..9)
        .map(|c| {
            let (addr, admin, acked, stop) = (
                addrs[c % 3],
                admin.clone(),
                Arc::clone(&acked),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                let mut sent = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let session = format!("shared-{}", (c as u64 + sent) % 4);
                    let body = json!({
                        "session_id": session, "agent_id": "fleet", "step_type": "thinking",
                        "content": format!("client {c} step {sent}"), "metadata": {"client": c},
                    });
                    sent += 1;
                    match try_call(
                        addr,
                        "POST",
                        "/v1/steps",
                        Some(&admin),
                        Some(body.to_string().as_bytes()),
                    ) {
                        Ok(reply) if reply.status == 201 => {
                            let v = reply.json();
                            acked.lock().unwrap().insert(
                                v["trace_id"].as_str().unwrap().to_owned(),
                                (session, v["step_index"].as_u64().unwrap()),
                            );
                        }
                        Ok(reply) => panic!("client {c}: {} {}", reply.status, reply.text()),
                        // The server was killed: this client is done.
                        Err(_) => return sent,
                    }
                }
                sent
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let before_kill = acked.lock().unwrap().len();
    servers[1].child.kill().unwrap(); // SIGKILL
    servers[1].child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        before_kill > 50 && acked.len() > before_kill,
        "load ran before and after the kill: {before_kill} then {}",
        acked.len()
    );

    // Restart the killed server, and the other two as well, so that
    // nothing below comes from a process's memory.
    for server in &mut servers {
        *server = serve(dir.path(), Some(&url)).0;
    }
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();

    // Every acknowledged step is there, at the index it was acknowledged
    // with, and every chain verifies.
    let mut found: HashSet<String> = HashSet::new();
    for k in 0..4 {
        let reply = call(
            addrs[0],
            "GET",
            &format!("/v1/sessions/shared-{k}?verify=true"),
            Some(&admin),
            None,
        );
        let body = reply.json();
        assert_eq!(body["chain_valid"], true, "shared-{k}");
        for (i, step) in body["steps"].as_array().unwrap().iter().enumerate() {
            assert_eq!(step["step_index"], i as u64);
            let trace = step["trace_id"].as_str().unwrap().to_owned();
            if let Some((session, index)) = acked.get(&trace) {
                assert_eq!(
                    (session.as_str(), *index),
                    (format!("shared-{k}").as_str(), i as u64)
                );
            }
            found.insert(trace);
        }
    }
    eprintln!(
        "{} steps acknowledged ({before_kill} before the kill), {} in the sessions",
        acked.len(),
        found.len()
    );
    let lost: Vec<_> = acked.keys().filter(|t| !found.contains(*t)).collect();
    assert!(lost.is_empty(), "acknowledged but missing: {lost:?}");

    // The whole org log verifies, from the command line.
    let target = Target {
        dir: dir.path(),
        database: Some(&url),
    };
    let run = target.run(&["verify", "--json"], None);
    let verdict = json(&run);
    assert_eq!(run.code, 0, "{verdict}");
    assert_eq!(verdict["verified"], true);

    // All three serve the same checkpoint and the same proofs.
    let notes: Vec<String> = addrs
        .iter()
        .map(|a| call(*a, "GET", "/v1/checkpoint", Some(&admin), None).text())
        .collect();
    assert!(notes.windows(2).all(|w| w[0] == w[1]), "{notes:?}");
    let size: u64 = notes[0].lines().nth(1).unwrap().parse().unwrap();
    for path in [
        format!("/v1/proofs/inclusion?seq=0&size={size}"),
        format!("/v1/proofs/inclusion?seq={}&size={size}", size / 2),
        format!("/v1/proofs/inclusion?seq={}&size={size}", size - 1),
        format!("/v1/proofs/consistency?old=1&new={size}"),
        format!("/v1/proofs/consistency?old={}&new={size}", size / 3),
    ] {
        let replies: Vec<Value> = addrs
            .iter()
            .map(|a| call(*a, "GET", &path, Some(&admin), None).json())
            .collect();
        assert!(replies[0]["proof"].is_array(), "{path}: {}", replies[0]);
        assert!(
            replies.windows(2).all(|w| w[0] == w[1]),
            "{path}: {replies:?}"
        );
    }
}

/// `cairn search` on PostgreSQL, when steps' documents are still being
/// written by another connection past a search's 5 s budget, is told the
/// index is busy and tries again (saying so) until it finds them, rather
/// than failing or answering without them.
#[test]
fn cairn_search_waits_for_documents_another_connection_is_writing() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.create_database("search_busy");
    let dir = tempfile::tempdir().unwrap();
    let target = Target {
        dir: dir.path(),
        database: Some(&url),
    };
    common::log_many(target, 5);
    // As a server that stopped before writing its documents leaves the
    // database, while another connection holds the queue for 9 s (a search gives up after 5).
    attack(
        &cluster,
        "search_busy",
        "DELETE FROM step_search; INSERT INTO search_queue SELECT id FROM entries WHERE type = 'step'",
    );
    let holder = {
        let cluster = &cluster;
        std::thread::scope(|scope| {
            let held = scope.spawn(move || {
                cluster.psql(
                    "search_busy",
                    "BEGIN; SELECT count(*) FROM (SELECT id FROM search_queue FOR UPDATE) l; SELECT pg_sleep(9); ROLLBACK;",
                )
            });
            std::thread::sleep(Duration::from_millis(1_000));
            let search = target.run(&["search", "--mode", "fulltext", "--json", "bulk"], None);
            (held.join().unwrap(), search)
        })
    };
    let ((held, out), search) = holder;
    assert!(held, "{out}");
    assert_eq!(search.code, 0, "{}", search.stderr);
    assert!(
        search.stderr.contains("waiting for it"),
        "{}",
        search.stderr
    );
    let answer: Value = serde_json::from_str(&search.stdout).unwrap();
    assert_eq!(answer["results"].as_array().unwrap().len(), 5, "{answer}");
}

/// OTLP spans that name no session wait in the database, not in a server
/// of the fleet: held through one server, they are settled by a span of
/// their trace sent to another; and a server killed while spans wait loses
/// none (another server writes them when their wait ends).
#[test]
fn held_otlp_spans_are_the_fleets_not_a_servers() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.create_database("held");
    let dir = tempfile::tempdir().unwrap();
    let hold = ["--otlp-hold-seconds", "2"];
    let (mut first, admin) = common::serve_with(dir.path(), Some(&url), &hold, &[]);
    let admin = admin.expect("the first server prints an admin key");
    let (second, _) = common::serve_with(dir.path(), Some(&url), &hold, &[]);
    let span = |trace: &str, id: &str, parent: &str, session: Option<&str>, start: u64| {
        let mut attributes = vec![
            json!({"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}),
            json!({"key": "gen_ai.output.messages", "value": {"stringValue": format!("from {id}")}}),
        ];
        if let Some(session) = session {
            attributes
                .push(json!({"key": "gen_ai.conversation.id", "value": {"stringValue": session}}));
        }
        json!({
            "traceId": trace, "spanId": id, "parentSpanId": parent, "name": "chat",
            "startTimeUnixNano": format!("{}", 1_764_900_000_000_000_000u64 + start * 1_000_000_000),
            "endTimeUnixNano": format!("{}", 1_764_900_000_500_000_000u64 + start * 1_000_000_000),
            "attributes": attributes
        })
    };
    let export = |addr: SocketAddr, spans: Vec<Value>| {
        let body = json!({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]});
        let reply = call(
            addr,
            "POST",
            "/v1/traces",
            Some(&admin),
            Some(body.to_string().as_bytes()),
        );
        assert_eq!(reply.status, 200, "{}", reply.text());
    };
    // The span ids of a session's steps, in chain order, each once.
    let spans_of = |addr: SocketAddr, session: &str| -> Option<Vec<String>> {
        let reply = call(
            addr,
            "GET",
            &format!("/v1/sessions/{session}"),
            Some(&admin),
            None,
        );
        (reply.status == 200).then(|| {
            let mut spans: Vec<String> = Vec::new();
            for step in reply.json()["steps"].as_array().unwrap() {
                let id = step["trace_id"]
                    .as_str()
                    .unwrap()
                    .split('.')
                    .nth(2)
                    .unwrap()
                    .to_owned();
                if !spans.contains(&id) {
                    spans.push(id);
                }
            }
            spans
        })
    };
    let (a, b, root) = (
        "7bf92f3577b34da6a3ce929d0e0e4736",
        "8bf92f3577b34da6a3ce929d0e0e4736",
        "00f067aa0ba902b7",
    );
    let children = |trace: &str| {
        vec![
            span(trace, "3000000000000001", root, None, 1),
            span(trace, "3000000000000002", root, None, 2),
        ]
    };
    // Held through the first server, settled through the second.
    export(first.addr, children(a));
    assert_eq!(spans_of(second.addr, a), None);
    export(second.addr, vec![span(a, root, "", Some("fleet-conv"), 0)]);
    assert_eq!(
        spans_of(first.addr, "fleet-conv").unwrap(),
        [root, "3000000000000001", "3000000000000002"]
    );
    assert_eq!(spans_of(first.addr, a), None);
    // Held through the first server, which is killed: the second writes
    // them when their wait ends, into the session named after the trace.
    export(first.addr, children(b));
    first.child.kill().unwrap(); // SIGKILL
    first.child.wait().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(spans) = spans_of(second.addr, b)
            && spans.len() == 2
        {
            assert_eq!(spans, ["3000000000000001", "3000000000000002"]);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the killed server's held spans were never written"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let verified = call(second.addr, "GET", "/v1/verify", Some(&admin), None);
    assert_eq!(
        verified.json()["verified"],
        json!(true),
        "{}",
        verified.text()
    );
}
