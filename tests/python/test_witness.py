"""Witness policies in the Python client (FORMAT.md 7.7): a real log server
gets its checkpoints cosigned by two real `cairn witness` processes, and the
client's offline verifier, the server's verify endpoints and the client's
policy arguments agree on what a quorum of valid cosignatures is."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from cairn_client import CairnClient, verify_bundle


def _start(cmd, env, log_path, ready):
    # Appending (O_APPEND): the child shares this file's offset (see
    # conftest.py).
    log = open(log_path, "a+")
    proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=log, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while time.time() < deadline:
        log.seek(0)
        text = log.read()
        if ready in text:
            return proc, text
        if proc.poll() is not None:
            pytest.fail(f"{cmd[1]} exited: {text}")
        time.sleep(0.05)
    pytest.fail(f"{cmd[1]} did not start: {text}")


@pytest.fixture
def witnessed(cairn_bin, tmp_path):
    """A log server with two witnesses; yields (client, [vkey1, vkey2], unrelated vkey)."""
    data = tmp_path / "data"
    keys = json.loads(subprocess.run([cairn_bin, "--json", "keys"], env={**os.environ, "CAIRN_DATA_DIR": str(data),
                                      "CAIRN_ORG": "acme"}, capture_output=True, text=True, check=True).stdout)
    log = f"{keys['name']}/acme={keys['server_key']}"
    procs, vkeys, urls = [], [], []
    try:
        for name in ["w1.example", "w2.example", "stranger.example"]:
            proc, text = _start([cairn_bin, "witness", "--dir", str(tmp_path / name), "--name", name,
                                 "--listen", "127.0.0.1:0", "--log", log], {"CAIRN_LOG": "warn"},
                                tmp_path / f"{name}.log", "listening on")
            procs.append(proc)
            vkeys.append(re.search(r"witness vkey: (\S+)", text).group(1))
            urls.append(re.search(r"http://[0-9.:]+", text).group(0))
        serve = [cairn_bin, "serve", "--listen", "127.0.0.1:0", "--witness-interval", "1"]
        for url, vkey in zip(urls[:2], vkeys[:2]):
            serve += ["--witness", f"{url}={vkey}"]
        proc, text = _start(serve, {"CAIRN_DATA_DIR": str(data), "CAIRN_ORG": "acme", "CAIRN_LOG": "warn"},
                            tmp_path / "serve.log", "listening on")
        procs.append(proc)
        url = re.search(r"cairn listening on (http://[0-9.:]+)", text).group(1)
        key = re.search(r"cairn_[A-Za-z0-9_-]+", text).group(0)
        yield CairnClient(url, key), vkeys[:2], vkeys[2]
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)


def test_a_quorum_of_cosignatures_is_what_the_client_and_server_require(witnessed):
    client, witnesses, stranger = witnessed
    for i in range(5):
        client.log_reasoning_step(session_id="w", agent_id="a", step_type="observation", content=f"step {i}")
    deadline = time.time() + 30
    while client.checkpoint().count("\u2014 ") < 3:
        assert time.time() < deadline, client.checkpoint()
        time.sleep(0.2)
    bundle = client.export(all=True)
    assert verify_bundle(bundle, witnesses=witnesses).verified
    assert verify_bundle(bundle, witnesses=[witnesses[0], stranger], witness_quorum=1).verified
    lacking = verify_bundle(bundle, witnesses=[witnesses[0], stranger])
    assert not lacking.verified and lacking.failure.reason == "insufficient-cosignatures"
    assert lacking.failure.at.line == 2
    # One altered byte of a cosignature makes it count for nothing.
    lines = bundle.split("\n")
    checkpoint = json.loads(lines[1])["checkpoint"]
    w1_line = next(line for line in checkpoint.split("\n") if line.startswith("\u2014 w1.example "))
    blob = w1_line.rsplit(" ", 1)[1]
    altered = blob[:20] + ("A" if blob[20] != "A" else "B") + blob[21:]
    lines[1] = json.dumps({"checkpoint": checkpoint.replace(blob, altered)}, separators=(",", ":"))
    tampered = verify_bundle("\n".join(lines), witnesses=witnesses)
    assert not tampered.verified and tampered.failure.reason == "insufficient-cosignatures"
    assert verify_bundle("\n".join(lines), witnesses=witnesses, witness_quorum=1).verified
    # The server's endpoints apply the same policy.
    assert client.verify(witnesses=witnesses)["verified"]
    refused = client.verify(witnesses=[witnesses[0], stranger])
    assert refused["brokenReason"] == "insufficient-cosignatures"
    assert client.verify_bundle_on_server(bundle, witnesses=witnesses)["verified"]
    assert client.verify_bundle_on_server(bundle, witnesses=[stranger])["brokenReason"] == "insufficient-cosignatures"
    with pytest.raises(ValueError):
        verify_bundle(bundle, witnesses=witnesses, witness_quorum=3)
    # A log key is not a witness key.
    server_key = json.loads(lines[0])["server_key"]
    with pytest.raises(ValueError):
        verify_bundle(bundle, witnesses=[server_key])
