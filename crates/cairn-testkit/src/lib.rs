//! Test support shared by Cairn's crates.
//!
//! [`PgCluster`] starts a throwaway PostgreSQL cluster (`initdb` and
//! `pg_ctl` from PATH, in a temporary directory, on a free loopback port)
//! and stops it when dropped, or, when the process that started it dies
//! without dropping it (a test or benchmark killed by a signal), as soon
//! as it dies. Under `CI=true` a missing PostgreSQL is a
//! test failure; elsewhere [`PgCluster::start`] says so and returns None.
// Test support: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used)]

pub mod http;

use std::path::{Path, PathBuf};

/// The size of a randomized attack campaign (rounds, seconds): `short` in
/// the test suite (CI), `long` with `CAIRN_TEST_LONG=1` (docs/SECURITY.md
/// lists the campaigns and what their long runs found).
pub fn campaign(short: u64, long: u64) -> u64 {
    if std::env::var_os("CAIRN_TEST_LONG").is_some_and(|v| v == "1") {
        long
    } else {
        short
    }
}
use std::os::unix::process::CommandExt as _;
use std::process::{Child, ChildStdin, Command, Stdio};

/// A PostgreSQL cluster for one test, stopped when dropped.
pub struct PgCluster {
    dir: tempfile::TempDir,
    port: u16,
    as_user: Option<&'static str>,
    /// `pg_ctl -o`: the server's options, kept for a restart.
    options: String,
    /// Stops the cluster and removes its directory once this process is
    /// gone ([`PgCluster::spawn_watchdog`]), with the pipe's writing end
    /// whose closing tells it so; killed by `drop`.
    watchdog: Option<(Child, ChildStdin)>,
}

fn find(binary: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(binary))
            .find(|p| p.is_file())
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0"))
        .unwrap_or(false)
}

impl PgCluster {
    /// Starts a cluster, or returns None (outside CI) when PostgreSQL is
    /// not installed.
    pub fn start() -> Option<PgCluster> {
        PgCluster::start_with(false)
    }

    /// Starts a cluster that syncs its WAL on commit (`fsync=on`), as a
    /// production one does: for benchmarks. [`PgCluster::start`] turns
    /// fsync off, which keeps correctness tests fast and changes nothing
    /// they check (commits still happen in the same order).
    pub fn start_durable() -> Option<PgCluster> {
        PgCluster::start_with(true)
    }

    /// Whether `initdb` and `pg_ctl` are on PATH; under `CI=true` their
    /// absence is a test failure, elsewhere it is said and `false`.
    pub fn available() -> bool {
        PgCluster::binaries().is_some()
    }

    fn binaries() -> Option<(PathBuf, PathBuf)> {
        let (Some(initdb), Some(pg_ctl)) = (find("initdb"), find("pg_ctl")) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI=true but initdb/pg_ctl are not on PATH: PostgreSQL 15 is required for these tests"
            );
            eprintln!("PostgreSQL (initdb, pg_ctl) not on PATH: skipping outside CI");
            return None;
        };
        Some((initdb, pg_ctl))
    }

    fn start_with(durable: bool) -> Option<PgCluster> {
        let (initdb, pg_ctl) = PgCluster::binaries()?;
        // initdb refuses to run as root: run the cluster as an unprivileged
        // user that owns the directory.
        let as_user = is_root().then(|| {
            if Command::new("id")
                .arg("postgres")
                .output()
                .is_ok_and(|o| o.status.success())
            {
                "postgres"
            } else {
                "nobody"
            }
        });
        let dir = tempfile::tempdir().unwrap();
        if let Some(user) = as_user {
            let status = Command::new("chown")
                .args(["-R", user, dir.path().to_str().unwrap()])
                .status()
                .unwrap();
            assert!(status.success());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -k {} {}",
            dir.path().display(),
            if durable {
                "-c shared_buffers=256MB -c max_wal_size=2GB"
            } else {
                "-c fsync=off -c full_page_writes=off"
            }
        );
        let mut cluster = PgCluster {
            dir,
            port,
            as_user,
            options,
            watchdog: None,
        };
        // Before initdb: a process killed while the cluster starts leaves
        // nothing behind either.
        cluster.watchdog = cluster.spawn_watchdog(&pg_ctl);
        let data = cluster.data_dir();
        cluster.run(
            &initdb,
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        cluster.pg_ctl_start(&pg_ctl);
        Some(cluster)
    }

    /// A process outside this one that, once this one is gone, stops the
    /// cluster (`pg_ctl stop -m immediate` as its owner, until `pg_ctl
    /// status` finds no server, at most ten tries a second apart) and
    /// removes its directory. A process killed by a signal runs no
    /// destructor: without it, every cluster of a killed test or benchmark
    /// (a bench's holds 256 MB of shared buffers) kept running and kept its
    /// directory. It waits on a pipe whose only writing end this process
    /// holds (close-on-exec, so no other child inherits it): the kernel
    /// closes it when this process dies, however it dies, and the
    /// watchdog's read returns. In its own process group, so that a Ctrl-C
    /// or a kill of the test's group does not stop it first. `None` if it
    /// could not be started (only `drop` stops the cluster then, as
    /// before; under `CI=true` a failure).
    fn spawn_watchdog(&self, pg_ctl: &Path) -> Option<(Child, ChildStdin)> {
        const SCRIPT: &str = r#"data=$1 dir=$2; shift 2
read -r line
tries=0
while [ "$tries" -lt 10 ]; do
  "$@" -D "$data" -m immediate -w stop >/dev/null 2>&1
  "$@" -D "$data" status >/dev/null 2>&1 || break
  tries=$((tries + 1))
  sleep 1
done
rm -rf "$dir""#;
        let mut command = Command::new("sh");
        command
            .args(["-c", SCRIPT, "cairn-pg-watchdog"])
            .arg(self.data_dir())
            .arg(self.dir.path());
        let stop = self.as_owner(pg_ctl);
        command
            .arg(stop.get_program())
            .args(stop.get_args())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        match command.spawn() {
            Ok(mut child) => match child.stdin.take() {
                Some(pipe) => Some((child, pipe)),
                // Without the pipe's writing end it would stop the cluster
                // at once (never the case with a piped stdin).
                None => {
                    let _ = child.kill();
                    let _ = child.wait();
                    None
                }
            },
            Err(e) => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "could not start the PostgreSQL cluster's watchdog (sh): {e}"
                );
                None
            }
        }
    }

    fn pg_ctl_start(&self, pg_ctl: &Path) {
        let data = self.data_dir();
        self.run(
            pg_ctl,
            &[
                "-D",
                data.to_str().unwrap(),
                "-o",
                &self.options,
                "-l",
                self.dir.path().join("log").to_str().unwrap(),
                "-w",
                "start",
            ],
        );
    }

    /// Stops the cluster the way a crash does (`pg_ctl stop -m
    /// immediate`): every connection is cut, open transactions are lost,
    /// and the next start recovers from the WAL.
    pub fn kill(&self) {
        let pg_ctl = find("pg_ctl").expect("pg_ctl is on PATH");
        let data = self.data_dir();
        self.run(
            &pg_ctl,
            &[
                "-D",
                data.to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
    }

    /// Starts the cluster again, on the same port, after [`PgCluster::kill`].
    pub fn restart(&self) {
        let pg_ctl = find("pg_ctl").expect("pg_ctl is on PATH");
        self.pg_ctl_start(&pg_ctl);
    }

    /// The cluster's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `binary` run as the cluster's owner (through `runuser` when this
    /// process is root).
    fn as_owner(&self, binary: &Path) -> Command {
        match self.as_user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(binary);
                c
            }
            None => Command::new(binary),
        }
    }

    fn run(&self, binary: &Path, args: &[&str]) {
        let out = self.as_owner(binary).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{} failed: {}{}",
            binary.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A connection URL as the superuser, to database `postgres`.
    pub fn url(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    /// A connection URL as the superuser, to database `dbname`.
    pub fn url_for(&self, dbname: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname={dbname}",
            self.port
        )
    }

    /// The loopback port the cluster listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Creates database `name` and returns its URL.
    pub fn create_database(&self, name: &str) -> String {
        self.connect()
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .unwrap();
        self.url_for(name)
    }

    /// Runs `sql` with the `psql` client as the superuser on database
    /// `dbname`, stopping at the first error; returns whether it succeeded
    /// and what it printed (unaligned, tuples only: one row per line).
    pub fn psql(&self, dbname: &str, sql: &str) -> (bool, String) {
        let psql = find("psql").expect("psql is on PATH next to initdb");
        let out = Command::new(psql)
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-X",
                "-q",
                "-A",
                "-t",
            ])
            .args(["-p", &self.port.to_string(), "-d", dbname, "-c", sql])
            .output()
            .unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// A new client as the superuser.
    pub fn connect(&self) -> postgres::Client {
        postgres::Client::connect(&self.url(), postgres::NoTls).unwrap()
    }

    /// A new client as the superuser, on database `dbname`.
    pub fn connect_to(&self, dbname: &str) -> postgres::Client {
        postgres::Client::connect(&self.url_for(dbname), postgres::NoTls).unwrap()
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if let Some(pg_ctl) = find("pg_ctl") {
            let data = self.data_dir();
            let _ = self
                .as_owner(&pg_ctl)
                .args(["-D", data.to_str().unwrap_or(""), "-m", "immediate", "stop"])
                .output();
        }
        // Last, so that the cluster is never without one of the two: the
        // watchdog (waiting in `read`, a shell builtin: no child of its
        // own) is not needed any more. Then its pipe closes.
        if let Some((mut watchdog, _pipe)) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}
