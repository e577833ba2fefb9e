"""What a verification says (docs/FORMAT.md 9.1, 9.6): the reason codes,
`Position`, `Failure` and `Verdict`, and `_Fail`, the exception a check
raises with its reason."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..types import JSONObject


#: The reason codes of FORMAT.md 9.1.
REASONS = (
    "malformed-record", "sequence-gap", "prev-hash-mismatch", "chain-hash-mismatch",
    "digest-mismatch", "bad-signature", "inclusion-mismatch", "inconsistent-checkpoint",
    "missing-record", "step-after-seal", "seal-mismatch", "profile-violation",
    "predecessor-mismatch", "duplicate-record", "uncovered-entry", "unlisted-entry",
    "missing-proof", "erasure-mismatch", "bad-timestamp", "selection-mismatch", "insufficient-cosignatures",
)


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
