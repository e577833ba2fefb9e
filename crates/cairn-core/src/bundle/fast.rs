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
    // The same rule the general reading applies before parsing: no
    // integer literal beyond what a double holds exactly.
    crate::json::check_integer_literals(line, crate::json::Integers::DoubleSafe).ok()?;
    let mut de = serde_json::Deserializer::from_slice(line);
    let entry = de.deserialize_map(LineVisitor).ok()?;
    de.end().ok()?;
    Some(entry)
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
                "seq" => set_once(&mut seq, map.next_value::<u64>()?)?,
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
    let value = map.next_value_seed(crate::json::StrictSeed)?;
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
                Field::StepIndex => raw.step_index = Some(map.next_value()?),
                Field::StepType => raw.step_type = Some(map.next_value()?),
                Field::StepTypeOriginal => raw.step_type_original = Some(map.next_value()?),
                Field::Content => raw.content = map.next_value()?,
                Field::InputData => raw.input = json_value(&mut map)?,
                Field::OutputData => raw.output = json_value(&mut map)?,
                Field::Confidence => raw.confidence = map.next_value()?,
                Field::DurationMs => raw.duration_ms = map.next_value()?,
                Field::TokenCount => raw.token_count = map.next_value()?,
                Field::Model => raw.model = map.next_value()?,
                Field::Metadata => raw.metadata = json_value(&mut map)?,
                Field::CreatedAt => raw.created_at = Some(map.next_value()?),
                Field::TurnId => raw.turn_id = map.next_value()?,
                Field::TurnStep => raw.turn_step = map.next_value()?,
                Field::TaskId => raw.task_id = map.next_value()?,
                Field::Links => {
                    let value = map.next_value_seed(crate::json::StrictSeed)?;
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
mod tests {
    use super::*;
    use crate::bundle::{decode_entry_value, encode_entry};
    use crate::commit::FIELDS;
    use proptest::prelude::*;
    use serde_json::json;

    /// A step entry line: `hide` selects fields to hide (bit i hides the
    /// i-th hideable field), `signed` adds a signature, `proof` a proof.
    fn entry_line(hide: u32, signed: bool, proof: bool, content: &str) -> String {
        let at = Timestamp::from_micros(1_736_937_000_000_000).unwrap();
        let mut step = Step::new("trace-1", "acme", "analyst", "s1", 3, "ToolCall", at).unwrap();
        step.content = Some(content.into());
        step.input = Some(json!({"sql": "SELECT 1", "n": [1, 2.5, null, true]}));
        step.output = Some(json!("rows"));
        step.confidence = Some(0.75);
        step.duration_ms = Some(12);
        step.token_count = Some(0);
        step.model = Some("gpt-4o".into());
        step.metadata = Some(json!({"k": {"nested": "é\u{1F600}"}}));
        step.turn_id = Some("turn-1".into());
        step.turn_step = Some(2);
        step.task_id = Some("task-1".into());
        step.links.tool_call = Some("tc-1".into());
        step.status = Status::Flagged;
        if signed {
            step.signer_key_id = Some("agent-0123456789ab".into());
        }
        let mut record = StepRecord::new(step, &[7; 32], Hash::sha256(b"prev"));
        if signed {
            record.signature = Some(AgentSignature {
                key_id: "agent-0123456789ab".into(),
                signature: [9; 64],
            });
        }
        let hideable = FIELDS.into_iter().filter(|f| !f.always_disclosed());
        for (bit, field) in hideable.enumerate() {
            if hide & (1 << bit) != 0 {
                record.hide(field).unwrap();
            }
        }
        let entry = LogEntry {
            seq: 41,
            logged_at: at,
            record: LogRecord::Step(record),
        };
        let hashes = [Hash::sha256(b"a"), Hash::sha256(b"b")];
        encode_entry(&entry, proof.then_some(&hashes[..]))
    }

    fn general(line: &[u8]) -> Option<ProvenEntry> {
        let value = crate::json::from_slice(line).ok()?;
        decode_entry_value(&value).ok()
    }

    /// What a mutation does to one member of an object of the line.
    #[derive(Debug, Clone)]
    enum Edit {
        Remove,
        Replace(Value),
        /// The member once more, first in its object.
        Duplicate,
        /// The member's name spelled with an escape.
        EscapeName,
        /// An unknown member beside it.
        AddUnknown,
    }

    fn edit() -> impl Strategy<Value = Edit> {
        prop_oneof![
            Just(Edit::Remove),
            Just(Edit::Duplicate),
            Just(Edit::EscapeName),
            Just(Edit::AddUnknown),
            prop::sample::select(vec![
                Value::Null,
                json!(true),
                json!(0),
                json!(-1),
                json!(1.5),
                json!(9007199254740991u64),
                json!(""),
                json!("step"),
                json!("ok"),
                json!("x"),
                json!("00000000000000000000000000000000"),
                json!([]),
                json!(["aa"]),
                json!({}),
                json!({"tool_call": "x"}),
                json!({"key_id": "k", "signature": "AA=="}),
            ])
            .prop_map(Edit::Replace),
        ]
    }

    /// Applies `edit` to the `pick`-th member of the object at `scope`
    /// (the line, or one of its nested objects), as text.
    fn mutate(line: &str, scope: usize, pick: usize, edit: &Edit) -> String {
        let mut value: Value = serde_json::from_str(line).unwrap();
        let scopes = ["", "fields", "salts", "hidden", "signature"];
        let scope = scopes[scope % scopes.len()];
        let object = if scope.is_empty() {
            value.as_object_mut()
        } else {
            value.get_mut(scope).and_then(Value::as_object_mut)
        };
        let Some(object) = object else {
            return line.to_owned();
        };
        let Some(name) = object.keys().nth(pick % object.len().max(1)).cloned() else {
            return line.to_owned();
        };
        let member = object[&name].clone();
        let mut prefix = String::new();
        match edit {
            Edit::Remove => {
                object.remove(&name);
            }
            Edit::Replace(v) => {
                object.insert(name, v.clone());
            }
            Edit::AddUnknown => {
                object.insert(format!("{name}_x"), member);
            }
            Edit::Duplicate => prefix = format!("{}:{member},", Value::String(name)),
            Edit::EscapeName => {
                object.remove(&name);
                let escaped = format!("\\u{:04x}{}", name.as_bytes()[0], &name[1..]);
                prefix = format!("\"{escaped}\":{member},");
            }
        }
        // The member was the object's only one: no comma after it (a
        // trailing comma made the line unreadable to the next edit).
        if object.is_empty() {
            prefix.pop();
        }
        let text = value.to_string();
        if prefix.is_empty() {
            return text;
        }
        // Insert the prefix right after the opening brace of the scope.
        let at = if scope.is_empty() {
            1
        } else {
            text.find(&format!("\"{scope}\":{{")).unwrap() + scope.len() + 4
        };
        format!("{}{prefix}{}", &text[..at], &text[at..])
    }

    /// The fast decoder's answer, checked against the general decoder:
    /// whenever it answers, it answers the same.
    fn check(line: &[u8]) -> Option<ProvenEntry> {
        let fast = decode_step_line(line);
        if let Some(fast) = &fast {
            assert_eq!(
                general(line).as_ref(),
                Some(fast),
                "the fast decoder accepted a line the general one reads otherwise: {}",
                String::from_utf8_lossy(line)
            );
        }
        fast
    }

    #[test]
    fn plain_lines_take_the_fast_path() {
        for (hide, signed, proof) in [
            (0, false, false),
            (0x3fff, true, true),
            (0b1010, true, false),
        ] {
            let line = entry_line(hide, signed, proof, "a \"quoted\"\nline \u{1}");
            assert!(check(line.as_bytes()).is_some(), "{line}");
        }
    }

    #[test]
    fn doubtful_lines_are_left_to_the_general_decoder() {
        let line = entry_line(0, true, false, "x");
        for doubtful in [
            line.replacen("\"seq\"", "\"s\\u0065q\"", 1),
            line.replacen("\"seq\":41", "\"seq\":41,\"seq\":41", 1),
            line.replacen("\"seq\":41", "\"seq\":9007199254740993", 1),
            line.replacen("\"content\":\"x\"", "\"content\":\"\u{FFFD}\"", 1) + " x",
            line.replacen("\"trace_id\":\"trace-1\"", "\"trace_id\":null", 1),
            line.replacen("\"type\":\"step\"", "\"type\":\"seal\"", 1),
            line.replacen("\"signature\":{", "\"signature\":[", 1),
        ] {
            assert!(check(doubtful.as_bytes()).is_none(), "{doubtful}");
        }
        let mut bytes = line.into_bytes();
        let at = bytes.iter().position(|&b| b == b'x').unwrap();
        bytes[at] = 0xff;
        assert!(check(&bytes).is_none(), "a line that is not UTF-8");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn fast_agrees_with_general(
            hide in 0u32..(1 << 13),
            signed in any::<bool>(),
            proof in any::<bool>(),
            content in "\\PC{0,12}",
            edits in prop::collection::vec((0usize..5, 0usize..32, edit()), 0..3),
        ) {
            let mut line = entry_line(hide, signed, proof, &content);
            for (scope, pick, edit) in &edits {
                line = mutate(&line, *scope, *pick, edit);
            }
            let fast = check(line.as_bytes());
            if edits.is_empty() {
                prop_assert!(fast.is_some(), "a plain line missed the fast path: {}", line);
            }
        }

        #[test]
        fn fast_agrees_with_general_on_changed_bytes(
            hide in 0u32..(1 << 13),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            insert in any::<bool>(),
        ) {
            let mut bytes = entry_line(hide, true, false, "text").into_bytes();
            let at = at.index(bytes.len());
            if insert {
                bytes.insert(at, byte);
            } else {
                bytes[at] = byte;
            }
            check(&bytes);
        }
    }

    /// The mutation harness itself: escaping the only member of an
    /// object once left a trailing comma, and the next edit could not
    /// read the line (a rare, seed-dependent failure of
    /// `fast_agrees_with_general`).
    #[test]
    fn mutating_an_only_member_keeps_the_line_json() {
        let line = entry_line(1, false, false, "");
        let once = mutate(&line, 3, 0, &Edit::EscapeName);
        assert!(serde_json::from_str::<Value>(&once).is_ok(), "{once}");
        check(mutate(&once, 0, 0, &Edit::Remove).as_bytes());
    }

    // ---- Probes: lines built to make the fast decoder disagree. ----
    //
    // Every probe is held to `agree` (when the fast decoder answers, the
    // general one answers the same, to the bit, and a line prepared
    // through the fast path is the line prepared through the general
    // one); most also state which decoder answers, which documents the
    // rule: the fast decoder takes a line only when it is sure.

    /// Stricter than `check`: equal also where `PartialEq` is lenient
    /// (`-0.0 == 0.0`), by their `Debug` text and their encodings, with
    /// the same step digest; and `PreparedLine::new` prepares the line
    /// exactly as the general path alone does (so the verifier, which
    /// sees only the prepared line, cannot tell the paths apart).
    fn agree(line: &[u8]) -> Option<ProvenEntry> {
        let fast = check(line);
        if let Some(fast) = &fast {
            let general = general(line).expect("checked above");
            assert_eq!(
                format!("{fast:?}"),
                format!("{general:?}"),
                "{}",
                String::from_utf8_lossy(line)
            );
            assert_eq!(
                encode_entry(&fast.0, fast.1.as_deref()),
                encode_entry(&general.0, general.1.as_deref())
            );
            if let (LogRecord::Step(a), LogRecord::Step(b)) = (&fast.0.record, &general.0.record) {
                assert_eq!(a.recompute_digest(), b.recompute_digest());
            }
        }
        let prepared = super::super::PreparedLine::new(line);
        let alone = super::super::PreparedLine::general(std::borrow::Cow::Borrowed(line));
        assert_eq!(
            format!("{prepared:?}"),
            format!("{alone:?}"),
            "prepared differently: {}",
            String::from_utf8_lossy(line)
        );
        fast
    }

    /// The fast decoder answers, and the general one the same.
    fn fast_takes(line: &[u8]) {
        assert!(
            agree(line).is_some(),
            "the fast decoder gave up on: {}",
            String::from_utf8_lossy(line)
        );
    }

    /// The fast decoder gives up (the general one decides).
    fn general_decides(line: &[u8]) {
        assert!(
            agree(line).is_none(),
            "the fast decoder answered: {}",
            String::from_utf8_lossy(line)
        );
    }

    /// The fast decoder gives up, and the general one refuses the line.
    fn refused(line: &[u8]) {
        general_decides(line);
        assert!(general(line).is_none(), "{}", String::from_utf8_lossy(line));
    }

    /// `line` with `from` replaced (once) by `to`; `from` must be there.
    fn sub(line: &str, from: &str, to: &str) -> String {
        assert!(line.contains(from), "{from} is not in {line}");
        line.replacen(from, to, 1)
    }

    /// A revealed line (signed, with a proof), and one with every
    /// hideable field hidden.
    fn revealed() -> String {
        entry_line(0, true, true, "x")
    }

    fn hidden() -> String {
        entry_line(0x3fff, true, false, "x")
    }

    /// The line with `field` moved from `fields` and `salts` to `hidden`
    /// (even a field a disclosure may not hide).
    fn hide_raw(line: &str, field: &str) -> String {
        let mut value: Value = serde_json::from_str(line).unwrap();
        value["fields"].as_object_mut().unwrap().remove(field);
        value["salts"].as_object_mut().unwrap().remove(field);
        value["hidden"]
            .as_object_mut()
            .unwrap()
            .insert(field.into(), json!(Hash::sha256(field.as_bytes()).to_hex()));
        value.to_string()
    }

    /// The line with the member `name` of the object at `scope` ("" for
    /// the line) written twice, first as `dup`.
    fn duplicated(line: &str, scope: &str, name: &str, dup: &str) -> String {
        let at = if scope.is_empty() {
            1
        } else {
            line.find(&format!("\"{scope}\":{{")).unwrap() + scope.len() + 4
        };
        assert!(line.contains(&format!("\"{name}\":")));
        format!("{}\"{name}\":{dup},{}", &line[..at], &line[at..])
    }

    #[test]
    fn probe_escaped_member_names() {
        let s = revealed();
        // Escaped names where the fast decoder matches names: given up.
        for line in [
            sub(&s, "\"seq\"", "\"s\\u0065q\""),
            sub(&s, "\"type\"", "\"typ\\u0065\""),
            sub(&s, "\"trace_id\"", "\"trace\\u005fid\""),
            sub(
                &s,
                "\"salts\":{\"agent_id\"",
                "\"salts\":{\"agent\\u005fid\"",
            ),
            sub(&s, "{\"key_id\"", "{\"key\\u005fid\""),
            sub(&s, "\"signature\":\"CQ", "\"signatur\\u0065\":\"CQ"),
            sub(&s, "\"proof\"", "\"\\u0070roof\""),
            sub(
                &hidden(),
                "\"hidden\":{\"confidence\"",
                "\"hidden\":{\"c\\u006fnfidence\"",
            ),
        ] {
            general_decides(line.as_bytes());
        }
        // Escaped names inside JSON values and links are read as the
        // general decoder reads them.
        for line in [
            sub(&s, "{\"tool_call\"", "{\"tool\\u005fcall\""),
            sub(&s, "{\"n\":", "{\"\\u006e\":"),
            sub(&s, "{\"k\":{\"nested\"", "{\"\\u006b\":{\"nest\\u0065d\""),
            sub(&s, "{\"n\":", "{\"\\u0000\":0,\"n\":"),
        ] {
            fast_takes(line.as_bytes());
        }
    }

    #[test]
    fn probe_empty_and_unknown_member_names() {
        let s = revealed();
        for line in [
            sub(&s, "{\"digest\"", "{\"\":1,\"digest\""),
            sub(&s, "\"fields\":{", "\"fields\":{\"\":1,"),
            sub(
                &s,
                "\"salts\":{",
                "\"salts\":{\"\":\"00000000000000000000000000000000\",",
            ),
            sub(&s, "\"hidden\":{", "\"hidden\":{\"\":\"00\","),
            sub(&s, "{\"key_id\"", "{\"\":\"k\",\"key_id\""),
            sub(&s, "{\"tool_call\"", "{\"\":\"x\",\"tool_call\""),
            sub(&s, "{\"digest\"", "{\"view\":{},\"digest\""),
            sub(&s, "\"fields\":{", "\"fields\":{\"current_hash\":1,"),
            sub(&s, "{\"tool_call\"", "{\"bogus\":\"x\",\"tool_call\""),
        ] {
            refused(line.as_bytes());
        }
        // An empty name inside a JSON value is data.
        fast_takes(sub(&s, "{\"n\":", "{\"\":[],\"n\":").as_bytes());
    }

    #[test]
    fn probe_escapes_in_values() {
        let s = revealed();
        // Read as owned strings: taken, with the general decoder's text.
        for (from, to) in [
            ("\"content\":\"x\"", "\"content\":\"\\u0000\""),
            (
                "\"content\":\"x\"",
                "\"content\":\"\\ud83d\\ude00\\/\\\"\\\\\\b\\f\\n\\r\\t\"",
            ),
            ("\"content\":\"x\"", "\"content\":\"\\uFFFF\\uDBFF\\uDFFF\""),
            ("\"trace_id\":\"trace-1\"", "\"trace_id\":\"trace\\u002d1\""),
            ("\"key_id\":\"agent", "\"key_id\":\"\\u0061gent"),
            ("\"status\":\"flagged\"", "\"status\":\"\\u0066lagged\""),
            (
                "\"step_type\":\"tool_call\"",
                "\"step_type\":\"tool\\u005fcall\"",
            ),
            (
                "\"created_at\":\"2025-01-15T10:30:00.000000Z\"",
                "\"created_at\":\"2025-01-15T10:30:00.000000\\u005a\"",
            ),
            ("\"tool_call\":\"tc-1\"", "\"tool_call\":\"tc\\u002d1\""),
            ("\"sql\":\"SELECT 1\"", "\"sql\":\"\\u0000\\ud800\\udc00\""),
        ] {
            fast_takes(sub(&s, from, to).as_bytes());
        }
        // Lone or reversed surrogates are refused by both.
        for bad in [
            "\\ud800",
            "\\udc00",
            "\\udc00\\ud800",
            "\\ud800\\u0041",
            "\\ud800x",
        ] {
            refused(sub(&s, "\"content\":\"x\"", &format!("\"content\":\"{bad}\"")).as_bytes());
            refused(sub(&s, "\"sql\":\"SELECT 1\"", &format!("\"sql\":\"{bad}\"")).as_bytes());
            refused(sub(&s, "{\"n\":", &format!("{{\"{bad}\":1,\"n\":")).as_bytes());
        }
        // Read as borrowed text (the members the fast decoder compares or
        // decodes as hex or base64): an escape makes it give up.
        for (from, to) in [
            ("\"type\":\"step\"", "\"type\":\"st\\u0065p\""),
            ("\"logged_at\":\"2025", "\"logged_at\":\"\\u00325"),
            ("\"digest\":\"d", "\"digest\":\"\\u0064"),
            ("\"hash\":\"b", "\"hash\":\"\\u0062"),
            ("\"prev_hash\":\"8", "\"prev_hash\":\"\\u0038"),
            ("\"proof\":[\"c", "\"proof\":[\"\\u0063"),
            ("\"signature\":\"CQ", "\"signature\":\"\\u0043Q"),
            ("\"agent_id\":\"1", "\"agent_id\":\"\\u0031"),
        ] {
            general_decides(sub(&s, from, to).as_bytes());
        }
    }

    #[test]
    fn probe_duplicate_members_at_every_depth() {
        let s = revealed();
        let h = hidden();
        let top: Value = serde_json::from_str(&s).unwrap();
        for (name, member) in top.as_object().unwrap() {
            refused(duplicated(&s, "", name, &member.to_string()).as_bytes());
        }
        for scope in ["fields", "salts", "signature"] {
            for (name, member) in top[scope].as_object().unwrap() {
                refused(duplicated(&s, scope, name, &member.to_string()).as_bytes());
            }
        }
        let top: Value = serde_json::from_str(&h).unwrap();
        for (name, member) in top["hidden"].as_object().unwrap() {
            refused(duplicated(&h, "hidden", name, &member.to_string()).as_bytes());
        }
        for (from, to) in [
            (
                "{\"tool_call\":\"tc-1\"}",
                "{\"tool_call\":\"tc-1\",\"tool_call\":\"tc-1\"}",
            ),
            (
                "{\"tool_call\":\"tc-1\"}",
                "{\"tool_call\":\"a\",\"tool_call\":\"b\"}",
            ),
            ("\"sql\":\"SELECT 1\"", "\"sql\":\"SELECT 1\",\"sql\":\"x\""),
            ("[1,2.5,null,true]", "[1,{\"a\":1,\"a\":1}]"),
            ("[1,2.5,null,true]", "[[[{\"a\":{\"b\":0,\"b\":0}}]]]"),
            ("{\"nested\":", "{\"nested\":1,\"nested\":"),
            (
                "\"output_data\":\"rows\"",
                "\"output_data\":{\"\":1,\"\":1}",
            ),
            // The same name, once escaped: still a duplicate.
            (
                "\"sql\":\"SELECT 1\"",
                "\"sql\":\"SELECT 1\",\"s\\u0071l\":\"x\"",
            ),
        ] {
            refused(sub(&s, from, to).as_bytes());
        }
    }

    #[test]
    fn probe_numbers_inside_json_values() {
        let s = revealed();
        for n in [
            "9007199254740991",
            "-9007199254740991",
            "0",
            "-0",
            "-0.0",
            "0.0",
            "1.0",
            "1e2",
            "100",
            "1E+2",
            "1e-400",
            "-1e-400",
            "1e308",
            "12345678901234567890.5",
            "123456789012345678901234567890e0",
            "0.1",
            "5e-324",
            "2.4703282292062328e-324",
            "1.7976931348623157e308",
        ] {
            fast_takes(sub(&s, "[1,2.5", &format!("[{n},2.5")).as_bytes());
            fast_takes(
                sub(
                    &s,
                    "\"output_data\":\"rows\"",
                    &format!("\"output_data\":{n}"),
                )
                .as_bytes(),
            );
        }
        for n in [
            "9007199254740992",
            "-9007199254740992",
            "18446744073709551616",
            "123456789012345678901234567890",
            "1e400",
            "-1e400",
            "01",
            "-",
            "1.",
            ".5",
            "+1",
            "0x10",
            "NaN",
            "Infinity",
        ] {
            refused(sub(&s, "[1,2.5", &format!("[{n},2.5")).as_bytes());
            refused(sub(&s, "{\"nested\":", &format!("{{\"n\":{n},\"nested\":")).as_bytes());
        }
    }

    #[test]
    fn probe_integer_members() {
        let s = revealed();
        let members = [
            ("\"seq\":41", "seq"),
            ("\"step_index\":3", "step_index"),
            ("\"duration_ms\":12", "duration_ms"),
            ("\"token_count\":0", "token_count"),
            ("\"turn_step\":2", "turn_step"),
        ];
        for (from, name) in members {
            for n in ["0", "7", "9007199254740991"] {
                fast_takes(sub(&s, from, &format!("\"{name}\":{n}")).as_bytes());
            }
            // Not a non-negative integer literal: the general decoder
            // refuses, whatever value the number has.
            for n in [
                "-0",
                "-0.0",
                "0.0",
                "1.0",
                "1e2",
                "1E2",
                "1e0",
                "10e-1",
                "-1",
                "-7",
                "\"7\"",
                "9007199254740992",
                "true",
                "[]",
                "{}",
                "1e400",
            ] {
                refused(sub(&s, from, &format!("\"{name}\":{n}")).as_bytes());
            }
        }
        // null: absent for the optional ones, refused for the others.
        for (from, name) in &members[2..] {
            fast_takes(sub(&s, from, &format!("\"{name}\":null")).as_bytes());
        }
        for (from, name) in &members[..2] {
            refused(sub(&s, from, &format!("\"{name}\":null")).as_bytes());
        }
    }

    #[test]
    fn probe_confidence() {
        let s = revealed();
        for c in [
            "0",
            "1",
            "-0",
            "-0.0",
            "0.0",
            "-1e-400",
            "1e-400",
            "7.5e-1",
            "0.75000000000000000000001",
            "0.30000000000000004",
            "9007199254740991",
            "-9007199254740991",
            "12345678901234567890.5",
            "123456789012345678901234567890.0",
            "1e308",
            "-1.7976931348623157e308",
            "5e-324",
            "2.4703282292062328e-324",
            "null",
        ] {
            let line = sub(&s, "\"confidence\":0.75", &format!("\"confidence\":{c}"));
            fast_takes(line.as_bytes());
        }
        // The sign of a zero survives both readings.
        let line = sub(&s, "\"confidence\":0.75", "\"confidence\":-0");
        let (entry, _) = agree(line.as_bytes()).unwrap();
        let LogRecord::Step(record) = entry.record else {
            panic!()
        };
        assert!(record.step.confidence.unwrap().is_sign_negative());
        for c in [
            "1e309",
            "9007199254740992",
            "\"0.75\"",
            "true",
            "[]",
            "{}",
            "NaN",
            "-",
        ] {
            refused(sub(&s, "\"confidence\":0.75", &format!("\"confidence\":{c}")).as_bytes());
        }
    }

    #[test]
    fn probe_white_space_bom_and_trailing_bytes() {
        let s = revealed();
        for line in [
            format!(" {s}"),
            format!("\t\r\n{s}"),
            format!("{s} "),
            format!("{s}\n"),
            format!("{s}\r\n"),
            s.replace("\":", "\" :\t").replace(",\"", " ,\n\""),
        ] {
            fast_takes(line.as_bytes());
        }
        for line in [
            format!("\u{FEFF}{s}"),
            format!("{s}\u{FEFF}"),
            format!("\u{A0}{s}"),
            format!("\x0c{s}"),
            format!("{s}\x0b"),
            format!("{s}\0"),
            format!("{s}x"),
            format!("{s},"),
            format!("{s}{{}}"),
            format!("{s}{s}"),
            format!("[{s}]"),
            String::new(),
            " ".into(),
            "null".into(),
            "\"step\"".into(),
            s[..s.len() - 1].to_owned(),
        ] {
            refused(line.as_bytes());
        }
    }

    #[test]
    fn probe_bytes_that_are_not_utf8() {
        let s = revealed();
        let at_x = s.find("\"content\":\"x\"").unwrap() + "\"content\":\"".len();
        let at_sql = s.find("SELECT").unwrap();
        let at_link = s.find("tc-1").unwrap();
        let at_key = s.find("agent-0123").unwrap();
        let at_end = s.len() - 1;
        for bad in [
            &[0xffu8][..],
            &[0x80],
            &[0xc0, 0x80],
            &[0xc3],
            &[0xed, 0xa0, 0x80],
            &[0xed, 0xbf, 0xbf],
            &[0xf4, 0x90, 0x80, 0x80],
            &[0xf8, 0x88, 0x80, 0x80, 0x80],
            &[0xe2, 0x82],
        ] {
            for at in [at_x, at_sql, at_link, at_key, at_end] {
                let mut bytes = s.clone().into_bytes();
                bytes.splice(at..at, bad.iter().copied());
                refused(&bytes);
            }
        }
        // Raw control characters inside strings are not JSON; DEL is.
        for (c, ok) in [
            ('\0', false),
            ('\x1f', false),
            ('\n', false),
            ('\x7f', true),
        ] {
            let line = sub(&s, "\"content\":\"x\"", &format!("\"content\":\"{c}\""));
            if ok {
                fast_takes(line.as_bytes());
            } else {
                refused(line.as_bytes());
            }
        }
    }

    #[test]
    fn probe_deep_nesting() {
        let s = revealed();
        // The line is depth 1, `fields` 2: the limit (128) falls inside
        // `input_data` at the same place for both readings.
        let mut taken = 0;
        for depth in 100..=140 {
            let arrays = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
            let objects = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
            for nested in [arrays, objects] {
                let line = sub(
                    &s,
                    "\"output_data\":\"rows\"",
                    &format!("\"output_data\":{nested}"),
                );
                let fast = agree(line.as_bytes());
                assert_eq!(
                    fast.is_some(),
                    general(line.as_bytes()).is_some(),
                    "depth {depth}"
                );
                taken += usize::from(fast.is_some());
            }
        }
        assert!(taken > 0 && taken < 82);
        for depth in [1_000, 100_000] {
            let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            refused(
                sub(
                    &s,
                    "\"output_data\":\"rows\"",
                    &format!("\"output_data\":{nested}"),
                )
                .as_bytes(),
            );
        }
    }

    #[test]
    fn probe_proofs() {
        let s = revealed();
        let h = hidden();
        let hash = Hash::sha256(b"a").to_hex();
        let list = |n: usize| vec![format!("\"{hash}\""); n].join(",");
        let proof = format!("\"proof\":[\"{hash}\",\"{}\"]", Hash::sha256(b"b").to_hex());
        for to in [
            "\"proof\":[]".to_owned(),
            format!("\"proof\":[{}]", list(128)),
            format!("\"proof\": [ {} ] ", list(3)),
        ] {
            fast_takes(sub(&s, &proof, &to).as_bytes());
        }
        for to in [
            format!("\"proof\":[{}]", list(129)),
            format!("\"proof\":[{}]", list(10_000)),
            "\"proof\":null".into(),
            "\"proof\":[null]".into(),
            "\"proof\":{}".into(),
            "\"proof\":\"\"".into(),
            format!("\"proof\":\"{hash}\""),
            format!("\"proof\":[[\"{hash}\"]]"),
            format!("\"proof\":[\"{}\"]", hash.to_uppercase()),
            format!("\"proof\":[\"{}\"]", &hash[..62]),
            format!("\"proof\":[\"{hash}00\"]"),
            format!("\"proof\":[\"{hash}\",]"),
        ] {
            refused(sub(&s, &proof, &to).as_bytes());
        }
        // A line without a proof, and with an empty one, differ (the
        // verifier refuses proofs in a complete bundle).
        let (_, none) = agree(h.as_bytes()).unwrap();
        assert_eq!(none, None);
        let with = sub(&h, "{\"digest\"", "{\"proof\":[],\"digest\"");
        let (_, empty) = agree(with.as_bytes()).unwrap();
        assert_eq!(empty, Some(vec![]));
    }

    #[test]
    fn probe_signatures() {
        let s = revealed();
        let sig = "\"signature\":{\"key_id\":\"agent-0123456789ab\",\"signature\":\"CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQ==\"}";
        let b64 = "CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQ==";
        for to in [
            "\"signature\":null".to_owned(),
            format!("\"signature\":{{\"signature\":\"{b64}\",\"key_id\":\"\"}}"),
            format!("\"signature\" : {{ \"key_id\" : \"k\" , \"signature\" : \"{b64}\" }}"),
        ] {
            fast_takes(sub(&s, sig, &to).as_bytes());
        }
        for to in [
            "\"signature\":[]".to_owned(),
            format!("\"signature\":[\"agent-0123456789ab\",\"{b64}\"]"),
            "\"signature\":{}".into(),
            "\"signature\":false".into(),
            format!("\"signature\":\"{b64}\""),
            format!("\"signature\":{{\"signature\":\"{b64}\"}}"),
            "\"signature\":{\"key_id\":\"k\"}".into(),
            format!("\"signature\":{{\"key_id\":\"k\",\"signature\":\"{b64}\",\"x\":1}}"),
            format!("\"signature\":{{\"key_id\":null,\"signature\":\"{b64}\"}}"),
            format!("\"signature\":{{\"key_id\":1,\"signature\":\"{b64}\"}}"),
            "\"signature\":{\"key_id\":\"k\",\"signature\":null}".into(),
            "\"signature\":{\"key_id\":\"k\",\"signature\":\"AA==\"}".into(),
            format!("\"signature\":{{\"key_id\":\"k\",\"signature\":\"{b64}AA==\"}}"),
            format!(
                "\"signature\":{{\"key_id\":\"k\",\"signature\":\"{}\"}}",
                b64.trim_end_matches('=')
            ),
            format!(
                "\"signature\":{{\"key_id\":\"k\",\"signature\":\"{}CR==\"}}",
                &b64[..b64.len() - 4]
            ),
            format!("\"signature\":{{\"key_id\":\"k\",\"signature\":\" {b64}\"}}"),
            format!(
                "\"signature\":{{\"key_id\":\"k\",\"signature\":\"{}\"}}",
                b64.replace('Q', "-")
            ),
        ] {
            refused(sub(&s, sig, &to).as_bytes());
        }
        // A signature missing from the line entirely is refused too.
        refused(sub(&s, &format!(",{sig}"), "").as_bytes());
    }

    #[test]
    fn probe_salts_and_hidden() {
        let s = revealed();
        let h = hidden();
        let salt = "\"content\":\"67a8e6d5f862af82f527c35eeddee744\"";
        let commitment =
            "\"content\":\"0363839e668f2c701e382470edf1e43ec78f76eb95e41840aadfd9a84f181cc2\"";
        for line in [
            // Revealed and hidden at once.
            sub(&s, "\"hidden\":{}", &format!("\"hidden\":{{{commitment}}}")),
            // Hidden, yet its value given.
            sub(&h, "\"fields\":{", "\"fields\":{\"content\":\"x\","),
            sub(&h, "\"fields\":{", "\"fields\":{\"content\":null,"),
            // Hidden with a salt too.
            sub(&h, "\"salts\":{", &format!("\"salts\":{{{salt},")),
            // Neither salt nor commitment.
            sub(&s, &format!("{salt},"), ""),
            sub(&h, &format!("{commitment},"), ""),
            // Revealed without its value (a salt, no member in fields).
            sub(&s, "\"content\":\"x\",", ""),
            // Salts and commitments not in their exact form.
            sub(&s, salt, &salt.to_uppercase().replace("CONTENT", "content")),
            sub(&s, salt, "\"content\":\"67a8e6d5f862af82f527c35eeddee7\""),
            sub(
                &s,
                salt,
                "\"content\":\"67a8e6d5f862af82f527c35eeddee74400\"",
            ),
            sub(&s, salt, "\"content\":null"),
            sub(&s, salt, "\"content\":0"),
            sub(
                &h,
                commitment,
                &commitment.to_uppercase().replace("CONTENT", "content"),
            ),
            sub(&h, commitment, "\"content\":\"0363\""),
            sub(&h, commitment, "\"content\":null"),
            sub(&s, "\"hidden\":{}", "\"hidden\":null"),
            sub(&s, "\"hidden\":{}", "\"hidden\":[]"),
            sub(&s, "\"salts\":{", "\"salts\":[{"),
        ] {
            refused(line.as_bytes());
        }
        // Fields no disclosure may hide, hidden by hand: the general
        // decoder reads a blank value (text) or refuses (index, kind,
        // time, status); the fast decoder agrees either way.
        for field in [
            "org_id",
            "agent_id",
            "session_id",
            "step_type_original",
            "signer_key_id",
        ] {
            fast_takes(hide_raw(&s, field).as_bytes());
        }
        for field in ["step_index", "step_type", "created_at", "status"] {
            refused(hide_raw(&s, field).as_bytes());
        }
        // Revealed as `null`: absent for the optional members, refused
        // for the required ones.
        for field in [
            "content",
            "input_data",
            "output_data",
            "confidence",
            "duration_ms",
            "token_count",
            "model",
            "metadata",
            "turn_id",
            "turn_step",
            "task_id",
            "signer_key_id",
        ] {
            let mut value: Value = serde_json::from_str(&s).unwrap();
            value["fields"][field] = Value::Null;
            fast_takes(value.to_string().as_bytes());
        }
        for field in [
            "trace_id",
            "org_id",
            "agent_id",
            "session_id",
            "step_index",
            "step_type",
            "step_type_original",
            "created_at",
            "links",
            "status",
        ] {
            let mut value: Value = serde_json::from_str(&s).unwrap();
            value["fields"][field] = Value::Null;
            refused(value.to_string().as_bytes());
        }
    }

    #[test]
    fn probe_links() {
        let s = revealed();
        let links = "\"links\":{\"tool_call\":\"tc-1\"}";
        for to in [
            "\"links\":{}",
            "\"links\":{\"tool_call\":\"\"}",
            "\"links\":{\"parent\":\"p\",\"corrects\":\"c\",\"tool_call\":\"t\",\"policy_decision\":\"d\",\"approval_request\":\"r\",\"audit_event\":\"e\"}",
            "\"links\":{\"tool\\u005fcall\":\"t\"}",
        ] {
            fast_takes(sub(&s, links, to).as_bytes());
        }
        for to in [
            "\"links\":null",
            "\"links\":[]",
            "\"links\":\"\"",
            "\"links\":{\"bogus\":\"x\"}",
            "\"links\":{\"\":\"x\"}",
            "\"links\":{\"Tool_call\":\"x\"}",
            "\"links\":{\"tool_call\":null}",
            "\"links\":{\"tool_call\":1}",
            "\"links\":{\"tool_call\":[\"x\"]}",
            "\"links\":{\"tool_call\":\"a\",\"tool_call\":\"b\"}",
            "\"links\":{\"tool_call\":\"a\",\"tool\\u005fcall\":\"b\"}",
        ] {
            refused(sub(&s, links, to).as_bytes());
        }
    }

    #[test]
    fn probe_status_kind_and_type_spellings() {
        let s = revealed();
        fast_takes(sub(&s, "\"status\":\"flagged\"", "\"status\":\"ok\"").as_bytes());
        for status in [
            "\"OK\"",
            "\"Ok\"",
            "\"flagged \"",
            "\" ok\"",
            "\"\"",
            "null",
            "1",
            "true",
        ] {
            refused(
                sub(
                    &s,
                    "\"status\":\"flagged\"",
                    &format!("\"status\":{status}"),
                )
                .as_bytes(),
            );
        }
        for kind in ["\"reasoning\"", "\"action\""] {
            fast_takes(
                sub(
                    &s,
                    "\"step_type\":\"tool_call\"",
                    &format!("\"step_type\":{kind}"),
                )
                .as_bytes(),
            );
        }
        for kind in [
            "\"ToolCall\"",
            "\"TOOL_CALL\"",
            "\"tool-call\"",
            "\" tool_call\"",
            "\"[tool_call]\"",
            "\"toolcall\"",
            "\"思考\"",
            "\"\"",
            "null",
            "1",
        ] {
            refused(
                sub(
                    &s,
                    "\"step_type\":\"tool_call\"",
                    &format!("\"step_type\":{kind}"),
                )
                .as_bytes(),
            );
        }
        for label in ["\"\"", "\"思考\"", "\"\\u0000\""] {
            fast_takes(
                sub(
                    &s,
                    "\"step_type_original\":\"ToolCall\"",
                    &format!("\"step_type_original\":{label}"),
                )
                .as_bytes(),
            );
        }
        for label in ["null", "1", "[]"] {
            refused(
                sub(
                    &s,
                    "\"step_type_original\":\"ToolCall\"",
                    &format!("\"step_type_original\":{label}"),
                )
                .as_bytes(),
            );
        }
        for ty in [
            "\"Step\"",
            "\"step \"",
            "\"session_start\"",
            "\"seal\"",
            "null",
            "1",
            "\"\"",
        ] {
            refused(sub(&s, "\"type\":\"step\"", &format!("\"type\":{ty}")).as_bytes());
        }
        for (flag, v) in [("has_embedding", "true"), ("erased", "true")] {
            fast_takes(
                sub(&s, &format!("\"{flag}\":false"), &format!("\"{flag}\":{v}")).as_bytes(),
            );
        }
        for flag in ["has_embedding", "erased"] {
            for v in ["0", "1", "\"false\"", "null", "[]"] {
                refused(
                    sub(&s, &format!("\"{flag}\":false"), &format!("\"{flag}\":{v}")).as_bytes(),
                );
            }
        }
    }

    #[test]
    fn probe_timestamps() {
        let s = revealed();
        let at = "2025-01-15T10:30:00.000000Z";
        for t in [
            "1970-01-01T00:00:00.000000Z",
            "2025-12-31T23:59:59.999999Z",
            "2024-02-29T00:00:00.000001Z",
        ] {
            fast_takes(
                sub(
                    &s,
                    &format!("\"created_at\":\"{at}\""),
                    &format!("\"created_at\":\"{t}\""),
                )
                .as_bytes(),
            );
            fast_takes(
                sub(
                    &s,
                    &format!("\"logged_at\":\"{at}\""),
                    &format!("\"logged_at\":\"{t}\""),
                )
                .as_bytes(),
            );
        }
        for t in [
            "\"2025-01-15T10:30:00Z\"",
            "\"2025-01-15T10:30:00.000Z\"",
            "\"2025-01-15T10:30:00.0000000Z\"",
            "\"2025-01-15T10:30:00.000000z\"",
            "\"2025-01-15t10:30:00.000000Z\"",
            "\"2025-01-15 10:30:00.000000Z\"",
            "\"2025-01-15T10:30:00.000000+00:00\"",
            "\"2025-02-30T10:30:00.000000Z\"",
            "\"2025-01-15T24:00:00.000000Z\"",
            "\"2025-01-15T23:59:60.000000Z\"",
            "\"2025-13-15T10:30:00.000000Z\"",
            "\"+2025-01-15T10:30:00.00000Z\"",
            "\"-025-01-15T10:30:00.000000Z\"",
            "\"2025-01-15T10:30:00.00000-Z\"",
            "\"２025-01-15T10:30:00.00000Z\"",
            "\"\"",
            "null",
            "1736937000000000",
        ] {
            refused(
                sub(
                    &s,
                    &format!("\"created_at\":\"{at}\""),
                    &format!("\"created_at\":{t}"),
                )
                .as_bytes(),
            );
            refused(
                sub(
                    &s,
                    &format!("\"logged_at\":\"{at}\""),
                    &format!("\"logged_at\":{t}"),
                )
                .as_bytes(),
            );
        }
    }

    #[test]
    fn probe_missing_members() {
        let s = revealed();
        let top: Value = serde_json::from_str(&s).unwrap();
        for name in top.as_object().unwrap().keys() {
            let mut value = top.clone();
            value.as_object_mut().unwrap().remove(name);
            let line = value.to_string();
            if name == "proof" {
                fast_takes(line.as_bytes());
            } else {
                refused(line.as_bytes());
            }
        }
    }

    #[test]
    fn probe_lines_in_every_stage_prepare_alike() {
        // Lines that are not step entries: the fast decoder leaves them,
        // and they are prepared exactly as before.
        let op = r#"{"seq":0,"type":"session_start","logged_at":"2025-01-15T10:30:00.000000Z","view":{},"hash":"00"}"#;
        for line in [
            r#"{"cairn_bundle":2}"#,
            r#"{"checkpoint":"x"}"#,
            r#"{"consistency":{"old_size":1,"proof":[]}}"#,
            r#"{"selection":{},"note":"x"}"#,
            r#"{"end":{"entries":1}}"#,
            op,
        ] {
            general_decides(line.as_bytes());
        }
        // A step line carrying a member of another line: left alone.
        let s = revealed();
        for member in [
            "\"end\":{\"entries\":1}",
            "\"consistency\":{}",
            "\"selection\":{}",
            "\"checkpoint\":\"x\"",
        ] {
            refused(sub(&s, "{\"digest\"", &format!("{{{member},\"digest\"")).as_bytes());
        }
    }

    #[test]
    fn probe_member_order_and_line_ends() {
        // Members in any order: the same entry.
        let s = revealed();
        let top: Value = serde_json::from_str(&s).unwrap();
        let reversed: Vec<String> = top
            .as_object()
            .unwrap()
            .iter()
            .rev()
            .map(|(k, v)| format!("{}:{v}", Value::String(k.clone())))
            .collect();
        let line = format!("{{{}}}", reversed.join(","));
        assert_eq!(agree(line.as_bytes()), agree(s.as_bytes()));
        // A line read with its line end is prepared as the line without.
        for (with, kept) in [("\n", ""), ("\r\n", ""), ("\r", "\r"), ("\n\n", "\n")] {
            let read = super::super::PreparedLine::from_vec(format!("{s}{with}").into_bytes());
            let trimmed = format!("{s}{kept}");
            let alone = super::super::PreparedLine::general(trimmed.as_bytes().into());
            assert!(format!("{read:?}") == format!("{alone:?}"), "{with:?}");
        }
    }

    /// Tokens spliced into a line, or put in place of one of its tokens.
    const TOKENS: &[&str] = &[
        " ",
        "\t",
        "\n",
        "\r",
        "\u{FEFF}",
        "\u{A0}",
        "\\u0000",
        "\\ud800",
        "\\udc00",
        "\\ud83d\\ude00",
        "\\\"",
        "\\\\",
        "\\/",
        "\\u005f",
        "-0",
        "-0.0",
        "0.0",
        "1e2",
        "1.0",
        "1E400",
        "-1e-400",
        "9007199254740992",
        "9007199254740991",
        "null",
        "true",
        ",",
        ":",
        "{",
        "}",
        "[",
        "]",
        "\"\"",
        "\"x\":1,",
        "\"seq\":41,",
        "\"\":null,",
        "{}",
        "[]",
        "\"ok\"",
        "\"step\"",
        "\"tool_call\"",
        "\"AA==\"",
        "\"00000000000000000000000000000000\"",
    ];

    /// Spans of the line's tokens (strings, numbers, literals), outside
    /// and inside strings alike.
    fn token_spans(line: &str) -> Vec<(usize, usize)> {
        let b = line.as_bytes();
        let mut spans = Vec::new();
        let mut i = 0;
        while i < b.len() {
            let start = i;
            match b[i] {
                b'"' => {
                    i += 1;
                    while i < b.len() && b[i] != b'"' {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    i = (i + 1).min(b.len());
                    spans.push((start, i));
                }
                b'-' | b'0'..=b'9' | b'a'..=b'z' => {
                    while i < b.len() && !matches!(b[i], b',' | b'}' | b']' | b':') {
                        i += 1;
                    }
                    spans.push((start, i));
                }
                _ => i += 1,
            }
        }
        spans
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3_000))]

        #[test]
        fn fast_agrees_with_general_on_spliced_tokens(
            hide in prop::sample::select(vec![0u32, 0x3fff, 0b1010, 0x100]),
            signed in any::<bool>(),
            proof in any::<bool>(),
            splices in prop::collection::vec(
                (any::<prop::sample::Index>(), prop::sample::select(TOKENS), any::<bool>()),
                1..4,
            ),
        ) {
            let mut line = entry_line(hide, signed, proof, "x");
            for (at, token, replace) in &splices {
                let spans = token_spans(&line);
                if *replace && !spans.is_empty() {
                    let (start, end) = spans[at.index(spans.len())];
                    line = format!("{}{token}{}", &line[..start], &line[end..]);
                } else {
                    let mut at = at.index(line.len() + 1);
                    while !line.is_char_boundary(at) {
                        at -= 1;
                    }
                    line.insert_str(at, token);
                }
            }
            agree(line.as_bytes());
        }
    }

    /// The token (a string with its quotes, or a number) respelled with
    /// the same meaning: characters of a string escaped, a number given a
    /// fraction or an exponent.
    fn respell(token: &str, choice: usize) -> String {
        if let Some(inner) = token.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
            let Ok(Value::String(text)) = serde_json::from_str::<Value>(token) else {
                return token.to_owned();
            };
            let _ = inner;
            let mut out = String::from("\"");
            for (i, c) in text.chars().enumerate() {
                let escape = (choice >> (i % 16)) & 1 == 1;
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '/' if escape => out.push_str("\\/"),
                    c if (c as u32) < 0x20 || escape => {
                        let mut units = [0u16; 2];
                        for unit in c.encode_utf16(&mut units) {
                            out.push_str(&format!("\\u{unit:04X}"));
                        }
                    }
                    c => out.push(c),
                }
            }
            out.push('"');
            return out;
        }
        let integer = !token.contains(['.', 'e', 'E']);
        let suffixes: &[&str] = if integer {
            &[".0", "e0", "E+0", "0e-1", ".000", "e-0"]
        } else if token.contains(['e', 'E']) {
            &["", "", "", "", "", ""]
        } else {
            &["0", "e0", "000e+00", "E0", "0", "e-0"]
        };
        let respelled = format!("{token}{}", suffixes[choice % suffixes.len()]);
        match (token, choice % 7) {
            ("0", 6) => "-0".into(),
            _ => respelled,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3_000))]

        /// Member names and values respelled (escaped characters, numbers
        /// with a fraction or exponent): the general decoder reads the
        /// same line; the fast one gives up or agrees.
        #[test]
        fn fast_agrees_with_general_on_respelled_tokens(
            hide in prop::sample::select(vec![0u32, 0x3fff, 0b1010, 0x100]),
            signed in any::<bool>(),
            proof in any::<bool>(),
            content in "\\PC{0,6}",
            respellings in prop::collection::vec(
                (any::<prop::sample::Index>(), any::<usize>()),
                1..4,
            ),
        ) {
            let mut line = entry_line(hide, signed, proof, &content);
            for (at, choice) in &respellings {
                let spans: Vec<_> = token_spans(&line)
                    .into_iter()
                    .filter(|&(s, _)| !line[s..].starts_with(['t', 'f', 'n']))
                    .collect();
                let (start, end) = spans[at.index(spans.len())];
                line = format!("{}{}{}", &line[..start], respell(&line[start..end], *choice), &line[end..]);
            }
            agree(line.as_bytes());
        }
    }
}
