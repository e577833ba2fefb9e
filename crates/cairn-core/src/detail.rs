//! Seed 004's detail levels: how much of a step a reader may see.
//!
//! Every field has the least level at which it is shown:
//!
//! | level | adds | fields |
//! |---|---|---|
//! | `generic` | kinds, numbers, timings, hashes | `org_id`, `agent_id`, `session_id`, `step_index`, `step_type`, `step_type_original`, `confidence`, `duration_ms`, `token_count`, `created_at`, `turn_step`, `status`, `signer_key_id`; and every record's digest, chain hash and log position |
//! | `detailed` | identifiers, tool names, models, lists | `trace_id`, `model`, `turn_id`, `task_id`, `links` |
//! | `full` | content | `content`, `input_data`, `output_data`, `metadata` |
//!
//! A record shown at a lower level has its other fields replaced by their
//! commitments ([`StepRecord::hide`]): it still verifies, and reveals
//! nothing of what it hides. The fields a verifier needs to place a record
//! (org, agent, session, index, time, kind, status, signer) are all
//! `generic`; the agent is also named by its session's header, which every
//! bundle of the session shows.

use crate::commit::{CannotHide, FIELDS, Field, StepRecord};
use std::fmt;

/// How much of each step is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DetailLevel {
    /// Kinds, numbers, timings and hashes.
    Generic,
    /// Plus identifiers, tool names, models and lists.
    Detailed,
    /// Everything, content included.
    Full,
}

impl DetailLevel {
    /// `generic`, `detailed` or `full`.
    pub fn as_str(self) -> &'static str {
        match self {
            DetailLevel::Generic => "generic",
            DetailLevel::Detailed => "detailed",
            DetailLevel::Full => "full",
        }
    }

    /// Parses `generic`, `detailed`, `full` (and seed 004's `full_traces`).
    pub fn parse(text: &str) -> Option<DetailLevel> {
        match text {
            "generic" => Some(DetailLevel::Generic),
            "detailed" => Some(DetailLevel::Detailed),
            "full" | "full_traces" => Some(DetailLevel::Full),
            _ => None,
        }
    }

    /// The least level at which `field` is shown.
    pub fn of(field: Field) -> DetailLevel {
        match field {
            Field::TraceId | Field::Model | Field::TurnId | Field::TaskId | Field::Links => {
                DetailLevel::Detailed
            }
            Field::Content | Field::InputData | Field::OutputData | Field::Metadata => {
                DetailLevel::Full
            }
            Field::OrgId
            | Field::AgentId
            | Field::SessionId
            | Field::StepIndex
            | Field::StepType
            | Field::StepTypeOriginal
            | Field::Confidence
            | Field::DurationMs
            | Field::TokenCount
            | Field::CreatedAt
            | Field::TurnStep
            | Field::Status
            | Field::SignerKeyId => DetailLevel::Generic,
        }
    }

    /// The fields hidden at this level.
    pub fn hidden_fields(self) -> impl Iterator<Item = Field> {
        FIELDS
            .into_iter()
            .filter(move |&f| DetailLevel::of(f) > self)
    }
}

impl fmt::Display for DetailLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl StepRecord {
    /// Hides every field above `level`. Fields already hidden stay hidden.
    pub fn redact(&mut self, level: DetailLevel) -> Result<(), CannotHide> {
        for field in level.hidden_fields() {
            self.hide(field)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_nest_and_never_hide_what_places_a_record() {
        let generic: Vec<Field> = DetailLevel::Generic.hidden_fields().collect();
        let detailed: Vec<Field> = DetailLevel::Detailed.hidden_fields().collect();
        assert_eq!(
            detailed,
            [
                Field::Content,
                Field::InputData,
                Field::OutputData,
                Field::Metadata
            ]
        );
        assert!(detailed.iter().all(|f| generic.contains(f)));
        assert_eq!(generic.len(), 9);
        assert_eq!(DetailLevel::Full.hidden_fields().count(), 0);
        for f in FIELDS {
            if f.always_disclosed() {
                assert_eq!(DetailLevel::of(f), DetailLevel::Generic, "{}", f.name());
            }
        }
        assert_eq!(DetailLevel::parse("full_traces"), Some(DetailLevel::Full));
        assert!(DetailLevel::Generic < DetailLevel::Full);
    }
}
