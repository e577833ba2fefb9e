"""Every MCP tool's outputSchema, checked against real answers: each tool
lists one (every tool answers with structured content), and the structured
content of real calls of every tool (every shape get_audit_trail has)
validates against it, over stdio and Streamable HTTP in both protocol
generations; a tool error's structured content (the error body) validates
too. The MCP Python SDK validates answers as well (call_tool), so a drift
fails twice. The schemas are also checked for what the MCP Inspector's
--strict lint reports (type arrays, bare booleans, keyword-less schemas,
remote $refs): none."""
import asyncio
import base64

import jsonschema
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from test_client import SEED_004_TRACE, signed
from test_mcp import MODES, http_client, stdio_client

CONSTRAINING = {
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "format", "contentMediaType", "contentEncoding", "contentSchema",
    "maxItems", "minItems", "uniqueItems", "maxContains", "minContains", "maxProperties", "minProperties",
    "required", "dependentRequired", "allOf", "anyOf", "oneOf", "not", "items", "prefixItems", "contains",
    "additionalItems", "unevaluatedItems", "properties", "patternProperties", "additionalProperties",
    "unevaluatedProperties", "propertyNames", "dependentSchemas", "dependencies", "$ref", "$dynamicRef",
}
BOOLEAN_ALLOWED = {"additionalProperties", "unevaluatedProperties", "additionalItems", "unevaluatedItems"}


def portability_findings(schema, path="", keyword=None):
    """The MCP Inspector's --strict schema lint (2.x), restated."""
    if isinstance(schema, bool):
        return [] if keyword in BOOLEAN_ALLOWED else [f"{path}: bare {schema}"]
    if not isinstance(schema, dict):
        return []
    found = []
    if isinstance(schema.get("type"), list):
        found.append(f"{path}: type array {schema['type']}")
    ref = schema.get("$ref")
    if isinstance(ref, str) and not ref.startswith("#"):
        found.append(f"{path}: remote $ref {ref}")
    if keyword != "not" and not (CONSTRAINING & set(schema)):
        found.append(f"{path}: no validation keyword")
    for key in ["properties", "patternProperties", "dependentSchemas", "$defs", "definitions"]:
        for name, sub in (schema.get(key) or {}).items():
            found += portability_findings(sub, f"{path}.{key}.{name}", key)
    for key in ["allOf", "anyOf", "oneOf", "prefixItems"]:
        for i, sub in enumerate(schema.get(key) or []):
            found += portability_findings(sub, f"{path}.{key}[{i}]", key)
    for key in ["items", "contains", "not", "propertyNames", "if", "then", "else", "additionalProperties",
                "unevaluatedProperties", "additionalItems", "unevaluatedItems", "contentSchema"]:
        if key in schema:
            found += portability_findings(schema[key], f"{path}.{key}", key)
    return found


def test_the_lint_finds_what_the_inspector_reports():
    assert portability_findings({"type": "object", "properties": {"a": {"type": ["string", "null"]}}})
    assert portability_findings({"type": "object", "properties": {"a": True}})
    assert portability_findings({"type": "object", "properties": {"a": {"description": "any"}}})
    assert not portability_findings({"type": "object", "additionalProperties": False,
                                     "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "null"}]}}})


async def every_tool(client, agent):
    """Calls every tool (get_audit_trail in each of its shapes); yields
    (tool name, arguments, result)."""
    calls = []

    async def call(name, args):
        result = await client.call_tool(name, args)
        assert not result.is_error, (name, result.structured_content)
        calls.append((name, args, result))
        return result.structured_content

    session, trail = f"schemas-{agent}", f"schemas-trail-{agent}"
    step = await call("log_reasoning_step", {
        "session_id": session, "agent_id": agent, "step_type": "ToolCall", "content": "Query orders",
        "input_data": {"sql": "SELECT 1"}, "output_data": [1, "two", None], "confidence": 0.5, "model": "m",
        "duration_ms": 3, "token_count": 7, "metadata": {"k": "v"}, "task_id": "t", "status": "flagged"})
    await call("replay_decision", {"session_id": session})
    await call("replay_decision", {"session_id": session, "verify_chain": True, "level": "detailed"})
    await call("get_session_history", {"agent_id": agent})
    await call("list_traces", {"agent_id": agent, "limit": 5})
    await call("audit_session_start", {"session_id": trail, "agent_id": agent})
    event = await call("record_audit_event", {"action": "search", "session_id": trail, "detail": {"q": "x"}})
    for kind in ["plan", "analysis", "decision", "reflection"]:
        await call("thought_record", {"session_id": trail, "type": kind, "content": kind,
                                      "audit_event": event["event_id"]})
    await call("audit_verify_chain", {"session_id": trail})
    await call("merkle_finalize", {"session_id": trail})
    await call("merkle_root", {"session_id": trail})
    await call("audit_session_end", {"session_id": trail})
    await call("parse_thinking", {"text": "[思考] look\n[計画] 1. do it\n[エラー] failed"})
    turn = await call("record_turn", {"session_id": session, "agent_id": agent,
                                      "thinking": "[思考] look\n[実行] run it", "model": "m"})
    await call("get_audit_trail", {"session_id": session})
    await call("get_audit_trail", {"session_id": session, "turn_id": turn["turn_id"]})
    await call("get_audit_trail", {"session_id": session, "format": "markdown"})
    await call("review_queue", {"all": True})
    await call("review_step", {"trace_id": step["trace_id"], "decision": "approve", "note": "fine"})
    await call("get_trace", {"trace_id": step["trace_id"]})
    await call("get_checkpoint", {})
    await call("get_inclusion_proof", {"seq": step["seq"]})
    await call("export_session", {"session_id": session, "level": "generic"})
    await call("query_sql", {"sql": "SELECT step_type, confidence, erased FROM steps", "limit": 10})
    found = await call("search_reasoning", {"query": "orders", "mode": "fulltext", "agent_id": agent})
    assert found["results"] and found["results"][0]["highlights"], found
    await call("search_reasoning", {"query": "query the orders", "session_id": session, "limit": 3})
    private = Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    agent_hash = SEED_004_TRACE["agent_id_hash"]
    key = await call("register_agent_key", {"agent_id": agent_hash, "public_key": base64.b64encode(public).decode()})
    trace = signed(SEED_004_TRACE, private, key["key_id"], trace_id=f"trace-{agent}")
    await call("import_trace", {"trace": trace})
    await call("get_signed_trace", {"trace_id": trace["trace_id"]})
    await call("erase_step", {"trace_id": step["trace_id"], "reason": "test"})
    await call("replay_decision", {"session_id": session})
    # A tool error's structured content is the error body, which the
    # output schema allows too (the MCP Inspector validates errors as well).
    for name, args in [("log_reasoning_step", {"session_id": session, "step_type": "Reasoning", "contnet": "x"}),
                       ("merkle_root", {"session_id": "never-started"}),
                       ("thought_record", {"session_id": trail, "type": "analysis", "content": "sealed"})]:
        result = await client.call_tool(name, args)
        assert result.is_error and set(result.structured_content) == {"error"}, result
        calls.append((name, args, result))
    return calls


async def check_every_tool(client, agent):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    for name, tool in tools.items():
        assert tool.output_schema is not None, f"{name} lists no outputSchema"
        assert tool.output_schema.get("type") == "object", name
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        for kind, schema in [("inputSchema", tool.input_schema), ("outputSchema", tool.output_schema)]:
            assert portability_findings(schema, kind) == [], name
    calls = await every_tool(client, agent)
    assert {name for name, _, _ in calls} == set(tools), "every tool is called"
    for name, args, result in calls:
        assert result.structured_content is not None, name
        if not result.is_error:
            assert "error" not in result.structured_content, name
        errors = sorted(jsonschema.Draft202012Validator(tools[name].output_schema).iter_errors(
            result.structured_content), key=str)
        assert not errors, f"{name}({args}): {errors[0].message} at {list(errors[0].absolute_path)}"


@pytest.mark.parametrize("mode", MODES)
def test_every_tool_answers_as_its_output_schema_says_over_stdio(cairn_bin, data_dir, mode):
    async def run():
        async with stdio_client(cairn_bin, data_dir, mode) as client:
            await check_every_tool(client, f"stdio-{mode}")
    asyncio.run(run())


@pytest.mark.parametrize("mode", MODES)
def test_every_tool_answers_as_its_output_schema_says_over_http(server, mode):
    url, key = server
    async def run():
        async with http_client(url, key, mode) as client:
            await check_every_tool(client, f"http-{mode}")
    asyncio.run(run())
