"""`cairn serve` gives back the memory of refused huge answers.

Found by the soak test (scripts/soak.py): under glibc's malloc, each analyst
query that builds a value up to the value limit (16 MiB) and is refused
(`sql_too_large`) raised glibc's dynamic mmap threshold, so later large
blocks stayed resident in per-thread arenas after being freed; RSS grew
without a visible end under mixed load. Cairn now runs with a fixed mmap
threshold (crates/cairn/src/main.rs)."""
import concurrent.futures
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request

MiB = 1024 * 1024
# 1000 x 1000 x 1000 bytes, built by nesting replace(): refused once a
# value passes the 16 MiB limit, after SQLite built values up to it.
HUGE = ("SELECT replace(replace(printf('%1000c', 'x'), ' ', printf('%1000c', 'y')),"
        " ' ', printf('%1000c', 'z'))")


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def sql(url, key, statement):
    request = urllib.request.Request(f"{url}/v1/sql", data=json.dumps({"sql": statement}).encode(),
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as refused:
        return refused.code, json.load(refused)


def test_refused_huge_sql_answers_leave_no_memory_behind(cairn_bin, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    env.update(CAIRN_DATA_DIR=str(tmp_path / "data"), CAIRN_ORG="acme")
    # Appending (O_APPEND): the child shares this file's offset, and a
    # write made between our seek(0) and read() would land at offset 0,
    # over the first lines (the admin key).
    log = open(tmp_path / "serve.log", "a+")
    proc = subprocess.Popen([cairn_bin, "serve", "--listen", "127.0.0.1:0"], env=env,
                            stdout=log, stderr=subprocess.DEVNULL)
    try:
        text = ""
        for _ in range(400):
            log.seek(0)
            text = log.read()
            if "listening on" in text or proc.poll() is not None:
                break
            time.sleep(0.05)
        url = re.search(r"http://[0-9.:]+", text).group(0)
        key = re.search(r"cairn_[A-Za-z0-9_-]+", text).group(0)
        # Warm up with ordinary queries: pools, caches and arenas settle.
        for _ in range(30):
            assert sql(url, key, "SELECT count(*) FROM steps")[0] == 200
        before = rss(proc.pid)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: sql(url, key, HUGE), range(200)))
        assert all(status == 400 and body["error"]["code"] == "sql_too_large" for status, body in answers), answers[:3]
        grown = rss(proc.pid) - before
        # Under glibc's dynamic threshold this grew by 80-90 MiB.
        assert grown < 24 * MiB, f"RSS grew by {grown / MiB:.1f} MiB after 200 refused huge answers"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
