"""The Python client's whole surface (clients/python): every REST operation
of the server's OpenAPI document through CairnClient and AsyncCairnClient
against a real `cairn serve`, the error shape (code, field), the retry rule
against a stub server that answers 503/429 with Retry-After, and the agent
loop example of clients/python/examples."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import http.server
import importlib.util
import json
import pathlib
import threading
import time

import pytest

from cairn_client import AsyncCairnClient, CairnClient, CairnError, ed25519, verify_bundle
from cairn_client.jcs import canonical
from test_client import server_vkey

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: Every operation of openapi.json -> the client method that sends it.
OPERATIONS = {
    ("get", "/healthz"): "health",
    ("get", "/metrics"): "metrics",
    ("get", "/openapi.json"): "openapi",
    ("get", "/.well-known/oauth-protected-resource"): "protected_resource",
    ("get", "/.well-known/oauth-protected-resource/mcp"): "protected_resource",
    ("post", "/v1/sessions"): "start_session",
    ("get", "/v1/sessions"): "get_session_history",
    ("get", "/v1/sessions/{session_id}"): "replay_decision",
    ("get", "/v1/sessions/{session_id}/verify"): "verify_session",
    ("post", "/v1/sessions/{session_id}/seal"): "seal_session",
    ("get", "/v1/sessions/{session_id}/root"): "session_root",
    ("post", "/v1/steps"): "log_reasoning_step",
    ("post", "/v1/steps/batch"): "log_steps",
    ("get", "/v1/steps/{trace_id}"): "get_trace",
    ("get", "/v1/verify"): "verify",
    ("get", "/v1/checkpoint"): "checkpoint",
    ("get", "/v1/tlog/checkpoint"): "tlog_checkpoint",
    ("get", "/v1/proofs/inclusion"): "inclusion_proof",
    ("get", "/v1/proofs/consistency"): "consistency_proof",
    ("get", "/v1/receipts/inclusion"): "inclusion_receipt",
    ("get", "/v1/receipts/consistency"): "consistency_receipt",
    ("get", "/v1/export"): "export",
    ("post", "/v1/bundles/verify"): "verify_bundle_on_server",
    ("post", "/v1/agent-keys"): "register_agent_key",
    ("get", "/v1/agent-keys"): "list_agent_keys",
    ("post", "/v1/keys"): "create_key",
    ("get", "/v1/keys"): "list_keys",
    ("delete", "/v1/keys/{key_id}"): "revoke_key",
    ("post", "/v1/steps/{trace_id}/erase"): "erase_step",
    ("get", "/v1/search"): "search",
    ("post", "/v1/steps/{trace_id}/review"): "review_step",
    ("get", "/v1/reviews"): "list_reviews",
    ("post", "/v1/audit-events"): "record_audit_event",
    ("get", "/v1/audit-events/{event_id}"): "get_audit_event",
    ("post", "/v1/thinking/parse"): "parse_thinking",
    ("post", "/v1/sessions/{session_id}/turns"): "record_turn",
    ("get", "/v1/sessions/{session_id}/turns/{turn_id}"): "get_turn",
    ("get", "/v1/sessions/{session_id}/trail"): "get_trail",
    ("post", "/v1/signed-traces"): "import_trace",
    ("get", "/v1/signed-traces/{trace_id}"): "get_signed_trace",
    ("post", "/v1/traces"): "otlp",
    ("post", "/v1/metrics"): "otlp",
    ("post", "/v1/logs"): "otlp",
    ("post", "/v1/sql"): "sql",
    ("post", "/v1/agent-keys/{key_id}/revoke"): "revoke_agent_key",
    ("post", "/v1/agent-keys/{key_id}/rotate"): "rotate_agent_key",
}


def test_every_documented_operation_has_a_method():
    document = json.loads((ROOT / "docs/openapi.json").read_text())
    # /docs is the reference page for people (HTML, script, style), not an
    # API operation.
    documented = {(m, p) for p, ops in document["paths"].items() for m in ops
                  if m in ("get", "post", "put", "patch", "delete") and not p.startswith("/docs")}
    assert documented == set(OPERATIONS), documented ^ set(OPERATIONS)
    for name in set(OPERATIONS.values()):
        assert callable(getattr(CairnClient, name)) and asyncio.iscoroutinefunction(getattr(AsyncCairnClient, name))


TRACE = {
    "trace_id": "trace-client-1",
    "thought_id": "th_client",
    "agent_id_hash": "e8821136df22",
    "started_at": "2026-02-08T12:34:56.123Z",
    "completed_at": "2026-02-08T12:34:58.456Z",
    "trace_level": "generic",
    "components": [
        {"component_type": "observation", "event_type": "THOUGHT_START", "timestamp": "2026-02-08T12:34:56.123Z",
         "data": {"round_number": 1}},
        {"component_type": "action", "event_type": "ACTION_RESULT", "timestamp": "2026-02-08T12:34:58.456Z",
         "data": {"execution_success": True}},
    ],
}


def _public(seed: bytes) -> str:
    return base64.b64encode(ed25519.public_key(seed)).decode()


def _key_id(seed: bytes) -> str:
    return "agent-" + hashlib.sha256(ed25519.public_key(seed)).hexdigest()[:12]


def test_every_operation_sync(server, cairn_bin, data_dir):
    url, admin_key = server
    admin = CairnClient(url, api_key=admin_key)
    assert admin.health()["status"] == "ok"
    assert admin.protected_resource()["authorization_servers"] == []
    assert admin.protected_resource(mcp=True)["resource"].endswith("/mcp")
    assert "/v1/steps" in admin.openapi()["paths"]
    # A writer key bound to the agent: what an agent runs with.
    created = admin.create_key("writer", agent_id="analyst", label="agent")
    assert created["token"].startswith("cairn_") and created["role"] == "writer"
    assert any(k["id"] == created["id"] for k in admin.list_keys())
    agent = CairnClient(url, api_key=created["token"], agent_id="analyst")

    start = agent.start_session("s1", full_consent=True)
    assert start["session_id"] == "s1" and len(start["genesis"]) == 64
    first = agent.log_reasoning_step(session_id="s1", step_type="Observation", content="asked about Q4 revenue",
                                     turn_id="t1", turn_step=0, status="flagged")
    assert first["step_index"] == 0
    batch = agent.log_steps([{"session_id": "s1", "step_type": "Plan", "content": "sum orders"},
                             {"session_id": "s1", "step_type": "Bogus"}])
    assert batch["accepted"] == 1 and batch["results"][1]["error"]["code"] == "unknown_step_type"
    turn = agent.record_turn("s1", turn_id="t2", thinking="I should query the orders table. Then decide.")
    assert turn["turn_id"] == "t2" and turn["accepted"] >= 1
    agent.record_turn("s1", turn_id="t3", steps=[{"step_type": "Decision", "content": "report it"}])
    assert agent.get_turn("s1", "t1")["steps"][0]["content"] == "asked about Q4 revenue"
    assert "asked about Q4 revenue" in agent.turn_markdown("s1", "t1")
    assert [t["turn_id"] for t in agent.get_trail("s1")["turns"] if "turn_id" in t][:1] == ["t1"]
    assert agent.trail_markdown("s1").startswith("# Session s1")
    assert agent.parse_thinking("Let me look at the data.")["steps"]
    replay = agent.replay_decision("s1", verify_chain=True)
    assert replay["chain_valid"] is True and replay["step_count"] == 4
    assert agent.session_markdown("s1").startswith("# Session s1")
    assert agent.get_session_history()[0]["session_id"] == "s1"
    agent.log_reasoning_step(session_id="s0", step_type="Observation", content="an older look")
    assert [s["session_id"] for s in agent.get_session_history(kind="Plan", flagged=True)] == ["s1"]
    newest = agent.get_session_history(limit=1)
    older = agent.get_session_history(limit=1, cursor=newest[0]["cursor"])
    assert [newest[0]["session_id"], older[0]["session_id"]] == ["s0", "s1"]
    assert agent.get_session_history(since=newest[0]["started_at"], limit=5)[-1]["session_id"] == "s0"
    assert next(t for t in agent.list_traces() if t["session_id"] == "s1")["step_count"] == 4
    assert agent.verify_session("s1")["verified"] is True
    assert agent.get_trace(first["trace_id"])["kind"] == "observation"
    assert "results" in agent.search("revenue")
    found = agent.search('"Q4 revenue"', mode="fulltext", session_id="s1", kind="Observation")
    assert [r["step_index"] for r in found["results"]] == [0] and found["mode"] == "fulltext"
    hit = found["results"][0]
    assert [hit["snippet"][s:e] for s, e in hit["highlights"]] == ["Q4", "revenue"]

    # Oversight: an auditor reads, reviews and queries.
    auditor = CairnClient(url, api_key=admin.create_key("auditor", label="audit")["token"])
    assert auditor.list_reviews()["items"][0]["step"]["trace_id"] == first["trace_id"]
    review = auditor.review_step(first["trace_id"], "approve", note="fine")
    assert review["decision"] == "approve"
    assert auditor.list_reviews(all=True, limit=5)["items"][0]["state"] == "approved"
    assert auditor.sql("SELECT count(*) AS n FROM steps", limit=10)["rows"] == [[5]]
    event = admin.record_audit_event("tool-run", event_id="ev-1", session_id="s1", detail={"rows": 3})
    assert admin.get_audit_event("ev-1")["detail"] == {"rows": 3} and event["event_id"] == "ev-1"
    assert admin.erase_step(first["trace_id"], "asked to forget")["erased"] is True
    with pytest.raises(CairnError) as not_sealed:
        agent.session_root("s1")
    assert not_sealed.value.code == "not_sealed"
    seal = agent.seal_session("s1")
    assert agent.session_root("s1")["merkle_root"] == seal["merkle_root"]

    # The log: checkpoints, proofs, exports, the server's verdicts.
    checkpoint = admin.checkpoint()
    assert admin.verify(checkpoints=[checkpoint])["verified"] is True
    # The offline verifier's name for them is taken too.
    assert admin.verify(trusted_checkpoints=[checkpoint])["verified"] is True
    assert admin.inclusion_proof(1)["proof"]
    size = int(checkpoint.split("\n")[1])
    assert admin.consistency_proof(1, size)["new_size"] == size
    assert admin.inclusion_receipt(1)[:2] == b"\xd2\x84"  # a tagged COSE_Sign1 (test_cose_receipts.py checks them)
    assert admin.consistency_receipt(1, size)[:2] == b"\xd2\x84"
    with pytest.raises(CairnError) as writer_export:
        agent.export(session="s1")
    assert writer_export.value.code == "forbidden"  # exports are for auditors and admins
    bundle = auditor.export(session="s1", level="detailed")
    vkey = server_vkey(cairn_bin, data_dir)
    assert verify_bundle(bundle, keys=[vkey]).verified
    assert admin.verify_bundle_on_server(bundle, keys=[vkey], checkpoints=[checkpoint])["verified"] is True
    assert admin.verify_bundle_on_server(bundle, keys=[vkey], trusted_checkpoints=[checkpoint])["verified"] is True
    assert admin.export(all=True, since_size=1).count('"consistency"') == 1
    assert "cairn_appends_total" in admin.metrics()

    # Agent keys and a signed trace (seed 004).
    seed_a, seed_b, seed_c = bytes([1]) * 32, bytes([2]) * 32, bytes([3]) * 32
    registered = agent.register_agent_key(_public(seed_a))
    assert registered["key_id"] == _key_id(seed_a)
    rotated = agent.rotate_agent_key(registered["key_id"], _public(seed_b))
    assert rotated["revoked"] == _key_id(seed_a) and rotated["key_id"] == _key_id(seed_b)
    assert agent.revoke_agent_key(_key_id(seed_b), reason="retired")["revoked"] == _key_id(seed_b)
    records = admin.list_agent_keys()["keys"]
    assert [k["type"] for k in records].count("key-revocation") == 2
    page = admin.list_agent_keys(after=records[0]["seq"], limit=2)["keys"]
    assert [k["seq"] for k in page] == [k["seq"] for k in records[1:3]]
    trace_key = admin.register_agent_key(_public(seed_c), agent_id="e8821136df22")["key_id"]
    trace = dict(TRACE, signature_key_id=trace_key)
    trace["signature"] = base64.b64encode(ed25519.sign(seed_c, canonical(
        {"components": trace["components"], "trace_level": trace["trace_level"]}))).decode()
    admin.import_trace(trace)
    signed = admin.get_signed_trace("trace-client-1")
    assert signed["signature_valid"] is True
    # What the signature covers is said: the trace's other members are as imported.
    assert signed["signed_members"] == ["components", "trace_level"]
    # Erasing one of its components' steps erases the signed original too
    # (FORMAT.md 8): 410 erased, and the log still verifies.
    erased = admin.erase_step("trace-client-1.0", "asked to forget")
    assert erased["erased"] is True and erased["trace_erasure_seq"] == erased["erasure_seq"] + 1
    with pytest.raises(CairnError) as gone:
        admin.get_signed_trace("trace-client-1")
    assert (gone.value.status, gone.value.code) == (410, "erased")
    # Imported again, into its own session: its id stays taken, and the
    # refusal says why.
    with pytest.raises(CairnError) as again:
        admin.import_trace(trace)
    assert (again.value.status, again.value.code) == (409, "duplicate_id")
    assert "erased" in str(again.value)
    assert admin.verify()["verified"] is True
    assert verify_bundle(admin.export(all=True), keys=[vkey]).verified

    # OTLP/JSON and protobuf (an empty export request is valid in both).
    assert admin.otlp("traces", {"resourceSpans": []}) == {}
    assert isinstance(admin.otlp_protobuf("logs", b""), bytes)

    admin.revoke_key(created["id"])
    with pytest.raises(CairnError) as revoked:
        agent.get_session_history()
    assert revoked.value.status == 401 and revoked.value.code == "unauthorized"


def test_every_operation_async(server):
    url, admin_key = server

    async def main():
        async with AsyncCairnClient(url, api_key=admin_key, agent_id="async-agent") as agent:
            assert (await agent.health())["status"] == "ok"
            await agent.start_session("a1")
            # Many requests in flight at once; the ledger orders them.
            results = await asyncio.gather(*(
                agent.log_reasoning_step(session_id=f"a{i % 2 + 1}", step_type="Observation", content=f"o{i}")
                for i in range(8)))
            assert sorted(r["step_index"] for r in results) == [0, 0, 1, 1, 2, 2, 3, 3]
            replay = await agent.replay_decision("a1", verify_chain=True)
            assert replay["chain_valid"] is True and replay["step_count"] == 4
            assert (await agent.log_steps([{"session_id": "a1", "step_type": "Decision"}]))["accepted"] == 1
            await agent.record_turn("a1", turn_id="t", thinking="Checking.")
            assert (await agent.get_trail("a1"))["session_id"] == "a1"
            assert (await agent.get_session_history())[0]["agent_id"] == "async-agent"
            await agent.seal_session("a1")
            bundle = await agent.export(session="a1")
            assert verify_bundle(bundle).verified
            assert (await agent.verify())["verified"] is True
            checkpoint = await agent.checkpoint()
            assert (await agent.inclusion_receipt(0))[:2] == b"\xd2\x84"
            assert (await agent.consistency_receipt(1))[:2] == b"\xd2\x84"
            assert (await agent.verify_bundle_on_server(bundle, checkpoints=[checkpoint]))["verified"] is True
            with pytest.raises(CairnError) as sealed:
                await agent.log_reasoning_step(session_id="a1", step_type="Observation")
            assert sealed.value.code == "session_sealed" and sealed.value.status == 409
            with pytest.raises(CairnError) as misspelt:
                await agent.log_steps([{"session_id": "a3", "step_type": "Observation", "contnet": "lost?"}])
            assert misspelt.value.code == "unknown_field" and "contnet" in (misspelt.value.field or "")

    asyncio.run(main())


def test_errors_carry_code_and_field(server):
    url, key = server
    agent = CairnClient(url, api_key=key, agent_id="analyst")
    with pytest.raises(CairnError) as misspelt:
        agent.log_steps([{"session_id": "e1", "step_type": "Observation", "contnet": "would be lost"}])
    error = misspelt.value
    assert (error.status, error.code) == (400, "unknown_field")
    assert error.field is not None and error.field.endswith("contnet")
    assert "content" in error.message  # the nearest known name
    with pytest.raises(CairnError) as kind:
        agent.log_reasoning_step(session_id="e1", step_type="Informational")
    assert kind.value.code == "unknown_step_type" and kind.value.status == 400
    with pytest.raises(CairnError) as confidence:
        agent.log_reasoning_step(session_id="e1", step_type="Decision", confidence=1.5)
    assert confidence.value.code == "confidence_out_of_range"
    with pytest.raises(TypeError):
        agent.log_reasoning_step(session_id="e1", step_type="Observation", contnet="x")  # type: ignore[call-arg]
    with pytest.raises(CairnError) as wrong_key:
        CairnClient(url, api_key="cairn_wrong").verify()
    assert wrong_key.value.status == 401 and wrong_key.value.code == "unauthorized"
    with pytest.raises(CairnError) as missing:
        agent.get_trace("no-such-trace")
    assert missing.value.status == 404 and missing.value.code == "not_found"


# -- retries, against a stub server --------------------------------------------------


class Stub:
    """A tiny HTTP server answering from a script of (status, headers, body)."""

    def __init__(self, script):
        self.script = list(script)
        self.requests = []
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                stub.requests.append((self.command, self.path, self.rfile.read(length), time.monotonic()))
                status, headers, body = stub.script.pop(0) if stub.script else (500, {}, b"{}")
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                # A script may announce more than it sends: a body cut short.
                if "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def refusal(status, code, retry_after="1"):
    body = json.dumps({"error": {"code": code, "message": "busy, retry"}}).encode()
    headers = {"Content-Type": "application/json"}
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    return (status, headers, body)


OK_STEP = (201, {"Content-Type": "application/json"},
           json.dumps({"trace_id": "t", "step_index": 0, "current_hash": "00" * 32, "seq": 1}).encode())


@pytest.fixture
def stub():
    stubs = []

    def make(*script):
        s = Stub(script)
        stubs.append(s)
        return s

    yield make
    for s in stubs:
        s.close()


def test_retry_after_is_honoured_on_503(stub):
    s = stub(refusal(503, "overloaded", "1"), (200, {"Content-Type": "application/json"}, b'{"status":"ok"}'))
    assert CairnClient(s.url, api_key="k").health() == {"status": "ok"}
    assert len(s.requests) == 2
    waited = s.requests[1][3] - s.requests[0][3]
    assert 1.0 <= waited < 2.5, waited


def test_writes_are_retried_only_when_safe(stub):
    # A step without its own identity: 503 may come after it was recorded, so it is raised...
    s = stub(refusal(503, "timeout", "0"), OK_STEP)
    client = CairnClient(s.url, api_key="k", agent_id="a")
    with pytest.raises(CairnError) as raised:
        client.log_reasoning_step(session_id="s", step_type="Observation")
    assert raised.value.code == "timeout" and raised.value.retry_after == 0 and len(s.requests) == 1
    # ...while 429 is a refusal before any work: retried.
    s = stub(refusal(429, "rate_limited", "0"), OK_STEP)
    assert CairnClient(s.url, api_key="k").log_reasoning_step(session_id="s", step_type="Observation")["seq"] == 1
    assert len(s.requests) == 2
    # A step carrying its trace_id and step_index cannot be recorded twice: retried on 503 too.
    s = stub(refusal(503, "overloaded", "0"), OK_STEP)
    CairnClient(s.url, api_key="k").log_reasoning_step(session_id="s", step_type="Observation", trace_id="t",
                                                       step_index=0)
    assert len(s.requests) == 2
    assert json.loads(s.requests[1][2]) == json.loads(s.requests[0][2])  # the same request again
    # A turn is recognised when sent again only with its turn_id, no thinking text and every
    # step's identity (the server answers such a retry as its first write).
    owned = {"step_type": "plan", "content": "x", "trace_id": "t", "step_index": 0}
    turn_ok = (201, {"Content-Type": "application/json"},
               json.dumps({"session_id": "s", "turn_id": "u", "accepted": 1, "results": []}).encode())
    for turn, sent in [
        (dict(turn_id="u", steps=[owned]), 2),
        (dict(steps=[owned]), 1),
        (dict(turn_id="u", steps=[owned, {"step_type": "plan", "content": "y"}]), 1),
        (dict(turn_id="u", thinking="[思考] x", steps=[owned]), 1),
    ]:
        s = stub(refusal(503, "timeout", "0"), turn_ok)
        try:
            CairnClient(s.url, api_key="k", agent_id="a").record_turn("s", **turn)
        except CairnError as e:
            assert e.code == "timeout"
        assert len(s.requests) == sent, turn
    # None is no identity (the server gives the step a new id): such a batch or turn is sent once.
    unnamed = {"step_type": "plan", "content": "x", "trace_id": None, "step_index": None}
    for call in [
        lambda c: c.log_steps([{"session_id": "s", **unnamed}]),
        lambda c: c.record_turn("s", turn_id="u", steps=[unnamed]),
        lambda c: c.record_audit_event(action="a", event_id=None),
    ]:
        s = stub(refusal(503, "timeout", "0"), turn_ok)
        with pytest.raises(CairnError):
            call(CairnClient(s.url, api_key="k", agent_id="a"))
        assert len(s.requests) == 1
    # An OTLP export's steps have ids from its trace and span ids: retried on 503.
    s = stub(refusal(503, "overloaded", "0"), (200, {"Content-Type": "application/json"}, b"{}"))
    assert CairnClient(s.url, api_key="k").otlp("traces", {"resourceSpans": []}) == {}
    assert len(s.requests) == 2
    # A repeated API key revocation is refused, not answered as the first: sent once.
    for call in [lambda c: c.revoke_key("k")]:
        s = stub(refusal(503, "timeout", "0"), turn_ok)
        with pytest.raises(CairnError):
            call(CairnClient(s.url, api_key="k"))
        assert len(s.requests) == 1


def test_a_batch_step_naming_no_agent_is_the_clients_agents(stub):
    # As log_reasoning_step(agent_id=None) is: absent and None alike.
    ok = (200, {"Content-Type": "application/json"}, b'{"accepted":2,"refused":0,"results":[]}')
    s = stub(ok)
    CairnClient(s.url, api_key="k", agent_id="a").log_steps(
        [{"session_id": "s", "step_type": "plan", "agent_id": None}, {"session_id": "s", "step_type": "plan"}])
    assert [step["agent_id"] for step in json.loads(s.requests[0][2])] == ["a", "a"]


def test_a_success_answer_that_is_not_json_is_an_error(stub):
    for body in (b"", b"<html>a proxy</html>"):
        s = stub((200, {"Content-Type": "text/html"}, body))
        with pytest.raises(CairnError) as raised:
            CairnClient(s.url, api_key="k").health()
        assert (raised.value.status, raised.value.code) == (200, "http_error")


def test_retries_are_bounded(stub):
    s = stub(*[refusal(429, "rate_limited", "0")] * 10)
    with pytest.raises(CairnError) as raised:
        CairnClient(s.url, api_key="k", max_retries=2).verify()
    assert raised.value.code == "rate_limited" and raised.value.status == 429
    assert len(s.requests) == 3
    # A Retry-After longer than max_delay is raised at once, for the caller to decide.
    s = stub(refusal(503, "overloaded", "120"))
    with pytest.raises(CairnError) as long_wait:
        CairnClient(s.url, api_key="k", max_delay=5).checkpoint()
    assert long_wait.value.retry_after == 120 and len(s.requests) == 1
    # Without Retry-After: exponential backoff with jitter.
    s = stub(refusal(503, "overloaded", None), refusal(503, "overloaded", None),
             (200, {"Content-Type": "text/plain"}, b"note\n"))
    assert CairnClient(s.url, api_key="k", backoff=0.05).checkpoint() == "note\n"
    assert len(s.requests) == 3


def test_async_client_retries(stub):
    s = stub(refusal(503, "overloaded", "0"), refusal(429, "too_many_sessions", "0"),
             (200, {"Content-Type": "application/json"}, b'[{"session_id":"s"}]'))

    async def main():
        return await AsyncCairnClient(s.url, api_key="k").get_session_history("a")

    assert asyncio.run(main()) == [{"session_id": "s"}]
    assert len(s.requests) == 3 and s.requests[0][1] == "/v1/sessions?agent_id=a&limit=20"


def test_a_streamed_answer_cut_short_is_unreachable_and_read_again(stub):
    # A replay is streamed: a server or network failure after the status
    # line cuts the body short. The client reports it as unreachable, not
    # as http.client's IncompleteRead, and a read is simply asked again.
    whole = json.dumps({"session_id": "s", "steps": [], "step_count": 0}).encode()
    cut = (200, {"Content-Type": "application/json", "Content-Length": str(len(whole) + 100)}, whole)
    s = stub(cut, (200, {"Content-Type": "application/json"}, whole))
    replay = CairnClient(s.url, api_key="k", backoff=0.01).replay_decision("s")
    assert replay["step_count"] == 0 and len(s.requests) == 2
    s = stub(cut, cut)
    with pytest.raises(CairnError) as raised:
        CairnClient(s.url, api_key="k", max_retries=1, backoff=0.01).replay_decision("s")
    assert raised.value.status == 0 and raised.value.code == "unreachable"
    assert "cut short" in raised.value.message


def test_unreachable_server():
    client = CairnClient("http://127.0.0.1:9", api_key="k", max_retries=1, backoff=0.01)
    with pytest.raises(CairnError) as raised:
        client.health()
    assert raised.value.status == 0 and raised.value.code == "unreachable"


# -- the agent loop example ----------------------------------------------------------


def test_agent_loop_example(server, cairn_bin, data_dir):
    url, admin_key = server
    path = ROOT / "clients/python/examples/agent_loop.py"
    spec = importlib.util.spec_from_file_location("agent_loop", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    admin = CairnClient(url, api_key=admin_key)
    writer = admin.create_key("writer", agent_id="revenue-agent")["token"]
    auditor = admin.create_key("auditor")["token"]
    vkey = server_vkey(cairn_bin, data_dir)
    result = module.run(url, writer, auditor, vkey, session_id="loop-1")
    assert result["key_pinned"] and result["records_checked"] >= 8
    assert result["answer"].startswith("Q4 revenue was $7.49M")
    replay = CairnClient(url, api_key=admin_key).replay_decision("loop-1", verify_chain=True)
    assert [s["step_type"] for s in replay["steps"]] == [
        "Observation", "Plan", "ToolCall", "ToolResult", "Decision", "FinalAnswer"]
    assert replay["steps"][3]["links"] == {"tool_call": replay["steps"][2]["trace_id"]}
