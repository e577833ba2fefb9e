//! The `cairn` binary, run as a user would.

use std::process::Command;

fn cairn(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .expect("cairn runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn demo_verifies_then_catches_the_edited_step() {
    let (code, stdout, stderr) = cairn(&["demo"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("verdict: VERIFIED (6 records checked)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("first failing record: seq 3, session revenue-analysis-q4, step 2"),
        "{stdout}"
    );
    assert!(stdout.contains("reason: digest-mismatch"), "{stdout}");
    assert!(
        stdout.contains("\n\u{2014} cairn.demo "),
        "a signed checkpoint is shown"
    );
}

#[test]
fn usage_errors_exit_2() {
    let (code, _, stderr) = cairn(&["no-such-command"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("Usage: cairn"));
    assert_eq!(cairn(&["demo", "extra"]).0, 2);
    assert_eq!(cairn(&["--version"]).0, 0);
}
