//! Bundles as the `cairn` binary reads them from files and pipes
//! (`verify --bundle`, its `--log`): what stops the reading (a line past
//! `--max-bundle-line-bytes`, a read error) never hides an earlier
//! failure, memory stays flat whatever the mix of line lengths, and a
//! complete log can come through a pipe.

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Target, cairn_in, json};
use std::path::{Path, PathBuf};
use std::process::Command;

fn populated(dir: &Path) -> String {
    common::populated(Target::embedded(dir))
}

/// The sample data in `dir`, exported twice: one session (a partial
/// bundle) and the whole org (a complete log).
fn exported(dir: &Path) -> (PathBuf, PathBuf) {
    populated(dir);
    let (part, all) = (dir.join("part.bundle"), dir.join("all.bundle"));
    let exported = cairn_in(
        dir,
        &[
            "export",
            "--session",
            "revenue-analysis-q4",
            "-o",
            part.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    let exported = cairn_in(dir, &["export", "--all", "-o", all.to_str().unwrap()], None);
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    (part, all)
}

/// A line longer than `--max-bundle-line-bytes` is an input error naming
/// the line, never read whole: in `verify --bundle`, in `import`, and in
/// the complete log given with `--log` (read only once the bundle
/// verifies).
#[test]
fn lines_past_the_bound_are_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let (part, all) = exported(dir.path());
    let elsewhere = tempfile::tempdir().unwrap();
    // The entries' lines are past 600 bytes.
    let run = cairn_in(
        elsewhere.path(),
        &[
            "verify",
            "--bundle",
            all.to_str().unwrap(),
            "--max-bundle-line-bytes",
            "600",
        ],
        None,
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("of the bundle is longer than 600 bytes"),
        "{}",
        run.stderr
    );
    let run = cairn_in(
        elsewhere.path(),
        &[
            "import",
            all.to_str().unwrap(),
            "--max-bundle-line-bytes",
            "600",
        ],
        None,
    );
    assert_eq!(run.code, 2, "{} {}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("longer than 600 bytes"),
        "{}",
        run.stderr
    );
    let endless = dir.path().join("endless.bundle");
    std::fs::write(&endless, "x".repeat(200_000)).unwrap();
    let run = cairn_in(
        elsewhere.path(),
        &[
            "verify",
            "--bundle",
            part.to_str().unwrap(),
            "--log",
            endless.to_str().unwrap(),
            "--max-bundle-line-bytes",
            "100000",
        ],
        None,
    );
    assert_eq!(run.code, 2, "{} {}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("line 1 of --log")
            && run.stderr.contains("is longer than 100000 bytes"),
        "{}",
        run.stderr
    );
}

/// `cairn verify --bundle` keeps a few chunks per core in flight, each
/// bounded by the capacity of its line buffers (reused buffers may be
/// larger than their lines), and keeps at most 2 MiB of spare buffers: a
/// bundle of many small step lines (thousands of buffers in circulation)
/// followed by lines of about 40 KB stays well under 64 MB. (Found by a
/// review of the buffer reuse: ~115 MB when chunks counted only the
/// lines' bytes.)
#[test]
fn verify_bundle_memory_stays_flat_after_small_then_large_lines() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("steps.jsonl");
    {
        use std::io::Write as _;
        let mut out = std::io::BufWriter::new(std::fs::File::create(&input).unwrap());
        for n in 0..6000 {
            let step = serde_json::json!({
                "session_id": format!("s{}", n % 10), "agent_id": "a",
                "step_type": "Observation", "content": format!("small {n}"),
            });
            writeln!(out, "{step}").unwrap();
        }
        let big = "x".repeat(40_000);
        for n in 0..2500 {
            let step = serde_json::json!({
                "session_id": format!("s{}", n % 10), "agent_id": "a",
                "step_type": "Observation", "content": format!("big {n} {big}"),
            });
            writeln!(out, "{step}").unwrap();
        }
    }
    let cairn = |args: &[&str], stdin: std::process::Stdio| {
        Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(args)
            .env("CAIRN_DATA_DIR", dir.path().join("data"))
            .env("CAIRN_ORG", "acme")
            .env_remove("CAIRN_DATABASE_URL")
            .env_remove("CAIRN_EMBEDDING_MODEL")
            .env_remove("CAIRN_EMBEDDING_ENDPOINT")
            .current_dir(dir.path())
            .stdin(stdin)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let logged = cairn(
        &["log", "--stdin"],
        std::fs::File::open(&input).unwrap().into(),
    )
    .wait()
    .unwrap();
    assert!(logged.success());
    let bundle = dir.path().join("all.bundle");
    let exported = cairn(
        &["export", "--all", "-o", bundle.to_str().unwrap()],
        std::process::Stdio::null(),
    )
    .wait()
    .unwrap();
    assert!(exported.success());
    let mut child = cairn(
        &["verify", "--bundle", bundle.to_str().unwrap()],
        std::process::Stdio::null(),
    );
    // The child's peak resident memory, read until it exits.
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak_kb = 0u64;
    let status = loop {
        if let Ok(status) = std::fs::read_to_string(&status_path)
            && let Some(line) = status.lines().find(|l| l.starts_with("VmHWM:"))
        {
            let kb: u64 = line
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            peak_kb = peak_kb.max(kb);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert_eq!(status.code(), Some(0));
    assert!(
        peak_kb < 64 * 1024,
        "verify --bundle peaked at {} MB (documented: 25–37 MB whatever the size)",
        peak_kb / 1024
    );
}

/// `verify --bundle --log` reads the complete log twice; a log given as a
/// pipe (`--log <(zcat all.bundle.gz)`) is copied to an unnamed temporary
/// file first, so it verifies as the file itself does. (Found by a review:
/// the second pass read an exhausted pipe.)
#[test]
fn verify_bundle_log_from_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let (part, all) = exported(dir.path());
    // From the file itself: verified.
    let run = cairn_in(
        dir.path(),
        &[
            "verify",
            "--bundle",
            part.to_str().unwrap(),
            "--log",
            all.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
    // The same bytes through a pipe.
    let out = Command::new("bash")
        .arg("-c")
        .arg(r#"exec "$0" verify --bundle "$1" --log <(cat "$2")"#)
        .arg(env!("CARGO_BIN_EXE_cairn"))
        .arg(&part)
        .arg(&all)
        .env("CAIRN_DATA_DIR", dir.path().join("data"))
        .env("CAIRN_ORG", "acme")
        .env_remove("CAIRN_DATABASE_URL")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A failure before a line too long (or a read error) is the verdict, as
/// the server gives it: the lines read before the stop are verified first
/// (a bundle failing at line 2 with a long line 4 exits 1, broken at line
/// 2, not 2 for the long line). (Found by a review: the reader returned
/// its error before sending the chunk it was filling.)
#[test]
fn verify_bundle_failure_before_a_long_line_keeps_its_verdict() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    let all = dir.path().join("all.bundle");
    let exported = cairn_in(
        dir.path(),
        &["export", "--all", "-o", all.to_str().unwrap()],
        None,
    );
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    let text = std::fs::read_to_string(&all).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].len() <= 600 && lines.iter().skip(2).any(|l| l.len() > 600));
    // Line 2, the checkpoint, is broken: verification fails there.
    lines[1] = r#"{"checkpoint":"x"}"#;
    let broken = dir.path().join("broken.bundle");
    std::fs::write(&broken, lines.join("\n") + "\n").unwrap();
    // Without a line bound: the verdict.
    let run = cairn_in(
        dir.path(),
        &["verify", "--json", "--bundle", broken.to_str().unwrap()],
        None,
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(json(&run)["brokenAt"]["line"], 2);
    // With one that a later line exceeds: the same verdict.
    let run = cairn_in(
        dir.path(),
        &[
            "verify",
            "--json",
            "--bundle",
            broken.to_str().unwrap(),
            "--max-bundle-line-bytes",
            "600",
        ],
        None,
    );
    assert_eq!(run.code, 1, "{} {}", run.stdout, run.stderr);
    assert_eq!(json(&run)["brokenAt"]["line"], 2);
}

/// A step line's `erased` flag is outside its digest: a courier can set it
/// on a step that hides nothing and the bundle still verifies, but import
/// refuses it, naming the step, since no reading of the store would accept
/// the row (an erased step hides a field).
#[test]
fn import_refuses_a_step_said_erased_that_hides_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (_, all) = exported(dir.path());
    let text = std::fs::read_to_string(&all).unwrap();
    let line = text
        .lines()
        .position(|l| l.contains("\"erased\":false") && l.contains("\"step_index\":1"))
        .unwrap();
    let edited: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == line {
                l.replace("\"erased\":false", "\"erased\":true")
            } else {
                l.to_owned()
            }
        })
        .collect();
    let courier = dir.path().join("courier.bundle");
    std::fs::write(&courier, edited.join("\n") + "\n").unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let run = cairn_in(
        elsewhere.path(),
        &["import", courier.to_str().unwrap()],
        None,
    );
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stderr.contains("says it was erased but hides no field"),
        "{} {}",
        run.stdout,
        run.stderr
    );
}

/// A failure's detail names what failed, as an outside verifier's review
/// found it did not: the selection signed by a retired key (the
/// checkpoint itself by a valid one) is said to be the selection's, and
/// a selection's `checkpoint_size` edited away from its note's shows both
/// sizes. (Bundles an independent verifier built, kept as fixtures: a
/// rotated log's session export, its selection re-signed by the retired
/// key; and the same with `checkpoint_size` 39 made 38.)
#[test]
fn a_failure_names_the_note_that_failed() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for (file, reason, detail) in [
        (
            "selection-signed-by-retired-key.bundle",
            "bad-signature",
            "the selection signed for the checkpoint of size 39 is not signed by a log key valid",
        ),
        (
            "selection-size-edited.bundle",
            "selection-mismatch",
            "the selection's checkpoint_size is 38, the bundle's checkpoint (and the selection's note) size 39",
        ),
    ] {
        let path = fixtures.join(file);
        let run = cairn_in(
            dir.path(),
            &["verify", "--bundle", path.to_str().unwrap(), "--json"],
            None,
        );
        assert_eq!(run.code, 1, "{file}: {}", run.stderr);
        let verdict = json(&run);
        assert_eq!(verdict["brokenReason"], reason, "{file}: {verdict}");
        assert!(
            verdict["detail"].as_str().unwrap().starts_with(detail),
            "{file}: {verdict}"
        );
    }
}
