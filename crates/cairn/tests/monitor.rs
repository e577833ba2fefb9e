//! `cairn monitor` against real servers through the C2SP tlog-tiles API: it
//! follows a growing log across tile boundaries, then catches, at the first
//! poll that reaches them, a rollback (the server restarted on an older
//! copy of its data) and a fork (two histories of the same size under the
//! same key), and a rewritten history that grew past what it saw. The
//! tiles themselves are checked against the checkpoint from their hashes
//! alone.

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;

use cairn_core::tiles::{
    TILE_WIDTH, Tile, TileKind, decode_entry_bundle, tile_root, tiles_of_size,
};
use cairn_testkit::http::call;
use serde_json::json;
use std::io::{BufRead as _, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// A TCP forwarder whose backend can be switched: the monitor keeps one
/// URL while the test puts another server behind it.
struct Switch {
    addr: SocketAddr,
    backend: Arc<Mutex<SocketAddr>>,
}

impl Switch {
    fn new(backend: SocketAddr) -> Switch {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let backend = Arc::new(Mutex::new(backend));
        let target = Arc::clone(&backend);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let to = *target.lock().unwrap();
                let Ok(server) = TcpStream::connect(to) else {
                    continue;
                };
                for (mut from, mut into) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut into);
                        let _ = into.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Switch { addr, backend }
    }

    fn point_to(&self, backend: SocketAddr) {
        *self.backend.lock().unwrap() = backend;
    }
}

struct MonitorProcess {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Drop for MonitorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl MonitorProcess {
    fn start(url: &str, admin: &str, vkey: &str) -> MonitorProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["monitor", url, "--interval", "1", "--log-key", vkey])
            .env("CAIRN_API_KEY", admin)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        MonitorProcess { child, lines }
    }

    fn next_line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the monitor printed a line within 60 s")
    }

    /// Waits for a good poll at exactly `size`.
    fn ok_at(&self, size: u64) {
        loop {
            let line = self.next_line();
            assert!(line.starts_with("ok: "), "{line}");
            if line.starts_with(&format!("ok: size {size} ")) {
                return;
            }
        }
    }

    /// Drops lines already printed (polls of the old backend).
    fn drain(&self) {
        while self.lines.try_recv().is_ok() {}
    }
}

fn record(server: SocketAddr, admin: &str, session: &str, n: usize) {
    let steps: Vec<_> = (0..n)
        .map(|i| {
            json!({"session_id": session, "agent_id": "a", "step_type": "observation",
                   "trace_id": format!("{session}-{i}"), "content": format!("{session} step {i}")})
        })
        .collect();
    for chunk in steps.chunks(100) {
        let body = json!(chunk);
        let reply = call(
            server,
            "POST",
            "/v1/steps/batch",
            Some(admin),
            Some(body.to_string().as_bytes()),
        );
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
}

fn erase(server: SocketAddr, admin: &str, trace_id: &str) {
    let reply = call(
        server,
        "POST",
        &format!("/v1/steps/{trace_id}/erase"),
        Some(admin),
        Some(br#"{"reason":"a data subject asked"}"#),
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
}

fn log_size(server: SocketAddr, admin: &str) -> u64 {
    let note = call(server, "GET", "/v1/tlog/checkpoint", Some(admin), None).text();
    note.lines().nth(1).unwrap().parse().unwrap()
}

/// Every hash tile of the current checkpoint, fetched over HTTP, leads to
/// its root by RFC 9162 alone, and the entry bundles hash to level 0.
fn tiles_lead_to_the_checkpoint(server: SocketAddr, admin: &str) {
    let note = call(server, "GET", "/v1/tlog/checkpoint", Some(admin), None).text();
    let size: u64 = note.lines().nth(1).unwrap().parse().unwrap();
    let root = note.lines().nth(2).unwrap().to_owned();
    let mut levels: Vec<Vec<cairn_core::Hash>> = Vec::new();
    for tile in tiles_of_size(size) {
        let reply = call(
            server,
            "GET",
            &format!("/v1/tlog/{}", tile.path()),
            Some(admin),
            None,
        );
        assert_eq!(reply.status, 200, "{}: {}", tile.path(), reply.text());
        assert_eq!(reply.body.len() as u64, tile.width * 32);
        let hashes: Vec<cairn_core::Hash> = reply
            .body
            .chunks(32)
            .map(|c| cairn_core::Hash(c.try_into().unwrap()))
            .collect();
        let level = tile.level() as usize;
        if levels.len() <= level {
            levels.push(Vec::new());
        }
        levels[level].extend(hashes);
        if tile.kind == TileKind::Hashes(0) {
            let entries = Tile {
                kind: TileKind::Entries,
                ..tile
            };
            let reply = call(
                server,
                "GET",
                &format!("/v1/tlog/{}", entries.path()),
                Some(admin),
                None,
            );
            assert_eq!(reply.status, 200);
            let leaves = decode_entry_bundle(&reply.body).unwrap();
            assert_eq!(leaves.len() as u64, tile.width);
            for (i, leaf) in leaves.iter().enumerate() {
                let at = (tile.index * TILE_WIDTH) as usize + i;
                assert_eq!(cairn_core::merkle::leaf_hash(leaf), levels[0][at]);
            }
        }
    }
    // Each full tile's root is the hash one tile level up.
    for level in 1..levels.len() {
        for (i, chunk) in levels[level - 1].chunks(256).enumerate() {
            if chunk.len() == 256 {
                assert_eq!(tile_root(chunk).unwrap(), levels[level][i]);
            }
        }
    }
    // The root: the partial tiles' subtrees, right to left, then the full
    // ones of the top level (RFC 9162's split of a tree into perfect
    // subtrees, largest first).
    let mut peaks = Vec::new();
    for (level, hashes) in levels.iter().enumerate() {
        let partial = hashes.len() % 256;
        let tail = &hashes[hashes.len() - partial..];
        let mut bits = partial;
        let mut start = 0;
        let mut local = Vec::new();
        for b in (0..8).rev() {
            if bits & (1 << b) != 0 {
                local.push(tile_root(&tail[start..start + (1 << b)]).unwrap());
                start += 1 << b;
                bits &= !(1 << b);
            }
        }
        peaks.push((level, local));
    }
    let mut ordered = Vec::new();
    for (_, local) in peaks.into_iter().rev() {
        ordered.extend(local);
    }
    let mut acc = ordered.pop().unwrap();
    while let Some(left) = ordered.pop() {
        acc = cairn_core::merkle::node_hash(&left, &acc);
    }
    assert_eq!(acc.to_string(), hex_of_base64(&root));
}

fn hex_of_base64(text: &str) -> String {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_monitor_follows_a_growing_log_and_catches_a_rollback_and_a_fork() {
    let dir = tempfile::tempdir().unwrap();
    let target = Target::embedded(dir.path());

    // A log of 151 entries, then a copy of its data taken while stopped.
    let (server, admin) = serve(dir.path(), None);
    let keys = json(&target.run(&["--json", "keys"], None));
    let vkey = keys["server_key"].as_str().unwrap().to_owned();
    let admin = admin.unwrap();
    record(server.addr, &admin, "s0", 150);
    assert_eq!(log_size(server.addr, &admin), 151);
    drop(server);
    let snapshot = dir.path().join("snapshot");
    copy_dir(&dir.path().join("data"), &snapshot.join("data"));

    // The monitor follows the log as it grows past a tile boundary.
    let (server, _) = serve(dir.path(), None);
    let switch = Switch::new(server.addr);
    let url = format!("http://{}/v1/tlog", switch.addr);
    let mut monitor = MonitorProcess::start(&url, &admin, &vkey);
    monitor.ok_at(151);
    record(server.addr, &admin, "s1", 200);
    monitor.ok_at(352);
    // Erasures: of a step the monitor mirrored whole, and of one it may
    // not have read yet. Neither is a problem.
    erase(server.addr, &admin, "s0-3");
    record(server.addr, &admin, "s2", 300);
    erase(server.addr, &admin, "s2-5");
    let size = log_size(server.addr, &admin);
    assert_eq!(size, 655);
    monitor.ok_at(size);
    tiles_lead_to_the_checkpoint(server.addr, &admin);

    // Rollback: the server restarted on the older copy, same key.
    let (old, _) = serve(&snapshot, None);
    switch.point_to(old.addr);
    drop(server);
    monitor.drain();
    let line = monitor.next_line();
    assert!(
        line.starts_with("PROBLEM: rollback") && line.contains("655"),
        "{line}"
    );
    assert_eq!(monitor.child.wait_timeout_code(), Some(1));
    drop(old);

    // Fork: two copies of the older data grow to the same size with other
    // steps; the monitor that saw one is pointed at the other.
    copy_dir(&snapshot.join("data"), &dir.path().join("fork-a/data"));
    copy_dir(&snapshot.join("data"), &dir.path().join("fork-b/data"));
    let (a, _) = serve(&dir.path().join("fork-a"), None);
    let (b, _) = serve(&dir.path().join("fork-b"), None);
    record(a.addr, &admin, "left", 40);
    record(b.addr, &admin, "right", 40);
    assert_eq!(log_size(a.addr, &admin), log_size(b.addr, &admin));
    let switch = Switch::new(a.addr);
    let url = format!("http://{}/v1/tlog", switch.addr);
    let monitor = MonitorProcess::start(&url, &admin, &vkey);
    monitor.ok_at(192);
    switch.point_to(b.addr);
    drop(a);
    monitor.drain();
    let line = monitor.next_line();
    assert!(
        line.starts_with("PROBLEM: fork: two checkpoints of size 192"),
        "{line}"
    );
    drop(monitor);

    // A rewritten history that grew past what the monitor saw: the
    // mirrored leaves do not lead to the new root.
    let state = dir.path().join("monitor.state");
    let once = |url: &str| {
        Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["monitor", url, "--once", "--log-key", &vkey, "--state"])
            .arg(&state)
            .env("CAIRN_API_KEY", &admin)
            .output()
            .unwrap()
    };
    let seen = once(&format!("http://{}/v1/tlog", b.addr));
    assert_eq!(seen.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&seen.stdout).starts_with("ok: size 192 "));
    copy_dir(&snapshot.join("data"), &dir.path().join("fork-c/data"));
    let (c, _) = serve(&dir.path().join("fork-c"), None);
    record(c.addr, &admin, "longer", 90);
    let out = once(&format!("http://{}/v1/tlog", c.addr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("PROBLEM: inconsistent-checkpoint"), "{text}");
    // The state file still holds the last good checkpoint: a second run
    // fails again, and the honest log still checks out.
    let out = once(&format!("http://{}/v1/tlog", c.addr));
    assert_eq!(out.status.code(), Some(1));
    drop(c);
    let out = once(&format!("http://{}/v1/tlog", b.addr));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // Mistakes of the monitor's own configuration (a key the log refuses,
    // a URL with no log at it) exit 2 saying so, never as findings (1).
    let misconfigured = |url: &str, key: &str| {
        Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["monitor", url, "--once", "--log-key", &vkey])
            .env("CAIRN_API_KEY", key)
            .output()
            .unwrap()
    };
    for (url, key, said) in [
        (
            format!("http://{}/v1/tlog", b.addr),
            "cairn_000000000000_x",
            "401",
        ),
        (
            format!("http://{}/nothing", b.addr),
            admin.as_str(),
            "no log at this URL",
        ),
    ] {
        let out = misconfigured(&url, key);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{url}: {stderr}");
        assert!(
            stderr.contains("the log refused the monitor") && stderr.contains(said),
            "{stderr}"
        );
        assert!(!String::from_utf8_lossy(&out.stdout).contains("PROBLEM"));
    }
    // Once a checkpoint verified from the URL (here `/v1`, whose
    // checkpoint Cairn also serves), a missing tile is a finding, said
    // with its likely cause; and with a state file a missing checkpoint
    // is one too (a log that went away is not a configuration mistake).
    let out = misconfigured(&format!("http://{}/v1", b.addr), &admin);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("PROBLEM: unreadable") && stdout.contains("<server>/v1/tlog?"),
        "{stdout}"
    );
    let out = once(&format!("http://{}/nothing", b.addr));
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

trait WaitCode {
    fn wait_timeout_code(&mut self) -> Option<i32>;
}

impl WaitCode for Child {
    /// The exit code once the process ends (within 30 s).
    fn wait_timeout_code(&mut self) -> Option<i32> {
        for _ in 0..300 {
            if let Some(status) = self.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }
}

/// Answers `GET /v1/tlog/<path>` with the body kept for `path` (404
/// otherwise), one request per connection: a log frozen as a server chose
/// to show it.
fn static_tiles(bodies: std::collections::HashMap<String, Vec<u8>>) -> SocketAddr {
    use std::io::{Read as _, Write as _};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head);
            let path = head
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.strip_prefix("/v1/tlog/"))
                .unwrap_or("");
            let (status, body) = match bodies.get(path) {
                Some(body) => ("200 OK", body.clone()),
                None => ("404 Not Found", b"no such tile".to_vec()),
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(&body);
        }
    });
    addr
}

/// A monitor run one poll at a time (`--once --state`, from cron) enforces
/// the erasure deadline as a long-running one does (FORMAT.md 7.9, rule
/// 4): a server that shows a step erased but never gets its log past the
/// checkpoint it signed before the erasure (so the erasure record is never
/// in what it proves) is caught by the second run. Each run had started
/// from an empty set of pending erasures, so every run said ok (a review's
/// finding).
#[test]
fn runs_of_one_poll_keep_the_erasures_they_await() {
    let dir = tempfile::tempdir().unwrap();
    let target = Target::embedded(dir.path());
    let (server, admin) = serve(dir.path(), None);
    let admin = admin.unwrap();
    let vkey = json(&target.run(&["--json", "keys"], None))["server_key"]
        .as_str()
        .unwrap()
        .to_owned();
    record(server.addr, &admin, "s0", 5);
    // The session's start and its five steps, once a checkpoint covers them.
    let started = std::time::Instant::now();
    while log_size(server.addr, &admin) < 6 {
        assert!(started.elapsed() < Duration::from_secs(30), "no checkpoint");
        std::thread::sleep(Duration::from_millis(100));
    }
    let size = log_size(server.addr, &admin);
    let before = call(
        server.addr,
        "GET",
        "/v1/tlog/checkpoint",
        Some(&admin),
        None,
    )
    .text();
    erase(server.addr, &admin, "s0-2");
    // The frozen view: the checkpoint from before the erasure, and tiles
    // of that size read after it (the step shows erased; the record tile's
    // end line says the log is larger: the server's word).
    let mut bodies = std::collections::HashMap::new();
    bodies.insert("checkpoint".to_owned(), before.into_bytes());
    for kind in [TileKind::Hashes(0), TileKind::Entries, TileKind::Records] {
        let tile = Tile {
            kind,
            index: 0,
            width: size,
        };
        let reply = call(
            server.addr,
            "GET",
            &format!("/v1/tlog/{}", tile.path()),
            Some(&admin),
            None,
        );
        assert_eq!(reply.status, 200, "{}: {}", tile.path(), reply.text());
        bodies.insert(tile.path(), reply.body);
    }
    let frozen = static_tiles(bodies);
    let state = dir.path().join("cron.state");
    let once = |url: &str, state: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["monitor", url, "--once", "--log-key", &vkey, "--state"])
            .arg(state)
            .env("CAIRN_API_KEY", &admin)
            .output()
            .unwrap()
    };
    let url = format!("http://{frozen}/v1/tlog");
    let first = once(&url, &state);
    let text = String::from_utf8_lossy(&first.stdout);
    assert_eq!(first.status.code(), Some(0), "{text}");
    let second = once(&url, &state);
    let text = String::from_utf8_lossy(&second.stdout);
    assert_eq!(second.status.code(), Some(1), "{text}");
    assert!(
        text.contains("PROBLEM: erasure-mismatch") && text.contains("seen erased"),
        "{text}"
    );
    // The honest server, whose log holds the erasure record, checks out
    // run after run.
    let honest = dir.path().join("honest.state");
    let url = format!("http://{}/v1/tlog", server.addr);
    for _ in 0..2 {
        let run = once(&url, &honest);
        assert_eq!(
            run.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&run.stdout)
        );
    }
    // A state file of an earlier version (the checkpoint note alone) is
    // still read.
    std::fs::write(
        &honest,
        call(
            server.addr,
            "GET",
            "/v1/tlog/checkpoint",
            Some(&admin),
            None,
        )
        .text(),
    )
    .unwrap();
    let run = once(&url, &honest);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}
