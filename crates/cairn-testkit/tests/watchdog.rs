//! A cluster outlives no process that started it: a test or benchmark
//! killed by a signal runs no destructor, and its cluster is stopped and
//! its directory removed by the watchdog instead.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used)]

use cairn_testkit::PgCluster;
use std::io::{BufRead as _, BufReader};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the child: start a cluster, say where it is, and wait to be
/// killed.
const CHILD: &str = "CAIRN_TESTKIT_WATCHDOG_CHILD";

/// Run by the child process only (skipped unless [`CHILD`] is set).
#[test]
fn hold_a_cluster_until_killed() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    println!(
        "CLUSTER {} {}",
        cluster.port(),
        cluster.data_dir().display()
    );
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

fn accepts_connections(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).is_ok()
}

#[test]
fn a_killed_process_leaves_no_cluster_running() {
    let installed = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join("initdb").is_file()));
    if !installed {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI=true but initdb is not on PATH: PostgreSQL 15 is required for these tests"
        );
        return;
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "hold_a_cluster_until_killed", "--nocapture"])
        .env(CHILD, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines
        .find_map(|l| l.ok().filter(|l| l.starts_with("CLUSTER ")))
        .expect("the child started a cluster");
    let mut parts = line.split(' ').skip(1);
    let port: u16 = parts.next().unwrap().parse().unwrap();
    let data = PathBuf::from(parts.next().unwrap());
    assert!(accepts_connections(port), "the child's cluster runs");
    assert!(data.exists());

    // SIGKILL: no destructor runs in the child.
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while (accepts_connections(port) || data.exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        !accepts_connections(port),
        "the killed process's cluster still accepts connections on port {port}"
    );
    assert!(
        !data.exists(),
        "the killed process's cluster directory {} is still there",
        data.display()
    );
}
