"""The Python client's offline verifier checked against the published test
vectors (RFC 8785, RFC 9162 inclusion proofs, C2SP signed notes, RFC 8032)
and against the worked example of docs/FORMAT.md."""
import base64
import json
import os
import pathlib

import pytest

from cairn_client import verify as v
from cairn_client.ed25519 import _verify_pure
from cairn_client.jcs import canonical

VECTORS = pathlib.Path(os.environ.get("CAIRN_VECTORS", pathlib.Path(__file__).resolve().parents[3] / "shared" / "vectors"))


def vectors(*parts):
    path = VECTORS.joinpath(*parts)
    if not path.exists():
        pytest.fail(f"published vectors not found at {path} (set CAIRN_VECTORS)")
    return path


def test_jcs_vectors():
    jcs = vectors("jcs")
    names = sorted(p.name for p in (jcs / "input").iterdir())
    assert len(names) >= 6
    for name in names:
        given = json.loads((jcs / "input" / name).read_text(encoding="utf-8"))
        expected = (jcs / "output" / name).read_bytes().rstrip(b"\n")
        assert canonical(given) == expected, name


def test_rfc9162_inclusion_vectors():
    checked = 0
    for path in sorted(vectors("merkle", "testdata", "inclusion").rglob("*.json")):
        case = json.loads(path.read_text())
        if case.get("leafHash") is None or case.get("root") is None:
            continue
        proof = [base64.b64decode(p) for p in case.get("proof") or []]
        ok = v._verify_inclusion(base64.b64decode(case["leafHash"]), case["leafIdx"], case["treeSize"],
                                 proof, base64.b64decode(case["root"]))
        assert ok == (not case["wantErr"]), path
        checked += 1
    assert checked > 50


def test_signed_note_vectors():
    cases = json.loads(vectors("signed-note", "vectors.json").read_text(encoding="utf-8"))["vectors"]
    checked = 0
    for case in cases:
        if "verifier_key" not in case or "note" not in case:
            continue
        try:
            key = v._parse_vkey(case["verifier_key"])
        except ValueError:
            assert not case["valid"], case["source"]
            continue
        try:
            v._open_note(case["note"], [key])
            ok = True
        except ValueError:
            ok = False
        assert ok == case["valid"], case["source"]
        checked += 1
    assert checked >= 3


def test_rfc8032_vectors_in_pure_python():
    public = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    signature = bytes.fromhex(
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
    assert _verify_pure(public, b"", signature)
    assert not _verify_pure(public, b"\x00", signature)
    assert not _verify_pure(public, b"", signature[:-1] + bytes([signature[-1] ^ 1]))


def test_format_worked_example():
    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "FORMAT.md"
    values = {}
    for line in doc.read_text(encoding="utf-8").splitlines():
        if " = " in line and not line.startswith(("#", "|", " ")):
            label, value = line.split(" = ", 1)
            values[label] = value
    header = json.loads(values["header_view"])
    genesis = v._h("cairn/v1/genesis", canonical(header))
    assert genesis.hex() == values["genesis"]
    seed = bytes.fromhex(values["step0.seed"])
    commitments = []
    for position, name in enumerate(v.FIELDS):
        block = v._h("cairn/v1/salt", seed, bytes([position // 2]))
        salt = block[16 * (position % 2):16 * (position % 2) + 16]
        value = json.loads(values[f"step0.{name}.value"])
        commitments.append(v._h("cairn/v1/field", salt, canonical(value)))
    assert v._h("cairn/v1/step", *commitments).hex() == values["step0.digest"]
