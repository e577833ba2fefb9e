//! The tamper suite's courier edits of a line's form that no hash sees:
//! a number token `-0` where an integer stands (JCS writes `-0` as `0`, so
//! no digest or signature changes), values of another JSON type where a
//! verifier looks them up in a list of names, a consistency proof longer
//! than any proof can be, and a header key of the witnesses' algorithm.
//! Each case is written to the shared corpus: the Python and TypeScript
//! verifiers must give the same verdict at the same place (a review found
//! both accepting `-0` where the Rust one refused it, and the Python one
//! raising on a list where a name stands).

use crate::corpus::*;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use cairn_core::bundle::consistency_line;
use cairn_core::ed25519_dalek::{Signer as _, SigningKey};
use cairn_core::note::{ALG_COSIGNATURE_V1, key_id};
use cairn_core::verify::Reason;
use serde_json::{Value, json};

/// `lines` with `from` replaced by `to` in line `index`, which must hold
/// `from` exactly once.
fn replaced(lines: &[String], index: usize, from: &str, to: &str) -> Vec<String> {
    assert_eq!(
        lines[index].matches(from).count(),
        1,
        "{from} in {}",
        lines[index]
    );
    let mut out = lines.to_vec();
    out[index] = out[index].replace(from, to);
    out
}

/// The index and seq of the first step line whose `step_index` is 0.
fn first_step_line(lines: &[String]) -> (usize, u64) {
    lines
        .iter()
        .enumerate()
        .find_map(|(i, l)| {
            let v: Value = serde_json::from_str(l).ok()?;
            (v["type"] == "step" && v["fields"]["step_index"] == 0)
                .then(|| (i, v["seq"].as_u64().unwrap_or(u64::MAX)))
        })
        .expect("a bundle with a first step")
}

/// `complete` is a complete bundle, `partial` a partial one (its selection
/// at line 3), both verifying under `pinned`.
pub fn courier_forms(complete: &[String], partial: &[String], pinned: &[String]) {
    // Negative zero where an integer stands.
    case(
        "form-seq-negative-zero",
        &replaced(complete, 2, "\"seq\":0,", "\"seq\":-0,"),
        pinned,
        &[],
        Some(&at_line(Reason::MalformedRecord, 3)),
    );
    let (at, seq) = first_step_line(complete);
    let line = at as u64 + 1;
    case(
        "form-step-index-negative-zero",
        &replaced(complete, at, "\"step_index\":0,", "\"step_index\":-0,"),
        pinned,
        &[],
        Some(&Expected {
            seq: Some(seq),
            ..at_line(Reason::MalformedRecord, line)
        }),
    );
    // A list or an object where a name is looked up.
    let kind = serde_json::from_str::<Value>(&complete[at]).unwrap()["fields"]["step_type"]
        .as_str()
        .unwrap()
        .to_owned();
    case(
        "form-step-type-a-list",
        &replaced(
            complete,
            at,
            &format!("\"step_type\":\"{kind}\""),
            &format!("\"step_type\":[\"{kind}\"]"),
        ),
        pinned,
        &[],
        Some(&Expected {
            seq: Some(seq),
            ..at_line(Reason::MalformedRecord, line)
        }),
    );
    let mut level_object = partial.to_vec();
    edit_line(&mut level_object, 2, |v| {
        let level = v["selection"]["level"].clone();
        v["selection"]["level"] = json!({ level.as_str().unwrap(): 1 });
    });
    case(
        "form-selection-level-an-object",
        &level_object,
        pinned,
        &[],
        Some(&at_line(Reason::MalformedRecord, 3)),
    );
    let mut type_list = partial.to_vec();
    edit_line(&mut type_list, 2, |v| {
        let records = v["selection"]["records"].as_array_mut().unwrap();
        let first = records.first_mut().expect("a selection listing a record");
        first[1] = json!([first[1].clone()]);
    });
    case(
        "form-selection-record-type-a-list",
        &type_list,
        pinned,
        &[],
        Some(&at_line(Reason::MalformedRecord, 3)),
    );
    let mut entry_type_list = complete.to_vec();
    edit_line(&mut entry_type_list, 2, |v| {
        let kind = v["type"].clone();
        v["type"] = json!([kind]);
    });
    case(
        "form-entry-type-a-list",
        &entry_type_list,
        pinned,
        &[],
        Some(&at_line(Reason::MalformedRecord, 3)),
    );
    // A consistency proof of 129 hashes: no proof between sizes below
    // 2^64 is that long (FORMAT 10.2), whatever its hashes.
    let mut long_proof = complete.to_vec();
    long_proof.insert(2, consistency_line(1, &vec![cairn_core::Hash::ZERO; 129]));
    case(
        "form-consistency-proof-129-hashes",
        &long_proof,
        pinned,
        &[],
        Some(&at_line(Reason::MalformedRecord, 3)),
    );
}

/// A header whose `server_key` is a cosignature/v1 key (algorithm 0x04) of
/// the server's name, and the checkpoint signed by that key's secret under
/// that key's id: a readable header key (10.2 step 2), but only an Ed25519
/// note key (0x01) signs a note, so the checkpoint has no signature by a
/// key of the log (`bad-signature` at line 2, 7.1).
pub fn witness_key_in_the_header(complete: &[String]) {
    let header: Value = serde_json::from_str(&complete[0]).unwrap();
    let name = header["server_name"].as_str().unwrap().to_owned();
    let secret = SigningKey::from_bytes(&[44; 32]);
    let public = secret.verifying_key().to_bytes();
    let id = key_id(&name, ALG_COSIGNATURE_V1, &public);
    let mut blob = vec![ALG_COSIGNATURE_V1];
    blob.extend_from_slice(&public);
    let vkey = format!("{name}+{id:08x}+{}", B64.encode(&blob));
    let note = serde_json::from_str::<Value>(&complete[1]).unwrap()["checkpoint"]
        .as_str()
        .unwrap()
        .to_owned();
    let text = &note[..note.rfind("\n\n").unwrap() + 1];
    let mut signature = id.to_be_bytes().to_vec();
    signature.extend_from_slice(&secret.sign(text.as_bytes()).to_bytes());
    let signed = format!("{text}\n\u{2014} {name} {}\n", B64.encode(&signature));
    let mut lines = complete.to_vec();
    edit_line(&mut lines, 0, |v| {
        v["server_key"] = json!(vkey);
        v.as_object_mut().unwrap().remove("log_keys");
    });
    lines[1] = cairn_core::bundle::checkpoint_line(&signed);
    case(
        "form-header-server-key-of-algorithm-4",
        &lines,
        &[],
        &[],
        Some(&at_line(Reason::BadSignature, 2)),
    );
}

/// A log's keys all bear its key name, the server name of its origin
/// (FORMAT 7.10): a checkpoint signed by another server's key, pinned
/// beside the log's, is signed by nothing of this log, and so is a header
/// renaming the log's server after another key's name (both verified
/// before by all three verifiers: an evidence review's finding).
pub fn keys_of_another_name(
    complete: &[String],
    pinned: &[String],
    server: &cairn_core::note::NoteSigner,
) {
    let other = cairn_core::note::NoteSigner::from_seed("elsewhere.example", &[45; 32]).unwrap();
    let note = serde_json::from_str::<Value>(&complete[1]).unwrap()["checkpoint"]
        .as_str()
        .unwrap()
        .to_owned();
    let text = &note[..note.rfind("\n\n").unwrap() + 1];
    let mut resigned = complete.to_vec();
    resigned[1] = cairn_core::bundle::checkpoint_line(&other.sign(text).unwrap());
    let mut both = pinned.to_vec();
    both.push(other.verifier().to_string());
    case(
        "form-checkpoint-by-a-key-of-another-name",
        &resigned,
        &both,
        &[],
        Some(&at_line(Reason::BadSignature, 2)),
    );
    // The log's own key signs a checkpoint of an origin of another server
    // name, which the header names too.
    let header: Value = serde_json::from_str(&complete[0]).unwrap();
    let org = header["org_id"].as_str().unwrap().to_owned();
    let renamed_origin = format!("elsewhere.example/{org}");
    let renamed_text = format!("{renamed_origin}\n{}", text.split_once('\n').unwrap().1);
    let mut renamed = complete.to_vec();
    edit_line(&mut renamed, 0, |v| {
        v["server_name"] = json!("elsewhere.example");
        v["origin"] = json!(renamed_origin);
    });
    renamed[1] = cairn_core::bundle::checkpoint_line(&server.sign(&renamed_text).unwrap());
    // A server name no key can bear (a space): the same verdict, at line
    // 2, in every verifier (Python and TypeScript had refused it at line 1
    // though FORMAT 10.1 gives it no syntax of its own).
    let mut unnamable = complete.to_vec();
    edit_line(&mut unnamable, 0, |v| {
        v["server_name"] = json!("cairn server");
        v["origin"] = json!(format!("cairn server/{org}"));
    });
    case(
        "form-header-server-name-no-key-bears",
        &unnamable,
        pinned,
        &[],
        Some(&at_line(Reason::BadSignature, 2)),
    );
    case(
        "form-header-renames-the-server",
        &renamed,
        pinned,
        &[],
        Some(&at_line(Reason::BadSignature, 2)),
    );
}
