"""The Python client (clients/python) is a package users can rely on:

- it passes `mypy --strict` (the package and its examples, with the
  settings in its pyproject.toml);
- `pip install <repo>/clients/python` (not editable, with pip's default
  build isolation, as a user runs it) into a fresh virtualenv gives an
  importable `cairn_client` of the version pyproject.toml states, with its
  `py.typed` marker, so that a type checker run against that virtualenv
  checks code using the client (and catches a misspelt argument).

mypy comes from tests/python/requirements.txt; the build backend
(setuptools) is fetched from the package index by pip (its cache is reused).
Under CI=true a missing mypy or an unreachable index fails these tests;
elsewhere they are skipped, saying why.
"""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"
IN_CI = os.environ.get("CI", "").lower() == "true"

# What pip prints when it cannot reach the index (or the index lacks the
# build backend), as opposed to a build that fails.
_OFFLINE = re.compile(
    r"No matching distribution found|Could not find a version that satisfies|Failed to establish a new connection"
    r"|Temporary failure in name resolution|Name or service not known|NewConnectionError|ProxyError"
    r"|Network is unreachable|ConnectTimeout|ReadTimeout|Connection refused"
)


def _unavailable(message: str) -> None:
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def _env() -> dict[str, str]:
    """The environment without what would point Python or mypy at the
    repository's sources instead of the installed package."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def _pyproject_version() -> str:
    text = (CLIENT / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib
    except ImportError:  # Python 3.10
        project = text.split("[project]", 1)[1].split("\n[", 1)[0]
        return re.search(r'^version\s*=\s*"([^"]+)"', project, re.M).group(1)
    return tomllib.loads(text)["project"]["version"]


def _need_mypy() -> None:
    if importlib.util.find_spec("mypy") is None:
        _unavailable(f"mypy is not installed in {sys.prefix}: pip install -r tests/python/requirements.txt")


def _mypy(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=300)


def test_client_passes_mypy_strict(tmp_path):
    _need_mypy()
    run = _mypy("--strict", "--config-file", str(CLIENT / "pyproject.toml"),
                "--cache-dir", str(tmp_path / "mypy-cache"), cwd=tmp_path)
    assert run.returncode == 0, f"mypy --strict on clients/python:\n{run.stdout}{run.stderr}"
    # The configuration's `files` found the package and the examples.
    checked = re.search(r"Success: no issues found in (\d+) source files", run.stdout)
    assert checked and int(checked.group(1)) >= 8, run.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> pathlib.Path:
    """A fresh virtualenv with `pip install <repo>/clients/python` done in
    it; yields its Python."""
    root = tmp_path_factory.mktemp("client-package")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=_env(), timeout=300)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    run = subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                          str(CLIENT)], cwd=root, env=_env(), capture_output=True, text=True, timeout=600)
    output = run.stdout + run.stderr
    if run.returncode != 0:
        if _OFFLINE.search(output):
            tail = "\n".join(output.splitlines()[-12:])
            _unavailable(f"pip could not fetch the build backend (setuptools) from the package index:\n{tail}")
        pytest.fail(f"pip install {CLIENT} into a fresh virtualenv failed:\n{output}")
    return python


_PROBE = """
import importlib.metadata, json, pathlib
import cairn_client
from cairn_client import AsyncCairnClient, CairnClient, CairnError, types, verify_bundle

package = pathlib.Path(cairn_client.__file__).parent
dist = importlib.metadata.distribution("cairn-client")
verdict = verify_bundle("")
print(json.dumps({
    "package": str(package),
    "version": cairn_client.__version__,
    "dist_version": dist.version,
    "py_typed": (package / "py.typed").is_file(),
    "recorded": sorted(str(f) for f in dist.files or ()),
    "direct_url": dist.read_text("direct_url.json"),
    "verdict": [verdict.verified, verdict.reason],
}))
"""


def test_pip_install_from_path(installed, tmp_path):
    run = subprocess.run([str(installed), "-c", _PROBE], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    got = json.loads(run.stdout)
    venv = installed.parent.parent
    # Imported from the virtualenv's site-packages, not from the repository.
    package = pathlib.Path(got["package"])
    assert package.is_relative_to(venv) and "site-packages" in package.parts, got["package"]
    assert not pathlib.Path(got["package"]).is_relative_to(ROOT)
    # A real install, not an editable one.
    assert '"editable": true' not in (got["direct_url"] or ""), got["direct_url"]
    assert got["py_typed"], "py.typed is not installed"
    assert "cairn_client/py.typed" in got["recorded"], got["recorded"]
    expected = _pyproject_version()
    assert got["dist_version"] == expected, (got["dist_version"], expected)
    assert got["version"] == expected, f"cairn_client.__version__ {got['version']} != pyproject.toml {expected}"
    # Every module of the sources is installed, subpackages' included
    # (the verifier is the package cairn_client.verify).
    sources = CLIENT / "src" / "cairn_client"
    for source in sources.rglob("*.py"):
        name = f"cairn_client/{source.relative_to(sources).as_posix()}"
        assert name in got["recorded"], name
    # It works: an empty bundle (no header, no end line) is refused, offline.
    assert got["verdict"] == [False, "missing-record"], got["verdict"]


def test_installed_package_is_typed_for_users(installed, tmp_path):
    """mypy, pointed at the fresh virtualenv, reads the installed package's
    types (PEP 561): code using it checks, and a misspelt argument is caught."""
    _need_mypy()
    (tmp_path / "good.py").write_text(textwrap.dedent("""
        from cairn_client import CairnClient, Verdict, verify_bundle
        from cairn_client.types import Session, StepResult

        def record(client: CairnClient) -> StepResult:
            return client.log_reasoning_step(session_id="s1", step_type="Observation", content="seen")

        def replay(client: CairnClient) -> Session:
            return client.replay_decision("s1", verify_chain=True)

        def check(bundle: bytes) -> Verdict:
            return verify_bundle(bundle, keys=["cairn.local+1a2b3c4d+AW"])
    """), encoding="utf-8")
    (tmp_path / "bad.py").write_text(textwrap.dedent("""
        from cairn_client import CairnClient

        def record(client: CairnClient) -> None:
            client.log_reasoning_step(sesion_id="s1", step_type="Observation")
    """), encoding="utf-8")
    common = ("--strict", "--no-incremental", "--python-executable", str(installed))
    good = _mypy(*common, "good.py", cwd=tmp_path)
    assert good.returncode == 0, f"mypy --strict against the installed package:\n{good.stdout}{good.stderr}"
    bad = _mypy(*common, "bad.py", cwd=tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert 'Unexpected keyword argument "sesion_id"' in bad.stdout, bad.stdout
