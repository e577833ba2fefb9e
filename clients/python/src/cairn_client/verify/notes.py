"""Signed notes (docs/FORMAT.md 7.1, 7.7, C2SP signed-note and
tlog-checkpoint): vkeys, opening a note with trusted keys, which keys signed
it, witness cosignatures, and the checkpoint a note's text states."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from .. import ed25519
from .hashing import _WHITE_SPACE, _b64, _b64decode, _hexbytes, _sha256


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
    """FORMAT.md 7.1: non-empty, without `+` or white space (Unicode's
    White_Space; any other character is a name's, as in the other
    verifiers)."""
    return bool(name) and not any(c in _WHITE_SPACE or c == "+" for c in name)


def _parse_vkey(text: str, alg: int | None = None) -> _Key:
    """A C2SP vkey `<name>+<hex key id>+<base64(alg || key)>`: an Ed25519
    note key (alg 0x01) or a cosignature/v1 witness key (alg 0x04), either
    when `alg` is None (FORMAT.md 7.1, 10.2 step 2: a header's or a pinned
    key may be either; only an 0x01 key's signature can open a note);
    ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError("a vkey is a string")
    parts = text.split("+", 2)
    if len(parts) != 3:
        raise ValueError(f"not a vkey: {text!r}")
    name, key_hex, blob = parts
    if not _valid_key_name(name):
        raise ValueError(f"not a key name: {name!r}")
    # Hex digits of either case, as the other verifiers read them (Cairn
    # writes lowercase).
    key_id = _hexbytes(key_hex.lower() if key_hex.isascii() else key_hex, 4)
    raw = _b64decode(blob)
    if key_id is None:
        raise ValueError("a vkey's key id is 8 hex digits")
    if raw is None or len(raw) != 33 or raw[0] not in ((0x01, 0x04) if alg is None else (alg,)):
        raise ValueError({None: "not an Ed25519 (0x01) or cosignature/v1 (0x04) vkey", 0x01: "not an Ed25519 vkey"}
                         .get(alg, "not a cosignature/v1 vkey (algorithm 0x04)"))
    if not ed25519.is_curve_point(raw[1:]):
        raise ValueError("a vkey's key is not an Ed25519 point")
    if _sha256(name.encode() + b"\n" + raw)[:4] != key_id:
        raise ValueError("the vkey's key id does not match its key")
    return _Key(name, key_id, raw[1:], raw[0])


def _is_vkey(text: Any) -> bool:
    """A readable Ed25519 note vkey (7.1, algorithm 0x01: a `log-key`
    record's `key`, 10.1)."""
    try:
        _parse_vkey(text, 0x01)
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
            if (key.alg == 0x01 and key.name == name and raw[:4] == key.key_id and key not in signers
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
        # FORMAT 7.1: the bound is on distinct lines (a line repeated
        # exactly counts once, wherever the repeat comes).
        if line in seen:
            continue
        if len(signatures) == _MAX_SIGNATURES:
            raise _NoteMalformed(f"more than {_MAX_SIGNATURES} signatures")
        seen.add(line)
        signatures.append((name, raw))
    verified = False
    message = text.encode()
    for name, raw in signatures:
        for key in keys:
            # Only an Ed25519 note key (0x01) signs a note; a cosignature/v1
            # key's lines are cosignatures (7.7), never the note's signature.
            if key.alg == 0x01 and key.name == name and raw[:4] == key.key_id:
                if not ed25519.verify_strict(key.public, message, raw[4:]):
                    raise _NoteUnverified(f"the signature by {name} does not verify")
                verified = True
    if not verified:
        raise _NoteUnverified("no signature by a trusted key")
    return text


_DECIMAL = re.compile(r"0|[1-9][0-9]*")


_LOG_KEYS_EXTENSION = "cairn-log-keys"


def _parse_checkpoint(text: str) -> tuple[str, int, bytes, int | None]:
    """Origin, size, root, and the count of Cairn's `cairn-log-keys <count>`
    extension line (FORMAT.md 7.1: the log-key records below the size), None
    without one. Other extension lines are ignored."""
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "" or not _DECIMAL.fullmatch(lines[1]) or any(not x for x in lines[3:-1]):
        raise ValueError("not a checkpoint (origin, size, root)")
    root = _b64decode(lines[2])
    if root is None or len(root) != 32:
        raise ValueError("a checkpoint's root is the base64 of 32 bytes")
    size = int(lines[1])
    if size >= 2**64:
        raise ValueError("a checkpoint's size is at most 2^64 - 1")
    # The word alone, or the word and a space, is Cairn's line: well formed, once.
    ours = [x for x in lines[3:-1] if x == _LOG_KEYS_EXTENSION or x.startswith(_LOG_KEYS_EXTENSION + " ")]
    if len(ours) > 1:
        raise ValueError("a checkpoint has at most one cairn-log-keys line")
    log_keys = None
    if ours:
        count = ours[0][len(_LOG_KEYS_EXTENSION) + 1:]
        if not _DECIMAL.fullmatch(count) or int(count) >= 2**64:
            raise ValueError("a cairn-log-keys line is `cairn-log-keys <count>`, the count in decimal")
        log_keys = int(count)
    return lines[0], size, root, log_keys
