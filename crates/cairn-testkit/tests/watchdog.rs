//! A cluster outlives no process that started it: a test or benchmark
//! killed by a signal runs no destructor, and its cluster is stopped and
//! its directory removed by the watchdog instead.
// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used)]

use cairn_testkit::PgCluster;
use std::io::{BufRead as _, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the child: start a cluster, say where it is, and wait to be
/// killed.
const CHILD: &str = "CAIRN_TESTKIT_WATCHDOG_CHILD";

/// The child's part, run by `a_killed_process_leaves_no_cluster_running`
/// in a process of its own (ignored in a plain run).
#[test]
#[ignore = "run as a child process by a_killed_process_leaves_no_cluster_running"]
fn hold_a_cluster_until_killed() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let cluster = PgCluster::start().expect("PostgreSQL is installed");
    println!(
        "CLUSTER {} {}",
        cluster.port(),
        cluster.data_dir().display()
    );
    // Bounded, in case the parent is gone before it kills this process:
    // then the watchdog cleans up after this one's normal end.
    std::thread::sleep(Duration::from_secs(120));
}

/// Kills the child's whole process group when dropped, so that a failed
/// assertion leaves no child (and no cluster) behind.
struct Group(Child);

impl Group {
    fn kill(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.wait();
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether process `pid` runs (Linux: its `/proc` entry, unless a zombie
/// that its parent, here whatever adopted the postmaster, has not reaped).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

#[test]
fn a_killed_process_leaves_no_cluster_running() {
    if !PgCluster::available() {
        return;
    }
    // In a process group of its own, killed whole below, as a Ctrl-C or a
    // test runner's timeout kills a group: the watchdog must not go with it.
    let mut child = Group(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "hold_a_cluster_until_killed",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let line = BufReader::new(stdout)
            .lines()
            .find_map(|l| l.ok().filter(|l| l.starts_with("CLUSTER ")));
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(120))
        .ok()
        .flatten()
        .expect("the child started a cluster");
    let mut parts = line.splitn(3, ' ').skip(1);
    let _port: u16 = parts.next().unwrap().parse().unwrap();
    let data = PathBuf::from(parts.next().unwrap());
    // The postmaster's pid, first line of its lock file (ports can be
    // taken again by another server, pids are checked right away).
    let postmaster: u32 = std::fs::read_to_string(data.join("postmaster.pid"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(postmaster), "the child's cluster runs");

    // SIGKILL to the child's group: no destructor runs in the child.
    child.kill();
    let deadline = Instant::now() + Duration::from_secs(30);
    while (alive(postmaster) || data.exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !alive(postmaster),
        "the killed process's cluster (postmaster {postmaster}) still runs"
    );
    assert!(
        !data.exists(),
        "the killed process's cluster directory {} is still there",
        data.display()
    );
}
