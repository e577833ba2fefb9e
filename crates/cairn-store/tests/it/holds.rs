//! What a write keeps alive ([`Ledger::submit_holding`]: the server's
//! count of the memory the write holds) lives until the write is durable,
//! whether or not anyone still waits for its answer (a client that hangs
//! up must not give back memory its queued steps still hold), and is let
//! go before the answer is sent (a client that sends its next request as
//! soon as it has the answer must not find its last one still counted).

use crate::conformance::{ORG, step};
use cairn_store::{Ledger, LedgerStore, SequencerConfig, SqliteOptions, SqliteStore, WriteRequest};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Records, when dropped, whether its session had been written by then.
struct Probe {
    store: Arc<dyn LedgerStore>,
    session: &'static str,
    seen: Arc<Mutex<Option<bool>>>,
}

impl Drop for Probe {
    fn drop(&mut self) {
        let written = self.store.session(ORG, self.session).unwrap().is_some();
        *self.seen.lock().unwrap() = Some(written);
    }
}

fn probe(store: &Arc<dyn LedgerStore>, session: &'static str) -> (Probe, Arc<Mutex<Option<bool>>>) {
    let seen = Arc::new(Mutex::new(None));
    let probe = Probe {
        store: Arc::clone(store),
        session,
        seen: Arc::clone(&seen),
    };
    (probe, seen)
}

fn seen_within(seen: &Mutex<Option<bool>>, within: Duration) -> Option<bool> {
    let until = Instant::now() + within;
    loop {
        let now = *seen.lock().unwrap();
        if now.is_some() || Instant::now() > until {
            return now;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A queued write whose answer nobody awaits keeps its hold until it is
/// durable; an awaited one has let go of it when its answer arrives. `stall`, when given, keeps the store from writing until the
/// function it returns is called: the hold must live through it. A write
/// refused before it is queued lets go of its hold at once.
pub fn holds_live_until_their_writes_are_durable(
    store: Arc<dyn LedgerStore>,
    stall: Option<&dyn Fn() -> Box<dyn FnOnce()>>,
) {
    let ledger = Ledger::new(Arc::clone(&store), SequencerConfig::default());
    ledger
        .write(WriteRequest::Step(Box::new(step("warm", "plan", "x"))))
        .unwrap();
    let release = stall.map(|stall| stall());
    let (held, seen) = probe(&store, "held");
    let pending = ledger.submit_holding(
        WriteRequest::Step(Box::new(step("held", "plan", "queued"))),
        Box::new(held),
    );
    drop(pending);
    if let Some(release) = release {
        assert_eq!(
            seen_within(&seen, Duration::from_millis(500)),
            None,
            "the hold of a queued write was let go while the store could not write"
        );
        release();
    }
    assert_eq!(
        seen_within(&seen, Duration::from_secs(20)),
        Some(true),
        "the hold must be let go once its write is durable, and not before"
    );

    let (answered, seen) = probe(&store, "answered");
    ledger
        .submit_holding(
            WriteRequest::Step(Box::new(step("answered", "plan", "x"))),
            Box::new(answered),
        )
        .wait()
        .unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        Some(true),
        "a hold must be let go, after the commit, before the answer is sent"
    );

    let (refused, seen) = probe(&store, "refused");
    let answer = ledger
        .submit_holding(
            WriteRequest::Step(Box::new(step("refused", "no-such-kind", "x"))),
            Box::new(refused),
        )
        .wait();
    assert!(answer.is_err(), "{answer:?}");
    assert_eq!(*seen.lock().unwrap(), Some(false));
}

/// On the embedded store (the PostgreSQL test stalls the store with a
/// table lock: SQLite's writer answers a lock held elsewhere at once).
#[test]
fn embedded_holds_live_until_their_writes_are_durable() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn LedgerStore> =
        Arc::new(SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap());
    holds_live_until_their_writes_are_durable(store, None);
}
