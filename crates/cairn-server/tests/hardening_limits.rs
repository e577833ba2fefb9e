//! Hostile clients against the server's limits, on a real loopback socket:
//! analyst SQL that tries to leave its org or exhaust memory, streamed and
//! huge bundles (and their own time), expensive operations sharing a few
//! slots, slow and dribbling clients, too many connections, each key's
//! rate, and listings verified within a budget. (Moved from `hardening.rs`.)

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;

// ---------------------------------------------------------------- item 1, 2

/// The review's exploit and its cousins, over HTTP with a reader key:
/// nothing of another org, of the keys or of the catalog comes back; and a
/// query that would build a gigabyte is refused or stopped, not run.
#[test]
fn analyst_sql_stays_in_its_org_and_within_its_limits() {
    let mut limits = Limits::default();
    limits.sql.max_value_bytes = 1 << 20;
    limits.sql.time = Duration::from_millis(500);
    let server = start(config(limits));
    let admin = server.admin.clone();
    let theirs = key_for(&server, "globex", Role::Admin, None);
    for (token, content) in [(&admin, "acme visible"), (&theirs, "GLOBEX SECRET")] {
        let r = post(
            &server,
            "/v1/steps",
            token,
            &step("s", "a", "plan", content),
        );
        assert_eq!(r.status, 201, "{}", r.text());
    }
    let reader = key_for(&server, "acme", Role::Reader, None);
    let secrets = [
        "GLOBEX",
        "globex",
        "CREATE TABLE",
        "token_hash",
        "schema_version",
    ];
    for sql in [
        "WITH \"x FROM api_keys --\" AS (SELECT 1) SELECT * FROM \"x FROM api_keys --\"",
        "WITH \"y UNION SELECT sql, 1 FROM sqlite_master --\" AS (SELECT 1, 2) SELECT * FROM \"y UNION SELECT sql, 1 FROM sqlite_master --\"",
        "WITH \"z, entries --\" AS (SELECT 1) SELECT content FROM \"z, entries --\"",
        "SELECT 1 AS \"a\\\"\" FROM api_keys --\" FROM steps",
        "SELECT * FROM api_keys",
        "SELECT * FROM sqlite_master",
    ] {
        let r = post(&server, "/v1/sql", &reader, &json!({"sql": sql}));
        let text = r.text();
        for secret in secrets {
            assert!(!text.contains(secret), "{sql}: {text}");
        }
    }
    let huge = post(
        &server,
        "/v1/sql",
        &reader,
        &json!({"sql": "SELECT printf('%.*c', 999999999, 'x')"}),
    );
    assert_eq!((huge.status, huge.code().as_str()), (400, "sql_refused"));
    let doubling = post(
        &server,
        "/v1/sql",
        &reader,
        &json!({"sql": "WITH RECURSIVE r(s, n) AS (SELECT 'x', 0 UNION ALL SELECT s || s, n + 1 FROM r WHERE n < 40) SELECT length(s) FROM r"}),
    );
    assert_eq!(
        (doubling.status, doubling.code().as_str()),
        (400, "sql_too_large"),
        "{}",
        doubling.text()
    );
    let forever = post(
        &server,
        "/v1/sql",
        &reader,
        &json!({"sql": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"}),
    );
    assert_eq!(
        (forever.status, forever.code().as_str()),
        (400, "sql_timeout"),
        "{}",
        forever.text()
    );
}

// ------------------------------------------------------------------ item 3

/// Bundles are read as a stream: a valid one sent in tiny chunks verifies;
/// a line past the line limit, or a body past the size limit, is refused
/// with a clear error.
#[test]
fn bundle_uploads_are_streamed_and_bounded() {
    let limits = Limits {
        max_bundle_line_bytes: 64 * 1024,
        ..Limits::default()
    };
    let server = start(ServerConfig {
        max_bundle_bytes: 512 * 1024,
        ..config(limits)
    });
    let admin = server.admin.clone();
    for i in 0..5 {
        let r = post(
            &server,
            "/v1/steps",
            &admin,
            &step("s", "a", "plan", &format!("step {i}")),
        );
        assert_eq!(r.status, 201);
    }
    let bundle = get(&server, "/v1/export?session=s", &admin).body;
    // Chunked, a few bytes at a time.
    let mut stream = TcpStream::connect(server.addr).unwrap();
    write!(
        stream,
        "POST /v1/bundles/verify HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {admin}\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .unwrap();
    for chunk in bundle.chunks(7) {
        write!(stream, "{:x}\r\n", chunk.len()).unwrap();
        stream.write_all(chunk).unwrap();
        stream.write_all(b"\r\n").unwrap();
    }
    stream.write_all(b"0\r\n\r\n").unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).unwrap();
    let verdict = parse_response(&bytes);
    assert_eq!(verdict.status, 200);
    assert_eq!(verdict.json()["verified"], true, "{}", verdict.json());

    let mut long_line = bundle.clone();
    long_line.extend(std::iter::repeat_n(b'x', 100 * 1024));
    let r = call(
        &server,
        "POST",
        "/v1/bundles/verify",
        &admin,
        Some(&long_line),
    );
    assert_eq!(
        (r.status, r.code().as_str()),
        (413, "line_too_long"),
        "{}",
        r.text()
    );
    assert!(r.text().contains("65536"), "{}", r.text());

    // A line within the length limit whose parsed form would take more
    // than 64 times it (tiny objects) is refused before it is parsed.
    let mut tiny = b"[".to_vec();
    while tiny.len() < 60 * 1024 {
        tiny.extend_from_slice(br#"{"":0},"#);
    }
    tiny.extend_from_slice(b"0]\n");
    let r = call(&server, "POST", "/v1/bundles/verify", &admin, Some(&tiny));
    assert_eq!(
        (r.status, r.code().as_str()),
        (413, "line_too_complex"),
        "{}",
        r.text()
    );
    assert!(
        r.text().contains("line 1 of the bundle could take"),
        "{}",
        r.text()
    );

    let many_lines: Vec<u8> = std::iter::repeat_n(b"{}\n".as_slice(), 200_000)
        .flatten()
        .copied()
        .collect();
    let r = call(
        &server,
        "POST",
        "/v1/bundles/verify",
        &admin,
        Some(&many_lines),
    );
    // Verification fails at its first line and the rest is not read; or,
    // had it been read, it is past the size limit.
    assert!(
        r.status == 200 && r.json()["verified"] == false || r.status == 413,
        "{} {}",
        r.status,
        r.text()
    );
}

/// Expensive operations share a few slots: with one slot held by a slow
/// upload, another verification waits briefly, then gets 503 with
/// Retry-After; cheap requests are still served.
#[test]
fn expensive_operations_are_bounded() {
    let limits = Limits {
        max_expensive: 1,
        expensive_wait: Duration::from_millis(200),
        ..Limits::default()
    };
    let server = start(config(limits));
    let admin = server.admin.clone();
    assert_eq!(
        post(&server, "/v1/steps", &admin, &step("s", "a", "plan", "x")).status,
        201
    );
    // A slow upload holds the slot.
    let mut slow = TcpStream::connect(server.addr).unwrap();
    write!(
        slow,
        "POST /v1/bundles/verify HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}\r\nContent-Length: 1000000\r\n\r\n{{\"partial"
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let busy = get(&server, "/v1/verify", &admin);
    assert_eq!(
        (busy.status, busy.code().as_str()),
        (503, "overloaded"),
        "{}",
        busy.text()
    );
    let head = raw(
        server.addr,
        &format!("GET /v1/verify HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}"),
        b"",
    );
    assert_eq!(head.status, 503);
    assert_eq!(head.header("retry-after"), Some("1"));
    assert_eq!(get(&server, "/v1/sessions/s", &admin).status, 200);
    // A listing verifies chains only in a free slot: with none, it lists
    // them unverified at once (it verified up to 10,000 steps outside the
    // slots), on the API, MCP and the web UI alike.
    let listed = get(&server, "/v1/sessions", &admin);
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert_eq!(
        listed.json()[0]["chain_valid"],
        Value::Null,
        "{}",
        listed.text()
    );
    // An entry bundle rebuilds its leaves from whole records: a slot; a
    // hash tile reads stored hashes: none.
    let entries = get(&server, "/v1/tlog/tile/entries/000.p/1", &admin);
    assert_eq!(
        (entries.status, entries.code().as_str()),
        (503, "overloaded"),
        "{}",
        entries.text()
    );
    assert_eq!(get(&server, "/v1/tlog/tile/0/000.p/1", &admin).status, 200);
    drop(slow);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(get(&server, "/v1/verify", &admin).status, 200);
    assert_eq!(
        get(&server, "/v1/tlog/tile/entries/000.p/1", &admin).status,
        200
    );
    let listed = get(&server, "/v1/sessions", &admin);
    assert_eq!(listed.json()[0]["chain_valid"], true, "{}", listed.text());
}

/// One org holds at most half of the expensive slots: a tenant whose
/// uploads (or runaway queries) hold its share gets 503 for more, naming
/// its org's share, while another tenant's verification is served at once
/// (one tenant's ten looping queries once kept every other tenant's
/// exports and searches at 503).
#[test]
fn one_org_cannot_hold_every_expensive_slot() {
    let limits = Limits {
        max_expensive: 4,
        expensive_wait: Duration::from_millis(200),
        ..Limits::default()
    };
    let server = start(config(limits));
    let admin = server.admin.clone();
    let theirs = key_for(&server, "globex", Role::Admin, None);
    for token in [&admin, &theirs] {
        assert_eq!(
            post(&server, "/v1/steps", token, &step("s", "a", "plan", "x")).status,
            201
        );
    }
    // acme's two slow uploads hold its share (2 of 4).
    let slow: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut slow = TcpStream::connect(server.addr).unwrap();
            write!(
                slow,
                "POST /v1/bundles/verify HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}\r\nContent-Length: 1000000\r\n\r\n{{\"partial"
            )
            .unwrap();
            slow
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let busy = get(&server, "/v1/verify", &admin);
    assert_eq!(
        (busy.status, busy.code().as_str()),
        (503, "overloaded"),
        "{}",
        busy.text()
    );
    assert!(
        busy.text().contains("as one org may (2 of"),
        "{}",
        busy.text()
    );
    for _ in 0..3 {
        let served = get(&server, "/v1/verify", &theirs);
        assert_eq!(served.status, 200, "{}", served.text());
    }
    drop(slow);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(get(&server, "/v1/verify", &admin).status, 200);
}

// ------------------------------------------------------------------ item 4

/// The OTLP listener (`--otlp-listen`) times bodies as the main port
/// does: a body that stops, or one dribbled past its deadline, is answered
/// 408 and gives its OTLP request slot back (a review held every slot of
/// the server for minutes with stalled bodies, shutting other orgs out).
#[test]
fn the_otlp_listener_cuts_off_slow_bodies() {
    let limits = Limits {
        body_idle_timeout: Duration::from_millis(400),
        body_timeout: Duration::from_millis(1500),
        ..Limits::default()
    };
    let (server, state) = start_with_state(config(limits));
    let otlp = otlp_listener(state);
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n",
        server.admin
    );
    // The answer to `stream`, which must be a 408 within 5 s of `started`.
    let timed_out = |stream: &mut TcpStream, started: Instant| {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut bytes = Vec::new();
        let _ = stream.read_to_end(&mut bytes);
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(parse_response(&bytes).status, 408, "{text}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    };
    // A body that stops.
    let mut stalled = TcpStream::connect(otlp.addr).unwrap();
    stalled.write_all(head.as_bytes()).unwrap();
    stalled.write_all(b"{\"resourceSpans\": [").unwrap();
    timed_out(&mut stalled, Instant::now());
    // A body dribbled fast enough never to be idle still has a deadline.
    let mut dribble = TcpStream::connect(otlp.addr).unwrap();
    dribble.write_all(head.as_bytes()).unwrap();
    dribble
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let started = Instant::now();
    let mut peek = [0u8; 16];
    while started.elapsed() < Duration::from_secs(6) {
        if dribble.write_all(b" ").is_err() || dribble.peek(&mut peek).is_ok_and(|n| n > 0) {
            break;
        }
    }
    timed_out(&mut dribble, started);
}

/// Slowloris, dribbled bodies, idle keep-alive connections and too many
/// connections.
#[test]
fn slow_clients_are_cut_off_and_connections_are_bounded() {
    let limits = Limits {
        header_timeout: Duration::from_millis(500),
        body_idle_timeout: Duration::from_millis(400),
        body_timeout: Duration::from_millis(1500),
        max_connections: 3,
        ..Limits::default()
    };
    let server = start(config(limits));
    let admin = server.admin.clone();

    // Headers a byte at a time: the connection is closed.
    let mut loris = TcpStream::connect(server.addr).unwrap();
    let started = Instant::now();
    for b in b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: " {
        if loris.write_all(&[*b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        if started.elapsed() > Duration::from_secs(2) {
            break;
        }
    }
    assert!(closed_within(&mut loris, Duration::from_secs(2)));
    assert!(started.elapsed() < Duration::from_secs(4));

    // An idle keep-alive connection is closed after the timeout.
    let mut idle = TcpStream::connect(server.addr).unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 1024];
    let n = idle.read(&mut first).unwrap();
    assert!(first[..n].starts_with(b"HTTP/1.1 200"));
    assert!(closed_within(&mut idle, Duration::from_secs(3)));

    // A body that stops: 408.
    let mut stalled = TcpStream::connect(server.addr).unwrap();
    write!(
        stalled,
        "POST /v1/steps HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {admin}\r\nContent-Length: 100\r\n\r\n{{\"session_id\""
    )
    .unwrap();
    let mut bytes = Vec::new();
    stalled
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = stalled.read_to_end(&mut bytes);
    let r = parse_response(&bytes);
    assert_eq!((r.status, r.code().as_str()), (408, "timeout"));

    // A body dribbled fast enough never to be idle still has a deadline.
    let mut dribble = TcpStream::connect(server.addr).unwrap();
    write!(
        dribble,
        "POST /v1/steps HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {admin}\r\nContent-Length: 1000\r\n\r\n"
    )
    .unwrap();
    let started = Instant::now();
    dribble
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut peek = [0u8; 16];
    while started.elapsed() < Duration::from_secs(4) {
        if dribble.write_all(b" ").is_err() {
            break;
        }
        // Stop writing as soon as the answer is there.
        match dribble.peek(&mut peek) {
            Ok(_) => break,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let mut bytes = Vec::new();
    dribble
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = dribble.read_to_end(&mut bytes);
    let r = parse_response(&bytes);
    assert_eq!((r.status, r.code().as_str()), (408, "timeout"));

    // Three connections are served at once; a fourth waits until one ends.
    let held: Vec<TcpStream> = (0..3)
        .map(|_| {
            let s = TcpStream::connect(server.addr).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            s
        })
        .collect();
    let mut fourth = TcpStream::connect(server.addr).unwrap();
    fourth
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    fourth
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(fourth.read(&mut buf).is_err(), "served beyond the limit");
    drop(held);
    fourth
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut bytes = Vec::new();
    let _ = fourth.read_to_end(&mut bytes);
    assert!(bytes.starts_with(b"HTTP/1.1 200"), "{bytes:?}");
}

/// One client address holds at most its share of the connections: past
/// it a new connection is answered 503 `overloaded` at once and closed,
/// so that a client opening many and dribbling each request (a review
/// held all 1,024 with bodies of a byte every 3 s, without a key) cannot
/// leave none for others; a connection that ends gives its place back.
#[test]
fn one_address_cannot_hold_every_connection() {
    let limits = Limits {
        max_connections: 16,
        max_connections_per_address: 2,
        ..Limits::default()
    };
    let server = start(config(limits));
    let held: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = TcpStream::connect(server.addr).unwrap();
            // A request whose body never comes: the connection stays held.
            s.write_all(b"POST /ui/sign-in HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\na")
                .unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut third = TcpStream::connect(server.addr).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = third.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let mut bytes = Vec::new();
    let _ = third.read_to_end(&mut bytes);
    let r = parse_response(&bytes);
    assert_eq!(
        (r.status, r.code().as_str()),
        (503, "overloaded"),
        "{bytes:?}"
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(200));
    let mut again = TcpStream::connect(server.addr).unwrap();
    again
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    again
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut bytes = Vec::new();
    let _ = again.read_to_end(&mut bytes);
    assert!(bytes.starts_with(b"HTTP/1.1 200"), "{bytes:?}");
}

/// A cross-site form post to the web UI is refused from its headers,
/// before its body is read: a body that never comes does not delay the
/// 403 (and a path that is no trace id is not parsed first).
#[test]
fn cross_site_forms_are_refused_before_their_bodies() {
    let server = start(config(Limits::default()));
    for path in ["/ui/sign-in", "/ui/sign-out", "/ui/reviews/%FF"] {
        let mut s = TcpStream::connect(server.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nOrigin: http://evil.example\r\nConnection: close\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\na"
        )
        .unwrap();
        let started = Instant::now();
        let mut bytes = Vec::new();
        let _ = s.read_to_end(&mut bytes);
        assert!(started.elapsed() < Duration::from_secs(2), "{path}");
        let r = parse_response(&bytes);
        assert_eq!(r.status, 403, "{path}: {bytes:?}");
    }
}

// --------------------------------------------------------------- limits

/// Each key has a request rate; past it, 429 with Retry-After, and other
/// keys are not affected.
#[test]
fn each_key_has_a_rate() {
    let limits = Limits {
        rate_per_second: 2,
        rate_burst: 5,
        ..Limits::default()
    };
    let server = start(config(limits));
    let admin = server.admin.clone();
    let other = key_for(&server, "acme", Role::Reader, None);
    let statuses: Vec<u16> = (0..8)
        .map(|_| get(&server, "/v1/sessions", &admin).status)
        .collect();
    assert!(statuses[..5].iter().all(|s| *s == 200), "{statuses:?}");
    assert!(statuses.contains(&429), "{statuses:?}");
    let limited = raw(
        server.addr,
        &format!("GET /v1/sessions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}"),
        b"",
    );
    assert_eq!(
        (limited.status, limited.code().as_str()),
        (429, "rate_limited")
    );
    assert!(limited.header("retry-after").is_some());
    assert_eq!(get(&server, "/v1/sessions", &other).status, 200);
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(get(&server, "/v1/sessions", &admin).status, 200);
}

/// Listing sessions verifies them within a budget of steps; past it,
/// chain_valid is null, and verify=false skips verification.
#[test]
fn listing_sessions_verifies_within_a_budget() {
    let limits = Limits {
        list_verify_steps: 5,
        ..Limits::default()
    };
    let server = start(config(limits));
    let admin = server.admin.clone();
    for session in ["one", "two", "three"] {
        for i in 0..2 {
            let r = post(
                &server,
                "/v1/steps",
                &admin,
                &step(session, "a", "plan", &format!("{i}")),
            );
            assert_eq!(r.status, 201);
        }
    }
    let listed = get(&server, "/v1/sessions", &admin).json();
    let valid: Vec<Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["chain_valid"].clone())
        .collect();
    assert_eq!(valid, [json!(true), json!(true), Value::Null], "{listed}");
    let unverified = get(&server, "/v1/sessions?verify=false", &admin).json();
    assert!(
        unverified
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["chain_valid"].is_null())
    );
}

/// A bundle upload has its own time: slower than the request timeout of
/// ordinary routes, it still verifies, while an ordinary body that slow is
/// cut.
#[test]
fn bundle_uploads_have_their_own_time() {
    let limits = Limits {
        request_timeout: Duration::from_millis(800),
        body_timeout: Duration::from_millis(800),
        bundle_body_timeout: Duration::from_secs(10),
        ..Limits::default()
    };
    let server = start(config(limits));
    let admin = server.admin.clone();
    assert_eq!(
        post(&server, "/v1/steps", &admin, &step("s", "a", "plan", "x")).status,
        201
    );
    let bundle = get(&server, "/v1/export?session=s", &admin).body;
    let mut stream = TcpStream::connect(server.addr).unwrap();
    write!(
        stream,
        "POST /v1/bundles/verify HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {admin}\r\nContent-Length: {}\r\n\r\n",
        bundle.len()
    )
    .unwrap();
    let parts = 8;
    for chunk in bundle.chunks(bundle.len().div_ceil(parts)) {
        stream.write_all(chunk).unwrap();
        std::thread::sleep(Duration::from_millis(250));
    }
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).unwrap();
    let verdict = parse_response(&bytes);
    assert_eq!(
        verdict.status,
        200,
        "{}",
        String::from_utf8_lossy(&verdict.body)
    );
    assert_eq!(verdict.json()["verified"], true);
}

/// The witness's listener has the API's timeouts: a client that announces
/// a body and sends nothing more gets `408` (it held one of the listener's
/// connections for good before), and the witness still answers others.
#[test]
fn a_witness_cuts_off_a_stalled_body() {
    let dir = tempfile::tempdir().unwrap();
    let witness = std::sync::Arc::new(cairn_server::witness::Witness {
        cosigner: cairn_core::checkpoint::Cosigner::from_seed("w.example", &[9; 32]).unwrap(),
        logs: std::collections::HashMap::new(),
        state: cairn_store::witness_state::WitnessState::open(dir.path()).unwrap(),
    });
    let limits = Limits {
        body_idle_timeout: Duration::from_millis(300),
        body_timeout: Duration::from_millis(1000),
        max_connections: 2,
        ..Limits::default()
    };
    let listening = Listening::start("127.0.0.1:0", move |listener, stopped| async move {
        cairn_server::serve_witness(listener, witness, &limits, stopped).await
    });
    let addr = listening.addr;
    let started = Instant::now();
    let mut stalled = TcpStream::connect(addr).unwrap();
    stalled
        .write_all(
            b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: 65536\r\n\r\nold 0\n",
        )
        .unwrap();
    stalled
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut bytes = Vec::new();
    let _ = stalled.read_to_end(&mut bytes);
    assert_eq!(parse_response(&bytes).status, 408);
    assert!(started.elapsed() < Duration::from_secs(4));
    // Both connections' worth of stalled clients cannot keep it from
    // answering once they are cut off.
    let about = raw(addr, "GET / HTTP/1.1\r\nHost: w", b"");
    assert_eq!(about.status, 200);
    assert!(String::from_utf8_lossy(&about.body).contains("vkey"));
    // Its answers say what the API's say of their type and caching.
    assert_eq!(about.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(about.header("cache-control"), Some("no-store"));
}

#[path = "hardening_limits/answers.rs"]
mod answers;
#[path = "hardening_limits/hangups.rs"]
mod hangups;
#[path = "hardening_limits/memory.rs"]
mod memory;
