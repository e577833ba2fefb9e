#!/usr/bin/env python3
"""Soak test: `cairn serve` under mixed load from many keys of several orgs,
well-behaved and hostile, for a fixed time, sampling the server's RSS, open
fds and threads and each operation's latency over time.

    scripts/soak.py --cairn target/release/cairn --seconds 3600 --json soak.json
    scripts/soak.py --cairn target/debug/cairn --seconds 45      # scripts/test

The script starts the server itself on a fresh data directory with the
default limits (docs/OPERATIONS.md), creates four orgs (three busy, one
quiet) with an admin, writer, reader, auditor and agent-bound writer key
each, and runs paced clients (a fixed request rate each, so that latency
over time is comparable):

  well-behaved   single and batch step ingest, agent-bound ingest, session
                 listing, replay with verification, session verification,
                 analyst SQL, MCP sessions (initialize, a tool call, DELETE),
                 partial exports and their verification by POST
                 /v1/bundles/verify, and on the quiet org whole-org
                 verification and complete exports (the quiet org grows
                 slowly, so that these stay comparable over an hour)
  hostile        slowloris (header bytes dribbled), oversized bodies (by
                 Content-Length and chunked), unknown and malformed keys, a
                 reader writing, cross-org reads, exports and MCP DELETEs,
                 a 1 GB SQL answer, a runaway recursive query, an MCP
                 session hoarder

Decisions:
- Well-behaved clients stay far below the per-key rate (1000/s). They may
  still meet 503 `overloaded` (expensive slots are shared with the hostile
  SQL) or 429: such answers carry Retry-After, and the client waits and
  retries like a real client would (at most 5 times). Retries are counted
  and reported; an error is any other answer, or still refused after the
  retries. A keep-alive connection the server closed while idle is reopened
  once (HTTP clients do the same); that is counted too.
- Hostile clients must get their expected 4xx, or 429/503; a 5xx other
  than 503, an unexpected success, a connection cut without an answer or
  no answer at all is a failure. Slowloris connections must be closed by
  the server within the header timeout plus 5 s.
- Resources, after a warm-up (20% of the run, at least 10 s): the highest
  RSS of the second half may exceed the highest of the first half by at
  most 25% + 16 MiB (an hour-long leak of ~20 KB/s fails it); fds and
  threads of the second half at most 32 above the first half's highest;
  after the load stops and idle connections time out, fds and threads
  return to within 32 of what the idle server had before the load.
- At the end the server must still answer /healthz, exit 0 on SIGTERM, and
  `cairn verify` of its data directory must pass.

Standard library only (the MCP calls are plain JSON-RPC over HTTP).
"""
import argparse
import collections
import http.client
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

BUSY_ORGS = ["acme", "globex", "initech"]
QUIET_ORG = "umbrella"
ROLES = ["writer", "reader", "auditor"]
RETRIES = 5
GOOD_TIMEOUT = 60.0
MiB = 1024 * 1024

# -- HTTP -----------------------------------------------------------------------


class Refused(Exception):
    """A well-behaved request answered with something it did not expect."""


class Http:
    """One keep-alive connection, as a real client holds one per thread."""

    reconnects = 0                  # over all connections: stale keep-alives reopened
    reconnects_lock = threading.Lock()

    def __init__(self, port, token=None, timeout=GOOD_TIMEOUT):
        self.port, self.token, self.timeout = port, token, timeout
        self.conn = None

    def request(self, method, path, body=None, headers=None):
        """Returns (status, headers, body bytes). Reopens a keep-alive
        connection the server closed while idle, once."""
        headers = dict(headers or {})
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            headers.setdefault("Content-Type", "application/json")
        for attempt in (0, 1):
            reused = self.conn is not None
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=body, headers=headers)
                resp = self.conn.getresponse()
                data = resp.read()
                if resp.getheader("Connection", "").lower() == "close":
                    self.close()
                return resp.status, resp, data
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if not reused or attempt == 1:
                    raise
                with Http.reconnects_lock:
                    Http.reconnects += 1
            except Exception:
                self.close()
                raise

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def expect(answer, *statuses):
    status, resp, data = answer
    if status not in statuses:
        raise Refused(f"{status} {data[:200]!r}")
    return data


# -- statistics -----------------------------------------------------------------


def percentile(values, q):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Stats:
    """Per operation: latencies and errors of the current sampling interval,
    and totals over the run (all latencies kept, tagged with the time)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.interval = collections.defaultdict(list)
        self.interval_errors = collections.Counter()
        self.samples = collections.defaultdict(list)     # op -> [(t, seconds)]
        self.count = collections.Counter()
        self.errors = collections.Counter()
        self.retries = collections.Counter()
        self.outcomes = collections.defaultdict(collections.Counter)  # hostile op -> answer -> n
        self.examples = collections.defaultdict(list)   # op -> first error messages
        self.t0 = time.monotonic()

    def record(self, op, seconds, error=None, retries=0, outcome=None):
        with self.lock:
            self.count[op] += 1
            self.retries[op] += retries
            if outcome is not None:
                self.outcomes[op][outcome] += 1
            if error is not None:
                self.errors[op] += 1
                self.interval_errors[op] += 1
                if len(self.examples[op]) < 5:
                    self.examples[op].append(error)
            else:
                self.interval[op].append(seconds)
                self.samples[op].append((time.monotonic() - self.t0, seconds))

    def take_interval(self):
        with self.lock:
            interval, errors = self.interval, self.interval_errors
            self.interval, self.interval_errors = collections.defaultdict(list), collections.Counter()
        ops = {}
        for op in set(interval) | set(errors):
            lat = interval.get(op, [])
            ops[op] = {"n": len(lat), "errors": errors.get(op, 0),
                       "p50_ms": ms(percentile(lat, 0.5)), "p99_ms": ms(percentile(lat, 0.99)),
                       "max_ms": ms(max(lat) if lat else None)}
        return ops


def ms(seconds):
    return None if seconds is None else round(seconds * 1000, 2)


# -- the server -----------------------------------------------------------------


class Server:
    def __init__(self, cairn, data_dir, workdir):
        self.cairn, self.data_dir = cairn, data_dir
        self.env = {**os.environ, "CAIRN_DATA_DIR": data_dir, "CAIRN_ORG": BUSY_ORGS[0], "CAIRN_LOG": "warn"}
        self.log_path = os.path.join(workdir, "serve.log")
        self.proc = None
        self.port = None

    def cli(self, *args):
        done = subprocess.run([self.cairn, *args], env=self.env, capture_output=True, text=True, timeout=600)
        return done.returncode, done.stdout, done.stderr

    def create_admin(self, org):
        """The first admin key of an org, made on the data directory (this
        creates the org), before the server holds the directory."""
        rc, out, err = self.cli("--org", org, "admin", "create-key", "--role", "admin", "--label", "soak")
        if rc != 0:
            sys.exit(f"cairn admin create-key failed: {err}")
        return out.strip()

    def start(self):
        # Appending (emptied first): the child shares the offset this side
        # seeks to read, and a write between the seek and the read would
        # otherwise land at offset 0, over the first lines.
        open(self.log_path, "w").close()
        log = open(self.log_path, "a+")
        self.proc = subprocess.Popen([self.cairn, "serve", "--listen", "127.0.0.1:0"], env=self.env,
                                     stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            log.seek(0)
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read())
            if found:
                self.port = int(found.group(1))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        log.seek(0)
        sys.exit(f"cairn serve did not start:\n{log.read()}")

    def alive(self):
        return self.proc.poll() is None

    def resources(self):
        """(RSS bytes, open fds, threads) of the server process."""
        pid = self.proc.pid
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        rss = int(status["VmRSS"].split()[0]) * 1024
        threads = int(status["Threads"])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        return rss, fds, threads

    def log_tail(self, n=30):
        with open(self.log_path) as f:
            return "".join(f.readlines()[-n:])


# -- orgs, keys and shared state -------------------------------------------------


class Org:
    def __init__(self, name, admin):
        self.name, self.keys = name, {"admin": admin}
        self.agent = f"bot-{name}"
        self.sessions = collections.deque(maxlen=64)   # recent sessions with steps

    def make_keys(self, port):
        admin = Http(port, self.keys["admin"])
        for role in ROLES + ["hoarder"]:
            body = {"role": "writer" if role == "hoarder" else role, "label": f"soak {role}"}
            self.keys[role] = json.loads(expect(admin.request("POST", "/v1/keys", body), 201))["token"]
        body = {"role": "writer", "agent_id": self.agent, "label": "soak bound writer"}
        self.keys["bound"] = json.loads(expect(admin.request("POST", "/v1/keys", body), 201))["token"]
        admin.close()

    def recent_session(self):
        return random.choice(self.sessions) if self.sessions else None


def step(session, i, agent="analyst"):
    kinds = ["Observation", "Reasoning", "ToolCall", "Decision", "FinalAnswer"]
    return {"session_id": session, "agent_id": agent, "step_type": kinds[i % len(kinds)],
            "content": f"step {i} of {session}: the agent weighs the evidence " + "x" * random.randint(50, 400),
            "confidence": round(random.random(), 3), "input_data": {"i": i, "q": "revenue by segment"}}


# -- well-behaved clients --------------------------------------------------------


def call(http, method, path, body=None, ok=(200,), headers=None):
    """A well-behaved request: waits and retries on 429/503 with
    Retry-After. Returns (body bytes, retries, response)."""
    for retries in range(RETRIES + 1):
        status, resp, data = http.request(method, path, body, headers)
        if status in ok:
            return data, retries, resp
        after = resp.getheader("Retry-After")
        if status in (429, 503) and after is not None and retries < RETRIES:
            time.sleep(min(float(after), 2.0) + random.random() * 0.2)
            continue
        raise Refused(f"{method} {path.split('?')[0]}: {status} {data[:200]!r}")


class Good:
    """Operations of well-behaved clients; each returns the retries it made."""

    def __init__(self, port, org):
        self.port, self.org = port, org
        self.http = {role: Http(port, token) for role, token in org.keys.items()}
        self.seq = collections.Counter()

    def writing(self, kind, per_session):
        """The session and step number this writer is at; a session gets
        `per_session` steps, then the writer moves on to a new one."""
        n = self.seq[kind]
        self.seq[kind] += 1
        session = f"{self.org.name}-{kind}-{n // per_session}"
        return session, n % per_session

    def ingest_single(self):
        session, i = self.writing("single", 25)
        _, retries, _ = call(self.http["writer"], "POST", "/v1/steps", step(session, i), ok=(201,))
        if i == 1:
            self.org.sessions.append(session)
        return retries

    def ingest_batch(self):
        session, i = self.writing("batch", 5)
        steps = [step(session, i * 20 + j) for j in range(20)]
        data, retries, _ = call(self.http["writer"], "POST", "/v1/steps/batch", steps)
        results = json.loads(data)
        results = results.get("results", results) if isinstance(results, dict) else results
        if len(results) != 20 or any("error" in r for r in results):
            raise Refused(f"batch: {data[:300]!r}")
        if i == 0:
            self.org.sessions.append(session)
        return retries

    def ingest_bound(self):
        session, i = self.writing("bound", 25)
        _, retries, _ = call(self.http["bound"], "POST", "/v1/steps", step(session, i, self.org.agent), ok=(201,))
        return retries

    def list_sessions(self):
        return call(self.http["reader"], "GET", "/v1/sessions?limit=20")[1]

    def replay(self):
        session = self.org.recent_session()
        if session is None:
            return 0
        data, retries, _ = call(self.http["reader"], "GET", f"/v1/sessions/{session}?verify=true")
        if json.loads(data).get("chain_valid") is not True:
            raise Refused(f"replay {session}: chain_valid is not true")
        return retries

    def verify_session(self):
        session = self.org.recent_session()
        if session is None:
            return 0
        data, retries, _ = call(self.http["reader"], "GET", f"/v1/sessions/{session}/verify")
        if json.loads(data).get("verified") is not True:
            raise Refused(f"verify {session}: {data[:200]!r}")
        return retries

    def sql(self):
        queries = [
            "SELECT step_type, count(*) AS n FROM steps GROUP BY step_type ORDER BY n DESC",
            "SELECT session_id, step_count FROM sessions ORDER BY started_at DESC LIMIT 10",
            "WITH recent AS (SELECT seq, step_type FROM steps ORDER BY seq DESC LIMIT 200) "
            "SELECT step_type, count(*) FROM recent GROUP BY step_type",
        ]
        data, retries, _ = call(self.http["reader"], "POST", "/v1/sql", {"sql": random.choice(queries)})
        if "rows" not in json.loads(data):
            raise Refused(f"sql: {data[:200]!r}")
        return retries

    def export_and_verify(self, scope, exporter="auditor"):
        data, retries, _ = call(self.http[exporter], "GET", f"/v1/export?{scope}")
        answer, more, _ = call(self.http["reader"], "POST", "/v1/bundles/verify", data,
                               headers={"Content-Type": "application/x-ndjson"})
        if not json.loads(answer).get("verified"):
            raise Refused(f"bundle of {scope} did not verify: {answer[:300]!r}")
        return retries + more

    def export_partial(self):
        session = self.org.recent_session()
        # An auditor exports at a level (without one, an export shows every
        # field, which needs the session's consent).
        return 0 if session is None else self.export_and_verify(f"session={session}&level=detailed")

    def export_complete(self):
        # An org with nothing recorded has no log to export (a 404 that says so);
        # the quiet org's exporter may start before its first step is acknowledged.
        # The whole log is the org's own record: an admin's to export.
        return 0 if self.org.recent_session() is None else self.export_and_verify("all=true", "admin")

    def verify_org(self):
        data, retries, _ = call(self.http["reader"], "GET", "/v1/verify")
        if not json.loads(data).get("verified"):
            raise Refused(f"org verification failed: {data[:300]!r}")
        return retries

    def mcp_session(self):
        session, _ = self.writing("mcp", 25)
        return mcp_session(self.http["writer"], session)


MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
MCP_VERSION = "2025-06-18"


def mcp_message(data):
    """The JSON-RPC message of an answer, sent as JSON or as one SSE event."""
    text = data.decode()
    if text.lstrip().startswith("{"):
        return json.loads(text)
    for line in text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            return json.loads(line[5:])
    raise Refused(f"no JSON-RPC message in {text[:200]!r}")


def mcp_open(http):
    """initialize and notifications/initialized: returns the session id."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": MCP_VERSION, "capabilities": {}, "clientInfo": {"name": "soak", "version": "1"}}}
    data, retries, resp = call(http, "POST", "/mcp", init, headers=MCP_HEADERS)
    session = resp.getheader("mcp-session-id")
    if not session or "result" not in mcp_message(data):
        raise Refused(f"initialize: {data[:200]!r}")
    headers = {**MCP_HEADERS, "mcp-session-id": session, "mcp-protocol-version": MCP_VERSION}
    call(http, "POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"}, ok=(202,), headers=headers)
    return session, headers, retries


def mcp_session(http, ledger_session):
    """One MCP session: opened, a step recorded into `ledger_session`
    with a tool call, deleted."""
    session, headers, retries = mcp_open(http)
    args = {"session_id": ledger_session, "agent_id": "analyst",
            "step_type": "Observation", "content": "recorded over MCP"}
    request = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "log_reasoning_step", "arguments": args}}
    data, more, _ = call(http, "POST", "/mcp", request, headers=headers)
    result = mcp_message(data).get("result") or {}
    if result.get("isError") or "structuredContent" not in result:
        raise Refused(f"tools/call: {data[:300]!r}")
    _, last, _ = call(http, "DELETE", "/mcp", ok=(200, 202, 204), headers=headers)
    return retries + more + last


# -- hostile clients --------------------------------------------------------------


class Hostile:
    """Each operation returns the answer it got (a status, or "closed"
    for a connection the server ended); the runner checks it against the
    answers that operation may get."""

    def __init__(self, port, orgs, header_timeout):
        self.port, self.orgs, self.header_timeout = port, orgs, header_timeout
        self.victim = orgs[1]

    def raw(self, head, body_chunks=(), wait=30.0):
        """Sends a request over a fresh socket, body chunk by chunk, while
        watching for an early answer (a server refuses a large body before
        reading it). Returns the status, or "closed"/"reset" if the
        connection ended without an answer."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=wait)
        try:
            sock.sendall(head)
            for chunk in body_chunks:
                sock.settimeout(0)
                try:
                    early = sock.recv(65536)
                except BlockingIOError:
                    early = None
                except ConnectionResetError:
                    return "reset"
                sock.settimeout(wait)
                if early is not None:
                    return status_of(early)
                try:
                    sock.sendall(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    break
            try:
                return status_of(sock.recv(65536))
            except ConnectionResetError:
                return "reset"
        finally:
            sock.close()

    def slowloris(self):
        """Dribbles a header byte a second; the server must end the
        connection within its header timeout (plus 5 s of slack)."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=2)
        started = time.monotonic()
        try:
            sock.sendall(b"GET /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            while time.monotonic() - started < self.header_timeout + 5:
                try:
                    sock.sendall(b"a")
                    got = sock.recv(1024)
                    return status_of(got) if got else "closed"
                except socket.timeout:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    return "closed"
            return "still open"
        finally:
            sock.close()

    def oversized(self):
        size = 3 * MiB
        head = (f"POST /v1/steps HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {self.orgs[0].keys['writer']}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n").encode()
        return self.raw(head, [b"[" + b" " * (64 * 1024 - 1)] + [b" " * 65536] * (size // 65536 - 1))

    def oversized_chunked(self):
        head = (f"POST /v1/sql HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {self.orgs[0].keys['reader']}\r\n"
                f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
        chunk = b"10000\r\n" + b" " * 65536 + b"\r\n"
        return self.raw(head, [chunk] * 48 + [b"0\r\n\r\n"])

    def plain(self, token, method, path, body=None, headers=None):
        http = Http(self.port, token, timeout=30)
        try:
            return http.request(method, path, body, headers)[0]
        except (OSError, http.client.HTTPException) as e:   # cut or timed out: a failure
            return f"cut: {type(e).__name__}"
        finally:
            http.close()

    def unknown_key(self):
        token = random.choice(["cairn_" + os.urandom(16).hex(), "cairn_x_y", "Bearer", "", "cairn_" + "a" * 5000])
        return self.plain(token or None, "GET", "/v1/sessions")

    def reader_writes(self):
        org = random.choice(self.orgs)
        return self.plain(org.keys["reader"], "POST", "/v1/steps", step(f"{org.name}-reader-{time.time()}", 0))

    def cross_org_read(self):
        session = self.victim.recent_session() or "none"
        return self.plain(self.orgs[0].keys["admin"], "GET", f"/v1/sessions/{session}?verify=true")

    def cross_org_export(self):
        session = self.victim.recent_session() or "none"
        return self.plain(self.orgs[0].keys["auditor"], "GET", f"/v1/export?session={session}")

    def cross_org_mcp_delete(self):
        """Another org's key deletes a live MCP session: 404, and the
        session still belongs to its owner, who deletes it."""
        owner = Http(self.port, self.victim.keys["writer"])
        try:
            session, headers, _ = mcp_open(owner)
            status = self.plain(self.orgs[0].keys["admin"], "DELETE", "/mcp", headers=headers)
            expect(owner.request("DELETE", "/mcp", headers=headers), 200, 202, 204)
            return status
        finally:
            owner.close()

    def huge_sql(self):
        sql = random.choice(["SELECT printf('%.*c', 999999999, 'x')",
                             "SELECT printf('%999999999c', 'x')",
                             # 1000 x 1000 x 1000 bytes, built without a wide format
                             "SELECT replace(replace(printf('%1000c', 'x'), ' ', printf('%1000c', 'y')),"
                             " ' ', printf('%1000c', 'z'))"])
        return self.plain(self.orgs[0].keys["reader"], "POST", "/v1/sql", {"sql": sql})

    def runaway_sql(self):
        sql = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
        return self.plain(self.orgs[0].keys["reader"], "POST", "/v1/sql", {"sql": sql})

    def mcp_hoarder(self):
        """Opens sessions and never closes them: after the per-key limit,
        429 too_many_sessions."""
        http = Http(self.port, self.orgs[2].keys["hoarder"])
        try:
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": MCP_VERSION, "capabilities": {}, "clientInfo": {"name": "hoard", "version": "1"}}}
            return http.request("POST", "/mcp", init, MCP_HEADERS)[0]
        finally:
            http.close()


def status_of(head):
    match = re.match(rb"HTTP/1\.[01] (\d{3})", head or b"")
    return int(match.group(1)) if match else ("closed" if not head else f"garbage {head[:40]!r}")


# What each hostile operation may be answered (429 and 503 are always fine).
HOSTILE = {
    "slowloris": ("closed", 408),
    "oversized": (413,),
    "oversized_chunked": (413,),
    "unknown_key": (401,),
    "reader_writes": (403,),
    "cross_org_read": (404,),
    "cross_org_export": (404,),
    "cross_org_mcp_delete": (404,),
    "huge_sql": (400,),
    "runaway_sql": (400,),
    "mcp_hoarder": (200,),
}

# -- running ------------------------------------------------------------------------


def paced(stats, stop, op, period, fn, hostile=False):
    """Calls fn every `period` seconds (a fixed rate, not as fast as
    possible) until stop is set, recording each call."""
    next_at = time.monotonic() + random.random() * period
    while not stop.is_set():
        stop.wait(max(0.0, next_at - time.monotonic()))
        if stop.is_set():
            break
        next_at += period
        started = time.monotonic()
        if hostile:
            try:
                answer = fn()
            except Exception as e:  # a hang or a cut connection is an answer too
                answer = f"{type(e).__name__}: {e}"
            bad = None if answer in HOSTILE[op] or answer in (429, 503) else f"answered {answer}"
            stats.record(op, time.monotonic() - started, error=bad, outcome=str(answer))
        else:
            try:
                retries = fn()
                stats.record(op, time.monotonic() - started, retries=retries)
            except Exception as e:
                stats.record(op, time.monotonic() - started, error=f"{type(e).__name__}: {e}"[:300])
        if next_at < time.monotonic() - period:   # fell behind: do not burst to catch up
            next_at = time.monotonic()


def good_plan(org, quiet):
    """(operation, period in seconds) for one org's well-behaved clients."""
    if quiet:
        return [("ingest_single", 1.0), ("verify_org", 10.0), ("export_complete", 15.0),
                ("list_sessions", 5.0), ("sql", 5.0)]
    return [("ingest_single", 0.2), ("ingest_batch", 1.0), ("ingest_bound", 0.33),
            ("list_sessions", 1.0), ("replay", 0.5), ("verify_session", 1.0), ("sql", 1.0),
            ("export_partial", 2.0), ("mcp_session", 1.0)]


HOSTILE_PLAN = [("slowloris", 0.0), ("slowloris", 0.0), ("slowloris", 0.0), ("slowloris", 0.0),
                ("oversized", 2.0), ("oversized_chunked", 3.0), ("unknown_key", 0.1),
                ("reader_writes", 1.0), ("cross_org_read", 1.0), ("cross_org_export", 2.0),
                ("cross_org_mcp_delete", 3.0), ("huge_sql", 2.0), ("runaway_sql", 30.0),
                ("mcp_hoarder", 5.0)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cairn", required=True, help="the cairn binary")
    parser.add_argument("--seconds", type=float, default=60, help="how long the load runs")
    parser.add_argument("--sample-every", type=float, help="seconds between samples (default: 5, less for short runs)")
    parser.add_argument("--json", help="write the samples and the summary here")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument("--header-timeout", type=float, default=10.0, help="the server's (default) header timeout")
    args = parser.parse_args()
    if args.sample_every is None:
        args.sample_every = max(1.0, min(5.0, args.seconds / 30))

    workdir = tempfile.mkdtemp(prefix="cairn-soak-")
    server = Server(os.path.abspath(args.cairn), os.path.join(workdir, "data"), workdir)
    orgs = [Org(name, server.create_admin(name)) for name in BUSY_ORGS + [QUIET_ORG]]
    server.start()
    try:
        summary = run(server, orgs, workdir, args)
    finally:
        if server.alive():     # the run failed early: leave no server behind
            server.proc.kill()
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    sys.exit(0 if summary["passed"] else 1)


def run(server, orgs, workdir, args):
    """The load, the sampling and the checks; returns the summary."""
    for org in orgs:
        org.make_keys(server.port)
    time.sleep(1.0)
    idle = server.resources()
    print(f"cairn serve pid {server.proc.pid} on port {server.port}, data in {workdir}; idle: "
          f"RSS {idle[0] / MiB:.1f} MiB, {idle[1]} fds, {idle[2]} threads", flush=True)

    stats, stop, threads = Stats(), threading.Event(), []
    for org in orgs:
        for op, period in good_plan(org, org.name == QUIET_ORG):
            # Each client thread has its own connections, as separate agents would.
            client = Good(server.port, org)
            fn = getattr(client, op)
            threads.append(threading.Thread(target=paced, args=(stats, stop, op, period, fn), daemon=True))
    hostile = Hostile(server.port, orgs, args.header_timeout)
    for op, period in HOSTILE_PLAN:
        threads.append(threading.Thread(target=paced, args=(stats, stop, op, period, getattr(hostile, op), True), daemon=True))
    for t in threads:
        t.start()

    rows = run_sampling(server, stats, args)
    stop.set()
    for t in threads:
        t.join(timeout=args.header_timeout + 40)
    tail = stats.take_interval()
    settled = settle(server, idle, args.header_timeout)
    summary = report(server, [o.name for o in orgs], stats, rows, idle, settled, args, tail, HOSTILE, Http.reconnects)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"samples": rows, "summary": summary}, f, indent=1)
    return summary


def run_sampling(server, stats, args):
    """Samples the server every --sample-every seconds until --seconds
    have passed, printing a line per sample."""
    rows = []
    started = time.monotonic()
    print("per interval: err = well-behaved errors, bad = unexpected hostile answers; latency columns are"
          " the highest p50, p99 and max over the well-behaved operations, then the operation with the highest p99")
    print(f"{'t':>6} {'RSS MiB':>8} {'fds':>5} {'thr':>4} {'req/s':>7} {'err':>4} {'bad':>4}"
          f" {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}  slowest p99", flush=True)
    while True:
        left = args.seconds - (time.monotonic() - started)
        if left <= 0:
            break
        time.sleep(min(args.sample_every, left))
        if not server.alive():
            print(f"cairn serve died (exit {server.proc.returncode}):\n{server.log_tail()}", flush=True)
            break
        t = time.monotonic() - started
        rss, fds, nthreads = server.resources()
        ops = stats.take_interval()
        rows.append({"t": round(t, 1), "rss": rss, "fds": fds, "threads": nthreads, "ops": ops})
        print_row(rows[-1], args.sample_every)
    return rows


def print_row(row, every):
    good = {op: v for op, v in row["ops"].items() if op not in HOSTILE}
    n = sum(v["n"] + v["errors"] for v in row["ops"].values())
    errors = sum(v["errors"] for v in good.values())
    bad = sum(v["errors"] for op, v in row["ops"].items() if op in HOSTILE)
    p50 = max((v["p50_ms"] or 0 for v in good.values()), default=0)
    p99 = max((v["p99_ms"] or 0 for v in good.values()), default=0)
    top = max(good.items(), key=lambda kv: kv[1]["p99_ms"] or 0, default=("-", {"p99_ms": 0}))
    mx = max((v["max_ms"] or 0 for v in good.values()), default=0)
    print(f"{row['t']:>6.0f} {row['rss'] / MiB:>8.1f} {row['fds']:>5} {row['threads']:>4} {n / every:>7.1f}"
          f" {errors:>4} {bad:>4} {p50:>8.1f} {p99:>8.1f} {mx:>8.1f}  {top[0]} {top[1]['p99_ms']}", flush=True)


def settle(server, idle, header_timeout):
    """After the load: waits for idle connections to time out, then
    returns the fds and threads the server is back to."""
    deadline = time.monotonic() + header_timeout + 15
    while True:
        if not server.alive():
            return None
        rss, fds, threads = server.resources()
        if (fds <= idle[1] + 32 and threads <= idle[2] + 32) or time.monotonic() > deadline:
            return {"rss": rss, "fds": fds, "threads": threads}
        time.sleep(1)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from soak_report import report  # noqa: E402  (the checks and the summary)
    main()
