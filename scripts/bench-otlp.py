#!/usr/bin/env python3
"""OTLP/HTTP ingest benchmark: Cairn, and side by side (--peers) Arize
Phoenix (`phoenix serve`) and the MLflow tracking server, each on its
default SQLite store, receiving the same OTLP/HTTP protobuf payloads.

Payloads: traces of 11 spans in the GenAI semantic conventions (1
invoke_agent, 6 chat with reasoning, 4 execute_tool), about 1.4 KB per span,
100 spans per request. Several concurrent exporters send for a fixed time
and retry on 429/503 (honouring Retry-After, at most 1 s). Afterwards the
spans durably persisted are counted in each tool's own database, waiting
until the count stops growing: throughput is persisted spans over the time
from the first request to the last span being queryable. Also reported:
request latency (p50, p99 of answered attempts) and peak RSS of the server's
process tree.

Cairn-only (CI):   scripts/bench-otlp.py --cairn target/release/cairn --seconds 5
Side by side:      scripts/bench-otlp.py --cairn target/release/cairn --peers \
                       --venv /work/bench-venv --netns

Uses the standard library and the `opentelemetry-proto` package (payload
encoding). `--netns` runs everything in a fresh network namespace with only
loopback (Phoenix's gRPC receiver binds every interface otherwise).
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

SPANS_PER_REQUEST = 100


# -- payloads -----------------------------------------------------------------

TRACE_MARK = b"\xee" * 12      # replaced by 12 unique bytes per request
SPAN_MARK = b"\xdd" * 6        # replaced by 6 unique bytes per request
CONV_MARK = "QQQQQQQQQQQQQQQQ"  # replaced by 16 hex digits per request


def template(filler_bytes):
    """One request of 100 spans (9 whole traces and one started) with
    placeholder ids; returns its serialized bytes."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

    def kv(k, v):
        if isinstance(v, bool):
            return KeyValue(key=k, value=AnyValue(bool_value=v))
        if isinstance(v, int):
            return KeyValue(key=k, value=AnyValue(int_value=v))
        return KeyValue(key=k, value=AnyValue(string_value=v))

    words = "the agent weighs options checks facts and plans its next step carefully "
    text = lambda n: (words * (n // len(words) + 1))[:n]
    base = 1_780_000_000_000_000_000
    spans = []
    for i in range(SPANS_PER_REQUEST):
        trace_index, position = divmod(i, 11)
        trace_id = TRACE_MARK + trace_index.to_bytes(4, "big")
        span_id = SPAN_MARK + i.to_bytes(2, "big")
        root_id = SPAN_MARK + (trace_index * 11).to_bytes(2, "big")
        conv = f"conv-{CONV_MARK}{trace_index:08x}"
        start = base + trace_index * 10_000_000_000 + position * 500_000_000
        common = [kv("gen_ai.conversation.id", conv), kv("gen_ai.provider.name", "openai")]
        if position == 0:
            name, attrs = "invoke_agent Planner", common + [
                kv("gen_ai.operation.name", "invoke_agent"), kv("gen_ai.agent.name", "Planner"),
                kv("gen_ai.agent.id", "planner"),
                kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [
                    {"type": "text", "content": text(filler_bytes // 2)}]}])),
                kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [
                    {"type": "text", "content": text(filler_bytes // 3)}], "finish_reason": "stop"}])),
            ]
            end = start + 6_000_000_000
        elif position % 2 == 1 or position == 10:
            n = position // 2
            final = position == 10 or n >= 4
            parts = [{"type": "reasoning", "content": text(filler_bytes // 2)}]
            if final:
                parts.append({"type": "text", "content": text(filler_bytes // 4)})
            else:
                parts.append({"type": "tool_call", "id": f"call_{n}", "name": "search",
                              "arguments": {"query": text(60)}})
            name, attrs = "chat gpt-4o", common + [
                kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "gpt-4o"),
                kv("gen_ai.usage.input_tokens", 900 + position), kv("gen_ai.usage.output_tokens", 120),
                kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": parts,
                                                           "finish_reason": "stop" if final else "tool_call"}])),
            ]
            end = start + 400_000_000
        else:
            n = position // 2 - 1
            name, attrs = "execute_tool search", common + [
                kv("gen_ai.operation.name", "execute_tool"), kv("gen_ai.tool.name", "search"),
                kv("gen_ai.tool.call.id", f"call_{n}"),
                kv("gen_ai.tool.call.arguments", json.dumps({"query": text(60)})),
                kv("gen_ai.tool.call.result", json.dumps({"hits": [text(filler_bytes // 6)] * 3})),
            ]
            end = start + 300_000_000
        spans.append(Span(
            trace_id=trace_id, span_id=span_id,
            parent_span_id=b"" if position == 0 else root_id,
            name=name, kind=Span.SPAN_KIND_CLIENT if position else Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=start, end_time_unix_nano=end, attributes=attrs,
            status=Status(code=Status.STATUS_CODE_OK),
        ))
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource=Resource(attributes=[kv("service.name", "bench-agent"),
                                      kv("telemetry.sdk.language", "python")]),
        scope_spans=[ScopeSpans(scope=InstrumentationScope(name="bench", version="1.0"), spans=spans)],
    )])
    return request.SerializeToString()


class Payloads:
    """Fresh ids for every request, by patching the template's bytes."""

    def __init__(self, filler_bytes=1560):
        raw = template(filler_bytes)
        self.raw = raw
        self.trace_at = [m.start() for m in re.finditer(re.escape(TRACE_MARK), raw)]
        self.span_at = [m.start() for m in re.finditer(re.escape(SPAN_MARK), raw)]
        self.conv_at = [m.start() for m in re.finditer(CONV_MARK.encode(), raw)]
        assert len(self.trace_at) == SPANS_PER_REQUEST, len(self.trace_at)
        assert len(self.conv_at) == SPANS_PER_REQUEST

    def make(self, exporter, counter, nonce):
        buf = bytearray(self.raw)
        unique = nonce.to_bytes(4, "big") + exporter.to_bytes(4, "big") + counter.to_bytes(4, "big")
        # Span ids must not be all zero: the exporter number starts at 1.
        short = (exporter + 1).to_bytes(2, "big") + counter.to_bytes(4, "big")
        conv = unique.hex()[8:].encode()
        for at in self.trace_at:
            buf[at:at + 12] = unique
        for at in self.span_at:
            buf[at:at + 6] = short
        for at in self.conv_at:
            buf[at:at + 16] = conv
        return bytes(buf)


# -- processes ----------------------------------------------------------------

def rss_of_tree(pid):
    """Resident memory of a process and its descendants, in bytes."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            with open(f"/proc/{p}/task/{p}/children") as f:
                stack.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return total


def wait_http(url, seconds=120, ok=(200,)):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status in ok:
                    return
        except Exception:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{url} did not come up")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Target:
    name = ""
    headers = {}

    def start(self, workdir):
        raise NotImplementedError

    def count(self):
        raise NotImplementedError

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Cairn(Target):
    name = "Cairn"

    def __init__(self, binary):
        self.binary = binary
        self.proc = None

    def start(self, workdir):
        self.data = os.path.join(workdir, "cairn-data")
        # Appending: the child shares the offset this side seeks to read.
        log = open(os.path.join(workdir, "cairn.log"), "a+")
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--listen", "127.0.0.1:0", "--otlp-listen", "127.0.0.1:0"],
            env={**os.environ, "CAIRN_DATA_DIR": self.data, "CAIRN_ORG": "bench", "CAIRN_LOG": "warn",
                 "CAIRN_RETENTION_DAYS": "0"},
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            log.seek(0)
            text = log.read()
            if "OTLP/HTTP on" in text:
                break
            time.sleep(0.05)
        self.url = re.search(r"listening on (http://[0-9.:]+)", text).group(1)
        self.otlp = re.search(r"OTLP/HTTP on http://([0-9.:]+)", text).group(1)
        self.key = re.search(r"cairn_[A-Za-z0-9_-]+", text).group(0)
        self.headers = {"Authorization": f"Bearer {self.key}"}
        self.endpoint = (self.otlp, "/v1/traces")

    def count(self):
        db = sqlite3.connect(f"file:{self.data}/ledger.db?mode=ro", uri=True, timeout=30)
        try:
            return db.execute("SELECT count(*) FROM entries WHERE trace_id LIKE 'otel.%.0'").fetchone()[0]
        finally:
            db.close()

    def check(self):
        """One session replayed and verified through the REST API."""
        db = sqlite3.connect(f"file:{self.data}/ledger.db?mode=ro", uri=True, timeout=30)
        sid = db.execute("SELECT session_id FROM sessions LIMIT 1").fetchone()[0]
        db.close()
        req = urllib.request.Request(f"{self.url}/v1/sessions/{sid}?verify=true", headers=self.headers)
        with urllib.request.urlopen(req, timeout=60) as r:
            body = json.load(r)
        return body["chain_valid"] and body["step_count"] > 0


class Phoenix(Target):
    name = "Phoenix"

    def __init__(self, venv):
        self.venv = venv
        self.proc = None

    def start(self, workdir):
        self.dir = os.path.join(workdir, "phoenix")
        os.makedirs(self.dir)
        port, grpc = free_port(), free_port()
        self.proc = subprocess.Popen(
            [os.path.join(self.venv, "bin", "phoenix"), "serve"],
            env={**os.environ, "PHOENIX_WORKING_DIR": self.dir, "PHOENIX_HOST": "127.0.0.1",
                 "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(grpc),
                 "PHOENIX_TELEMETRY_ENABLED": "false"},
            stdout=open(os.path.join(workdir, "phoenix.log"), "w"), stderr=subprocess.STDOUT)
        wait_http(f"http://127.0.0.1:{port}/healthz")
        self.endpoint = (f"127.0.0.1:{port}", "/v1/traces")

    def count(self):
        db = sqlite3.connect(f"file:{self.dir}/phoenix.db?mode=ro", uri=True, timeout=30)
        try:
            return db.execute("SELECT count(*) FROM spans").fetchone()[0]
        finally:
            db.close()


class MLflow(Target):
    name = "MLflow"

    def __init__(self, venv):
        self.venv = venv
        self.proc = None
        self.headers = {"x-mlflow-experiment-id": "0"}

    def start(self, workdir):
        self.dir = os.path.join(workdir, "mlflow")
        os.makedirs(self.dir)
        port = free_port()
        self.proc = subprocess.Popen(
            [os.path.join(self.venv, "bin", "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
             "--backend-store-uri", f"sqlite:///{self.dir}/mlflow.db",
             "--default-artifact-root", f"file://{self.dir}/artifacts"],
            cwd=self.dir, env={**os.environ, "MLFLOW_ENABLE_TELEMETRY": "false", "DO_NOT_TRACK": "true"},
            stdout=open(os.path.join(workdir, "mlflow.log"), "w"), stderr=subprocess.STDOUT)
        wait_http(f"http://127.0.0.1:{port}/health")
        self.endpoint = (f"127.0.0.1:{port}", "/v1/traces")

    def count(self):
        db = sqlite3.connect(f"file:{self.dir}/mlflow.db?mode=ro", uri=True, timeout=30)
        try:
            return db.execute("SELECT count(*) FROM spans").fetchone()[0]
        finally:
            db.close()


# -- load ---------------------------------------------------------------------

def run(target, payloads, exporters, seconds, drain_seconds):
    workdir = tempfile.mkdtemp(prefix=f"bench-otlp-{target.name.lower()}-")
    target.start(workdir)
    host, path = target.endpoint
    nonce = random.getrandbits(31)
    stop_at = [0.0]
    latencies, lock = [], threading.Lock()
    stats = {"requests": 0, "retries": 0, "errors": 0, "acked_spans": 0, "rejected": 0}
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
    peak = [0]
    sampling = [True]

    def sample():
        while sampling[0]:
            peak[0] = max(peak[0], rss_of_tree(target.proc.pid))
            time.sleep(0.25)

    def exporter(index):
        conn = http.client.HTTPConnection(host, timeout=120)
        counter = 0
        while time.time() < stop_at[0]:
            body = payloads.make(index, counter, nonce)
            counter += 1
            while True:
                headers = {"Content-Type": "application/x-protobuf", **target.headers}
                t0 = time.perf_counter()
                try:
                    conn.request("POST", path, body=body, headers=headers)
                    r = conn.getresponse()
                    answer = r.read()
                    status, retry_after = r.status, r.getheader("Retry-After")
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection(host, timeout=120)
                    status, retry_after = 503, None
                took = time.perf_counter() - t0
                with lock:
                    latencies.append(took)
                    stats["requests"] += 1
                if status in (429, 502, 503, 504):
                    with lock:
                        stats["retries"] += 1
                    delay = float(retry_after) if retry_after and retry_after.isdigit() else 0.2
                    time.sleep(min(delay, 1.0) * random.uniform(0.5, 1.0))
                    if time.time() > stop_at[0] + 30:
                        break
                    continue
                rejected = 0
                if status == 200 and answer:
                    try:
                        rejected = ExportTraceServiceResponse.FromString(answer).partial_success.rejected_spans
                    except Exception:
                        pass
                with lock:
                    if status == 200:
                        stats["acked_spans"] += SPANS_PER_REQUEST - rejected
                        stats["rejected"] += rejected
                    else:
                        stats["errors"] += 1
                break
        conn.close()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.time()
    stop_at[0] = started + seconds
    threads = [threading.Thread(target=exporter, args=(i,)) for i in range(exporters)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    load_end = time.time()
    # Durable and queryable: count in the tool's own store until stable.
    count, persisted_at = -1, load_end
    deadline = load_end + drain_seconds
    while time.time() < deadline:
        try:
            now = target.count()
        except sqlite3.Error:
            now = count
        if now != count:
            count, persisted_at = now, time.time()
        elif now >= stats["acked_spans"]:
            break
        elif time.time() - persisted_at > 10:
            break
        time.sleep(0.5)
    sampling[0] = False
    checked = target.check() if hasattr(target, "check") else None
    target.stop()
    shutil.rmtree(workdir, ignore_errors=True)
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else 0
    elapsed = persisted_at - started
    return {
        "tool": target.name, "spans_persisted": count, "spans_acked": stats["acked_spans"],
        "seconds": round(elapsed, 2), "spans_per_s": round(count / elapsed, 1) if elapsed > 0 else 0,
        "requests": stats["requests"], "retries_429_503": stats["retries"], "errors": stats["errors"],
        "rejected_spans": stats["rejected"],
        "p50_ms": round(pick(0.5) * 1000, 1), "p99_ms": round(pick(0.99) * 1000, 1),
        "peak_rss_mib": round(peak[0] / 2**20, 1), "replay_verified": checked,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cairn", default=os.environ.get("CAIRN_BIN", "target/release/cairn"))
    ap.add_argument("--peers", action="store_true", help="also run Phoenix and MLflow")
    ap.add_argument("--venv", default="/work/bench-venv", help="virtualenv with arize-phoenix and mlflow")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--peer-seconds", type=float, default=30)
    ap.add_argument("--exporters", type=int, default=8)
    ap.add_argument("--drain", type=float, default=180, help="most seconds to wait for persistence")
    ap.add_argument("--netns", action="store_true", help="run in a private network namespace (loopback only)")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    if args.netns and not os.environ.get("BENCH_OTLP_IN_NETNS"):
        cmd = ["unshare", "-n", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
               sys.executable, *sys.argv]
        os.execvpe("unshare", cmd, {**os.environ, "BENCH_OTLP_IN_NETNS": "1"})
    payloads = Payloads()
    per_span = len(payloads.raw) / SPANS_PER_REQUEST
    print(f"payload: {SPANS_PER_REQUEST} spans, {len(payloads.raw)} bytes ({per_span:.0f} B/span), "
          f"{args.exporters} exporters", flush=True)
    targets = [(Cairn(os.path.abspath(args.cairn)), args.seconds)]
    if args.peers:
        targets += [(MLflow(args.venv), args.peer_seconds), (Phoenix(args.venv), args.peer_seconds)]
    results = []
    for target, seconds in targets:
        print(f"-- {target.name}: {seconds:.0f} s of load", flush=True)
        r = run(target, payloads, args.exporters, seconds, args.drain)
        print(json.dumps(r), flush=True)
        results.append(r)
    cairn = results[0]
    print("\n| tool | spans/s durable | persisted / acked | p50 ms | p99 ms | peak RSS MiB | 429/503 retries | Cairn ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        ratio = cairn["spans_per_s"] / r["spans_per_s"] if r["spans_per_s"] else float("inf")
        print(f"| {r['tool']} | {r['spans_per_s']:,.0f} | {r['spans_persisted']:,} / {r['spans_acked']:,} | "
              f"{r['p50_ms']} | {r['p99_ms']} | {r['peak_rss_mib']} | {r['retries_429_503']} | {ratio:.1f}× |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if cairn["spans_persisted"] < cairn["spans_acked"] or cairn["replay_verified"] is False:
        sys.exit("Cairn acknowledged spans it did not persist, or a replay did not verify")


if __name__ == "__main__":
    main()
