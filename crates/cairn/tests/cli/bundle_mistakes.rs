//! The command line's answers to a bundle that is not what the user
//! meant to verify: an empty file, a server's error saved as a bundle, a
//! `--key` that is not the bundle's, a checkpoint file that is none, an
//! export checked against an older checkpoint without its proof, the
//! wrong file altogether (apart from `mistakes.rs`, which passed a
//! thousand lines).

use super::common::{self, cairn_in, json};
use super::populated;

/// A bundle that fails the way a mistake explains keeps its published
/// verdict (exit 1, the reason) and gets a hint saying what to check: an
/// empty file, a server's error answer saved as a bundle, a `--key` that
/// is not the key the bundle names (a `cairn keys` run elsewhere). A real
/// tampering gets no such hint.
#[test]
fn failed_bundles_hint_at_the_likely_mistake() {
    let dir = tempfile::tempdir().unwrap();
    populated(dir.path());
    let bundle = dir.path().join("all.bundle");
    let exported = cairn_in(
        dir.path(),
        &["export", "--all", "-o", bundle.to_str().unwrap()],
        None,
    );
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    let other = tempfile::tempdir().unwrap();
    populated(other.path());
    let other_key = cairn_in(other.path(), &["keys"], None)
        .stdout
        .trim()
        .to_owned();
    let empty = dir.path().join("empty.bundle");
    std::fs::write(&empty, "").unwrap();
    let error = dir.path().join("error.bundle");
    std::fs::write(
        &error,
        "{\"error\":{\"code\":\"not_found\",\"message\":\"session nope\"}}\n",
    )
    .unwrap();
    let edited = dir.path().join("edited.bundle");
    let text = std::fs::read_to_string(&bundle).unwrap();
    std::fs::write(
        &edited,
        text.replacen("\"content\":\"", "\"content\":\"X", 1),
    )
    .unwrap();
    // A real bundle whose header also holds an `error` member: tampered,
    // not a saved error answer.
    let with_error = dir.path().join("with_error.bundle");
    std::fs::write(
        &with_error,
        text.replacen(
            "{\"cairn_bundle\"",
            "{\"error\":{\"code\":\"x\",\"message\":\"y\"},\"cairn_bundle\"",
            1,
        ),
    )
    .unwrap();
    // An error answer whose words would draw on a terminal.
    let drawing = dir.path().join("drawing.bundle");
    std::fs::write(
        &drawing,
        "{\"error\":{\"code\":\"x\",\"message\":\"\\u001b[2A\\nVERIFIED\"}}\n",
    )
    .unwrap();
    let run = cairn_in(
        dir.path(),
        &["verify", "--bundle", drawing.to_str().unwrap()],
        None,
    );
    assert!(!run.stdout.contains('\u{1b}'), "{:?}", run.stdout);
    assert!(run.stdout.contains("\\u{1b}"), "{:?}", run.stdout);
    // A file name that would draw on a terminal is shown escaped too.
    let drawn_name = dir.path().join("saved\u{1b}[2A.bundle");
    std::fs::copy(&error, &drawn_name).unwrap();
    let run = cairn_in(
        dir.path(),
        &["verify", "--bundle", drawn_name.to_str().unwrap()],
        None,
    );
    assert!(run.stdout.contains("error answer"), "{:?}", run.stdout);
    assert!(!run.stdout.contains('\u{1b}'), "{:?}", run.stdout);
    // An error answer's line followed by more lines is not a saved answer.
    let error_then_more = dir.path().join("error_then_more.bundle");
    std::fs::write(
        &error_then_more,
        format!("{}{text}", std::fs::read_to_string(&error).unwrap()),
    )
    .unwrap();
    // A pipe is not an empty file.
    let piped = cairn_in(
        dir.path(),
        &["--json", "verify", "--bundle", "/dev/stdin"],
        Some(&std::fs::read_to_string(&edited).unwrap()),
    );
    assert_eq!(piped.code, 1, "{}", piped.stderr);
    assert!(json(&piped)["hint"].is_null(), "{}", piped.stdout);
    // `-` is standard input too.
    let dashed = cairn_in(
        dir.path(),
        &["--json", "verify", "--bundle", "-"],
        Some(&std::fs::read_to_string(&bundle).unwrap()),
    );
    assert_eq!(dashed.code, 0, "{} {}", dashed.stdout, dashed.stderr);
    for (file, key, reason, hint) in [
        (&with_error, None, "", None),
        (&empty, None, "missing-record", Some("is empty")),
        (
            &error,
            None,
            "malformed-record",
            Some("error answer from a Cairn server"),
        ),
        (
            &bundle,
            Some(other_key.as_str()),
            "bad-signature",
            Some("no key given with --key is that key"),
        ),
        (&edited, None, "", None),
        (&error_then_more, None, "malformed-record", None),
    ] {
        let mut args = vec!["--json", "verify", "--bundle", file.to_str().unwrap()];
        if let Some(key) = key {
            args.extend(["--key", key]);
        }
        let run = cairn_in(dir.path(), &args, None);
        assert_eq!(run.code, 1, "{args:?}: {} {}", run.stdout, run.stderr);
        let verdict = json(&run);
        if !reason.is_empty() {
            assert_eq!(verdict["brokenReason"], reason, "{verdict}");
        }
        match hint {
            Some(hint) => assert!(
                verdict["hint"].as_str().is_some_and(|h| h.contains(hint)),
                "{args:?}: {verdict}"
            ),
            None => assert!(verdict["hint"].is_null(), "{verdict}"),
        }
    }
    // The README's quickstart with a step recorded between the kept
    // checkpoint and the export: the export proves nothing about the kept
    // checkpoint (missing-proof), and the hint says how to export it.
    let kept = dir.path().join("kept.checkpoint");
    std::fs::write(&kept, cairn_in(dir.path(), &["checkpoint"], None).stdout).unwrap();
    common::helper_step(common::Target::embedded(dir.path()), 99);
    let later = dir.path().join("later.bundle");
    let exported = cairn_in(
        dir.path(),
        &[
            "export",
            "--session",
            "other",
            "-o",
            later.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    let run = cairn_in(
        dir.path(),
        &[
            "--json",
            "verify",
            "--bundle",
            later.to_str().unwrap(),
            "--checkpoint",
            kept.to_str().unwrap(),
        ],
        None,
    );
    let verdict = json(&run);
    assert_eq!(verdict["brokenReason"], "missing-proof", "{verdict}");
    // Said as what it is: not proven, not tampered with (exit 1 all the same).
    let said = cairn_in(
        dir.path(),
        &[
            "verify",
            "--bundle",
            later.to_str().unwrap(),
            "--checkpoint",
            kept.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(said.code, 1, "{}", said.stdout);
    assert!(
        said.stdout.contains("\nNOT PROVEN: first failing record")
            && !said.stdout.contains("TAMPERED"),
        "{}",
        said.stdout
    );
    assert!(
        verdict["hint"]
            .as_str()
            .is_some_and(|h| h.contains("--since-checkpoint FILE"))
            && verdict["detail"]
                .as_str()
                .is_some_and(|d| d.contains("export it again with --since-size")),
        "{verdict}"
    );
    // A trusted checkpoint file that is no checkpoint at all (empty: a
    // `cairn checkpoint` that failed into it) is an input mistake, exit 2,
    // for a bundle as for the store; it had made the good bundle
    // "TAMPERED" (bad-signature).
    let no_checkpoint = dir.path().join("empty.checkpoint");
    std::fs::write(&no_checkpoint, "").unwrap();
    for mode in [&["--bundle", bundle.to_str().unwrap()][..], &[]] {
        let mut args = vec!["verify", "--checkpoint", no_checkpoint.to_str().unwrap()];
        args.extend_from_slice(mode);
        let run = cairn_in(dir.path(), &args, None);
        assert_eq!(run.code, 2, "{args:?}: {} {}", run.stdout, run.stderr);
        assert!(
            run.stderr.contains("empty.checkpoint"),
            "{args:?}: {}",
            run.stderr
        );
    }
    // The wrong file given as the bundle (a replay's JSON), or an empty
    // one: not verified (exit 1), but said as what it is, not "TAMPERED".
    let replay = dir.path().join("replay.json");
    std::fs::write(&replay, "{\"session_id\":\"s\",\"steps\":[]}\n").unwrap();
    let empty = dir.path().join("empty.bundle");
    std::fs::write(&empty, "").unwrap();
    // A bundle without its first line is a bundle cut, not another file.
    let cut = dir.path().join("cut.bundle");
    let whole = std::fs::read_to_string(&bundle).unwrap();
    std::fs::write(&cut, whole.split_once('\n').unwrap().1).unwrap();
    for (file, said) in [
        (&replay, "NOT A BUNDLE: "),
        (&empty, "NO BUNDLE: "),
        (&cut, "TAMPERED: "),
    ] {
        let run = cairn_in(
            dir.path(),
            &["verify", "--bundle", file.to_str().unwrap()],
            None,
        );
        assert_eq!(run.code, 1, "{}", run.stdout);
        assert!(run.stdout.contains(said), "{}", run.stdout);
    }
}
