"""Offline verification of Cairn export bundles, written from docs/FORMAT.md
(format 2) alone.

Nothing here talks to a server: give it a bundle (the file `cairn export`
or `GET /v1/export` produced), ideally the operator's published server key,
and any checkpoints you kept, and it replays the published algorithm: strict
JSON (2.2), the signed checkpoint and trusted checkpoints (10.2), consistency
lines, a partial bundle's signed selection (10.4), every record (9.2, 9.3),
erasures and detail levels (8), time (5.4), agent keys (7.3), signed traces
(7.4), seals (7.2), continuity between sessions, and the Merkle log (every
leaf folded into the root for a complete bundle, every inclusion proof for a
partial one). It reads the bundle as a stream, line by line, and stops at the
first failure, naming the record and the reason with the codes of section
9.1 (`digest-mismatch`, `prev-hash-mismatch`, ...).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional, Sequence, Union

from . import ed25519
from .jcs import canonical
from .strict_json import JSONError, loads as strict_loads
from .types import JSONObject

__all__ = ["Failure", "Position", "Verdict", "verify_bundle", "FIELDS", "REASONS"]

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
             "audit-event", "signed-trace", "log-key")
_TRACE_LEVELS = {"generic": "generic", "detailed": "detailed", "full": "full", "full_traces": "full"}
_MAX_PROOF = 128

#: The reason codes of FORMAT.md 9.1.
REASONS = (
    "malformed-record", "sequence-gap", "prev-hash-mismatch", "chain-hash-mismatch",
    "digest-mismatch", "bad-signature", "inclusion-mismatch", "inconsistent-checkpoint",
    "missing-record", "step-after-seal", "seal-mismatch", "profile-violation",
    "predecessor-mismatch", "duplicate-record", "uncovered-entry", "unlisted-entry",
    "missing-proof", "erasure-mismatch", "bad-timestamp", "selection-mismatch", "insufficient-cosignatures",
)


# -- verdicts --------------------------------------------------------------


@dataclass
class Position:
    """Where a record is: its bundle line, its seq, and for a step its
    session, index and trace id (FORMAT.md 9.6). Names as in `cairn verify
    --json`'s `brokenAt`."""

    line: Optional[int] = None
    seq: Optional[int] = None
    session_id: Optional[str] = None
    step_index: Optional[int] = None
    trace_id: Optional[str] = None

    def to_json(self) -> JSONObject:
        return {"line": self.line, "seq": self.seq, "session_id": self.session_id,
                "step_index": self.step_index, "trace_id": self.trace_id}


@dataclass
class Failure:
    """The first record that did not verify, where, and why."""

    reason: str
    detail: str
    at: Position = field(default_factory=Position)

    # Shortcuts kept from the first version of this class.
    @property
    def line(self) -> Optional[int]:
        return self.at.line

    @property
    def seq(self) -> Optional[int]:
        return self.at.seq

    @property
    def session_id(self) -> Optional[str]:
        return self.at.session_id

    @property
    def step_index(self) -> Optional[int]:
        return self.at.step_index

    @property
    def trace_id(self) -> Optional[str]:
        return self.at.trace_id

    def to_json(self) -> JSONObject:
        return {"at": self.at.to_json(), "reason": self.reason, "detail": self.detail}


@dataclass
class Verdict:
    """The outcome of verifying a bundle (FORMAT.md 9.6)."""

    verified: bool
    #: Entries checked, the failing one included.
    records_checked: int
    #: The last entry that passed every check.
    last_valid: Optional[Position] = None
    failure: Optional[Failure] = None
    org_id: Optional[str] = None
    origin: Optional[str] = None
    complete_log: Optional[bool] = None
    checkpoint_size: Optional[int] = None
    checkpoint_root: Optional[str] = None
    #: A partial bundle's selection (10.4), once its note verified.
    selection: Optional[JSONObject] = None
    #: Whether the keys were given by the caller rather than read from the
    #: bundle's own header.
    key_pinned: bool = False

    @property
    def reason(self) -> Optional[str]:
        return self.failure.reason if self.failure else None

    def to_json(self) -> JSONObject:
        return {
            "verified": self.verified,
            "records_checked": self.records_checked,
            "last_valid": self.last_valid.to_json() if self.last_valid else None,
            "failure": self.failure.to_json() if self.failure else None,
            "org_id": self.org_id,
            "checkpoint_size": self.checkpoint_size,
            "checkpoint_root": self.checkpoint_root,
            "key_pinned": self.key_pinned,
        }


class _Fail(Exception):
    """A verification failure; `at` is completed by the driver (line)."""

    def __init__(self, reason: str, detail: str, at: Optional[Position] = None, *,
                 line_known: bool = False) -> None:
        super().__init__(f"{reason}: {detail}")
        assert reason in REASONS, reason
        self.reason = reason
        self.detail = detail
        self.at = at or Position()
        self.line_known = line_known


# -- primitives (FORMAT.md 1, 6) -------------------------------------------


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _frame(tag: str, *parts: bytes) -> bytes:
    out = [bytes([len(tag)]), tag.encode()]
    for part in parts:
        out.append(struct.pack(">I", len(part)))
        out.append(part)
    return b"".join(out)


def _h(tag: str, *parts: bytes) -> bytes:
    return _sha256(_frame(tag, *parts))


def _u64(n: int) -> bytes:
    return struct.pack(">Q", n)


def _node(left: bytes, right: bytes) -> bytes:
    return _sha256(b"\x01" + left + right)


def _leaf(data: bytes) -> bytes:
    return _sha256(b"\x00" + data)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _b64decode(text: Any) -> Optional[bytes]:
    """Canonical RFC 4648 base64 (standard alphabet, padding, zero unused
    bits), or None."""
    if not isinstance(text, str) or not text.isascii():
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if base64.b64encode(raw).decode() == text else None


_HEX = re.compile(r"[0-9a-f]*")


def _hexbytes(text: Any, size: int) -> Optional[bytes]:
    if not isinstance(text, str) or len(text) != 2 * size or not _HEX.fullmatch(text):
        return None
    return bytes.fromhex(text)


class _Frontier:
    """An RFC 9162 tree's right edge: O(log n) state, the root at any size."""

    def __init__(self) -> None:
        self.size = 0
        self.peaks: list[bytes] = []  # largest subtree first

    def push(self, leaf_hash: bytes) -> None:
        self.peaks.append(leaf_hash)
        self.size += 1
        n = self.size
        while n % 2 == 0:
            right = self.peaks.pop()
            left = self.peaks.pop()
            self.peaks.append(_node(left, right))
            n //= 2

    def root(self) -> bytes:
        if not self.peaks:
            return _sha256(b"")
        acc = self.peaks[-1]
        for peak in reversed(self.peaks[:-1]):
            acc = _node(peak, acc)
        return acc


def _verify_inclusion(leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> bool:
    """RFC 9162 section 2.1.3.2."""
    if index >= size or len(leaf_hash) != 32 or len(root) != 32 or any(len(p) != 32 for p in proof):
        return False
    fn, sn, r = index, size - 1, leaf_hash
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = _node(p, r)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = _node(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def _verify_consistency(size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes) -> bool:
    """RFC 9162 section 2.1.4.2; from size 0 refused (FORMAT.md 6.2)."""
    if size1 == 0 or size1 > size2:
        return False
    if size1 == size2:
        return not proof and root1 == root2
    if any(len(p) != 32 for p in proof) or len(root1) != 32 or len(root2) != 32:
        return False
    if not proof:
        return False
    path = list(proof)
    if size1 & (size1 - 1) == 0:
        path.insert(0, root1)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = _node(c, fr)
            sr = _node(c, sr)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = _node(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == root1 and sr == root2 and sn == 0


# -- signed notes (FORMAT.md 7.1) -------------------------------------------


@dataclass
class _Key:
    name: str
    key_id: bytes
    public: bytes
    alg: int = 0x01

    def vkey(self) -> str:
        blob = _b64(bytes([self.alg]) + self.public)
        return f"{self.name}+{self.key_id.hex()}+{blob}"


def _valid_key_name(name: str) -> bool:
    return bool(name) and not any(c.isspace() or c == "+" for c in name) and name.isprintable()


def _parse_vkey(text: str, alg: int = 0x01) -> _Key:
    """A C2SP vkey `<name>+<hex key id>+<base64(alg || key)>`: an Ed25519
    note key (alg 0x01) or a cosignature/v1 witness key (alg 0x04);
    ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError("a vkey is a string")
    parts = text.split("+", 2)
    if len(parts) != 3:
        raise ValueError(f"not a vkey: {text!r}")
    name, key_hex, blob = parts
    if not _valid_key_name(name):
        raise ValueError(f"not a key name: {name!r}")
    key_id = _hexbytes(key_hex, 4)
    raw = _b64decode(blob)
    if key_id is None:
        raise ValueError("a vkey's key id is 8 lowercase hex digits")
    if raw is None or len(raw) != 33 or raw[0] != alg:
        raise ValueError("not an Ed25519 vkey" if alg == 0x01 else "not a cosignature/v1 vkey (algorithm 0x04)")
    if not ed25519.is_curve_point(raw[1:]):
        raise ValueError("a vkey's key is not an Ed25519 point")
    if _sha256(name.encode() + b"\n" + raw)[:4] != key_id:
        raise ValueError("the vkey's key id does not match its key")
    return _Key(name, key_id, raw[1:], alg)


def _is_vkey(text: Any) -> bool:
    """A readable Ed25519 note vkey (7.1)."""
    try:
        _parse_vkey(text)
    except ValueError:
        return False
    return True


def _note_signers(note: str, keys: Sequence[_Key]) -> list[_Key]:
    """The keys among `keys` whose signatures on `note` verify (the note
    already opened with them)."""
    split = note.rfind("\n\n")
    text, block = note[: split + 1], note[split + 2:]
    signers: list[_Key] = []
    for line in block[:-1].split("\n"):
        name, _sep, blob = line[2:].partition(" ")
        raw = _b64decode(blob) or b""
        for key in keys:
            if (key.name == name and raw[:4] == key.key_id and key not in signers
                    and ed25519.verify_strict(key.public, text.encode(), raw[4:])):
                signers.append(key)
    return signers


def _cosigned_by(note: str, witness: _Key) -> bool:
    """Whether a (well-formed) signed note carries a valid C2SP
    cosignature/v1 by `witness` (FORMAT.md 7.7): a line with its name and
    key id whose 72-byte payload is a big-endian timestamp and an Ed25519
    signature over `cosignature/v1\\ntime <t>\\n<note text>`."""
    split = note.rfind("\n\n")
    text, block = note[: split + 1], note[split + 2:]
    for line in block.split("\n"):
        name, _, blob = line[2:].partition(" ")
        raw = _b64decode(blob)
        if name != witness.name or raw is None or raw[:4] != witness.key_id or len(raw) != 4 + 8 + 64:
            continue
        timestamp = int.from_bytes(raw[4:12], "big")
        if not 0 < timestamp < 2**63:
            continue
        message = f"cosignature/v1\ntime {timestamp}\n{text}".encode()
        if ed25519.verify_strict(witness.public, message, raw[12:]):
            return True
    return False


_MAX_SIGNATURES = 100


class _NoteMalformed(ValueError):
    """Not a signed note at all (its form)."""


class _NoteUnverified(ValueError):
    """A signed note that does not verify with the trusted keys."""


def _open_note(note: Any, keys: Sequence[_Key]) -> str:
    """Checks a C2SP signed note and returns its text (ending in a newline).
    Raises _NoteMalformed for something that is not a signed note, and
    _NoteUnverified when no trusted key signed it or a trusted key's
    signature does not verify (both are ValueError)."""
    if not isinstance(note, str):
        raise _NoteMalformed("a signed note is a string")
    if any((ord(c) < 0x20 and c != "\n") for c in note):
        raise _NoteMalformed("a signed note holds a control character")
    split = note.rfind("\n\n")
    if split < 0:
        raise _NoteMalformed("a signed note has a blank line before its signatures")
    text, block = note[: split + 1], note[split + 2:]
    if not block or not block.endswith("\n"):
        raise _NoteMalformed("a signed note ends with its signature lines")
    signatures: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    for line in block[:-1].split("\n"):
        if not line.startswith("\u2014 "):
            raise _NoteMalformed(f"not a signature line: {line!r}")
        name, sep, blob = line[2:].partition(" ")
        raw = _b64decode(blob) if sep else None
        if raw is None or not _valid_key_name(name) or len(raw) < 5:
            raise _NoteMalformed(f"not a signature line: {line!r}")
        # As the reference (and Cairn's Rust reader): the bound is checked
        # before a repeated line is dropped.
        if len(signatures) == _MAX_SIGNATURES:
            raise _NoteMalformed(f"more than {_MAX_SIGNATURES} signatures")
        if line not in seen:
            seen.add(line)
            signatures.append((name, raw))
    verified = False
    message = text.encode()
    for name, raw in signatures:
        for key in keys:
            if key.name == name and raw[:4] == key.key_id:
                if not ed25519.verify_strict(key.public, message, raw[4:]):
                    raise _NoteUnverified(f"the signature by {name} does not verify")
                verified = True
    if not verified:
        raise _NoteUnverified("no signature by a trusted key")
    return text


_DECIMAL = re.compile(r"0|[1-9][0-9]*")


def _parse_checkpoint(text: str) -> tuple[str, int, bytes]:
    # C2SP tlog-checkpoint: origin, size, root, then optional extension
    # lines, which are ignored (the Rust verifier accepts them too).
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "" or not _DECIMAL.fullmatch(lines[1]) or any(not x for x in lines[3:-1]):
        raise ValueError("not a checkpoint (origin, size, root)")
    root = _b64decode(lines[2])
    if root is None or len(root) != 32:
        raise ValueError("a checkpoint's root is the base64 of 32 bytes")
    size = int(lines[1])
    if size > 2**63:
        raise ValueError("checkpoint size out of range")
    return lines[0], size, root


# -- forms (FORMAT.md 2, 5.2, 10.1) ---------------------------------------


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
}


# Unicode White_Space, what Rust's str::trim removes (Python's str.strip
# also removes U+001C to U+001F).
_WHITE_SPACE = "\u0009\u000a\u000b\u000c\u000d\u0020\u0085\u00a0\u1680" + "".join(
    chr(c) for c in range(0x2000, 0x200B)) + "\u2028\u2029\u202f\u205f\u3000"
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
    "step_index": _is_uint, "step_type": lambda v: v in _KINDS, "step_type_original": _STR,
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


_Entry = Union[_StepEntry, _OpEntry]


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
    elif kind in _OP_TYPES:
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
    _need(selection["level"] in LEVEL_SHOWS, "level is generic, detailed or full")
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
        _need(isinstance(item, list) and len(item) == 2 and _is_uint(item[0]) and item[1] in _OP_TYPES,
              "a selected record is [seq, operational entry type]")
        _need(item[0] > previous, "selected records are in strictly increasing seq")
        _need(item[0] < selection["checkpoint_size"], "a selected record lies beyond the selection's checkpoint")
        previous = item[0]
    return selection


# -- the verifier ------------------------------------------------------------


@dataclass
class _Session:
    session_id: str
    agent_id: str
    strict: bool
    skew_us: int
    head: bytes
    next_index: int = 0
    sealed: bool = False
    last_created: Optional[str] = None
    tree: _Frontier = field(default_factory=_Frontier)


@dataclass
class _AgentKey:
    agent_id: str
    public: bytes
    registered_seq: int
    revoked_seq: Optional[int] = None


@dataclass
class _Erased:
    """A step showing erased payload fields, waiting for its erasure record."""

    seq: int
    position: Position
    trace_id: Optional[str]
    commitments: JSONObject


class _Verifier:
    def __init__(self, keys: Sequence[_Key], trusted: Sequence[str],
                 witnesses: Sequence[_Key] = (), quorum: int = 0) -> None:
        self.witnesses = list(witnesses)
        self.quorum = quorum
        self.pinned = list(keys)
        self.trusted_notes = list(trusted)
        self.keys: list[_Key] = []
        self.line = 0
        self.phase = "header"
        self.entry_lines = 0
        self.checked = 0
        self.last_valid: Optional[Position] = None
        self.header: JSONObject = {}
        self.org_id = ""
        self.origin = ""
        self.complete = True
        self.size = 0
        self.root = b""
        self.trusted: list[tuple[int, bytes]] = []  # (size, root), each size below N
        self.consistency_sizes: set[int] = set()
        self.last_old_size = 0
        self.selection: Optional[JSONObject] = None
        self.level = "full"
        self.listed_sessions: dict[str, JSONObject] = {}
        self.records: list[list[Any]] = []  # the selection's [seq, type] pairs
        self.record_index = 0
        # log state
        self.tree = _Frontier()
        self.last_seq: Optional[int] = None
        self.last_logged_at: Optional[str] = None
        self.sessions: dict[str, _Session] = {}
        self.finals: dict[bytes, Optional[str]] = {}  # sealed final hash -> the session continuing it
        self.agent_keys: dict[str, _AgentKey] = {}
        self.pending: dict[tuple[str, int], _Erased] = {}
        # log keys (7.10), by vkey text: where added, retired, first used
        self.added: dict[str, int] = {}
        self.retired: dict[str, int] = {}
        self.first_used: dict[str, int] = {}
        self.signed_notes: list[str] = []  # the checkpoint's and the selection's notes

    # -- lines ---------------------------------------------------------------

    def feed(self, raw: bytes) -> None:
        self.line += 1
        if self.phase == "ended":
            raise _Fail("malformed-record", "a line after the end line")
        if self.phase == "header":
            self._header(raw)
            self.phase = "checkpoint"
            return
        if self.phase == "checkpoint":
            self._checkpoint(self._parse(raw))
            self.phase = "consistency"
            return
        if self.phase in ("consistency", "selection", "entries"):
            try:
                obj = strict_loads(raw)
            except JSONError as e:
                # Counted as a checked record in the entries part (9.6); a line
                # that might still have been a consistency or selection line
                # (the first one after the checkpoint or the consistency
                # lines) counts no record, as in the Rust verifier.
                if self.phase == "entries":
                    self.entry_lines += 1
                    self.checked += 1
                raise _Fail("malformed-record", f"line {self.line} is not strict JSON: {e}") from None
            if self.phase == "consistency":
                if isinstance(obj, dict) and "consistency" in obj:
                    self._consistency(obj)
                    return
                self.phase = "selection" if not self.complete else "entries"
                if self.complete and isinstance(obj, dict) and "selection" in obj:
                    raise _Fail("malformed-record", "a complete bundle has no selection line")
            if self.phase == "selection":
                self._selection(obj)
                self.phase = "entries"
                return
            if isinstance(obj, dict) and "end" in obj:
                self._end(obj)
                self.phase = "ended"
                return
            if isinstance(obj, dict) and ("consistency" in obj or "selection" in obj):
                # Not an entry line: malformed where it stands, counting no
                # record (as the Rust verifier does).
                raise _Fail("malformed-record", "consistency and selection lines come before the entries")
            self._entry(obj)

    def _parse(self, raw: bytes) -> Any:
        try:
            return strict_loads(raw)
        except JSONError as e:
            raise _Fail("malformed-record", f"line {self.line} is not strict JSON: {e}") from None

    def _header(self, raw: bytes) -> None:
        header = self._parse(raw)
        if isinstance(header, dict) and header.get("cairn_bundle") == 1 and not isinstance(header.get("cairn_bundle"), bool):
            raise _Fail("malformed-record", "this is a format 1 bundle (Cairn 0.1): this verifier reads format 2")
        try:
            _members(header, ("cairn_bundle", "server_name", "org_id", "origin", "server_key",
                              "complete_log", "exported_at"), ("log_keys",), "the header")
            _need("log_keys" not in header or (isinstance(header["log_keys"], list) and all(
                isinstance(k, str) for k in header["log_keys"])), "log_keys is an array of strings")
            _need(header["cairn_bundle"] == 2 and _is_uint(header["cairn_bundle"]), "cairn_bundle is 2")
            _need(isinstance(header["server_name"], str) and _valid_key_name(header["server_name"]),
                  "server_name is a key name")
            _need(_is_id(header["org_id"]), "org_id is an id")
            _need(isinstance(header["origin"], str), "origin is a string")
            _need(isinstance(header["server_key"], str), "server_key is a string")
            _need(isinstance(header["complete_log"], bool), "complete_log is a boolean")
            _need(_is_ts(header["exported_at"]), "exported_at is a canonical timestamp")
            _need(header["origin"] == f"{header['server_name']}/{header['org_id']}",
                  "origin is server_name/org_id")
        except _Malformed as e:
            raise _Fail("malformed-record", f"line 1 is not a Cairn bundle header: {e}") from None
        self.header = header
        self.org_id = header["org_id"]
        self.origin = header["origin"]
        self.complete = header["complete_log"]

    def _open(self, note: Any, what: str, at: Optional[Position] = None) -> str:
        try:
            return _open_note(note, self.keys)
        except _NoteMalformed as e:
            raise _Fail("malformed-record", f"{what}: {e}", at) from None
        except _NoteUnverified as e:
            raise _Fail("bad-signature", f"{what}: {e}", at) from None

    def _checkpoint(self, obj: Any) -> None:
        # The header's key is read when it is needed, for the checkpoint:
        # a key that is not a vkey fails at line 2, as in the Rust verifier.
        if self.pinned:
            self.keys = self.pinned
        else:
            try:
                self.keys = [_parse_vkey(k) for k in [self.header["server_key"], *self.header.get("log_keys", [])]]
            except ValueError as e:
                raise _Fail("malformed-record", f"a key in the header: {e}") from None
        try:
            _members(obj, ("checkpoint",), (), "line 2")
            _need(isinstance(obj["checkpoint"], str), "the checkpoint is a signed note")
        except _Malformed as e:
            raise _Fail("malformed-record", f"line 2 holds the checkpoint: {e}") from None
        text = self._open(obj["checkpoint"], "the checkpoint")
        self.signed_notes.append(obj["checkpoint"])
        try:
            origin, size, root = _parse_checkpoint(text)
        except ValueError as e:
            raise _Fail("malformed-record", f"the checkpoint: {e}") from None
        if origin != self.origin:
            raise _Fail("malformed-record", f"the checkpoint is of {origin}, not of {self.origin}")
        if self.witnesses:
            by = [w.name for w in self.witnesses if _cosigned_by(obj["checkpoint"], w)]
            if len(by) < self.quorum:
                raise _Fail("insufficient-cosignatures",
                            f"the bundle's checkpoint carries {len(by)} valid cosignature(s) of the "
                            f"{self.quorum} the witness policy needs")
        self.size, self.root = size, root
        for note in self.trusted_notes:
            try:
                t_origin, t_size, t_root = _parse_checkpoint(_open_note(note, self.keys))
            except ValueError as e:
                raise _Fail("bad-signature", f"a trusted checkpoint: {e}") from None
            if t_origin != self.origin:
                raise _Fail("bad-signature", f"a trusted checkpoint is of {t_origin}, not of {self.origin}")
            if t_size > size:
                raise _Fail("missing-proof",
                            f"a trusted checkpoint of size {t_size} is newer than the bundle's ({size}): export again")
            if t_size == size and t_root != root:
                raise _Fail("inconsistent-checkpoint",
                            f"the trusted checkpoint of size {t_size} has another root than the bundle's")
            if 0 < t_size < size:
                self.trusted.append((t_size, t_root))

    def _consistency(self, obj: JSONObject) -> None:
        try:
            _members(obj, ("consistency",), (), "a consistency line")
            body = _members(obj["consistency"], ("old_size", "proof"), (), "a consistency line")
            old_size = body["old_size"]
            _need(_is_uint(old_size), "old_size is a non-negative integer")
            _need(isinstance(body["proof"], list), "proof is an array")
            proof = _proof_hashes(body["proof"])
            _need(0 < old_size < self.size, f"old_size {old_size} is not between 0 and {self.size}")
            _need(old_size > self.last_old_size, "consistency lines go in increasing old_size")
        except _Malformed as e:
            raise _Fail("malformed-record", f"line {self.line}: {e}") from None
        self.last_old_size = old_size
        self.consistency_sizes.add(old_size)
        for t_size, t_root in self.trusted:
            if t_size == old_size and not _verify_consistency(old_size, self.size, proof, t_root, self.root):
                raise _Fail("inconsistent-checkpoint",
                            f"the log at the bundle's checkpoint is not consistent with the trusted checkpoint of size {old_size}")

    def _selection(self, obj: Any) -> None:
        for t_size, _root in self.trusted:
            if t_size not in self.consistency_sizes:
                raise _Fail("missing-proof",
                            f"no consistency proof from the trusted checkpoint of size {t_size}: export with --since-size {t_size}")
        if not isinstance(obj, dict) or "selection" not in obj:
            raise _Fail("missing-proof", "a partial bundle needs its signed selection here")
        try:
            _members(obj, ("selection", "note"), (), "the selection line")
            selection = _decode_selection(obj["selection"])
        except _Malformed as e:
            raise _Fail("malformed-record", f"the selection: {e}") from None
        text = self._open(obj["note"], "the selection note")
        self.signed_notes.append(obj["note"])
        lines = text.split("\n")
        if len(lines) != 6 or lines[5] != "" or lines[0] != "cairn-selection/v2":
            raise _Fail("malformed-record", "the selection note is not a cairn-selection/v2 note of five lines")
        # The other lines are compared as text with what they must say (a
        # line that is not even a number or base64 simply says something else).
        if lines[1] != self.origin or lines[2] != str(self.size) or lines[3] != _b64(self.root):
            raise _Fail("selection-mismatch", "the selection note speaks of another log or checkpoint")
        if selection["checkpoint_size"] != self.size:
            raise _Fail("selection-mismatch",
                        f"the selection is of checkpoint size {selection['checkpoint_size']}, the bundle's is {self.size}")
        computed = _h("cairn/v2/selection", canonical(selection))
        if lines[4] != _b64(computed):
            raise _Fail("digest-mismatch", f"the selection hashes to {computed.hex()}, its note says {lines[4]}")
        self.selection = selection
        self.level = selection["level"]
        self.listed_sessions = {s["session_id"]: s for s in selection["sessions"]}
        self.records = selection["records"]

    def _end(self, obj: JSONObject) -> None:
        try:
            _members(obj, ("end",), (), "the end line")
            _members(obj["end"], ("entries",), (), "the end line")
            _need(_is_uint(obj["end"]["entries"]), "entries is a non-negative integer")
        except _Malformed as e:
            raise _Fail("malformed-record", str(e)) from None
        if obj["end"]["entries"] != self.entry_lines:
            raise _Fail("malformed-record",
                        f"the end line counts {obj['end']['entries']} entries, {self.entry_lines} were read")

    # -- entries -------------------------------------------------------------

    def _entry(self, obj: Any) -> None:
        self.entry_lines += 1
        self.checked += 1
        stated = obj.get("seq") if isinstance(obj, dict) else None
        try:
            entry = _decode_entry(obj, self.line)
        except _Malformed as e:
            raise _Fail("malformed-record", str(e),
                        Position(seq=stated if _is_uint(stated) else None)) from None
        if isinstance(entry, _OpEntry) and entry.type == "session-start":
            # The stated genesis must be the one the header gives (5.2); the
            # Rust verifier checks it as it reads the record, so it is
            # reported like a decoding failure (line and seq only).
            view = entry.view
            genesis = _h("cairn/v2/genesis", canonical({k: v for k, v in view.items() if k != "genesis"}))
            if view["genesis"] != genesis.hex():
                raise _Fail("digest-mismatch",
                            f"the session start's genesis is not the one its header gives ({genesis.hex()})",
                            Position(seq=entry.seq))
        if self.complete and entry.proof is not None:
            raise _Fail("malformed-record", "an entry of a complete bundle carries no proof", Position(seq=entry.seq))
        if self.complete:
            self._complete_entry(entry)
        else:
            self._partial_entry(entry)
        self.last_valid = entry.position()

    def _complete_entry(self, e: _Entry) -> None:
        expected = self.tree.size
        if e.seq == expected and expected >= self.size:
            raise _Fail("uncovered-entry", f"seq {e.seq} lies beyond the checkpoint (size {self.size})", Position(seq=e.seq))
        if e.seq != expected:
            at = e.position()
            at.seq = expected
            raise _Fail("sequence-gap", f"expected seq {expected}, found {e.seq}", at)
        self._time(e)
        self._record(e)
        self.tree.push(e.leaf())
        size = self.tree.size
        if size == self.size and self.tree.root() != self.root:
            raise _Fail("inconsistent-checkpoint", f"the log's root at size {size} is not the checkpoint's", e.position())
        for t_size, t_root in self.trusted:
            if size == t_size and self.tree.root() != t_root:
                raise _Fail("inconsistent-checkpoint",
                            f"the log's root at size {size} is not the trusted checkpoint's", e.position())

    def _partial_entry(self, e: _Entry) -> None:
        at = e.position()
        if self.last_seq is not None and e.seq <= self.last_seq:
            raise _Fail("sequence-gap", f"seq {e.seq} does not follow seq {self.last_seq}", at)
        if self.record_index < len(self.records) and self.records[self.record_index][0] < e.seq:
            listed = self.records[self.record_index]
            raise _Fail("missing-record", f"the selection lists a {listed[1]} record at seq {listed[0]}; it is absent",
                        Position(seq=listed[0]))
        if e.seq >= self.size:
            raise _Fail("uncovered-entry", f"seq {e.seq} lies beyond the checkpoint (size {self.size})", at)
        if e.proof is None:
            raise _Fail("missing-proof", f"seq {e.seq} has no inclusion proof", at)
        if not _verify_inclusion(e.leaf(), e.seq, self.size, e.proof, self.root):
            raise _Fail("inclusion-mismatch",
                        f"the inclusion proof of seq {e.seq} does not lead to the checkpoint's root", at)
        if isinstance(e, _StepEntry):
            session_id = e.fields.get("session_id")  # a string when shown (_FIELD_CHECKS)
            session = self.listed_sessions.get(session_id) if isinstance(session_id, str) else None
            index = e.fields.get("step_index")
            if session is None or not isinstance(index, int) or index >= session["steps"]:
                raise _Fail("unlisted-entry", "the selection does not list this step", at)
        else:
            if self.record_index >= len(self.records) or self.records[self.record_index][0] != e.seq:
                raise _Fail("unlisted-entry", f"the selection does not list seq {e.seq}", at)
            if self.records[self.record_index][1] != e.type:
                raise _Fail("selection-mismatch",
                            f"the selection lists seq {e.seq} as {self.records[self.record_index][1]}, not {e.type}", at)
            self.record_index += 1
            if e.type == "session-start" and e.view["session_id"] in self.listed_sessions:
                if not self._in_scope(e.view):
                    raise _Fail("selection-mismatch",
                                f"session {e.view['session_id']} is listed but its scope does not select it", at)
        self._time(e)
        self._record(e)
        self.last_seq = e.seq

    def _in_scope(self, view: JSONObject) -> bool:
        # Only a partial bundle's entries are matched with its scope, and
        # they come after its selection line.
        assert self.selection is not None
        scope = self.selection["scope"]
        if "session" in scope:
            return bool(view["session_id"] == scope["session"])
        if "agent" in scope:
            return bool(view["agent_id"] == scope["agent"])
        return bool(scope["since"] <= view["started_at"] < scope["until"])

    def _time(self, e: _Entry) -> None:
        if self.last_logged_at is not None and e.logged_at < self.last_logged_at:
            raise _Fail("bad-timestamp", f"logged_at {e.logged_at} is before the previous entry's ({self.last_logged_at})",
                        e.position())
        self.last_logged_at = e.logged_at

    def _record(self, e: _Entry) -> None:
        if isinstance(e, _StepEntry):
            self._step(e)
        else:
            self._op(e)

    # -- a step (9.2) ----------------------------------------------------------

    def _step(self, e: _StepEntry) -> None:
        at = e.position()
        fields, hidden = e.fields, e.hidden
        if fields.get("org_id") != self.org_id:
            raise _Fail("malformed-record", f"a step of org {fields.get('org_id')!r} in the log of {self.org_id}", at)
        shows = LEVEL_SHOWS[self.level]
        erased = []
        for name in FIELDS:
            if name not in shows:
                if name not in hidden:
                    raise _Fail("malformed-record", f"field {name} is shown beyond the {self.level} level", at)
            elif name in _NEVER_HIDDEN or name not in _PAYLOAD:
                if name not in fields:
                    raise _Fail("malformed-record", f"field {name} must be shown at the {self.level} level", at)
            elif name not in fields:
                erased.append(name)
        session_id = fields["session_id"]
        session = self.sessions.get(session_id)
        if session is None:
            raise _Fail("missing-record", f"session {session_id} was not started before this step", at)
        if session.sealed:
            raise _Fail("step-after-seal", f"session {session_id} is sealed", at)
        index = fields["step_index"]
        if index != session.next_index:
            raise _Fail("sequence-gap", f"expected step index {session.next_index}, found {index}", at)
        if e.prev_hash != session.head:
            raise _Fail("prev-hash-mismatch", f"prev_hash {e.prev_hash.hex()} is not the session's head {session.head.hex()}", at)
        commitments = []
        for name in FIELDS:
            if name in fields:
                commitments.append(_h("cairn/v2/field", bytes.fromhex(e.salts[name]), canonical(fields[name])))
            else:
                commitments.append(bytes.fromhex(hidden[name]))
        digest = _h("cairn/v2/step", *commitments)
        if digest != e.digest:
            raise _Fail("digest-mismatch",
                        f"digest recomputed from the fields is {digest.hex()}, recorded {e.digest.hex()}", at)
        chain = _h("cairn/v2/chain", session.head, e.digest, _u64(index), fields["created_at"].encode())
        if chain != e.record_hash:
            raise _Fail("chain-hash-mismatch", f"chain hash recomputes to {chain.hex()}", at)
        if fields["agent_id"] != session.agent_id:
            raise _Fail("malformed-record",
                        f"a step of agent {fields['agent_id']} in a session of agent {session.agent_id}", at)
        created = fields["created_at"]
        if session.last_created is not None and created < session.last_created:
            raise _Fail("bad-timestamp", f"created_at {created} is before the previous step's ({session.last_created})", at)
        if abs(_micros(created) - _micros(e.logged_at)) > session.skew_us:
            raise _Fail("bad-timestamp",
                        f"created_at {created} lies more than {session.skew_us // 1_000_000} s from logged_at {e.logged_at}", at)
        if session.strict and fields["step_type"] not in _STRICT_KINDS:
            raise _Fail("profile-violation", f"{fields['step_type']} is not allowed in a strict session", at)
        self._step_signature(e, at)
        if erased:
            self.pending[(session_id, index)] = _Erased(e.seq, at, fields.get("trace_id"),
                                                               {name: hidden[name] for name in erased})
        session.head = e.record_hash
        session.next_index += 1
        session.last_created = created
        session.tree.push(_leaf(_frame("cairn/v2/session-leaf", _u64(index), e.record_hash)))

    def _step_signature(self, e: _StepEntry, at: Position) -> None:
        declared = e.fields["signer_key_id"]
        signature = e.signature
        if declared is None and signature is None:
            return
        if declared is None:
            raise _Fail("bad-signature", "a signature on a step that declares no signer", at)
        if signature is None:
            raise _Fail("bad-signature", f"the step declares signer {declared} but carries no signature", at)
        if signature.key_id != declared:
            raise _Fail("bad-signature", f"the step declares signer {declared}, the signature is by {signature.key_id}", at)
        key = self.agent_keys.get(declared)
        if key is None:
            raise _Fail("bad-signature", f"key {declared} was not registered before this step", at)
        if key.agent_id != e.fields["agent_id"]:
            raise _Fail("bad-signature", f"key {declared} is registered for agent {key.agent_id}", at)
        if key.revoked_seq is not None:
            raise _Fail("bad-signature", f"key {declared} was revoked at seq {key.revoked_seq}", at)
        message = _frame("cairn/v2/step-signature", e.digest)
        if not ed25519.verify_strict(key.public, message, signature.raw):
            raise _Fail("bad-signature", f"the signature by {declared} does not verify", at)

    # -- an operational record (9.3) ------------------------------------------

    def _op(self, e: _OpEntry) -> None:
        view = e.view
        at = e.position()
        computed = _h("cairn/v2/op", e.type.encode(), canonical(view))
        if computed != e.record_hash:
            raise _Fail("digest-mismatch", f"the {e.type} record hash recomputes to {computed.hex()}", at)
        if view["org_id"] != self.org_id:
            raise _Fail("malformed-record", f"a record of org {view['org_id']!r} in the log of {self.org_id}", at)
        handler = getattr(self, "_" + e.type.replace("-", "_"))
        handler(e, at)

    def _session_start(self, e: _OpEntry, at: Position) -> None:
        view = e.view
        session_id = view["session_id"]
        if session_id in self.sessions:
            raise _Fail("duplicate-record", f"session {session_id} is started twice", at)
        predecessor = view["predecessor"]
        if predecessor is not None:
            final = bytes.fromhex(predecessor)
            if final not in self.finals:
                raise _Fail("predecessor-mismatch",
                            f"session {session_id} continues {predecessor}, not the final hash of a session sealed before it", at)
            if self.finals[final] is not None:
                raise _Fail("predecessor-mismatch",
                            f"the session ending in {predecessor} is already continued by {self.finals[final]}", at)
            self.finals[final] = session_id
        self.sessions[session_id] = _Session(session_id, view["agent_id"], view["profile"] == "strict",
                                             view["max_clock_skew_s"] * 1_000_000, bytes.fromhex(view["genesis"]))

    def _seal(self, e: _OpEntry, at: Position) -> None:
        view = e.view
        session_id = view["session_id"]
        session = self.sessions.get(session_id)
        if session is None and self.complete:
            raise _Fail("missing-record", f"a seal of session {session_id}, which was never started", at)
        if session is not None:
            if session.sealed:
                raise _Fail("duplicate-record", f"session {session_id} is sealed twice", at)
            count = view["step_count"]
            if count > session.next_index:
                raise _Fail("missing-record", f"the seal counts {count} steps, {session.next_index} were seen", at)
            if count < session.next_index:
                raise _Fail("seal-mismatch", f"the seal counts {count} steps, {session.next_index} were recorded before it", at)
            if view["session_root"] != session.tree.root().hex():
                raise _Fail("seal-mismatch", "the seal's session root is not the root of the session's steps", at)
            if view["final_hash"] != session.head.hex():
                raise _Fail("seal-mismatch", "the seal's final hash is not the session's last chain hash", at)
        text = self._open_at(view["note"], "the seal note", e.seq, at)
        expected = (f"cairn-seal/v2\n{self.origin}\n{session_id}\n{view['step_count']}\n"
                    f"{_b64(bytes.fromhex(view['session_root']))}\n{_b64(bytes.fromhex(view['final_hash']))}\n"
                    f"{view['sealed_at']}\n")
        if text != expected:
            raise _Fail("seal-mismatch", "the seal note states other fields than its record", at)
        if session is not None:
            session.sealed = True
        self._mark_used(view["note"], e.seq)
        self.finals.setdefault(bytes.fromhex(view["final_hash"]), None)

    def _erasure(self, e: _OpEntry, at: Position) -> None:
        view = e.view
        session = self.sessions.get(view["session_id"])
        index = view["step_index"]
        if session is None or index >= session.next_index:
            raise _Fail("erasure-mismatch", f"the erasure names step {index} of {view['session_id']}, not held", at)
        if "content" not in LEVEL_SHOWS[self.level]:
            return
        key = (view["session_id"], index)
        waiting = self.pending.get(key)
        if waiting is None:
            raise _Fail("erasure-mismatch", f"step {index} of {view['session_id']} shows no erased field (or is matched)", at)
        if waiting.trace_id != view["trace_id"] or waiting.commitments != view["commitments"]:
            raise _Fail("erasure-mismatch", f"the erasure does not name step {index} of {view['session_id']} as it is erased", at)
        del self.pending[key]

    def _review(self, e: _OpEntry, at: Position) -> None:
        pass

    def _audit_event(self, e: _OpEntry, at: Position) -> None:
        pass

    def _key_registration(self, e: _OpEntry, at: Position) -> None:
        view = e.view
        public = _b64decode(view["public_key"])
        assert public is not None  # checked when the entry was read (_VIEWS)
        key_id = "agent-" + _sha256(public).hex()[:12]
        if view["key_id"] != key_id:
            raise _Fail("malformed-record", f"key id {view['key_id']} is not its key's ({key_id})", at)
        if key_id in self.agent_keys:
            raise _Fail("duplicate-record", f"key {key_id} is registered twice", at)
        self.agent_keys[key_id] = _AgentKey(view["agent_id"], public, e.seq)

    def _key_revocation(self, e: _OpEntry, at: Position) -> None:
        view = e.view
        key = self.agent_keys.get(view["key_id"])
        if key is None or key.agent_id != view["agent_id"]:
            raise _Fail("malformed-record", f"revocation of {view['key_id']}, not registered for {view['agent_id']}", at)
        if key.revoked_seq is not None:
            raise _Fail("duplicate-record", f"key {view['key_id']} is revoked twice", at)
        key.revoked_seq = e.seq

    # -- log keys (7.10) ---------------------------------------------------------

    def _from(self, key: _Key) -> int:
        added = self.added.get(key.vkey())
        return 0 if added is None else added + 1

    def _until(self, key: _Key) -> Optional[int]:
        retired = self.retired.get(key.vkey())
        return None if retired is None else retired + 1

    def _valid_at(self, seq: int) -> list[_Key]:
        """The trusted keys valid for a record at `seq`, as far as the log told."""
        return [k for k in self.keys if self._from(k) <= seq and (self._until(k) is None or seq < (self._until(k) or 0))]

    def _open_at(self, note: Any, what: str, seq: int, at: Position) -> str:
        try:
            return _open_note(note, self._valid_at(seq))
        except _NoteMalformed as e:
            raise _Fail("malformed-record", f"{what}: {e}", at) from None
        except _NoteUnverified as e:
            raise _Fail("bad-signature", f"{what}: {e}", at) from None

    def _mark_used(self, note: str, seq: int) -> None:
        for key in _note_signers(note, self._valid_at(seq)):
            self.first_used.setdefault(key.vkey(), seq)

    def _log_key(self, e: _OpEntry, at: Position) -> None:
        view = e.view
        key = _parse_vkey(view["key"])
        if key.name != self.header["server_name"]:
            raise _Fail("malformed-record", f"the log-key record names a key of {key.name}, not of this log", at)
        text = self._open_at(view["note"], "the log-key note", e.seq, at)
        if text != f"cairn-log-key/v1\n{self.origin}\n{view['action']}\n{view['key']}\n{view['at']}\n":
            raise _Fail("malformed-record", "the log-key note states other fields than its record", at)
        vkey = key.vkey()
        signers = [k.vkey() for k in _note_signers(view["note"], self._valid_at(e.seq))]
        if view["action"] == "add":
            if vkey in self.added:
                raise _Fail("bad-signature", f"log key {vkey} was already added", at)
            if vkey in self.first_used:
                raise _Fail("bad-signature",
                            f"log key {vkey} signed at seq {self.first_used[vkey]}, before its add record", at)
            if all(s == vkey for s in signers):
                raise _Fail("bad-signature", "a log key's add record must be signed by another valid log key", at)
            self.added[vkey] = e.seq
        else:
            if vkey in self.retired:
                raise _Fail("bad-signature", f"log key {vkey} was already retired", at)
            self.retired[vkey] = e.seq
        for s in signers:
            self.first_used.setdefault(s, e.seq)

    def _signed_for_size(self, note: str, size: int) -> bool:
        """Whether `note` has a valid signature by a trusted key valid for a
        checkpoint of `size` entries (7.10)."""
        valid = [k for k in self.keys
                 if self._from(k) <= size and (self._until(k) is None or size <= (self._until(k) or 0))]
        try:
            _open_note(note, valid)
        except ValueError:
            return False
        return True

    def _signed_trace(self, e: _OpEntry, at: Position) -> None:
        trace = e.view["trace"]
        key_id = trace["signature_key_id"]
        key = self.agent_keys.get(key_id)
        if key is None:
            raise _Fail("bad-signature", f"the trace is signed by {key_id}, not registered before it", at)
        if key.agent_id != trace["agent_id_hash"]:
            raise _Fail("bad-signature", f"key {key_id} is registered for agent {key.agent_id}", at)
        if key.revoked_seq is not None:
            raise _Fail("bad-signature", f"key {key_id} was revoked at seq {key.revoked_seq}", at)
        signature = _b64decode(trace["signature"])
        assert signature is not None  # checked when the entry was read (_is_trace)
        message = canonical({"components": trace["components"], "trace_level": trace["trace_level"]})
        if not ed25519.verify_strict(key.public, message, signature):
            raise _Fail("bad-signature", "the trace's signature does not verify over its components and level", at)

    # -- the end (9.5) -----------------------------------------------------------

    def finish(self) -> None:
        if self.phase != "ended":
            raise _Fail("missing-record", "the bundle ends without its end line (truncated)",
                        Position(line=self.line + 1), line_known=True)
        if self.complete:
            if self.tree.size < self.size:
                raise _Fail("missing-record",
                            f"the checkpoint covers {self.size} entries; the bundle ends at {self.tree.size}",
                            Position(seq=self.tree.size), line_known=True)
            if self.size == 0 and self.root != _sha256(b""):
                raise _Fail("inconsistent-checkpoint", "the empty log's root is not the checkpoint's",
                            Position(), line_known=True)
        else:
            if self.record_index < len(self.records):
                listed = self.records[self.record_index]
                raise _Fail("missing-record", f"the selection lists a {listed[1]} record at seq {listed[0]}; it is absent",
                            Position(seq=listed[0]), line_known=True)
            # A partial bundle ends only after its selection line.
            assert self.selection is not None
            for item in self.selection["sessions"]:
                session = self.sessions.get(item["session_id"])
                seen = session.next_index if session else 0
                if seen < item["steps"]:
                    raise _Fail("missing-record",
                                f"session {item['session_id']} claims {item['steps']} steps, {seen} are here",
                                Position(session_id=item["session_id"], step_index=seen), line_known=True)
                if session is None or session.head.hex() != item["head"]:
                    raise _Fail("selection-mismatch",
                                f"session {item['session_id']} does not end in the claimed head {item['head']}",
                                Position(session_id=item["session_id"]), line_known=True)
        if self.pending:
            waiting = min(self.pending.values(), key=lambda w: w.seq)
            at = Position(None, waiting.position.seq, waiting.position.session_id,
                          waiting.position.step_index, waiting.position.trace_id)
            raise _Fail("erasure-mismatch", "an erased step without the erasure record naming it", at, line_known=True)
        for note in self.signed_notes:
            if not self._signed_for_size(note, self.size):
                raise _Fail("bad-signature",
                            f"the checkpoint of size {self.size} (or its selection) is not signed by a log key valid at that size",
                            Position(), line_known=True)


# -- input -------------------------------------------------------------------


BundleSource = Union[str, bytes, "os.PathLike[str]", Iterable[Union[str, bytes]]]


def _chomp(line: bytes) -> bytes:
    if line.endswith(b"\n"):
        line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
    return line


def _raw_lines(source: BundleSource) -> Iterator[bytes]:
    """The bundle's lines as bytes: only "\\n" ends a line (10.1)."""
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source and os.path.exists(source)):
        with open(source, "rb") as f:
            for line in f:
                yield _chomp(line)
        return
    if isinstance(source, str):
        source = source.encode("utf-8", "surrogatepass")
    if isinstance(source, (bytes, bytearray)):
        for line in io.BytesIO(bytes(source)):
            yield _chomp(line)
        return
    for item in source:
        line = item.encode("utf-8", "surrogatepass") if isinstance(item, str) else item
        yield _chomp(bytes(line))


def verify_bundle(source: BundleSource, keys: Sequence[str] = (),
                  trusted_checkpoints: Sequence[str] = (), witnesses: Sequence[str] = (),
                  witness_quorum: Optional[int] = None) -> Verdict:
    """Verifies a Cairn export bundle offline (FORMAT.md sections 9 and 10).

    `source` is the bundle's text, bytes, a path, an open binary file, or its
    lines. `keys` are the server keys to trust, in vkey form (`name+hex+base64`,
    what `cairn keys` prints); without them the key in the bundle's own header
    is used, which proves integrity but not who signed. `trusted_checkpoints`
    are signed checkpoint notes kept earlier (by you or witnesses): the bundle
    must be consistent with each. `witnesses` are witness cosignature keys
    (vkeys with algorithm 0x04, as `cairn witness` prints them): the
    bundle's checkpoint must then carry valid cosignatures by
    `witness_quorum` of them (default: all), or the verdict fails with
    `insufficient-cosignatures` (FORMAT.md 7.7). A key that is not a vkey,
    or a quorum outside 1 to the number of witnesses, raises ValueError.
    """
    pinned = [_parse_vkey(k) for k in keys]
    cosigners = [_parse_vkey(w, 0x04) for w in witnesses]
    if len({w.name for w in cosigners}) != len(cosigners):
        raise ValueError("a witness is named twice")
    # cosignature/v1 does not sign the witness's name: one key under two
    # names would count one cosignature twice.
    if len({w.public for w in cosigners}) != len(cosigners):
        raise ValueError("two witnesses have the same key")
    quorum = len(cosigners) if witness_quorum is None else witness_quorum
    if cosigners and not 1 <= quorum <= len(cosigners):
        raise ValueError(f"the witness quorum must be 1 to {len(cosigners)}, not {quorum}")
    if not cosigners and witness_quorum is not None:
        raise ValueError("a witness quorum needs witnesses")
    verifier = _Verifier(pinned, trusted_checkpoints, cosigners, quorum)
    verdict = Verdict(False, 0, key_pinned=bool(pinned))
    try:
        for raw in _raw_lines(source):
            verifier.feed(raw)
        verifier.finish()
    except _Fail as failed:
        at = failed.at
        if not failed.line_known:
            at.line = verifier.line
        verdict.failure = Failure(failed.reason, failed.detail, at)
    verdict.records_checked = verifier.checked
    verdict.last_valid = verifier.last_valid
    verdict.verified = verdict.failure is None
    if verifier.header:
        verdict.org_id = verifier.org_id
        verdict.origin = verifier.origin
        verdict.complete_log = verifier.complete
    if verifier.root:
        verdict.checkpoint_size = verifier.size
        verdict.checkpoint_root = verifier.root.hex()
    verdict.selection = verifier.selection
    return verdict
