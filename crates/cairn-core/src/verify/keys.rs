//! Agent keys as the log records them: registration, revocation, and
//! which key may sign which record.

use super::{Check, Reason};
use crate::commit::{StepRecord, verify_agent_signature};
use crate::log::{KeyRegistration, KeyRevocation};
use ed25519_dalek::VerifyingKey;
use std::collections::HashMap;

/// One registered agent key and its history in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyState {
    agent_id: String,
    key: VerifyingKey,
    registered_seq: u64,
    revoked_seq: Option<u64>,
}

/// Agent public keys by key id: each bound to one agent for good, from the
/// position of its `key-registration` record until the position of its
/// `key-revocation` record, if any (`docs/FORMAT.md` 7.3).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentKeys {
    keys: HashMap<String, KeyState>,
}

impl AgentKeys {
    /// No keys.
    pub fn new() -> AgentKeys {
        AgentKeys::default()
    }

    /// Records a registration found at `seq`: its key id must be its key's,
    /// and a key id is registered once.
    pub fn register(&mut self, reg: &KeyRegistration, seq: u64) -> Check {
        if crate::commit::agent_key_id(&reg.public_key) != reg.key_id {
            return Err((
                Reason::MalformedRecord,
                format!("key id {} does not match the registered key", reg.key_id),
            ));
        }
        if let Some(existing) = self.keys.get(&reg.key_id) {
            return Err((
                Reason::DuplicateRecord,
                format!(
                    "key {} was registered at seq {} (for agent {}) already",
                    reg.key_id, existing.registered_seq, existing.agent_id
                ),
            ));
        }
        self.keys.insert(
            reg.key_id.clone(),
            KeyState {
                agent_id: reg.agent_id.clone(),
                key: reg.public_key,
                registered_seq: seq,
                revoked_seq: None,
            },
        );
        Ok(())
    }

    /// Records a revocation found at `seq`: it must name a key registered
    /// earlier for that agent, not revoked yet.
    pub fn revoke(&mut self, rev: &KeyRevocation, seq: u64) -> Check {
        let Some(state) = self
            .keys
            .get_mut(&rev.key_id)
            .filter(|k| k.registered_seq < seq)
        else {
            return Err((
                Reason::MalformedRecord,
                format!("revocation of key {}, which is not registered", rev.key_id),
            ));
        };
        if state.agent_id != rev.agent_id {
            return Err((
                Reason::MalformedRecord,
                format!(
                    "revocation of key {} for agent {}; it is registered for {}",
                    rev.key_id, rev.agent_id, state.agent_id
                ),
            ));
        }
        if let Some(at) = state.revoked_seq {
            return Err((
                Reason::DuplicateRecord,
                format!("key {} was revoked at seq {at} already", rev.key_id),
            ));
        }
        state.revoked_seq = Some(seq);
        Ok(())
    }

    /// The key `key_id` as it may sign for `agent` at log position `seq`
    /// (`None`: at any position, for records read outside a log).
    fn usable(&self, key_id: &str, agent: &str, seq: Option<u64>) -> Result<&VerifyingKey, String> {
        let Some(state) = self.keys.get(key_id) else {
            return Err(format!("signing key {key_id} is not registered"));
        };
        if let Some(seq) = seq
            && state.registered_seq >= seq
        {
            return Err(format!(
                "signing key {key_id} is registered at seq {}, after this record",
                state.registered_seq
            ));
        }
        if state.agent_id != agent {
            return Err(format!(
                "key {key_id} is registered for agent {}, not {agent}",
                state.agent_id
            ));
        }
        if let Some(revoked) = state.revoked_seq
            && seq.is_none_or(|seq| revoked < seq)
        {
            return Err(format!("key {key_id} was revoked at seq {revoked}"));
        }
        Ok(&state.key)
    }

    /// Checks a seed-004 trace's signature at log position `seq`: its key
    /// must be registered for the trace's (hashed) agent and not revoked,
    /// and verify over the signed payload.
    pub fn check_trace(
        &self,
        trace: &crate::trace::CompleteTrace,
        seq: Option<u64>,
    ) -> Result<(), String> {
        let key = self.usable(&trace.signature_key_id, &trace.agent_id_hash, seq)?;
        if !trace.verify(key) {
            return Err(format!(
                "the signature of trace {} does not verify over its components and trace level",
                trace.trace_id
            ));
        }
        Ok(())
    }

    /// Checks a step's signature against its declared signer: a step
    /// that names a signer must carry that signer's valid signature, by a
    /// key registered for the step's agent before it and not revoked; a
    /// step that names none must carry none.
    pub(super) fn check(&self, record: &StepRecord, seq: Option<u64>) -> Result<(), String> {
        let declared = record.step.signer_key_id.as_deref();
        let sig = match (declared, &record.signature) {
            (None, None) => return Ok(()),
            (None, Some(sig)) => {
                return Err(format!(
                    "signature by {} on a step that declares no signer",
                    sig.key_id
                ));
            }
            (Some(key_id), None) => {
                return Err(format!(
                    "the step declares signer {key_id} but carries no signature"
                ));
            }
            (Some(key_id), Some(sig)) if key_id != sig.key_id => {
                return Err(format!(
                    "the step declares signer {key_id}, the signature is by {}",
                    sig.key_id
                ));
            }
            (Some(_), Some(sig)) => sig,
        };
        let key = self.usable(&sig.key_id, &record.step.agent_id, seq)?;
        if !verify_agent_signature(key, &record.digest, &sig.signature) {
            return Err(format!("signature by {} does not verify", sig.key_id));
        }
        Ok(())
    }
}
