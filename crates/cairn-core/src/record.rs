//! The record model: steps, session headers, and the org log's operational
//! records, with validation.
//!
//! These are core types, not wire types: the server and the CLI convert
//! their JSON bodies into them at the edge and validate with
//! [`Step::validate`] before anything is sequenced.

use crate::hash::Hash;
use crate::kind::StepKind;
use crate::time::Timestamp;
use serde_json::Value;

mod tokens;
mod validation;
pub use tokens::{looks_like_an_api_key, may_hold_an_api_key, percent_decoded, refuse_api_key_id};
pub use validation::{
    Limits, MAX_ID_LEN, MAX_JSON_DEPTH, MAX_KIND_LABEL_LEN, MAX_SAFE_INTEGER, RecordError,
    is_dot_segment, refuse_dot_segment, validate_id, validate_json, validate_path_id,
};

/// Whether a step is in good standing or flagged for human review (seed
/// 003's review queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Status {
    /// Recorded normally.
    #[default]
    Ok,
    /// Flagged for review.
    Flagged,
}

impl Status {
    /// `"ok"` or `"flagged"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Flagged => "flagged",
        }
    }

    /// Parses `"ok"` or `"flagged"`.
    pub fn parse(text: &str) -> Option<Status> {
        match text {
            "ok" => Some(Status::Ok),
            "flagged" => Some(Status::Flagged),
            _ => None,
        }
    }
}

/// Cross-references from a step to other records (seeds 001 and 002).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Links {
    /// The tool call this step is about.
    pub tool_call: Option<String>,
    /// The policy decision that influenced it.
    pub policy_decision: Option<String>,
    /// The pending approval request.
    pub approval_request: Option<String>,
    /// The audit event (per-tool-call record) it rests on.
    pub audit_event: Option<String>,
    /// The trace id of the step this one corrects.
    pub corrects: Option<String>,
    /// The trace id of a parent step (sub-steps of a plan).
    pub parent: Option<String>,
}

impl Links {
    /// The links as `(name, value)` pairs in canonical (sorted) order.
    pub fn entries(&self) -> [(&'static str, Option<&str>); 6] {
        [
            ("approval_request", self.approval_request.as_deref()),
            ("audit_event", self.audit_event.as_deref()),
            ("corrects", self.corrects.as_deref()),
            ("parent", self.parent.as_deref()),
            ("policy_decision", self.policy_decision.as_deref()),
            ("tool_call", self.tool_call.as_deref()),
        ]
    }

    /// True when no link is set.
    pub fn is_empty(&self) -> bool {
        self.entries().iter().all(|(_, v)| v.is_none())
    }

    /// Sets the link called `name`; an unknown name is an error naming
    /// the known ones.
    pub fn set(&mut self, name: &str, value: String) -> Result<(), String> {
        let slot = match name {
            "tool_call" => &mut self.tool_call,
            "policy_decision" => &mut self.policy_decision,
            "approval_request" => &mut self.approval_request,
            "audit_event" => &mut self.audit_event,
            "corrects" => &mut self.corrects,
            "parent" => &mut self.parent,
            other => {
                return Err(format!(
                    "unknown link {other:?}; links are tool_call, policy_decision, approval_request, audit_event, corrects, parent"
                ));
            }
        };
        *slot = Some(value);
        Ok(())
    }

    /// Links from a JSON object of strings.
    pub fn from_json(value: &Value) -> Result<Links, String> {
        let map = value.as_object().ok_or("links must be an object")?;
        let mut links = Links::default();
        for (name, v) in map {
            let v = v
                .as_str()
                .ok_or_else(|| format!("links.{name} must be a string"))?;
            links.set(name, v.to_owned())?;
        }
        Ok(links)
    }
}

/// One reasoning step: every field of seed 000's 18-field schema that is
/// fixed at write time, plus turn, task, links and status.
///
/// The chain fields (`prev_hash`, `current_hash`), the digest and the
/// mutable flags (`has_embedding`, erasure) live in
/// [`crate::commit::StepRecord`], which wraps a step once it is sequenced.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Unique id of this step (seed 000 `trace_id`; a UUID in practice).
    pub trace_id: String,
    /// The org (tenant).
    pub org_id: String,
    /// The agent that produced the step (or its hashed id).
    pub agent_id: String,
    /// The session (reasoning run) it belongs to.
    pub session_id: String,
    /// 0-based position in the session's chain.
    pub step_index: u64,
    /// Canonical kind.
    pub kind: StepKind,
    /// The kind exactly as the caller spelled it.
    pub kind_label: String,
    /// The reasoning text.
    pub content: Option<String>,
    /// Input to the step (tool arguments, observations).
    pub input: Option<Value>,
    /// Output of the step (tool results, decisions).
    pub output: Option<Value>,
    /// Self-reported confidence, 0.0 to 1.0.
    pub confidence: Option<f64>,
    /// Duration in milliseconds.
    pub duration_ms: Option<u64>,
    /// Tokens used.
    pub token_count: Option<u64>,
    /// Model identifier.
    pub model: Option<String>,
    /// Arbitrary additional context.
    pub metadata: Option<Value>,
    /// When the step was recorded (UTC, microseconds).
    pub created_at: Timestamp,
    /// The turn it belongs to (seed 002).
    pub turn_id: Option<String>,
    /// 0-based position within its turn (seed 002 `step_number`).
    pub turn_step: Option<u64>,
    /// The task it belongs to (seed 001).
    pub task_id: Option<String>,
    /// Cross-references.
    pub links: Links,
    /// `ok` or `flagged`.
    pub status: Status,
    /// The agent key (`agent-` + 12 hex digits) the agent declares it
    /// signed this step's digest with; the signature itself is carried
    /// beside the record.
    pub signer_key_id: Option<String>,
}

impl Step {
    /// What a step costs an answer that holds steps whole besides the
    /// values [`Step::answer_bytes`] counts (ids, times, hashes).
    pub const ANSWER_STEP_BYTES: usize = 256;

    /// What this step takes in an answer that holds steps whole (a held
    /// replay, a search's hits, a review queue), as the server and the
    /// store count it against their bounds: its content as a JSON string
    /// (escaped: a control character takes six bytes), its input, output
    /// and metadata as JSON (those present), and
    /// [`Step::ANSWER_STEP_BYTES`].
    pub fn answer_bytes(&self) -> usize {
        self.counted(crate::json::json_len)
    }

    /// What this step holds in an answer that keeps it parsed until the
    /// answer is written (a search's hits, a review queue's items): as
    /// [`Step::answer_bytes`], but each of its input, output and metadata
    /// counted as what it takes parsed ([`crate::json::approx_memory`])
    /// where that is more than its JSON: a payload of many small values
    /// (an array of numbers) takes tens of times its JSON once parsed.
    pub fn held_bytes(&self) -> usize {
        self.counted(|v| crate::json::json_len(v).max(crate::json::approx_memory(v)))
    }

    /// [`Step::ANSWER_STEP_BYTES`], the content as a JSON string, and each
    /// of input, output and metadata present as `value` counts it.
    fn counted(&self, value: impl Fn(&Value) -> usize) -> usize {
        let values: usize = [&self.input, &self.output, &self.metadata]
            .into_iter()
            .flatten()
            .map(value)
            .sum();
        Self::ANSWER_STEP_BYTES + self.content.as_ref().map_or(0, crate::json::json_len) + values
    }

    /// Blanks what a log verifier given the step's recomputed digest never
    /// reads (`verify::LogVerifier::push_with_digest`): `step_type_original`,
    /// `content`, `input_data`, `output_data`, `confidence`, `duration_ms`,
    /// `token_count`, `model`, `metadata`, the turn, the task and the
    /// links. A store verifier hands such steps to the in-order checks.
    pub fn blank_payload(&mut self) {
        self.kind_label.clear();
        (self.content, self.input, self.output, self.metadata) = (None, None, None, None);
        (self.confidence, self.duration_ms, self.token_count) = (None, None, None);
        (self.model, self.turn_id, self.turn_step, self.task_id) = (None, None, None, None);
        self.links = Links::default();
    }

    /// A step with the required fields and every optional field empty. The
    /// kind is parsed from `kind_label`; an unknown label is an error.
    pub fn new(
        trace_id: impl Into<String>,
        org_id: impl Into<String>,
        agent_id: impl Into<String>,
        session_id: impl Into<String>,
        step_index: u64,
        kind_label: &str,
        created_at: Timestamp,
    ) -> Result<Step, RecordError> {
        if kind_label.len() > MAX_KIND_LABEL_LEN {
            return Err(RecordError::KindLabelTooLong {
                len: kind_label.len(),
            });
        }
        let kind = StepKind::parse(kind_label).ok_or_else(|| RecordError::UnknownKind {
            label: kind_label.chars().take(80).collect(),
        })?;
        Ok(Step {
            trace_id: trace_id.into(),
            org_id: org_id.into(),
            agent_id: agent_id.into(),
            session_id: session_id.into(),
            step_index,
            kind,
            kind_label: kind_label.to_owned(),
            content: None,
            input: None,
            output: None,
            confidence: None,
            duration_ms: None,
            token_count: None,
            model: None,
            metadata: None,
            created_at,
            turn_id: None,
            turn_step: None,
            task_id: None,
            links: Links::default(),
            status: Status::Ok,
            signer_key_id: None,
        })
    }

    /// The first integer field beyond 2^53 − 1, if any. A bundle line
    /// carries these as JSON numbers, which a verifier reads exactly only
    /// up to 2^53 − 1 (FORMAT.md 2.2): a larger one would make every export
    /// of the step fail verification for good.
    pub fn integer_beyond_safe(&self) -> Option<&'static str> {
        [
            ("duration_ms", self.duration_ms),
            ("token_count", self.token_count),
            ("turn_step", self.turn_step),
        ]
        .into_iter()
        .find(|(_, value)| value.is_some_and(|v| v > MAX_SAFE_INTEGER))
        .map(|(field, _)| field)
    }

    /// Checks every field against the record rules and `limits`.
    pub fn validate(&self, limits: &Limits) -> Result<(), RecordError> {
        validate_id("trace_id", &self.trace_id)?;
        validate_id("org_id", &self.org_id)?;
        validate_id("agent_id", &self.agent_id)?;
        validate_id("session_id", &self.session_id)?;
        for (field, value) in [
            ("turn_id", &self.turn_id),
            ("task_id", &self.task_id),
            ("model", &self.model),
            ("signer_key_id", &self.signer_key_id),
        ] {
            if let Some(value) = value {
                if field == "model" {
                    // Model names are free text but bounded and single-line.
                    if value.is_empty() || value.len() > MAX_ID_LEN || value.contains('\n') {
                        return Err(RecordError::MalformedId {
                            field,
                            value: value.chars().take(80).collect(),
                        });
                    }
                } else {
                    validate_id(field, value)?;
                }
            }
        }
        for (name, value) in self.links.entries() {
            if let Some(value) = value {
                validate_id(link_field_name(name), value)?;
            }
        }
        if self.kind_label.len() > MAX_KIND_LABEL_LEN {
            return Err(RecordError::KindLabelTooLong {
                len: self.kind_label.len(),
            });
        }
        if StepKind::parse(&self.kind_label) != Some(self.kind) {
            return Err(RecordError::UnknownKind {
                label: self.kind_label.chars().take(80).collect(),
            });
        }
        if let Some(c) = self.confidence
            && !(0.0..=1.0).contains(&c)
        {
            return Err(RecordError::ConfidenceOutOfRange { value: c });
        }
        if let Some(field) = self.integer_beyond_safe() {
            return Err(RecordError::IntegerTooLarge { field });
        }
        for (field, text) in [("content", &self.content), ("model", &self.model)] {
            if text.as_deref().is_some_and(|t| t.contains('\0')) {
                return Err(RecordError::NulCharacter { field });
            }
        }
        if let Some(content) = &self.content
            && content.len() > limits.max_content_bytes
        {
            return Err(RecordError::ContentTooLong {
                len: content.len(),
                max: limits.max_content_bytes,
            });
        }
        for (field, value) in [
            ("input_data", &self.input),
            ("output_data", &self.output),
            ("metadata", &self.metadata),
        ] {
            if let Some(value) = value {
                validate_json(field, value, limits.max_payload_bytes)?;
            }
        }
        Ok(())
    }
}

/// The input field of link `name` (`links.parent`, ...), as refusals
/// name it.
pub fn link_field_name(name: &str) -> &'static str {
    match name {
        "approval_request" => "links.approval_request",
        "audit_event" => "links.audit_event",
        "corrects" => "links.corrects",
        "parent" => "links.parent",
        "policy_decision" => "links.policy_decision",
        _ => "links.tool_call",
    }
}

/// How strictly a session checks its steps' kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Profile {
    /// Any kind of the vocabulary.
    #[default]
    Standard,
    /// Seed 001's decision trail: only plan, analysis, decision and
    /// reflection; a reflection closes the task.
    Strict,
}

impl Profile {
    /// `"standard"` or `"strict"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Standard => "standard",
            Profile::Strict => "strict",
        }
    }

    /// Parses `"standard"` or `"strict"`.
    pub fn parse(text: &str) -> Option<Profile> {
        match text {
            "standard" => Some(Profile::Standard),
            "strict" => Some(Profile::Strict),
            _ => None,
        }
    }

    /// Whether a step of `kind` may be recorded in a session of this
    /// profile.
    pub fn check(self, kind: StepKind) -> Result<(), RecordError> {
        if self == Profile::Strict && !kind.is_decision_trail_type() {
            return Err(RecordError::NotInStrictProfile { kind });
        }
        Ok(())
    }
}

/// What a session is derived from: its genesis hash is computed from these
/// fields (see [`crate::commit::genesis_hash`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionHeader {
    /// The org.
    pub org_id: String,
    /// The session id, unique within the org.
    pub session_id: String,
    /// The agent running the session (or its hashed id).
    pub agent_id: String,
    /// When the session started.
    pub started_at: Timestamp,
    /// Who opened it: the API key id or local user, as the server saw it.
    pub caller: String,
    /// Kind checking profile.
    pub profile: Profile,
    /// Final chain hash of the predecessor session, for cross-session
    /// continuity (seed 001).
    pub predecessor: Option<Hash>,
    /// Whether the user consented to `full` detail exports (seed 004).
    pub full_consent: bool,
    /// How far, in seconds, a step's `created_at` may lie from the time the
    /// server logged it (`docs/FORMAT.md` 5.4): fixed when the session
    /// starts, so a verifier checks every step against the rule the server
    /// applied.
    pub max_clock_skew_s: u64,
}

/// The clock skew a session allows unless the server is configured
/// otherwise: five minutes.
pub const DEFAULT_MAX_CLOCK_SKEW_S: u64 = 300;

impl SessionHeader {
    /// Checks ids and the caller string.
    pub fn validate(&self) -> Result<(), RecordError> {
        validate_id("org_id", &self.org_id)?;
        validate_id("session_id", &self.session_id)?;
        validate_id("agent_id", &self.agent_id)?;
        validate_id("caller", &self.caller)?;
        Ok(())
    }

    /// [`SessionHeader::validate`] for a session being opened now: also
    /// refuses a session id of `.` or `..`, which no URL path can name.
    /// An ingest rule only: a log holding such a session still verifies.
    pub fn validate_new(&self) -> Result<(), RecordError> {
        self.validate()?;
        refuse_api_key_id("session_id", &self.session_id)?;
        refuse_api_key_id("agent_id", &self.agent_id)?;
        refuse_dot_segment("session_id", &self.session_id)
    }
}

/// Seed 004's hashed agent id: the first 16 hex digits of SHA-256 of the
/// agent's name, recorded instead of the name by sessions that must not
/// reveal it.
pub fn hashed_agent_id(agent: &str) -> String {
    let hex = crate::Hash::sha256(agent.as_bytes()).to_hex();
    hex[..16].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A step is counted in an answer as its JSON is written: its content
    /// escaped (a control character is six bytes), its values as JSON.
    #[test]
    fn a_step_is_counted_as_its_json_is_written() {
        let t = Timestamp::from_micros(1).unwrap();
        let mut step = Step::new("t", "acme", "a", "s", 0, "plan", t).unwrap();
        assert_eq!(step.answer_bytes(), Step::ANSWER_STEP_BYTES);
        step.content = Some("\u{1}".repeat(10) + "é\"");
        // Quotes, ten \u0001, two bytes of é, and \".
        assert_eq!(
            step.answer_bytes(),
            Step::ANSWER_STEP_BYTES + 2 + 60 + 2 + 2
        );
        step.input = Some(json!({"k": [1, 2]}));
        assert_eq!(step.answer_bytes(), Step::ANSWER_STEP_BYTES + 66 + 11);
        // Held parsed, the small array counts what it takes in memory.
        let parsed = crate::json::approx_memory(step.input.as_ref().unwrap());
        assert!(parsed > 11);
        assert_eq!(step.held_bytes(), Step::ANSWER_STEP_BYTES + 66 + parsed);
        // Prose takes about its JSON either way.
        step.input = Some(json!("a long text, one string ".repeat(100)));
        assert!(step.held_bytes() >= step.answer_bytes());
        assert!(step.held_bytes() < step.answer_bytes() + 64);
    }

    /// A new session may not be named `.` or `..` (no URL path names it);
    /// a header that already has such an id in a log still validates.
    #[test]
    fn a_new_session_is_not_named_by_a_dot_segment() {
        let header = |id: &str| SessionHeader {
            org_id: "acme".into(),
            session_id: id.into(),
            agent_id: "a".into(),
            started_at: Timestamp::from_micros(0).unwrap(),
            caller: "k".into(),
            profile: Profile::Standard,
            predecessor: None,
            full_consent: false,
            max_clock_skew_s: DEFAULT_MAX_CLOCK_SKEW_S,
        };
        for id in [".", ".."] {
            assert!(matches!(
                header(id).validate_new(),
                Err(RecordError::DotSegmentId { .. })
            ));
            assert!(header(id).validate().is_ok(), "{id} is an id in a log");
        }
        for id in ["...", "a.b", ".hidden", "s1"] {
            assert!(header(id).validate_new().is_ok(), "{id}");
        }
    }

    fn step() -> Step {
        let ts = Timestamp::from_micros(0).unwrap();
        Step::new("t-1", "acme", "analyst", "s-1", 0, "ToolCall", ts).unwrap()
    }

    #[test]
    fn a_plain_step_is_valid() {
        assert_eq!(step().validate(&Limits::default()), Ok(()));
        assert_eq!(step().kind, StepKind::ToolCall);
        assert_eq!(step().kind_label, "ToolCall");
    }

    #[test]
    fn a_step_type_label_is_bounded() {
        let ts = Timestamp::from_micros(0).unwrap();
        let long = format!("reasoning{}", "_".repeat(MAX_KIND_LABEL_LEN));
        assert_eq!(StepKind::parse(&long), Some(StepKind::Reasoning));
        assert_eq!(
            Step::new("t", "o", "a", "s", 0, &long, ts),
            Err(RecordError::KindLabelTooLong { len: long.len() })
        );
        let mut s = step();
        s.kind_label = long.clone();
        s.kind = StepKind::Reasoning;
        assert_eq!(
            s.validate(&Limits::default()),
            Err(RecordError::KindLabelTooLong { len: long.len() })
        );
        let longest = format!("reasoning{}", "_".repeat(MAX_KIND_LABEL_LEN - 9));
        assert!(Step::new("t", "o", "a", "s", 0, &longest, ts).is_ok());
    }

    #[test]
    fn each_rule_has_its_own_error() {
        let limits = Limits::default();
        let ts = Timestamp::from_micros(0).unwrap();
        assert!(matches!(
            Step::new("t", "acme", "a", "s", 0, "Informational", ts),
            Err(RecordError::UnknownKind { .. })
        ));
        for bad in [-0.01, 1.01, f64::NAN] {
            let mut s = step();
            s.confidence = Some(bad);
            assert!(matches!(
                s.validate(&limits),
                Err(RecordError::ConfidenceOutOfRange { .. })
            ));
        }
        let mut s = step();
        s.content = Some("x".repeat(65_537));
        assert_eq!(
            s.validate(&limits),
            Err(RecordError::ContentTooLong {
                len: 65_537,
                max: 65_536
            })
        );
        s.content = Some("x".repeat(65_536));
        assert_eq!(s.validate(&limits), Ok(()));
        // A member name serde_json reads as its marker, at any depth.
        let mut marked = step();
        marked.output = Some(serde_json::json!({"a": [{"$serde_json::private::RawValue": "1"}]}));
        assert!(matches!(
            marked.validate(&limits),
            Err(RecordError::ReservedMemberName {
                field: "output_data",
                ..
            })
        ));
        marked.output = Some(serde_json::json!({"$serde_json": 1}));
        assert_eq!(marked.validate(&limits), Ok(()));
        let tight = Limits {
            max_content_bytes: 10,
            ..limits
        };
        assert!(s.validate(&tight).is_err());

        for (field, value) in [
            ("session_id", "has space"),
            ("org_id", ""),
            ("trace_id", "a/b"),
        ] {
            let mut s = step();
            match field {
                "session_id" => s.session_id = value.into(),
                "org_id" => s.org_id = value.into(),
                _ => s.trace_id = value.into(),
            }
            assert_eq!(
                s.validate(&limits),
                Err(RecordError::MalformedId {
                    field,
                    value: value.into()
                })
            );
        }
        let mut s = step();
        s.session_id = "x".repeat(MAX_ID_LEN + 1);
        assert!(matches!(
            s.validate(&limits),
            Err(RecordError::MalformedId { .. })
        ));
        let mut s = step();
        s.links.corrects = Some("bad id".into());
        assert!(matches!(
            s.validate(&limits),
            Err(RecordError::MalformedId {
                field: "links.corrects",
                ..
            })
        ));
    }

    #[test]
    fn json_payloads_are_bounded() {
        let limits = Limits::default();
        let mut s = step();
        s.input = Some(json!({"n": 9_007_199_254_740_993u64}));
        assert_eq!(
            s.validate(&limits),
            Err(RecordError::UnsafeInteger {
                field: "input_data"
            })
        );
        s.input = Some(json!({"n": 9_007_199_254_740_991u64, "f": 1.5e300}));
        assert_eq!(s.validate(&limits), Ok(()));
        let mut deep = json!(1);
        for _ in 0..=MAX_JSON_DEPTH {
            deep = json!([deep]);
        }
        s.metadata = Some(deep);
        assert_eq!(
            s.validate(&limits),
            Err(RecordError::PayloadTooDeep { field: "metadata" })
        );
        s.metadata = None;
        s.output = Some(json!("y".repeat(300_000)));
        assert!(matches!(
            s.validate(&limits),
            Err(RecordError::PayloadTooLarge {
                field: "output_data",
                ..
            })
        ));
    }

    #[test]
    fn strict_profile_takes_only_the_four_record_types() {
        for kind in crate::kind::ALL_KINDS {
            let allowed = Profile::Strict.check(kind).is_ok();
            assert_eq!(
                allowed,
                matches!(
                    kind,
                    StepKind::Plan | StepKind::Analysis | StepKind::Decision | StepKind::Reflection
                ),
                "{kind}"
            );
            assert!(Profile::Standard.check(kind).is_ok());
        }
    }
}
