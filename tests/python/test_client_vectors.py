"""The Python client's offline verifier checked against the published test
vectors (RFC 8785, RFC 9162 inclusion and consistency proofs, C2SP signed
notes, RFC 8032), its strict JSON reader (FORMAT.md 2.2), and the worked
example of docs/FORMAT.md (format 2): every value recomputed with the
client's own functions, and the example's log exported as a complete and a
partial bundle that `verify_bundle` accepts, and refuses once changed."""
import base64
import json
import os
import pathlib
import re

import pytest

from cairn_client import ed25519, verify_bundle
from cairn_client import verify as v
from cairn_client.ed25519 import _verify_pure
from cairn_client.jcs import canonical
from cairn_client.strict_json import JSONError, loads

VECTORS = pathlib.Path(os.environ.get("CAIRN_VECTORS", pathlib.Path(__file__).resolve().parents[3] / "shared" / "vectors"))
DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "FORMAT.md"


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


def _string_char_by_char(value: str) -> str:
    """RFC 8785's string form, one character at a time (the reference the
    client's one-scan escaping must equal)."""
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
    out = ['"']
    for ch in value:
        if ch in short:
            out.append(short[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out) + '"'


def test_jcs_strings_match_the_character_by_character_reference():
    import random

    rng = random.Random(8785)
    alphabet = [chr(c) for c in range(0x80)] + ["é", "\u2028", "\u00a0", "😀", "\ufeff", "中"]
    cases = [chr(c) for c in range(0x3000)] + ["", "plain words", 'quote " and \\ backslash']
    cases += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(40))) for _ in range(3000)]
    for text in cases:
        assert canonical(text) == _string_char_by_char(text).encode("utf-8"), repr(text)
        assert canonical({text: text}) == ("{" + _string_char_by_char(text) + ":" + _string_char_by_char(text) + "}").encode("utf-8")


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


def test_rfc9162_consistency_vectors():
    checked = 0
    for path in sorted(vectors("merkle", "testdata", "consistency").rglob("*.json")):
        case = json.loads(path.read_text())
        if case.get("root1") is None or case.get("root2") is None:
            continue
        proof = [base64.b64decode(p) for p in case.get("proof") or []]
        ok = v._verify_consistency(case["size1"], case["size2"], proof, base64.b64decode(case["root1"]),
                                   base64.b64decode(case["root2"]))
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


def test_signed_note_malformed_versus_unverified():
    seed = bytes([0x11]) * 32
    public = ed25519.public_key(seed)
    key = v._Key("cairn.example", v._sha256(b"cairn.example\n\x01" + public)[:4], public)
    text = "cairn.example/acme\n3\nUGyg...\n"
    line = "\u2014 cairn.example " + base64.b64encode(key.key_id + ed25519.sign(seed, text.encode())).decode() + "\n"
    assert v._open_note(text + "\n" + line, [key]) == text
    for malformed in (text, text + "\n", text + "\n" + line.replace("\u2014", "-"), text + "\n" + line[:-1],
                      text + "\n" + line.replace(" cairn.example ", " cairn.example"), text + "\n\u2014 x AAAA\n",
                      text.replace("\n", "\t\n", 1) + "\n" + line):
        with pytest.raises(v._NoteMalformed):
            v._open_note(malformed, [key])
    flipped = line[:-3] + ("A" if line[-3] != "A" else "B") + line[-2:]
    for unverified in (text + "\n" + flipped, text.replace("3", "4") + "\n" + line,
                       text + "\n" + line.replace("cairn.example ", "other.example ")):
        with pytest.raises(v._NoteUnverified):
            v._open_note(unverified, [key])
    # A signature by an unknown key is ignored; one by a trusted key must verify.
    assert v._open_note(text + "\n" + line + "\u2014 witness.example AAAAAAAA\n", [key]) == text


def test_vkeys():
    seed = bytes([0x11]) * 32
    good = "cairn.example+19424baa+AdBKsjJ0K7SrOhNovUYV5ObQIkq3GgFrr4UgozLJd4c3"
    assert v._parse_vkey(good).public == ed25519.public_key(seed)
    assert v._parse_vkey(good).vkey() == good
    # Key ids of either case (FORMAT.md 7.1, as the Rust and TypeScript
    # verifiers read them); the vkey is written in lowercase.
    assert v._parse_vkey(good.replace("19424baa", "19424BAA")).vkey() == good
    for bad in (good.replace("19424baa", "19424bab"), good[:-1],
                "name with space+19424baa+AdBKsjJ0K7SrOhNovUYV5ObQIkq3GgFrr4UgozLJd4c3", "cairn.example+19424baa"):
        with pytest.raises(ValueError):
            v._parse_vkey(bad)


def test_rfc8032_vectors_in_pure_python():
    secret = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    public = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    signature = bytes.fromhex(
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
    assert ed25519.public_key(secret) == public
    assert ed25519.sign(secret, b"") == signature
    assert _verify_pure(public, b"", signature)
    assert ed25519.verify_strict(public, b"", signature)
    assert not _verify_pure(public, b"\x00", signature)
    assert not _verify_pure(public, b"", signature[:-1] + bytes([signature[-1] ^ 1]))
    # verify_strict (FORMAT.md 7.3): S at or above the group order, and
    # small-order keys or R, are refused.
    order = 2**252 + 27742317777372353535851937790883648493
    s = int.from_bytes(signature[32:], "little") + order
    assert not ed25519.verify_strict(public, b"", signature[:32] + s.to_bytes(32, "little"))
    identity = (1).to_bytes(32, "little")
    assert not ed25519.verify_strict(identity, b"", identity + bytes(32))


def test_strict_json():
    assert loads(b'{"a":[1,2.5,-0,1e2,"\\u00e9"],"b":9007199254740991}') == {"a": [1, 2.5, 0, 100.0, "\u00e9"], "b": 2**53 - 1}
    for bad in (b'{"a":1,"a":1}', b'{"a":{"b":1,"b":2}}', b'9007199254740992', b'-9007199254740992', b"NaN",
                b"Infinity", b"1e400", b'"\\ud800"', b'{"a":1} x', b"\xff", b"[" * 128 + b"]" * 128, b"01", b"\xef\xbb\xbf{}"):
        with pytest.raises(JSONError):
            loads(bad)
    assert loads(b"[" * 127 + b"]" * 127) is not None
    assert loads("9.007199254740993e15") == 9007199254740992.0  # a double, not an integer literal
    # Lone surrogates, wherever they are and however they are spelled;
    # a pair is text, and so is an escaped backslash before "ud800".
    for bad in (b'{"k":[1,{"x":"a\\uDC00b"}]}', b'{"\\udbff":1}', b'["\\uD9aF"]', b'"\\ud83d\\u0041"'):
        with pytest.raises(JSONError, match="surrogate"):
            loads(bad)
    assert loads(b'["\\ud83d\\ude00"]') == ["\U0001f600"]
    assert loads(b'"\\\\ud800"') == "\\ud800"


# -- the worked example of FORMAT.md section 11 -----------------------------------


def example():
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("\n## 11. Worked example"):]
    values = {}
    for block in re.findall(r"```text\n(.*?)```", section, flags=re.S):
        for line in block.splitlines():
            if " = " in line:
                label, value = line.split(" = ", 1)
                values[label] = value
    return values


# Step 1's trace id is not stated in FORMAT.md (see tests/format/check_worked_example.py).
STEP1_TRACE_ID = "0b7e5c1a-3d2f-4e6b-9a8c-1f2e3d4c5b6a"
SERVER_SEED = bytes([0x11]) * 32


def _salt(seed, position):
    block = v._h("cairn/v2/salt", seed, bytes([position // 2]))
    return block[16 * (position % 2): 16 * (position % 2) + 16]


def example_log():
    """The worked example's org log, as entries of a complete bundle."""
    ex = example()
    header = json.loads(ex["header_view"])
    genesis = v._h("cairn/v2/genesis", canonical(header))
    trace0 = json.loads(ex["step0.trace_id.value"])
    common = {"org_id": "acme", "agent_id": "analyst", "session_id": "revenue-analysis-q4", "output_data": None,
              "duration_ms": None, "token_count": None, "model": None, "metadata": None, "turn_id": None,
              "turn_step": None, "task_id": None, "links": {}, "status": "ok", "signer_key_id": None}
    steps = [
        dict(common, trace_id=trace0, step_index=0, step_type="observation", step_type_original="Observation",
             content="User asked for Q4 revenue breakdown by segment", input_data=None, confidence=None,
             created_at="2025-01-15T10:30:00.000000Z"),
        dict(common, trace_id=json.loads(ex.get("step1.trace_id.value", json.dumps(STEP1_TRACE_ID))), step_index=1,
             step_type="tool_call", step_type_original="ToolCall", content="Querying orders table",
             input_data=json.loads(ex["step1.input_data.value"]), confidence=json.loads(ex["step1.confidence.value"]),
             created_at="2025-01-15T10:30:01.250000Z"),
    ]
    seeds = [bytes.fromhex(ex["step0.seed"]), bytes(range(0x20, 0x40))]
    entries = [{"seq": 0, "type": "session-start", "logged_at": ex["log.logged_at0"],
                "view": dict(header, genesis=genesis.hex())}]
    entries[0]["hash"] = v._h("cairn/v2/op", b"session-start", canonical(entries[0]["view"])).hex()
    prev = genesis
    for i, (fields, seed) in enumerate(zip(steps, seeds)):
        salts = {name: _salt(seed, p).hex() for p, name in enumerate(v.FIELDS)}
        digest = v._h("cairn/v2/step", *(v._h("cairn/v2/field", bytes.fromhex(salts[n]), canonical(fields[n]))
                                         for n in v.FIELDS))
        chain = v._h("cairn/v2/chain", prev, digest, v._u64(i), fields["created_at"].encode())
        entries.append({"seq": i + 1, "type": "step", "logged_at": ex[f"log.logged_at{i + 1}"], "fields": fields,
                        "salts": salts, "hidden": {}, "digest": digest.hex(), "prev_hash": prev.hex(),
                        "hash": chain.hex(), "signature": None, "has_embedding": False, "erased": False})
        prev = chain
    return ex, entries


def _leaf(e):
    return v._leaf(v._frame("cairn/v2/log-leaf", v._u64(e["seq"]), e["type"].encode(), bytes.fromhex(e["hash"]),
                            e["logged_at"].encode()))


def _note(text):
    public = ed25519.public_key(SERVER_SEED)
    key_id = v._sha256(b"cairn.example\n\x01" + public)[:4]
    return text + "\n\u2014 cairn.example " + base64.b64encode(key_id + ed25519.sign(SERVER_SEED, text.encode())).decode() + "\n"


def _dumps(obj):
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def test_format_worked_example():
    ex, entries = example_log()
    header = json.loads(ex["header_view"])
    assert canonical(header).decode() == ex["header_view"]
    assert v._h("cairn/v2/genesis", canonical(header)).hex() == ex["genesis"]
    step0 = entries[1]
    for name in v.FIELDS:
        assert canonical(step0["fields"][name]).decode() == ex[f"step0.{name}.value"], name
        assert step0["salts"][name] == ex[f"step0.{name}.salt"], name
    for name in ("trace_id", "content"):
        commitment = v._h("cairn/v2/field", bytes.fromhex(step0["salts"][name]), canonical(step0["fields"][name]))
        assert commitment.hex() == ex[f"step0.{name}.commitment"]
    for i in (0, 1):
        assert entries[i + 1]["digest"] == ex[f"step{i}.digest"]
        assert entries[i + 1]["hash"] == ex[f"step{i}.hash"]
    session_leaves = [v._leaf(v._frame("cairn/v2/session-leaf", v._u64(i), bytes.fromhex(entries[i + 1]["hash"])))
                      for i in (0, 1)]
    assert session_leaves[0].hex() == ex["session.leaf0"]
    assert v._node(*session_leaves).hex() == ex["session.root"]
    assert entries[0]["hash"] == ex["log.op0.hash"]
    leaves = [_leaf(e) for e in entries]
    for i, leaf in enumerate(leaves):
        assert leaf.hex() == ex[f"log.leaf{i}"]
    tree = v._Frontier()
    for leaf in leaves:
        tree.push(leaf)
    root = tree.root()
    assert root.hex() == ex["log.root"]
    proof = [bytes.fromhex(h) for h in ex["log.inclusion(1,3)"].split(",")]
    assert v._verify_inclusion(leaves[1], 1, 3, proof, root)
    key = v._parse_vkey(ex["server.vkey"])
    assert key.public == ed25519.public_key(SERVER_SEED)
    checkpoint = f"cairn.example/acme\n3\n{base64.b64encode(root).decode()}\n"
    assert v._open_note(checkpoint + "\n" + ex["checkpoint.signature_line"] + "\n", [key]) == checkpoint
    selection = json.loads(ex["selection"])
    assert canonical(selection).decode() == ex["selection"]
    selection_hash = v._h("cairn/v2/selection", canonical(selection))
    assert selection_hash.hex() == ex["selection.hash"]
    note = (f"cairn-selection/v2\ncairn.example/acme\n3\n{base64.b64encode(root).decode()}\n"
            f"{base64.b64encode(selection_hash).decode()}\n")
    assert v._open_note(note + "\n" + ex["selection.signature_line"] + "\n", [key]) == note


def example_bundles():
    ex, entries = example_log()
    leaves = [_leaf(e) for e in entries]
    tree = v._Frontier()
    for leaf in leaves:
        tree.push(leaf)
    root = tree.root()
    header = {"cairn_bundle": 2, "server_name": "cairn.example", "org_id": "acme", "origin": "cairn.example/acme",
              "server_key": ex["server.vkey"], "complete_log": True, "exported_at": "2025-01-15T10:31:00.000000Z"}
    checkpoint = _note(f"cairn.example/acme\n3\n{base64.b64encode(root).decode()}\n")
    complete = [_dumps(header), _dumps({"checkpoint": checkpoint})] + [_dumps(e) for e in entries]
    complete.append(_dumps({"end": {"entries": 3}}))
    selection = json.loads(ex["selection"])
    note = _note(f"cairn-selection/v2\ncairn.example/acme\n3\n{base64.b64encode(root).decode()}\n"
                 f"{base64.b64encode(v._h('cairn/v2/selection', canonical(selection))).decode()}\n")
    proofs = {0: [leaves[1], leaves[2]], 1: [leaves[0], leaves[2]], 2: [v._node(leaves[0], leaves[1])]}
    partial = [_dumps(dict(header, complete_log=False)), _dumps({"checkpoint": checkpoint}),
               _dumps({"selection": selection, "note": note})]
    for e in entries:
        e = json.loads(json.dumps(e))
        if e["type"] == "step":
            for name in v.FIELDS:
                if name not in v.LEVEL_SHOWS["generic"]:
                    e["hidden"][name] = v._h("cairn/v2/field", bytes.fromhex(e["salts"][name]),
                                             canonical(e["fields"][name])).hex()
                    del e["fields"][name], e["salts"][name]
        e["proof"] = [p.hex() for p in proofs[e["seq"]]]
        partial.append(_dumps(e))
    partial.append(_dumps({"end": {"entries": 3}}))
    return ex, "\n".join(complete) + "\n", "\n".join(partial) + "\n"


def test_worked_example_bundles_verify():
    ex, complete, partial = example_bundles()
    for bundle in (complete, partial):
        verdict = verify_bundle(bundle, keys=[ex["server.vkey"]])
        assert verdict.verified, verdict.failure
        assert verdict.records_checked == 3 and verdict.last_valid.seq == 2
        assert verdict.checkpoint_size == 3 and verdict.checkpoint_root == ex["log.root"]
    assert verify_bundle(partial, keys=[ex["server.vkey"]]).selection == json.loads(ex["selection"])
    # The partial bundle's proof of seq 1 is the document's.
    line = next(json.loads(x) for x in partial.splitlines() if '"seq":1' in x)
    assert ",".join(line["proof"]) == ex["log.inclusion(1,3)"]


def test_worked_example_bundles_tampered():
    ex, complete, partial = example_bundles()
    key = [ex["server.vkey"]]

    def verdict(text, **kw):
        result = verify_bundle(text, keys=key, **kw)
        return (result.failure.reason, result.failure.at.line, result.failure.at.seq,
                result.failure.at.step_index) if result.failure else None

    assert verdict(complete.replace("Querying orders", "Querying orderz")) == ("digest-mismatch", 5, 2, 1)
    assert verdict(complete.replace("10:30:01.253000Z", "10:30:01.252000Z")) == ("inconsistent-checkpoint", 5, 2, 1)
    assert verdict(complete.replace("10:30:01.253000Z", "10:29:59.000000Z")) == ("bad-timestamp", 5, 2, 1)
    assert verdict(complete.replace('"seq":2', '"seq":3')) == ("sequence-gap", 5, 2, 1)
    assert verdict(complete.replace('{"end":{"entries":3}}', '{"end":{"entries":2}}')) == ("malformed-record", 6, None, None)
    assert verdict("\n".join(complete.splitlines()[:-2]) + "\n") == ("missing-record", 5, None, None)
    assert verdict("\n".join(complete.splitlines()[:-2] + ['{"end":{"entries":2}}']) + "\n") == ("missing-record", None, 2, None)
    assert verdict(complete.replace('"cairn_bundle":2', '"cairn_bundle":1')) == ("malformed-record", 1, None, None)
    assert verdict(complete.replace('"seq":1,', '"seq":1,"seq":1,')) == ("malformed-record", 4, None, None)
    assert verdict(complete.replace(ex["step0.hash"], ex["step0.hash"].upper(), 1)) == ("malformed-record", 4, 1, None)
    assert verify_bundle(complete, keys=[]).verified  # the header's key
    stranger = "cairn.example+" + v._sha256(b"cairn.example\n\x01" + bytes(32))[:4].hex() + "+" + \
        base64.b64encode(b"\x01" + bytes(32)).decode()
    assert verdict(complete) is None and verify_bundle(complete, keys=[stranger]).failure.reason == "bad-signature"
    lines = partial.splitlines()
    assert verdict("\n".join(lines[:2] + lines[3:]) + "\n") == ("missing-proof", 3, None, None)
    assert verdict(partial.replace('"steps":2', '"steps":3')) == ("digest-mismatch", 3, None, None)
    assert verdict("\n".join(lines[:4] + lines[5:-1] + ['{"end":{"entries":2}}']) + "\n") == ("sequence-gap", 5, 2, 1)
    trusted_newer = _note("cairn.example/acme\n4\n" + base64.b64encode(bytes(32)).decode() + "\n")
    assert verdict(complete, trusted_checkpoints=[trusted_newer]) == ("missing-proof", 2, None, None)
    tree = v._Frontier()
    tree.push(_leaf(example_log()[1][0]))
    trusted_older = _note("cairn.example/acme\n1\n" + base64.b64encode(tree.root()).decode() + "\n")
    assert verdict(complete, trusted_checkpoints=[trusted_older]) is None
    assert verdict(partial, trusted_checkpoints=[trusted_older]) == ("missing-proof", 3, None, None)
    # A trusted checkpoint that is not a signed note at all is the caller's
    # mistake (cairn verify: exit 2), raised; a note of another key is a
    # verdict.
    for not_a_note in ("", "cp19.txt", "cairn.example/acme\n1\n"):
        with pytest.raises(ValueError, match="trusted checkpoint 1 is not a signed note"):
            verify_bundle(complete, trusted_checkpoints=[not_a_note])
    other_key = trusted_older.replace("\n\n\u2014 cairn.example ", "\n\n\u2014 another.example ")
    assert verdict(complete, trusted_checkpoints=[other_key]) == ("bad-signature", 2, None, None)
    # A one-line string that is not JSON is a path: a missing file raises;
    # empty or JSON text (a cut-off export, a saved error) is judged.
    with pytest.raises(FileNotFoundError):
        verify_bundle("no-such.bundle")
    assert verify_bundle("").failure.reason == "missing-record"
    assert verify_bundle('{"error":{"code":"not_found","message":"x"}}').failure.reason == "malformed-record"
