"""Property-based API testing: Schemathesis against `cairn serve`.

Schemathesis reads the server's own OpenAPI document (`/openapi.json`),
generates requests from every operation's schema (valid ones, and invalid
ones the schema forbids) and checks every answer: no 5xx other than the
declared `503`, statuses, content types and bodies as the document declares
them, invalid input refused. It runs twice, once with an admin key and once
with a reader key (which must be refused cleanly wherever it lacks the role).

The number of examples per operation is `CAIRN_SCHEMATHESIS_EXAMPLES`
(default 25 in the test suite; a longer campaign sets it higher).
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import urllib.request

import pytest

HERE = pathlib.Path(__file__).resolve().parent
EXAMPLES = os.environ.get("CAIRN_SCHEMATHESIS_EXAMPLES", "25")


def schemathesis_bin() -> str:
    candidate = pathlib.Path(sys.executable).with_name("schemathesis")
    if candidate.exists():
        return str(candidate)
    found = shutil.which("schemathesis")
    if not found:
        pytest.fail("schemathesis is not installed: pip install -r tests/python/requirements.txt")
    return found


def post(url: str, key: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def seed(url: str, admin: str) -> None:
    """A session with steps, so that generated reads find something."""
    post(url, admin, "/v1/sessions", {"session_id": "sch-1", "agent_id": "agent-1"})
    for kind in ("observation", "plan", "decision"):
        post(
            url,
            admin,
            "/v1/steps",
            {"session_id": "sch-1", "agent_id": "agent-1", "step_type": kind, "content": f"a {kind}"},
        )


def run_schemathesis(url: str, key: str, label: str, tmp_path: pathlib.Path) -> None:
    report = tmp_path / f"junit-{label}.xml"
    command = [
        schemathesis_bin(),
        "--config-file",
        str(HERE / "schemathesis.toml"),
        "run",
        f"{url}/openapi.json",
        "--header",
        f"Authorization: Bearer {key}",
        # Which checks run (all but one, and why): schemathesis.toml.
        "--max-examples",
        EXAMPLES,
        "--seed",
        "20261123",
        "--no-color",
        "--report",
        "junit",
        "--report-junit-path",
        str(report),
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "schemathesis_hooks"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"Schemathesis ({label} key) found problems:\n{output[-20000:]}"


def test_schemathesis_admin_and_reader(server, tmp_path):
    url, admin = server
    seed(url, admin)
    reader = post(url, admin, "/v1/keys", {"role": "reader", "label": "schemathesis"})["token"]
    run_schemathesis(url, admin, "admin", tmp_path)
    run_schemathesis(url, reader, "reader", tmp_path)


def test_the_served_document_is_valid_openapi(server):
    """The document at /openapi.json is valid OpenAPI 3.1, and it is the
    committed copy byte for byte (the binary embeds it)."""
    from openapi_spec_validator import validate

    url, _ = server
    with urllib.request.urlopen(url + "/openapi.json", timeout=30) as response:
        served = response.read()
    validate(json.loads(served))
    committed = (HERE.parents[1] / "docs" / "openapi.json").read_bytes()
    assert served == committed
