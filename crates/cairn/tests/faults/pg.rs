//! PostgreSQL failing under `cairn serve --database`: the database killed
//! (`pg_ctl stop -m immediate`) and started again mid-batch, and the
//! network between the server and the database cut, by connections reset
//! or by silence, through a small TCP proxy the test controls. Under
//! `CI=true` a missing PostgreSQL fails these tests.

use super::{assert_intact, through_fault};
use crate::common::{Target, serve, serve_with};
use cairn_testkit::PgCluster;
use std::io::{Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn postgres_killed_and_restarted_mid_batch() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.create_database("killed");
    let dir = tempfile::tempdir().unwrap();
    let (mut server, admin) = serve(dir.path(), Some(&url));
    let admin = admin.unwrap();
    let outcomes = through_fault(
        &mut server,
        &admin,
        &[(503, "storage_failure")],
        Duration::from_millis(1500),
        || cluster.kill(),
        || cluster.restart(),
    );
    let target = Target {
        dir: dir.path(),
        database: Some(&url),
    };
    assert_intact(&server, &admin, target, &outcomes, 3);
}

/// What the proxy does with traffic.
const PASS: u8 = 0;
/// Every connection is closed, new ones at once.
const RESET: u8 = 1;
/// Nothing gets through and nothing is answered; connections stay open.
const SILENT: u8 = 2;

/// A TCP proxy between the server and PostgreSQL that the test can cut.
struct Proxy {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    /// Every socket the proxy holds, so that a cut can close them.
    sockets: Arc<Mutex<Vec<TcpStream>>>,
}

/// Copies `from` to `to` until either closes; in silence, drops the bytes.
fn relay(mut from: TcpStream, mut to: TcpStream, mode: Arc<AtomicU8>) {
    let mut buf = [0u8; 16384];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if mode.load(Ordering::SeqCst) == SILENT {
            continue;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

impl Proxy {
    fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(AtomicU8::new(PASS));
        let sockets: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (m, held) = (Arc::clone(&mode), Arc::clone(&sockets));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                // The mode is read under the lock that a cut or a restore
                // holds while it changes the mode and closes the sockets,
                // so no connection slips between the two.
                let mut sockets = held.lock().unwrap();
                match m.load(Ordering::SeqCst) {
                    RESET => drop(client),
                    SILENT => sockets.push(client),
                    _ => {
                        let Ok(server) = TcpStream::connect(upstream) else {
                            continue;
                        };
                        sockets.push(client.try_clone().unwrap());
                        sockets.push(server.try_clone().unwrap());
                        let (a, b) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                        let (m1, m2) = (Arc::clone(&m), Arc::clone(&m));
                        std::thread::spawn(move || relay(client, server, m1));
                        std::thread::spawn(move || relay(b, a, m2));
                    }
                }
            }
        });
        Proxy {
            addr,
            mode,
            sockets,
        }
    }

    /// Switches to `mode`; with `close`, closes every connection it holds
    /// (both sides see them end).
    fn switch(&self, mode: u8, close: bool) {
        let mut sockets = self.sockets.lock().unwrap();
        self.mode.store(mode, Ordering::SeqCst);
        if close {
            for socket in sockets.drain(..) {
                let _ = socket.shutdown(Shutdown::Both);
            }
        }
    }

    /// Cuts the network: `RESET` closes every connection and refuses new
    /// ones; `SILENT` answers nothing, on old connections and new ones.
    fn cut(&self, mode: u8) {
        self.switch(mode, mode == RESET);
    }

    /// Heals the network. Connections that lived through the cut are
    /// closed, as a partition's end finds them: the bytes lost in silence
    /// cannot be sent again.
    fn restore(&self) {
        self.switch(PASS, true);
    }
}

/// Runs load through a network cut between `cairn serve` and PostgreSQL.
fn partitioned(mode: u8, expected: &[(u16, &str)]) {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let db = if mode == RESET { "reset" } else { "silent" };
    cluster.create_database(db);
    let proxy = Proxy::start(SocketAddr::from(([127, 0, 0, 1], cluster.port())));
    let url = format!(
        "host=127.0.0.1 port={} user=postgres dbname={db}",
        proxy.addr.port()
    );
    let dir = tempfile::tempdir().unwrap();
    // A request the database leaves unanswered ends after a second.
    let (mut server, admin) = serve_with(dir.path(), Some(&url), &["--request-timeout", "1"], &[]);
    let admin = admin.unwrap();
    // Held past the request timeout, so that writes meet it.
    let outcomes = through_fault(
        &mut server,
        &admin,
        expected,
        Duration::from_millis(3000),
        || proxy.cut(mode),
        || proxy.restore(),
    );
    let direct = cluster.url_for(db);
    let target = Target {
        dir: dir.path(),
        database: Some(&direct),
    };
    assert_intact(&server, &admin, target, &outcomes, 3);
}

#[test]
fn a_network_reset_between_server_and_database_is_survived() {
    partitioned(RESET, &[(503, "storage_failure")]);
}

#[test]
fn a_silent_network_between_server_and_database_does_not_hang_requests() {
    partitioned(SILENT, &[(503, "storage_failure"), (503, "timeout")]);
}
