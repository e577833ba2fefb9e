"""Strict JSON reading (docs/FORMAT.md section 2.2, I-JSON as Cairn reads it).

`loads` is `json.loads` with the rules every JSON text read from outside
must follow: a member name twice in one object, an integer literal beyond
2^53 - 1, NaN or Infinity, a number too large for a double, a lone surrogate
escape, or anything after the value but white space is an error. Bytes are
decoded as UTF-8 strictly (never lossily).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["JSONError", "loads", "MAX_SAFE_INTEGER"]

MAX_SAFE_INTEGER = 2**53 - 1
#: The deepest nesting of arrays and objects read (the Rust reference,
#: serde_json, refuses a text nested 128 deep or more).
MAX_DEPTH = 127

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")
#: Where a lone surrogate could come from: an escape of U+D800 to U+DFFF
#: (a match inside an escaped backslash only costs the full check).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class JSONError(ValueError):
    """The text is not strict JSON."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for name, value in pairs:
        if name in obj:
            raise JSONError(f"member {name!r} appears twice in one object")
        obj[name] = value
    return obj


def _integer(text: str) -> int | float:
    if text == "-0":
        # Negative zero is a double (RFC 8785 writes it `0`), never an
        # integer: FORMAT.md 10.1's integers are digits only, and a field
        # that must hold one refuses `-0` as the Rust reader does.
        return -0.0
    try:
        value = int(text)
    except ValueError:  # more digits than Python converts
        raise JSONError(f"integer literal {text[:40]}... is beyond 2^53 - 1") from None
    if abs(value) > MAX_SAFE_INTEGER:
        raise JSONError(f"integer literal {text} is beyond 2^53 - 1")
    return value


def _double(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONError(f"number {text} is out of range")
    return value


def _constant(name: str) -> Any:
    raise JSONError(f"{name} is not JSON")


def _check_strings(value: Any) -> None:
    # json decodes a lone "\ud800" escape into a lone surrogate: not text.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise JSONError("a string holds a lone surrogate") from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _check_depth(text: str) -> None:
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    depth = 0
    for bracket in _BRACKET.finditer(_STRING.sub("", text)):
        if bracket.group() in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise JSONError(f"arrays and objects nested more than {MAX_DEPTH} deep")
        else:
            depth -= 1


def loads(data: "str | bytes") -> Any:
    """Parses one strict JSON text; raises JSONError otherwise."""
    if isinstance(data, (bytes, bytearray)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise JSONError(f"not UTF-8: {e}") from None
    else:
        text = data
    _check_depth(text)
    try:
        value = json.loads(text, object_pairs_hook=_object, parse_int=_integer,
                           parse_float=_double, parse_constant=_constant)
    except JSONError:
        raise
    except RecursionError:
        raise JSONError("nested too deeply") from None
    except ValueError as e:
        raise JSONError(str(e)) from None
    # A lone surrogate can only come from a \uD800-\uDFFF escape (UTF-8
    # text cannot hold one): texts without such an escape skip the walk.
    if _SURROGATE_ESCAPE.search(text):
        _check_strings(value)
    return value
