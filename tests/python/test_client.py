"""The Python client (clients/python) against a real `cairn serve`: seed 000's
usage example as written there, seed 004's signed trace imported and
replayed at each level, a generic-level export verified offline by both the
CLI and the pure-Python verifier, and analyst SQL that tries to write or to
read another org refused."""
import base64
import copy
import hashlib
import json
import os
import subprocess

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

import cairn_client.ed25519
from cairn_client import CairnError, verify_bundle
from cairn_client.jcs import canonical


def test_seed_000_usage_example(server):
    url, key = server
    # --- seed 000's usage example; only these two statements are adapted ---
    from cairn_client import CairnClient as HatiDataAgent

    agent = HatiDataAgent(url, agent_id="analyst", api_key=key)
    # ---

    # Start a reasoning session
    session_id = "revenue-analysis-q4"

    # Log each step as the agent reasons
    agent.log_reasoning_step(
        session_id=session_id,
        step_type="Observation",
        content="User asked for Q4 revenue breakdown by segment",
    )

    agent.log_reasoning_step(
        session_id=session_id,
        step_type="ToolCall",
        content="Querying orders table",
        input_data={"sql": "SELECT segment, SUM(revenue) FROM orders WHERE quarter='Q4' GROUP BY 1"},
    )

    agent.log_reasoning_step(
        session_id=session_id,
        step_type="Reasoning",
        content="Enterprise grew 23% QoQ while SMB declined 5%. The growth is concentrated in 3 accounts.",
        confidence=0.88,
    )

    agent.log_reasoning_step(
        session_id=session_id,
        step_type="FinalAnswer",
        content="Q4 revenue was $7.49M, up 15% QoQ. Enterprise drove the growth at +23%.",
        confidence=0.95,
    )

    # Later: replay and verify
    trace = agent.replay_decision(session_id, verify_chain=True)
    assert trace["chain_valid"] is True

    # The seed's field names, and the rest of the client.
    assert trace["step_count"] == 4
    steps = trace["steps"]
    assert [s["step_type"] for s in steps] == ["Observation", "ToolCall", "Reasoning", "FinalAnswer"]
    assert steps[3]["prev_hash"] == steps[2]["current_hash"]
    history = agent.get_session_history("analyst", limit=20)
    assert history[0]["session_id"] == session_id and history[0]["chain_valid"] is True
    assert agent.list_traces("analyst")[0]["step_count"] == 4
    assert agent.get_trace(steps[0]["trace_id"])["content"].startswith("User asked")
    checkpoint = agent.checkpoint()
    assert checkpoint.count("\n") >= 4
    proof = agent.inclusion_proof(steps[1]["seq"])
    assert proof["root"] and proof["proof"]
    assert agent.verify()["verified"] is True
    with pytest.raises(CairnError) as refused:
        agent.log_reasoning_step(session_id=session_id, step_type="Informational")
    assert refused.value.status == 400 and refused.value.code == "unknown_step_type"
    with pytest.raises(CairnError) as missing:
        agent.replay_decision("no-such-session")
    assert missing.value.code == "not_found"


def cli_verify(cairn_bin, tmp_path, bundle_text, key=None):
    path = tmp_path / "bundle.jsonl"
    path.write_text(bundle_text)
    args = [cairn_bin, "verify", "--bundle", str(path), "--json"]
    if key:
        args += ["--key", key]
    run = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path)
    return run.returncode, json.loads(run.stdout)


def server_vkey(cairn_bin, data_dir):
    run = subprocess.run([cairn_bin, "keys"], capture_output=True, text=True,
                         env={**os.environ, "CAIRN_DATA_DIR": str(data_dir), "CAIRN_ORG": "acme"})
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_offline_verification_in_pure_python(server, cairn_bin, data_dir, tmp_path, monkeypatch):
    url, key = server
    from cairn_client import CairnClient
    agent = CairnClient(url, api_key=key, agent_id="analyst")
    for i, kind in enumerate(["Observation", "Decision", "FinalAnswer"]):
        agent.log_reasoning_step(session_id="pricing", step_type=kind, content=f"pricing step {i}",
                                 confidence=0.5 + i / 10, metadata={"n": i})
    agent.seal_session("pricing")
    vkey = server_vkey(cairn_bin, data_dir)
    monkeypatch.setattr(cairn_client.ed25519, "verify", cairn_client.ed25519._verify_pure)
    for level in ["generic", "detailed", None]:
        bundle = agent.export(session="pricing", level=level)
        verdict = verify_bundle(bundle, keys=[vkey])
        assert verdict.verified, (level, verdict.failure)
        assert verdict.key_pinned and verdict.records_checked >= 5
        code, cli = cli_verify(cairn_bin, tmp_path, bundle, vkey)
        assert code == 0 and cli["verified"] is True and cli["totalChecked"] == verdict.records_checked
        if level == "generic":
            assert "pricing step" not in bundle
    whole = agent.export(all=True)
    assert verify_bundle(whole, keys=[vkey]).verified
    # Line separators inside a record's text are not line ends (only "\n"
    # ends a bundle line, as for the Rust verifier).
    agent.log_reasoning_step(session_id="separators", step_type="Observation", content="a\u2028b\x85c\u2029d\x1ce")
    odd = agent.export(session="separators")
    assert verify_bundle(odd, keys=[vkey]).verified
    assert verify_bundle(odd.encode(), keys=[vkey]).verified
    # A byte that is not UTF-8 is a change, found at its line.
    raw = odd.encode()
    at = raw.index("a\u2028b".encode())
    broken = verify_bundle(raw[:at] + b"\xff" + raw[at + 1:], keys=[vkey])
    assert broken.failure.reason == "malformed-record"
    assert broken.failure.line == odd[:odd.index("a\u2028b")].count("\n") + 1

    # One changed byte: both verifiers stop at the same record, same reason.
    bundle = agent.export(session="pricing")
    tampered = bundle.replace("pricing step 1", "pricing step 7", 1)
    verdict = verify_bundle(tampered)
    code, cli = cli_verify(cairn_bin, tmp_path, tampered)
    assert not verdict.verified and code == 1
    assert verdict.failure.reason == cli["brokenReason"] == "digest-mismatch"
    assert verdict.failure.line == cli["brokenAt"]["line"]
    assert verdict.failure.step_index == 1
    # Another key than the operator's: the checkpoint is refused.
    other = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    name = "cairn.local"
    key_id = hashlib.sha256(name.encode() + b"\n\x01" + other).digest()[:4].hex()
    blob = base64.b64encode(b"\x01" + other).decode()
    stranger = f"{name}+{key_id}+{blob}"
    assert verify_bundle(bundle, keys=[stranger]).failure.reason == "bad-signature"
    truncated = "\n".join(bundle.splitlines()[:-2]) + "\n"
    assert verify_bundle(truncated).failure.reason == "missing-record"


SEED_004_TRACE = {
    "trace_id": "trace-th_seed_08b4901c_3cacdfa6-739-20260130024435",
    "thought_id": "th_seed_08b4901c_3cacdfa6",
    "agent_id_hash": "e8821136df22",
    "started_at": "2026-02-08T12:34:56.123Z",
    "completed_at": "2026-02-08T12:34:58.456Z",
    "trace_level": "generic",
    "components": [
        {"component_type": "observation", "event_type": "THOUGHT_START", "timestamp": "2026-02-08T12:34:56.123Z",
         "data": {"round_number": 1, "thought_depth": 0, "task_priority": 5}},
        {"component_type": "rationale", "event_type": "DMA_RESULTS", "timestamp": "2026-02-08T12:34:57.234Z",
         "data": {"csdma": {"plausibility_score": 0.85}, "dsdma": {"domain_alignment": 0.80},
                  "pdma": {"has_conflicts": False}, "idma": {"k_eff": 1.0, "phase": "healthy"}}},
        {"component_type": "conscience", "event_type": "CONSCIENCE_RESULT", "timestamp": "2026-02-08T12:34:57.890Z",
         "data": {"conscience_passed": True, "entropy_level": 0.12, "coherence_level": 0.95}},
        {"component_type": "action", "event_type": "ACTION_RESULT", "timestamp": "2026-02-08T12:34:58.456Z",
         "data": {"execution_success": True, "tokens_total": 1847, "cost_cents": 0.02}},
    ],
    "signature": "base64-ed25519-signature...",
    "signature_key_id": "agent-e8821136df22",
}


def signed(trace, private, key_id, trace_id=None, level=None):
    trace = copy.deepcopy(trace)
    trace["signature_key_id"] = key_id  # a fresh key has its own id
    if trace_id:
        trace["trace_id"] = trace_id
    if level:
        trace["trace_level"] = level
    payload = canonical({"components": trace["components"], "trace_level": trace["trace_level"]})
    trace["signature"] = base64.b64encode(private.sign(payload)).decode()
    return trace


def test_seed_004_signed_trace(server, cairn_bin, data_dir, tmp_path):
    url, key = server
    from cairn_client import CairnClient
    client = CairnClient(url, api_key=key)
    private = Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    key_id = client.register_agent_key(base64.b64encode(public).decode(), agent_id="e8821136df22")["key_id"]
    assert key_id.startswith("agent-") and len(key_id) == 18

    trace = signed(SEED_004_TRACE, private, key_id)
    imported = client.import_trace(trace)
    session = imported["session_id"]
    assert session == trace["trace_id"] and len(imported["steps"]) == 4
    # Imported again (a retry after a lost answer): answered as recorded,
    # its members in any order; nothing recorded twice.
    assert client.import_trace(dict(reversed(list(trace.items())))) == imported
    assert len(client.replay_decision(session)["steps"]) == 4
    # Another trace under the id, or the trace into another session: refused.
    other = signed(SEED_004_TRACE, private, key_id, level="full_traces")
    with pytest.raises(CairnError) as taken:
        client.import_trace(other)
    assert (taken.value.status, taken.value.code) == (409, "session_exists")
    with pytest.raises(CairnError) as elsewhere:
        client.import_trace(trace, session_id="another-session")
    assert (elsewhere.value.status, elsewhere.value.code) == (409, "duplicate_id")

    # Replayed at each level: generic shows kinds, numbers, hashes and the
    # ids that place a record (its agent too, whose key history a verifier
    # checks); detailed adds the other identifiers.
    generic = client.replay_decision(session, verify_chain=True, level="generic")
    assert generic["chain_valid"] is True
    assert [s["step_type"] for s in generic["steps"]] == ["THOUGHT_START", "DMA_RESULTS", "CONSCIENCE_RESULT", "ACTION_RESULT"]
    assert generic["steps"][3]["token_count"] == 1847
    assert "output_data" not in generic["steps"][0] and generic["steps"][0]["agent_id"] == "e8821136df22"
    assert "trace_id" in generic["steps"][0]["hidden_fields"] and "agent_id" not in generic["steps"][0]["hidden_fields"]
    detailed = client.replay_decision(session, level="detailed")
    assert detailed["steps"][0]["agent_id"] == "e8821136df22" and "output_data" not in detailed["steps"][0]
    with pytest.raises(CairnError) as no_consent:
        client.replay_decision(session, level="full")
    assert (no_consent.value.status, no_consent.value.code) == (403, "consent_required")
    everything = client.replay_decision(session)
    assert everything["steps"][1]["output_data"]["csdma"]["plausibility_score"] == 0.85

    # A full-level trace carries its subject's consent.
    full = signed(SEED_004_TRACE, private, key_id, trace_id="trace-full-1", level="full_traces")
    client.import_trace(full)
    assert client.replay_decision("trace-full-1", level="full")["steps"][3]["output_data"]["tokens_total"] == 1847

    # One changed byte: refused, nothing recorded.
    forged = signed(SEED_004_TRACE, private, key_id, trace_id="trace-forged")
    forged["components"][3]["data"]["tokens_total"] = 1848
    with pytest.raises(CairnError) as bad:
        client.import_trace(forged)
    assert (bad.value.status, bad.value.code) == (400, "bad_signature")
    with pytest.raises(CairnError):
        client.replay_decision("trace-forged")

    # A generic-level export verifies offline, with the CLI and in Python,
    # the original signed trace (and its signature) included.
    bundle = client.export(session=session, level="generic")
    assert '"type":"signed-trace"' in bundle
    vkey = server_vkey(cairn_bin, data_dir)
    verdict = verify_bundle(bundle, keys=[vkey])
    assert verdict.verified, verdict.failure
    code, cli = cli_verify(cairn_bin, tmp_path, bundle, vkey)
    assert code == 0 and cli["verified"] is True
    # A forged signed trace in the bundle is caught offline too.
    lines = bundle.splitlines()
    for i, line in enumerate(lines):
        if '"type":"signed-trace"' in line:
            lines[i] = line.replace('"tokens_total":1847', '"tokens_total":1848')
    assert verify_bundle("\n".join(lines) + "\n", keys=[vkey]).failure.reason == "digest-mismatch"


def test_analyst_sql(server, cairn_bin, data_dir):
    url, key = server
    from cairn_client import CairnClient
    acme = CairnClient(url, api_key=key, agent_id="analyst")
    for kind in ["Decision", "Decision", "FinalAnswer"]:
        acme.log_reasoning_step(session_id="s1", step_type=kind, content=f"acme {kind}")
    made = subprocess.run([cairn_bin, "--org", "globex", "admin", "create-key", "--role", "admin"],
                          capture_output=True, text=True, env={**os.environ, "CAIRN_DATA_DIR": str(data_dir)})
    assert made.returncode == 0, made.stderr
    globex = CairnClient(url, api_key=made.stdout.strip(), agent_id="rival")
    globex.log_reasoning_step(session_id="s1", step_type="Decision", content="globex secret")

    result = acme.sql("SELECT step_type, count(*) AS n FROM steps GROUP BY step_type ORDER BY step_type")
    assert result["columns"] == ["step_type", "n"]
    assert result["rows"] == [["Decision", 2], ["FinalAnswer", 1]]
    assert globex.sql("SELECT content FROM steps")["rows"] == [["globex secret"]]
    assert acme.sql("SELECT count(*) FROM steps WHERE content LIKE '%globex%'")["rows"] == [[0]]
    for statement in [
        "DELETE FROM entries",
        "UPDATE steps SET content = 'x'",
        "INSERT INTO steps (content) VALUES ('x')",
        "DROP TABLE entries",
        "SELECT * FROM entries",
        "SELECT * FROM api_keys",
        "SELECT * FROM steps; DELETE FROM entries",
        "ATTACH DATABASE 'x' AS y",
        "SELECT load_extension('evil')",
    ]:
        with pytest.raises(CairnError) as refused:
            acme.sql(statement)
        assert (refused.value.status, refused.value.code) == (400, "sql_refused"), statement
    # Another org's data cannot be reached by naming it either.
    with pytest.raises(CairnError):
        acme.sql("SELECT * FROM (WITH entries AS (SELECT 1 AS x) SELECT x FROM entries) t, entries")
    assert acme.verify()["verified"] is True
