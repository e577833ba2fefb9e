"""Analyst SQL in a worker process (`CAIRN_SQL_WORKER`, on by default).

On the embedded store `cairn serve` runs each analyst query in a process of
its own (`cairn internal-analyst-worker`), bounded by the operating system:
what SQLite cannot bound (the memory one row's values hold, the temporary
files a sort spills to) answers `sql_too_large` and costs the server
nothing, and the answers are exactly those of the query run in the
server's own process (`CAIRN_SQL_WORKER=false`)."""
import json
import os
import re
import subprocess
import time
import urllib.request

import pytest

from test_memory import MiB, rss, sql

# A value of about 1 MB: 999 spaces each replaced by 1,000 letters (the
# guard takes no printf width over 1000).
MEGABYTE = "replace(printf('%1000c', 'x'), ' ', printf('%1000c', 'y'))"


class Server:
    """`cairn serve` on `data`, with `env` on top of the defaults; its output
    goes to a log of its own (`log_path`, new)."""

    def __init__(self, cairn_bin, data, log_path, **env):
        self.log = open(log_path, "a+")
        self.proc = subprocess.Popen(
            [cairn_bin, "serve", "--listen", "127.0.0.1:0"],
            env={**os.environ, "CAIRN_DATA_DIR": str(data), "CAIRN_ORG": "acme", **env},
            stdout=self.log, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        text = ""
        while time.time() < deadline:
            self.log.seek(0)
            text = self.log.read()
            if "listening on" in text:
                break
            if self.proc.poll() is not None:
                pytest.fail(f"cairn serve exited: {text}")
            time.sleep(0.05)
        self.url = re.findall(r"listening on (http://[0-9.:]+)", text)[-1]
        keys = re.findall(r"cairn_[A-Za-z0-9_-]+", text)
        self.key = keys[0] if keys else None

    def sql(self, key, statement):
        return sql(self.url, key, statement)

    def record(self, key, n):
        for i in range(n):
            body = json.dumps({"session_id": f"s{i % 3}", "agent_id": "analyst",
                               "step_type": ["Observation", "Decision"][i % 2],
                               "content": f"observation {i} " + "word " * (i % 7)}).encode()
            request = urllib.request.Request(
                f"{self.url}/v1/steps", data=body,
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as answer:
                assert answer.status == 201

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=20)
        self.log.close()


# Queries whose answers (status and body) must not depend on where they run:
# rows, each error code, truncation, and the limits the server sets.
SAME_EITHER_WAY = [
    "SELECT session_id, kind, count(*) AS n, sum(length(content)) FROM steps GROUP BY 1, 2 ORDER BY 1, 2",
    "SELECT content, confidence, x'00ff' AS b, 1.5 AS f, NULL AS z FROM steps ORDER BY step_index, session_id",
    # (not `*`: `has_embedding` changes as the embedder catches up)
    "SELECT seq, trace_id, session_id, agent_id, step_index, step_type, kind, created_at, created_at_us,"
    " status, erased, current_hash, prev_hash FROM steps ORDER BY session_id, step_index LIMIT 2",
    "SELECT nope FROM steps",
    "DELETE FROM steps",
    "SELECT * FROM api_keys",
    "SELECT CAST('x' AS INTEGER) + 'é' AS weird, char(0, 10, 13, 8232) AS controls",
    "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k) SELECT count(*) FROM k",
    f"SELECT {MEGABYTE} || {MEGABYTE} || {MEGABYTE} AS three",
    "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < 50) SELECT i FROM k",
]


def test_answers_are_the_same_in_a_worker_and_in_the_server(cairn_bin, tmp_path):
    limits = {"CAIRN_SQL_TIMEOUT": "0.5", "CAIRN_SQL_MAX_ROWS": "20",
              "CAIRN_SQL_MAX_VALUE_BYTES": str(2 * MiB)}
    first = Server(cairn_bin, tmp_path / "data", tmp_path / "serve.log", **limits)
    key = first.key
    try:
        first.record(key, 30)
        in_worker = [first.sql(key, q) for q in SAME_EITHER_WAY]
        # The worker is a process of its own: one ran (and ended).
        assert in_worker[0][0] == 200
    finally:
        first.stop()
    second = Server(cairn_bin, tmp_path / "data", tmp_path / "second.log",
                    CAIRN_SQL_WORKER="false", **limits)
    try:
        in_server = [second.sql(key, q) for q in SAME_EITHER_WAY]
    finally:
        second.stop()
    codes = [a[1].get("error", {}).get("code") for a in in_worker]
    # Each outcome is met: answers, refusals, failures, time, size, rows.
    assert {"sql_failed", "sql_refused", "sql_timeout", "sql_too_large", None} <= set(codes), codes
    assert any(a[1].get("truncated") for a in in_worker)
    for query, worker, server in zip(SAME_EITHER_WAY, in_worker, in_server):
        assert worker == server, query


def test_what_sqlite_cannot_bound_is_bounded_in_the_worker(cairn_bin, tmp_path):
    server = Server(cairn_bin, tmp_path / "data", tmp_path / "serve.log",
                    CAIRN_SQL_WORKER_MEMORY_BYTES=str(64 * MiB),
                    CAIRN_SQL_WORKER_FILE_BYTES=str(32 * MiB))
    key = server.key
    try:
        server.record(key, 3)
        assert server.sql(key, "SELECT count(*) AS n FROM steps") == (
            200, {"columns": ["n"], "rows": [[3]], "truncated": False})
        before = rss(server.proc.pid)
        # One row of 100 values of 1 MB each: SQLite holds them all before
        # the answer's size is checked (100 MB past a 64 MiB heap).
        wide = "SELECT " + ", ".join(f"{MEGABYTE} AS c{i}" for i in range(100))
        status, body = server.sql(key, wide)
        assert status == 400 and body["error"]["code"] == "sql_too_large", body
        assert "memory" in body["error"]["message"], body
        # A sort of 100 values of 1 MB spills past its cache to a
        # temporary file (100 MB past a 32 MiB file).
        spill = ("WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < 100) "
                 f"SELECT length(v) FROM (SELECT {MEGABYTE} || i AS v FROM k ORDER BY v) LIMIT 1")
        status, body = server.sql(key, spill)
        assert status == 400 and body["error"]["code"] == "sql_too_large", body
        assert "temporary files" in body["error"]["message"], body
        # Many temporary files at once, each under the bound (8 CTEs of 10
        # values of 1 MB, each materialized in a file of its own: 80 MB in
        # all) are bounded together.
        ctes = ", ".join(f"a{i} AS (SELECT n, {MEGABYTE} AS v FROM r)" for i in range(8))
        total = " + ".join(f"(SELECT count(*) FROM a{i}) + (SELECT sum(length(v)) FROM a{i})"
                           for i in range(8))
        many = (f"WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 10), "
                f"{ctes} SELECT {total} AS total")
        status, body = server.sql(key, many)
        assert status == 400 and body["error"]["code"] == "sql_too_large", body
        assert "temporary files" in body["error"]["message"], body
        # A message quoting the caller's words is not taken for the bound.
        status, body = server.sql(key, 'SELECT s."out of memory" FROM steps s')
        assert (status, body["error"]["code"]) == (400, "sql_failed"), body
        # Within the bounds the same sort answers.
        small = spill.replace("i < 100", "i < 10")
        assert server.sql(key, small) == (
            200, {"columns": ["length(v)"], "rows": [[999002]], "truncated": False})
        # The server itself held none of it.
        grown = rss(server.proc.pid) - before
        assert grown < 32 * MiB, f"the server grew by {grown / MiB:.1f} MiB"
    finally:
        server.stop()
