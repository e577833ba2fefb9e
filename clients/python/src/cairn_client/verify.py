"""Offline verification of Cairn export bundles, written from docs/FORMAT.md.

Nothing here talks to a server: give it a bundle (the file `cairn export`
or `GET /v1/export` produced) and, ideally, the operator's published server
key, and it replays the published algorithm: the signed checkpoint, every
record's hash, every session's chain, seals, agent signatures, signed
traces, continuity between sessions, and the Merkle log (every leaf folded
into the root for a complete log, every inclusion proof for a partial one).
It stops at the first failure and says where and why, with the reason codes
of the Rust verifier (`digest-mismatch`, `prev-hash-mismatch`, ...).
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence, Union

from . import ed25519
from .jcs import canonical

__all__ = ["Failure", "Verdict", "verify_bundle", "FIELDS"]

#: The 22 committed fields of a step, in digest order (FORMAT.md 3.1).
FIELDS = [
    "trace_id", "org_id", "agent_id", "session_id", "step_index", "step_type",
    "step_type_original", "content", "input_data", "output_data", "confidence",
    "duration_ms", "token_count", "model", "metadata", "created_at", "turn_id",
    "turn_step", "task_id", "links", "status", "signer_key_id",
]
_MUST_SHOW = ("step_index", "created_at", "session_id", "step_type", "signer_key_id")
_STRICT_KINDS = {"plan", "analysis", "decision", "reflection"}


@dataclass
class Failure:
    """The first record that did not verify, and why."""

    reason: str
    detail: str
    seq: Optional[int] = None
    session_id: Optional[str] = None
    step_index: Optional[int] = None
    line: Optional[int] = None


@dataclass
class Verdict:
    """The outcome of verifying a bundle."""

    verified: bool
    records_checked: int
    failure: Optional[Failure] = None
    org_id: Optional[str] = None
    checkpoint_size: Optional[int] = None
    #: Whether the key was given by the caller rather than read from the
    #: bundle's own header.
    key_pinned: bool = False


class _Fail(Exception):
    def __init__(self, reason: str, detail: str, seq: Optional[int] = None,
                 session_id: Optional[str] = None, step_index: Optional[int] = None) -> None:
        super().__init__(detail)
        self.failure = Failure(reason, detail, seq, session_id, step_index)


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _frame(tag: str, *parts: bytes) -> bytes:
    out = bytes([len(tag)]) + tag.encode()
    for part in parts:
        out += struct.pack(">I", len(part)) + part
    return out


def _h(tag: str, *parts: bytes) -> bytes:
    return _sha256(_frame(tag, *parts))


def _node(left: bytes, right: bytes) -> bytes:
    return _sha256(b"\x01" + left + right)


def _leaf(data: bytes) -> bytes:
    return _sha256(b"\x00" + data)


def _hex(value: Any, what: str) -> bytes:
    try:
        raw = bytes.fromhex(value)
    except (TypeError, ValueError):
        raise _Fail("malformed-record", f"{what} is not hex") from None
    if len(raw) != 32:
        raise _Fail("malformed-record", f"{what} is not 32 bytes")
    return raw


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


@dataclass
class _Key:
    name: str
    key_id: bytes
    public: bytes


def _parse_vkey(text: str) -> _Key:
    parts = text.strip().split("+", 2)
    if len(parts) != 3:
        raise ValueError(f"not a vkey: {text!r}")
    name, key_hex, blob = parts
    raw = base64.b64decode(blob)
    if len(raw) != 33 or raw[0] != 0x01:
        raise ValueError("not an Ed25519 vkey")
    key_id = _sha256(name.encode() + b"\n" + raw)[:4]
    if key_id.hex() != key_hex.lower():
        raise ValueError("the vkey's key id does not match its key")
    return _Key(name, key_id, raw[1:])


def _open_note(note: str, keys: Sequence[_Key]) -> str:
    """Checks a C2SP signed note (FORMAT.md 7.1) and returns its text."""
    split = note.rfind("\n\n")
    if split < 0:
        raise ValueError("a signed note has a blank line before its signatures")
    text = note[: split + 1]
    verified = False
    for line in note[split + 2:].splitlines():
        if not line.startswith("\u2014 "):
            raise ValueError(f"not a signature line: {line!r}")
        try:
            name, blob = line[2:].split(" ")
            raw = base64.b64decode(blob, validate=True)
        except ValueError:
            raise ValueError(f"not a signature line: {line!r}") from None
        for key in keys:
            if key.name == name and raw[:4] == key.key_id:
                if len(raw) != 68 or not ed25519.verify(key.public, text.encode(), raw[4:]):
                    raise ValueError(f"the signature by {name} does not verify")
                verified = True
    if not verified:
        raise ValueError("no signature by a trusted key")
    return text


@dataclass
class _Session:
    session_id: str
    agent_id: str
    strict: bool
    head: bytes
    next_index: int = 0
    sealed: bool = False
    tree: _Frontier = field(default_factory=_Frontier)


class _Verifier:
    def __init__(self, header: dict, keys: Sequence[_Key], size: int, root: bytes) -> None:
        self.org_id: str = header["org_id"]
        self.origin: str = f"{header['server_name']}/{self.org_id}"
        self.complete: bool = bool(header.get("complete_log"))
        self.keys = keys
        self.size, self.root = size, root
        self.tree = _Frontier()
        self.last_seq: Optional[int] = None
        self.sessions: dict[str, _Session] = {}
        self.agent_keys: dict[str, tuple[str, bytes]] = {}
        self.sealed_finals: dict[bytes, Optional[str]] = {}

    # -- one entry ---------------------------------------------------------

    def push(self, entry: dict) -> None:
        seq = entry.get("seq")
        kind = entry.get("type")
        if not isinstance(seq, int) or not isinstance(kind, str):
            raise _Fail("malformed-record", "an entry needs an integer seq and a type")
        if kind == "step":
            record_hash, session_id, index = self._step(entry, seq)
        else:
            record_hash, session_id, index = self._op(entry, seq, kind), None, None
        leaf = _leaf(_frame("cairn/v1/log-leaf", struct.pack(">Q", seq), kind.encode(), record_hash))
        if self.complete:
            if seq != self.tree.size:
                raise _Fail("sequence-gap", f"expected seq {self.tree.size}, found {seq}", seq)
            self.tree.push(leaf)
            if self.tree.size == self.size and self.tree.root() != self.root:
                raise _Fail("inconsistent-checkpoint",
                            f"log root at size {self.size} is not the checkpoint's", seq)
        else:
            if self.last_seq is not None and seq <= self.last_seq:
                raise _Fail("sequence-gap", f"seq {seq} does not follow seq {self.last_seq}", seq)
            proof = [_hex(p, "a proof hash") for p in entry.get("proof") or []]
            if "proof" not in entry:
                raise _Fail("inclusion-mismatch", f"seq {seq} has no inclusion proof", seq)
            if not _verify_inclusion(leaf, seq, self.size, proof, self.root):
                raise _Fail("inclusion-mismatch",
                            f"inclusion proof of seq {seq} in the checkpoint of size {self.size} fails",
                            seq, session_id, index)
            self.last_seq = seq

    def _op(self, entry: dict, seq: int, kind: str) -> bytes:
        view = entry.get("view")
        if not isinstance(view, dict):
            raise _Fail("malformed-record", "an operational record needs a view", seq)
        recorded = _hex(entry.get("hash"), "hash")
        computed = _h("cairn/v1/op", kind.encode(), canonical(view))
        if computed != recorded:
            raise _Fail("digest-mismatch", f"{kind} record hash recomputes to {computed.hex()}", seq,
                        view.get("session_id"))
        if view.get("org_id") != self.org_id:
            raise _Fail("malformed-record", f"record of org {view.get('org_id')!r} in the log of {self.org_id}", seq)
        session_id = view.get("session_id")
        if kind == "session-start":
            self._session_start(view, seq)
        elif kind == "seal":
            self._seal(view, seq)
        elif kind == "key-registration":
            public = base64.b64decode(view.get("public_key", ""))
            key_id = "agent-" + _sha256(public).hex()[:12]
            if len(public) != 32 or key_id != view.get("key_id"):
                raise _Fail("malformed-record", f"key id {view.get('key_id')} does not match the registered key", seq)
            self.agent_keys[key_id] = (view.get("agent_id", ""), public)
        elif kind == "signed-trace":
            self._signed_trace(view, seq)
        elif kind not in ("erasure", "review", "audit-event"):
            raise _Fail("malformed-record", f"unknown record type {kind}", seq, session_id)
        return recorded

    def _session_start(self, view: dict, seq: int) -> None:
        header = {k: v for k, v in view.items() if k != "genesis"}
        genesis = _h("cairn/v1/genesis", canonical(header))
        session_id = header.get("session_id")
        if view.get("genesis") != genesis.hex():
            raise _Fail("malformed-record", "the genesis does not match the header", seq, session_id)
        if session_id in self.sessions:
            raise _Fail("malformed-record", f"session {session_id} started twice", seq, session_id)
        predecessor = header.get("predecessor")
        if predecessor is not None:
            final = _hex(predecessor, "predecessor")
            if final not in self.sealed_finals:
                raise _Fail("predecessor-mismatch",
                            f"session {session_id} continues {predecessor}, which is not the final hash of a session sealed before it",
                            seq, session_id)
            if self.sealed_finals[final] is not None:
                raise _Fail("predecessor-mismatch",
                            f"the session ending in {predecessor} is already continued by {self.sealed_finals[final]}",
                            seq, session_id)
            self.sealed_finals[final] = session_id
        self.sessions[session_id] = _Session(session_id, header.get("agent_id", ""),
                                             header.get("profile") == "strict", genesis)

    def _seal(self, view: dict, seq: int) -> None:
        session_id = view.get("session_id")
        root = _hex(view.get("session_root"), "session_root")
        final = _hex(view.get("final_hash"), "final_hash")
        session = self.sessions.get(session_id)
        if session is None and self.complete:
            raise _Fail("missing-record", f"seal of unknown session {session_id}", seq, session_id)
        if session is not None:
            if session.sealed:
                raise _Fail("malformed-record", "session sealed twice", seq, session_id)
            count = view.get("step_count")
            if count > session.next_index:
                raise _Fail("missing-record", f"seal covers {count} steps; only {session.next_index} present", seq, session_id)
            if count < session.next_index:
                raise _Fail("seal-mismatch", f"seal covers {count} steps; {session.next_index} were recorded before it", seq, session_id)
            if final != session.head or root != session.tree.root():
                raise _Fail("seal-mismatch", "seal's root or final hash does not match the session's steps", seq, session_id)
            session.sealed = True
        expected = (f"cairn-seal/v1\n{self.origin}\n{session_id}\n{view.get('step_count')}\n"
                    f"{base64.b64encode(root).decode()}\n{base64.b64encode(final).decode()}\n{view.get('sealed_at')}\n")
        try:
            text = _open_note(view.get("note", ""), self.keys)
        except ValueError as e:
            raise _Fail("bad-signature", f"seal: {e}", seq, session_id) from None
        if text != expected:
            raise _Fail("bad-signature", "seal note does not state this seal's fields", seq, session_id)
        self.sealed_finals.setdefault(final, None)

    def _signed_trace(self, view: dict, seq: int) -> None:
        trace = view.get("trace") or {}
        key_id = trace.get("signature_key_id")
        session_id = view.get("session_id")
        registered = self.agent_keys.get(key_id)
        if registered is None:
            raise _Fail("bad-signature", f"trace signed by {key_id}, which is not registered", seq, session_id)
        agent, public = registered
        if agent != trace.get("agent_id_hash"):
            raise _Fail("bad-signature", f"key {key_id} is registered for agent {agent}, not {trace.get('agent_id_hash')}", seq, session_id)
        payload = canonical({"components": trace.get("components"), "trace_level": trace.get("trace_level")})
        try:
            signature = base64.b64decode(trace.get("signature", ""))
        except ValueError:
            signature = b""
        if not ed25519.verify(public, payload, signature):
            raise _Fail("bad-signature", "the trace's signature does not verify over its components and trace level", seq, session_id)

    def _step(self, entry: dict, seq: int) -> tuple[bytes, str, int]:
        fields = entry.get("fields") or {}
        salts = entry.get("salts") or {}
        hidden = entry.get("hidden") or {}
        session_id = fields.get("session_id")
        index = fields.get("step_index")
        where = dict(seq=seq, session_id=session_id, step_index=index)
        for name in FIELDS:
            shown, is_hidden = name in fields, name in hidden
            if shown == is_hidden:
                raise _Fail("malformed-record", f"field {name} must be either shown with its salt or hidden", **where)
            if shown and name not in salts:
                raise _Fail("malformed-record", f"field {name} has no salt", **where)
        for name in _MUST_SHOW:
            if name not in fields:
                raise _Fail("malformed-record", f"{name} must be disclosed", **where)
        if fields.get("org_id") != self.org_id:
            raise _Fail("malformed-record", f"step of org {fields.get('org_id')!r} in the log of {self.org_id}", **where)
        session = self.sessions.get(session_id)
        if session is None:
            raise _Fail("missing-record", f"session {session_id} has no session-start record", **where)
        if session.sealed:
            raise _Fail("step-after-seal", f"session {session_id} was sealed at {session.next_index} steps", **where)
        if index != session.next_index:
            raise _Fail("sequence-gap", f"expected step index {session.next_index}, found {index}", **where)
        prev = _hex(entry.get("prev_hash"), "prev_hash")
        if prev != session.head:
            raise _Fail("prev-hash-mismatch", f"prev_hash {prev.hex()} is not the previous chain hash", **where)
        commitments = []
        for name in FIELDS:
            if name in fields:
                salt = bytes.fromhex(salts[name])
                if len(salt) != 16:
                    raise _Fail("malformed-record", f"the salt of {name} is not 16 bytes", **where)
                commitments.append(_h("cairn/v1/field", salt, canonical(fields[name])))
            else:
                commitments.append(_hex(hidden[name], f"commitment of {name}"))
        digest = _h("cairn/v1/step", *commitments)
        recorded = _hex(entry.get("digest"), "digest")
        if digest != recorded:
            raise _Fail("digest-mismatch", f"digest recomputed from the fields is {digest.hex()}, recorded {recorded.hex()}", **where)
        chain = _h("cairn/v1/chain", prev, recorded, struct.pack(">Q", index), fields["created_at"].encode())
        recorded_hash = _hex(entry.get("hash"), "hash")
        if chain != recorded_hash:
            raise _Fail("chain-hash-mismatch", f"chain hash recomputes to {chain.hex()}", **where)
        if session.strict and fields.get("step_type") not in _STRICT_KINDS:
            raise _Fail("profile-violation", f"{fields.get('step_type')} is not allowed in a strict session", **where)
        self._step_signature(entry, fields, recorded, where)
        session.head = recorded_hash
        session.next_index += 1
        session.tree.push(_leaf(_frame("cairn/v1/session-leaf", struct.pack(">Q", index), recorded_hash)))
        return recorded_hash, session_id, index

    def _step_signature(self, entry: dict, fields: dict, digest: bytes, where: dict) -> None:
        declared = fields.get("signer_key_id")
        signature = entry.get("signature")
        if declared is None and signature is None:
            return
        if declared is None:
            raise _Fail("bad-signature", "a signature on a step that declares no signer", **where)
        if signature is None:
            raise _Fail("bad-signature", f"the step declares signer {declared} but carries no signature", **where)
        if signature.get("key_id") != declared:
            raise _Fail("bad-signature", f"the step declares signer {declared}, the signature is by {signature.get('key_id')}", **where)
        registered = self.agent_keys.get(declared)
        if registered is None:
            raise _Fail("bad-signature", f"signing key {declared} is not registered", **where)
        agent, public = registered
        if "agent_id" in fields and fields["agent_id"] != agent:
            raise _Fail("bad-signature", f"key {declared} belongs to agent {agent}", **where)
        message = _frame("cairn/v1/step-signature", digest)
        if not ed25519.verify(public, message, base64.b64decode(signature.get("signature", ""))):
            raise _Fail("bad-signature", f"signature by {declared} does not verify", **where)

    def finish(self) -> None:
        if self.complete and self.tree.size != self.size:
            raise _Fail("missing-record", f"the checkpoint covers {self.size} entries; the bundle has {self.tree.size}",
                        self.tree.size)


BundleSource = Union[str, bytes, "os.PathLike[str]", Iterable[str]]


def _split(text):
    # Only "\n" (or "\r\n") ends a bundle line, as in Rust's str::lines:
    # str.splitlines would also split at U+2028, U+0085 and other
    # separators that JSON carries unescaped inside a record's text.
    lines = text.split(b"\n" if isinstance(text, bytes) else "\n")
    if lines and not lines[-1]:
        lines.pop()
    cr = b"\r" if isinstance(text, bytes) else "\r"
    return [line[:-1] if line.endswith(cr) else line for line in lines]


def _text(line):
    # Decoded one line at a time, so that a byte that is not UTF-8 fails
    # verification at its line.
    if isinstance(line, bytes):
        try:
            return line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"not UTF-8 text: {e}") from None
    return line


def _lines(source: BundleSource) -> Iterable[str]:
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source and os.path.exists(source)):
        with open(source, "rb") as f:
            source = f.read()
    if isinstance(source, (str, bytes)):
        return _split(source)
    return source


def verify_bundle(source: BundleSource, keys: Sequence[str] = ()) -> Verdict:
    """Verifies a Cairn export bundle offline.

    `source` is the bundle's text, bytes, a path, or its lines. `keys` are
    the server keys to trust, in vkey form (`name+hex+base64`, what `cairn
    keys` prints); without them the key in the bundle's own header is used,
    which proves integrity but not who signed.
    """
    lines = iter(_lines(source))
    line_number = 0
    checked = 0
    verdict = Verdict(False, 0, key_pinned=bool(keys))
    verifier: Optional[_Verifier] = None
    ended = False
    entries = 0
    try:
        try:
            first = next(lines)
        except StopIteration:
            raise _Fail("malformed-record", "the bundle is empty") from None
        line_number = 1
        header = json.loads(_text(first))
        if header.get("cairn_bundle") != 1 or not isinstance(header.get("org_id"), str):
            raise _Fail("malformed-record", "line 1 is not a Cairn bundle header")
        verdict.org_id = header["org_id"]
        try:
            trusted = [_parse_vkey(k) for k in keys] or [_parse_vkey(header.get("server_key", ""))]
        except ValueError as e:
            raise _Fail("malformed-record", f"server key: {e}") from None
        line_number = 2
        note = json.loads(_text(next(lines, "{}"))).get("checkpoint")
        if not isinstance(note, str):
            raise _Fail("malformed-record", "line 2 must hold the checkpoint")
        try:
            text = _open_note(note, trusted)
        except ValueError as e:
            raise _Fail("bad-signature", f"checkpoint: {e}") from None
        parts = text.split("\n")
        origin = f"{header.get('server_name')}/{header['org_id']}"
        if len(parts) < 4 or parts[0] != origin:
            raise _Fail("bad-signature", f"the checkpoint is not for {origin}")
        size = int(parts[1])
        root = base64.b64decode(parts[2])
        verdict.checkpoint_size = size
        verifier = _Verifier(header, trusted, size, root)
        for line in lines:
            line_number += 1
            if ended:
                raise _Fail("malformed-record", "content after the end line")
            try:
                value = json.loads(_text(line))
            except ValueError as e:
                raise _Fail("malformed-record", f"line {line_number} is not JSON: {e}") from None
            if "end" in value:
                ended = True
                if value["end"].get("entries") != entries:
                    raise _Fail("missing-record", f"the bundle says {value['end'].get('entries')} entries, {entries} were read")
                continue
            entries += 1
            verifier.push(value)
            checked += 1
        if not ended:
            raise _Fail("missing-record", "the bundle ends without its end line")
        verifier.finish()
    except _Fail as failed:
        failed.failure.line = line_number
        verdict.failure = failed.failure
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        verdict.failure = Failure("malformed-record", f"line {line_number}: {e}", line=line_number)
    verdict.records_checked = checked
    verdict.verified = verdict.failure is None
    return verdict
