//! A typed, single-pass decoder for the commonest bundle line: a step
//! entry as an exporter writes it. It reads the line straight into a
//! [`StepRecord`] (no `serde_json::Value` tree, no member lookups by name),
//! which is most of the cost of verifying a bundle.
//!
//! It is an accelerator, never a judge: it answers only when the line is
//! plainly well formed, and then with exactly what the general decoder
//! ([`super::decode_entry_value`]) gives. Anything else (an operation
//! entry, an escaped member name, a `null` where a value is expected, a
//! duplicate or unknown member, a field both revealed and hidden, any
//! value the general decoder would refuse) makes it answer `None`, and the
//! line goes through the general decoder, which says what is wrong in its
//! own words. A property test (`tests::fast_agrees_with_general`) holds
//! the two to the same answer over mutated lines.

use super::ProvenEntry;
use crate::commit::{AgentSignature, FIELD_COUNT, Field, Opening, Openings, StepRecord};
use crate::hash::Hash;
use crate::kind::StepKind;
use crate::log::{LogEntry, LogRecord};
use crate::record::{Links, Status, Step};
use crate::time::Timestamp;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::Value;
use std::fmt;

/// Decodes a step entry line, or `None` if the line is anything but a
/// plainly well-formed step entry (the general decoder then decides).
pub(super) fn decode_step_line(line: &[u8]) -> Option<ProvenEntry> {
    // The general reading first scans the text for integer literals
    // beyond what a double holds exactly; this one gives up at any number
    // that might be one ([`Plain`], [`crate::json::StrictSeed::PLAIN`]) instead.
    // One check of the whole line is cheaper than one per string.
    let text = std::str::from_utf8(line).ok()?;
    let mut de = serde_json::Deserializer::from_str(text);
    let entry = de.deserialize_map(LineVisitor).ok()?;
    de.end().ok()?;
    Some(entry)
}

/// For fuzzing (`fuzz/fuzz_targets/bundle_lines.rs`): panics if the typed
/// decoder answers `line` and the general decoder reads it otherwise
/// (compared to the bit: `Debug` text as well as equality, since
/// `-0.0 == 0.0`). Not part of the API.
#[doc(hidden)]
pub fn assert_fast_agrees(line: &[u8]) {
    let Some(fast) = decode_step_line(line) else {
        return;
    };
    let general = crate::json::from_slice(line)
        .ok()
        .and_then(|value| super::decode_entry_value(&value).ok());
    assert_eq!(
        general.as_ref(),
        Some(&fast),
        "the typed decoder read a line the general one reads otherwise"
    );
    assert_eq!(format!("{general:?}"), format!("{:?}", Some(&fast)));
}

/// The error this decoder raises: its text is never shown (the general
/// decoder re-reads the line and explains).
fn give_up<E: de::Error>() -> E {
    E::custom("not a plain step line")
}

/// Fills an empty slot; a member given twice is not plain.
fn set_once<T, E: de::Error>(slot: &mut Option<T>, value: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(give_up());
    }
    *slot = Some(value);
    Ok(())
}

fn hash_of<E: de::Error>(text: &str) -> Result<Hash, E> {
    Hash::from_hex(text).map_err(|_| give_up())
}

/// A number as the general reading takes it, read only if it plainly is
/// not an integer literal beyond ±(2^53 − 1) (which the general reading
/// refuses): an integer within that range, or a float of smaller
/// magnitude (an integer literal too long for 64 bits reaches a visitor
/// as a float, so any float as large is given up on).
struct Plain<T>(T);

fn plain<T>(value: Option<Plain<T>>) -> Option<T> {
    value.map(|Plain(v)| v)
}

impl<'de> de::Deserialize<'de> for Plain<u64> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let v = u64::deserialize(deserializer)?;
        if v > crate::record::MAX_SAFE_INTEGER {
            return Err(give_up());
        }
        Ok(Plain(v))
    }
}

impl<'de> de::Deserialize<'de> for Plain<f64> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(PlainF64)
    }
}

/// Reads a number into an `f64` as `f64`'s own `Deserialize` does (an
/// integer converted with `as`), giving up where [`Plain`] says.
struct PlainF64;

impl<'de> Visitor<'de> for PlainF64 {
    type Value = Plain<f64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Plain<f64>, E> {
        if v > crate::record::MAX_SAFE_INTEGER {
            return Err(give_up());
        }
        Ok(Plain(v as f64))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Plain<f64>, E> {
        if v.unsigned_abs() > crate::record::MAX_SAFE_INTEGER {
            return Err(give_up());
        }
        Ok(Plain(v as f64))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Plain<f64>, E> {
        if !crate::json::plainly_safe_f64(v) {
            return Err(give_up());
        }
        Ok(Plain(v))
    }
}

struct LineVisitor;

impl<'de> Visitor<'de> for LineVisitor {
    type Value = ProvenEntry;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a step entry")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ProvenEntry, A::Error> {
        let mut seq = None;
        let mut step_type = None;
        let mut logged_at = None;
        let mut fields: Option<RawFields> = None;
        let mut salts = None;
        let mut hidden = None;
        let mut digest = None;
        let mut prev_hash = None;
        let mut hash = None;
        let mut signature = None;
        let mut has_embedding = None;
        let mut erased = None;
        let mut proof = None;
        // A key with an escape is not borrowable: not plain, given up.
        while let Some(key) = map.next_key::<&'de str>()? {
            match key {
                "seq" => set_once(&mut seq, map.next_value::<Plain<u64>>()?.0)?,
                "type" => {
                    if map.next_value::<&'de str>()? != "step" {
                        return Err(give_up());
                    }
                    set_once(&mut step_type, ())?;
                }
                "logged_at" => {
                    let text = map.next_value::<&'de str>()?;
                    let at = Timestamp::parse_canonical(text).map_err(|_| give_up())?;
                    set_once(&mut logged_at, at)?;
                }
                "fields" => set_once(&mut fields, map.next_value_seed(FieldsSeed)?)?,
                "salts" => set_once(&mut salts, map.next_value_seed(PerFieldSeed(salt_of))?)?,
                "hidden" => set_once(
                    &mut hidden,
                    map.next_value_seed(PerFieldSeed(|text: &str| Hash::from_hex(text).ok()))?,
                )?,
                "digest" => set_once(&mut digest, hash_of(map.next_value::<&'de str>()?)?)?,
                "prev_hash" => {
                    set_once(&mut prev_hash, hash_of(map.next_value::<&'de str>()?)?)?;
                }
                "hash" => set_once(&mut hash, hash_of(map.next_value::<&'de str>()?)?)?,
                "signature" => set_once(&mut signature, map.next_value_seed(SignatureSeed)?)?,
                "has_embedding" => set_once(&mut has_embedding, map.next_value::<bool>()?)?,
                "erased" => set_once(&mut erased, map.next_value::<bool>()?)?,
                "proof" => {
                    let texts = map.next_value::<Vec<&'de str>>()?;
                    if texts.len() > super::MAX_PROOF_HASHES {
                        return Err(give_up());
                    }
                    let hashes = texts
                        .into_iter()
                        .map(hash_of)
                        .collect::<Result<Vec<Hash>, A::Error>>()?;
                    set_once(&mut proof, hashes)?;
                }
                _ => return Err(give_up()),
            }
        }
        let (
            Some(seq),
            Some(()),
            Some(logged_at),
            Some(fields),
            Some(salts),
            Some(hidden),
            Some(digest),
            Some(prev_hash),
            Some(hash),
            Some(signature),
            Some(has_embedding),
            Some(erased),
        ) = (
            seq,
            step_type,
            logged_at,
            fields,
            salts,
            hidden,
            digest,
            prev_hash,
            hash,
            signature,
            has_embedding,
            erased,
        )
        else {
            return Err(give_up());
        };
        let openings = openings(&fields.present, &salts, &hidden).ok_or_else(give_up)?;
        let step = fields.into_step().ok_or_else(give_up)?;
        let record = StepRecord {
            step,
            openings,
            digest,
            prev_hash,
            hash,
            signature,
            has_embedding,
            erased,
        };
        let entry = LogEntry {
            seq,
            logged_at,
            record: LogRecord::Step(record),
        };
        Ok((entry, proof))
    }
}

/// Each field revealed with a salt and present in `fields`, or hidden
/// with a commitment and absent from it; anything else is not plain.
fn openings(
    present: &[bool; FIELD_COUNT],
    salts: &[Option<[u8; 16]>; FIELD_COUNT],
    hidden: &[Option<Hash>; FIELD_COUNT],
) -> Option<Openings> {
    let mut openings = [Opening::Hidden(Hash::ZERO); FIELD_COUNT];
    for (i, opening) in openings.iter_mut().enumerate() {
        *opening = match (salts[i], hidden[i], present[i]) {
            (Some(salt), None, true) => Opening::Revealed(salt),
            (None, Some(commitment), false) => Opening::Hidden(commitment),
            _ => return None,
        };
    }
    Some(Openings(openings))
}

fn salt_of(text: &str) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    crate::hash::decode_lower_hex(text, &mut out).then_some(out)
}

/// `salts` or `hidden`: an object from field names to hex strings, each
/// decoded by the function it holds.
struct PerFieldSeed<F>(F);

impl<'de, T, F> DeserializeSeed<'de> for PerFieldSeed<F>
where
    T: Copy,
    F: Fn(&str) -> Option<T>,
{
    type Value = [Option<T>; FIELD_COUNT];

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, T, F> Visitor<'de> for PerFieldSeed<F>
where
    T: Copy,
    F: Fn(&str) -> Option<T>,
{
    type Value = [Option<T>; FIELD_COUNT];

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of field names to hex strings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = [None; FIELD_COUNT];
        while let Some(key) = map.next_key::<&'de str>()? {
            let field = Field::from_name(key).ok_or_else(give_up)?;
            let value = (self.0)(map.next_value::<&'de str>()?).ok_or_else(give_up)?;
            set_once(&mut out[field.position()], value)?;
        }
        Ok(out)
    }
}

/// The top-level `signature`: `null`, or exactly `{"key_id", "signature"}`
/// with a 64-byte base64 signature.
struct SignatureSeed;

impl<'de> DeserializeSeed<'de> for SignatureSeed {
    type Value = Option<AgentSignature>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for SignatureSeed {
    type Value = Option<AgentSignature>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("null or a signature object")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(SignatureMembers).map(Some)
    }
}

struct SignatureMembers;

impl<'de> Visitor<'de> for SignatureMembers {
    type Value = AgentSignature;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a signature object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AgentSignature, A::Error> {
        let mut key_id = None;
        let mut signature = None;
        while let Some(key) = map.next_key::<&'de str>()? {
            match key {
                "key_id" => set_once(&mut key_id, map.next_value::<String>()?)?,
                "signature" => {
                    let bytes = B64
                        .decode(map.next_value::<&'de str>()?)
                        .map_err(|_| give_up())?;
                    let bytes: [u8; 64] = bytes.try_into().map_err(|_| give_up())?;
                    set_once(&mut signature, bytes)?;
                }
                _ => return Err(give_up()),
            }
        }
        match (key_id, signature) {
            (Some(key_id), Some(signature)) => Ok(AgentSignature { key_id, signature }),
            _ => Err(give_up()),
        }
    }
}

/// The revealed fields as read. A missing text field reads as the empty
/// string and a missing optional one as absent, as in the general
/// decoder (a hidden field's value is blank); `null` counts as absent
/// where the general decoder allows it and is not plain where it does not.
#[derive(Default)]
struct RawFields {
    present: [bool; FIELD_COUNT],
    trace_id: Option<String>,
    org_id: Option<String>,
    agent_id: Option<String>,
    session_id: Option<String>,
    step_index: Option<u64>,
    step_type: Option<String>,
    step_type_original: Option<String>,
    content: Option<String>,
    input: Option<Value>,
    output: Option<Value>,
    confidence: Option<f64>,
    duration_ms: Option<u64>,
    token_count: Option<u64>,
    model: Option<String>,
    metadata: Option<Value>,
    created_at: Option<String>,
    turn_id: Option<String>,
    turn_step: Option<u64>,
    task_id: Option<String>,
    links: Option<Links>,
    status: Option<String>,
    signer_key_id: Option<String>,
}

impl RawFields {
    /// The step, with the general decoder's rules for kinds, timestamps
    /// and status; `None` where it would refuse.
    fn into_step(self) -> Option<Step> {
        let step_type = self.step_type.unwrap_or_default();
        let kind = StepKind::parse(&step_type).filter(|k| k.as_str() == step_type)?;
        let created_at = Timestamp::parse_canonical(&self.created_at.unwrap_or_default()).ok()?;
        let status = Status::parse(&self.status?)?;
        Some(Step {
            trace_id: self.trace_id.unwrap_or_default(),
            org_id: self.org_id.unwrap_or_default(),
            agent_id: self.agent_id.unwrap_or_default(),
            session_id: self.session_id.unwrap_or_default(),
            step_index: self.step_index?,
            kind,
            kind_label: self.step_type_original.unwrap_or_default(),
            content: self.content,
            input: self.input,
            output: self.output,
            confidence: self.confidence,
            duration_ms: self.duration_ms,
            token_count: self.token_count,
            model: self.model,
            metadata: self.metadata,
            created_at,
            turn_id: self.turn_id,
            turn_step: self.turn_step,
            task_id: self.task_id,
            links: self.links.unwrap_or_default(),
            status,
            signer_key_id: self.signer_key_id,
        })
    }
}

struct FieldsSeed;

impl<'de> DeserializeSeed<'de> for FieldsSeed {
    type Value = RawFields;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawFields, D::Error> {
        deserializer.deserialize_map(self)
    }
}

/// A JSON value read as the general decoder reads it (duplicate members
/// refused at any depth), `null` as absent.
fn json_value<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<Value>, A::Error> {
    let value = map.next_value_seed(crate::json::StrictSeed::PLAIN)?;
    Ok((!value.is_null()).then_some(value))
}

impl<'de> Visitor<'de> for FieldsSeed {
    type Value = RawFields;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of step fields")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawFields, A::Error> {
        let mut raw = RawFields::default();
        while let Some(key) = map.next_key::<&'de str>()? {
            let field = Field::from_name(key).ok_or_else(give_up)?;
            let seen = &mut raw.present[field.position()];
            if *seen {
                return Err(give_up());
            }
            *seen = true;
            // Required text (`null` is refused), optional text and
            // numbers (`null` is absent), JSON values, links, status.
            match field {
                Field::TraceId => raw.trace_id = Some(map.next_value()?),
                Field::OrgId => raw.org_id = Some(map.next_value()?),
                Field::AgentId => raw.agent_id = Some(map.next_value()?),
                Field::SessionId => raw.session_id = Some(map.next_value()?),
                Field::StepIndex => raw.step_index = Some(map.next_value::<Plain<u64>>()?.0),
                Field::StepType => raw.step_type = Some(map.next_value()?),
                Field::StepTypeOriginal => raw.step_type_original = Some(map.next_value()?),
                Field::Content => raw.content = map.next_value()?,
                Field::InputData => raw.input = json_value(&mut map)?,
                Field::OutputData => raw.output = json_value(&mut map)?,
                Field::Confidence => raw.confidence = plain(map.next_value()?),
                Field::DurationMs => raw.duration_ms = plain(map.next_value()?),
                Field::TokenCount => raw.token_count = plain(map.next_value()?),
                Field::Model => raw.model = map.next_value()?,
                Field::Metadata => raw.metadata = json_value(&mut map)?,
                Field::CreatedAt => raw.created_at = Some(map.next_value()?),
                Field::TurnId => raw.turn_id = map.next_value()?,
                Field::TurnStep => raw.turn_step = plain(map.next_value()?),
                Field::TaskId => raw.task_id = map.next_value()?,
                Field::Links => {
                    let value = map.next_value_seed(crate::json::StrictSeed::PLAIN)?;
                    raw.links = Some(Links::from_json(&value).map_err(|_| give_up())?);
                }
                Field::Status => raw.status = Some(map.next_value()?),
                Field::SignerKeyId => raw.signer_key_id = map.next_value()?,
            }
        }
        Ok(raw)
    }
}

#[cfg(test)]
#[path = "fast_tests.rs"]
mod tests;
