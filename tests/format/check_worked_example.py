#!/usr/bin/env python3
"""An independent implementation of docs/FORMAT.md (Python standard library
only), checked against the worked example in that same document.

It recomputes the genesis, every salt, the step digest, the chain hash, the
session leaf, the operational record hash, the log leaves and the log root
from the formulas in the document, not from Cairn's code. If FORMAT.md were
not enough to write a verifier, this would fail. Run: python3 tests/format/check_worked_example.py
"""
import hashlib
import json
import pathlib
import struct
import sys

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "FORMAT.md"

FIELDS = ["trace_id", "org_id", "agent_id", "session_id", "step_index", "step_type",
          "step_type_original", "content", "input_data", "output_data", "confidence",
          "duration_ms", "token_count", "model", "metadata", "created_at", "turn_id",
          "turn_step", "task_id", "links", "status", "signer_key_id"]


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def frame(tag: str, *parts: bytes) -> bytes:
    out = bytes([len(tag)]) + tag.encode()
    for part in parts:
        out += struct.pack(">I", len(part)) + part
    return out


def H(tag: str, *parts: bytes) -> bytes:
    return sha256(frame(tag, *parts))


def example_values() -> dict:
    values = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if " = " in line and not line.startswith(("#", "|", " ")):
            label, value = line.split(" = ", 1)
            values[label] = value
    return values


def main() -> int:
    ex = example_values()
    checks = 0

    def check(label: str, computed: bytes) -> None:
        nonlocal checks
        if computed.hex() != ex[label]:
            raise SystemExit(f"FORMAT.md {label}: document says {ex[label]}, recomputed {computed.hex()}")
        checks += 1

    genesis = H("cairn/v1/genesis", ex["header_view"].encode())
    check("genesis", genesis)

    seed = bytes.fromhex(ex["step0.seed"])
    commitments = []
    for position, name in enumerate(FIELDS):
        block = H("cairn/v1/salt", seed, bytes([position // 2]))
        salt = block[16 * (position % 2):16 * (position % 2) + 16]
        check(f"step0.{name}.salt", salt)
        commitments.append(H("cairn/v1/field", salt, ex[f"step0.{name}.value"].encode()))
    check("step0.trace_id.commitment", commitments[0])
    check("step0.content.commitment", commitments[FIELDS.index("content")])
    digest = H("cairn/v1/step", *commitments)
    check("step0.digest", digest)
    created_at = json.loads(ex["step0.created_at.value"]).encode()
    chain0 = H("cairn/v1/chain", genesis, digest, struct.pack(">Q", 0), created_at)
    check("step0.hash", chain0)
    check("session.leaf0", sha256(b"\x00" + frame("cairn/v1/session-leaf", struct.pack(">Q", 0), chain0)))

    # The session-start view is the header plus its genesis, canonicalized
    # (all keys ASCII, so sorted JSON without spaces is RFC 8785 here).
    view = json.loads(ex["header_view"])
    view["genesis"] = genesis.hex()
    canonical = json.dumps(view, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    op0 = H("cairn/v1/op", b"session-start", canonical)
    check("log.op0.hash", op0)
    leaf0 = sha256(b"\x00" + frame("cairn/v1/log-leaf", struct.pack(">Q", 0), b"session-start", op0))
    leaf1 = sha256(b"\x00" + frame("cairn/v1/log-leaf", struct.pack(">Q", 1), b"step", chain0))
    check("log.leaf0", leaf0)
    check("log.leaf1", leaf1)
    leaf2 = sha256(b"\x00" + frame("cairn/v1/log-leaf", struct.pack(">Q", 2), b"step", bytes.fromhex(ex["step1.hash"])))
    check("log.leaf2", leaf2)
    node = lambda left, right: sha256(b"\x01" + left + right)
    check("log.root", node(node(leaf0, leaf1), leaf2))
    print(f"FORMAT.md worked example: {checks} values recomputed independently, all match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
