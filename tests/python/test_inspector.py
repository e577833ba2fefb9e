"""The MCP Inspector CLI (npm `@modelcontextprotocol/inspector`, pinned in
tests/inspector) driving Cairn over stdio (`cairn mcp --agent`) and over
Streamable HTTP with an API key: both seed flows (seed 000's reasoning
steps and replay; seed 001's decision trail to its seal), strict
arguments, and a wrong key reported as such.

`scripts/test` runs `npm ci` in tests/inspector first; under CI=true a
missing Inspector is a failure, elsewhere the tests are skipped.
"""
import json
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
INSPECTOR = ROOT / "tests" / "inspector" / "node_modules" / ".bin" / "mcp-inspector"


@pytest.fixture(scope="module")
def inspector() -> str:
    if not INSPECTOR.exists() or not shutil.which("node"):
        message = "the MCP Inspector is not installed: (cd tests/inspector && npm ci)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return str(INSPECTOR)


def run(inspector, target, method, tool=None, args=None, expect_ok=True, env=None):
    command = [inspector, "--cli", *target, "--method", method]
    if tool:
        command += ["--tool-name", tool]
    if args:
        command += ["--tool-arg"] + [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in args.items()]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})
    if not expect_ok:
        return result
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    start = result.stdout.index("{")
    return json.loads(result.stdout[start:])


def call(inspector, target, tool, args):
    answer = run(inspector, target, "tools/call", tool, args)
    assert answer.get("isError") is not True, answer
    return answer["structuredContent"]


def seed_flows(inspector, target, suffix):
    tools = {t["name"]: t for t in run(inspector, target, "tools/list")["tools"]}
    assert {"log_reasoning_step", "replay_decision", "get_session_history", "audit_session_start",
            "thought_record", "audit_verify_chain", "merkle_finalize", "merkle_root", "audit_session_end"} <= set(tools)
    for tool in tools.values():
        assert tool["inputSchema"].get("additionalProperties") is False, tool["name"]
        assert tool.get("title") and tool.get("annotations"), tool["name"]

    # Seed 000: steps as the seed writes them (no agent_id: the default agent).
    session = f"analysis-session-{suffix}"
    first = call(inspector, target, "log_reasoning_step", {
        "session_id": session, "step_type": "Reasoning",
        "content": "The revenue data shows a clear upward trend in Q4.",
        "input_data": {"query": "SELECT segment, SUM(revenue) FROM orders GROUP BY 1"},
        "output_data": {"enterprise": 4500000}, "confidence": 0.92, "model": "gpt-4o"})
    assert first["step_index"] == 0 and len(first["current_hash"]) == 64
    call(inspector, target, "log_reasoning_step", {"session_id": session, "step_type": "Decision",
                                                  "content": "Report enterprise growth"})
    replay = call(inspector, target, "replay_decision", {"session_id": session, "verify_chain": True})
    assert replay["chain_valid"] is True and replay["step_count"] == 2

    # Seed 001: the decision trail, written back in order, then sealed.
    trail = f"vendor-choice-{suffix}"
    call(inspector, target, "audit_session_start", {"session_id": trail})
    for kind, content in [("plan", "Compare vendors"), ("analysis", "B fails the SLA"),
                          ("decision", "Choose A"), ("reflection", "A meets budget and SLA")]:
        call(inspector, target, "thought_record", {"session_id": trail, "type": kind, "content": content})
    check = call(inspector, target, "audit_verify_chain", {"session_id": trail})
    assert check["valid"] is True and check["records_checked"] == 4
    call(inspector, target, "merkle_finalize", {"session_id": trail})
    root = call(inspector, target, "merkle_root", {"session_id": trail})
    assert root["step_count"] == 4 and len(root["merkle_root"]) == 64
    call(inspector, target, "audit_session_end", {"session_id": trail})

    # A misspelt argument is a tool error naming it, and records nothing.
    answer = run(inspector, target, "tools/call", "log_reasoning_step",
                 {"session_id": session, "step_type": "Reasoning", "contnet": "lost?"})
    assert answer["isError"] is True
    error = answer["structuredContent"]["error"]
    assert error["code"] == "unknown_field" and error["field"] == "contnet"
    replay = call(inspector, target, "replay_decision", {"session_id": session})
    assert replay["step_count"] == 2


def test_inspector_over_stdio(inspector, cairn_bin, data_dir):
    # The server's environment is given with -e: its own data directory.
    target = ["-e", f"CAIRN_DATA_DIR={data_dir}", "-e", "CAIRN_ORG=acme", cairn_bin, "mcp", "--agent", "analyst-agent"]
    seed_flows(inspector, target, "stdio")
    assert (data_dir / "ledger.db").exists()


def test_inspector_over_http(inspector, server):
    url, key = server
    # An admin key bound to no agent: bind one for seed 000's calls.
    request = subprocess.run(
        ["curl", "-s", "-X", "POST", f"{url}/v1/keys", "-H", f"Authorization: Bearer {key}",
         "-H", "Content-Type: application/json", "-d", json.dumps({"role": "writer", "agent_id": "analyst-agent"})],
        capture_output=True, text=True, timeout=30)
    agent_key = json.loads(request.stdout)["token"]
    target = [f"{url}/mcp", "--transport", "http", "--header", f"Authorization: Bearer {agent_key}"]
    seed_flows(inspector, target, "http")


def test_inspector_reports_a_wrong_key(inspector, server):
    url, _ = server
    target = [f"{url}/mcp", "--transport", "http", "--header", "Authorization: Bearer cairn_000000000000_wrong"]
    result = run(inspector, target, "tools/list", expect_ok=False)
    assert result.returncode != 0
    assert "API key" in result.stdout + result.stderr, result.stdout + result.stderr
