"""RFC 8785 canonical JSON (JCS), as docs/FORMAT.md section 2.1 uses it."""
from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["canonical", "number"]


def number(value: float) -> str:
    """ECMAScript's Number.prototype.toString of a finite double."""
    if not math.isfinite(value):
        raise ValueError("JSON has no NaN or infinity")
    if value == 0:
        return "0"
    if value < 0:
        return "-" + number(-value)
    # Python's repr is the shortest string that round-trips, like ECMAScript;
    # only the layout differs.
    text = repr(value)
    if "e" in text or "E" in text:
        mantissa, exp_text = text.lower().split("e")
        exponent = int(exp_text)
    else:
        mantissa, exponent = text, 0
    if "." in mantissa:
        whole, frac = mantissa.split(".")
    else:
        whole, frac = mantissa, ""
    digits = (whole + frac).lstrip("0")
    # Position of the decimal point relative to the first significant digit.
    point = len(whole.lstrip("0")) + exponent if whole.strip("0") else exponent - (len(frac) - len(frac.lstrip("0")))
    digits = digits.rstrip("0") or "0"
    k, n = len(digits), point
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    exp = n - 1
    sign = "+" if exp >= 0 else "-"
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{head}e{sign}{abs(exp)}"


# What RFC 8785 (ECMAScript's JSON.stringify) escapes in a string: the
# quote and the backslash, the control characters (backspace, tab, line
# feed, form feed and carriage return by their short forms, the others as
# lowercase \u00xx). Everything else is written as it is.
_ESCAPED = re.compile(r'[\x00-\x1f"\\]')
_ESCAPES = {chr(code): f"\\u{code:04x}" for code in range(0x20)}
_ESCAPES.update({'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"})


def _string(value: str) -> str:
    # Most strings need no escape: one scan in C instead of a Python loop
    # per character (half of verify_bundle's time before).
    if _ESCAPED.search(value) is None:
        return '"' + value + '"'
    return '"' + _ESCAPED.sub(lambda m: _ESCAPES[m.group()], value) + '"'


def _write(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        # JSON numbers are doubles; Cairn refuses integers beyond 2^53.
        out.append(number(float(value)) if abs(value) > 2**53 else str(value))
    elif isinstance(value, float):
        out.append(number(value))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    elif isinstance(value, dict):
        out.append("{")
        keys = sorted(value, key=lambda k: k.encode("utf-16-be"))
        for i, key in enumerate(keys):
            if i:
                out.append(",")
            out.append(_string(key))
            out.append(":")
            _write(value[key], out)
        out.append("}")
    else:
        raise TypeError(f"not a JSON value: {type(value).__name__}")


def canonical(value: Any) -> bytes:
    """The RFC 8785 canonical form of a JSON value, as UTF-8 bytes."""
    out: list[str] = []
    _write(value, out)
    return "".join(out).encode("utf-8")


def loads(text: str | bytes) -> Any:
    """Parses JSON keeping every number a float or int, as JCS needs."""
    return json.loads(text)
