//! Fault injection against the real `cairn serve`: the disk fills up,
//! writes and fsyncs fail with EIO, the database becomes read-only
//! (`disk.rs`, through the LD_PRELOAD shim `faultfs.c`), PostgreSQL is
//! killed and restarted, the network to it resets or goes silent
//! (`pg.rs`). Under load from concurrent clients, every case shows the
//! same four things:
//!
//! - a write during the fault is answered, never left hanging, with `503`
//!   and the one JSON error shape, and the process stays up;
//! - every step acknowledged (`201`) is in the store afterwards, at the
//!   index and `seq` it was acknowledged with;
//! - the store verifies (`cairn verify`): chains and the org log are
//!   contiguous, nothing half-written;
//! - once the cause is gone, writes succeed again without a restart.
//!
//! `docs/OPERATIONS.md` ("Faults") documents each case.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[path = "../common/mod.rs"]
mod common;
mod disk;
mod pg;

use cairn_testkit::http::{call, try_call_within};
use common::{Server, Target, json};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a client waits for any answer before calling the server hung.
const PATIENCE: Duration = Duration::from_secs(30);

/// Phases of a run: the test moves the epoch forward when it switches a
/// fault on and off, and each write notes the epoch it was sent and
/// answered in. A write sent and answered in `FAULT` met the fault for
/// certain; one that overlaps `ENDING` (the fault being removed, e.g.
/// PostgreSQL starting) may go either way.
const HEALTHY: u64 = 0;
const FAULT: u64 = 1;
const ENDING: u64 = 2;
const RECOVERED: u64 = 3;

/// What one write got.
#[derive(Debug, Clone)]
struct Outcome {
    sent: u64,
    answered: u64,
    status: u16,
    code: String,
    message: String,
    /// For a `201`: (session, step index, seq, trace id).
    ack: Option<(String, u64, u64, String)>,
}

/// Concurrent clients writing steps until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    epoch: Arc<AtomicU64>,
    clients: Vec<JoinHandle<Vec<Outcome>>>,
}

/// The sessions the clients write to: one each, and one they share.
fn sessions(clients: usize) -> Vec<String> {
    (0..clients)
        .map(|c| format!("own-{c}"))
        .chain(std::iter::once("shared".to_owned()))
        .collect()
}

impl Load {
    fn start(addr: SocketAddr, token: &str, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let epoch = Arc::new(AtomicU64::new(HEALTHY));
        let clients = (0..clients)
            .map(|c| {
                let (stop, epoch, token) =
                    (Arc::clone(&stop), Arc::clone(&epoch), token.to_owned());
                std::thread::spawn(move || {
                    let mut outcomes = Vec::new();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let session = if n.is_multiple_of(2) {
                            format!("own-{c}")
                        } else {
                            "shared".to_owned()
                        };
                        n += 1;
                        let body = json!({
                            "session_id": session, "agent_id": "faulty", "step_type": "thinking",
                            "content": format!("client {c} step {n}"),
                        });
                        let sent = epoch.load(Ordering::SeqCst);
                        let reply = try_call_within(
                            addr,
                            "POST",
                            "/v1/steps",
                            Some(&token),
                            Some(body.to_string().as_bytes()),
                            Some(PATIENCE),
                        )
                        .unwrap_or_else(|e| panic!("client {c}: no answer ({e})"));
                        let answered = epoch.load(Ordering::SeqCst);
                        let mut outcome = Outcome {
                            sent,
                            answered,
                            status: reply.status,
                            code: String::new(),
                            message: String::new(),
                            ack: None,
                        };
                        if reply.status == 201 {
                            let v = reply.json();
                            outcome.ack = Some((
                                session,
                                v["step_index"].as_u64().unwrap(),
                                v["seq"].as_u64().unwrap(),
                                v["trace_id"].as_str().unwrap().to_owned(),
                            ));
                        } else {
                            // The one error shape, whatever went wrong.
                            let v = reply.json();
                            assert!(
                                v["error"]["code"].is_string() && v["error"]["message"].is_string(),
                                "client {c}: {} {v}",
                                reply.status
                            );
                            outcome.code = v["error"]["code"].as_str().unwrap().to_owned();
                            outcome.message = v["error"]["message"].as_str().unwrap().to_owned();
                        }
                        outcomes.push(outcome);
                        if reply.status != 201 {
                            // A failing store answers at once: do not spin.
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                    outcomes
                })
            })
            .collect();
        Load {
            stop,
            epoch,
            clients,
        }
    }

    fn enter(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::SeqCst);
    }

    fn finish(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::Relaxed);
        self.clients
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .collect()
    }
}

/// Waits (up to `limit`) until `ok` holds, checking every 50 ms.
fn wait_for(limit: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Panics if the server process exited.
fn assert_alive(server: &mut Server) {
    let status = server.child.try_wait().unwrap();
    assert!(status.is_none(), "cairn serve exited: {status:?}");
}

/// Runs load through a fault: healthy before, the fault switched on by
/// `on` and held for `hold`, switched off by `off`; checks what every
/// write got against `expected` (the codes a write during the fault may
/// get) and returns the outcomes.
fn through_fault(
    server: &mut Server,
    token: &str,
    expected: &[(u16, &str)],
    hold: Duration,
    on: impl FnOnce(),
    off: impl FnOnce(),
) -> Vec<Outcome> {
    let load = Load::start(server.addr, token, 3);
    std::thread::sleep(Duration::from_millis(500));
    on();
    load.enter(FAULT);
    std::thread::sleep(hold);
    assert_alive(server);
    load.enter(ENDING);
    off();
    load.enter(RECOVERED);
    // Recovery: the next writes succeed, without a restart.
    let mut last = String::new();
    let recovered = wait_for(Duration::from_secs(20), || {
        let reply = call(
            server.addr,
            "POST",
            "/v1/steps",
            Some(token),
            Some(json!({"session_id": "probe", "agent_id": "probe", "step_type": "thinking", "content": "back?"}).to_string().as_bytes()),
        );
        last = format!("{} {}", reply.status, reply.text());
        reply.status == 201
    });
    assert!(
        recovered,
        "writes still fail after the fault was removed: {last}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_alive(server);
    let outcomes = load.finish();
    assert_alive(server);

    let count = |f: &dyn Fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count();
    let before = count(&|o| o.answered == HEALTHY && o.status == 201);
    let during: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.sent == FAULT && o.answered == FAULT)
        .collect();
    let after_ok = count(&|o| o.sent == RECOVERED && o.status == 201);
    let after_failed: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.sent == RECOVERED && o.status != 201)
        .collect();
    eprintln!(
        "{} writes: {before} acknowledged before the fault, {} during it ({:?}), {after_ok} acknowledged after, {} failed after",
        outcomes.len(),
        during.len(),
        during
            .iter()
            .map(|o| (o.status, o.code.as_str()))
            .collect::<BTreeSet<_>>(),
        after_failed.len()
    );
    if let Some(o) = during.first() {
        eprintln!("for example: {} {}: {}", o.status, o.code, o.message);
    }
    assert!(before > 0, "no write succeeded before the fault");
    assert!(!during.is_empty(), "no write was made during the fault");
    for o in &during {
        assert!(
            expected.contains(&(o.status, o.code.as_str())),
            "a write during the fault got {} {}",
            o.status,
            o.code
        );
    }
    // Every answer is a success or a clean refusal from the list: no 500,
    // no other error.
    for o in &outcomes {
        assert!(
            o.status == 201 || expected.contains(&(o.status, o.code.as_str())),
            "{o:?}"
        );
    }
    assert!(after_ok > 0, "no write succeeded after the fault");
    assert!(
        after_failed.is_empty(),
        "writes failed after the fault was removed: {after_failed:?}"
    );
    outcomes
}

/// Every acknowledged step is in its session at the index and `seq` it
/// was acknowledged with, every session's chain verifies with contiguous
/// indices, and `cairn verify` accepts the whole store.
fn assert_intact(
    server: &Server,
    token: &str,
    target: Target<'_>,
    outcomes: &[Outcome],
    clients: usize,
) {
    let acked: HashMap<&str, (&str, u64, u64)> = outcomes
        .iter()
        .filter_map(|o| o.ack.as_ref())
        .map(|(s, i, q, t)| (t.as_str(), (s.as_str(), *i, *q)))
        .collect();
    let mut found = 0;
    for session in sessions(clients) {
        let reply = call(
            server.addr,
            "GET",
            &format!("/v1/sessions/{session}?verify=true"),
            Some(token),
            None,
        );
        assert_eq!(reply.status, 200, "{session}: {}", reply.text());
        let body = reply.json();
        assert_eq!(body["chain_valid"], true, "{session}: {body}");
        for (i, step) in body["steps"].as_array().unwrap().iter().enumerate() {
            assert_eq!(step["step_index"], i as u64, "{session}");
            if let Some((s, index, seq)) = acked.get(step["trace_id"].as_str().unwrap()) {
                assert_eq!((*s, *index), (session.as_str(), i as u64));
                assert_eq!(step["seq"].as_u64(), Some(*seq), "{session} {i}: {step}");
                found += 1;
            }
        }
    }
    assert_eq!(found, acked.len(), "acknowledged steps are missing");
    let run = target.run(&["verify", "--json"], None);
    let verdict: Value = json(&run);
    assert_eq!(run.code, 0, "{verdict} {}", run.stderr);
    assert_eq!(verdict["verified"], true, "{verdict}");
}
