//! Witnesses, end to end with real processes: a log server and two `cairn
//! witness` processes under a 2-of-2 policy. Checkpoints get cosigned while
//! the log grows; then an insider rewrites the log's history and re-signs
//! it with the server's own key, and the witnesses refuse, the server
//! reports it, and `cairn verify` with the policy fails. Also: a witness's
//! check-and-record is atomic under concurrent requests, and every status
//! of the C2SP specification over HTTP.

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;

use cairn_core::checkpoint::Checkpoint;
use cairn_core::merkle::{MemoryTree, consistency_proof, leaf_hash};
use cairn_core::note::NoteSigner;
use cairn_testkit::http::call;
use serde_json::json;
use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Witness {
    child: Child,
    addr: SocketAddr,
    vkey: String,
}

impl Drop for Witness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn witness(dir: &Path, name: &str, logs: &[String]) -> Witness {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cairn"));
    command
        .args(["witness", "--listen", "127.0.0.1:0", "--name", name])
        .arg("--dir")
        .arg(dir.join(name))
        .env("CAIRN_LOG", "warn");
    for log in logs {
        command.args(["--log", log]);
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut vkey = None;
    let addr = loop {
        let line = lines
            .next()
            .expect("cairn witness printed its address")
            .unwrap();
        if let Some(key) = line.strip_prefix("witness vkey: ") {
            vkey = Some(key.trim().to_owned());
        }
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Witness {
        child,
        addr,
        vkey: vkey.expect("the witness printed its vkey"),
    }
}

fn record(server: SocketAddr, admin: &str, session: &str, n: usize) {
    for i in 0..n {
        let body = json!({"session_id": session, "agent_id": "a", "step_type": "observation",
                          "content": format!("{session} step {i}")});
        let reply = call(
            server,
            "POST",
            "/v1/steps",
            Some(admin),
            Some(body.to_string().as_bytes()),
        );
        assert_eq!(reply.status, 201, "{}", reply.text());
    }
}

/// Waits until the server's current checkpoint carries `count`
/// cosignature lines; returns the note.
fn cosigned(server: SocketAddr, admin: &str, count: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let note = call(server, "GET", "/v1/checkpoint", Some(admin), None).text();
        let lines = note.lines().filter(|l| l.starts_with('\u{2014}')).count();
        if lines > count {
            return note;
        }
        assert!(Instant::now() < deadline, "not cosigned in time: {note}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn metric(server: SocketAddr, name: &str) -> u64 {
    let text = call(server, "GET", "/metrics", None, None).text();
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn witnesses_cosign_a_growing_log_and_refuse_a_rewritten_one() {
    let dir = tempfile::tempdir().unwrap();
    let target = Target::embedded(dir.path());
    let keys = json(&target.run(&["--json", "keys"], None));
    let origin = format!("{}/acme", keys["name"].as_str().unwrap());
    let log = format!("{origin}={}", keys["server_key"].as_str().unwrap());
    let w1 = witness(dir.path(), "w1.example", std::slice::from_ref(&log));
    let w2 = witness(dir.path(), "w2.example", std::slice::from_ref(&log));
    let witness_args = [
        "--witness".to_owned(),
        format!("http://{}={}", w1.addr, w1.vkey),
        "--witness".to_owned(),
        format!("http://{}={}", w2.addr, w2.vkey),
        "--witness-interval".to_owned(),
        "1".to_owned(),
    ];
    let witness_args: Vec<&str> = witness_args.iter().map(String::as_str).collect();
    let policy = [
        "--witness",
        w1.vkey.as_str(),
        "--witness",
        w2.vkey.as_str(),
        "--witness-quorum",
        "2",
    ];

    // The log grows and its checkpoints get cosigned by both witnesses.
    let (server, admin) = serve_with(dir.path(), None, &witness_args, &[]);
    let admin = admin.unwrap();
    for round in 0..3 {
        record(server.addr, &admin, &format!("s{round}"), 4);
        let note = cosigned(server.addr, &admin, 2);
        assert!(
            note.contains("w1.example") && note.contains("w2.example"),
            "{note}"
        );
    }
    let mut args = vec!["verify", "--json"];
    args.extend_from_slice(&policy);
    let run = target.run(&args, None);
    let verdict = json(&run);
    assert_eq!(run.code, 0, "{verdict}");
    assert!(
        !verdict["witnessed"]["cosigned"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{verdict}"
    );
    // Runs of [first size, last size], and how many checkpoints they hold.
    let runs = verdict["witnessed"]["cosigned"].as_array().unwrap();
    assert!(
        runs.iter().all(|run| run
            .as_array()
            .is_some_and(|r| r.len() == 2 && r[0].as_u64() <= r[1].as_u64())),
        "{verdict}"
    );
    assert!(
        verdict["witnessed"]["cosigned_checkpoints"]
            .as_u64()
            .is_some_and(|n| n >= runs.len() as u64),
        "{verdict}"
    );
    // An export carries the cosigned checkpoint; it verifies offline with
    // the policy, and fails with a witness the checkpoint does not have.
    let bundle = dir.path().join("before.ndjson");
    assert_eq!(
        target
            .run(&["export", "--all", "-o", bundle.to_str().unwrap()], None)
            .code,
        0
    );
    let mut args = vec!["verify", "--json", "--bundle", bundle.to_str().unwrap()];
    args.extend_from_slice(&policy);
    let run = target.run(&args, None);
    assert_eq!(run.code, 0, "{}", run.stdout);
    // It says who cosigned, of the quorum asked for.
    let verdict = json(&run);
    assert_eq!(verdict["cosigned_by"]["quorum"], 2, "{verdict}");
    assert_eq!(
        verdict["cosigned_by"]["witnesses"],
        serde_json::json!(["w1.example", "w2.example"]),
        "{verdict}"
    );
    let text = target.run(
        &args[..1]
            .iter()
            .chain(&args[2..])
            .copied()
            .collect::<Vec<_>>(),
        None,
    );
    assert!(
        text.stdout
            .contains("cosigned by 2 of the witnesses given (quorum 2): w1.example, w2.example"),
        "{}",
        text.stdout
    );
    assert_eq!(
        metric(
            server.addr,
            "cairn_witness_answers_total{result=\"refused\"}"
        ),
        0
    );
    drop(server);

    // The insider: a new history under the same key and origin (the old
    // database is gone, server.key is kept), re-signed by the server.
    for entry in std::fs::read_dir(dir.path().join("data")).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() != "server.key" {
            if path.is_dir() {
                std::fs::remove_dir_all(&path).unwrap();
            } else {
                std::fs::remove_file(&path).unwrap();
            }
        }
    }
    let (server, admin) = serve_with(dir.path(), None, &witness_args, &[]);
    let admin = admin.expect("a new database prints a new admin key");
    record(server.addr, &admin, "rewritten", 20);
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(
        server.addr,
        "cairn_witness_answers_total{result=\"refused\"}",
    ) < 2
    {
        assert!(
            Instant::now() < deadline,
            "the witnesses' refusals were not reported"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Neither witness cosigned anything of the rewritten log.
    let note = call(server.addr, "GET", "/v1/checkpoint", Some(&admin), None).text();
    assert!(
        !note.contains("w1.example") && !note.contains("w2.example"),
        "{note}"
    );
    assert_eq!(
        metric(
            server.addr,
            "cairn_witness_answers_total{result=\"cosigned\"}"
        ),
        0
    );

    // Every checkpoint of the rewritten log lacks the quorum, and verify
    // with the policy fails; without the policy the re-signed log verifies
    // (which is exactly why witnesses are needed).
    assert_eq!(target.run(&["verify"], None).code, 0);
    let mut args = vec!["verify", "--json"];
    args.extend_from_slice(&policy);
    let run = target.run(&args, None);
    let verdict = json(&run);
    assert_eq!(run.code, 1, "{verdict}");
    assert_eq!(
        verdict["brokenReason"], "insufficient-cosignatures",
        "{verdict}"
    );
    assert!(
        verdict["witnessed"]["cosigned"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{verdict}"
    );
    assert!(
        !verdict["witnessed"]["uncosigned"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{verdict}"
    );
    // The HTTP API says the same.
    let query = format!(
        "/v1/verify?witness={}&witness={}&quorum=2",
        percent(&w1.vkey),
        percent(&w2.vkey)
    );
    let http = call(server.addr, "GET", &query, Some(&admin), None).json();
    assert_eq!(http["brokenReason"], "insufficient-cosignatures", "{http}");
    assert_eq!(http["verified"], false, "{http}");
    // A policy names at most 64 witnesses: each checkpoint checked is
    // checked against each of them. Counted before any key is decoded.
    let crowd = format!("/v1/verify?{}", vec!["witness=x"; 65].join("&"));
    let refused = call(server.addr, "GET", &crowd, Some(&admin), None);
    assert_eq!(refused.status, 400);
    let body = refused.json();
    assert_eq!(body["error"]["code"], "invalid_argument", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 64"),
        "{body}"
    );
    let after = dir.path().join("after.ndjson");
    assert_eq!(
        target
            .run(&["export", "--all", "-o", after.to_str().unwrap()], None)
            .code,
        0
    );
    let mut args = vec!["verify", "--json", "--bundle", after.to_str().unwrap()];
    args.extend_from_slice(&policy);
    let run = target.run(&args, None);
    let verdict = json(&run);
    assert_eq!(run.code, 1, "{verdict}");
    assert_eq!(
        verdict["brokenReason"], "insufficient-cosignatures",
        "{verdict}"
    );
}

/// Percent-encodes a query value.
fn percent(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

const ORIGIN: &str = "log.example/test";

fn history(salt: u8, n: u64) -> MemoryTree {
    let mut tree = MemoryTree::new();
    for i in 0..n {
        tree.push(leaf_hash(&[salt, i as u8]));
    }
    tree
}

fn request(old: u64, tree: &MemoryTree, size: u64, signer: &NoteSigner) -> String {
    use base64::Engine as _;
    let mut body = format!("old {old}\n");
    if old > 0 && old < size {
        for hash in consistency_proof(tree, old, size).unwrap() {
            body.push_str(&base64::engine::general_purpose::STANDARD.encode(hash.as_bytes()));
            body.push('\n');
        }
    }
    body.push('\n');
    let checkpoint = Checkpoint {
        origin: ORIGIN.into(),
        size,
        root: tree.root_at(size),
        extensions: vec![],
    };
    body.push_str(&checkpoint.sign(signer).unwrap());
    body
}

fn add(addr: SocketAddr, body: &str) -> (u16, String) {
    let reply = call(addr, "POST", "/add-checkpoint", None, Some(body.as_bytes()));
    (reply.status, reply.text())
}

/// Every status code of C2SP tlog-witness, over HTTP against the real
/// binary, and a cosignature that verifies with the witness's printed key.
#[test]
fn a_witness_answers_every_status_of_the_specification() {
    let dir = tempfile::tempdir().unwrap();
    let signer = NoteSigner::from_seed("log.example", &[5; 32]).unwrap();
    let w = witness(
        dir.path(),
        "w.example",
        &[format!("{ORIGIN}={}", signer.verifier())],
    );
    let key = cairn_core::note::NoteVerifier::parse(&w.vkey).unwrap();
    let tree = history(1, 30);
    let (status, line) = add(w.addr, &request(0, &tree, 10, &signer));
    assert_eq!(status, 200, "{line}");
    let note = request(0, &tree, 10, &signer)
        .split_once("\n\n")
        .unwrap()
        .1
        .to_owned();
    let timestamp =
        cairn_core::checkpoint::verify_cosignature(&format!("{note}{line}"), &key).unwrap();
    assert!(timestamp > 1_600_000_000, "{timestamp}");
    assert_eq!(add(w.addr, &request(10, &tree, 20, &signer)).0, 200);
    // 409 with the witness's size as text/x.tlog.size.
    let reply = call(
        w.addr,
        "POST",
        "/add-checkpoint",
        None,
        Some(request(10, &tree, 30, &signer).as_bytes()),
    );
    assert_eq!(
        (
            reply.status,
            reply.text().as_str(),
            reply.content_type.as_str()
        ),
        (409, "20\n", "text/x.tlog.size")
    );
    // 422: a history that does not extend the cosigned one.
    assert_eq!(
        add(w.addr, &request(20, &history(2, 30), 30, &signer)).0,
        422
    );
    // 400: old size beyond the checkpoint; garbage.
    assert_eq!(add(w.addr, &request(20, &tree, 15, &signer)).0, 400);
    assert_eq!(add(w.addr, "hello").0, 400);
    // 403: another key for the origin.
    let impostor = NoteSigner::from_seed("log.example", &[6; 32]).unwrap();
    assert_eq!(add(w.addr, &request(20, &tree, 30, &impostor)).0, 403);
    // 404: an unknown origin.
    let stranger = request(0, &tree, 5, &signer).replace(ORIGIN, "other.example/x");
    assert_eq!(add(w.addr, &stranger).0, 404);
    // The state survived all of that: it still extends from 20.
    assert_eq!(add(w.addr, &request(20, &tree, 30, &signer)).0, 200);
}

/// The check-and-record is atomic: many concurrent requests that all claim
/// the witness is empty (old size 0), from two diverging histories, get
/// exactly one cosignature; the rest are 409.
#[test]
fn concurrent_requests_never_get_two_inconsistent_cosignatures() {
    let dir = tempfile::tempdir().unwrap();
    let signer = NoteSigner::from_seed("log.example", &[5; 32]).unwrap();
    let w = witness(
        dir.path(),
        "w.example",
        &[format!("{ORIGIN}={}", signer.verifier())],
    );
    let bodies: Vec<String> = (0..24u64)
        .map(|i| request(0, &history((i % 2) as u8, 30), 5 + i, &signer))
        .collect();
    let addr = w.addr;
    let answers: Vec<(u16, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = bodies
            .iter()
            .map(|b| scope.spawn(move || add(addr, b)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let accepted = answers.iter().filter(|(s, _)| *s == 200).count();
    let conflicts = answers.iter().filter(|(s, _)| *s == 409).count();
    assert_eq!((accepted, conflicts), (1, 23), "{answers:?}");
}

/// `cairn serve --witness-log`: one Cairn server witnesses another's log
/// from its own process (and keeps its witness key apart from its server
/// key).
#[test]
fn one_cairn_server_witnesses_another() {
    let dir = tempfile::tempdir().unwrap();
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&a_dir).unwrap();
    std::fs::create_dir_all(&b_dir).unwrap();
    let a = Target::embedded(&a_dir);
    let keys = json(&a.run(&["--json", "keys"], None));
    let log = format!(
        "{}/acme={}",
        keys["name"].as_str().unwrap(),
        keys["server_key"].as_str().unwrap()
    );
    // B's witness key, made beforehand so that A can be told its vkey.
    let witness_dir = b_dir.join("data/witness");
    std::fs::create_dir_all(&witness_dir).unwrap();
    let signer = NoteSigner::from_seed("cairn.local-witness", &[5; 32]).unwrap();
    std::fs::write(
        witness_dir.join(cairn_store::witness_state::WITNESS_KEY),
        format!("{}\n", signer.to_private_string().unwrap()),
    )
    .unwrap();
    let vkey = cairn_core::checkpoint::Cosigner::from_note_signer(&signer)
        .unwrap()
        .verifier()
        .to_string();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let (b, _) = serve_with(
        &b_dir,
        None,
        &["--witness-log", &log, "--witness-listen", &listen],
        &[],
    );
    let target = format!("http://{listen}={vkey}");
    let (a_server, admin) = serve_with(
        &a_dir,
        None,
        &["--witness", &target, "--witness-interval", "1"],
        &[],
    );
    let admin = admin.unwrap();
    record(a_server.addr, &admin, "s", 3);
    let note = cosigned(a_server.addr, &admin, 1);
    assert!(note.contains("cairn.local-witness"), "{note}");
    // B's own key is not its witness key.
    let b_keys = json(&Target::embedded(&b_dir).run(&["--json", "keys"], None));
    assert_ne!(b_keys["server_key"].as_str().unwrap(), vkey);
    drop(b);
}
