//! Names a request looks up, checked for the one byte no store can hold
//! before any look-up: a NUL in a key would fail the statement of the
//! whole batch the request is in, on PostgreSQL.

use crate::{NewStep, Refusal, WriteRequest};

impl WriteRequest {
    /// The refusal of a request naming something to look up (an org, a
    /// session, a step, a record, an agent, a key) by a text that holds the
    /// NUL character. No such name can be stored (PostgreSQL's text cannot
    /// hold NUL), and a look-up of it would fail the statement of the whole
    /// batch the request is in: the engine refuses it before any look-up,
    /// as the id rules would (`malformed_id`; a step of a turn or of many
    /// steps by its position).
    pub(crate) fn key_with_nul(&self) -> Option<Refusal> {
        fn nul(field: &'static str, value: &str) -> Option<Refusal> {
            value.contains('\0').then(|| {
                Refusal::Invalid(cairn_core::record::RecordError::MalformedId {
                    field,
                    value: value.chars().take(80).collect(),
                })
            })
        }
        fn any(keys: &[(&'static str, Option<&str>)]) -> Option<Refusal> {
            keys.iter()
                .find_map(|(field, value)| value.and_then(|v| nul(field, v)))
        }
        fn step_keys(s: &NewStep) -> Option<Refusal> {
            let links = s
                .links
                .entries()
                .map(|(name, value)| (cairn_core::record::link_field_name(name), value));
            any(&[
                ("org_id", Some(s.org_id.as_str())),
                ("session_id", Some(s.session_id.as_str())),
                ("agent_id", Some(s.agent_id.as_str())),
                ("trace_id", s.trace_id.as_deref()),
                ("turn_id", s.turn_id.as_deref()),
                ("task_id", s.task_id.as_deref()),
            ])
            .or_else(|| any(&links))
        }
        match self {
            // Validated whole by `prepare_step` before any look-up: before
            // the queue, or first thing in the batch.
            WriteRequest::Step(_) | WriteRequest::Prepared(_) => None,
            WriteRequest::Steps(steps) | WriteRequest::Turn { steps, .. } => {
                steps.iter().enumerate().find_map(|(index, s)| {
                    step_keys(s).map(|refusal| Refusal::StepOfMany {
                        index,
                        count: steps.len(),
                        refusal: Box::new(refusal),
                    })
                })
            }
            WriteRequest::StartSession(s) => any(&[
                ("org_id", Some(s.org_id.as_str())),
                ("session_id", Some(s.session_id.as_str())),
                ("agent_id", Some(s.agent_id.as_str())),
                ("predecessor_session", s.predecessor_session.as_deref()),
            ]),
            WriteRequest::Seal {
                org_id, session_id, ..
            } => any(&[("org_id", Some(org_id)), ("session_id", Some(session_id))]),
            WriteRequest::Review {
                org_id, trace_id, ..
            }
            | WriteRequest::Erase {
                org_id, trace_id, ..
            } => any(&[("org_id", Some(org_id)), ("trace_id", Some(trace_id))]),
            WriteRequest::ImportTrace {
                org_id, session_id, ..
            } => any(&[
                ("org_id", Some(org_id)),
                ("session_id", session_id.as_deref()),
            ]),
            WriteRequest::AuditEvent {
                org_id,
                event_id,
                session_id,
                ..
            } => any(&[
                ("org_id", Some(org_id)),
                ("event_id", event_id.as_deref()),
                ("session_id", session_id.as_deref()),
            ]),
            WriteRequest::RegisterKey {
                org_id, agent_id, ..
            } => any(&[("org_id", Some(org_id)), ("agent_id", Some(agent_id))]),
            WriteRequest::RevokeKey {
                org_id,
                agent_id,
                key_id,
                ..
            } => any(&[
                ("org_id", Some(org_id)),
                ("agent_id", Some(agent_id)),
                ("key_id", Some(key_id)),
            ]),
            WriteRequest::RotateKey {
                org_id,
                agent_id,
                old_key_id,
                ..
            } => any(&[
                ("org_id", Some(org_id)),
                ("agent_id", Some(agent_id)),
                ("old_key_id", Some(old_key_id)),
            ]),
            WriteRequest::LogKey { org_id, .. }
            | WriteRequest::Checkpoint { org_id }
            | WriteRequest::Retention { org_id, .. } => any(&[("org_id", Some(org_id))]),
        }
    }
}
