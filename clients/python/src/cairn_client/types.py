"""Typed shapes of the server's answers (`TypedDict`s: plain dicts at run
time, checked by type checkers). Members the server may leave out are not
required; the server may add members in later versions."""
from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, TypedDict

__all__ = [
    "JSON", "JSONObject", "Role", "DetailLevel", "Decision", "StepResult", "StepError", "BatchResult", "SessionStart",
    "SessionSummary", "Step", "Session", "SessionVerdict", "SessionRoot", "Seal", "Turn", "TurnResult", "Trail",
    "ThinkingStep", "ThinkingParse", "Erasure", "Review", "ReviewItem", "ReviewQueue", "AuditEventResult",
    "AuditEvent", "SearchResult", "SqlResult", "OrgVerdict", "InclusionProof", "ConsistencyProof", "BundleVerdict",
    "ApiKey", "NewApiKey", "AgentKey", "AgentKeyRecord", "AgentKeyList", "AgentKeyChange", "ImportedTrace", "SignedTrace", "Health",
]

#: Any JSON value.
JSON = Any
#: A JSON object: member names are strings, values any JSON.
JSONObject = Dict[str, Any]
Role = Literal["writer", "reader", "auditor", "admin"]
DetailLevel = Literal["generic", "detailed", "full"]
Decision = Literal["approve", "reject", "escalate"]


class StepResult(TypedDict, total=False):
    """What `POST /v1/steps` answers for a recorded step."""
    trace_id: str
    step_index: int
    current_hash: str
    seq: int
    created_at: str
    #: Whether this step opened its session.
    session_created: bool


class ErrorBody(TypedDict, total=False):
    code: str
    message: str
    field: str


class StepError(TypedDict):
    """One refused step of a batch."""
    error: ErrorBody


class BatchResult(TypedDict):
    """`POST /v1/steps/batch`: one result or error per step, in order (the
    answer is 200 however many the ledger refused: check `refused`)."""
    accepted: int
    refused: int
    results: List[Dict[str, Any]]


class SessionStart(TypedDict, total=False):
    """`POST /v1/sessions`: the session-start record."""
    session_id: str
    genesis: str
    seq: int


class SessionSummary(TypedDict, total=False):
    """An item of `GET /v1/sessions` (seed 000's `get_session_history`)."""
    session_id: str
    agent_id: str
    step_count: int
    chain_valid: Optional[bool]
    first_step_at: str
    last_step_at: str
    sealed: bool
    started_at: str
    cursor: str


class Step(TypedDict, total=False):
    """A recorded step as replayed or read back (members it lacks are left out)."""
    trace_id: str
    session_id: str
    agent_id: str
    org_id: str
    step_index: int
    step_type: str
    #: The canonical kind (`observation`, `tool_call`, ...).
    kind: str
    content: str
    input_data: JSON
    output_data: JSON
    confidence: float
    model: str
    duration_ms: int
    token_count: int
    metadata: JSON
    created_at: str
    prev_hash: str
    current_hash: str
    seq: int
    turn_id: str
    turn_step: int
    task_id: str
    links: Dict[str, str]
    status: str
    digest: str
    erased: bool
    has_embedding: bool
    #: Fields replaced by their commitments at the level asked for.
    hidden_fields: List[str]


class Session(TypedDict, total=False):
    """`GET /v1/sessions/{id}` (seed 000's `replay_decision`)."""
    session_id: str
    agent_id: str
    step_count: int
    chain_valid: Optional[bool]
    sealed: bool
    steps: List[Step]
    level: Optional[str]


class SessionVerdict(TypedDict, total=False):
    """`GET /v1/sessions/{id}/verify` and `GET /v1/verify`: the fields of
    `cairn verify --json` (seed 003)."""
    verified: bool
    ok: bool
    totalChecked: int
    lastValidSequence: Optional[int]
    brokenAt: Optional[Dict[str, Any]]
    brokenAtSequence: Optional[int]
    brokenReason: Optional[str]
    detail: Optional[str]
    durationMs: int
    verifiedAt: str


class Seal(TypedDict, total=False):
    """`POST /v1/sessions/{id}/seal` and `GET /v1/sessions/{id}/root` (a
    sealed session's root): `note` is the signed seal note."""
    session_id: str
    step_count: int
    merkle_root: str
    final_hash: str
    sealed_at: str
    note: str
    seq: int


SessionRoot = Seal


class Turn(TypedDict, total=False):
    """`GET /v1/sessions/{id}/turns/{turn_id}`."""
    turn_id: str
    started_at: str
    steps: List[Step]


class TurnResult(TypedDict, total=False):
    """`POST /v1/sessions/{id}/turns`."""
    session_id: str
    turn_id: str
    accepted: int
    results: List[Dict[str, Any]]


class Trail(TypedDict, total=False):
    """`GET /v1/sessions/{id}/trail`."""
    session_id: str
    turns: List[Turn]


class ThinkingStep(TypedDict, total=False):
    phase: str
    label: str
    kind: str
    content: str


class ThinkingParse(TypedDict):
    """`POST /v1/thinking/parse`."""
    steps: List[ThinkingStep]


class Erasure(TypedDict, total=False):
    """`POST /v1/steps/{trace_id}/erase`."""
    trace_id: str
    erased: bool
    erasure_seq: Optional[int]
    trace_erasure_seq: Optional[int]


class Review(TypedDict, total=False):
    """`POST /v1/steps/{trace_id}/review`: the review record."""
    seq: int
    trace_id: str
    session_id: str
    step_index: int
    decision: str
    reviewer: str
    note: Optional[str]
    reviewed_at: str


class ReviewItem(TypedDict, total=False):
    state: str
    step: Step
    reviews: List[Review]
    review_count: int


class ReviewQueue(TypedDict):
    """`GET /v1/reviews`: `truncated` when more items wait than fit one
    answer (16 MiB of steps and reviews)."""
    items: List[ReviewItem]
    truncated: bool


class AuditEventResult(TypedDict, total=False):
    """`POST /v1/audit-events`."""
    seq: int
    event_id: str


class AuditEvent(TypedDict, total=False):
    """`GET /v1/audit-events/{event_id}`."""
    seq: int
    event_id: str
    session_id: Optional[str]
    action: str
    detail: JSON
    at: str


class SearchHit(Step, total=False):
    """A step found by `GET /v1/search`, and how."""
    score: float
    matched_by: List[str]
    snippet: str
    highlights: List[List[int]]


class SearchResult(TypedDict):
    """`GET /v1/search`."""
    mode: str
    embedder: str
    results: List[SearchHit]
    truncated: bool


class SqlResult(TypedDict):
    """`POST /v1/sql`."""
    columns: List[str]
    rows: List[List[JSON]]
    truncated: bool


class OrgVerdict(SessionVerdict, total=False):
    """`GET /v1/verify`: the server's verdict on the whole org (seed 003)."""
    log_size: int
    checkpoints_checked: int


class InclusionProof(TypedDict, total=False):
    """`GET /v1/proofs/inclusion` (RFC 9162), with the signed checkpoint it leads to."""
    seq: int
    size: int
    leaf_hash: str
    root: str
    proof: List[str]
    checkpoint: str


class ConsistencyProof(TypedDict, total=False):
    """`GET /v1/proofs/consistency` (RFC 9162)."""
    old_size: int
    new_size: int
    old_root: str
    new_root: str
    proof: List[str]


class BundleVerdict(SessionVerdict, total=False):
    """`POST /v1/bundles/verify`: the fields of `cairn verify --json`, and
    whether the key was given by the caller (`key_pinned`) and is this
    server's (`signed_by_this_server`)."""
    checkpoint_size: int
    server_key: str
    key_pinned: bool
    signed_by_this_server: bool


class ApiKey(TypedDict, total=False):
    """An item of `GET /v1/keys` (never its secret)."""
    id: str
    org_id: str
    role: str
    agent_id: Optional[str]
    label: Optional[str]
    created_at: str
    revoked_at: Optional[str]
    expires_at: Optional[str]


class NewApiKey(ApiKey, total=False):
    """`POST /v1/keys`: `token` is the secret (`cairn_...`), shown once."""
    token: str


class AgentKey(TypedDict, total=False):
    """`POST /v1/agent-keys`: the registration."""
    key_id: str
    agent_id: str
    seq: int


class AgentKeyRecord(TypedDict, total=False):
    """An item of `GET /v1/agent-keys`: a registration or a revocation."""
    type: Literal["key-registration", "key-revocation"]
    key_id: str
    agent_id: str
    public_key: str
    reason: str
    at: str
    seq: int


class AgentKeyList(TypedDict):
    """`GET /v1/agent-keys`."""
    keys: List[AgentKeyRecord]


class AgentKeyChange(TypedDict, total=False):
    """`POST /v1/agent-keys/{key_id}/revoke` and `/rotate`: the key revoked
    and, for a rotation, the new one (`key_id`, `registered_seq`)."""
    revoked: str
    seq: int
    key_id: Optional[str]
    registered_seq: Optional[int]


class ImportedTrace(TypedDict, total=False):
    """`POST /v1/signed-traces`."""
    seq: int
    session_id: str
    steps: List[Dict[str, Any]]


class SignedTrace(TypedDict, total=False):
    """`GET /v1/signed-traces/{trace_id}`."""
    seq: int
    session_id: str
    trace_level: str
    signature_key_id: str
    signature_valid: bool
    signature_error: Optional[str]
    #: The members of `trace` the signature covers (components, trace_level).
    signed_members: List[str]
    trace: Dict[str, Any]


class Health(TypedDict, total=False):
    """`GET /healthz`."""
    status: str
