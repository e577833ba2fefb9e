"""Cairn's MCP server driven by the official MCP Python SDK, over stdio
(`cairn mcp`) and Streamable HTTP (`/mcp`), with the initialize handshake
(mode="legacy") and the stateless 2026-07-28 revision."""
import asyncio
import json
import os
import subprocess

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

MODES = ["legacy", "2026-07-28"]

SEED_000_TOOLS = {"log_reasoning_step", "replay_decision", "get_session_history"}
SEED_001_TOOLS = {"audit_session_start", "thought_record", "audit_verify_chain", "audit_session_end", "merkle_finalize", "merkle_root"}
CAIRN_TOOLS = {"get_trace", "get_checkpoint", "get_inclusion_proof", "export_session", "record_audit_event",
               "parse_thinking", "record_turn", "get_audit_trail", "review_queue", "review_step", "erase_step", "search_reasoning"}


def stdio_client(cairn_bin, data_dir, mode):
    params = StdioServerParameters(
        command=cairn_bin,
        args=["mcp"],
        env={"CAIRN_DATA_DIR": str(data_dir), "CAIRN_ORG": "acme", "PATH": os.environ.get("PATH", "")},
    )
    return Client(params, mode=mode)


def http_client(url, key, mode):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
    return Client(streamable_http_client(url + "/mcp", http_client=http), mode=mode)


async def call(client, name, args):
    result = await client.call_tool(name, args)
    return result.structured_content, bool(result.is_error)


async def ok(client, name, args):
    value, is_error = await call(client, name, args)
    assert not is_error, f"{name}: {value}"
    return value


async def list_tools_check(client):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert SEED_000_TOOLS | SEED_001_TOOLS | CAIRN_TOOLS <= set(tools), sorted(tools)
    for tool in tools.values():
        assert tool.description and len(tool.description) > 40, tool.name
    props = tools["log_reasoning_step"].input_schema["properties"]
    for member in ["session_id", "step_type", "content", "input_data", "output_data", "confidence", "model"]:
        assert member in props, member
    assert set(tools["log_reasoning_step"].input_schema["required"]) == {"session_id", "step_type"}
    assert "type" in tools["thought_record"].input_schema["properties"]
    assert "verify_chain" in tools["replay_decision"].input_schema["properties"]


async def seed_000_example(client, session):
    """Seed 000's usage example: log, replay with verification, history."""
    steps = [
        {"step_type": "Observation", "content": "User asked for Q4 revenue breakdown by segment"},
        {"step_type": "ToolCall", "content": "Querying orders table",
         "input_data": {"sql": "SELECT segment, SUM(revenue) FROM orders WHERE quarter='Q4' GROUP BY 1"}},
        {"step_type": "Reasoning", "content": "Enterprise grew 23% QoQ while SMB declined 5%. The growth is concentrated in 3 accounts.",
         "confidence": 0.88},
        {"step_type": "FinalAnswer", "content": "Q4 revenue was $7.49M, up 15% QoQ. Enterprise drove the growth at +23%.",
         "confidence": 0.95},
    ]
    written = []
    for i, step in enumerate(steps):
        out = await ok(client, "log_reasoning_step", {"session_id": session, "agent_id": "analyst", **step})
        assert out["step_index"] == i
        assert len(out["current_hash"]) == 64 and out["trace_id"]
        written.append(out)
    trace = await ok(client, "replay_decision", {"session_id": session, "verify_chain": True})
    assert trace["chain_valid"] is True
    assert trace["step_count"] == 4 and trace["agent_id"] == "analyst"
    assert [s["step_type"] for s in trace["steps"]] == ["Observation", "ToolCall", "Reasoning", "FinalAnswer"]
    assert trace["steps"][1]["input_data"]["sql"].startswith("SELECT segment")
    assert trace["steps"][3]["current_hash"] == written[3]["current_hash"]
    assert trace["steps"][3]["prev_hash"] == written[2]["current_hash"]
    history = await ok(client, "get_session_history", {"agent_id": "analyst", "limit": 20})
    mine = [s for s in history["sessions"] if s["session_id"] == session]
    assert mine and mine[0]["step_count"] == 4 and mine[0]["chain_valid"] is True
    assert mine[0]["first_step_at"] <= mine[0]["last_step_at"]
    # Bad input: a clear error the model can read, nothing recorded.
    value, is_error = await call(client, "log_reasoning_step", {"session_id": session, "agent_id": "analyst", "step_type": "Informational"})
    assert is_error and value["error"]["code"] == "unknown_step_type"
    value, is_error = await call(client, "log_reasoning_step", {"session_id": session, "agent_id": "analyst", "step_type": "Decision", "confidence": 3})
    assert is_error and value["error"]["code"] == "confidence_out_of_range"
    value, is_error = await call(client, "replay_decision", {"session_id": "no-such-session"})
    assert is_error and value["error"]["code"] == "not_found"
    return written


async def seed_001_writeback(client, session):
    """Seed 001's full write-back sequence for a proof-grade task."""
    start = await ok(client, "audit_session_start", {"session_id": session, "agent_id": "planner"})
    assert len(start["genesis_hash"]) == 64
    first = await ok(client, "thought_record", {"session_id": session, "type": "plan", "content": "Compare the three vendors on price and risk", "task_id": "t1"})
    assert first["parent_chain_hash"] == start["genesis_hash"]
    second = await ok(client, "thought_record", {"session_id": session, "type": "analysis", "content": "Vendor B is cheapest but fails the SLA", "task_id": "t1"})
    assert second["parent_chain_hash"] == first["chain_hash"]
    await ok(client, "thought_record", {"session_id": session, "type": "decision", "content": "Choose vendor A: within budget, meets the SLA", "task_id": "t1"})
    # Anything but the four record types is the strict profile's refusal.
    value, is_error = await call(client, "thought_record", {"session_id": session, "type": "Observation", "content": "x"})
    assert is_error and value["error"]["code"] == "not_in_strict_profile" and value["error"]["field"] == "type"
    assert "plan" in value["error"]["message"] and "reflection" in value["error"]["message"]
    tools = {t.name: t for t in (await client.list_tools()).tools}
    type_schema = tools["thought_record"].input_schema
    assert "enum" in json.dumps(type_schema) and "reflection" in json.dumps(type_schema)
    for tool in tools.values():
        assert "seed 0" not in (tool.description or "").lower(), tool.name
        assert tool.title or (tool.annotations and tool.annotations.title), tool.name
        assert tool.annotations is not None and tool.annotations.read_only_hint is not None, tool.name
    assert tools["replay_decision"].annotations.read_only_hint is True
    assert tools["erase_step"].annotations.destructive_hint is True
    check = await ok(client, "audit_verify_chain", {"session_id": session})
    assert check["valid"] is True and check["records_checked"] == 3 and check["first_broken_index"] is None
    # Write-back ordering: finalizing before the closing reflection is refused.
    value, is_error = await call(client, "merkle_finalize", {"session_id": session})
    assert is_error and value["error"]["code"] == "reflection_required"
    await ok(client, "thought_record", {"session_id": session, "type": "reflection", "content": "Chose A; the SLA evidence is from one quarter only", "task_id": "t1"})
    sealed = await ok(client, "merkle_finalize", {"session_id": session})
    assert sealed["step_count"] == 4 and len(sealed["merkle_root"]) == 64
    root = await ok(client, "merkle_root", {"session_id": session})
    assert root["merkle_root"] == sealed["merkle_root"]
    # The seal names its position in the org's log, when written and read.
    assert isinstance(sealed["seq"], int) and root["seq"] == sealed["seq"]
    assert root["note"].startswith("cairn-seal/v2\n")
    end = await ok(client, "audit_session_end", {"session_id": session})
    assert end["closed"] is True and end["merkle_root"] == sealed["merkle_root"]
    value, is_error = await call(client, "thought_record", {"session_id": session, "type": "analysis", "content": "too late"})
    assert is_error and value["error"]["code"] == "session_sealed"
    return sealed


async def proofs_and_export(client, cairn_bin, tmp_path, written):
    trace = await ok(client, "get_trace", {"trace_id": written[0]["trace_id"]})
    assert trace["step_type"] == "Observation"
    checkpoint = await ok(client, "get_checkpoint", {})
    assert checkpoint["size"] >= 4 and checkpoint["note"].count("\n") >= 4
    proof = await ok(client, "get_inclusion_proof", {"seq": trace["seq"]})
    assert proof["size"] == checkpoint["size"] and proof["root"] == checkpoint["root"]
    found = await ok(client, "search_reasoning", {"query": '"revenue breakdown by segment"', "mode": "fulltext",
                                                  "session_id": trace["session_id"]})
    assert trace["trace_id"] in [r["trace_id"] for r in found["results"]], found
    exported = await ok(client, "export_session", {"session_id": trace["session_id"]})
    bundle = tmp_path / "session.bundle"
    bundle.write_text(exported["bundle"])
    verified = subprocess.run([cairn_bin, "verify", "--bundle", str(bundle), "--json"], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["verified"] is True


@pytest.mark.parametrize("mode", MODES)
def test_stdio(cairn_bin, data_dir, tmp_path, mode):
    async def run():
        async with stdio_client(cairn_bin, data_dir, mode) as client:
            await list_tools_check(client)
            written = await seed_000_example(client, f"revenue-analysis-q4-{mode}")
            await seed_001_writeback(client, f"vendor-choice-{mode}")
            await proofs_and_export(client, cairn_bin, tmp_path, written)
    asyncio.run(run())


@pytest.mark.parametrize("mode", MODES)
def test_streamable_http(server, cairn_bin, tmp_path, mode):
    url, key = server
    async def run():
        async with http_client(url, key, mode) as client:
            await list_tools_check(client)
            written = await seed_000_example(client, f"revenue-analysis-q4-{mode}")
            await seed_001_writeback(client, f"vendor-choice-{mode}")
            await proofs_and_export(client, cairn_bin, tmp_path, written)
    asyncio.run(run())


def _messages(error: BaseException) -> str:
    """Every message in an exception group, flattened."""
    parts = [str(error)]
    for sub in getattr(error, "exceptions", None) or []:
        parts.append(_messages(sub))
    return " | ".join(parts)


@pytest.mark.parametrize("key", ["cairn_000000000000_wrong", None])
def test_a_bad_key_is_obvious_in_the_sdk(server, key):
    """With a wrong or missing key the SDK's error says a Cairn API key is
    needed (not "Server returned an error response"), and the 401 follows
    the MCP authorization spec's conventions as far as static keys allow."""
    url, _ = server
    async def run():
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        http = httpx2.AsyncClient(headers=headers, timeout=30)
        async with Client(streamable_http_client(url + "/mcp", http_client=http), mode="legacy") as client:
            await client.list_tools()
    with pytest.raises(BaseException) as raised:
        asyncio.run(run())
    assert "Cairn API key" in _messages(raised.value) or "Cairn needs an API key" in _messages(raised.value), \
        _messages(raised.value)

    headers = {"Accept": "application/json, text/event-stream"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    response = httpx2.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ") and "resource_metadata=" in challenge
    assert ('error="invalid_token"' in challenge) == bool(key)
    body = response.json()
    assert body["jsonrpc"] == "2.0" and "API key" in body["error"]["message"]
    assert body["error"]["data"]["error"]["code"] == "unauthorized"
    metadata_url = challenge.split('resource_metadata="')[1].split('"')[0]
    metadata = httpx2.get(metadata_url).json()
    assert metadata["resource"].endswith("/mcp")
    assert metadata["authorization_servers"] == []


def test_closing_a_session_is_a_success(server):
    """DELETE of an MCP session answers 204 (the SDK warns on anything but
    200 or 204)."""
    url, key = server
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"}
    opened = httpx2.post(url + "/mcp", headers=headers, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    closed = httpx2.delete(url + "/mcp", headers={**headers, "mcp-session-id": session})
    assert closed.status_code == 204, closed.text
    again = httpx2.delete(url + "/mcp", headers={**headers, "mcp-session-id": session})
    assert again.status_code == 404


@pytest.mark.parametrize("mode", MODES)
def test_seed_000_verbatim_over_stdio_with_a_default_agent(cairn_bin, data_dir, mode):
    """Seed 000's tool inputs exactly as the seed writes them (no agent_id in
    log_reasoning_step), over stdio with `cairn mcp --agent`; the history's
    text content is the seed's list, its structured content an object."""
    params = StdioServerParameters(
        command=cairn_bin,
        args=["mcp", "--agent", "analyst-agent"],
        env={"CAIRN_DATA_DIR": str(data_dir), "CAIRN_ORG": "acme", "PATH": os.environ.get("PATH", "")},
    )

    async def run():
        async with Client(params, mode=mode) as client:
            step = {
                "session_id": "analysis-session-42",
                "step_type": "Reasoning",
                "content": "The revenue data shows a clear upward trend in Q4, driven primarily by the "
                           "enterprise segment which grew 23% QoQ.",
                "input_data": {"query": "SELECT segment, SUM(revenue) FROM orders WHERE quarter = 'Q4' GROUP BY 1"},
                "output_data": {"enterprise": 4500000, "mid_market": 2100000, "smb": 890000},
                "confidence": 0.92,
                "model": "gpt-4o",
            }
            written = await ok(client, "log_reasoning_step", step)
            assert set(written) >= {"trace_id", "step_index", "current_hash"}
            replay = await ok(client, "replay_decision", {"session_id": "analysis-session-42", "verify_chain": True})
            assert replay["agent_id"] == "analyst-agent"
            assert replay["chain_valid"] is True
            result = await client.call_tool("get_session_history", {"agent_id": "analyst-agent", "limit": 20})
            assert not result.is_error
            listed = json.loads(result.content[0].text)
            assert isinstance(listed, list) and listed[0]["session_id"] == "analysis-session-42"
            # The text is seed 000's list; the structured content holds it and the next page's cursor.
            assert result.structured_content == {"sessions": listed, "next_cursor": None}
            # The default agent also stands in for a history without agent_id.
            result = await client.call_tool("get_session_history", {})
            assert json.loads(result.content[0].text) == listed
    asyncio.run(run())


def test_stdio_without_an_agent_says_how_to_name_one(cairn_bin, data_dir):
    async def run():
        async with stdio_client(cairn_bin, data_dir, "legacy") as client:
            result = await client.call_tool(
                "log_reasoning_step", {"session_id": "s-no-agent", "step_type": "Reasoning", "content": "x"})
            assert result.is_error
            assert "--agent" in json.dumps(result.structured_content or result.content[0].text)
    asyncio.run(run())


def test_a_server_that_cannot_start_says_why_to_the_client(cairn_bin, data_dir):
    """A second `cairn mcp` on a data directory another holds cannot start:
    the client's initialize gets an error naming the cause (it had seen
    only "connection closed")."""
    async def run():
        async with stdio_client(cairn_bin, data_dir, "legacy"):
            with pytest.raises(Exception) as refused:
                async with stdio_client(cairn_bin, data_dir, "legacy"):
                    pass
            def messages(e):
                return [str(e)] + [m for inner in getattr(e, "exceptions", []) for m in messages(inner)]
            said = " | ".join(messages(refused.value))
            assert "cairn mcp cannot start" in said and "in use" in said, said
    asyncio.run(run())


@pytest.mark.parametrize("mode", MODES)
def test_arguments_are_strict_with_one_error_shape(cairn_bin, data_dir, mode):
    """A misspelt, mistyped or missing argument is a tool error (the model
    can correct it) in the REST error shape, naming the field; every tool's
    schema says unknown fields are not allowed."""
    params = StdioServerParameters(
        command=cairn_bin,
        args=["mcp", "--agent", "analyst-agent"],
        env={"CAIRN_DATA_DIR": str(data_dir), "CAIRN_ORG": "acme", "PATH": os.environ.get("PATH", "")},
    )

    async def error_of(client, name, args):
        result = await client.call_tool(name, args)
        assert result.is_error, f"{name} {args}: {result}"
        return result.structured_content["error"]

    async def run():
        async with Client(params, mode=mode) as client:
            for tool in (await client.list_tools()).tools:
                assert tool.input_schema.get("additionalProperties") is False, tool.name
            error = await error_of(client, "log_reasoning_step",
                                   {"session_id": "strict-1", "step_type": "Reasoning", "contnet": "lost?"})
            assert error["code"] == "unknown_field" and error["field"] == "contnet"
            assert "did you mean content" in error["message"]
            error = await error_of(client, "replay_decision", {"session_id": "strict-1", "verifyChain": True})
            assert error["code"] == "unknown_field" and "verify_chain" in error["message"]
            error = await error_of(client, "log_reasoning_step",
                                   {"session_id": "strict-1", "step_type": "Reasoning", "confidence": "high"})
            assert error["code"] == "invalid_argument" and error["field"] == "confidence"
            error = await error_of(client, "log_reasoning_step", {"step_type": "Reasoning"})
            assert error["code"] == "missing_field" and error["field"] == "session_id"
            # Nothing of the refused calls was recorded.
            replay = await client.call_tool("replay_decision", {"session_id": "strict-1"})
            assert replay.is_error and replay.structured_content["error"]["code"] == "not_found"
    asyncio.run(run())


@pytest.mark.parametrize("mode", MODES)
def test_a_long_session_is_read_in_parts_over_http(server, mode):
    """Eight steps of the largest content (64 KiB) make a replay past what
    one message carries (the SDK refuses a server-sent event past 1 MiB):
    replay_decision answers it in parts that the SDK reads, and tools
    whose answer cannot be cut answer a tool error naming the ways to read
    it, never a message the client refuses."""
    url, key = server
    session = f"long-{mode}"

    async def run():
        async with http_client(url, key, mode) as client:
            for i in range(8):
                await ok(client, "log_reasoning_step", {
                    "session_id": session, "agent_id": "analyst", "step_type": "analysis",
                    "content": f"{i} " + "x" * (65536 - 8),
                })
            indexes, start, answers = [], 0, 0
            while start is not None:
                page = await ok(client, "replay_decision", {"session_id": session, "from_step": start})
                assert page["step_count"] == 8, page["step_count"]
                assert page["steps"], page
                indexes += [s["step_index"] for s in page["steps"]]
                start = page["next_step_index"]
                answers += 1
            assert indexes == list(range(8)), indexes
            assert answers > 1, answers
            for tool, args in [("export_session", {"session_id": session}),
                               ("get_audit_trail", {"session_id": session})]:
                value, is_error = await call(client, tool, args)
                assert is_error, tool
                assert value["error"]["code"] == "answer_too_large", value
                assert "from_step" in value["error"]["message"], value
            value, is_error = await call(client, "replay_decision", {"session_id": session, "from_step": 9})
            assert is_error and value["error"]["field"] == "from_step", value
            # A step whose JSON escapes to twice its size (quotes, as in a
            # transcript holding JSON text), too large for a message alone:
            # a tool error saying where the session goes on, never a
            # message the SDK refuses.
            quoted = await ok(client, "log_reasoning_step", {
                "session_id": session, "agent_id": "analyst", "step_type": "observation",
                "content": "transcript", "input_data": {"messages": '"' * 120_000},
                "output_data": {"messages": '"' * 120_000}})
            await ok(client, "log_reasoning_step", {
                "session_id": session, "agent_id": "analyst", "step_type": "observation", "content": "after"})
            value, is_error = await call(client, "replay_decision", {"session_id": session, "from_step": 8})
            assert is_error and value["error"]["code"] == "answer_too_large", value
            assert "from_step 9" in value["error"]["message"], value
            generic = await ok(client, "replay_decision", {"session_id": session, "from_step": 8, "level": "generic"})
            assert generic["steps"][0]["step_index"] == 8, generic
            after = await ok(client, "replay_decision", {"session_id": session, "from_step": 9})
            assert [s["content"] for s in after["steps"]] == ["after"], after
            value, is_error = await call(client, "get_trace", {"trace_id": quoted["trace_id"]})
            assert is_error and value["error"]["code"] == "answer_too_large", value
    asyncio.run(run())


def test_a_retried_step_with_its_trace_id_is_recorded_once(cairn_bin, data_dir):
    """An agent that retries log_reasoning_step after a lost answer, with
    the trace_id it chose, gets the first call's answer and one step; as
    REST answers a retried POST /v1/steps."""
    async def run():
        async with stdio_client(cairn_bin, data_dir, "legacy") as client:
            step = {"session_id": "retry-1", "agent_id": "analyst", "step_type": "observation",
                    "content": "the invoice total is 42", "trace_id": "obs-1"}
            first = await ok(client, "log_reasoning_step", step)
            again = await ok(client, "log_reasoning_step", step)
            assert first["trace_id"] == "obs-1", first
            assert {k: v for k, v in again.items() if k != "session_created"} == \
                {k: v for k, v in first.items() if k != "session_created"}, (first, again)
            other = dict(step, content="the invoice total is 43")
            value, is_error = await call(client, "log_reasoning_step", other)
            assert is_error and value["error"]["code"] == "duplicate_trace_id", value
            replay = await ok(client, "replay_decision", {"session_id": "retry-1"})
            assert replay["step_count"] == 1, replay
    asyncio.run(run())


def test_a_refusal_names_the_argument_as_the_tool_spells_it(cairn_bin, data_dir):
    """An error's field is the tool's argument (search_reasoning's query,
    not REST's q), and a bad level names level, as REST does."""
    async def run():
        async with stdio_client(cairn_bin, data_dir, "legacy") as client:
            await ok(client, "log_reasoning_step", {"session_id": "f-1", "agent_id": "analyst",
                                                    "step_type": "observation", "content": "x"})
            for query in ["   ", "OR", "-only"]:
                value, is_error = await call(client, "search_reasoning", {"query": query})
                assert is_error and value["error"]["field"] == "query", (query, value)
                assert not value["error"]["message"].startswith("q "), value
            for tool in ["replay_decision", "export_session"]:
                value, is_error = await call(client, tool, {"session_id": "f-1", "level": "everything"})
                assert is_error and value["error"]["field"] == "level", (tool, value)
    asyncio.run(run())


def test_thought_record_reads_types_as_log_reasoning_step_does(cairn_bin, data_dir):
    """thought_record takes a type in any case, and refuses a kind outside
    the four as the strict profile does (not_in_strict_profile), naming
    the type argument; its schema still lists the four."""
    async def run():
        async with stdio_client(cairn_bin, data_dir, "legacy") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["thought_record"].input_schema["properties"]["type"]["enum"] == \
                ["plan", "analysis", "decision", "reflection"]
            await ok(client, "audit_session_start", {"session_id": "tt-1", "agent_id": "analyst"})
            written = await ok(client, "thought_record", {"session_id": "tt-1", "type": "Plan", "content": "p"})
            assert written["step_index"] == 0, written
            for label, code in [("observation", "not_in_strict_profile"), ("daydream", "unknown_step_type")]:
                value, is_error = await call(client, "thought_record",
                                             {"session_id": "tt-1", "type": label, "content": "x"})
                assert is_error, label
                assert (value["error"]["code"], value["error"]["field"]) == (code, "type"), value
    asyncio.run(run())
