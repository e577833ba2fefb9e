//! A bundle's lines as bytes: writing each kind of line (checkpoint,
//! consistency, selection, entry, end) and reading an entry line back,
//! strictly, into the entry and its proof. Apart from the verifier
//! (`verifier`) because this is the line format itself, which the
//! exporter, the verifier and the fast step decoder (`fast`) all share.

use super::{MAX_PROOF_HASHES, exact_members};
use crate::commit::{
    AgentSignature, FIELDS, Field, Opening, Openings, StepRecord, write_field_value,
};
use crate::hash::Hash;
use crate::kind::StepKind;
use crate::log::{LogEntry, LogRecord, OpRecord};
use crate::record::{Links, Status, Step};
use crate::selection::Selection;
use crate::time::Timestamp;
use crate::verify::Reason;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Map, Value, json};

/// The checkpoint line.
pub fn checkpoint_line(note: &str) -> String {
    json!({ "checkpoint": note }).to_string()
}

/// A consistency line: the proof that the bundle's checkpoint extends the
/// log of an earlier size `old_size`.
pub fn consistency_line(old_size: u64, proof: &[Hash]) -> String {
    json!({ "consistency": {
        "old_size": old_size,
        "proof": proof.iter().map(Hash::to_hex).collect::<Vec<_>>(),
    }})
    .to_string()
}

/// The selection line of a partial bundle: the statement and its note.
pub fn selection_line(selection: &Selection, note: &str) -> String {
    json!({ "selection": selection.to_value(), "note": note }).to_string()
}

/// The closing line.
pub fn end_line(entries: u64) -> String {
    json!({ "end": { "entries": entries } }).to_string()
}

/// Encodes one entry as a bundle line (without newline), with its
/// inclusion proof for partial bundles.
pub fn encode_entry(entry: &LogEntry, proof: Option<&[Hash]>) -> String {
    let mut line = match &entry.record {
        LogRecord::Op { record, hash } => json!({
            "seq": entry.seq,
            "type": record.entry_type(),
            "logged_at": entry.logged_at.to_string(),
            "view": record.to_view(),
            "hash": hash.to_hex(),
        }),
        LogRecord::ErasedTrace { hash } => json!({
            "seq": entry.seq,
            "type": "signed-trace",
            "logged_at": entry.logged_at.to_string(),
            "view": Value::Null,
            "hash": hash.to_hex(),
        }),
        LogRecord::Step(rec) => {
            let mut fields = Map::new();
            let mut salts = Map::new();
            let mut hidden = Map::new();
            let mut scratch = Vec::new();
            for field in FIELDS {
                match rec.openings.get(field) {
                    Opening::Revealed(salt) => {
                        scratch.clear();
                        write_field_value(&rec.step, field, &mut scratch);
                        // Canonical bytes always parse back as JSON.
                        let value = serde_json::from_slice(&scratch).unwrap_or(Value::Null);
                        fields.insert(field.name().into(), value);
                        salts.insert(field.name().into(), Value::String(hex::encode(salt)));
                    }
                    Opening::Hidden(commitment) => {
                        hidden.insert(field.name().into(), Value::String(commitment.to_hex()));
                    }
                }
            }
            json!({
                "seq": entry.seq,
                "type": "step",
                "logged_at": entry.logged_at.to_string(),
                "fields": fields,
                "salts": salts,
                "hidden": hidden,
                "digest": rec.digest.to_hex(),
                "prev_hash": rec.prev_hash.to_hex(),
                "hash": rec.hash.to_hex(),
                "signature": rec.signature.as_ref().map(|s| json!({
                    "key_id": s.key_id,
                    "signature": B64.encode(s.signature),
                })),
                "has_embedding": rec.has_embedding,
                "erased": rec.erased,
            })
        }
    };
    if let (Some(proof), Some(obj)) = (proof, line.as_object_mut()) {
        obj.insert(
            "proof".into(),
            Value::Array(proof.iter().map(|h| Value::String(h.to_hex())).collect()),
        );
    }
    line.to_string()
}

/// A log entry read from a bundle line, with its inclusion proof if the
/// line carries one.
pub type ProvenEntry = (LogEntry, Option<Vec<Hash>>);

/// Decodes an entry line into the entry and its proof (if any), strictly.
pub fn decode_entry(line: &str) -> Result<ProvenEntry, String> {
    let v = crate::json::from_str(line)?;
    decode_entry_value(&v).map_err(|(_, e)| e)
}

fn hash_member(v: &Value, key: &str) -> Result<Hash, String> {
    v[key]
        .as_str()
        .and_then(|s| Hash::from_hex(s).ok())
        .ok_or_else(|| format!("{key} is not a hex hash"))
}

pub(super) fn proof_member(value: &Value, what: &str) -> Result<Vec<Hash>, String> {
    let items = value
        .as_array()
        .ok_or_else(|| format!("{what} is not an array"))?;
    if items.len() > MAX_PROOF_HASHES {
        return Err(format!("{what} has more than {MAX_PROOF_HASHES} hashes"));
    }
    items
        .iter()
        .map(|h| h.as_str().and_then(|s| Hash::from_hex(s).ok()))
        .collect::<Option<Vec<Hash>>>()
        .ok_or_else(|| format!("{what} holds a non-hash"))
}

const STEP_MEMBERS: [&str; 12] = [
    "seq",
    "type",
    "logged_at",
    "fields",
    "salts",
    "hidden",
    "digest",
    "prev_hash",
    "hash",
    "signature",
    "has_embedding",
    "erased",
];
const OP_MEMBERS: [&str; 5] = ["seq", "type", "logged_at", "view", "hash"];

/// Decodes an entry line; an error says why, with its reason: the line's
/// form (`malformed-record`), or a derived hash the line states wrongly
/// (`digest-mismatch`).
pub(super) fn decode_entry_value(v: &Value) -> Result<ProvenEntry, (Reason, String)> {
    let malformed = |e: String| (Reason::MalformedRecord, e);
    let (entry, proof) = decode_entry_form(v).map_err(malformed)?;
    // A session start states its genesis, which derives from its header:
    // a verifier recomputes the record's hash from the view the header
    // gives, so the stated genesis must be that one, or it would be shown
    // unauthenticated.
    if let LogRecord::Op {
        record: OpRecord::SessionStart(header),
        ..
    } = &entry.record
        && v["view"]["genesis"].as_str() != Some(&crate::commit::genesis_hash(header).to_hex())
    {
        return Err((
            Reason::DigestMismatch,
            "the session start's genesis is not the one its header gives".into(),
        ));
    }
    Ok((entry, proof))
}

fn decode_entry_form(v: &Value) -> Result<ProvenEntry, String> {
    let obj = v.as_object().ok_or("an entry line must be an object")?;
    let seq = obj
        .get("seq")
        .and_then(Value::as_u64)
        .ok_or("seq must be a non-negative integer")?;
    let entry_type = obj
        .get("type")
        .and_then(Value::as_str)
        .ok_or("type must be a string")?;
    let base: &[&str] = if entry_type == "step" {
        &STEP_MEMBERS
    } else {
        &OP_MEMBERS
    };
    let mut members: Vec<&str> = base.to_vec();
    if obj.contains_key("proof") {
        members.push("proof");
    }
    exact_members(obj, &members, "entry")?;
    let proof = obj
        .get("proof")
        .map(|p| proof_member(p, "proof"))
        .transpose()?;
    let logged_at = obj["logged_at"]
        .as_str()
        .ok_or("logged_at must be a string")
        .and_then(|t| {
            Timestamp::parse_canonical(t).map_err(|_| "logged_at is not a canonical timestamp")
        })?;
    let record = if entry_type == "step" {
        LogRecord::Step(decode_step(v)?)
    } else if v["view"].is_null() {
        // Only an erased signed trace's view is withheld (FORMAT.md 8).
        if entry_type != "signed-trace" {
            return Err(format!(
                "view is null: only a signed-trace record's view is withheld (when erased), not a {entry_type}'s"
            ));
        }
        LogRecord::ErasedTrace {
            hash: hash_member(v, "hash")?,
        }
    } else {
        let record = OpRecord::from_view(entry_type, &v["view"]).map_err(|e| e.to_string())?;
        LogRecord::Op {
            record,
            hash: hash_member(v, "hash")?,
        }
    };
    Ok((
        LogEntry {
            seq,
            logged_at,
            record,
        },
        proof,
    ))
}

fn decode_step(v: &Value) -> Result<StepRecord, String> {
    let fields = v["fields"].as_object().ok_or("fields must be an object")?;
    let salts = v["salts"].as_object().ok_or("salts must be an object")?;
    let hidden = v["hidden"].as_object().ok_or("hidden must be an object")?;
    for map in [fields, salts, hidden] {
        if let Some(unknown) = map.keys().find(|k| Field::from_name(k).is_none()) {
            return Err(format!("{unknown:?} is not a step field"));
        }
    }
    let opening = |field: Field| -> Result<Opening, String> {
        let name = field.name();
        match (salts.get(name), hidden.get(name)) {
            (Some(salt), None) if fields.contains_key(name) => {
                let mut out = [0u8; 16];
                if !crate::hash::decode_lower_hex(salt.as_str().unwrap_or_default(), &mut out) {
                    return Err(format!("salt of {name} is not 16 bytes of lowercase hex"));
                }
                Ok(Opening::Revealed(out))
            }
            (None, Some(c)) if !fields.contains_key(name) => Ok(Opening::Hidden(
                c.as_str()
                    .and_then(|s| Hash::from_hex(s).ok())
                    .ok_or_else(|| format!("commitment of {name} is not a hash"))?,
            )),
            _ => Err(format!(
                "{name} must be either revealed with a salt or hidden"
            )),
        }
    };
    let mut openings = Vec::with_capacity(FIELDS.len());
    for field in FIELDS {
        openings.push(opening(field)?);
    }
    let openings: [Opening; crate::commit::FIELD_COUNT] = openings
        .try_into()
        .map_err(|_| "wrong number of fields".to_owned())?;

    let get = |name: &str| fields.get(name).filter(|v| !v.is_null());
    let string = |name: &str| -> Result<String, String> {
        match fields.get(name) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("{name} is not a string")),
        }
    };
    let opt_string = |name: &str| -> Result<Option<String>, String> {
        match get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("{name} is not a string")),
        }
    };
    let opt_u64 = |name: &str| -> Result<Option<u64>, String> {
        get(name)
            .map(|v| {
                v.as_u64()
                    .ok_or_else(|| format!("{name} is not a non-negative integer"))
            })
            .transpose()
    };
    let step_type = string("step_type")?;
    let kind = StepKind::parse(&step_type)
        .filter(|k| k.as_str() == step_type)
        .ok_or_else(|| format!("step_type {step_type:?} is not a canonical kind"))?;
    let created_at = Timestamp::parse_canonical(&string("created_at")?)
        .map_err(|_| "created_at is not a canonical timestamp".to_owned())?;
    // `null` is not an object: links are `{}` when there are none.
    let links = match fields.get("links") {
        None => Links::default(),
        Some(v) => Links::from_json(v)?,
    };
    let status = match fields.get("status").and_then(Value::as_str) {
        Some(s) => Status::parse(s).ok_or("status is not ok or flagged")?,
        None => return Err("status must be a string".into()),
    };
    let step = Step {
        trace_id: string("trace_id")?,
        org_id: string("org_id")?,
        agent_id: string("agent_id")?,
        session_id: string("session_id")?,
        step_index: fields
            .get("step_index")
            .and_then(Value::as_u64)
            .ok_or("step_index must be a non-negative integer")?,
        kind,
        kind_label: string("step_type_original")?,
        content: opt_string("content")?,
        input: get("input_data").cloned(),
        output: get("output_data").cloned(),
        confidence: get("confidence")
            .map(|v| v.as_f64().ok_or("confidence is not a number"))
            .transpose()?,
        duration_ms: opt_u64("duration_ms")?,
        token_count: opt_u64("token_count")?,
        model: opt_string("model")?,
        metadata: get("metadata").cloned(),
        created_at,
        turn_id: opt_string("turn_id")?,
        turn_step: opt_u64("turn_step")?,
        task_id: opt_string("task_id")?,
        links,
        status,
        signer_key_id: opt_string("signer_key_id")?,
    };
    let signature = match &v["signature"] {
        Value::Null => None,
        Value::Object(sig) => {
            exact_members(sig, &["key_id", "signature"], "signature")?;
            let bytes = sig["signature"]
                .as_str()
                .and_then(|s| B64.decode(s).ok())
                .ok_or("signature is not base64")?;
            Some(AgentSignature {
                key_id: sig["key_id"]
                    .as_str()
                    .ok_or("signature.key_id must be a string")?
                    .to_owned(),
                signature: bytes.try_into().map_err(|_| "signature is not 64 bytes")?,
            })
        }
        _ => return Err("signature must be null or an object".into()),
    };
    let flag = |name: &str| {
        v[name]
            .as_bool()
            .ok_or_else(|| format!("{name} must be a boolean"))
    };
    Ok(StepRecord {
        step,
        openings: Openings(openings),
        digest: hash_member(v, "digest")?,
        prev_hash: hash_member(v, "prev_hash")?,
        hash: hash_member(v, "hash")?,
        signature,
        has_embedding: flag("has_embedding")?,
        erased: flag("erased")?,
    })
}
