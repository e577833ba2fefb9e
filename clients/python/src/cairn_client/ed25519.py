"""Ed25519 signature verification (RFC 8032, section 5.1.7) in pure Python.

Small and slow (milliseconds per signature), which is plenty for a bundle:
its checkpoint, seals and signed steps. When the `cryptography` package is
installed it is used instead.
"""
from __future__ import annotations

import hashlib

__all__ = ["verify", "verify_strict", "sign", "public_key"]

_P = 2**255 - 19
_Q = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)

Point = tuple[int, int, int, int]


def _inv(x: int) -> int:
    return pow(x, _P - 2, _P)


def _add(a: Point, b: Point) -> Point:
    # Extended coordinates: x = X/Z, y = Y/Z, x*y = T/Z.
    aa = (a[1] - a[0]) * (b[1] - b[0]) % _P
    bb = (a[1] + a[0]) * (b[1] + b[0]) % _P
    cc = 2 * a[3] * b[3] * _D % _P
    dd = 2 * a[2] * b[2] % _P
    e, f, g, h = bb - aa, dd - cc, dd + cc, bb + aa
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _mul(s: int, point: Point) -> Point:
    result: Point = (0, 1, 1, 0)
    while s > 0:
        if s & 1:
            result = _add(result, point)
        point = _add(point, point)
        s >>= 1
    return result


def _equal(a: Point, b: Point) -> bool:
    return (a[0] * b[2] - b[0] * a[2]) % _P == 0 and (a[1] * b[2] - b[1] * a[2]) % _P == 0


def _recover_x(y: int, sign: int) -> int | None:
    if y >= _P:
        return None
    x2 = (y * y - 1) * _inv(_D * y * y + 1) % _P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P != 0:
        x = x * _SQRT_M1 % _P
    if (x * x - x2) % _P != 0:
        return None
    if (x & 1) != sign:
        x = _P - x
    return x


def _decompress(data: bytes) -> Point | None:
    if len(data) != 32:
        return None
    y = int.from_bytes(data, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    x = _recover_x(y, sign)
    if x is None:
        return None
    return (x, y, 1, x * y % _P)


_GY = 4 * _inv(5) % _P
_GX = _recover_x(_GY, 0) or 0
_G: Point = (_GX, _GY, 1, _GX * _GY % _P)


def _verify_pure(public_key: bytes, message: bytes, signature: bytes) -> bool:
    if len(public_key) != 32 or len(signature) != 64:
        return False
    a = _decompress(public_key)
    r = _decompress(signature[:32])
    if a is None or r is None:
        return False
    s = int.from_bytes(signature[32:], "little")
    if s >= _Q:
        return False
    h = int.from_bytes(hashlib.sha512(signature[:32] + public_key + message).digest(), "little") % _Q
    return _equal(_mul(s, _G), _add(r, _mul(h, a)))


def _encode(point: Point) -> bytes:
    zinv = _inv(point[2])
    x, y = point[0] * zinv % _P, point[1] * zinv % _P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def _decompress_lenient(data: bytes) -> Point | None:
    # As curve25519-dalek decompresses: y is read as 255 bits and reduced
    # mod p, and x = 0 is accepted with either sign bit.
    if len(data) != 32:
        return None
    y = int.from_bytes(data, "little")
    sign = y >> 255
    y = (y & ((1 << 255) - 1)) % _P
    x2 = (y * y - 1) * _inv(_D * y * y + 1) % _P
    if x2 == 0:
        return (0, y, 1, 0)
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P != 0:
        x = x * _SQRT_M1 % _P
    if (x * x - x2) % _P != 0:
        return None
    if (x & 1) != sign:
        x = _P - x
    return (x, y, 1, x * y % _P)


def is_curve_point(data: bytes) -> bool:
    """Whether 32 bytes decode to a point of the curve as curve25519-dalek
    decompresses them (what the Rust reader requires of a public key)."""
    return _decompress_lenient(data) is not None


def _small_order(point: Point) -> bool:
    eight = _add(point, point)
    eight = _add(eight, eight)
    eight = _add(eight, eight)
    return _equal(eight, (0, 1, 1, 0))


def verify_strict(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Ed25519 verification as ed25519-dalek's `verify_strict` (FORMAT.md 7.3):
    `S` must be canonical (below the group order), `R` and the public key
    must decode and must not be of small order, and `[S]B - [k]A` must encode
    to exactly the signature's `R` bytes."""
    if len(public_key) != 32 or len(signature) != 64:
        return False
    s = int.from_bytes(signature[32:], "little")
    if s >= _Q:
        return False
    a = _decompress_lenient(public_key)
    r = _decompress_lenient(signature[:32])
    if a is None or r is None or _small_order(a) or _small_order(r):
        return False
    # What remains is the cofactorless equation with R compared as bytes,
    # which both `verify` paths decide the same way once the encodings
    # above are known to be valid.
    return verify(public_key, message, signature)


def _expand(seed: bytes) -> tuple[int, bytes]:
    digest = hashlib.sha512(seed).digest()
    scalar = int.from_bytes(digest[:32], "little")
    scalar &= (1 << 254) - 8
    scalar |= 1 << 254
    return scalar, digest[32:]


def public_key(seed: bytes) -> bytes:
    """The Ed25519 public key of a 32-byte private seed (RFC 8032 5.1.5)."""
    if len(seed) != 32:
        raise ValueError("an Ed25519 seed is 32 bytes")
    return _encode(_mul(_expand(seed)[0], _G))


def sign(seed: bytes, message: bytes) -> bytes:
    """The Ed25519 signature of `message` by the 32-byte private `seed`
    (RFC 8032 5.1.6; deterministic)."""
    scalar, prefix = _expand(seed)
    public = _encode(_mul(scalar, _G))
    r = int.from_bytes(hashlib.sha512(prefix + message).digest(), "little") % _Q
    big_r = _encode(_mul(r, _G))
    h = int.from_bytes(hashlib.sha512(big_r + public + message).digest(), "little") % _Q
    return big_r + ((r + h * scalar) % _Q).to_bytes(32, "little")


def verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Whether `signature` is `public_key`'s Ed25519 signature of `message`."""
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        return _verify_pure(public_key, message, signature)
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
        return True
    except (InvalidSignature, ValueError):
        return False
