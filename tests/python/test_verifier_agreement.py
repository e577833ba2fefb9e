"""The Python verifier (clients/python, written from docs/FORMAT.md alone)
and the Rust reference (`cairn verify`) must reach the same verdict on every
bundle: verified or not, the same reason, the same line, seq, session and
step index, and the same number of records checked.

Two sources of bundles:

- the tamper corpus the Rust tamper suite writes (`CAIRN_TAMPER_CORPUS`,
  default `target/tamper-corpus`): `NAME.bundle` and `NAME.json` with the
  pinned keys, trusted checkpoints, witness policy and the expected verdict;
- bundles made here with the `cairn` binary (complete, partial at each level
  and scope, with consistency lines), then tampered with as a courier would
  (bytes, lines and members edited) and as an insider would (holding the
  server key: every hash, proof and signature recomputed, so that only the
  rule under test is broken). Each is verified by both verifiers and the
  verdicts compared.
"""
from __future__ import annotations

import base64
import json
import os
import pytest
import re

from cairn_client import verify as V
from cairn_client.jcs import canonical

from agreement import (
    CORPUS,
    _check,
    _compare_all,
    _entry_indexes,
    _report,
    dumps,
    join,
    python_verdict,
    split,
)


# -- the shared corpus -----------------------------------------------------------


def _corpus_cases():
    if not CORPUS.is_dir():
        return []
    return sorted(p for p in CORPUS.glob("*.json"))


def test_corpus_present():
    cases = _corpus_cases()
    if not cases:
        message = (f"no tamper corpus at {CORPUS}: run the Rust tamper suite "
                   f"(cargo test -p cairn --test tamper) or set CAIRN_TAMPER_CORPUS")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    assert len(cases) >= 10


@pytest.mark.parametrize("case", _corpus_cases() or [None], ids=lambda p: p.stem if p else "no-corpus")
def test_corpus_case(case):
    if case is None:
        message = f"no tamper corpus at {CORPUS} (set CAIRN_TAMPER_CORPUS)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    spec = json.loads(case.read_text(encoding="utf-8"))
    got = python_verdict(case.parent / spec["bundle"], spec.get("keys", []), spec.get("trusted_checkpoints", []),
                         spec.get("witnesses", []), spec.get("witness_quorum"))
    expected = spec["expected"]
    diff = {k: (expected[k], got[k]) for k in expected if k in got and expected[k] != got[k]}
    assert not diff, f"{case.stem}: (expected, python) {diff}; python said: {got['detail']}"


def test_witness_policies_are_bounded_as_the_other_verifiers_bound_them():
    """At most 64 witnesses (as `cairn verify --bundle --witness` and the
    TypeScript verifier), checked before anything else of the policy; a
    quorum is a whole number."""
    spec_path = CORPUS / "witnessed-quorum-met.json"
    if not spec_path.is_file():
        message = f"no witnessed bundle in the tamper corpus at {CORPUS}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    import hashlib
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    bundle = (CORPUS / spec["bundle"]).read_bytes()
    raw = base64.b64decode(spec["witnesses"][0].split("+", 2)[2])

    def renamed(name: str) -> str:
        key_id = hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4].hex()
        return f"{name}+{key_id}+{base64.b64encode(raw).decode()}"

    with pytest.raises(ValueError, match="at most 64 witnesses, not 65"):
        V.verify_bundle(bundle, keys=spec["keys"], witnesses=[renamed(f"w{i}.example") for i in range(65)])
    with pytest.raises(ValueError, match="same key"):
        V.verify_bundle(bundle, keys=spec["keys"], witnesses=[renamed("a.example"), renamed("b.example")])
    assert V.verify_bundle(bundle, keys=spec["keys"], witnesses=spec["witnesses"]).verified
    # A quorum is a whole number (the CLI and the TypeScript verifier refuse
    # 1.5 and true as well).
    for quorum in (1.5, True, "1"):
        with pytest.raises(ValueError, match="whole number"):
            V.verify_bundle(bundle, keys=spec["keys"], witnesses=spec["witnesses"], witness_quorum=quorum)


def test_genuine_bundles_verify(ledger, tmp_path):
    cases = []
    for name, data in ledger.bundles.items():
        cases.append((name, data, [ledger.vkey_text], []))
        cases.append((name + "/unpinned", data, [], []))
        cases.append((name + "/trusted", data, [ledger.vkey_text], ledger.trusted))
    results = _compare_all(ledger, cases, tmp_path)
    report = _report(results)
    assert not report, report
    for name, rust, python, _ in results:
        if name.endswith("/trusted") and not name.startswith(("complete", "s2-since")):
            continue  # a partial bundle without consistency line: missing-proof (checked by agreement)
        assert python["verified"], (name, python)


def courier_cases(name: str, data: bytes):
    """Edits of bytes, lines and members, as anyone carrying the bundle could make."""
    lines = split(data)
    entries = _entry_indexes(lines)
    last = len(lines) - 1
    yield "as-is", data
    yield "crlf", b"\r\n".join(lines) + b"\r\n"
    yield "no-final-newline", b"\n".join(lines)
    yield "empty-file", b""
    yield "header-only", join(lines[:1])
    yield "no-end", join(lines[:-1])
    yield "blank-line-before-end", join(lines[:-1] + [b""] + lines[-1:])
    yield "blank-line-after-end", join(lines + [b""])
    yield "line-after-end", join(lines + [lines[entries[0]]])
    yield "object-after-end", join(lines + [b"{}"])
    yield "two-end-lines", join(lines + lines[-1:])
    end = json.loads(lines[-1])
    for delta in (1, -1):
        changed = {"end": {"entries": end["end"]["entries"] + delta}}
        yield f"end-count{delta:+d}", join(lines[:-1] + [dumps(changed)])
    yield "end-extra-member", join(lines[:-1] + [dumps({"end": end["end"], "x": 1})])
    # Strict JSON (2.2) inside a record's text.
    for i in entries:
        raw = lines[i]
        if b'"content":"' not in raw:
            continue
        for label, text in (("lone-surrogate", rb"\ud800"), ("lone-low-surrogate", rb"\udc00"), ("surrogate-pair", rb"\ud83d\ude00"),
                            ("nul-escape", rb"\u0000"), ("raw-tab", b"\t"), ("raw-newline-escape", rb"\n"),
                            ("noncharacter", "\uffff".encode()), ("bom", "\ufeff".encode()), ("bad-escape", rb"\x41")):
            yield f"content-{label}", join(lines[:i] + [raw.replace(b'"content":"', b'"content":"' + text, 1)] + lines[i + 1:])
        for label, number in (("1e400", b"1e400"), ("-1e400", b"-1e400"), ("neg-zero", b"-0"), ("exp-upper", b"1E2"),
                              ("leading-zero", b"01"), ("plus", b"+1"), ("dot", b"1."), ("nan", b"NaN"), ("inf", b"Infinity"),
                              ("2^53", b"9007199254740992"), ("-2^53", b"-9007199254740992"), ("2^53-float", b"9007199254740992.0"),
                              ("2^53-exp", b"9.007199254740992e15"), ("tiny", b"1e-400"), ("hex", b"0x10")):
            yield f"number-{label}", join(lines[:i] + [raw.replace(b'"content":"', b'"zz":' + number + b',"content":"', 1)] + lines[i + 1:])
        yield "bom-at-line-start", join(lines[:i] + ["\ufeff".encode() + raw] + lines[i + 1:])
        yield "nbsp-between-tokens", join(lines[:i] + [raw.replace(b',', "\u00a0,".encode(), 1)] + lines[i + 1:])
        yield "tab-between-tokens", join(lines[:i] + [raw.replace(b',', b'\t,', 1)] + lines[i + 1:])
        yield "cr-inside-line", join(lines[:i] + [raw.replace(b',', b'\r,', 1)] + lines[i + 1:])
        yield "lone-cr-at-end", join(lines[:i] + [raw + b"\r"] + lines[i + 1:])
        yield "deep-nesting-200", join(lines[:i] + [raw.replace(b'"content":"', b'"zz":' + b"[" * 200 + b"]" * 200 + b',"content":"', 1)] + lines[i + 1:])
        break
    yield "end-count-string", join(lines[:-1] + [dumps({"end": {"entries": str(end["end"]["entries"])}})])
    for i in range(len(lines)):
        yield f"drop-line-{i + 1}", join(lines[:i] + lines[i + 1:])
    for i in range(1, len(lines)):
        yield f"duplicate-line-{i + 1}", join(lines[:i + 1] + [lines[i]] + lines[i + 1:])
    for i in range(1, len(lines) - 1):
        swapped = lines[:]
        swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
        yield f"swap-lines-{i + 1}-{i + 2}", join(swapped)
    for i in range(len(lines)):
        yield f"not-utf8-line-{i + 1}", join(lines[:i] + [lines[i][:-1] + b"\xff}"] + lines[i + 1:])
        yield f"not-json-line-{i + 1}", join(lines[:i] + [lines[i][:-1]] + lines[i + 1:])
        yield f"array-line-{i + 1}", join(lines[:i] + [b"[" + lines[i] + b"]"] + lines[i + 1:])
        yield f"trailing-garbage-line-{i + 1}", join(lines[:i] + [lines[i] + b" x"] + lines[i + 1:])
        yield f"leading-space-line-{i + 1}", join(lines[:i] + [b" " + lines[i] + b"\t"] + lines[i + 1:])
        obj = json.loads(lines[i])
        yield f"unknown-member-line-{i + 1}", join(lines[:i] + [dumps({**obj, "zz": 1})] + lines[i + 1:])
        # A duplicate member: the same name and value twice.
        first = next(iter(obj))
        dup = lines[i][:1] + json.dumps(first).encode() + b":" + dumps(obj[first]) + b"," + lines[i][1:]
        yield f"duplicate-member-line-{i + 1}", join(lines[:i] + [dup] + lines[i + 1:])
    # The header.
    header = json.loads(lines[0])
    for key, value in (("cairn_bundle", 1), ("cairn_bundle", 3), ("cairn_bundle", 2.0), ("cairn_bundle", "2"),
                       ("origin", "other/acme"), ("org_id", "other"), ("server_name", "other.test"),
                       ("complete_log", not header["complete_log"]), ("exported_at", "2026-01-01T00:00:00Z"),
                       ("server_key", "not a key"), ("complete_log", None)):
        yield f"header-{key}={value!r}", join([dumps({**header, key: value})] + lines[1:])
    for key in header:
        yield f"header-without-{key}", join([dumps({k: v for k, v in header.items() if k != key})] + lines[1:])
    yield "header-format-1", join([dumps({"cairn_bundle": 1, "org_id": "acme"})] + lines[1:])
    # The checkpoint.
    note = json.loads(lines[1])["checkpoint"]
    text, sigs = note.split("\n\n", 1)
    variants = {
        "checkpoint-no-signature": text + "\n",
        "checkpoint-empty-signature-block": text + "\n\n",
        "checkpoint-garbled-signature-line": text + "\n\n" + sigs.replace("\u2014 ", "- "),
        "checkpoint-signature-bad-base64": text + "\n\n" + sigs[:-3] + "!\n",
        "checkpoint-signature-flipped": text + "\n\n" + sigs[:-8] + ("A" if sigs[-8] != "A" else "B") + sigs[-7:],
        "checkpoint-size-changed": text.replace("\n", "\n1", 1) + "\n\n" + sigs,
        "checkpoint-unknown-key-only": text + "\n\n\u2014 other.key " + sigs.split(" ", 2)[2],
        "checkpoint-extra-unknown-signature": text + "\n\n" + sigs + "\u2014 other.key AAAAAAAA\n",
        "checkpoint-no-final-newline": note[:-1],
        "checkpoint-control-char": text + "\t\n\n" + sigs,
    }
    for vname, vnote in variants.items():
        yield vname, join(lines[:1] + [dumps({"checkpoint": vnote})] + lines[2:])
    yield "checkpoint-not-string", join(lines[:1] + [dumps({"checkpoint": 5})] + lines[2:])
    yield "checkpoint-member-renamed", join(lines[:1] + [dumps({"checkpoin": note})] + lines[2:])
    # Consistency and selection lines.
    for i in range(2, len(lines)):
        obj = json.loads(lines[i])
        if "consistency" in obj:
            c = obj["consistency"]
            for vname, value in (("old-size+1", {**c, "old_size": c["old_size"] + 1}),
                                 ("old-size-0", {**c, "old_size": 0}),
                                 ("old-size-big", {**c, "old_size": 10**6}),
                                 ("proof-empty", {**c, "proof": []}),
                                 ("proof-flipped", {**c, "proof": [("0" if p[0] != "0" else "1") + p[1:] for p in c["proof"]]}),
                                 ("proof-upper", {**c, "proof": [p.upper() for p in c["proof"]]})):
                yield f"consistency-{vname}", join(lines[:i] + [dumps({"consistency": value})] + lines[i + 1:])
            yield "consistency-twice", join(lines[:i + 1] + [lines[i]] + lines[i + 1:])
        if "selection" in obj:
            sel = obj["selection"]
            edits = {
                "level-full": {**sel, "level": "full"},
                "level-bad": {**sel, "level": "everything"},
                "size+1": {**sel, "checkpoint_size": sel["checkpoint_size"] + 1},
                "scope-other": {**sel, "scope": {"session": "zz"}},
                "scope-two": {**sel, "scope": {"session": "s1", "agent": "analyst"}},
                "sessions-empty": {**sel, "sessions": []},
                "sessions-twice": {**sel, "sessions": sel["sessions"] + sel["sessions"][:1]},
                "records-empty": {**sel, "records": []},
                "records-reversed": {**sel, "records": list(reversed(sel["records"]))},
                "records-step": {**sel, "records": sel["records"] + [[sel["checkpoint_size"] - 1, "step"]]},
                "records-beyond": {**sel, "records": sel["records"] + [[sel["checkpoint_size"], "review"]]},
                "extra-member": {**sel, "x": 1},
            }
            if sel["sessions"]:
                s0 = sel["sessions"][0]
                edits["steps+1"] = {**sel, "sessions": [{**s0, "steps": s0["steps"] + 1}] + sel["sessions"][1:]}
                edits["steps-1"] = {**sel, "sessions": [{**s0, "steps": max(0, s0["steps"] - 1)}] + sel["sessions"][1:]}
                edits["head-other"] = {**sel, "sessions": [{**s0, "head": "00" * 32}] + sel["sessions"][1:]}
                edits["head-upper"] = {**sel, "sessions": [{**s0, "head": s0["head"].upper()}] + sel["sessions"][1:]}
            if sel["records"]:
                r0 = sel["records"][0]
                edits["record-type"] = {**sel, "records": [[r0[0], "review" if r0[1] != "review" else "seal"]] + sel["records"][1:]}
            for ename, value in edits.items():
                yield f"selection-{ename}", join(lines[:i] + [dumps({**obj, "selection": value})] + lines[i + 1:])
            yield "selection-note-swapped-for-checkpoint", join(
                lines[:i] + [dumps({**obj, "note": json.loads(lines[1])["checkpoint"]})] + lines[i + 1:])
            yield "selection-removed", join(lines[:i] + lines[i + 1:])
    # Entry members.
    size = int(json.loads(lines[1])["checkpoint"].split("\n")[1])
    for i in entries:
        obj = json.loads(lines[i])
        seq = obj["seq"]

        def put(tag, new, i=i):
            return f"entry{seq}-{tag}", join(lines[:i] + [dumps(new)] + lines[i + 1:])

        yield put("seq+1", {**obj, "seq": seq + 1})
        yield put("seq-1", {**obj, "seq": seq - 1})
        yield put("seq-float", {**obj, "seq": float(seq) + 0.5})
        yield put("seq-string", {**obj, "seq": str(seq)})
        yield put("seq-negative", {**obj, "seq": -1})
        yield put("seq-beyond-checkpoint", {**obj, "seq": size + 1})
        yield put("seq-at-checkpoint", {**obj, "seq": size})
        if obj["type"] == "session-start":
            yield put("genesis-and-seq", {**obj, "seq": seq + 1, "view": {**obj["view"], "genesis": "ab" * 32}})
            yield put("genesis-and-logged-at", {**obj, "logged_at": "2000-01-01T00:00:00.000000Z",
                                                "view": {**obj["view"], "genesis": "ab" * 32}})
        yield put("hash-flipped", {**obj, "hash": ("0" if obj["hash"][0] != "0" else "1") + obj["hash"][1:]})
        yield put("hash-upper", {**obj, "hash": obj["hash"].upper()})
        yield put("logged-at-earlier", {**obj, "logged_at": "2000-01-01T00:00:00.000000Z"})
        yield put("logged-at-later", {**obj, "logged_at": "2099-01-01T00:00:00.000000Z"})
        yield put("logged-at-noncanonical", {**obj, "logged_at": obj["logged_at"][:-1] + "+00:00"})
        yield put("type-changed", {**obj, "type": "review" if obj["type"] != "review" else "seal"})
        yield put("type-unknown", {**obj, "type": "mystery"})
        for key in obj:
            yield put(f"without-{key}", {k: v for k, v in obj.items() if k != key})
        if "proof" in obj:
            yield put("proof-flipped", {**obj, "proof": [("0" if p[0] != "0" else "1") + p[1:] for p in obj["proof"]]})
            yield put("proof-extra", {**obj, "proof": obj["proof"] + obj["proof"][:1]})
            yield put("proof-too-long", {**obj, "proof": obj["proof"] * 129})
        else:
            yield put("proof-added", {**obj, "proof": []})
        raw = lines[i]
        yield f"entry{seq}-seq-huge", join(lines[:i] + [raw.replace(b'"seq":%d' % seq, b'"seq":9007199254740993')] + lines[i + 1:])
        yield f"entry{seq}-seq-2^53-1", join(lines[:i] + [raw.replace(b'"seq":%d' % seq, b'"seq":9007199254740991')] + lines[i + 1:])
        if obj["type"] == "step":
            yield from _step_courier(put, obj)
        else:
            view = obj["view"]
            for key, value in view.items():
                yield put(f"view-{key}-changed", {**obj, "view": {**view, key: _other(value)}})
                for k, bad in enumerate(BAD_VIEW_VALUES.get(key, [])):
                    if bad != value:
                        yield put(f"view-{key}-bad{k}", {**obj, "view": {**view, key: bad}})
                yield put(f"view-without-{key}", {**obj, "view": {k: v for k, v in view.items() if k != key}})
            yield put("view-extra", {**obj, "view": {**view, "zz": None}})


def _other(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2
    if isinstance(value, str):
        if re.fullmatch(r"[0-9a-f]{64}", value):
            return ("0" if value[0] != "0" else "1") + value[1:]
        return value + "x" if not value.endswith("\n") else value.replace("\n", "x\n", 1)
    if value is None:
        return "x"
    if isinstance(value, dict):
        return {**value, "zz": 1}
    if isinstance(value, list):
        return value + [1]
    return value


_BAD_ID = ["has space", "", "x" * 201, "tab\t", "\u00e9", 5, None]
_BAD_UINT = [-1, 1.5, 1.0, "1", True, None]
_BAD_TS = ["2025-01-15T10:30:00Z", "2025-01-15T10:30:00.000000+00:00", "2025-02-30T00:00:00.000000Z",
           "2025-01-15 10:30:00.000000Z", "2025-01-15T10:30:00.0000000Z", 5, None]
#: Values a step field must not hold, by field (FORMAT.md 3.1).
BAD_FIELD_VALUES = {
    "trace_id": _BAD_ID, "org_id": _BAD_ID, "agent_id": _BAD_ID, "session_id": _BAD_ID,
    "step_index": _BAD_UINT, "step_type": ["Observation", "mystery", "", 5, None],
    "step_type_original": [5, None, {}], "content": [5, {}, True],
    "confidence": [2, -0.1, 1.0000001, "0.5", True], "duration_ms": _BAD_UINT[:-1],
    "token_count": _BAD_UINT[:-1], "model": [5, {}], "created_at": _BAD_TS,
    "turn_id": _BAD_ID[:-1], "task_id": _BAD_ID[:-1], "turn_step": _BAD_UINT[:-1],
    "links": [{"unknown": "x"}, {"parent": 5}, {"parent": "has space"}, {"parent": None}, [], None, "x"],
    "status": ["OK", "pending", None, 1], "signer_key_id": [5, "agent-XYZ", "", "agent-0123456789AB"],
    "input_data": [], "output_data": [], "metadata": [],
}
BAD_VIEW_VALUES = {
    "org_id": _BAD_ID, "session_id": _BAD_ID, "agent_id": _BAD_ID, "caller": _BAD_ID, "trace_id": _BAD_ID,
    "key_id": _BAD_ID, "event_id": _BAD_ID, "started_at": _BAD_TS, "sealed_at": _BAD_TS, "erased_at": _BAD_TS,
    "reviewed_at": _BAD_TS, "registered_at": _BAD_TS, "revoked_at": _BAD_TS, "at": _BAD_TS,
    "profile": ["Standard", "lax", None], "predecessor": ["00" * 31, "AA" * 32, 5],
    "full_consent": [0, "false", None], "max_clock_skew_s": _BAD_UINT, "genesis": ["AB" * 32, "00", None],
    "step_count": _BAD_UINT, "step_index": _BAD_UINT, "session_root": ["AB" * 32, None], "final_hash": ["AB" * 32, None],
    "note": [5, None], "commitments": [{}, {"trace_id": "00" * 32}, {"content": "AB" * 32}, {"content": 5}, []],
    "reason": [5, None], "actor": [5, None], "decision": ["approved", None], "reviewer": [5, None],
    "public_key": ["AAAA", "not base64!", 5, base64.b64encode(bytes(31)).decode(), base64.b64encode(bytes(33)).decode()],
    "action": [5, None], "detail": [], "trace": [None, "x", []],
}


def _step_courier(put, obj):
    fields, salts, hidden = obj["fields"], obj["salts"], obj["hidden"]
    for name, value in fields.items():
        for k, bad in enumerate(BAD_FIELD_VALUES.get(name, [])):
            yield put(f"field-{name}-bad{k}", {**obj, "fields": {**fields, name: bad}})
    for name, value in fields.items():
        yield put(f"field-{name}-changed", {**obj, "fields": {**fields, name: _other(value)}})
        yield put(f"salt-{name}-changed", {**obj, "salts": {**salts, name: _other(salts[name])}})
        yield put(f"salt-{name}-upper", {**obj, "salts": {**salts, name: salts[name].upper()}})
        # Hidden, with its true commitment: the digest still recomputes.
        commitment = V._h("cairn/v2/field", bytes.fromhex(salts[name]), canonical(value)).hex()
        yield put(f"field-{name}-hidden", {
            **obj, "fields": {k: v for k, v in fields.items() if k != name},
            "salts": {k: v for k, v in salts.items() if k != name}, "hidden": {**hidden, name: commitment}})
        yield put(f"field-{name}-also-hidden", {**obj, "hidden": {**hidden, name: commitment}})
        yield put(f"field-{name}-without-salt", {**obj, "salts": {k: v for k, v in salts.items() if k != name}})
        yield put(f"field-{name}-dropped", {
            **obj, "fields": {k: v for k, v in fields.items() if k != name},
            "salts": {k: v for k, v in salts.items() if k != name}})
    for name, commitment in hidden.items():
        yield put(f"hidden-{name}-changed", {**obj, "hidden": {**hidden, name: _other(commitment)}})
        yield put(f"hidden-{name}-revealed-null", {**obj, "fields": {**fields, name: None},
                                                    "salts": {**salts, name: "00" * 16}})
        yield put(f"hidden-{name}-valued-too", {**obj, "fields": {**fields, name: None},
                                                 "salts": {**salts, name: "00" * 16}, "hidden": hidden})
        yield put(f"hidden-{name}-dropped", {**obj, "hidden": {k: v for k, v in hidden.items() if k != name}})
    for key in ("digest", "prev_hash"):
        yield put(f"{key}-flipped", {**obj, key: _other(obj[key])})
        yield put(f"{key}-upper", {**obj, key: obj[key].upper()})
    yield put("has-embedding-flipped", {**obj, "has_embedding": not obj["has_embedding"]})
    yield put("erased-flipped", {**obj, "erased": not obj["erased"]})
    yield put("erased-null", {**obj, "erased": None})
    sig = obj["signature"]
    if sig is None:
        yield put("signature-added", {**obj, "signature": {"key_id": "agent-000000000000",
                                                           "signature": base64.b64encode(bytes(64)).decode()}})
    else:
        yield put("signature-removed", {**obj, "signature": None})
        yield put("signature-key-other", {**obj, "signature": {**sig, "key_id": "agent-000000000000"}})
        raw = base64.b64decode(sig["signature"])
        yield put("signature-flipped", {**obj, "signature": {**sig, "signature": base64.b64encode(
            raw[:10] + bytes([raw[10] ^ 1]) + raw[11:]).decode()}})
        yield put("signature-short", {**obj, "signature": {**sig, "signature": base64.b64encode(raw[:63]).decode()}})
        yield put("signature-unpadded", {**obj, "signature": {**sig, "signature": sig["signature"].rstrip("=")}})
        noncanon = sig["signature"][:-3] + chr(ord(sig["signature"][-3]) | 1) + "=="
        yield put("signature-noncanonical-base64", {**obj, "signature": {**sig, "signature": noncanon}})
        yield put("signature-extra-member", {**obj, "signature": {**sig, "x": 1}})


THOROUGH = os.environ.get("CAIRN_AGREEMENT_THOROUGH", "") not in ("", "0")


def _sampled(name: str, tag: str, seen: set) -> bool:
    """By default, member-level edits are tried on one entry of each type in
    each kind of bundle (complete, or partial at a level); every line-level
    edit is tried everywhere. CAIRN_AGREEMENT_THOROUGH=1 tries everything."""
    if THOROUGH:
        return True
    m = re.match(r"entry(\d+)-", tag)
    if not m:
        return True
    return m.group(1) in seen


def _sample_entries(name: str, data: bytes, kinds: set) -> set:
    lines = split(data)
    header = json.loads(lines[0])
    level = "full"
    for line in lines[2:]:
        obj = json.loads(line)
        if "selection" in obj:
            level = obj["selection"]["level"]
    chosen = set()
    for line in lines[2:]:
        obj = json.loads(line)
        if "seq" not in obj:
            continue
        signed = obj.get("type") == "step" and obj.get("signature") is not None
        erased = obj.get("type") == "step" and any(k in obj["hidden"] for k in ("content",)) and level == "full"
        kind = (header["complete_log"], level, obj["type"], signed, erased)
        if kind not in kinds:
            kinds.add(kind)
            chosen.add(str(obj["seq"]))
    return chosen


def courier_corpus(ledger):
    keys = [ledger.vkey_text]
    kinds: set = set()
    for name, data in ledger.bundles.items():
        seen = _sample_entries(name, data, kinds)
        for tag, tampered in courier_cases(name, data):
            if tampered is not None and _sampled(name, tag, seen):
                yield (f"{name}/{tag}", tampered, keys, [])


def test_courier_tamperings(ledger, tmp_path):
    _check(_compare_all(ledger, list(courier_corpus(ledger)), tmp_path), "courier")
