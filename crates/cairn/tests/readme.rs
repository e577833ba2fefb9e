//! The README's two quickstarts (the CLI's and the server's), run exactly
//! as written with the binary under test on PATH. (Moved from `cli.rs`.)
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

/// The first `sh` block under `heading` in the README.
fn readme_script(heading: &str) -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let section = readme
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("README has {heading}"));
    section
        .split("```sh\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap()
        .to_owned()
}

/// The README's CLI quickstart, run exactly as written (but for the build
/// line: the binary under test is put on PATH instead).
#[test]
fn readme_quickstart_works_as_written() {
    let block = readme_script("## Quickstart with the CLI");
    let block = block.as_str();
    let script: String = block
        .lines()
        .filter(|l| !l.starts_with("cargo build"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(script.contains("cairn verify --bundle"), "{script}");
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_cairn")).parent().unwrap();
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir.path())
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env_remove("CAIRN_DATA_DIR")
        .env_remove("CAIRN_ORG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("VERIFIED"), "{stdout}");
    assert!(dir.path().join("s.bundle").exists());
    assert!(
        stdout.contains("## Turn ")
            && stdout.contains(
                "[思考] Check credits first.\n\n[計画] 1. check_credits  2. check_inbox\n"
            ),
        "{stdout}"
    );
}

/// The README's server quickstart, run exactly as written with the binary
/// under test on PATH (on a free port: `CAIRN_LISTEN` overrides the
/// default, and the script reads the address from the server's output).
#[test]
fn readme_server_quickstart_works_as_written() {
    let script = readme_script("## Quickstart with the server");
    let script = script.as_str();
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_cairn")).parent().unwrap();
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir.path())
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("CAIRN_LISTEN", "127.0.0.1:0")
        .env_remove("CAIRN_DATA_DIR")
        .env_remove("CAIRN_ORG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"chain_valid\":true"), "{stdout}");
    assert!(stdout.contains("\"verified\":true"), "{stdout}");
    assert!(stdout.contains("VERIFIED"), "{stdout}");
    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap();
    assert!(log.contains("sample session recorded"), "{log}");
}
