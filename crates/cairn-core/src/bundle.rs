//! Export bundles: a self-contained, streamable file (JSON Lines) holding
//! log entries, the checkpoint they are proven against, the proofs and the
//! server's public key, verifiable offline.
//!
//! ```text
//! line 1      {"cairn_bundle":1, "server_name", "org_id", "origin", "server_key", "scope", "complete_log", "exported_at"}
//! line 2      {"checkpoint": "<signed note>"}
//! lines 3..   one log entry per line, in increasing seq, each with "proof" unless complete_log
//! last line   {"end": {"entries": N}}
//! ```
//!
//! A bundle of the whole log (`complete_log: true`) carries every entry from
//! seq 0 to the checkpoint's size and no proofs: the verifier rebuilds the
//! tree. A partial bundle (a session, an agent, a time range) carries whole
//! sessions, from their `session-start` record, plus the key registrations
//! their signatures need, each entry with its inclusion proof.
//! `docs/FORMAT.md` section 10 specifies every member.

use crate::checkpoint::verify_checkpoint;
use crate::commit::{
    AgentSignature, FIELDS, Field, Opening, Openings, StepRecord, write_field_value,
};
use crate::hash::Hash;
use crate::kind::StepKind;
use crate::log::{LogEntry, LogRecord, OpRecord};
use crate::note::NoteVerifier;
use crate::record::{Links, Status, Step};
use crate::time::Timestamp;
use crate::verify::{Failure, Location, LogVerifier, Reason, Verdict};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Map, Value, json};

/// Format version written in the header's `cairn_bundle` member.
pub const BUNDLE_VERSION: u64 = 1;

/// The first line of a bundle.
#[derive(Debug, Clone, PartialEq)]
pub struct BundleHeader {
    /// The server key's name (the log origin is `<server_name>/<org_id>`).
    pub server_name: String,
    /// The org whose log the entries come from.
    pub org_id: String,
    /// The server's public key in vkey form.
    pub server_key: String,
    /// What was exported (free-form, e.g. `{"session": "s1"}`).
    pub scope: Value,
    /// Whether the bundle holds the whole log up to the checkpoint.
    pub complete_log: bool,
    /// When the export was made.
    pub exported_at: Timestamp,
}

impl BundleHeader {
    /// The header line (without newline).
    pub fn to_line(&self) -> String {
        json!({
            "cairn_bundle": BUNDLE_VERSION,
            "server_name": self.server_name,
            "org_id": self.org_id,
            "origin": crate::log::log_origin(&self.server_name, &self.org_id),
            "server_key": self.server_key,
            "scope": self.scope,
            "complete_log": self.complete_log,
            "exported_at": self.exported_at.to_string(),
        })
        .to_string()
    }

    /// Parses a header line.
    pub fn parse(line: &str) -> Result<BundleHeader, String> {
        let v: Value =
            serde_json::from_str(line).map_err(|e| format!("header is not JSON: {e}"))?;
        if v["cairn_bundle"].as_u64() != Some(BUNDLE_VERSION) {
            return Err("not a cairn bundle of version 1".into());
        }
        let s = |k: &str| {
            v[k].as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("header lacks {k}"))
        };
        Ok(BundleHeader {
            server_name: s("server_name")?,
            org_id: s("org_id")?,
            server_key: s("server_key")?,
            scope: v["scope"].clone(),
            complete_log: v["complete_log"]
                .as_bool()
                .ok_or("header lacks complete_log")?,
            exported_at: Timestamp::parse_canonical(&s("exported_at")?)
                .map_err(|e| e.to_string())?,
        })
    }
}

/// The checkpoint line.
pub fn checkpoint_line(note: &str) -> String {
    json!({ "checkpoint": note }).to_string()
}

/// The closing line.
pub fn end_line(entries: u64) -> String {
    json!({ "end": { "entries": entries } }).to_string()
}

fn hex16(bytes: &[u8; 16]) -> String {
    hex::encode(bytes)
}

/// Encodes one entry as a bundle line (without newline), with its
/// inclusion proof for partial bundles.
pub fn encode_entry(entry: &LogEntry, proof: Option<&[Hash]>) -> String {
    let mut line = match &entry.record {
        LogRecord::Op { record, hash } => json!({
            "seq": entry.seq,
            "type": record.entry_type(),
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
                        salts.insert(field.name().into(), Value::String(hex16(salt)));
                    }
                    Opening::Hidden(commitment) => {
                        hidden.insert(field.name().into(), Value::String(commitment.to_hex()));
                    }
                }
            }
            json!({
                "seq": entry.seq,
                "type": "step",
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

/// Decodes an entry line into the entry and its proof (if any).
pub fn decode_entry(line: &str) -> Result<(LogEntry, Option<Vec<Hash>>), String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    decode_entry_value(&v)
}

fn hash_member(v: &Value, key: &str) -> Result<Hash, String> {
    v[key]
        .as_str()
        .and_then(|s| Hash::from_hex(s).ok())
        .ok_or_else(|| format!("{key} is not a hex hash"))
}

fn decode_entry_value(v: &Value) -> Result<(LogEntry, Option<Vec<Hash>>), String> {
    let seq = v["seq"].as_u64().ok_or("seq missing")?;
    let entry_type = v["type"].as_str().ok_or("type missing")?;
    let proof = match v.get("proof") {
        None => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|h| h.as_str().and_then(|s| Hash::from_hex(s).ok()))
                .collect::<Option<Vec<Hash>>>()
                .ok_or("proof holds a non-hash")?,
        ),
        Some(_) => return Err("proof is not an array".into()),
    };
    let record = if entry_type == "step" {
        LogRecord::Step(decode_step(v)?)
    } else {
        let record = OpRecord::from_view(entry_type, &v["view"]).map_err(|e| e.to_string())?;
        LogRecord::Op {
            record,
            hash: hash_member(v, "hash")?,
        }
    };
    Ok((LogEntry { seq, record }, proof))
}

fn decode_step(v: &Value) -> Result<StepRecord, String> {
    let fields = v["fields"].as_object().ok_or("fields missing")?;
    let salts = v["salts"].as_object().ok_or("salts missing")?;
    let hidden = v["hidden"].as_object().ok_or("hidden missing")?;
    let opening = |field: Field| -> Result<Opening, String> {
        let name = field.name();
        match (salts.get(name), hidden.get(name)) {
            (Some(salt), None) if fields.contains_key(name) => {
                let mut out = [0u8; 16];
                hex::decode_to_slice(salt.as_str().unwrap_or_default(), &mut out)
                    .map_err(|_| format!("salt of {name} is not 16 hex bytes"))?;
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
                    .ok_or_else(|| format!("{name} is not an integer"))
            })
            .transpose()
    };
    let step_type = string("step_type")?;
    let kind = StepKind::parse(&step_type)
        .filter(|k| k.as_str() == step_type)
        .ok_or_else(|| format!("step_type {step_type:?} is not a canonical kind"))?;
    let created_at =
        Timestamp::parse_canonical(&string("created_at")?).map_err(|e| e.to_string())?;
    let links = match get("links") {
        None => Links::default(),
        Some(v) => Links::from_json(v)?,
    };
    let status = match fields.get("status").and_then(Value::as_str) {
        Some(s) => Status::parse(s).ok_or("status is not ok or flagged")?,
        None => return Err("status missing".into()),
    };
    let step = Step {
        trace_id: string("trace_id")?,
        org_id: string("org_id")?,
        agent_id: string("agent_id")?,
        session_id: string("session_id")?,
        step_index: fields
            .get("step_index")
            .and_then(Value::as_u64)
            .ok_or("step_index missing")?,
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
        sig => {
            let bytes = sig["signature"]
                .as_str()
                .and_then(|s| B64.decode(s).ok())
                .ok_or("signature is not base64")?;
            Some(AgentSignature {
                key_id: sig["key_id"]
                    .as_str()
                    .ok_or("signature lacks key_id")?
                    .to_owned(),
                signature: bytes.try_into().map_err(|_| "signature is not 64 bytes")?,
            })
        }
    };
    Ok(StepRecord {
        step,
        openings: Openings(openings),
        digest: hash_member(v, "digest")?,
        prev_hash: hash_member(v, "prev_hash")?,
        hash: hash_member(v, "hash")?,
        signature,
        has_embedding: v["has_embedding"].as_bool().unwrap_or(false),
        erased: v["erased"].as_bool().unwrap_or(false),
    })
}

/// A line as read, without its line ending (`\n` or `\r\n`), the way
/// [`str::lines`] would give it.
pub fn trim_line_end(line: &[u8]) -> &[u8] {
    match line.strip_suffix(b"\n") {
        Some(line) => line.strip_suffix(b"\r").unwrap_or(line),
        None => line,
    }
}

/// The lines of a bundle held in memory, split as [`str::lines`] splits
/// text, for [`BundleVerifier::push_bytes`].
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
}

/// Verifies a bundle fed line by line, in constant memory in the number of
/// entries (plus one chain state per open session).
pub struct BundleVerifier {
    pinned: Vec<NoteVerifier>,
    header: Option<BundleHeader>,
    log: Option<LogVerifier>,
    used_key: Option<String>,
    checkpoint: Option<(u64, Hash)>,
    line: u64,
    entries: u64,
    ended: bool,
    failure: Option<Failure>,
}

impl BundleVerifier {
    /// A verifier that trusts only `pinned` server keys, or, if `pinned` is
    /// empty, the key the bundle names (the caller should then compare its
    /// fingerprint with the operator's published key).
    pub fn new(pinned: Vec<NoteVerifier>) -> BundleVerifier {
        BundleVerifier {
            pinned,
            header: None,
            log: None,
            used_key: None,
            checkpoint: None,
            line: 0,
            entries: 0,
            ended: false,
            failure: None,
        }
    }

    fn fail(&mut self, at: Location, reason: Reason, detail: String) -> bool {
        let mut at = at;
        at.line = Some(self.line);
        self.failure = Some(Failure { at, reason, detail });
        false
    }

    /// Feeds the next line as read: a line that is not UTF-8 is a changed
    /// byte and fails verification at that line. (Decoding it lossily
    /// instead could turn a changed byte back into the text it replaced.)
    /// Returns false once verification has failed.
    pub fn push_bytes(&mut self, line: &[u8]) -> bool {
        match std::str::from_utf8(line) {
            Ok(text) => self.push_line(text),
            Err(e) => {
                if self.failure.is_some() {
                    return false;
                }
                self.line += 1;
                let detail = format!("line {} is not UTF-8 text: {e}", self.line);
                self.fail(Location::default(), Reason::MalformedRecord, detail)
            }
        }
    }

    /// Feeds the next line. Returns false once verification has failed.
    pub fn push_line(&mut self, line: &str) -> bool {
        if self.failure.is_some() {
            return false;
        }
        self.line += 1;
        if self.ended {
            let detail = "content after the end line".to_owned();
            return self.fail(Location::default(), Reason::MalformedRecord, detail);
        }
        let Some(header) = &self.header else {
            return match BundleHeader::parse(line) {
                Ok(header) => {
                    self.header = Some(header);
                    true
                }
                Err(e) => self.fail(Location::default(), Reason::MalformedRecord, e),
            };
        };
        if self.log.is_none() {
            let header = header.clone();
            return self.open_checkpoint(&header, line);
        }
        let complete = header.complete_log;
        let value: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                let detail = format!("line {} is not JSON: {e}", self.line);
                return self.fail(Location::default(), Reason::MalformedRecord, detail);
            }
        };
        if let Some(end) = value.get("end") {
            self.ended = true;
            let stated = end["entries"].as_u64();
            if stated != Some(self.entries) {
                let detail = format!(
                    "the bundle says {stated:?} entries, {} were read",
                    self.entries
                );
                return self.fail(Location::default(), Reason::MissingRecord, detail);
            }
            return true;
        }
        self.entries += 1;
        let (entry, proof) = match decode_entry_value(&value) {
            Ok(decoded) => decoded,
            Err(e) => {
                let at = Location {
                    seq: value["seq"].as_u64(),
                    ..Location::default()
                };
                return self.fail(at, Reason::MalformedRecord, e);
            }
        };
        let Some(log) = self.log.as_mut() else {
            return false;
        };
        let ok = match (proof, complete) {
            (None, true) => log.push(&entry),
            (Some(proof), false) => log.push_proven(&entry, &proof),
            (Some(_), true) => {
                let detail = "a complete-log bundle carries no proofs".to_owned();
                let at = Location {
                    seq: Some(entry.seq),
                    ..Location::default()
                };
                return self.fail(at, Reason::MalformedRecord, detail);
            }
            (None, false) => {
                let detail = format!("seq {} has no inclusion proof", entry.seq);
                let at = Location {
                    seq: Some(entry.seq),
                    ..Location::default()
                };
                return self.fail(at, Reason::InclusionMismatch, detail);
            }
        };
        if !ok && let Some(mut failure) = log.failure().cloned() {
            failure.at.line = Some(self.line);
            self.failure = Some(failure);
        }
        ok
    }

    fn open_checkpoint(&mut self, header: &BundleHeader, line: &str) -> bool {
        let note = serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|v| v["checkpoint"].as_str().map(str::to_owned));
        let Some(note) = note else {
            let detail = "line 2 must hold the checkpoint".to_owned();
            return self.fail(Location::default(), Reason::MalformedRecord, detail);
        };
        let keys = if self.pinned.is_empty() {
            match NoteVerifier::parse(&header.server_key) {
                Ok(key) => vec![key],
                Err(e) => {
                    let detail = format!("server key in the header: {e}");
                    return self.fail(Location::default(), Reason::MalformedRecord, detail);
                }
            }
        } else {
            self.pinned.clone()
        };
        let origin = crate::log::log_origin(&header.server_name, &header.org_id);
        let checkpoint = match verify_checkpoint(&note, &origin, &keys) {
            Ok(cp) => cp,
            Err(e) => {
                let detail = format!("checkpoint: {e}");
                return self.fail(Location::default(), Reason::BadSignature, detail);
            }
        };
        self.used_key = keys.first().map(ToString::to_string);
        let cp = checkpoint.checkpoint();
        self.checkpoint = Some((cp.size, cp.root));
        let verifier = if header.complete_log {
            let mut v = LogVerifier::new(&header.server_name, &header.org_id, keys);
            v.expect_checkpoint(&checkpoint);
            v
        } else {
            LogVerifier::sparse(&header.server_name, &header.org_id, keys, &checkpoint)
        };
        self.log = Some(verifier);
        true
    }

    /// The verdict. A bundle without its end line is truncated:
    /// `missing-record`.
    pub fn finish(mut self) -> BundleVerdict {
        if self.failure.is_none() && !self.ended {
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
            server_key: self.used_key,
            key_pinned: !self.pinned.is_empty(),
            checkpoint: self.checkpoint,
            header: self.header,
        }
    }
}
