"""The form of what a bundle holds (docs/FORMAT.md 2, 5.2, 7.4, 10.1, 10.4):
timestamps, identifiers and hashes; object members; each operational
record's view and a signed trace; the step fields; an entry line decoded
into `_StepEntry` or `_OpEntry`; a partial bundle's selection. A form that
is not right raises `_Malformed`."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, Union

from .. import ed25519
from ..types import JSONObject
from .constants import (
    _COMPACT_KINDS, _DECODED, _KINDS, _LINKS, _MAX_PROOF, _OP_TYPES, _PAYLOAD, _TRACE_LEVELS, FIELDS, LEVEL_SHOWS,
)
from .hashing import _WHITE_SPACE, _b64decode, _frame, _hexbytes, _u64
from .merkle import _leaf
from .notes import _is_vkey
from .verdict import Position


_TIMESTAMP = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})\.([0-9]{6})Z")
_RFC3339 = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
                      r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))")
_IDENT = re.compile(r"[A-Za-z0-9\-_.:@+=~]{1,200}")


def _is_uint(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
    algorithm, the one Cairn's Rust code uses)."""
    y = year - 1 if month <= 2 else year
    era = y // 400
    yoe = y - era * 400
    doy = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    return era * 146_097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719_468


# Timestamps run from 0000-01-01 to 9999-12-31 (FORMAT.md 2.3), as in the
# Rust verifier; Python's datetime, which starts at year 1, is not used.
_MIN_MICROS = _days_from_civil(0, 1, 1) * 86_400_000_000
_MAX_MICROS = _days_from_civil(10_000, 1, 1) * 86_400_000_000 - 1


def _civil_micros(parts: Sequence[str], fraction: str, offset_minutes: int) -> Optional[int]:
    year, month, day, hour, minute, second = (int(p) for p in parts)
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = 29 if month == 2 and leap else 28 if month == 2 else 30 if month in (4, 6, 9, 11) else 31
    if not (1 <= month <= 12 and 1 <= day <= days and hour <= 23 and minute <= 59 and second <= 59):
        return None
    # Digits beyond the sixth are truncated: Cairn records microseconds.
    micros = int(fraction[:6].ljust(6, "0"))
    seconds = _days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset_minutes * 60
    result = seconds * 1_000_000 + micros
    return result if _MIN_MICROS <= result <= _MAX_MICROS else None


def _canonical_micros(v: Any) -> Optional[int]:
    """Microseconds since 1970 of a canonical timestamp, or None."""
    match = _TIMESTAMP.fullmatch(v) if isinstance(v, str) else None
    return _civil_micros(match.groups()[:6], match.group(7), 0) if match else None


def _is_ts(v: Any) -> bool:
    return _canonical_micros(v) is not None


def _micros(ts: str) -> int:
    micros = _canonical_micros(ts)
    assert micros is not None, ts
    return micros


def _is_rfc3339(v: Any) -> bool:
    """An RFC 3339 date-time as FORMAT.md 7.4 reads a signed trace's."""
    match = _RFC3339.fullmatch(v) if isinstance(v, str) else None
    if not match:
        return False
    offset = 0
    if match.group(8) is None:
        hours, minutes = int(match.group(10)), int(match.group(11))
        if hours > 23 or minutes > 59:
            return False
        offset = (hours * 60 + minutes) * (-1 if match.group(9) == "-" else 1)
    return _civil_micros(match.groups()[:6], match.group(7) or "", offset) is not None


def _is_id(v: Any) -> bool:
    return isinstance(v, str) and bool(_IDENT.fullmatch(v))


def _is_hash(v: Any) -> bool:
    return _hexbytes(v, 32) is not None


class _Malformed(Exception):
    pass


def _members(obj: Any, required: Iterable[str], optional: Iterable[str] = (), what: str = "object") -> JSONObject:
    if not isinstance(obj, dict):
        raise _Malformed(f"{what} is not a JSON object")
    required = tuple(required)
    allowed = set(required) | set(optional)
    for name in obj:
        if name not in allowed:
            raise _Malformed(f"{what} has an unknown member {name!r}")
    for name in required:
        if name not in obj:
            raise _Malformed(f"{what} lacks member {name!r}")
    return obj


def _need(ok: bool, detail: str) -> None:
    if not ok:
        raise _Malformed(detail)


def _proof_hashes(items: list[Any]) -> list[bytes]:
    """A proof's hashes, each 64 lowercase hex digits: _Malformed otherwise."""
    hashes = [_hexbytes(item, 32) for item in items]
    proof = [h for h in hashes if h is not None]
    _need(len(proof) == len(hashes), "a proof hash is 64 lowercase hex digits")
    return proof


# Per type, member -> check of its value (5.2).
_ANY = lambda v: True  # noqa: E731
_STR = lambda v: isinstance(v, str)  # noqa: E731
_VIEWS: dict[str, dict[str, Any]] = {
    "session-start": {
        "org_id": _is_id, "session_id": _is_id, "agent_id": _is_id, "started_at": _is_ts,
        "caller": _is_id, "profile": lambda v: v in ("standard", "strict"),
        "predecessor": lambda v: v is None or _is_hash(v), "full_consent": lambda v: isinstance(v, bool),
        "max_clock_skew_s": _is_uint, "genesis": _is_hash,
    },
    "seal": {
        "org_id": _is_id, "session_id": _is_id, "step_count": _is_uint, "session_root": _is_hash,
        "final_hash": _is_hash, "sealed_at": _is_ts, "note": _STR,
    },
    "erasure": {
        "org_id": _is_id, "session_id": _is_id, "step_index": _is_uint, "trace_id": _is_id,
        "commitments": lambda v: isinstance(v, dict) and bool(v) and all(
            k in _PAYLOAD and _is_hash(c) for k, c in v.items()),
        "reason": _STR, "actor": _STR, "erased_at": _is_ts,
    },
    "review": {
        "org_id": _is_id, "trace_id": _is_id, "session_id": _is_id, "step_index": _is_uint,
        "decision": lambda v: v in ("approve", "reject", "escalate"), "reviewer": _STR,
        "note": lambda v: v is None or isinstance(v, str), "reviewed_at": _is_ts,
    },
    "key-registration": {
        "org_id": _is_id, "agent_id": _is_id, "key_id": _is_id,
        "public_key": lambda v: (lambda raw: raw is not None and len(raw) == 32 and ed25519.is_curve_point(raw))(
            _b64decode(v)),
        "registered_at": _is_ts,
    },
    "key-revocation": {
        "org_id": _is_id, "agent_id": _is_id, "key_id": _is_id, "reason": _STR, "revoked_at": _is_ts,
    },
    "audit-event": {
        "org_id": _is_id, "event_id": _is_id, "session_id": lambda v: v is None or isinstance(v, str),
        "action": _STR, "detail": _ANY, "at": _is_ts,
    },
    "signed-trace": {"org_id": _is_id, "session_id": _is_id, "trace": lambda v: _is_trace(v)},
    "log-key": {
        "org_id": _is_id, "action": lambda v: v in ("add", "retire"),
        "key": lambda v: _is_vkey(v), "at": _is_ts, "note": _STR,
    },
    "trace-erasure": {
        "org_id": _is_id, "session_id": _is_id, "trace_id": _is_id, "trace_seq": _is_uint,
        "trace_hash": _is_hash, "reason": _STR, "actor": _STR, "erased_at": _is_ts,
    },
}


_JAPANESE_KINDS = frozenset({"思考", "計画", "承認待ち", "実行", "エラー"})
_EXTRA_KIND_WORDS = frozenset({
    "thought", "thinking", "thoughtstart", "snapshotandcontext", "dmaresults", "idmaresult", "aspdmaresult",
    "conscienceresult", "planstep", "execute", "actionresult",
})


def _names_a_kind(label: str) -> bool:
    """Whether a seed-004 `event_type` names a step kind (FORMAT.md 7.4)."""
    trimmed = label.strip(_WHITE_SPACE)
    bare = trimmed[1:-1] if len(trimmed) >= 2 and trimmed.startswith("[") and trimmed.endswith("]") else trimmed
    if bare in _JAPANESE_KINDS:
        return True
    key = "".join(c.lower() if "A" <= c <= "Z" else c for c in bare if c not in "_-")
    return key in _COMPACT_KINDS or key in _EXTRA_KIND_WORDS


def _is_trace(trace: Any) -> bool:
    """The form of a seed-004 complete trace (7.4), as the Rust verifier reads
    it: `null` counts as absent; `trace_id`, `agent_id_hash` and
    `signature_key_id` are identifiers, `thought_id` and `task_id` optional
    ones; `trace_level` generic, detailed, full or full_traces; the
    signature 64 bytes; at least one component, each with a string
    `component_type`, an `event_type` that names a step kind and an RFC 3339
    `timestamp`; `started_at` and the optional `completed_at` RFC 3339.
    Other members are kept as given."""
    if not isinstance(trace, dict):
        return False
    for name in ("trace_id", "agent_id_hash", "signature_key_id"):
        if not _is_id(trace.get(name)):
            return False
    for name in ("thought_id", "task_id"):
        if trace.get(name) is not None and not _is_id(trace[name]):
            return False
    level = trace.get("trace_level")
    if not isinstance(level, str) or level not in _TRACE_LEVELS:
        return False
    signature = _b64decode(trace.get("signature"))
    if signature is None or len(signature) != 64:
        return False
    components = trace.get("components")
    if not isinstance(components, list) or not components:
        return False
    for component in components:
        if not isinstance(component, dict):
            return False
        event_type = component.get("event_type")
        if not isinstance(event_type, str) or not _names_a_kind(event_type):
            return False
        if not isinstance(component.get("component_type"), str) or not _is_rfc3339(component.get("timestamp")):
            return False
    if not _is_rfc3339(trace.get("started_at")):
        return False
    return trace.get("completed_at") is None or _is_rfc3339(trace["completed_at"])

# Step field -> check of its JSON value (3.1). Only the JSON types are
# checked here, as the Rust verifier does: the identifier syntax of 2.4, the
# range of `confidence` and the form of `signer_key_id` are the server's
# rules at ingest, and a value that breaks them fails the digest anyway.
_STR_OR_NULL = lambda v: v is None or isinstance(v, str)  # noqa: E731
_FIELD_CHECKS: dict[str, Any] = {
    "trace_id": _STR, "org_id": _STR, "agent_id": _STR, "session_id": _STR,
    "step_index": _is_uint, "step_type": lambda v: isinstance(v, str) and v in _KINDS, "step_type_original": _STR,
    "content": _STR_OR_NULL, "input_data": _ANY, "output_data": _ANY,
    "confidence": lambda v: v is None or _is_number(v),
    "duration_ms": lambda v: v is None or _is_uint(v), "token_count": lambda v: v is None or _is_uint(v),
    "model": _STR_OR_NULL, "metadata": _ANY, "created_at": _is_ts,
    "turn_id": _STR_OR_NULL, "turn_step": lambda v: v is None or _is_uint(v), "task_id": _STR_OR_NULL,
    "links": lambda v: isinstance(v, dict) and all(k in _LINKS and isinstance(x, str) for k, x in v.items()),
    "status": lambda v: v in ("ok", "flagged"),
    "signer_key_id": _STR_OR_NULL,
}


@dataclass
class _EntryLine:
    """What every entry line (10.1) has."""

    line: int
    seq: int
    type: str
    logged_at: str
    record_hash: bytes  # as recorded: the chain hash of a step, the op hash of a record
    proof: Optional[list[bytes]]

    def leaf(self) -> bytes:
        return _leaf(_frame("cairn/v2/log-leaf", _u64(self.seq), self.type.encode(),
                            self.record_hash, self.logged_at.encode()))


@dataclass
class _Signature:
    """A step's agent signature (7.3), decoded."""

    key_id: str
    raw: bytes


@dataclass
class _StepEntry(_EntryLine):
    fields: JSONObject
    salts: JSONObject
    hidden: JSONObject
    digest: bytes
    prev_hash: bytes
    signature: Optional[_Signature]

    def position(self) -> Position:
        return Position(self.line, self.seq, self.fields.get("session_id"),
                        self.fields.get("step_index"), self.fields.get("trace_id"))


@dataclass
class _OpEntry(_EntryLine):
    """An operational record (5.2): `type` is one of _OP_TYPES."""

    view: JSONObject

    def position(self) -> Position:
        session_id = self.view.get("session_id")
        return Position(self.line, self.seq, session_id if isinstance(session_id, str) else None)


@dataclass
class _WithheldEntry(_EntryLine):
    """A signed-trace entry whose view an erasure withheld (8): its
    recorded hash is all there is, held to a later trace-erasure record."""

    def position(self) -> Position:
        return Position(self.line, self.seq)


_Entry = Union[_StepEntry, _OpEntry, _WithheldEntry]


def _decode_entry(obj: Any, line: int) -> _Entry:
    """The form of an entry line (10.1): _Malformed otherwise. A `proof` is
    read in any bundle: a complete bundle refuses it after the genesis check
    (10.1, step 4)."""
    _need(isinstance(obj, dict), "an entry line is a JSON object")
    kind = obj.get("type")
    required: tuple[str, ...]
    if kind == "step":
        required = ("seq", "type", "logged_at", "fields", "salts", "hidden", "digest", "prev_hash",
                    "hash", "signature", "has_embedding", "erased")
    elif isinstance(kind, str) and kind in _OP_TYPES:
        required = ("seq", "type", "logged_at", "view", "hash")
    else:
        raise _Malformed(f"unknown entry type {kind!r}")
    _members(obj, required, ("proof",), "the entry")
    _need(_is_uint(obj["seq"]), "seq is a non-negative integer")
    _need(_is_ts(obj["logged_at"]), "logged_at is a canonical timestamp")
    record_hash = _hexbytes(obj["hash"], 32)
    if record_hash is None:
        raise _Malformed("hash is 64 lowercase hex digits")
    proof = None
    if "proof" in obj:
        _need(isinstance(obj["proof"], list) and len(obj["proof"]) <= _MAX_PROOF,
              f"proof is an array of at most {_MAX_PROOF} hashes")
        proof = _proof_hashes(obj["proof"])
    if kind != "step" and obj["view"] is None:
        _need(kind == "signed-trace",
              f"the view is null: only a signed-trace record's view is withheld (when erased), not a {kind}'s")
        return _WithheldEntry(line, obj["seq"], kind, obj["logged_at"], record_hash, proof)
    if kind != "step":
        checks = _VIEWS[kind]
        view = _members(obj["view"], checks, (), f"the {kind} view")
        for name, check in checks.items():
            _need(check(view[name]), f"the {kind} view's {name} is not of its type")
        return _OpEntry(line, obj["seq"], kind, obj["logged_at"], record_hash, proof, view)
    fields = _members(obj["fields"], (), FIELDS, "fields")
    salts = _members(obj["salts"], (), FIELDS, "salts")
    hidden = _members(obj["hidden"], (), FIELDS, "hidden")
    for name in FIELDS:
        revealed = name in fields and name in salts and name not in hidden
        _need(revealed or (name in hidden and name not in fields and name not in salts),
              f"field {name} must be either revealed with a salt or hidden")
    for name in _DECODED:
        _need(name in fields, f"field {name} is never hidden")
    for name, value in fields.items():
        _need(_FIELD_CHECKS[name](value), f"field {name} is not of its type")
    for name, salt in salts.items():
        _need(_hexbytes(salt, 16) is not None, f"the salt of {name} is 32 lowercase hex digits")
    for name, commitment in hidden.items():
        _need(_is_hash(commitment), f"the commitment of {name} is 64 lowercase hex digits")
    digest = _hexbytes(obj["digest"], 32)
    prev_hash = _hexbytes(obj["prev_hash"], 32)
    if digest is None or prev_hash is None:
        raise _Malformed("digest and prev_hash are 64 lowercase hex digits")
    signature = None
    if obj["signature"] is not None:
        signed = _members(obj["signature"], ("key_id", "signature"), (), "signature")
        _need(isinstance(signed["key_id"], str), "signature.key_id is a string")
        raw = _b64decode(signed["signature"])
        if raw is None or len(raw) != 64:
            raise _Malformed("signature.signature is the base64 of 64 bytes")
        signature = _Signature(signed["key_id"], raw)
    _need(isinstance(obj["has_embedding"], bool) and isinstance(obj["erased"], bool),
          "has_embedding and erased are booleans")
    return _StepEntry(line, obj["seq"], kind, obj["logged_at"], record_hash, proof,
                      fields, salts, hidden, digest, prev_hash, signature)


def _decode_selection(obj: Any) -> JSONObject:
    """A selection's form; its record seqs lie below its own
    `checkpoint_size` (equality with the bundle's is checked later)."""
    selection = _members(obj, ("checkpoint_size", "scope", "level", "sessions", "records"), (), "selection")
    _need(_is_uint(selection["checkpoint_size"]), "checkpoint_size is a non-negative integer")
    scope = selection["scope"]
    _need(isinstance(scope, dict), "scope is an object")
    if "session" in scope:
        _members(scope, ("session",), (), "scope")
        _need(_is_id(scope["session"]), "scope.session is an id")
    elif "agent" in scope:
        _members(scope, ("agent",), (), "scope")
        _need(_is_id(scope["agent"]), "scope.agent is an id")
    else:
        _members(scope, ("since", "until"), (), "scope")
        _need(_is_ts(scope["since"]) and _is_ts(scope["until"]), "scope.since and until are timestamps")
    _need(isinstance(selection["level"], str) and selection["level"] in LEVEL_SHOWS,
          "level is generic, detailed or full")
    _need(isinstance(selection["sessions"], list), "sessions is an array")
    seen: set[str] = set()
    for item in selection["sessions"]:
        _members(item, ("session_id", "steps", "head"), (), "a selected session")
        _need(_is_id(item["session_id"]) and _is_uint(item["steps"]) and _is_hash(item["head"]),
              "a selected session is {session_id, steps, head}")
        _need(item["session_id"] not in seen, f"session {item['session_id']} is selected twice")
        seen.add(item["session_id"])
    _need(isinstance(selection["records"], list), "records is an array")
    previous = -1
    for item in selection["records"]:
        _need(isinstance(item, list) and len(item) == 2 and _is_uint(item[0])
              and isinstance(item[1], str) and item[1] in _OP_TYPES,
              "a selected record is [seq, operational entry type]")
        _need(item[0] > previous, "selected records are in strictly increasing seq")
        _need(item[0] < selection["checkpoint_size"], "a selected record lies beyond the selection's checkpoint")
        previous = item[0]
    return selection
