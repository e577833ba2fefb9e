//! Per-field salted commitments, the step digest, the chain hash and the
//! session genesis.
//!
//! ```text
//! salts(j)      = SHA-256(frame("cairn/v2/salt"; seed, u8(j)))       j = 0..=10
//! salt(f)       = salts(pos(f) / 2)[16 * (pos(f) % 2) ..][..16]
//! commit(f)     = SHA-256(frame("cairn/v2/field"; salt(f), jcs(value(f))))
//! digest        = SHA-256(frame("cairn/v2/step"; commit(f0), ..., commit(f21)))
//! chain_hash    = SHA-256(frame("cairn/v2/chain"; prev, digest, u64be(step_index), created_at))
//! genesis       = SHA-256(frame("cairn/v2/genesis"; jcs(session header view)))
//! ```
//!
//! The 32-byte `seed` is chosen at write time (by the server, or by an agent
//! that signs its own steps) and never leaves the store. An export reveals,
//! per visible field, only that field's salt; a hidden or erased field is
//! carried as its commitment alone, which reveals nothing of the value
//! because the 128-bit salt is unknown. Either way the digest recomputes.

use crate::hash::{Framer, Hash, frame_bytes, framed_hash};
use crate::jcs;
use crate::record::{SessionHeader, Step};
use crate::time::Timestamp;
use ed25519_dalek::VerifyingKey;

mod fields;
pub use fields::{JsonValue, StepFields};

/// The fields committed in a step digest, in digest order.
///
/// `has_embedding` and the erasure marker are deliberately absent: they
/// change after writing. `prev_hash` is bound by the chain hash, and the
/// agent signature signs the digest, so neither can be inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// `trace_id`
    TraceId,
    /// `org_id`
    OrgId,
    /// `agent_id`
    AgentId,
    /// `session_id`
    SessionId,
    /// `step_index`
    StepIndex,
    /// `step_type` (canonical kind)
    StepType,
    /// `step_type_original` (the spelling the caller used)
    StepTypeOriginal,
    /// `content`
    Content,
    /// `input_data`
    InputData,
    /// `output_data`
    OutputData,
    /// `confidence`
    Confidence,
    /// `duration_ms`
    DurationMs,
    /// `token_count`
    TokenCount,
    /// `model`
    Model,
    /// `metadata`
    Metadata,
    /// `created_at`
    CreatedAt,
    /// `turn_id`
    TurnId,
    /// `turn_step`
    TurnStep,
    /// `task_id`
    TaskId,
    /// `links`
    Links,
    /// `status`
    Status,
    /// `signer_key_id`: the key the agent declares it signed the digest
    /// with. Committed so that a signature cannot be stripped unnoticed.
    SignerKeyId,
}

/// Number of committed fields.
pub const FIELD_COUNT: usize = 22;

/// Every field in digest order.
pub const FIELDS: [Field; FIELD_COUNT] = [
    Field::TraceId,
    Field::OrgId,
    Field::AgentId,
    Field::SessionId,
    Field::StepIndex,
    Field::StepType,
    Field::StepTypeOriginal,
    Field::Content,
    Field::InputData,
    Field::OutputData,
    Field::Confidence,
    Field::DurationMs,
    Field::TokenCount,
    Field::Model,
    Field::Metadata,
    Field::CreatedAt,
    Field::TurnId,
    Field::TurnStep,
    Field::TaskId,
    Field::Links,
    Field::Status,
    Field::SignerKeyId,
];

impl Field {
    /// The field's name as committed and as written on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Field::TraceId => "trace_id",
            Field::OrgId => "org_id",
            Field::AgentId => "agent_id",
            Field::SessionId => "session_id",
            Field::StepIndex => "step_index",
            Field::StepType => "step_type",
            Field::StepTypeOriginal => "step_type_original",
            Field::Content => "content",
            Field::InputData => "input_data",
            Field::OutputData => "output_data",
            Field::Confidence => "confidence",
            Field::DurationMs => "duration_ms",
            Field::TokenCount => "token_count",
            Field::Model => "model",
            Field::Metadata => "metadata",
            Field::CreatedAt => "created_at",
            Field::TurnId => "turn_id",
            Field::TurnStep => "turn_step",
            Field::TaskId => "task_id",
            Field::Links => "links",
            Field::Status => "status",
            Field::SignerKeyId => "signer_key_id",
        }
    }

    /// Parses a field name.
    pub fn from_name(name: &str) -> Option<Field> {
        // A match (length first, then bytes) rather than a scan of every
        // name: bundle verification looks up every member of every step.
        Some(match name {
            "trace_id" => Field::TraceId,
            "org_id" => Field::OrgId,
            "agent_id" => Field::AgentId,
            "session_id" => Field::SessionId,
            "step_index" => Field::StepIndex,
            "step_type" => Field::StepType,
            "step_type_original" => Field::StepTypeOriginal,
            "content" => Field::Content,
            "input_data" => Field::InputData,
            "output_data" => Field::OutputData,
            "confidence" => Field::Confidence,
            "duration_ms" => Field::DurationMs,
            "token_count" => Field::TokenCount,
            "model" => Field::Model,
            "metadata" => Field::Metadata,
            "created_at" => Field::CreatedAt,
            "turn_id" => Field::TurnId,
            "turn_step" => Field::TurnStep,
            "task_id" => Field::TaskId,
            "links" => Field::Links,
            "status" => Field::Status,
            "signer_key_id" => Field::SignerKeyId,
            _ => return None,
        })
    }

    /// Position in digest order.
    pub fn position(self) -> usize {
        self as usize
    }

    /// Fields a disclosure can never hide: the chain hash uses the index and
    /// timestamp directly, org and session ids name the log and the chain a
    /// step belongs to, the agent is the one its session's header names (and
    /// the one a signature must be registered for), and kind and status are
    /// what the least detailed view exists to show. (Sessions that must not
    /// reveal who ran them use opaque session ids and hashed agent ids.)
    pub fn always_disclosed(self) -> bool {
        matches!(
            self,
            Field::OrgId
                | Field::AgentId
                | Field::SessionId
                | Field::StepIndex
                | Field::CreatedAt
                | Field::StepType
                | Field::StepTypeOriginal
                | Field::Status
                | Field::SignerKeyId
        )
    }

    /// The payload fields that erasure and retention remove.
    pub fn is_payload(self) -> bool {
        matches!(
            self,
            Field::Content | Field::InputData | Field::OutputData | Field::Metadata
        )
    }
}

/// Appends the canonical (RFC 8785) value of `field` of `step` to `out`.
/// Absent optional values are `null`.
pub fn write_field_value(step: &Step, field: Field, out: &mut Vec<u8>) {
    StepFields::of(step).write(field, out);
}

/// A per-field salt: 16 bytes.
pub type Salt = [u8; 16];

/// Derives the salt of `field` from a record's secret seed: field number
/// `p` takes half `p % 2` of the salt block `p / 2`. Each block's frame is
/// 55 bytes, a single SHA-256 compression.
pub fn derive_salt(seed: &[u8; 32], field: Field) -> Salt {
    salt_from_block(&salt_block(seed, field.position() / 2), field.position())
}

fn salt_block(seed: &[u8; 32], block: usize) -> Hash {
    // frame("cairn/v2/salt"; seed, u8(block)): 55 bytes, one compression,
    // built on the stack because this runs 11 times per append.
    const TAG: &[u8] = b"cairn/v2/salt";
    let mut frame = [0u8; 1 + TAG.len() + 4 + 32 + 4 + 1];
    frame[0] = TAG.len() as u8;
    frame[1..14].copy_from_slice(TAG);
    frame[14..18].copy_from_slice(&32u32.to_be_bytes());
    frame[18..50].copy_from_slice(seed);
    frame[50..54].copy_from_slice(&1u32.to_be_bytes());
    frame[54] = block as u8;
    Hash::sha256(&frame)
}

fn salt_from_block(block: &Hash, position: usize) -> Salt {
    let half = 16 * (position % 2);
    let mut salt = [0u8; 16];
    salt.copy_from_slice(&block.0[half..half + 16]);
    salt
}

/// All 22 salts of a seed (11 salt blocks).
pub fn derive_salts(seed: &[u8; 32]) -> [Salt; FIELD_COUNT] {
    let blocks: [Hash; FIELD_COUNT.div_ceil(2)] = std::array::from_fn(|j| salt_block(seed, j));
    std::array::from_fn(|p| salt_from_block(&blocks[p / 2], p))
}

/// The commitment to one field value (its canonical bytes). The field's
/// identity is bound by its position in the digest and by its own salt.
pub fn commit_field(salt: &Salt, canonical_value: &[u8]) -> Hash {
    // Room for the frame (tag, salt, value, each with its length) and
    // SHA-256's padding, which the hash appends in this buffer.
    let framed = 1 + FIELD_TAG.len() + 4 + salt.len() + 4 + canonical_value.len();
    let mut scratch = Vec::with_capacity(crate::hash::sha256_padded_len(framed));
    commit_field_with(&mut scratch, salt, canonical_value)
}

/// The tag that frames every field commitment.
const FIELD_TAG: &str = "cairn/v2/field";

fn commit_field_with(scratch: &mut Vec<u8>, salt: &Salt, value: &[u8]) -> Hash {
    framed_hash(scratch, FIELD_TAG, &[salt, value])
}

/// How one field of a recorded step is disclosed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// The value is present in the step; this is its salt.
    Revealed(Salt),
    /// The value is withheld (lower detail level) or erased; this is its
    /// commitment.
    Hidden(Hash),
}

/// The openings of all 22 fields, in digest order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Openings(pub [Opening; FIELD_COUNT]);

impl Openings {
    /// Every field revealed, with salts derived from `seed`.
    pub fn from_seed(seed: &[u8; 32]) -> Openings {
        Openings(derive_salts(seed).map(Opening::Revealed))
    }

    /// The opening of one field.
    pub fn get(&self, field: Field) -> &Opening {
        &self.0[field.position()]
    }
}

/// Computes the step digest from its openings: revealed fields are
/// committed from their value in `step`, hidden fields contribute their
/// stored commitment.
pub fn step_digest(step: &Step, openings: &Openings) -> Hash {
    step_digest_of(&StepFields::of(step), openings)
}

/// [`step_digest`] from borrowed values.
pub fn step_digest_of(fields: &StepFields<'_>, openings: &Openings) -> Hash {
    digest_of_commitments(&field_commitments_of(fields, openings))
}

/// The 22 field commitments of a step (revealed fields committed from
/// their values, hidden ones as given).
pub fn field_commitments(step: &Step, openings: &Openings) -> [Hash; FIELD_COUNT] {
    field_commitments_of(&StepFields::of(step), openings)
}

/// [`field_commitments`] from borrowed values.
pub fn field_commitments_of(fields: &StepFields<'_>, openings: &Openings) -> [Hash; FIELD_COUNT] {
    thread_local! {
        /// The framing buffer of this thread's commitments, kept between
        /// steps: growing one from empty for every long content cost a
        /// few percent of a full verification.
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    /// Larger buffers are not kept (one huge field must not pin its
    /// memory on the thread).
    const KEPT: usize = 64 * 1024;
    let commit = |scratch: &mut Vec<u8>| {
        let commitments = commitments_in(scratch, fields, openings);
        if scratch.capacity() > KEPT {
            *scratch = Vec::new();
        }
        commitments
    };
    SCRATCH
        .try_with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => commit(&mut scratch),
            Err(_) => commit(&mut Vec::new()),
        })
        .unwrap_or_else(|_| commit(&mut Vec::new()))
}

/// [`field_commitments`] framing each field in `scratch`: the value is
/// written in place after the salt (`frame("cairn/v2/field"; salt,
/// value)`, as [`commit_field`] frames it, without copying the value).
fn commitments_in(
    scratch: &mut Vec<u8>,
    fields: &StepFields<'_>,
    openings: &Openings,
) -> [Hash; FIELD_COUNT] {
    FIELDS.map(|field| match openings.get(field) {
        Opening::Revealed(salt) => {
            scratch.clear();
            scratch.push(FIELD_TAG.len() as u8);
            scratch.extend_from_slice(FIELD_TAG.as_bytes());
            scratch.extend_from_slice(&(salt.len() as u32).to_be_bytes());
            scratch.extend_from_slice(salt);
            let length_at = scratch.len();
            scratch.extend_from_slice(&[0; 4]);
            fields.write(field, scratch);
            let length = u32::try_from(scratch.len() - length_at - 4)
                .expect("field values are smaller than 4 GiB");
            scratch[length_at..length_at + 4].copy_from_slice(&length.to_be_bytes());
            Hash::sha256_padding_in_place(scratch)
        }
        Opening::Hidden(commitment) => *commitment,
    })
}

/// A value the sequencer assigns to a step once it knows the step's
/// place: its index in the session and, if the writer's clock broke the
/// time rules, its `created_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assigned {
    /// The step's `step_index`.
    StepIndex(u64),
    /// The step's `created_at`.
    CreatedAt(Timestamp),
}

impl Assigned {
    /// The field the value belongs to.
    pub fn field(self) -> Field {
        match self {
            Assigned::StepIndex(_) => Field::StepIndex,
            Assigned::CreatedAt(_) => Field::CreatedAt,
        }
    }

    /// Appends the value's canonical JSON (what [`write_field_value`]
    /// writes for its field).
    fn write(self, out: &mut Vec<u8>) {
        match self {
            Assigned::StepIndex(index) => jcs::write_u64(out, index),
            Assigned::CreatedAt(at) => {
                out.push(b'"');
                out.extend_from_slice(&at.canonical_bytes());
                out.push(b'"');
            }
        }
    }
}

/// Recommits one field after the sequencer assigned its value (the other
/// 20 commitments were computed before the step was sequenced, and the
/// step itself is left as the writer sent it).
pub fn recommit_assigned(
    commitments: &mut [Hash; FIELD_COUNT],
    openings: &Openings,
    assigned: Assigned,
) {
    let field = assigned.field();
    if let Opening::Revealed(salt) = openings.get(field) {
        let mut value = Vec::with_capacity(32);
        assigned.write(&mut value);
        commitments[field.position()] = commit_field(salt, &value);
    }
}

/// The digest over the 22 commitments in field order.
pub fn digest_of_commitments(commitments: &[Hash; FIELD_COUNT]) -> Hash {
    const TAG: &[u8] = b"cairn/v2/step";
    const LEN: usize = 1 + TAG.len() + FIELD_COUNT * 36;
    // The digest frame has a fixed size: build it on the stack.
    let mut frame = [0u8; LEN];
    frame[0] = TAG.len() as u8;
    frame[1..1 + TAG.len()].copy_from_slice(TAG);
    for (i, commitment) in commitments.iter().enumerate() {
        let at = 1 + TAG.len() + i * 36;
        frame[at..at + 4].copy_from_slice(&32u32.to_be_bytes());
        frame[at + 4..at + 36].copy_from_slice(&commitment.0);
    }
    Hash::sha256(&frame)
}

/// `SHA-256(frame("cairn/v2/chain"; prev, digest, u64be(step_index), created_at))`.
pub fn chain_hash(prev: &Hash, digest: &Hash, step_index: u64, created_at: Timestamp) -> Hash {
    const TAG: &[u8] = b"cairn/v2/chain";
    // Fixed layout (130 bytes), built on the stack: this is the per-link
    // cost of verification.
    let mut frame = [0u8; 1 + TAG.len() + (4 + 32) * 2 + 4 + 8 + 4 + 27];
    frame[0] = TAG.len() as u8;
    let mut at = 1 + TAG.len();
    frame[1..at].copy_from_slice(TAG);
    for part in [
        &prev.0[..],
        &digest.0[..],
        &step_index.to_be_bytes()[..],
        &created_at.canonical_bytes()[..],
    ] {
        frame[at..at + 4].copy_from_slice(&(part.len() as u32).to_be_bytes());
        frame[at + 4..at + 4 + part.len()].copy_from_slice(part);
        at += 4 + part.len();
    }
    Hash::sha256(&frame)
}

/// The canonical JSON view of a session header, the genesis input.
pub fn header_view(header: &SessionHeader) -> Vec<u8> {
    let view = serde_json::json!({
        "org_id": header.org_id,
        "session_id": header.session_id,
        "agent_id": header.agent_id,
        "started_at": header.started_at.to_string(),
        "caller": header.caller,
        "profile": header.profile.as_str(),
        "predecessor": header.predecessor.map(|h| h.to_hex()),
        "full_consent": header.full_consent,
        "max_clock_skew_s": header.max_clock_skew_s,
    });
    jcs::to_vec(&view)
}

/// The genesis hash of a session: the `prev_hash` of its step 0.
pub fn genesis_hash(header: &SessionHeader) -> Hash {
    Framer::new("cairn/v2/genesis")
        .part(&header_view(header))
        .finish()
}

/// Leaf data of a step in its session's seal tree.
pub fn session_leaf_data(step_index: u64, chain_hash: &Hash) -> Vec<u8> {
    frame_bytes(
        "cairn/v2/session-leaf",
        &[&step_index.to_be_bytes(), &chain_hash.0],
    )
}

/// An agent's Ed25519 signature over a step digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSignature {
    /// `agent-` and 12 hex digits of SHA-256 of the public key (seed 004).
    pub key_id: String,
    /// The 64-byte Ed25519 signature.
    pub signature: [u8; 64],
}

/// The bytes an agent signs for a step: `frame("cairn/v2/step-signature"; digest)`.
pub fn signed_step_message(digest: &Hash) -> Vec<u8> {
    frame_bytes("cairn/v2/step-signature", &[&digest.0])
}

/// Seed 004's key id of an agent key: `agent-` + first 12 hex digits of
/// SHA-256 of the 32-byte public key.
pub fn agent_key_id(key: &VerifyingKey) -> String {
    let hex = Hash::sha256(key.as_bytes()).to_hex();
    format!("agent-{}", &hex[..12])
}

/// Checks an agent signature over `digest`.
pub fn verify_agent_signature(key: &VerifyingKey, digest: &Hash, signature: &[u8; 64]) -> bool {
    let sig = ed25519_dalek::Signature::from_bytes(signature);
    key.verify_strict(&signed_step_message(digest), &sig)
        .is_ok()
}

/// A sequenced step: the step, how each field is disclosed, its digest and
/// chain hashes, an optional agent signature and the two mutable flags.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    /// The fields. A hidden field's value here is meaningless and blank.
    pub step: Step,
    /// Per-field salt or commitment.
    pub openings: Openings,
    /// The step digest as recorded.
    pub digest: Hash,
    /// The previous chain hash (the genesis for step 0), as recorded.
    pub prev_hash: Hash,
    /// This step's chain hash (seed 000 `current_hash`), as recorded.
    pub hash: Hash,
    /// The agent's signature over the digest, if it signed.
    pub signature: Option<AgentSignature>,
    /// Outside the digest: whether the step has an embedding.
    pub has_embedding: bool,
    /// Outside the digest: whether payload fields were erased.
    pub erased: bool,
}

/// A field that cannot be hidden was asked to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("field {} is always disclosed and cannot be hidden", .0.name())]
pub struct CannotHide(pub Field);

impl StepRecord {
    /// Computes digest and chain hash for a step about to be appended after
    /// `prev_hash`, with salts derived from the record's secret `seed`.
    pub fn new(step: Step, seed: &[u8; 32], prev_hash: Hash) -> StepRecord {
        let openings = Openings::from_seed(seed);
        let digest = step_digest(&step, &openings);
        let hash = chain_hash(&prev_hash, &digest, step.step_index, step.created_at);
        StepRecord {
            step,
            openings,
            digest,
            prev_hash,
            hash,
            signature: None,
            has_embedding: false,
            erased: false,
        }
    }

    /// Recomputes the digest from fields and openings.
    pub fn recompute_digest(&self) -> Hash {
        step_digest(&self.step, &self.openings)
    }

    /// Replaces a field's value by its commitment and blanks the value, as
    /// an export at a lower detail level or an erasure does. Hiding a hidden
    /// field does nothing.
    pub fn hide(&mut self, field: Field) -> Result<(), CannotHide> {
        if field.always_disclosed() {
            return Err(CannotHide(field));
        }
        let Opening::Revealed(salt) = *self.openings.get(field) else {
            return Ok(());
        };
        let mut scratch = Vec::new();
        write_field_value(&self.step, field, &mut scratch);
        self.openings.0[field.position()] = Opening::Hidden(commit_field(&salt, &scratch));
        let step = &mut self.step;
        match field {
            Field::TraceId => step.trace_id.clear(),
            Field::Content => step.content = None,
            Field::InputData => step.input = None,
            Field::OutputData => step.output = None,
            Field::Confidence => step.confidence = None,
            Field::DurationMs => step.duration_ms = None,
            Field::TokenCount => step.token_count = None,
            Field::Model => step.model = None,
            Field::Metadata => step.metadata = None,
            Field::TurnId => step.turn_id = None,
            Field::TurnStep => step.turn_step = None,
            Field::TaskId => step.task_id = None,
            Field::Links => step.links = Default::default(),
            Field::OrgId
            | Field::AgentId
            | Field::SessionId
            | Field::StepIndex
            | Field::StepType
            | Field::StepTypeOriginal
            | Field::CreatedAt
            | Field::Status
            | Field::SignerKeyId => {}
        }
        Ok(())
    }

    /// Whether a field is disclosed.
    pub fn is_revealed(&self, field: Field) -> bool {
        matches!(self.openings.get(field), Opening::Revealed(_))
    }

    /// The first hidden field that nevertheless carries a value. Such a
    /// value is covered by nothing (the commitment stands in for the
    /// field), so a verifier must refuse it rather than show it: otherwise
    /// anything could be written into an erased field.
    pub fn hidden_field_with_value(&self) -> Option<Field> {
        let s = &self.step;
        FIELDS.into_iter().find(|&field| {
            !self.is_revealed(field)
                && match field {
                    Field::TraceId => !s.trace_id.is_empty(),
                    Field::Content => s.content.is_some(),
                    Field::InputData => s.input.is_some(),
                    Field::OutputData => s.output.is_some(),
                    Field::Confidence => s.confidence.is_some(),
                    Field::DurationMs => s.duration_ms.is_some(),
                    Field::TokenCount => s.token_count.is_some(),
                    Field::Model => s.model.is_some(),
                    Field::Metadata => s.metadata.is_some(),
                    Field::TurnId => s.turn_id.is_some(),
                    Field::TurnStep => s.turn_step.is_some(),
                    Field::TaskId => s.task_id.is_some(),
                    Field::Links => !s.links.is_empty(),
                    // Never hidden (the verifier refuses that first).
                    Field::OrgId
                    | Field::AgentId
                    | Field::SessionId
                    | Field::StepIndex
                    | Field::StepType
                    | Field::StepTypeOriginal
                    | Field::CreatedAt
                    | Field::Status
                    | Field::SignerKeyId => false,
                }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_parses_from_its_name() {
        for field in FIELDS {
            assert_eq!(Field::from_name(field.name()), Some(field));
        }
        assert_eq!(Field::from_name("contents"), None);
        assert_eq!(Field::from_name(""), None);
    }
}
