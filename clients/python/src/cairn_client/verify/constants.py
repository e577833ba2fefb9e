"""The format's vocabulary (docs/FORMAT.md 3.1, 3.5, 5.2, 8): the committed
fields of a step in field order, what each detail level shows, the step
kinds, link names, operational entry types and trace levels, and the bound
on an inclusion proof's length."""
from __future__ import annotations


#: The 22 committed fields of a step, in field order (FORMAT.md 3.1).
FIELDS = [
    "trace_id", "org_id", "agent_id", "session_id", "step_index", "step_type",
    "step_type_original", "content", "input_data", "output_data", "confidence",
    "duration_ms", "token_count", "model", "metadata", "created_at", "turn_id",
    "turn_step", "task_id", "links", "status", "signer_key_id",
]
_PAYLOAD = ("content", "input_data", "output_data", "metadata")
_NEVER_HIDDEN = frozenset({"org_id", "agent_id", "session_id", "step_index", "step_type",
                           "step_type_original", "created_at", "status", "signer_key_id"})
# Never-hidden fields without which a step entry cannot be read at all: a
# step that hides one is malformed at its line, before any other check (as
# the Rust verifier does; FORMAT.md does not say which).
_DECODED = ("step_index", "step_type", "created_at", "status")
_GENERIC = frozenset(_NEVER_HIDDEN | {"confidence", "duration_ms", "token_count", "turn_step"})
_DETAILED = frozenset(_GENERIC | {"trace_id", "model", "turn_id", "task_id", "links"})
#: What each detail level shows (FORMAT.md 8).
LEVEL_SHOWS = {"generic": _GENERIC, "detailed": _DETAILED, "full": frozenset(FIELDS)}
_KINDS = frozenset({
    "observation", "context", "hypothesis", "reasoning", "analysis", "rationale", "conscience",
    "plan", "decision", "waiting_approval", "tool_call", "tool_result", "action", "error",
    "correction", "summary", "reflection", "final_answer",
})
_COMPACT_KINDS = frozenset(k.replace("_", "") for k in _KINDS)
_STRICT_KINDS = frozenset({"plan", "analysis", "decision", "reflection"})
_LINKS = frozenset({"approval_request", "audit_event", "corrects", "parent", "policy_decision", "tool_call"})
_OP_TYPES = ("session-start", "seal", "erasure", "review", "key-registration", "key-revocation",
             "audit-event", "signed-trace", "log-key", "trace-erasure")
_TRACE_LEVELS = {"generic": "generic", "detailed": "detailed", "full": "full", "full_traces": "full"}
_MAX_PROOF = 128
