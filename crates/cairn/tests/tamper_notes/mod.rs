//! The tamper suite's signed-note cases: how many signature lines a note
//! may carry, and witness policies over cosigned checkpoints. Each case is
//! written to the shared corpus, as the rest of `tamper.rs`.

use crate::corpus::*;
use cairn_core::bundle::checkpoint_line;
use cairn_core::note::NoteSigner;
use cairn_core::verify::Reason;
use serde_json::{Value, json};

/// `complete` with its checkpoint line carrying `note`.
fn note_in(complete: &[String], note: &str) -> Vec<String> {
    let mut lines = complete.to_vec();
    lines[1] = checkpoint_line(note);
    lines
}

/// A note's bound is 100 distinct signature lines (FORMAT 7.1): a line
/// repeated exactly counts once, wherever the repeat comes. `note` is the
/// complete bundle's checkpoint note.
pub fn note_signature_bounds(complete: &[String], pinned: &[String], note: &str) {
    let own_line = note.rsplit_once("\n\n").unwrap().1.to_owned();
    // Lines of names no key has: ignored, but counted.
    let unknown: Vec<String> = (0..100)
        .map(|i| format!("\u{2014} elsewhere.example/w{i} AAAAAAAAAAAAAAAA\n"))
        .collect();
    case(
        "note-100-distinct-signatures-then-a-repeat",
        &note_in(
            complete,
            &format!("{note}{}{own_line}", unknown[..99].concat()),
        ),
        pinned,
        &[],
        None,
    );
    case(
        "note-101-distinct-signatures",
        &note_in(complete, &format!("{note}{}", unknown.concat())),
        pinned,
        &[],
        Some(&at_line(Reason::MalformedRecord, 2)),
    );
}

/// The complete bundle's checkpoint cosigned by witnesses (C2SP
/// cosignature/v1, FORMAT.md 7.7) and verified under witness policies:
/// a quorum met, a quorum of one, one missing, and cosignatures that must
/// count for nothing (a byte altered, a zero timestamp, one over another
/// checkpoint, the same line twice). Cosignature lines are not part of
/// what the bundle authenticates: each case is the policy's verdict.
pub fn witness_policies(complete: &[String], pinned: &[String], server: &NoteSigner) {
    use cairn_core::checkpoint::Cosigner;
    let w1 = Cosigner::from_seed("w1.example", &[41; 32]).unwrap();
    let w2 = Cosigner::from_seed("w2.example", &[42; 32]).unwrap();
    let stranger = Cosigner::from_seed("stranger.example", &[43; 32]).unwrap();
    let vkey = |c: &Cosigner| c.verifier().to_string();
    let note_of = |lines: &[String]| -> String {
        serde_json::from_str::<Value>(&lines[1]).unwrap()["checkpoint"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let with_note = |note: String| note_in(complete, &note);
    let note = note_of(complete);
    let text = &note[..note.rfind("\n\n").unwrap() + 1];
    let t = 1_780_000_000;
    let cosigned = format!("{note}{}{}", w1.cosign(text, t), w2.cosign(text, t + 1));
    let both = Witnesses {
        vkeys: vec![vkey(&w1), vkey(&w2)],
        quorum: None,
    };
    let w1_and_stranger = |quorum| Witnesses {
        vkeys: vec![vkey(&w1), vkey(&stranger)],
        quorum,
    };
    let lacking = Some(at_line(Reason::InsufficientCosignatures, 2));
    case_witnessed(
        "witnessed-quorum-met",
        &with_note(cosigned.clone()),
        pinned,
        &[],
        &both,
        None,
    );
    case_witnessed(
        "witnessed-quorum-of-one",
        &with_note(cosigned.clone()),
        pinned,
        &[],
        &w1_and_stranger(Some(1)),
        None,
    );
    case_witnessed(
        "witnessed-a-witness-missing",
        &with_note(cosigned.clone()),
        pinned,
        &[],
        &w1_and_stranger(None),
        lacking.as_ref(),
    );
    // One byte of w1's cosignature altered: it counts for nothing.
    let w1_line = w1.cosign(text, t);
    let blob = w1_line.trim_end().rsplit(' ').next().unwrap().to_owned();
    let flipped = format!(
        "{}{}{}",
        &blob[..20],
        if &blob[20..21] == "A" { "B" } else { "A" },
        &blob[21..]
    );
    let altered = cosigned.replace(&blob, &flipped);
    case_witnessed(
        "witnessed-cosignature-altered",
        &with_note(altered.clone()),
        pinned,
        &[],
        &both,
        lacking.as_ref(),
    );
    case_witnessed(
        "witnessed-cosignature-altered-quorum-of-one",
        &with_note(altered),
        pinned,
        &[],
        &Witnesses {
            quorum: Some(1),
            ..both.clone()
        },
        None,
    );
    // A cosignature at time 0 (C2SP: 1 to 2^63 - 1), one over another
    // checkpoint's text: neither counts.
    let other_text = text.replacen('\n', "\nextension line\n", 1);
    let skewed = format!("{note}{}{}", w1.cosign(text, 0), w2.cosign(&other_text, t));
    case_witnessed(
        "witnessed-zero-time-and-other-text",
        &with_note(skewed),
        pinned,
        &[],
        &Witnesses {
            quorum: Some(1),
            ..both.clone()
        },
        lacking.as_ref(),
    );
    // Where verifiers written apart had disagreed (a review's differential
    // run): key ids in upper-case hex (a witness's, the header's key),
    // key names of characters that are not white space but not printable
    // either, a checkpoint size past 2^63 (up to 2^64 - 1 is a size).
    let upper = |vkey: String| {
        let mut parts: Vec<String> = vkey.splitn(3, '+').map(str::to_owned).collect();
        parts[1] = parts[1].to_uppercase();
        parts.join("+")
    };
    case_witnessed(
        "witnessed-key-id-in-upper-case",
        &with_note(cosigned.clone()),
        &pinned.iter().cloned().map(upper).collect::<Vec<_>>(),
        &[],
        &Witnesses {
            vkeys: vec![upper(vkey(&w1)), vkey(&w2)],
            quorum: None,
        },
        None,
    );
    let mut header_upper = complete.to_vec();
    edit_line(&mut header_upper, 0, |h| {
        h["server_key"] = json!(upper(h["server_key"].as_str().unwrap().to_owned()));
    });
    case("header-key-id-in-upper-case", &header_upper, &[], &[], None);
    let invisible = Cosigner::from_seed("w\u{200b}", &[44; 32]).unwrap();
    let with_invisible = format!(
        "{note}\u{2014} x\u{ad}y {}\n{}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [7u8; 68]),
        invisible.cosign(text, t)
    );
    case_witnessed(
        "witnessed-invisible-names",
        &with_note(with_invisible),
        pinned,
        &[],
        &Witnesses {
            vkeys: vec![vkey(&invisible)],
            quorum: None,
        },
        None,
    );
    let huge_text = {
        let mut lines: Vec<&str> = text.split('\n').collect();
        lines[1] = "9223372036854775809";
        lines.join("\n")
    };
    let huge = format!(
        "{}{}",
        server.sign(&huge_text).unwrap(),
        w1.cosign(&huge_text, t)
    );
    case_witnessed(
        "witnessed-checkpoint-size-past-2-63",
        &with_note(huge),
        pinned,
        &[],
        &both,
        lacking.as_ref(),
    );
    // The same valid line twice counts once.
    let repeated = format!("{note}{}{}", w1.cosign(text, t), w1.cosign(text, t));
    case_witnessed(
        "witnessed-one-cosignature-twice",
        &with_note(repeated),
        pinned,
        &[],
        &w1_and_stranger(None),
        lacking.as_ref(),
    );
}
