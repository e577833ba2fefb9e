"""The Python verifier and the Rust reference (`cairn verify`) agree on
bundles an insider tampered with: someone holding the server key, who
recomputes every hash, proof and signature so that only the rule under
test is broken; and on the rules the TypeScript verifier found Python
reading differently. The harness (verdicts, the ledger, the insider) is
in `agreement.py`; the tamper corpus, genuine bundles and a courier's
tamperings in `test_verifier_agreement.py`."""

from __future__ import annotations

import base64
import copy
import json

from cairn_client import ed25519
from cairn_client import verify as V
from cairn_client.jcs import canonical

from agreement import (
    Insider,
    _audit_path,
    _check,
    _compare_all,
    _find,
    _key_id,
    _mth,
    _of,
    _report,
    _resign_step,
    _shift,
    _strip_exported_at,
    split,
)


def test_insider_reproduces_cairn_exports(ledger):
    """The selection rule as FORMAT.md 10.4 states it, and the proofs, give
    byte for byte the bundles `cairn export` writes."""
    insider = Insider(ledger.bundles["complete"], ledger.server_seed())
    starts = sorted(e["view"]["started_at"] for e in insider.entries if e["type"] == "session-start")
    same = {
        "s1-full": ({"session": "s1"}, "full"), "s1-generic": ({"session": "s1"}, "generic"),
        "s1-detailed": ({"session": "s1"}, "detailed"), "s2-detailed": ({"session": "s2"}, "detailed"),
        "s3-full": ({"session": "s3"}, "full"), "sg-generic": ({"session": "sg"}, "generic"),
        "sg-full": ({"session": "sg"}, "full"), "analyst-generic": ({"agent": "analyst"}, "generic"),
        "trace-generic": ({"session": "trace-agreement-1"}, "generic"),
        "range": ({"since": starts[1], "until": starts[3]}, "full"),
    }
    problems = []
    for name, (scope, level) in same.items():
        ours = insider.partial(scope, level)
        if _strip_exported_at(ours) != _strip_exported_at(ledger.bundles[name]):
            ours_lines, theirs = split(ours), split(ledger.bundles[name])
            first = next((i for i, (a, b) in enumerate(zip(ours_lines, theirs)) if _strip_exported_at(a) != _strip_exported_at(b)),
                         min(len(ours_lines), len(theirs)))
            problems.append(f"{name}: first differing line {first + 1}:\n  ours:  {ours_lines[first][:300] if first < len(ours_lines) else None}\n"
                            f"  cairn: {theirs[first][:300] if first < len(theirs) else None}")
    complete = insider.complete()
    if _strip_exported_at(complete) != _strip_exported_at(ledger.bundles["complete"]):
        problems.append("complete differs")
    since = insider.complete(since=[ledger.trusted_size])
    if _strip_exported_at(since) != _strip_exported_at(ledger.bundles["complete-since"]):
        problems.append("complete-since differs")
    assert not problems, "\n".join(problems)


SEED_A, SEED_B, SEED_C = bytes([7]) * 32, bytes([8]) * 32, bytes([9]) * 32


def insider_cases(ledger):
    base = Insider(ledger.bundles["complete"], ledger.server_seed())
    keys = [ledger.vkey_text]
    other_seed = bytes([42]) * 32
    stranger = Insider(ledger.bundles["complete"], other_seed)
    stranger_vkey = V._Key(base.name, stranger.key_id, ed25519.public_key(other_seed)).vkey()

    def complete(name, edit, rehash=dict(), renumber=False, trusted=(), **kw):
        ins = base.copy()
        if edit(ins) is False:
            return None
        if renumber:
            ins.renumber()
        ins.rehash(**rehash)
        return (f"complete/{name}", ins.complete(**kw), keys, list(trusted))

    def partial(name, edit, scope, level, rehash=dict(), renumber=False, trusted=(), pre=None, **kw):
        ins = base.copy()
        if edit is not None and edit(ins) is False:
            return None
        if renumber:
            ins.renumber()
        ins.rehash(**rehash)
        if pre is not None:
            kw = pre(ins, kw)
        return (f"partial/{name}", ins.partial(scope, level, **kw), keys, list(trusted))

    cases = []
    add = lambda case: case and cases.append(case)  # noqa: E731
    add(complete("unchanged", lambda ins: None))
    # Time (5.4).
    def created_before_previous(ins):
        e, prev = _of(ins, "step", "s1", 3), _of(ins, "step", "s1", 2)
        e["fields"]["created_at"] = _shift(prev["fields"]["created_at"], -1)
    add(complete("created-at-before-previous-step", created_before_previous))
    def created_equal_previous(ins):
        e, prev = _of(ins, "step", "s1", 3), _of(ins, "step", "s1", 2)
        e["fields"]["created_at"] = prev["fields"]["created_at"]
    add(complete("created-at-equal-previous-step", created_equal_previous))
    for label, micros in (("skew-exact-past", -300_000_000), ("skew-past+1us", -300_000_001),
                          ("skew-exact-future", 300_000_000), ("skew-future+1us", 300_000_001)):
        def skew(ins, micros=micros):
            e = _of(ins, "step", "s4", 0)
            e["fields"]["created_at"] = _shift(e["logged_at"], micros)
        add(complete(f"created-at-{label}", skew))
    def skew_zero(ins):
        view = _of(ins, "session-start", "s4")["view"]
        view["max_clock_skew_s"] = 0
        e = _of(ins, "step", "s4", 0)
        e["fields"]["created_at"] = e["logged_at"]
    add(complete("skew-zero-exact", skew_zero))
    def skew_zero_off(ins):
        skew_zero(ins)
        e = _of(ins, "step", "s4", 0)
        e["fields"]["created_at"] = _shift(e["logged_at"], -1)
    add(complete("skew-zero-1us", skew_zero_off))
    def logged_back(ins):
        e = _find(ins, 12)
        e["logged_at"] = _shift(_find(ins, 11)["logged_at"], -1)
        e["fields"]["created_at"] = min(e["fields"]["created_at"], e["logged_at"])
    add(complete("logged-at-runs-back", logged_back))
    def logged_back_op(ins):
        _find(ins, 7)["logged_at"] = _shift(_find(ins, 6)["logged_at"], -1)
    add(complete("logged-at-runs-back-at-record", logged_back_op))
    # Steps (9.2).
    add(complete("step-agent-changed", lambda ins: _of(ins, "step", "s2", 0)["fields"].update(agent_id="planner")))
    add(complete("step-org-changed", lambda ins: _of(ins, "step", "s2", 0)["fields"].update(org_id="other")))
    add(complete("strict-session-observation", lambda ins: _of(ins, "step", "s3", 1)["fields"].update(
        step_type="observation", step_type_original="Observation")))
    add(complete("strict-session-kinds-ok", lambda ins: _of(ins, "step", "s3", 1)["fields"].update(
        step_type="plan", step_type_original="plan")))
    add(complete("step-index-gap", lambda ins: _of(ins, "step", "s1", 3)["fields"].update(step_index=4)))
    add(complete("step-index-repeat", lambda ins: _of(ins, "step", "s1", 3)["fields"].update(step_index=2)))
    add(complete("step-of-unknown-session", lambda ins: _of(ins, "step", "s4", 0)["fields"].update(session_id="s9")))
    def step_after_seal(ins):
        e = _of(ins, "step", "s1", 3)
        ins.entries.remove(e)
        seal = _of(ins, "seal", "s1")
        ins.entries.insert(ins.entries.index(seal) + 1, e)
        e["logged_at"] = seal["logged_at"]
        e["fields"]["created_at"] = seal["logged_at"]
    add(complete("step-after-seal", step_after_seal, renumber=True))
    def prev_hash_only(ins):
        _of(ins, "step", "s1", 2)["prev_hash"] = "00" * 32
    add(complete("prev-hash-edited-rehashed", prev_hash_only, rehash=dict(chains=False)))
    def digest_edited(ins):
        e = _of(ins, "step", "s1", 2)
        e["fields"]["content"] = "changed"
    add(complete("content-edited-digest-kept", digest_edited, rehash=dict(digests=False)))
    add(complete("content-edited-all-rehashed", digest_edited))
    # Payload values and canonical JSON.
    for label, value in (("nested-20", json.loads("[" * 20 + "]" * 20)), ("neg-zero-float", -0.0),
                         ("floats", [1e21, 1e-7, 0.1 + 0.2, 5e-324, 1.7976931348623157e308, 100.0, 123456789012.5]),
                         ("unicode-keys", {"\U0001F600": 1, "\uffff": 2, "a": 3, "\u00e9": 4, "\u20ac": 5}),
                         ("controls", "\x00\x01\x1f\x7f\u2028\"\\/"), ("noncharacter", "\uffff\ufdd0"),
                         ("max-safe-int", 9007199254740991), ("min-safe-int", -9007199254740991)):
        add(complete(f"payload-{label}", lambda ins, value=value: _of(ins, "step", "s4", 0)["fields"].update(input_data=value)))
    def nested(depth, inner=None):
        value = inner
        for _ in range(depth):
            value = [value] if value is not None else []
        return value
    for depth in (124, 125, 126, 127, 128, 200):
        add(complete(f"payload-nested-{depth}", lambda ins, depth=depth: _of(ins, "step", "s4", 0)["fields"].update(
            input_data=nested(depth))))
        add(complete(f"payload-nested-objects-{depth}", lambda ins, depth=depth: _of(ins, "step", "s4", 0)["fields"].update(
            metadata=json.loads('{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)))))
    # Sessions and predecessors (9.3).
    def started_twice(ins):
        start = copy.deepcopy(_of(ins, "session-start", "s4"))
        last = ins.entries[-1]
        start["logged_at"] = last["logged_at"]
        ins.entries.append(start)
    add(complete("session-started-twice", started_twice, renumber=True))
    add(complete("predecessor-unknown", lambda ins: _of(ins, "session-start", "s2")["view"].update(predecessor="ab" * 32)))
    def predecessor_s3_early(ins):
        _of(ins, "session-start", "s2")["view"]["predecessor"] = _of(ins, "seal", "s3")["view"]["final_hash"]
    add(complete("predecessor-sealed-later", predecessor_s3_early))
    def predecessor_twice(ins):
        _of(ins, "session-start", "s4")["view"]["predecessor"] = _of(ins, "seal", "s1")["view"]["final_hash"]
    add(complete("predecessor-continued-twice", predecessor_twice))
    def predecessor_s3(ins):
        _of(ins, "session-start", "s4")["view"]["predecessor"] = _of(ins, "seal", "s3")["view"]["final_hash"]
    add(complete("predecessor-s3-ok", predecessor_s3))
    # Seals (7.2, 9.3).
    def seal_edit(**changes):
        def edit(ins):
            view = _of(ins, "seal", "s1")["view"]
            view.update(changes)
            view["note"] = ins.seal_note(view)
        return edit
    s1_steps = [e for e in base.entries if e["type"] == "step" and e["fields"]["session_id"] == "s1"]
    add(complete("seal-counts-fewer", seal_edit(step_count=3), rehash=dict(seals=False)))
    add(complete("seal-counts-more", seal_edit(step_count=5), rehash=dict(seals=False)))
    add(complete("seal-root-wrong", seal_edit(session_root="ab" * 32), rehash=dict(seals=False)))
    add(complete("seal-final-wrong", seal_edit(final_hash=s1_steps[2]["hash"]), rehash=dict(seals=False)))
    def seal_note_other(field, value):
        def edit(ins):
            view = _of(ins, "seal", "s1")["view"]
            view["note"] = ins.seal_note({**view, field: value})
        return edit
    add(complete("seal-note-other-sealed-at", seal_note_other("sealed_at", "2020-01-01T00:00:00.000000Z"), rehash=dict(seals=False)))
    add(complete("seal-note-other-count", seal_note_other("step_count", 9), rehash=dict(seals=False)))
    def seal_note_origin(ins):
        view = _of(ins, "seal", "s1")["view"]
        view["note"] = ins.seal_note(view, origin="cairn.test/other")
    add(complete("seal-note-other-origin", seal_note_origin, rehash=dict(seals=False)))
    def seal_note_stranger(ins):
        view = _of(ins, "seal", "s1")["view"]
        view["note"] = stranger.seal_note(view)
    add(complete("seal-note-other-key", seal_note_stranger, rehash=dict(seals=False)))
    def seal_note_unsigned(ins):
        view = _of(ins, "seal", "s1")["view"]
        view["note"] = view["note"].split("\n\n")[0] + "\n"
    add(complete("seal-note-unsigned", seal_note_unsigned, rehash=dict(seals=False)))
    def seal_note_flipped(ins):
        view = _of(ins, "seal", "s1")["view"]
        text, sig = view["note"].split("\n\n")
        raw = base64.b64decode(sig.split(" ")[2])
        view["note"] = text + "\n\n\u2014 " + base.name + " " + base64.b64encode(raw[:-1] + bytes([raw[-1] ^ 1])).decode() + "\n"
    add(complete("seal-note-bad-signature", seal_note_flipped, rehash=dict(seals=False)))
    add(complete("seal-of-unknown-session", seal_edit(session_id="s9"), rehash=dict(seals=False)))
    def sealed_twice(ins):
        seal = copy.deepcopy(_of(ins, "seal", "s3"))
        seal["logged_at"] = ins.entries[-1]["logged_at"]
        ins.entries.append(seal)
    add(complete("sealed-twice", sealed_twice, renumber=True))
    def seal_empty_session(ins):
        start = _of(ins, "session-start", "s4")
        ins.entries = [e for e in ins.entries if not (e["type"] == "step" and e["fields"]["session_id"] == "s4")]
        seal = copy.deepcopy(_of(ins, "seal", "s3"))
        seal["view"].update(session_id="s4")
        seal["logged_at"] = ins.entries[-1]["logged_at"]
        ins.entries.append(seal)
        assert start
    add(complete("seal-of-empty-session", seal_empty_session, renumber=True))
    # Keys (7.3).
    add(complete("key-id-not-its-key", lambda ins: _find(ins, 0)["view"].update(key_id="agent-000000000000")))
    def registered_twice(ins):
        reg = copy.deepcopy(_find(ins, 0))
        reg["logged_at"] = ins.entries[-1]["logged_at"]
        ins.entries.append(reg)
    add(complete("key-registered-twice", registered_twice, renumber=True))
    def registered_other_agent(ins):
        reg = copy.deepcopy(_find(ins, 0))
        reg["view"]["agent_id"] = "analyst"
        reg["logged_at"] = ins.entries[-1]["logged_at"]
        ins.entries.append(reg)
    add(complete("key-registered-for-another-agent", registered_other_agent, renumber=True))
    add(complete("revocation-of-unknown-key", lambda ins: _of(ins, "key-revocation")["view"].update(key_id="agent-000000000000")))
    add(complete("revocation-by-another-agent", lambda ins: _of(ins, "key-revocation")["view"].update(agent_id="analyst")))
    def revoked_twice(ins):
        rev = copy.deepcopy(_of(ins, "key-revocation"))
        rev["logged_at"] = ins.entries[-1]["logged_at"]
        ins.entries.append(rev)
    add(complete("key-revoked-twice", revoked_twice, renumber=True))
    def revoked_before_registration(ins):
        rev = _of(ins, "key-revocation")
        ins.entries.remove(rev)
        rev["logged_at"] = ins.entries[0]["logged_at"]
        ins.entries.insert(0, rev)
    add(complete("revocation-before-registration", revoked_before_registration, renumber=True))
    # Signed steps (7.3).
    def unsign(ins):
        e = _of(ins, "step", "sg", 0)
        e["signature"] = None
        e["fields"]["signer_key_id"] = None
    add(complete("signature-and-signer-removed", unsign))
    add(complete("signature-removed", lambda ins: _of(ins, "step", "sg", 0).update(signature=None)))
    def signer_removed(ins):
        _of(ins, "step", "sg", 0)["fields"]["signer_key_id"] = None
    add(complete("signer-removed-signature-kept", signer_removed))
    add(complete("signed-after-revocation", lambda ins: _resign_step(_of(ins, "step", "sg", 3), SEED_A)))
    add(complete("signed-before-registration", lambda ins: _resign_step(_of(ins, "step", "sg", 0), SEED_B)))
    add(complete("signed-with-another-agents-key", lambda ins: _resign_step(_of(ins, "step", "sg", 0), SEED_C)))
    add(complete("signed-with-unregistered-key", lambda ins: _resign_step(_of(ins, "step", "sg", 2), other_seed)))
    add(complete("unsigned-step-signed-now", lambda ins: _resign_step(_of(ins, "step", "sg", 2), SEED_A)))
    def signature_noncanonical_s(ins):
        e = _of(ins, "step", "sg", 0)
        raw = base64.b64decode(e["signature"]["signature"])
        s = int.from_bytes(raw[32:], "little") + 2**252 + 27742317777372353535851937790883648493
        if s < 2**256:
            e["signature"]["signature"] = base64.b64encode(raw[:32] + s.to_bytes(32, "little")).decode()
    add(complete("signature-s-not-reduced", signature_noncanonical_s))
    def signature_key_mismatch(ins):
        e = _of(ins, "step", "sg", 0)
        e["signature"]["key_id"] = _key_id(ed25519.public_key(SEED_B))
    add(complete("signature-key-id-not-declared", signature_key_mismatch))
    # Signed traces (7.4).
    def trace_edit(fn):
        def edit(ins):
            fn(_of(ins, "signed-trace")["view"]["trace"])
        return edit
    add(complete("trace-component-changed", trace_edit(lambda t: t["components"][0]["data"].update(round_number=2))))
    add(complete("trace-level-changed", trace_edit(lambda t: t.update(trace_level="detailed"))))
    add(complete("trace-key-other-agent", trace_edit(lambda t: t.update(signature_key_id=_key_id(ed25519.public_key(SEED_A))))))
    add(complete("trace-key-unregistered", trace_edit(lambda t: t.update(signature_key_id="agent-000000000000"))))
    add(complete("trace-signature-missing", trace_edit(lambda t: t.pop("signature"))))
    add(complete("trace-signature-not-base64", trace_edit(lambda t: t.update(signature="not base64"))))
    add(complete("trace-signature-short", trace_edit(lambda t: t.update(signature=base64.b64encode(bytes(63)).decode()))))
    add(complete("trace-key-id-missing", trace_edit(lambda t: t.pop("signature_key_id"))))
    add(complete("trace-components-missing", trace_edit(lambda t: t.pop("components"))))
    add(complete("trace-agent-missing", trace_edit(lambda t: t.pop("agent_id_hash"))))
    add(complete("trace-extra-member-kept", trace_edit(lambda t: t.update(extra="kept"))))
    add(complete("trace-level-unknown", trace_edit(lambda t: t.update(trace_level="everything"))))
    for member in ("trace_id", "thought_id", "started_at", "completed_at", "trace_level"):
        add(complete(f"trace-{member}-missing", trace_edit(lambda t, member=member: t.pop(member))))
        add(complete(f"trace-{member}-number", trace_edit(lambda t, member=member: t.update({member: 5}))))
    add(complete("trace-components-object", trace_edit(lambda t: t.update(components={}))))
    add(complete("trace-components-empty", trace_edit(lambda t: t.update(components=[]))))
    for member in ("component_type", "event_type", "timestamp", "data"):
        add(complete(f"trace-component-{member}-missing", trace_edit(lambda t, member=member: t["components"][0].pop(member))))
        add(complete(f"trace-component-{member}-number", trace_edit(lambda t, member=member: t["components"][0].update({member: 5}))))
    add(complete("trace-component-extra-member", trace_edit(lambda t: t["components"][0].update(extra=1))))
    add(complete("trace-component-not-object", trace_edit(lambda t: t["components"].__setitem__(0, "x"))))
    add(complete("trace-key-id-number", trace_edit(lambda t: t.update(signature_key_id=5))))
    add(complete("trace-agent-number", trace_edit(lambda t: t.update(agent_id_hash=5))))
    def trace_sig_noncanonical(t):
        sig = t["signature"]
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        t["signature"] = sig[:-3] + alphabet[alphabet.index(sig[-3]) | 1] + "=="
    add(complete("trace-signature-noncanonical-base64", trace_edit(trace_sig_noncanonical)))
    add(complete("trace-signature-unpadded", trace_edit(lambda t: t.update(signature=t["signature"].rstrip("=")))))
    def trace_resigned_agent(ins):
        t = _of(ins, "signed-trace")["view"]["trace"]
        t["agent_id_hash"] = "signer"
    add(complete("trace-agent-changed", trace_resigned_agent))
    def trace_revoked(ins):
        rev = copy.deepcopy(_of(ins, "key-revocation"))
        reg = _of(ins, "key-registration", None)
        trace_key = [e for e in ins.entries if e["type"] == "key-registration" and e["view"]["agent_id"] == "e8821136df22"][0]
        rev["view"].update(agent_id="e8821136df22", key_id=trace_key["view"]["key_id"])
        at = ins.entries.index(trace_key) + 1
        rev["logged_at"] = trace_key["logged_at"]
        ins.entries.insert(at, rev)
        assert reg
    add(complete("trace-key-revoked-before", trace_revoked, renumber=True))
    # Erasure (8).
    add(complete("erasure-record-removed", lambda ins: ins.entries.remove(_of(ins, "erasure")), renumber=True))
    def erasure_commitment(ins):
        view = _of(ins, "erasure")["view"]
        view["commitments"]["content"] = "ab" * 32
    add(complete("erasure-commitment-wrong", erasure_commitment))
    def erasure_subset(ins):
        view = _of(ins, "erasure")["view"]
        view["commitments"].pop("metadata")
    add(complete("erasure-names-fewer-fields", erasure_subset))
    add(complete("erasure-trace-id-wrong", lambda ins: _of(ins, "erasure")["view"].update(trace_id="other-trace")))
    add(complete("erasure-of-future-step", lambda ins: _of(ins, "erasure")["view"].update(step_index=9)))
    add(complete("erasure-of-unknown-session", lambda ins: _of(ins, "erasure")["view"].update(session_id="s9")))
    add(complete("erasure-of-shown-step", lambda ins: _of(ins, "erasure")["view"].update(step_index=0)))
    def erasure_twice(ins):
        er = copy.deepcopy(_of(ins, "erasure"))
        er["logged_at"] = ins.entries[-1]["logged_at"]
        ins.entries.append(er)
    add(complete("erasure-twice", erasure_twice, renumber=True))
    def erasure_before_step(ins):
        er = _of(ins, "erasure")
        ins.entries.remove(er)
        step = _of(ins, "step", "s1", 0)
        er["logged_at"] = step["logged_at"]
        ins.entries.insert(ins.entries.index(step) + 1, er)
    add(complete("erasure-before-its-step", erasure_before_step, renumber=True))
    def hide_s4(ins):
        e = _of(ins, "step", "s4", 0)
        e["hidden"]["content"] = Insider.commitment(e, "content").hex()
        del e["fields"]["content"], e["salts"]["content"]
    add(complete("erased-without-record", hide_s4))
    def two_pending(ins):
        hide_s4(ins)
        ins.entries.remove(_of(ins, "erasure"))
    add(complete("two-erased-without-record", two_pending, renumber=True))
    def hide_s4_and_erase_late(ins):
        hide_s4(ins)
        e = _of(ins, "step", "s4", 0)
        er = copy.deepcopy(_of(ins, "erasure"))
        er["view"].update(session_id="s4", step_index=0, trace_id=e["fields"]["trace_id"],
                          commitments={"content": e["hidden"]["content"]})
        er["logged_at"] = ins.entries[-1]["logged_at"]
        ins.entries.append(er)
    add(complete("erased-and-recorded-later", hide_s4_and_erase_late, renumber=True))
    def hide_non_payload(ins):
        e = _of(ins, "step", "s4", 0)
        e["hidden"]["model"] = Insider.commitment(e, "model").hex()
        del e["fields"]["model"], e["salts"]["model"]
    add(complete("hidden-model-at-full", hide_non_payload))
    # Records of another org.
    add(complete("audit-event-of-another-org", lambda ins: _of(ins, "audit-event")["view"].update(org_id="other")))
    add(complete("review-of-another-org", lambda ins: _of(ins, "review")["view"].update(org_id="other")))
    # The log and its checkpoint (9.4, 10.2, 10.3).
    add(complete("dropped-and-renumbered", lambda ins: ins.entries.remove(_of(ins, "audit-event")), renumber=True))
    add(complete("checkpoint-older", lambda ins: None, size=30))
    def truncated(ins):
        return None
    ins = base.copy()
    add(("complete/checkpoint-newer-than-entries", ins.complete(checkpoint=ins.checkpoint(), entries=ins.entries[:-2]), keys, []))
    add(("complete/checkpoint-of-other-root", ins.complete(checkpoint=ins.checkpoint(root=b"\x01" * 32)), keys, []))
    add(("complete/empty-log", ins.complete(size=0, entries=[]), keys, []))
    add(("complete/empty-log-wrong-root", ins.complete(checkpoint=ins.checkpoint(size=0, root=b"\x01" * 32), entries=[]), keys, []))
    add(("complete/empty-log-with-entries", ins.complete(size=0), keys, []))
    text = f"{base.origin}\n{len(base.entries)}\n{base64.b64encode(_mth(base.leaves())).decode()}\n"
    for label, note_text in (("extension-line", text + "extra line\n"),
                             ("size-leading-zero", text.replace(f"\n{len(base.entries)}\n", f"\n0{len(base.entries)}\n")),
                             ("size-plus", text.replace(f"\n{len(base.entries)}\n", f"\n+{len(base.entries)}\n")),
                             ("root-unpadded", text.replace("=\n", "\n")),
                             ("two-lines", f"{base.origin}\n{len(base.entries)}\n"),
                             ("origin-only", f"{base.origin}\n")):
        add((f"complete/checkpoint-{label}", ins.complete(checkpoint=base.sign(note_text)), keys, []))
    noncanon = base64.b64encode(_mth(base.leaves())).decode()
    noncanon = noncanon[:-2] + "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[
        ("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".index(noncanon[-2]) | 1)] + "="
    add(("complete/checkpoint-root-noncanonical-base64",
         ins.complete(checkpoint=base.sign(text.replace(base64.b64encode(_mth(base.leaves())).decode(), noncanon))), keys, []))
    double = base.checkpoint()
    add(("complete/checkpoint-signed-twice", ins.complete(checkpoint=double + double.split("\n\n")[1]), keys, []))
    add(("complete/checkpoint-plus-stranger", ins.complete(checkpoint=base.checkpoint() + stranger.checkpoint().split("\n\n")[1]), keys, []))
    add(("complete/checkpoint-plus-stranger-pinned-both", ins.complete(checkpoint=base.checkpoint() + stranger.checkpoint().split("\n\n")[1]), keys + [stranger_vkey], []))
    add(("complete/checkpoint-by-stranger-pinned-both", ins.complete(checkpoint=stranger.checkpoint()), keys + [stranger_vkey], []))
    add(("complete/checkpoint-by-stranger", ins.complete(checkpoint=stranger.checkpoint()), keys, []))
    add(("complete/unpinned-stranger-header", ins.complete(checkpoint=stranger.checkpoint(), header={"server_key": stranger_vkey}), [], []))
    add(("complete/pinned-garbage-header-key", ins.complete(header={"server_key": "garbage"}), keys, []))
    add(("complete/unpinned-garbage-header-key", ins.complete(header={"server_key": "garbage"}), [], []))
    add(("complete/witness-cosignature-ignored", ins.complete(
        checkpoint=base.checkpoint() + "\u2014 witness.example " + base64.b64encode(bytes(76)).decode() + "\n"), keys, []))
    # Trusted checkpoints.
    m = ledger.trusted_size
    add(("complete/trusted-consistent", ins.complete(), keys, ledger.trusted))
    add(("complete/trusted-consistent-with-line", ins.complete(since=[m]), keys, ledger.trusted))
    add(("complete/trusted-equal", ins.complete(), keys, [base.checkpoint()]))
    add(("complete/trusted-equal-other-root", ins.complete(), keys, [base.checkpoint(root=b"\x02" * 32)]))
    add(("complete/trusted-newer", ins.complete(size=30), keys, [base.checkpoint()]))
    add(("complete/trusted-older-other-root", ins.complete(), keys, [base.checkpoint(size=10, root=b"\x02" * 32)]))
    add(("complete/trusted-older-other-root-with-line", ins.complete(since=[10]), keys, [base.checkpoint(size=10, root=b"\x02" * 32)]))
    add(("complete/trusted-other-origin", ins.complete(), keys, [base.checkpoint(size=10, origin="cairn.test/other")]))
    add(("complete/trusted-by-stranger", ins.complete(), keys, [stranger.checkpoint(size=10)]))
    add(("complete/trusted-not-a-note", ins.complete(), keys, ["not a note\n"]))
    add(("complete/trusted-not-a-checkpoint", ins.complete(), keys, [base.sign("hello\n")]))
    add(("complete/trusted-size-zero", ins.complete(), keys, [base.checkpoint(size=0)]))
    add(("complete/trusted-two", ins.complete(), keys, ledger.trusted + [base.checkpoint(size=5)]))
    add(("complete/trusted-two-second-bad", ins.complete(), keys, ledger.trusted + [base.checkpoint(size=5, root=b"\x03" * 32)]))
    add(("complete/trusted-two-newer-and-bad-sig", ins.complete(size=30), keys, [base.checkpoint(), stranger.checkpoint(size=5)]))
    rewritten = base.copy()
    rewritten.entries.remove(_of(rewritten, "review"))
    rewritten.renumber().rehash()
    add(("complete/rewrite-vs-trusted", rewritten.complete(), keys, ledger.trusted))
    add(("complete/rewrite-vs-trusted-line", rewritten.complete(since=[m]), keys, ledger.trusted))
    add(("complete/consistency-line-bad-proof-untrusted", ins.complete(since=[m]).replace(b'"proof":["', b'"proof":["00', 1)
         .replace(b'"proof":["00', b'"proof":["', 0), keys, []))
    add(("complete/consistency-lines-out-of-order", ins.complete(since=[20, 10]), keys, []))
    add(("complete/consistency-lines-same-size", ins.complete(since=[10, 10]), keys, []))
    add(("complete/consistency-line-size-n", ins.complete(since=[len(base.entries)]), keys, []))
    # Partial bundles (10.4).
    add(partial("unchanged", None, {"session": "s1"}, "full"))
    add(partial("trusted-consistent", None, {"session": "s2"}, "detailed", since=[m], trusted=ledger.trusted))
    add(partial("trusted-without-line", None, {"session": "s2"}, "detailed", trusted=ledger.trusted))
    add(partial("trusted-line-other-size", None, {"session": "s2"}, "detailed", since=[m - 1], trusted=ledger.trusted))
    add(partial("trusted-two-lines", None, {"session": "s2"}, "detailed", since=[5, m], trusted=ledger.trusted))
    add(partial("trusted-newer", None, {"session": "s2"}, "detailed", size=20, trusted=ledger.trusted))
    add(("partial/rewrite-vs-trusted-line", rewritten.partial({"session": "s2"}, "detailed", since=[m]), keys, ledger.trusted))
    add(("partial/rewrite-vs-trusted-no-line", rewritten.partial({"session": "s2"}, "detailed"), keys, ledger.trusted))
    add(partial("older-checkpoint", None, {"session": "s2"}, "full", size=12))
    add(partial("older-checkpoint-session-not-started", None, {"session": "s4"}, "full", size=12))

    def with_selection(change):
        def pre(ins, kw):
            n = len(ins.entries) if kw.get("size") is None else kw["size"]
            sel = ins.select({"session": "s2"}, "detailed", n)
            change(ins, sel)
            return {**kw, "selection": sel}
        return pre
    add(partial("selection-extra-session", None, {"session": "s2"}, "detailed", pre=with_selection(
        lambda ins, sel: (sel["sessions"].append({"session_id": "s4", "steps": 1, "head": _of(ins, "step", "s4", 0)["hash"]}),
                          sel["records"].append([_of(ins, "session-start", "s4")["seq"], "session-start"]),
                          sel["records"].sort()))))
    add(partial("selection-omits-seal-of-predecessor", None, {"session": "s2"}, "detailed", pre=with_selection(
        lambda ins, sel: sel.update(records=[r for r in sel["records"] if r[1] != "seal"]))))
    add(partial("selection-omits-session-start", None, {"session": "s2"}, "detailed", pre=with_selection(
        lambda ins, sel: sel.update(records=[r for r in sel["records"] if r[1] != "session-start"]))))
    add(partial("selection-claims-more-steps", None, {"session": "s2"}, "detailed", pre=with_selection(
        lambda ins, sel: sel["sessions"][0].update(steps=4))))
    add(partial("selection-claims-fewer-steps", None, {"session": "s2"}, "detailed", pre=with_selection(
        lambda ins, sel: sel["sessions"][0].update(steps=2))))
    add(partial("selection-claims-zero-steps", None, {"session": "s2"}, "detailed", pre=with_selection(
        lambda ins, sel: sel["sessions"][0].update(steps=0, head=_of(ins, "session-start", "s2")["view"]["genesis"]))))
    add(partial("selection-claims-other-head", None, {"session": "s2"}, "detailed", pre=with_selection(
        lambda ins, sel: sel["sessions"][0].update(head="ab" * 32))))
    add(partial("selection-lists-unknown-session", None, {"session": "s2"}, "detailed", pre=with_selection(
        lambda ins, sel: sel["sessions"].append({"session_id": "s9", "steps": 0, "head": "ab" * 32}))))
    add(partial("selection-lists-unknown-session-with-steps", None, {"session": "s2"}, "detailed", pre=with_selection(
        lambda ins, sel: sel["sessions"].append({"session_id": "s9", "steps": 2, "head": "ab" * 32}))))
    add(partial("selection-record-wrong-type", None, {"session": "s2"}, "detailed", pre=with_selection(
        lambda ins, sel: sel["records"].__setitem__(0, [sel["records"][0][0], "review"]))))
    add(partial("selection-lists-absent-record", None, {"session": "s2"}, "detailed", pre=with_selection(
        lambda ins, sel: (sel["records"].append([_of(ins, "audit-event")["seq"], "audit-event"]), sel["records"].sort()))))
    add(partial("selection-lists-absent-record-last", None, {"session": "s2"}, "detailed", pre=with_selection(
        lambda ins, sel: sel["records"].append([len(ins.entries) - 1, "audit-event"]))))
    add(partial("selection-level-full", None, {"session": "s2"}, "detailed", pre=with_selection(
        lambda ins, sel: sel.update(level="full"))))

    def hand_entries(select_change=None, entries_change=None, scope={"session": "s2"}, level="detailed"):
        def pre(ins, kw):
            n = len(ins.entries)
            sel = ins.select(scope, level, n)
            if select_change:
                select_change(ins, sel)
            leaves = ins.leaves()
            chosen = []
            listed = {r[0] for r in sel["records"]}
            claimed = {s["session_id"]: s["steps"] for s in sel["sessions"]}
            for e in ins.entries:
                if e["seq"] in listed or (e["type"] == "step" and claimed.get(e["fields"]["session_id"], 0) > e["fields"]["step_index"]):
                    shown = ins.shown(e, level)
                    shown["proof"] = [p.hex() for p in _audit_path(e["seq"], leaves)]
                    chosen.append(shown)
            if entries_change:
                entries_change(ins, chosen, leaves)
            return {**kw, "selection": sel, "entries": chosen}
        return pre

    def add_entry(seq, level="detailed"):
        def change(ins, chosen, leaves):
            e = ins.shown(_find(ins, seq), level)
            e["proof"] = [p.hex() for p in _audit_path(seq, leaves)]
            chosen.append(e)
            chosen.sort(key=lambda x: x["seq"])
        return change
    add(partial("unlisted-record-included", None, {"session": "s2"}, "detailed",
                pre=hand_entries(entries_change=add_entry(_of(base, "audit-event")["seq"]))))
    add(partial("unlisted-step-included", None, {"session": "s2"}, "detailed",
                pre=hand_entries(entries_change=add_entry(_of(base, "step", "s4", 0)["seq"]))))
    def first_step_at_full(ins, chosen, leaves):
        i = next(i for i, e in enumerate(chosen) if e["type"] == "step")
        chosen[i] = {**_find(ins, chosen[i]["seq"]), "proof": chosen[i]["proof"]}
    add(partial("step-at-full-in-detailed", None, {"session": "s2"}, "detailed",
                pre=hand_entries(entries_change=first_step_at_full)))
    def first_step_at_generic(ins, chosen, leaves):
        i = next(i for i, e in enumerate(chosen) if e["type"] == "step")
        chosen[i] = {**ins.shown(_find(ins, chosen[i]["seq"]), "generic"), "proof": chosen[i]["proof"]}
    add(partial("step-at-generic-in-detailed", None, {"session": "s2"}, "detailed",
                pre=hand_entries(entries_change=first_step_at_generic)))
    def first_step_content_shown(ins, chosen, leaves):
        i = next(i for i, e in enumerate(chosen) if e["type"] == "step")
        full = _find(ins, chosen[i]["seq"])
        chosen[i]["fields"]["content"] = full["fields"]["content"]
        chosen[i]["salts"]["content"] = full["salts"]["content"]
        del chosen[i]["hidden"]["content"]
    add(partial("step-content-shown-in-detailed", None, {"session": "s2"}, "detailed",
                pre=hand_entries(entries_change=first_step_content_shown)))
    add(partial("entries-out-of-order", None, {"session": "s2"}, "detailed",
                pre=hand_entries(entries_change=lambda ins, chosen, leaves: chosen.reverse())))
    add(partial("entry-without-proof", None, {"session": "s2"}, "detailed",
                pre=hand_entries(entries_change=lambda ins, chosen, leaves: chosen[2].pop("proof"))))
    add(partial("entry-beyond-checkpoint", None, {"session": "s2"}, "detailed", size=33,
                pre=hand_entries(entries_change=add_entry(35))))
    def scope_mismatch(ins, sel):
        sel["scope"] = {"agent": "planner"}
    add(partial("scope-does-not-select-session", None, {"session": "s2"}, "detailed", pre=hand_entries(select_change=scope_mismatch)))
    starts = sorted(e["view"]["started_at"] for e in base.entries if e["type"] == "session-start")
    add(partial("range-until-equals-start", None, {"since": starts[0], "until": starts[1]}, "full",
                pre=hand_entries(select_change=lambda ins, sel: sel.update(scope={"since": starts[0], "until": starts[0]}),
                                 scope={"since": starts[0], "until": starts[1]}, level="full")))
    add(partial("range-since-equals-start", None, {"since": starts[1], "until": starts[2]}, "full"))
    add(partial("agent-scope", None, {"agent": "signer"}, "generic"))
    add(partial("agent-scope-empty", None, {"agent": "nobody"}, "generic"))
    add(partial("predecessor-seal-forged-consistently", lambda ins: _of(ins, "seal", "s1")["view"].update(
        sealed_at="2020-01-01T00:00:00.000000Z"), {"session": "s2"}, "detailed"))
    add(partial("predecessor-seal-counts-more", seal_edit(step_count=99), {"session": "s2"}, "detailed",
                rehash=dict(seals=False)))
    add(partial("predecessor-seal-note-other-key", seal_note_stranger, {"session": "s2"}, "detailed",
                rehash=dict(seals=False)))
    add(partial("predecessor-seal-note-states-other", seal_note_other("sealed_at", "2020-01-01T00:00:00.000000Z"),
                {"session": "s2"}, "detailed", rehash=dict(seals=False)))

    def selection_note(text_change):
        def pre(ins, kw):
            n = len(ins.entries)
            sel = ins.select({"session": "s2"}, "detailed", n)
            root = _mth(ins.leaves())
            text = (f"cairn-selection/v2\n{ins.origin}\n{n}\n{base64.b64encode(root).decode()}\n"
                    f"{base64.b64encode(V._h('cairn/v2/selection', canonical(sel))).decode()}\n")
            return {**kw, "selection": sel, "note": ins.sign(text_change(text))}
        return pre
    for label, change in (("kind-v1", lambda t: t.replace("cairn-selection/v2", "cairn-selection/v1")),
                          ("other-origin", lambda t: t.replace("cairn.test/acme", "cairn.test/other")),
                          ("other-size", lambda t: t.replace(f"\n{len(base.entries)}\n", f"\n{len(base.entries) - 1}\n")),
                          ("other-root", lambda t: t.replace(t.split("\n")[3], base64.b64encode(b"\x01" * 32).decode())),
                          ("other-hash", lambda t: t.replace(t.split("\n")[4], base64.b64encode(b"\x01" * 32).decode())),
                          ("four-lines", lambda t: "\n".join(t.split("\n")[:4]) + "\n"),
                          ("six-lines", lambda t: t + "extra\n"),
                          ("hash-not-base64", lambda t: t.replace(t.split("\n")[4], "!!")),
                          ("size-not-decimal", lambda t: t.replace(f"\n{len(base.entries)}\n", "\nx\n"))):
        add(partial(f"selection-note-{label}", None, {"session": "s2"}, "detailed", pre=selection_note(change)))
    def selection_size(ins, kw):
        n = len(ins.entries)
        sel = ins.select({"session": "s2"}, "detailed", n)
        sel["checkpoint_size"] = n - 1
        return {**kw, "selection": sel}
    add(partial("selection-of-other-size-signed", None, {"session": "s2"}, "detailed", pre=selection_size))
    def selection_stranger(ins, kw):
        n = len(ins.entries)
        sel = ins.select({"session": "s2"}, "detailed", n)
        root = _mth(ins.leaves())
        text = (f"cairn-selection/v2\n{ins.origin}\n{n}\n{base64.b64encode(root).decode()}\n"
                f"{base64.b64encode(V._h('cairn/v2/selection', canonical(sel))).decode()}\n")
        return {**kw, "selection": sel, "note": stranger.sign(text)}
    add(partial("selection-signed-by-stranger", None, {"session": "s2"}, "detailed", pre=selection_stranger))
    # Erasure in partial bundles.
    add(partial("s1-detailed-erasure-removed", lambda ins: ins.entries.remove(_of(ins, "erasure")), {"session": "s1"}, "detailed", renumber=True))
    add(partial("s1-full-erasure-removed", lambda ins: ins.entries.remove(_of(ins, "erasure")), {"session": "s1"}, "full", renumber=True))
    add(partial("s1-full-erasure-commitment-wrong", erasure_commitment, {"session": "s1"}, "full"))
    add(partial("s1-generic-erasure-commitment-wrong", erasure_commitment, {"session": "s1"}, "generic"))
    add(partial("s1-generic-erasure-of-future-step", lambda ins: _of(ins, "erasure")["view"].update(step_index=9), {"session": "s1"}, "generic"))
    add(partial("s1-generic-erasure-of-shown-step", lambda ins: _of(ins, "erasure")["view"].update(step_index=0), {"session": "s1"}, "generic"))
    add(partial("s1-detailed-erasure-trace-wrong", lambda ins: _of(ins, "erasure")["view"].update(trace_id="zz"), {"session": "s1"}, "detailed"))
    add(partial("sg-generic-signed-after-revocation", lambda ins: _resign_step(_of(ins, "step", "sg", 3), SEED_A), {"session": "sg"}, "generic"))
    add(partial("trace-generic-component-changed", trace_edit(lambda t: t["components"][0]["data"].update(round_number=2)),
                {"session": "trace-agreement-1"}, "generic"))
    return cases


def test_insider_tamperings(ledger, tmp_path):
    _check(_compare_all(ledger, insider_cases(ledger), tmp_path), "insider")


# -- rules the TypeScript verifier found Python reading differently ---------------------


def _not_a_point() -> bytes:
    """32 bytes that are no point of the curve."""
    for y in range(2, 1000):
        raw = y.to_bytes(32, "little")
        if not ed25519.is_curve_point(raw):
            return raw
    raise AssertionError("no non-point found")


def agreement_fix_cases(ledger):
    """Each rule the Python verifier read differently from the Rust one
    (found by the TypeScript verifier running beside both), with the reason
    the Rust verifier gives; the test requires both verifiers to agree."""
    base = Insider(ledger.bundles["complete"], ledger.server_seed())
    keys = [ledger.vkey_text]
    cases = []

    def complete(name, expected, edit=None, after=None, keys=keys, **kw):
        ins = base.copy()
        if edit is not None:
            edit(ins)
        ins.rehash()
        if after is not None:
            after(ins)
        cases.append((name, ins.complete(**kw), list(keys), [], expected))

    def resign_trace(t):
        payload = canonical({"components": t["components"], "trace_level": t["trace_level"]})
        t["signature"] = base64.b64encode(ed25519.sign(SEED_C, payload)).decode()

    def trace(fn, resign=False):
        def edit(ins):
            t = _of(ins, "signed-trace")["view"]["trace"]
            fn(t)
            if resign:
                resign_trace(t)
        return edit

    # (a) 10.1: the genesis is checked before a complete bundle's `proof` is refused.
    def wrong_genesis_with_proof(ins):
        e = _of(ins, "session-start", "s2")
        e["view"]["genesis"] = "00" * 32
        e["proof"] = []
    complete("complete-wrong-genesis-and-proof", "digest-mismatch", after=wrong_genesis_with_proof)
    complete("complete-proof-member", "malformed-record", after=lambda ins: _of(ins, "session-start", "s2").update(proof=[]))
    # (b) A registered agent key that is no curve point is malformed when read.
    def key_not_point(ins):
        view = _of(ins, "key-registration")["view"]
        raw = _not_a_point()
        view["public_key"] = base64.b64encode(raw).decode()
        view["key_id"] = _key_id(raw)
    complete("agent-key-not-a-point", "malformed-record", key_not_point)
    # (c) Years 0000 to 9999 (2.3); year 0 is a leap year.
    complete("audit-event-at-year-0000", None, lambda ins: _of(ins, "audit-event")["view"].update(
        at="0000-02-29T00:00:00.000000Z"))
    complete("audit-event-at-0000-02-30", "malformed-record", lambda ins: _of(ins, "audit-event")["view"].update(
        at="0000-02-30T00:00:00.000000Z"))
    complete("audit-event-at-9999-12-31", None, lambda ins: _of(ins, "audit-event")["view"].update(
        at="9999-12-31T23:59:59.999999Z"))
    complete("step-created-at-year-0000", "bad-timestamp", lambda ins: _of(ins, "step", "s4", 0)["fields"].update(
        created_at="0000-01-01T00:00:00.000000Z"))
    # (d) At most 100 distinct signature lines on a note (FORMAT 7.1): an
    # exact repeat counts once, wherever it comes.
    def many_signatures(others, repeats=0):
        note = base.copy().rehash().checkpoint()
        text, block = note[: note.rfind("\n\n") + 2], note[note.rfind("\n\n") + 2:]
        lines = [f"\u2014 witness{i} {base64.b64encode(bytes([i]) * 68).decode()}\n" for i in range(others)]
        return text + block + "".join(lines) + lines[-1] * repeats
    complete("checkpoint-100-signatures", None, checkpoint=many_signatures(99))
    complete("checkpoint-100-signatures-and-repeats-below", None, checkpoint=many_signatures(98, repeats=5))
    complete("checkpoint-100-signatures-and-a-repeat", None, checkpoint=many_signatures(99, repeats=1))
    complete("checkpoint-101-signatures", "malformed-record", checkpoint=many_signatures(100))
    # (d) Signed traces (7.4): levels, identifiers, RFC 3339 times, event types that name a kind.
    complete("trace-level-full", None, trace(lambda t: t.update(trace_level="full"), resign=True))
    complete("trace-level-full-traces", None, trace(lambda t: t.update(trace_level="full_traces"), resign=True))
    complete("trace-id-not-an-identifier", "malformed-record", trace(lambda t: t.update(trace_id="not an id")))
    complete("trace-agent-not-an-identifier", "malformed-record", trace(lambda t: t.update(agent_id_hash="a/b")))
    complete("trace-thought-id-null", None, trace(lambda t: t.update(thought_id=None)))
    complete("trace-thought-id-not-an-identifier", "malformed-record", trace(lambda t: t.update(thought_id="x y")))
    complete("trace-started-at-offset", None, trace(lambda t: t.update(started_at="2026-02-08T14:34:56.123+02:00")))
    complete("trace-started-at-nanoseconds", None, trace(lambda t: t.update(started_at="2026-02-08t12:34:56.123456789z")))
    complete("trace-started-at-not-rfc3339", "malformed-record", trace(lambda t: t.update(started_at="2026-02-08 12:34")))
    complete("trace-started-at-before-year-0", "malformed-record", trace(lambda t: t.update(
        started_at="0000-01-01T00:30:00+01:00")))
    complete("trace-completed-at-bad-offset", "malformed-record", trace(lambda t: t.update(
        completed_at="2026-02-08T12:34:58Z+24:00")))
    complete("trace-component-time-not-rfc3339", "malformed-record", trace(
        lambda t: t["components"][1].update(timestamp="yesterday"), resign=True))
    complete("trace-event-type-not-a-kind", "malformed-record", trace(
        lambda t: t["components"][1].update(event_type="LUNCH_BREAK"), resign=True))
    complete("trace-event-type-bracketed-japanese", None, trace(
        lambda t: t["components"][1].update(event_type=" [思考]\u3000"), resign=True))
    complete("trace-event-type-kind-spelling", None, trace(
        lambda t: t["components"][1].update(event_type="Tool-Call"), resign=True))
    # (d) A selection's records lie below its own checkpoint_size (10.4).
    def selection_smaller(ins, kw):
        n = len(ins.entries)
        sel = ins.select({"session": "s2"}, "detailed", n)
        sel["checkpoint_size"] = sel["records"][-1][0]
        return {**kw, "selection": sel}
    ins = base.copy().rehash()
    cases.append(("partial-selection-record-beyond-its-size",
                  ins.partial({"session": "s2"}, "detailed", **selection_smaller(ins, {})), keys, [], "malformed-record"))
    # (d) The header's server key is a curve point (read when no key is pinned).
    def header_key_not_point(ins):
        raw = b"\x01" + _not_a_point()
        key_id = V._sha256(ins.name.encode() + b"\n" + raw)[:4].hex()
        ins.header["server_key"] = f"{ins.name}+{key_id}+{base64.b64encode(raw).decode()}"
    complete("header-server-key-not-a-point", "malformed-record", header_key_not_point, keys=[])
    return cases


def test_verifier_agreement_fixes(ledger, tmp_path):
    cases = agreement_fix_cases(ledger)
    results = _compare_all(ledger, [case[:4] for case in cases], tmp_path)
    report = _report(results)
    assert not report, report
    for (name, _, _, _, expected), (_, rust, python, _) in zip(cases, results):
        assert rust["reason"] == expected, (name, rust)
        assert python["reason"] == expected, (name, python)
