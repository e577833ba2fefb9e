//! The embedded store's disk failing under `cairn serve`: a full disk,
//! EIO on write and on fsync, the database made read-only. The faults come
//! from `faultfs.c`, preloaded into the server, which fails calls on files
//! in the data directory while a control file names a fault.

use super::{Outcome, assert_intact, through_fault};
use crate::common::{Target, serve_with};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// Compiles the shim once per test run, with the C compiler every Rust
/// toolchain on Linux already needs for linking.
fn shim() -> &'static Path {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/faults/faultfs.c");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("faultfs-{}.so", std::process::id()));
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let built = Command::new(&cc)
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&out)
            .arg(&source)
            .arg("-ldl")
            .output()
            .unwrap_or_else(|e| panic!("the fault tests need a C compiler ({cc}): {e}"));
        assert!(
            built.status.success(),
            "compiling {}: {}",
            source.display(),
            String::from_utf8_lossy(&built.stderr)
        );
        out
    })
}

/// Starts a server on a fresh data directory with the shim, runs load
/// through `fault`, and checks the store afterwards, then again after a
/// restart, so that nothing checked comes from the process's memory.
fn survives(fault: &str) -> Vec<Outcome> {
    let dir = tempfile::tempdir().unwrap();
    // The shim matches the paths the kernel reports: no symbolic links.
    let root = dir.path().canonicalize().unwrap();
    let control = root.join("fault");
    let data = format!("{}/", root.join("data").display());
    let (mut server, admin) = serve_with(
        &root,
        None,
        &[],
        &[
            ("LD_PRELOAD", shim().as_os_str()),
            ("CAIRN_FAULT_CONTROL", control.as_os_str()),
            ("CAIRN_FAULT_DIR", OsStr::new(&data)),
        ],
    );
    let admin = admin.unwrap();
    let outcomes = through_fault(
        &mut server,
        &admin,
        &[(503, "storage_failure")],
        Duration::from_millis(1500),
        || std::fs::write(&control, fault).unwrap(),
        || std::fs::remove_file(&control).unwrap(),
    );
    let target = Target::embedded(&root);
    assert_intact(&server, &admin, target, &outcomes, 3);
    drop(server);
    let (server, _) = serve_with(&root, None, &[], &[]);
    assert_intact(&server, &admin, target, &outcomes, 3);
    outcomes
}

#[test]
fn a_full_disk_refuses_writes_and_recovers_when_space_returns() {
    survives("enospc");
}

#[test]
fn eio_on_write_refuses_writes_and_recovers() {
    survives("eio-write");
}

#[test]
fn eio_on_fsync_acknowledges_nothing_unsynced_and_recovers() {
    survives("eio-fsync");
}

#[test]
fn a_read_only_database_refuses_writes_and_recovers_when_writable() {
    survives("erofs");
}
