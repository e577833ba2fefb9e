#!/usr/bin/env python3
"""An independent recomputation of the worked example of docs/FORMAT.md
(section 11, format 2), with the Python standard library only.

Every `label = value` line of section 11 is recomputed from the formulas in
the document and from the inputs its prose gives (org, session, agent, step
contents, seeds, times, the server key's seed), not from Cairn's code and not
from the Python client: this file has its own framing, JCS, RFC 9162 tree and
Ed25519 signer. It fails if any value differs, if a label is missing, or if
the document holds a label this program does not recompute.

Run: python3 tests/format/check_worked_example.py
"""
import base64
import hashlib
import json
import math
import pathlib
import re
import struct
import sys

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "FORMAT.md"

FIELDS = ["trace_id", "org_id", "agent_id", "session_id", "step_index", "step_type",
          "step_type_original", "content", "input_data", "output_data", "confidence",
          "duration_ms", "token_count", "model", "metadata", "created_at", "turn_id",
          "turn_step", "task_id", "links", "status", "signer_key_id"]


# -- section 1: framing --------------------------------------------------------

def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def frame(tag: str, *parts: bytes) -> bytes:
    out = bytes([len(tag)]) + tag.encode("ascii")
    for part in parts:
        out += struct.pack(">I", len(part)) + part
    return out


def H(tag: str, *parts: bytes) -> bytes:
    return sha256(frame(tag, *parts))


def u64(n: int) -> bytes:
    return struct.pack(">Q", n)


# -- section 2.1: JCS (the subset the example needs, refusing the rest) --------

def jcs_number(value) -> str:
    if isinstance(value, bool):
        raise TypeError("bool")
    if isinstance(value, int):
        if abs(value) > 2**53 - 1:
            raise ValueError("integer beyond 2^53 - 1")
        return str(value)
    if not math.isfinite(value):
        raise ValueError("not finite")
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" in text or not (1e-6 <= abs(value) < 1e21):
        raise ValueError(f"number {text} needs exponent formatting: not used by the example")
    return text  # shortest round-trip digits, plain notation: as ECMAScript


def jcs_string(value: str) -> str:
    out = '"'
    for ch in value:
        if ch in '"\\':
            out += "\\" + ch
        elif ch in "\b\t\n\f\r":
            out += {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}[ch]
        elif ord(ch) < 0x20:
            out += "\\u%04x" % ord(ch)
        else:
            out += ch
    return out + '"'


def jcs(value) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return jcs_number(value)
    if isinstance(value, str):
        return jcs_string(value)
    if isinstance(value, list):
        return "[" + ",".join(jcs(v) for v in value) + "]"
    if isinstance(value, dict):
        names = sorted(value, key=lambda k: k.encode("utf-16-be"))
        return "{" + ",".join(jcs_string(k) + ":" + jcs(value[k]) for k in names) + "}"
    raise TypeError(type(value).__name__)


def canonical(value) -> bytes:
    return jcs(value).encode("utf-8")


# -- section 6: RFC 9162 ---------------------------------------------------------

def leaf_hash(data: bytes) -> bytes:
    return sha256(b"\x00" + data)


def node(left: bytes, right: bytes) -> bytes:
    return sha256(b"\x01" + left + right)


def mth(leaves):
    n = len(leaves)
    if n == 0:
        return sha256(b"")
    if n == 1:
        return leaves[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return node(mth(leaves[:k]), mth(leaves[k:]))


def audit_path(index: int, leaves):
    """RFC 9162 2.1.3.1, bottom-up."""
    n = len(leaves)
    if n <= 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if index < k:
        return audit_path(index, leaves[:k]) + [mth(leaves[k:])]
    return audit_path(index - k, leaves[k:]) + [mth(leaves[:k])]


# -- RFC 8032 Ed25519 signing (deterministic) --------------------------------------

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P


def ed_add(a, b):
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    aa = (y1 - x1) * (y2 - x2) % P
    bb = (y1 + x1) * (y2 + x2) % P
    cc = 2 * t1 * t2 * D % P
    dd = 2 * z1 * z2 % P
    e, f, g, h = bb - aa, dd - cc, dd + cc, bb + aa
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def ed_mul(s: int, point):
    result = (0, 1, 1, 0)
    while s:
        if s & 1:
            result = ed_add(result, point)
        point = ed_add(point, point)
        s >>= 1
    return result


def ed_encode(point) -> bytes:
    zi = pow(point[2], P - 2, P)
    x, y = point[0] * zi % P, point[1] * zi % P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def ed_base():
    y = 4 * pow(5, P - 2, P) % P
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * pow(2, (P - 1) // 4, P) % P
    if x & 1:
        x = P - x
    return (x, y, 1, x * y % P)


def ed_keypair(seed: bytes):
    digest = hashlib.sha512(seed).digest()
    a = int.from_bytes(digest[:32], "little") & ((1 << 254) - 8) | (1 << 254)
    return a, digest[32:], ed_encode(ed_mul(a, ed_base()))


def ed_sign(seed: bytes, message: bytes) -> bytes:
    a, prefix, public = ed_keypair(seed)
    r = int.from_bytes(hashlib.sha512(prefix + message).digest(), "little") % L
    big_r = ed_encode(ed_mul(r, ed_base()))
    k = int.from_bytes(hashlib.sha512(big_r + public + message).digest(), "little") % L
    return big_r + ((r + k * a) % L).to_bytes(32, "little")


# -- the document -----------------------------------------------------------------

def example_lines() -> dict:
    """Every `label = value` line inside the code blocks of section 11."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index("\n## 11. Worked example")
    section = text[start:]
    values = {}
    for block in re.findall(r"```text\n(.*?)```", section, flags=re.S):
        for line in block.splitlines():
            if not line.strip():
                continue
            if " = " not in line:
                raise SystemExit(f"FORMAT.md section 11: a line that is not `label = value`: {line!r}")
            label, value = line.split(" = ", 1)
            if label in values:
                raise SystemExit(f"FORMAT.md section 11: label {label} appears twice")
            values[label] = value
    return values


def main() -> int:
    doc = example_lines()
    computed = {}

    def put(label: str, value) -> None:
        if isinstance(value, bytes):
            value = value.hex()
        computed[label] = value

    # Inputs from the prose of section 11.
    org, session_id, agent = "acme", "revenue-analysis-q4", "analyst"
    header = json.loads(doc["header_view"])
    for name, want in (("org_id", org), ("session_id", session_id), ("agent_id", agent),
                       ("max_clock_skew_s", 300), ("predecessor", None)):
        if header.get(name) != want:
            raise SystemExit(f"FORMAT.md header_view: {name} is {header.get(name)!r}, the prose says {want!r}")
    if sorted(header) != sorted(["org_id", "session_id", "agent_id", "started_at", "caller", "profile",
                                 "predecessor", "full_consent", "max_clock_skew_s"]):
        raise SystemExit("FORMAT.md header_view: not the members of section 4.1")
    put("header_view", jcs(header))  # the document must show it canonically
    genesis = H("cairn/v2/genesis", canonical(header))
    put("genesis", genesis)

    trace_id = json.loads(doc["step0.trace_id.value"])
    # FORMAT.md (format 2, as of this writing) does not state step 1's trace
    # id, without which step1.digest cannot be recomputed from the document;
    # this is the one the Rust example uses. A `step1.trace_id.value` line in
    # the document takes precedence.
    step1_trace_id = json.loads(doc.get("step1.trace_id.value", '"0b7e5c1a-3d2f-4e6b-9a8c-1f2e3d4c5b6a"'))
    steps = [
        {
            "seed": bytes(range(0x00, 0x20)),
            "values": {
                "trace_id": trace_id, "org_id": org, "agent_id": agent, "session_id": session_id,
                "step_index": 0, "step_type": "observation", "step_type_original": "Observation",
                "content": "User asked for Q4 revenue breakdown by segment", "input_data": None,
                "output_data": None, "confidence": None, "duration_ms": None, "token_count": None,
                "model": None, "metadata": None, "created_at": "2025-01-15T10:30:00.000000Z",
                "turn_id": None, "turn_step": None, "task_id": None, "links": {}, "status": "ok",
                "signer_key_id": None,
            },
            "logged_at": "2025-01-15T10:30:00.004000Z",  # 4 ms after created_at
        },
        {
            "seed": bytes(range(0x20, 0x40)),
            "values": {
                "trace_id": step1_trace_id, "org_id": org, "agent_id": agent, "session_id": session_id,
                "step_index": 1, "step_type": "tool_call", "step_type_original": "ToolCall",
                "content": "Querying orders table",
                "input_data": {"sql": "SELECT segment, SUM(revenue) FROM orders WHERE quarter='Q4' GROUP BY 1"},
                "output_data": None, "confidence": 0.92, "duration_ms": None, "token_count": None,
                "model": None, "metadata": None, "created_at": "2025-01-15T10:30:01.250000Z",
                "turn_id": None, "turn_step": None, "task_id": None, "links": {}, "status": "ok",
                "signer_key_id": None,
            },
            "logged_at": "2025-01-15T10:30:01.253000Z",  # 3 ms after created_at
        },
    ]
    prev = genesis
    chain = []
    for i, step in enumerate(steps):
        p = f"step{i}"
        put(f"{p}.seed", step["seed"])
        commitments = []
        for position, name in enumerate(FIELDS):
            block = H("cairn/v2/salt", step["seed"], bytes([position // 2]))
            salt = block[16 * (position % 2): 16 * (position % 2) + 16]
            value = canonical(step["values"][name])
            commitment = H("cairn/v2/field", salt, value)
            put(f"{p}.{name}.value", value.decode("utf-8"))
            put(f"{p}.{name}.salt", salt)
            put(f"{p}.{name}.commitment", commitment)
            commitments.append(commitment)
        digest = H("cairn/v2/step", *commitments)
        put(f"{p}.digest", digest)
        created_at = step["values"]["created_at"].encode()
        prev = H("cairn/v2/chain", prev, digest, u64(i), created_at)
        put(f"{p}.hash", prev)
        chain.append(prev)

    session_leaves = [leaf_hash(frame("cairn/v2/session-leaf", u64(i), h)) for i, h in enumerate(chain)]
    for i, leaf in enumerate(session_leaves):
        put(f"session.leaf{i}", leaf)
    put("session.root", mth(session_leaves))

    view = dict(header, genesis=genesis.hex())
    op0 = H("cairn/v2/op", b"session-start", canonical(view))
    put("log.op0.hash", op0)
    entries = [("session-start", op0, "2025-01-15T10:30:00.000000Z")]
    entries += [("step", chain[i], steps[i]["logged_at"]) for i in range(2)]
    log_leaves = []
    for seq, (kind, record_hash, logged_at) in enumerate(entries):
        put(f"log.logged_at{seq}", logged_at)
        leaf = leaf_hash(frame("cairn/v2/log-leaf", u64(seq), kind.encode(), record_hash, logged_at.encode()))
        put(f"log.leaf{seq}", leaf)
        log_leaves.append(leaf)
    root = mth(log_leaves)
    put("log.root", root)
    put("log.inclusion(1,3)", ",".join(h.hex() for h in audit_path(1, log_leaves)))

    # 7.1: the server key, its vkey, a checkpoint signed as a C2SP note.
    name = "cairn.example"
    seed = bytes([0x11]) * 32
    _, _, public = ed_keypair(seed)
    key_id = sha256(name.encode() + b"\n" + b"\x01" + public)[:4]
    put("server.vkey", f"{name}+{key_id.hex()}+{base64.b64encode(b'%c' % 1 + public).decode()}")
    origin = f"{name}/{org}"
    checkpoint = f"{origin}\n3\n{base64.b64encode(root).decode()}\n"
    signature = ed_sign(seed, checkpoint.encode())
    put("checkpoint.signature_line", f"\u2014 {name} {base64.b64encode(key_id + signature).decode()}")

    # 10.4 and 7.6: the selection of a partial bundle of the session at `generic`.
    selection = {
        "checkpoint_size": 3,
        "scope": {"session": session_id},
        "level": "generic",
        "sessions": [{"session_id": session_id, "steps": 2, "head": chain[1].hex()}],
        "records": [[0, "session-start"]],
    }
    put("selection", jcs(selection))
    selection_hash = H("cairn/v2/selection", canonical(selection))
    put("selection.hash", selection_hash)
    note = (f"cairn-selection/v2\n{origin}\n3\n{base64.b64encode(root).decode()}\n"
            f"{base64.b64encode(selection_hash).decode()}\n")
    signature = ed_sign(seed, note.encode())
    put("selection.signature_line", f"\u2014 {name} {base64.b64encode(key_id + signature).decode()}")

    errors = []
    for label, value in doc.items():
        if label not in computed:
            errors.append(f"{label}: in the document, but this program does not know how to recompute it")
        elif computed[label] != value:
            errors.append(f"{label}: the document says {value}, recomputed {computed[label]}")
    for required in ("genesis", "step0.digest", "step0.hash", "step1.digest", "step1.hash", "session.root",
                     "log.root", "log.inclusion(1,3)", "server.vkey", "checkpoint.signature_line",
                     "selection", "selection.hash", "selection.signature_line"):
        if required not in doc:
            errors.append(f"{required}: missing from the document")
    if errors:
        print("FORMAT.md worked example does NOT match:", file=sys.stderr)
        for error in errors:
            print("  " + error, file=sys.stderr)
        return 1
    print(f"FORMAT.md worked example: all {len(doc)} values recomputed independently, all match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
