"""Fixtures: the `cairn` binary, a fresh data directory, a running server,
and the ledger the verifier agreement tests take their bundles from."""
import os
import pathlib
import re
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cairn_bin() -> str:
    path = os.path.abspath(os.environ.get("CAIRN_BIN", str(ROOT / "target" / "debug" / "cairn")))
    if not os.path.exists(path):
        pytest.fail(f"cairn binary not found at {path}: build it (cargo build -p cairn) or set CAIRN_BIN")
    return path


@pytest.fixture
def data_dir(tmp_path) -> pathlib.Path:
    return tmp_path / "data"


@pytest.fixture
def server(cairn_bin, data_dir, tmp_path):
    """`cairn serve` on a free loopback port; yields (url, admin key)."""
    # Appending (O_APPEND): the child shares this file's offset, and a
    # write made between our seek(0) and read() would land at offset 0,
    # over the first lines (the admin key).
    log = open(tmp_path / "serve.log", "a+")
    proc = subprocess.Popen(
        [cairn_bin, "serve", "--listen", "127.0.0.1:0"],
        env={**os.environ, "CAIRN_DATA_DIR": str(data_dir), "CAIRN_ORG": "acme"},
        stdout=log,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 20
        text = ""
        while time.time() < deadline:
            log.seek(0)
            text = log.read()
            if "listening on" in text:
                break
            if proc.poll() is not None:
                pytest.fail(f"cairn serve exited: {text}")
            time.sleep(0.05)
        url = re.search(r"http://[0-9.:]+", text).group(0)
        key = re.search(r"cairn_[A-Za-z0-9_-]+", text).group(0)
        yield url, key
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


@pytest.fixture(scope="session")
def ledger(cairn_bin, tmp_path_factory):
    """The ledger of the verifier agreement tests (`agreement.py`), built
    once for both of their modules."""
    from agreement import Ledger

    ledger = Ledger(cairn_bin, tmp_path_factory.mktemp("agreement"))
    ledger.build()
    return ledger
