"""The verifier's state machine (docs/FORMAT.md 9, 10): `_Verifier` is fed a
bundle's lines one by one (the header, the signed checkpoint and trusted
checkpoints, consistency lines, a partial bundle's selection, the entries
and the end line), checks every record (steps, operational records, agent
and log keys, seals, erasures) as it comes, and `finish` checks what only
the end can tell; a failure raises `_Fail`."""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from .. import ed25519
from ..jcs import canonical
from ..strict_json import JSONError, loads as strict_loads
from ..types import JSONObject
from .constants import _MAX_PROOF, _NEVER_HIDDEN, _PAYLOAD, _STRICT_KINDS, FIELDS, LEVEL_SHOWS
from .forms import (
    _decode_entry, _decode_selection, _Entry, _is_id, _is_ts, _is_uint, _Malformed, _members, _micros, _need,
    _OpEntry, _proof_hashes, _StepEntry, _WithheldEntry,
)
from .hashing import _b64, _b64decode, _frame, _h, _sha256, _u64
from .merkle import _Frontier, _leaf, _verify_consistency, _verify_inclusion
from .notes import (
    _cosigned_by, _Key, _note_signers, _NoteMalformed, _NoteUnverified, _open_note, _parse_checkpoint, _parse_vkey,
)
from .verdict import _Fail, Position


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
        self.withheld: dict[int, bytes] = {}  # withheld signed traces (8, rule 4): seq -> recorded hash
        self.shown_traces: set[int] = set()  # signed traces read with their view
        self.named_traces: set[int] = set()  # withheld traces a trace-erasure record named
        # log keys (7.10), by vkey text: where added, retired, first used
        self.added: dict[str, int] = {}
        self.retired: dict[str, int] = {}
        self.first_used: dict[str, int] = {}
        self.signed_notes: list[str] = []  # the checkpoint's and the selection's notes
        # what the bundle's checkpoint, then each trusted one, states of the
        # log-key records below its size (its cairn-log-keys line, 7.1)
        self.log_key_counts: list[tuple[int, int]] = []

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
            # No syntax of its own (FORMAT 10.1): it makes the origin and names
            # the log's keys (10.2 step 2), so a name no key can bear fails there.
            _need(isinstance(header["server_name"], str), "server_name is a string")
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
        # A log's keys all bear its key name, the server name of its origin
        # (FORMAT 7.10): a key of another name signs nothing of it.
        named = [k for k in self.keys if k.name == self.header["server_name"]]
        if self.keys and not named:
            raise _Fail("bad-signature", f"none of the keys is named {self.header['server_name']}, the log's key name")
        self.keys = named
        text = self._open(obj["checkpoint"], "the checkpoint")
        self.signed_notes.append(obj["checkpoint"])
        try:
            origin, size, root, log_keys = _parse_checkpoint(text)
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
        if log_keys is not None:
            self.log_key_counts.append((size, log_keys))
        for note in self.trusted_notes:
            try:
                t_origin, t_size, t_root, t_log_keys = _parse_checkpoint(_open_note(note, self.keys))
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
            if t_log_keys is not None:
                self.log_key_counts.append((t_size, t_log_keys))
            if 0 < t_size < size:
                self.trusted.append((t_size, t_root))

    def _consistency(self, obj: JSONObject) -> None:
        try:
            _members(obj, ("consistency",), (), "a consistency line")
            body = _members(obj["consistency"], ("old_size", "proof"), (), "a consistency line")
            old_size = body["old_size"]
            _need(_is_uint(old_size), "old_size is a non-negative integer")
            _need(isinstance(body["proof"], list) and len(body["proof"]) <= _MAX_PROOF,
                  f"proof is an array of at most {_MAX_PROOF} hashes")
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
            if isinstance(e, _OpEntry) and e.type == "session-start" and e.view["session_id"] in self.listed_sessions:
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
        elif isinstance(e, _WithheldEntry):
            self.withheld[e.seq] = e.record_hash
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

    def _trace_erasure(self, e: _OpEntry, at: Position) -> None:
        view = e.view
        trace_seq = view["trace_seq"]
        if trace_seq >= e.seq:
            raise _Fail("erasure-mismatch", f"the trace erasure names seq {trace_seq}, which is not before it", at)
        held = self.withheld.pop(trace_seq, None)
        if held is not None:
            self.named_traces.add(trace_seq)
            if held.hex() != view["trace_hash"]:
                raise _Fail("erasure-mismatch",
                            f"the trace erasure names the signed trace at seq {trace_seq} by another hash", at)
            return
        if trace_seq in self.named_traces:
            raise _Fail("erasure-mismatch", f"the signed trace at seq {trace_seq} was named by an earlier trace erasure", at)
        if trace_seq in self.shown_traces:
            raise _Fail("erasure-mismatch", f"the trace erasure names the signed trace at seq {trace_seq}, which shows its view",
                        at)
        if self.complete:
            raise _Fail("erasure-mismatch", f"the trace erasure names seq {trace_seq}, which is not a signed-trace record", at)
        # A partial bundle: an entry it does not hold is not compared; one
        # its selection lists as another type fails.
        i = bisect.bisect_left(self.records, trace_seq, key=lambda record: record[0])
        if i < len(self.records) and self.records[i][0] == trace_seq and self.records[i][1] != "signed-trace":
            raise _Fail("erasure-mismatch",
                        f"the trace erasure names seq {trace_seq}, which the selection lists as a {self.records[i][1]} record",
                        at)
        # Not compared, but named: a second trace erasure of it fails.
        self.named_traces.add(trace_seq)

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
        key = _parse_vkey(view["key"], 0x01)
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
        self.shown_traces.add(e.seq)

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
        first_withheld = min(self.withheld, default=None)
        if self.pending:
            waiting = min(self.pending.values(), key=lambda w: w.seq)
            if first_withheld is None or waiting.seq < first_withheld:
                at = Position(None, waiting.position.seq, waiting.position.session_id,
                              waiting.position.step_index, waiting.position.trace_id)
                raise _Fail("erasure-mismatch", "an erased step without the erasure record naming it", at,
                            line_known=True)
        if first_withheld is not None:
            raise _Fail("erasure-mismatch", "a withheld signed trace without the trace-erasure record naming it",
                        Position(seq=first_withheld), line_known=True)
        # Each checkpoint's cairn-log-keys line against the log-key records
        # read below its size, the smallest size first (7.1, 9.5): a partial
        # bundle holds every one (10.4), so fewer is one left out.
        for count_size, count in sorted(self.log_key_counts, key=lambda c: c[0]):
            read = sum(1 for seq in [*self.added.values(), *self.retired.values()] if seq < count_size)
            if read != count:
                holder = "bundle" if not self.complete and read < count else "log"
                raise _Fail("missing-record" if holder == "bundle" else "inconsistent-checkpoint",
                            f"the checkpoint of size {count_size} says its log holds {count} log-key records below "
                            f"that size (its cairn-log-keys line); the {holder} holds {read} (FORMAT.md 7.1, 7.10)",
                            Position(), line_known=True)
        for note in self.signed_notes:
            if not self._signed_for_size(note, self.size):
                raise _Fail("bad-signature",
                            f"the checkpoint of size {self.size} (or its selection) is not signed by a log key valid at that size",
                            Position(), line_known=True)
