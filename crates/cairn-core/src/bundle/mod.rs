//! Export bundles, format 2: a self-contained, streamable file (JSON Lines)
//! holding log entries, the checkpoint they are proven against, the proofs,
//! the signed statement of what a partial bundle selects, and the server's
//! public key, verifiable offline.
//!
//! ```text
//! line 1      {"cairn_bundle":2, "server_name", "org_id", "origin", "server_key", "complete_log", "exported_at"}
//! line 2      {"checkpoint": "<signed note>"}
//! then        {"consistency": {"old_size": M, "proof": [...]}}      zero or more, increasing M
//! then        {"selection": {...}, "note": "<signed note>"}          partial bundles only
//! then        one log entry per line, in increasing seq, each with "proof" unless complete_log
//! last line   {"end": {"entries": N}}
//! ```
//!
//! A bundle of the whole log (`complete_log: true`) carries every entry
//! from seq 0 to the checkpoint's size and no proofs: the verifier rebuilds
//! the tree. A partial bundle carries what its [`Selection`] lists, each
//! entry with its inclusion proof. Every entry must be covered by the
//! signed checkpoint; nothing may be added or dropped without the verifier
//! naming it. `docs/FORMAT.md` section 10 specifies every member and the
//! order of the checks.

use crate::checkpoint::{VerifiedCheckpoint, verify_checkpoint};
use crate::commit::{
    AgentSignature, FIELDS, Field, Opening, Openings, StepRecord, write_field_value,
};
use crate::hash::Hash;
use crate::kind::StepKind;
use crate::log::{LogEntry, LogRecord, OpRecord};
use crate::note::NoteVerifier;
use crate::record::{Links, Status, Step};
use crate::selection::{Selection, SelectionError};
use crate::time::Timestamp;
use crate::verify::{Failure, Location, LogVerifier, Reason, Verdict};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Map, Value, json};

/// Format version written in the header's `cairn_bundle` member.
pub const BUNDLE_VERSION: u64 = 2;

/// Longest consistency proof a line may carry (twice the height of a tree
/// of 2^64 leaves).
const MAX_PROOF_HASHES: usize = 128;

mod fast;
mod header;
mod prepared;
#[doc(hidden)]
pub use fast::assert_fast_agrees;
pub use header::BundleHeader;
pub use prepared::PreparedLine;
use prepared::{LineError, Parsed, PreparedEntry};

fn exact_members(obj: &Map<String, Value>, members: &[&str], what: &str) -> Result<(), String> {
    if let Some(k) = obj.keys().find(|k| !members.contains(&k.as_str())) {
        return Err(format!("unknown member {k:?} in the {what}"));
    }
    if let Some(m) = members.iter().find(|m| !obj.contains_key(**m)) {
        return Err(format!("the {what} lacks {m:?}"));
    }
    Ok(())
}

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

fn proof_member(value: &Value, what: &str) -> Result<Vec<Hash>, String> {
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
fn decode_entry_value(v: &Value) -> Result<ProvenEntry, (Reason, String)> {
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

/// A line as read, without its line ending (`\n` or `\r\n`).
pub fn trim_line_end(line: &[u8]) -> &[u8] {
    match line.strip_suffix(b"\n") {
        Some(line) => line.strip_suffix(b"\r").unwrap_or(line),
        None => line,
    }
}

/// The lines of a bundle held in memory, split at `\n` only, for
/// [`BundleVerifier::push_bytes`].
pub fn bundle_lines(bundle: &[u8]) -> impl Iterator<Item = &[u8]> {
    bundle.split_inclusive(|&b| b == b'\n').map(trim_line_end)
}

/// What a bundle verification found.
#[derive(Debug, Clone, PartialEq)]
pub struct BundleVerdict {
    /// The verdict over every line.
    pub verdict: Verdict,
    /// The server key the checkpoint was checked with.
    pub server_key: Option<String>,
    /// Whether that key was supplied by the caller (pinned) rather than
    /// taken from the bundle itself.
    pub key_pinned: bool,
    /// The verified checkpoint's size and root, if it verified.
    pub checkpoint: Option<(u64, Hash)>,
    /// The bundle's header, if it parsed.
    pub header: Option<BundleHeader>,
    /// The signed selection of a partial bundle, if it verified.
    pub selection: Option<Selection>,
    /// Sizes of the trusted checkpoints the bundle was related to.
    pub trusted_sizes: Vec<u64>,
}

/// Where the verifier is in the bundle's structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Header,
    Checkpoint,
    /// After the checkpoint: consistency lines, then (partial) the
    /// selection, then entries.
    Preamble,
    Entries,
    Ended,
}

/// Verifies a bundle fed line by line, in constant memory in the number of
/// entries (plus one chain state per session, and the erased steps whose
/// erasure record is still ahead).
pub struct BundleVerifier {
    pinned: Vec<NoteVerifier>,
    trusted_notes: Vec<String>,
    witness_policy: Option<crate::witness::WitnessPolicy>,
    trusted: Vec<VerifiedCheckpoint>,
    /// Trusted checkpoints older than the bundle's still needing a
    /// consistency line (partial bundles), by size.
    unproven: Vec<u64>,
    stage: Stage,
    header: Option<BundleHeader>,
    keys: Vec<NoteVerifier>,
    checkpoint: Option<VerifiedCheckpoint>,
    last_consistency: u64,
    selection: Option<Selection>,
    log: Option<LogVerifier>,
    line: u64,
    entries: u64,
    failure: Option<Failure>,
}

impl BundleVerifier {
    /// A verifier that trusts only `pinned` server keys, or, if `pinned` is
    /// empty, the key the bundle names (the caller should then compare its
    /// fingerprint with the operator's published key).
    pub fn new(pinned: Vec<NoteVerifier>) -> BundleVerifier {
        BundleVerifier {
            pinned,
            trusted_notes: Vec::new(),
            witness_policy: None,
            trusted: Vec::new(),
            unproven: Vec::new(),
            stage: Stage::Header,
            header: None,
            keys: Vec::new(),
            checkpoint: None,
            last_consistency: 0,
            selection: None,
            log: None,
            line: 0,
            entries: 0,
            failure: None,
        }
    }

    /// Adds a checkpoint the caller trusts (one it kept earlier, or a
    /// witness's): the bundle's checkpoint must be consistent with it, and
    /// the bundle must prove so (`docs/FORMAT.md` 10.3). Call before the
    /// first line.
    pub fn trust_checkpoint(&mut self, note: impl Into<String>) {
        self.trusted_notes.push(note.into());
    }

    /// Requires the bundle's checkpoint to carry a quorum of valid
    /// cosignatures by `policy`'s witnesses (`insufficient-cosignatures`
    /// at the checkpoint line otherwise). Call before the first line.
    pub fn require_witnesses(&mut self, policy: crate::witness::WitnessPolicy) {
        self.witness_policy = Some(policy);
    }

    fn fail(&mut self, at: Location, reason: Reason, detail: String) -> bool {
        let mut at = at;
        at.line = Some(self.line);
        self.failure = Some(Failure { at, reason, detail });
        false
    }

    fn malformed(&mut self, detail: String) -> bool {
        self.fail(Location::default(), Reason::MalformedRecord, detail)
    }

    /// A line of the entries part that is not an entry at all (not UTF-8,
    /// not strict JSON): like any entry line, it counts as a checked record.
    fn malformed_entry_line(&mut self, detail: String) -> bool {
        if self.stage == Stage::Entries
            && let Some(log) = self.log.as_mut()
        {
            log.fail(Location::default(), Reason::MalformedRecord, detail);
            if let Some(mut failure) = log.failure().cloned() {
                failure.at.line = Some(self.line);
                self.failure = Some(failure);
            }
            return false;
        }
        self.malformed(detail)
    }

    /// Feeds the next line as read: a line that is not UTF-8 is a changed
    /// byte and fails verification at that line. (Decoding it lossily
    /// instead could turn a changed byte back into the text it replaced.)
    /// Returns false once verification has failed.
    pub fn push_bytes(&mut self, line: &[u8]) -> bool {
        if self.failure.is_some() {
            return false;
        }
        self.push_prepared(PreparedLine::new(line))
    }

    /// Feeds the next line. Returns false once verification has failed.
    pub fn push_line(&mut self, line: &str) -> bool {
        self.push_bytes(line.as_bytes())
    }

    /// Feeds the next line, already prepared ([`PreparedLine::new`], which
    /// may run on other threads, in any order: the verdict is the same as
    /// feeding the lines with [`BundleVerifier::push_bytes`]). Returns
    /// false once verification has failed.
    pub fn push_prepared(&mut self, line: PreparedLine) -> bool {
        self.check_prepared(&line)
    }

    /// Feeds the next line, already prepared, as
    /// [`BundleVerifier::push_prepared`] does, but leaves the line to the
    /// caller: a feeder that prepares lines on other threads can free them
    /// there, or read the next line into the spent line's buffer
    /// ([`PreparedLine::into_buffer`]). Returns false once verification
    /// has failed.
    pub fn check_prepared(&mut self, line: &PreparedLine) -> bool {
        if self.failure.is_some() {
            return false;
        }
        self.line += 1;
        let parsed_again;
        let value = match &line.value {
            Ok(Parsed::Value(value)) => value,
            Ok(Parsed::Entry(_)) if self.stage == Stage::Entries => {
                return self.entry_or_end(None, line.entry.as_ref());
            }
            // An entry where the stage expects something else: the stage
            // needs its value (it parsed once, so it parses again).
            Ok(Parsed::Entry(bytes)) => match crate::json::from_slice(bytes) {
                Ok(value) => {
                    parsed_again = value;
                    &parsed_again
                }
                Err(e) => return self.malformed(e),
            },
            Err(LineError::NotUtf8(e)) => {
                return self
                    .malformed_entry_line(format!("line {} is not UTF-8 text: {e}", self.line));
            }
            Err(LineError::NotJson(e)) => {
                if self.stage == Stage::Ended {
                    return self.malformed("content after the end line".into());
                }
                let detail = format!("line {} is not strict JSON: {e}", self.line);
                return self.malformed_entry_line(detail);
            }
        };
        if self.stage == Stage::Ended {
            return self.malformed("content after the end line".into());
        }
        match self.stage {
            Stage::Header => match BundleHeader::from_value(value) {
                Ok(header) => {
                    self.header = Some(header);
                    self.stage = Stage::Checkpoint;
                    true
                }
                Err(e) => self.malformed(e),
            },
            Stage::Checkpoint => self.open_checkpoint(value),
            Stage::Preamble => self.preamble(value, line.entry.as_ref()),
            Stage::Entries => self.entry_or_end(Some(value), line.entry.as_ref()),
            Stage::Ended => false,
        }
    }

    fn open_checkpoint(&mut self, value: &Value) -> bool {
        let note = match value.as_object() {
            Some(obj) if obj.len() == 1 => obj.get("checkpoint").and_then(Value::as_str),
            _ => None,
        };
        let Some(note) = note.map(str::to_owned) else {
            return self.malformed("line 2 must be {\"checkpoint\": \"<signed note>\"}".into());
        };
        let Some(header) = self.header.clone() else {
            return false;
        };
        let keys = if self.pinned.is_empty() {
            let mut keys = Vec::with_capacity(1 + header.log_keys.len());
            for text in std::iter::once(&header.server_key).chain(&header.log_keys) {
                match NoteVerifier::parse(text) {
                    Ok(key) => keys.push(key),
                    Err(e) => return self.malformed(format!("a key in the header: {e}")),
                }
            }
            keys
        } else {
            self.pinned.clone()
        };
        let origin = crate::log::log_origin(&header.server_name, &header.org_id);
        let checkpoint = match verify_checkpoint(&note, &origin, &keys) {
            Ok(cp) => cp,
            Err(crate::checkpoint::CheckpointError::Note(e)) => {
                let (reason, detail) = crate::verify::note_failure(&e, "the bundle's checkpoint");
                return self.fail(Location::default(), reason, detail);
            }
            Err(e) => return self.malformed(format!("the bundle's checkpoint: {e}")),
        };
        if let Some(policy) = &self.witness_policy
            && let Err(why) = policy.check(&note)
        {
            return self.fail(
                Location::default(),
                Reason::InsufficientCosignatures,
                format!("the bundle's checkpoint: {why}"),
            );
        }
        let (size, root) = (checkpoint.checkpoint().size, checkpoint.checkpoint().root);
        for trusted in std::mem::take(&mut self.trusted_notes) {
            let cp = match verify_checkpoint(&trusted, &origin, &keys) {
                Ok(cp) => cp,
                Err(e) => {
                    let detail = format!(
                        "the trusted checkpoint given to the verifier does not verify for {origin} with the log key: {e}"
                    );
                    return self.fail(Location::default(), Reason::BadSignature, detail);
                }
            };
            let old = cp.checkpoint();
            if old.size > size {
                let detail = format!(
                    "the bundle's checkpoint (size {size}) is older than the trusted checkpoint (size {}): a bundle cannot prove it consistent; export again",
                    old.size
                );
                return self.fail(Location::default(), Reason::MissingProof, detail);
            }
            if old.size == size && old.root != root {
                let detail = format!(
                    "the trusted checkpoint and the bundle's have the same size {size} and different roots: the log was rewritten"
                );
                return self.fail(Location::default(), Reason::InconsistentCheckpoint, detail);
            }
            if old.size < size && old.size > 0 && !header.complete_log {
                self.unproven.push(old.size);
            }
            self.trusted.push(cp);
        }
        self.keys = keys;
        self.checkpoint = Some(checkpoint);
        self.stage = Stage::Preamble;
        true
    }

    fn preamble(&mut self, value: &Value, prepared: Option<&PreparedEntry>) -> bool {
        let Some(header) = self.header.clone() else {
            return false;
        };
        if let Some(consistency) = value.get("consistency") {
            return self.consistency(value, consistency);
        }
        // The consistency lines are over: every trusted checkpoint older
        // than the bundle's must have been proven (partial bundles; a
        // complete one proves it by folding).
        if let Some(size) = self.unproven.first().copied() {
            let detail = format!(
                "the bundle carries no consistency proof from the trusted checkpoint of size {size} to its own"
            );
            return self.fail(Location::default(), Reason::MissingProof, detail);
        }
        let Some(checkpoint) = self.checkpoint.clone() else {
            return false;
        };
        if header.complete_log {
            if value.get("selection").is_some() {
                return self.malformed("a complete bundle has no selection line".into());
            }
            let mut log = LogVerifier::new(&header.server_name, &header.org_id, self.keys.clone());
            log.expect_checkpoint(&checkpoint);
            log.require_checkpoint_keys(checkpoint.note(), checkpoint.checkpoint().size);
            for trusted in &self.trusted {
                log.expect_checkpoint(trusted);
            }
            self.log = Some(log);
            self.stage = Stage::Entries;
            return self.entry_or_end(Some(value), prepared);
        }
        let Some(statement) = value.get("selection") else {
            let detail =
                "a partial bundle must carry its signed selection after the checkpoint".to_owned();
            return self.fail(Location::default(), Reason::MissingProof, detail);
        };
        let obj = value.as_object();
        if obj.is_none_or(|o| o.len() != 2) {
            return self.malformed("the selection line is {\"selection\", \"note\"}".into());
        }
        let Some(note) = value.get("note").and_then(Value::as_str) else {
            return self.malformed("the selection line's note must be a string".into());
        };
        let selection = match Selection::from_value(statement) {
            Ok(s) => s,
            Err(e) => return self.malformed(format!("selection: {e}")),
        };
        if let Err(e) = selection.verify_note(note, checkpoint.checkpoint(), &self.keys) {
            return match e {
                SelectionError::BadSignature(d) => {
                    self.fail(Location::default(), Reason::BadSignature, d)
                }
                SelectionError::Edited(d) => {
                    self.fail(Location::default(), Reason::DigestMismatch, d)
                }
                SelectionError::OtherCheckpoint(d) => {
                    self.fail(Location::default(), Reason::SelectionMismatch, d)
                }
                SelectionError::Malformed(d) => self.malformed(d),
            };
        }
        let mut log = LogVerifier::sparse(
            &header.server_name,
            &header.org_id,
            self.keys.clone(),
            &checkpoint,
            selection.clone(),
        );
        let size = checkpoint.checkpoint().size;
        log.require_checkpoint_keys(checkpoint.note(), size);
        log.require_checkpoint_keys(note, size);
        self.log = Some(log);
        self.selection = Some(selection);
        self.stage = Stage::Entries;
        true
    }

    fn consistency(&mut self, line: &Value, consistency: &Value) -> bool {
        let Some(checkpoint) = self.checkpoint.clone() else {
            return false;
        };
        let size = checkpoint.checkpoint().size;
        let parsed = (|| -> Result<(u64, Vec<Hash>), String> {
            if line.as_object().is_none_or(|o| o.len() != 1) {
                return Err("a consistency line has one member".into());
            }
            let obj = consistency
                .as_object()
                .ok_or("consistency must be an object")?;
            exact_members(obj, &["old_size", "proof"], "consistency")?;
            let old = obj["old_size"]
                .as_u64()
                .ok_or("consistency.old_size must be a non-negative integer")?;
            Ok((old, proof_member(&obj["proof"], "consistency.proof")?))
        })();
        let (old_size, proof) = match parsed {
            Ok(p) => p,
            Err(e) => return self.malformed(e),
        };
        if old_size == 0 || old_size >= size || old_size <= self.last_consistency {
            return self.malformed(format!(
                "consistency.old_size {old_size} must be above 0, below the checkpoint's size {size} and above the previous line's"
            ));
        }
        self.last_consistency = old_size;
        let trusted = self
            .trusted
            .iter()
            .find(|t| t.checkpoint().size == old_size)
            .map(|t| t.checkpoint().root);
        if let Some(old_root) = trusted {
            if let Err(e) = crate::merkle::verify_consistency(
                old_size,
                size,
                &old_root,
                &checkpoint.checkpoint().root,
                &proof,
            ) {
                let detail = format!(
                    "the bundle's checkpoint (size {size}) is not consistent with the trusted checkpoint (size {old_size}): {e}; the log was rewritten"
                );
                return self.fail(Location::default(), Reason::InconsistentCheckpoint, detail);
            }
            self.unproven.retain(|s| *s != old_size);
        }
        true
    }

    /// An entry or the end line: `value` is `None` only for a prepared
    /// entry whose value was dropped (then it has none of the members
    /// checked here).
    fn entry_or_end(&mut self, value: Option<&Value>, prepared: Option<&PreparedEntry>) -> bool {
        let complete = self.header.as_ref().is_some_and(|h| h.complete_log);
        if let Some(value) = value
            && let Some(end) = value.get("end")
        {
            let count = value
                .as_object()
                .filter(|o| o.len() == 1)
                .and(end.as_object())
                .filter(|e| e.len() == 1)
                .and_then(|e| e.get("entries"))
                .and_then(Value::as_u64);
            self.stage = Stage::Ended;
            return match count {
                Some(n) if n == self.entries => true,
                Some(n) => self.malformed(format!(
                    "the end line says {n} entries; {} were read",
                    self.entries
                )),
                None => self.malformed("the end line is {\"end\": {\"entries\": N}}".into()),
            };
        }
        if value.is_some_and(|v| v.get("consistency").is_some() || v.get("selection").is_some()) {
            return self
                .malformed("consistency and selection lines come before the entries".into());
        }
        self.entries += 1;
        let size = self.checkpoint.as_ref().map_or(0, |c| c.checkpoint().size);
        let Some(log) = self.log.as_mut() else {
            return false;
        };
        // A line that is not an entry still counts as a checked record.
        let decoded_here;
        let (decoded, digest, seq) = match (prepared, value) {
            (Some(prepared), _) => (&prepared.decoded, prepared.digest, prepared.seq),
            (None, Some(value)) => {
                decoded_here = decode_entry_value(value);
                (
                    &decoded_here,
                    None,
                    value
                        .get("seq")
                        .and_then(Value::as_u64)
                        .filter(|s| *s <= crate::record::MAX_SAFE_INTEGER),
                )
            }
            (None, None) => return false,
        };
        let checked = match decoded {
            Ok((entry, proof)) if !(complete && proof.is_some()) => Ok((entry, proof)),
            Ok(_) => Err((
                Reason::MalformedRecord,
                "a complete-log bundle carries no proofs".to_owned(),
            )),
            Err((reason, e)) => Err((*reason, e.clone())),
        };
        let (entry, proof) = match checked {
            Ok(decoded) => decoded,
            Err((reason, e)) => {
                let at = Location {
                    seq,
                    ..Location::default()
                };
                log.fail(at, reason, e);
                if let Some(mut failure) = log.failure().cloned() {
                    failure.at.line = Some(self.line);
                    self.failure = Some(failure);
                }
                return false;
            }
        };
        let ok = if complete {
            if entry.seq == log.size() && entry.seq >= size {
                log.fail(
                    Location {
                        seq: Some(entry.seq),
                        ..Location::default()
                    },
                    Reason::UncoveredEntry,
                    format!(
                        "seq {} is beyond the checkpoint's size {size}: no signature covers it",
                        entry.seq
                    ),
                );
                false
            } else {
                log.push_with_digest(entry, digest)
            }
        } else {
            log.push_proven_with_digest(entry, proof.as_deref(), digest)
        };
        if !ok && let Some(mut failure) = log.failure().cloned() {
            failure.at.line = Some(self.line);
            self.failure = Some(failure);
        }
        ok
    }

    /// The verdict. A bundle without its end line is truncated:
    /// `missing-record` at the line after the last.
    pub fn finish(mut self) -> BundleVerdict {
        if self.failure.is_none() && self.stage != Stage::Ended {
            self.line += 1;
            let detail = "the bundle ends without its end line: truncated".to_owned();
            self.fail(Location::default(), Reason::MissingRecord, detail);
        }
        let inner = self.log.map(LogVerifier::finish);
        let verdict = match (self.failure, inner) {
            (Some(failure), inner) => Verdict {
                verified: false,
                records_checked: inner.as_ref().map_or(0, |v| v.records_checked),
                last_valid: inner.and_then(|v| v.last_valid),
                failure: Some(failure),
            },
            (None, Some(inner)) => inner,
            (None, None) => Verdict {
                verified: false,
                records_checked: 0,
                last_valid: None,
                failure: None,
            },
        };
        BundleVerdict {
            verdict,
            server_key: self.keys.first().map(ToString::to_string),
            key_pinned: !self.pinned.is_empty(),
            checkpoint: self
                .checkpoint
                .as_ref()
                .map(|c| (c.checkpoint().size, c.checkpoint().root)),
            header: self.header,
            selection: self.selection,
            trusted_sizes: self.trusted.iter().map(|t| t.checkpoint().size).collect(),
        }
    }
}
