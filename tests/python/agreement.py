"""What the verifier agreement tests share: both verifiers' verdicts and
their comparison, the ledger the bundles come from (`Ledger`, built once
per test session by the `ledger` fixture in `conftest.py` with the `cairn`
binary), the byte-level helpers a courier uses,
and the insider, who holds the server key and recomputes every hash,
proof and signature. The tests: `test_verifier_agreement.py` (the tamper
corpus, genuine bundles, a courier's tamperings) and
`test_verifier_agreement_insider.py` (an insider's, and the rules the
TypeScript verifier found read differently)."""

from __future__ import annotations

import base64
import concurrent.futures
import copy
import datetime
import json
import multiprocessing
import os
import pathlib
import re
import subprocess

from cairn_client import ed25519, verify_bundle
from cairn_client import verify as V
from cairn_client.jcs import canonical

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = pathlib.Path(os.environ.get("CAIRN_TAMPER_CORPUS", str(ROOT / "target" / "tamper-corpus")))
FIELDS_COMPARED = ("verified", "reason", "line", "seq", "session_id", "step_index", "records_checked")


# -- both verifiers, one shape ---------------------------------------------------


def python_verdict(bundle, keys=(), trusted=(), witnesses=(), witness_quorum=None) -> dict:
    try:
        v = verify_bundle(bundle, keys=list(keys), trusted_checkpoints=list(trusted), witnesses=list(witnesses),
                          witness_quorum=witness_quorum)
    except ValueError as e:
        # Refused before verifying, as `cairn verify` refuses it (exit 2).
        if "is not a signed note" in str(e):
            return {"error": str(e)}
        raise
    at = v.failure.at if v.failure else V.Position()
    return {
        "verified": v.verified, "reason": v.failure.reason if v.failure else None,
        "line": at.line, "seq": at.seq, "session_id": at.session_id, "step_index": at.step_index,
        "trace_id": at.trace_id, "records_checked": v.records_checked,
        "last_valid_seq": v.last_valid.seq if v.last_valid else None,
        "detail": v.failure.detail if v.failure else None,
    }


def rust_verdict(cairn_bin, path: pathlib.Path, keys=(), trusted_files=()) -> dict:
    args = [cairn_bin, "verify", "--bundle", str(path), "--json"]
    for key in keys:
        args += ["--key", key]
    for file in trusted_files:
        args += ["--checkpoint", str(file)]
    run = subprocess.run(args, capture_output=True, cwd=path.parent, timeout=120)
    try:
        out = json.loads(run.stdout)
    except ValueError:
        return {"error": (run.stderr or run.stdout).decode("utf-8", "replace").strip()}
    if isinstance(out.get("error"), dict):
        # Refused before verifying (--json prints the error as JSON).
        return {"error": str(out["error"].get("message"))}
    at = out.get("brokenAt") or {}
    return {
        "verified": out.get("verified"), "reason": out.get("brokenReason"),
        "line": at.get("line"), "seq": at.get("seq"), "session_id": at.get("session_id"),
        "step_index": at.get("step_index"), "trace_id": at.get("trace_id"),
        "records_checked": out.get("totalChecked"), "last_valid_seq": out.get("lastValidSequence"),
        "detail": out.get("detail"),
    }


def differences(rust: dict, python: dict, fields=FIELDS_COMPARED + ("trace_id", "last_valid_seq")) -> dict:
    if "error" in rust or "error" in python:
        # FORMAT.md 10.2: `cairn verify` and the Python client's
        # verify_bundle refuse, before verifying (exit 2, ValueError), a
        # trusted checkpoint that is no signed note at all; a verifier given
        # one anyway reports bad-signature at line 2.
        refused = ("not a signed note" in rust.get("error", "")
                   and ("not a signed note" in python.get("error", "")
                        or (python.get("reason") == "bad-signature" and python.get("line") == 2)))
        if refused:
            return {}
        return {"rust-error": rust.get("error"), "python-error": python.get("error")}
    return {k: (rust.get(k), python.get(k)) for k in fields if rust.get(k) != python.get(k)}


# -- a ledger made with the cairn binary ------------------------------------------


def _now(offset_s: float = 0.0) -> str:
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=offset_s)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _salt(seed: bytes, position: int) -> bytes:
    block = V._h("cairn/v2/salt", seed, bytes([position // 2]))
    return block[16 * (position % 2): 16 * (position % 2) + 16]


def _key_id(public: bytes) -> str:
    return "agent-" + V._sha256(public).hex()[:12]


def _signed_step(agent_seed: bytes, agent: str, session: str, index: int, kind: str, content: str,
                 step_seed: bytes, trace_id: str, created_at: str) -> dict:
    key_id = _key_id(ed25519.public_key(agent_seed))
    values = {name: None for name in V.FIELDS}
    values.update(trace_id=trace_id, org_id="acme", agent_id=agent, session_id=session, step_index=index,
                  step_type=kind.lower(), step_type_original=kind, content=content, created_at=created_at,
                  links={}, status="ok", signer_key_id=key_id)
    commitments = [V._h("cairn/v2/field", _salt(step_seed, p), canonical(values[name]))
                   for p, name in enumerate(V.FIELDS)]
    digest = V._h("cairn/v2/step", *commitments)
    signature = ed25519.sign(agent_seed, V._frame("cairn/v2/step-signature", digest))
    return {"session_id": session, "agent_id": agent, "step_type": kind, "content": content,
            "trace_id": trace_id, "step_index": index, "created_at": created_at, "seed": step_seed.hex(),
            "signature": {"key_id": key_id, "signature": base64.b64encode(signature).decode()}}


SEED_004_TRACE = {
    "trace_id": "trace-agreement-1",
    "thought_id": "th_agreement",
    "agent_id_hash": "e8821136df22",
    "started_at": "2026-02-08T12:34:56.123Z",
    "completed_at": "2026-02-08T12:34:58.456Z",
    "trace_level": "generic",
    "components": [
        {"component_type": "observation", "event_type": "THOUGHT_START", "timestamp": "2026-02-08T12:34:56.123Z",
         "data": {"round_number": 1, "thought_depth": 0}},
        {"component_type": "rationale", "event_type": "DMA_RESULTS", "timestamp": "2026-02-08T12:34:57.234Z",
         "data": {"csdma": {"plausibility_score": 0.85}}},
        {"component_type": "action", "event_type": "ACTION_RESULT", "timestamp": "2026-02-08T12:34:58.456Z",
         "data": {"execution_success": True, "tokens_total": 1847}},
    ],
}


class Ledger:
    """A data directory filled through the cairn CLI, and its exports."""

    def __init__(self, cairn_bin: str, root: pathlib.Path) -> None:
        self.bin = cairn_bin
        self.root = root
        self.data = root / "data"
        self.env = {**os.environ, "CAIRN_DATA_DIR": str(self.data), "CAIRN_ORG": "acme",
                    "CAIRN_SERVER_NAME": "cairn.test"}
        self.bundles: dict[str, bytes] = {}
        self.trusted: list[str] = []

    def run(self, *args, stdin: str | None = None, json_out: bool = True):
        cmd = [self.bin, *args] + (["--json"] if json_out else [])
        run = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=self.env, timeout=120)
        assert run.returncode == 0, f"{args}: {run.stderr}{run.stdout}"
        return run.stdout

    def log(self, *steps: dict) -> list[dict]:
        out = self.run("log", "--stdin", stdin="".join(json.dumps(s) + "\n" for s in steps))
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def vkey(self) -> str:
        return re.search(r"cairn\.test\+[0-9a-f]{8}\+[A-Za-z0-9+/=]+", self.run("keys", json_out=False)).group(0)

    def server_seed(self) -> bytes:
        text = (self.data / "server.key").read_text().strip()
        raw = base64.b64decode(text.split("+", 4)[4])
        assert raw[0] == 1 and len(raw) == 33
        return raw[1:]

    def export(self, name: str, *args: str) -> bytes:
        path = self.root / f"{name}.bundle"
        self.run("export", *args, "-o", str(path), json_out=False)
        self.bundles[name] = path.read_bytes()
        return self.bundles[name]

    def build(self) -> None:
        seed_a, seed_b, seed_c = bytes([7]) * 32, bytes([8]) * 32, bytes([9]) * 32
        pub = lambda s: base64.b64encode(ed25519.public_key(s)).decode()  # noqa: E731
        self.key_a = json.loads(self.run("agent-key", "--agent", "signer", "--public-key", pub(seed_a)))["key_id"]
        s1 = self.log(
            {"session_id": "s1", "agent_id": "analyst", "step_type": "Observation",
             "content": "User asked\u2028for Q4 \u00e9\u6f22 revenue", "turn_id": "turn-1", "turn_step": 0,
             "task_id": "task-1"})
        s1 += self.log(
            {"session_id": "s1", "agent_id": "analyst", "step_type": "ToolCall", "content": "Querying",
             "input_data": {"sql": "SELECT 1", "n": [1, 2.5, -3e-7, 1e21, 0.1]}, "confidence": 0.92,
             "model": "model-1", "links": {"parent": s1[0]["trace_id"]}},
            {"session_id": "s1", "agent_id": "analyst", "step_type": "Reasoning", "content": "r",
             "output_data": {"rows": 3, "ok": True, "none": None}, "metadata": {"k": "v"}, "duration_ms": 12,
             "token_count": 345, "status": "flagged"},
            {"session_id": "s1", "agent_id": "analyst", "step_type": "FinalAnswer", "content": "done",
             "confidence": 1},
        )
        self.run("audit-event", "--session", "s1", "--action", "tool", "--detail", '{"a":1}')
        self.run("review", "decide", s1[2]["trace_id"], "--decision", "approve", "--reviewer", "rev-1",
                 "--note", "fine")
        self.run("erase", s1[1]["trace_id"], "--reason", "gdpr request")
        self.run("seal", "s1")
        self.run("start", "s2", "--agent", "analyst", "--predecessor-session", "s1")
        self.log({"session_id": "s2", "agent_id": "analyst", "step_type": "plan", "content": "continue"},
                 {"session_id": "s2", "agent_id": "analyst", "step_type": "Decision", "content": "go"})
        self.run("start", "s3", "--agent", "planner", "--strict")
        self.log(*({"session_id": "s3", "agent_id": "planner", "step_type": k, "content": k}
                   for k in ("plan", "analysis", "decision", "reflection")))
        self.run("seal", "s3")
        self.log(
            _signed_step(seed_a, "signer", "sg", 0, "Plan", "signed plan", bytes(range(32)), "sg-0", _now(-1)),
            _signed_step(seed_a, "signer", "sg", 1, "Action", "signed act", bytes(range(1, 33)), "sg-1", _now(-0.5)),
            {"session_id": "sg", "agent_id": "signer", "step_type": "Observation", "content": "unsigned"},
        )
        checkpoint = json.loads(self.run("checkpoint"))
        self.trusted.append(checkpoint["note"])
        self.trusted_size = checkpoint["size"]
        rotated = json.loads(self.run("agent-key", "--agent", "signer", "--rotate", self.key_a,
                                      "--public-key", pub(seed_b)))
        self.key_b = _key_id(ed25519.public_key(seed_b))
        assert rotated
        self.log(_signed_step(seed_b, "signer", "sg", 3, "Summary", "signed by b", bytes(range(2, 34)), "sg-3",
                              _now()))
        self.run("agent-key", "--agent", "e8821136df22", "--public-key", pub(seed_c))
        trace = copy.deepcopy(SEED_004_TRACE)
        trace["signature_key_id"] = _key_id(ed25519.public_key(seed_c))
        payload = canonical({"components": trace["components"], "trace_level": trace["trace_level"]})
        trace["signature"] = base64.b64encode(ed25519.sign(seed_c, payload)).decode()
        (self.root / "trace.json").write_text(json.dumps(trace))
        self.run("import-trace", str(self.root / "trace.json"))
        self.log({"session_id": "s2", "agent_id": "analyst", "step_type": "Summary", "content": "later"},
                 {"session_id": "s4", "agent_id": "analyst", "step_type": "Observation", "content": "s4",
                  "created_at": _now(-100)})
        self.run("audit-event", "--action", "orgwide")
        self.vkey_text = self.vkey()
        self.trusted_path = self.root / "trusted.checkpoint"
        self.trusted_path.write_text(self.trusted[0])
        # Exports.
        self.export("complete", "--all")
        self.export("complete-since", "--all", "--since-size", str(self.trusted_size))
        self.export("s1-full", "--session", "s1")
        self.export("s1-generic", "--session", "s1", "--level", "generic")
        self.export("s1-detailed", "--session", "s1", "--level", "detailed")
        self.export("s2-detailed", "--session", "s2", "--level", "detailed")
        self.export("s2-since", "--session", "s2", "--since-size", str(self.trusted_size))
        self.export("s3-full", "--session", "s3")
        self.export("sg-generic", "--session", "sg", "--level", "generic")
        self.export("sg-full", "--session", "sg")
        self.export("analyst-generic", "--agent", "analyst", "--level", "generic")
        self.export("trace-generic", "--session", "trace-agreement-1", "--level", "generic")
        starts = [json.loads(line) for line in self.bundles["complete"].splitlines()
                  if b'"session-start"' in line]
        times = sorted(s["view"]["started_at"] for s in starts)
        self.export("range", "--since", times[1], "--until", times[3])


def _one_case(job):
    """One case through both verifiers (a worker process's task)."""
    cairn_bin, tmp, i, (name, data, keys, trusted) = job
    path = tmp / f"case-{i}.bundle"
    path.write_bytes(data)
    trusted_files = []
    for j, note in enumerate(trusted):
        f = tmp / f"case-{i}-trusted-{j}.checkpoint"
        f.write_text(note)
        trusted_files.append(f)
    rust = rust_verdict(cairn_bin, path, keys, trusted_files)
    python = python_verdict(data, keys, trusted)
    return name, rust, python, differences(rust, python)


def _compare_all(ledger: Ledger, cases, tmp: pathlib.Path):
    """Runs every case through both verifiers; returns the disagreements.

    Worker processes, not threads: the Python verifier holds the GIL, so
    threads ran it one case at a time (the courier corpus's 7,568 cases
    took 73 s that way). Three workers on two cores, since each waits for
    its `cairn verify` child for part of every case.
    """
    jobs = ((ledger.bin, tmp, i, case) for i, case in enumerate(cases))
    context = multiprocessing.get_context("forkserver")
    with concurrent.futures.ProcessPoolExecutor(max_workers=3, mp_context=context) as pool:
        return list(pool.map(_one_case, jobs, chunksize=32))


def known_deviation(name: str, rust: dict, python: dict):
    """Disagreements where one verifier is known to be wrong, with the
    explanation; None for any other disagreement. There are none today: a
    difference found is a bug in one of the two verifiers or a gap in
    FORMAT.md, to be fixed, not listed here."""
    return None


def _report(results) -> str:
    lines = []
    for name, rust, python, diff in results:
        if diff and not known_deviation(name, rust, python):
            lines.append(f"{name}: (rust, python) {diff}\n    rust: {rust.get('detail') or rust.get('error')}\n"
                         f"    python: {python.get('detail')}")
    return "\n".join(lines)


# -- tamperings ----------------------------------------------------------------------


def dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def split(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def join(lines) -> bytes:
    return b"\n".join(lines) + b"\n"


def _entry_indexes(lines):
    """Indexes (0-based) of the entry lines."""
    out = []
    for i, line in enumerate(lines[2:], start=2):
        obj = json.loads(line)
        if "seq" in obj:
            out.append(i)
    return out


def _check(results, what):
    report = _report(results)
    known = [(name, known_deviation(name, rust, python)) for name, rust, python, diff in results
             if diff and known_deviation(name, rust, python)]
    reasons = sorted({why for _, why in known})
    print(f"{len(results)} {what} cases, {sum(1 for r in results if r[3])} disagreements, "
          f"{len(known)} of them known Rust deviations:\n  " + "\n  ".join(reasons))
    assert not report, report


# -- the insider: holds the server key, recomputes everything ----------------------


def _mth(leaves):
    if not leaves:
        return V._sha256(b"")
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return V._node(_mth(leaves[:k]), _mth(leaves[k:]))


def _audit_path(index, leaves):
    if len(leaves) <= 1:
        return []
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    if index < k:
        return _audit_path(index, leaves[:k]) + [_mth(leaves[k:])]
    return _audit_path(index - k, leaves[k:]) + [_mth(leaves[:k])]


def _consistency_proof(m, leaves):
    """RFC 9162 2.1.4.1, PROOF(m, D[n])."""
    def subproof(m, d, complete):
        n = len(d)
        if m == n:
            return [] if complete else [_mth(d)]
        k = 1
        while k * 2 < n:
            k *= 2
        if m <= k:
            return subproof(m, d[:k], complete) + [_mth(d[k:])]
        return subproof(m - k, d[k:], False) + [_mth(d[:k])]
    return subproof(m, leaves, True)


class Insider:
    """A complete bundle's log, rewritable by someone holding the server key:
    every digest, chain hash, genesis, record hash, seal note, checkpoint,
    selection and proof can be recomputed after an edit."""

    def __init__(self, complete: bytes, server_seed: bytes) -> None:
        lines = split(complete)
        self.header = json.loads(lines[0])
        self.entries = [json.loads(line) for line in lines[2:-1] if b'"seq"' in line[:200] or True]
        self.entries = [e for e in self.entries if "seq" in e]
        self.seed = server_seed
        self.name = self.header["server_name"]
        self.origin = self.header["origin"]
        public = ed25519.public_key(server_seed)
        self.key_id = V._sha256(self.name.encode() + b"\n\x01" + public)[:4]

    def copy(self) -> "Insider":
        other = copy.copy(self)
        other.entries = copy.deepcopy(self.entries)
        other.header = dict(self.header)
        return other

    def sign(self, text: str) -> str:
        signature = ed25519.sign(self.seed, text.encode())
        return text + "\n\u2014 " + self.name + " " + base64.b64encode(self.key_id + signature).decode() + "\n"

    # -- recomputation ----------------------------------------------------------

    @staticmethod
    def commitment(entry, name):
        if name in entry["fields"]:
            return V._h("cairn/v2/field", bytes.fromhex(entry["salts"][name]), canonical(entry["fields"][name]))
        return bytes.fromhex(entry["hidden"][name])

    def rehash(self, digests=True, chains=True, ops=True, seals=True):
        heads, trees, counts = {}, {}, {}
        for e in self.entries:
            if e["type"] == "step":
                sid, index = e["fields"]["session_id"], e["fields"]["step_index"]
                if digests:
                    e["digest"] = V._h("cairn/v2/step", *(self.commitment(e, n) for n in V.FIELDS)).hex()
                if chains and sid in heads:
                    e["prev_hash"] = heads[sid].hex()
                    e["hash"] = V._h("cairn/v2/chain", heads[sid], bytes.fromhex(e["digest"]), V._u64(index),
                                     e["fields"]["created_at"].encode()).hex()
                heads[sid] = bytes.fromhex(e["hash"])
                trees.setdefault(sid, []).append(V._leaf(V._frame("cairn/v2/session-leaf", V._u64(index),
                                                                   bytes.fromhex(e["hash"]))))
                counts[sid] = counts.get(sid, 0) + 1
                continue
            view = e["view"]
            if e["type"] == "session-start" and ops:
                header = {k: v for k, v in view.items() if k != "genesis"}
                view["genesis"] = V._h("cairn/v2/genesis", canonical(header)).hex()
            if e["type"] == "session-start":
                heads[view["session_id"]] = bytes.fromhex(view["genesis"])
                trees[view["session_id"]] = []
                counts[view["session_id"]] = 0
            if e["type"] == "seal" and seals and view["session_id"] in heads:
                sid = view["session_id"]
                view["step_count"] = counts[sid]
                view["session_root"] = _mth(trees[sid]).hex()
                view["final_hash"] = heads[sid].hex()
            if e["type"] == "seal" and seals:
                view["note"] = self.seal_note(view)
            if ops:
                e["hash"] = V._h("cairn/v2/op", e["type"].encode(), canonical(view)).hex()
        return self

    def seal_note(self, view, origin=None):
        return self.sign(
            f"cairn-seal/v2\n{origin or self.origin}\n{view['session_id']}\n{view['step_count']}\n"
            f"{base64.b64encode(bytes.fromhex(view['session_root'])).decode()}\n"
            f"{base64.b64encode(bytes.fromhex(view['final_hash'])).decode()}\n{view['sealed_at']}\n")

    def renumber(self):
        for seq, e in enumerate(self.entries):
            e["seq"] = seq
        return self

    def leaves(self):
        return [V._leaf(V._frame("cairn/v2/log-leaf", V._u64(e["seq"]), e["type"].encode(), bytes.fromhex(e["hash"]),
                                 e["logged_at"].encode())) for e in self.entries]

    def checkpoint(self, size=None, root=None, origin=None, log_keys=True) -> str:
        """A checkpoint as a Cairn server signs it (FORMAT.md 7.1): with its
        log-keys line, counting the log-key records below its size
        (`log_keys=False`: without, as servers signed before it)."""
        leaves = self.leaves()
        size = len(leaves) if size is None else size
        root = _mth(leaves[:size]) if root is None else root
        text = f"{origin or self.origin}\n{size}\n{base64.b64encode(root).decode()}\n"
        if log_keys:
            count = sum(1 for e in self.entries[:size] if e["type"] == "log-key")
            text += f"cairn-log-keys {count}\n"
        return self.sign(text)

    # -- bundles -----------------------------------------------------------------

    def complete(self, size=None, checkpoint=None, since=(), header=None, entries=None) -> bytes:
        header = {**self.header, "complete_log": True, **(header or {})}
        out = [dumps(header), dumps({"checkpoint": checkpoint or self.checkpoint(size)})]
        leaves = self.leaves()
        n = len(leaves) if size is None else size
        for m in since:
            out.append(dumps({"consistency": {"old_size": m, "proof": [p.hex() for p in _consistency_proof(m, leaves[:n])]}}))
        body = self.entries if entries is None else entries
        out += [dumps(e) for e in body]
        out.append(dumps({"end": {"entries": len(body)}}))
        return join(out)

    def select(self, scope, level, size):
        """FORMAT.md 10.4, the selection rule, over the entries below `size`."""
        below = [e for e in self.entries if e["seq"] < size]
        starts = [e for e in below if e["type"] == "session-start"]

        def matches(view):
            if "session" in scope:
                return view["session_id"] == scope["session"]
            if "agent" in scope:
                return view["agent_id"] == scope["agent"]
            return scope["since"] <= view["started_at"] < scope["until"]

        chosen = [e["view"] for e in starts if matches(e["view"])]
        ids = {v["session_id"] for v in chosen}
        agents = {v["agent_id"] for v in chosen}
        predecessors = {v["predecessor"] for v in chosen if v["predecessor"]}
        sessions = []
        for v in chosen:
            steps = [e for e in below if e["type"] == "step" and e["fields"]["session_id"] == v["session_id"]]
            sessions.append({"session_id": v["session_id"], "steps": len(steps),
                             "head": steps[-1]["hash"] if steps else v["genesis"]})
        rank = {"generic": 0, "detailed": 1, "full": 2}
        records = []
        for e in below:
            t, view = e["type"], e.get("view") or {}
            sid = view.get("session_id")
            take = (
                (t in ("session-start", "seal", "erasure") and sid in ids)
                or (level == "full" and t in ("review", "audit-event") and sid in ids)
                or (t == "signed-trace" and sid in ids
                    and rank[{"full_traces": "full"}.get(view["trace"].get("trace_level"), view["trace"].get("trace_level"))] <= rank[level])
                or (t in ("key-registration", "key-revocation") and view["agent_id"] in agents)
                or (t == "seal" and view["final_hash"] in predecessors)
            )
            if take:
                records.append([e["seq"], t])
        return {"checkpoint_size": size, "scope": scope, "level": level, "sessions": sessions, "records": records}

    def shown(self, e, level):
        e = copy.deepcopy(e)
        if e["type"] != "step":
            return e
        for name in V.FIELDS:
            if name in e["fields"] and name not in V.LEVEL_SHOWS[level]:
                e["hidden"][name] = self.commitment(e, name).hex()
                del e["fields"][name], e["salts"][name]
        return e

    def partial(self, scope, level, size=None, since=(), selection=None, entries=None, note=None,
                header=None, checkpoint=None) -> bytes:
        leaves = self.leaves()
        n = len(leaves) if size is None else size
        selection = selection or self.select(scope, level, n)
        listed = {r[0] for r in selection["records"]}
        claimed = {s["session_id"]: s["steps"] for s in selection["sessions"]}
        if entries is None:
            entries = []
            for e in self.entries:
                if e["seq"] >= n:
                    continue
                if e["seq"] in listed or (e["type"] == "step" and e["fields"]["session_id"] in claimed
                                          and e["fields"]["step_index"] < claimed[e["fields"]["session_id"]]):
                    shown = self.shown(e, selection["level"])
                    shown["proof"] = [p.hex() for p in _audit_path(e["seq"], leaves[:n])]
                    entries.append(shown)
        root = _mth(leaves[:n])
        selection_hash = V._h("cairn/v2/selection", canonical(selection))
        note = note or self.sign(f"cairn-selection/v2\n{self.origin}\n{n}\n{base64.b64encode(root).decode()}\n"
                                 f"{base64.b64encode(selection_hash).decode()}\n")
        out = [dumps({**self.header, "complete_log": False, **(header or {})}),
               dumps({"checkpoint": checkpoint or self.checkpoint(n)})]
        for m in since:
            out.append(dumps({"consistency": {"old_size": m, "proof": [p.hex() for p in _consistency_proof(m, leaves[:n])]}}))
        out.append(dumps({"selection": selection, "note": note}))
        out += [dumps(e) for e in entries]
        out.append(dumps({"end": {"entries": len(entries)}}))
        return join(out)


def _strip_exported_at(data: bytes) -> bytes:
    return re.sub(rb'"exported_at":"[^"]*"', b'"exported_at":""', data)


def _shift(ts: str, micros: int) -> str:
    t = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ") + datetime.timedelta(microseconds=micros)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _resign_step(e, seed):
    key_id = _key_id(ed25519.public_key(seed))
    e["fields"]["signer_key_id"] = key_id
    digest = V._h("cairn/v2/step", *(Insider.commitment(e, n) for n in V.FIELDS))
    e["signature"] = {"key_id": key_id, "signature": base64.b64encode(
        ed25519.sign(seed, V._frame("cairn/v2/step-signature", digest))).decode()}


def _find(ins, seq):
    return next(e for e in ins.entries if e["seq"] == seq)


def _of(ins, type_, session=None, index=None):
    for e in ins.entries:
        if e["type"] != type_:
            continue
        src = e.get("fields") or e.get("view")
        if session is not None and src.get("session_id") != session:
            continue
        if index is not None and src.get("step_index") != index:
            continue
        return e
    raise LookupError((type_, session, index))
