//! A client that hangs up stops waiting, but the steps it had queued are
//! still written, and hold their memory until they are: that memory stays
//! counted against the request budget until then. (It was given back when
//! the client left: under a long table lock, waves of 2 MB batches whose
//! clients hung up once held 834 MB against a 128 MiB per-org budget.)

use super::common::*;
use cairn_testkit::PgCluster;

/// The value of the gauge `name` in `/metrics` (scraped from the
/// server's own machine, which needs no token).
fn gauge(server: &Server, name: &str) -> u64 {
    let reply = get(server, "/metrics", "");
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply
        .text()
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// Waits until the gauge `name` satisfies `ok`.
fn until_gauge(server: &Server, name: &str, ok: impl Fn(u64) -> bool) -> u64 {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let value = gauge(server, name);
        if ok(value) {
            return value;
        }
        assert!(Instant::now() < until, "{name} stayed at {value}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `body` to `path` as the admin, waits until the sequencer holds
/// `queued` writes (with this request's), and hangs up without reading
/// the answer.
fn send_and_hang_up(server: &Server, path: &str, body: &Value, queued: u64) {
    let body = serde_json::to_vec(body).unwrap();
    let mut stream = TcpStream::connect(server.addr).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        server.admin,
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&body).unwrap();
    until_gauge(server, "cairn_sequencer_in_flight", |now| now == queued);
    drop(stream);
}

/// On PostgreSQL, with the entries table locked by another session so
/// that nothing is written: a batch, an audit event, then a turn counted
/// past the whole budget, each sent by a client that hangs up once it is queued, stay
/// counted until written; a step sent meanwhile is refused `503
/// overloaded`; once the lock goes, every queued step is written and the
/// count falls back to nothing.
#[test]
fn queued_steps_stay_counted_after_their_client_hangs_up() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.create_database("hangups");
    let keys = tempfile::tempdir().unwrap();
    let key = cairn_store::load_or_create_server_key(keys.path(), "cairn.local").unwrap();
    let store: Arc<dyn LedgerStore> = Arc::new(
        cairn_store::pg::PgStore::open(cairn_store::pg::PgOptions::new(url), key).unwrap(),
    );
    let admin = cairn_server::bootstrap_admin_key(store.as_ref(), "acme")
        .unwrap()
        .unwrap();
    let ledger = Arc::new(Ledger::new(Arc::clone(&store), SequencerConfig::default()));
    let state = AppState::new(ledger, config(Limits::default()));
    let server = serve_state("127.0.0.1:0", state, admin, store, keys);
    let admin = server.admin.clone();
    assert_eq!(
        post(
            &server,
            "/v1/steps",
            &admin,
            &step("warm", "a", "plan", "x")
        )
        .status,
        201
    );
    assert_eq!(gauge(&server, "cairn_request_memory_bytes"), 0);
    let lock = || {
        let mut locker = cluster.connect_to("hangups");
        locker
            .batch_execute("BEGIN; LOCK TABLE entries IN EXCLUSIVE MODE")
            .unwrap();
        locker
    };
    let written = |session: &str, steps: usize| {
        until_gauge(&server, "cairn_sequencer_in_flight", |queued| queued == 0);
        until_gauge(&server, "cairn_request_memory_bytes", |counted| {
            counted == 0
        });
        let read = get(&server, &format!("/v1/sessions/{session}"), &admin);
        assert_eq!(read.status, 200, "{}", read.text());
        assert_eq!(read.json()["steps"].as_array().map(Vec::len), Some(steps));
    };

    // A batch: its prepared steps (at least the sequencer's share of
    // each) stay counted.
    let mut locker = lock();
    let batch: Vec<Value> = (0..500)
        .map(|i| step("batched", "a", "plan", &format!("step {i}")))
        .collect();
    send_and_hang_up(&server, "/v1/steps/batch", &json!(batch), 500);
    // Long enough for the server to see the client gone.
    std::thread::sleep(Duration::from_millis(500));
    let counted = gauge(&server, "cairn_request_memory_bytes");
    assert!(
        counted >= 500 * 4096,
        "a queued batch whose client hung up must stay counted, but {counted} bytes are"
    );
    locker.batch_execute("COMMIT").unwrap();
    written("batched", 500);

    // An audit event (whose detail, like a review's note or an erasure's
    // reason, rides in its queued write as sent) is counted until it is
    // written.
    // A step stuck on the lock holds the sequencer; the event waits behind
    // it (on its own, it would be refused without touching the table).
    let mut locker = lock();
    let stuck = step("stuck", "a", "plan", "x");
    send_and_hang_up(&server, "/v1/steps", &stuck, 1);
    // A detail past what the ledger takes (64 KiB in canonical form) is
    // refused before it is queued, at once, stuck sequencer or not.
    let oversized: Vec<Value> = (0..20_000).map(|_| json!({"a": 0})).collect();
    let refused = post(
        &server,
        "/v1/audit-events",
        &admin,
        &json!({"action": "probe", "detail": oversized}),
    );
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (400, "payload_too_large"),
        "{}",
        refused.text()
    );
    let detail: Vec<Value> = (0..7_000).map(|_| json!({"a": 0})).collect();
    let event = json!({"action": "probe", "detail": detail});
    send_and_hang_up(&server, "/v1/audit-events", &event, 2);
    std::thread::sleep(Duration::from_millis(500));
    let counted = gauge(&server, "cairn_request_memory_bytes");
    assert!(
        counted >= 1 << 20,
        "a queued audit event whose client hung up must stay counted, but {counted} bytes are"
    );
    locker.batch_execute("COMMIT").unwrap();
    written("stuck", 1);

    // The turn of `a_turn_alone_goes_through_however_much_it_builds`,
    // counted past the whole budget: every other request is refused
    // until it is written.
    let mut locker = lock();
    let edges: Vec<Value> = (0..30_000).map(|i| json!([i % 97, (i * 7) % 89])).collect();
    let big = json!({"step_type": "tool_call", "output_data": {"edges": edges}});
    let turn = json!({"agent_id": "a", "turn_id": "t", "steps": vec![big; 7]});
    send_and_hang_up(&server, "/v1/sessions/big/turns", &turn, 1);
    std::thread::sleep(Duration::from_millis(500));
    let counted = gauge(&server, "cairn_request_memory_bytes");
    assert!(
        counted > cairn_server::MAX_HELD_BODY_MEMORY as u64,
        "a queued turn whose client hung up must stay counted, but {counted} bytes are"
    );
    let refused = post(
        &server,
        "/v1/steps",
        &admin,
        &step("other", "a", "plan", "x"),
    );
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (503, "overloaded"),
        "{}",
        refused.text()
    );
    locker.batch_execute("COMMIT").unwrap();
    written("big", 7);
    assert_eq!(
        post(
            &server,
            "/v1/steps",
            &admin,
            &step("other", "a", "plan", "x")
        )
        .status,
        201
    );
}
