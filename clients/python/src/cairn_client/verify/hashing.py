"""The primitives of docs/FORMAT.md 1: SHA-256, the length-prefixed framing
under a tag and the tagged hash over it, big-endian integers, and base64 and
hex read only in their canonical spelling."""
from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from typing import Any, Optional


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

# Unicode's White_Space property, FORMAT.md 7.4 (what Rust's
# char::is_whitespace tests and str::trim removes; Python's str.isspace
# and str.strip also take U+001C to U+001F): key names (7.1), kind labels.
_WHITE_SPACE = "\u0009\u000a\u000b\u000c\u000d\u0020\u0085\u00a0\u1680" + "".join(
    chr(c) for c in range(0x2000, 0x200B)) + "\u2028\u2029\u202f\u205f\u3000"


def _hexbytes(text: Any, size: int) -> Optional[bytes]:
    if not isinstance(text, str) or len(text) != 2 * size or not _HEX.fullmatch(text):
        return None
    return bytes.fromhex(text)
