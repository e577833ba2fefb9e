"""OTLP/HTTP ingest driven by the real OpenTelemetry Python SDK and its
OTLP/HTTP exporters (protobuf: `opentelemetry-exporter-otlp-proto-http`;
JSON: `opentelemetry-exporter-otlp-json-http`), pointed at `cairn serve` on
its main port and on `--otlp-listen`.

An agent run in the GenAI semantic conventions (an `invoke_agent` span, chat
turns with reasoning parts and tool calls, tool executions, one failing) is
exported, then replayed and verified through the REST API. A retry of the
same export adds nothing; a malformed body gets 400 and writes nothing."""
import gzip
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter as JsonSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as ProtoSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode


@pytest.fixture
def otlp_server(cairn_bin, data_dir, tmp_path):
    """`cairn serve` with `--otlp-listen`; yields (url, otlp url, admin key)."""
    # Appending (O_APPEND): the child shares this file's offset, and a
    # write made between our seek(0) and read() would land at offset 0,
    # over the first lines (the admin key).
    log = open(tmp_path / "serve.log", "a+")
    proc = subprocess.Popen(
        [cairn_bin, "serve", "--listen", "127.0.0.1:0", "--otlp-listen", "127.0.0.1:0"],
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
            if "OTLP/HTTP on" in text:
                break
            if proc.poll() is not None:
                pytest.fail(f"cairn serve exited: {text}")
            time.sleep(0.05)
        url = re.search(r"listening on (http://[0-9.:]+)", text).group(1)
        otlp = re.search(r"OTLP/HTTP on (http://[0-9.:]+)", text).group(1)
        key = re.search(r"cairn_[A-Za-z0-9_-]+", text).group(0)
        yield url, otlp, key
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def call(method, url, key=None, body=None, headers=None):
    """(status, headers, body bytes) of one request."""
    request = urllib.request.Request(url, data=body, method=method)
    for k, v in (headers or {}).items():
        request.add_header(k, v)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def get_json(url, key):
    status, _, body = call("GET", url, key)
    assert status == 200, body
    return json.loads(body)


def messages(*parts, role="assistant", finish_reason=None):
    m = {"role": role, "parts": list(parts)}
    if finish_reason:
        m["finish_reason"] = finish_reason
    return json.dumps([m])


def agent_run(conversation):
    """Spans of one agent run in the GenAI conventions, recorded by the real
    SDK into memory: (spans, the in-memory exporter)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "travel-assistant"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("cairn.tests.otlp", "1.0")
    common = {"gen_ai.conversation.id": conversation, "gen_ai.provider.name": "openai"}
    with tracer.start_as_current_span("invoke_agent Travel Planner", kind=trace.SpanKind.CLIENT) as agent:
        agent.set_attributes({
            **common,
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "Travel Planner",
            "gen_ai.agent.id": "travel-planner",
            "gen_ai.input.messages": messages(
                {"type": "text", "content": "Plan a day in Paris if the weather is good."}, role="user"),
        })
        turns = [
            ("The user wants a day plan. First check the weather.\nPlan:\n1. get_weather\n2. find_museums",
             {"type": "tool_call", "id": "call_weather_1", "name": "get_weather", "arguments": {"city": "Paris"}},
             ("get_weather", "call_weather_1", {"city": "Paris"}, {"forecast": "sunny", "high_c": 24}, None)),
            ("Sunny: outdoor plans work. Look for museums as a backup.",
             {"type": "tool_call", "id": "call_museums_1", "name": "find_museums", "arguments": {"city": "Paris"}},
             ("find_museums", "call_museums_1", {"city": "Paris"}, None, "museum API timed out")),
            ("The museum search timed out; retry with a smaller radius.",
             {"type": "tool_call", "id": "call_museums_2", "name": "find_museums", "arguments": {"city": "Paris", "radius_km": 2}},
             ("find_museums", "call_museums_2", {"city": "Paris", "radius_km": 2}, ["Louvre", "Orsay"], None)),
        ]
        for i, (thinking, call_part, tool) in enumerate(turns):
            with tracer.start_as_current_span("chat gpt-4o", kind=trace.SpanKind.CLIENT) as chat:
                chat.set_attributes({
                    **common,
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.response.model": "gpt-4o-2024-08-06",
                    "gen_ai.usage.input_tokens": 100 + i,
                    "gen_ai.usage.output_tokens": 20 + i,
                    "gen_ai.output.messages": messages(
                        {"type": "reasoning", "content": thinking}, call_part, finish_reason="tool_call"),
                })
            name, call_id, arguments, result, error = tool
            with tracer.start_as_current_span(f"execute_tool {name}", kind=trace.SpanKind.INTERNAL) as span:
                span.set_attributes({
                    **common,
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": call_id,
                    "gen_ai.tool.call.arguments": json.dumps(arguments),
                })
                if error:
                    span.record_exception(TimeoutError(error))
                    span.set_status(Status(StatusCode.ERROR, error))
                    span.set_attribute("error.type", "TimeoutError")
                else:
                    span.set_attribute("gen_ai.tool.call.result", json.dumps(result))
        with tracer.start_as_current_span("chat gpt-4o", kind=trace.SpanKind.CLIENT) as chat:
            chat.set_attributes({
                **common,
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 180,
                "gen_ai.usage.output_tokens": 60,
                "gen_ai.output.messages": messages(
                    {"type": "reasoning", "content": "Weather is good and two museums are near."},
                    {"type": "text", "content": "Morning at the Louvre, lunch by the Seine, evening at Orsay."},
                    finish_reason="stop"),
            })
        agent.set_attribute("gen_ai.output.messages", messages(
            {"type": "text", "content": "Morning at the Louvre, lunch by the Seine, evening at Orsay."},
            finish_reason="stop"))
    provider.shutdown()
    return memory.get_finished_spans()


def check_session(url, key, conversation, agent="travel-planner"):
    """Replays and verifies the session; returns its steps."""
    replay = get_json(f"{url}/v1/sessions/{conversation}?verify=true", key)
    assert replay["chain_valid"] is True, replay.get("verdict")
    steps = replay["steps"]
    kinds = [s["kind"] for s in steps]
    # 8 spans: 1 agent, 4 chat, 3 tools (one failed).
    assert kinds.count("tool_call") == 3
    assert kinds.count("tool_result") == 2
    assert kinds.count("error") == 1
    assert kinds.count("decision") == 3
    assert kinds.count("final_answer") == 1
    assert kinds.count("summary") == 1
    assert kinds.count("observation") == 1
    assert "plan" in kinds and "reasoning" in kinds
    # Every step traces back to its span; ids are deterministic.
    for s in steps:
        otel = s["metadata"]["otel"]
        assert re.fullmatch(r"[0-9a-f]{32}", otel["trace_id"])
        assert s["trace_id"] == f"otel.{otel['trace_id']}.{otel['span_id']}.{otel['step']}"
        assert s["turn_id"] == otel["trace_id"]
        assert s["agent_id"] == agent
    # Tool steps carry the call id; the failed call is an error step.
    error = next(s for s in steps if s["kind"] == "error")
    assert error["content"] == "museum API timed out"
    assert error["links"]["tool_call"] == "call_museums_1"
    assert error["output_data"]["exception.type"] == "TimeoutError"
    weather = next(s for s in steps if s["kind"] == "tool_result" and s["links"]["tool_call"] == "call_weather_1")
    assert weather["output_data"] == {"forecast": "sunny", "high_c": 24}
    final = next(s for s in steps if s["kind"] == "final_answer")
    assert final["content"].startswith("Morning at the Louvre")
    assert final["token_count"] == 240
    assert final["model"] == "gpt-4o"
    # Span times are metadata, not the record's timestamp.
    assert "start_time" in steps[0]["metadata"]["otel"]
    # Chronological: the first model call's reasoning comes before the
    # first tool call, which comes before its result.
    first_call = kinds.index("tool_call")
    assert kinds.index("reasoning") < first_call < kinds.index("tool_result")
    return steps


def log_size(url, key):
    return get_json(f"{url}/v1/verify", key)["log_size"]


@pytest.mark.parametrize("port", ["main", "otlp"])
def test_protobuf_exporter_gzip_retry_and_verify(otlp_server, port):
    url, otlp, key = otlp_server
    base = url if port == "main" else otlp
    spans = agent_run("conv-proto-" + port)
    exporter = ProtoSpanExporter(
        endpoint=f"{base}/v1/traces",
        headers={"Authorization": f"Bearer {key}"},
        compression=Compression.Gzip,
    )
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    steps = check_session(url, key, "conv-proto-" + port)
    size = log_size(url, key)
    # The exporter retries (say after a timeout): nothing is added.
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    assert exporter.export(list(reversed(spans))) == SpanExportResult.SUCCESS
    assert log_size(url, key) == size
    again = get_json(f"{url}/v1/sessions/conv-proto-{port}", key)
    assert len(again["steps"]) == len(steps)
    verdict = get_json(f"{url}/v1/verify", key)
    assert verdict["verified"] is True, verdict
    exporter.shutdown()


@pytest.mark.parametrize("port", ["main", "otlp"])
def test_json_exporter_and_verify(otlp_server, port):
    url, otlp, key = otlp_server
    base = url if port == "main" else otlp
    spans = agent_run("conv-json-" + port)
    exporter = JsonSpanExporter(endpoint=f"{base}/v1/traces", headers={"Authorization": f"Bearer {key}"})
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    check_session(url, key, "conv-json-" + port)
    size = log_size(url, key)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    assert log_size(url, key) == size
    assert get_json(f"{url}/v1/verify", key)["verified"] is True
    exporter.shutdown()


def test_split_exports_and_out_of_order_spans(otlp_server):
    """Children first, parent last, in separate requests (as batch
    processors send them): one session, every step once, verified."""
    url, otlp, key = otlp_server
    spans = agent_run("conv-split")
    exporter = ProtoSpanExporter(endpoint=f"{otlp}/v1/traces", headers={"Authorization": f"Bearer {key}"})
    for chunk in (spans[:3], spans[3:6], spans[6:]):
        assert exporter.export(list(reversed(chunk))) == SpanExportResult.SUCCESS
    # The session opened before its agent span arrived: it belongs to the
    # service, and the agent span's steps are written as that agent too.
    check_session(url, key, "conv-split", agent="travel-assistant")


class ConversationOnEverySpan(SpanProcessor):
    """docs/OTLP.md's processor: copies the conversation id the agent put in
    the context's baggage onto every span it starts, so that a span
    exported before the agent span (a batch cut between them) still names
    its session."""

    def on_start(self, span, parent_context=None):
        conversation = baggage.get_baggage("gen_ai.conversation.id", parent_context)
        if conversation is not None:
            span.set_attribute("gen_ai.conversation.id", str(conversation))


def test_a_conversation_outlasting_the_batch_delay_stays_one_session(otlp_server):
    """A batch processor exports a turn's model and tool spans before its
    agent span (which names the conversation) when the turn outlasts the
    batch delay: with the conversation id on every span (the documented
    processor), two such turns are one session; without it too, since the
    spans that name no session wait for their agent span (OTLP.md "Spans
    waiting for their session"), and each turn's steps are in time
    order."""
    url, otlp, key = otlp_server

    def run(conversation, on_every_span):
        provider = TracerProvider(resource=Resource.create({"service.name": "slow-agent"}))
        if on_every_span:
            provider.add_span_processor(ConversationOnEverySpan())
        exporter = ProtoSpanExporter(endpoint=f"{otlp}/v1/traces", headers={"Authorization": f"Bearer {key}"})
        provider.add_span_processor(BatchSpanProcessor(exporter))
        tracer = provider.get_tracer("cairn.tests.otlp.slow", "1.0")
        token = context.attach(baggage.set_baggage("gen_ai.conversation.id", conversation))
        try:
            for turn in range(2):
                with tracer.start_as_current_span("invoke_agent Slow") as agent:
                    agent.set_attributes({
                        "gen_ai.operation.name": "invoke_agent",
                        "gen_ai.agent.id": "slow-agent",
                        "gen_ai.conversation.id": conversation,
                        "gen_ai.input.messages": messages(
                            {"type": "text", "content": f"question {turn}"}, role="user"),
                    })
                    with tracer.start_as_current_span("chat m") as chat:
                        chat.set_attributes({
                            "gen_ai.operation.name": "chat",
                            "gen_ai.output.messages": messages(
                                {"type": "reasoning", "content": f"thinking about {turn}"}),
                        })
                    # What a batch delay shorter than the turn does: the
                    # spans ended so far go out before the agent span.
                    provider.force_flush()
                    with tracer.start_as_current_span("execute_tool lookup") as tool:
                        tool.set_attributes({
                            "gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.name": "lookup",
                            "gen_ai.tool.call.result": json.dumps({"turn": turn}),
                        })
                    provider.force_flush()
                    agent.set_attribute("gen_ai.output.messages", messages(
                        {"type": "text", "content": f"answer {turn}"}, finish_reason="stop"))
        finally:
            context.detach(token)
        provider.shutdown()

    run("conv-slow", on_every_span=True)
    replay = get_json(f"{url}/v1/sessions/conv-slow?verify=true", key)
    assert replay["chain_valid"] is True
    contents = [s.get("content") or "" for s in replay["steps"]]
    for turn in range(2):
        for text in (f"question {turn}", f"thinking about {turn}", f"answer {turn}", f'{{"turn":{turn}}}'):
            assert any(text in c for c in contents), (text, contents)
    listed = {row["session_id"] for row in get_json(f"{url}/v1/sessions?agent_id=slow-agent", key)}
    assert listed == {"conv-slow"}, listed

    # Without it, the turns' model and tool spans go out first, naming no
    # session: they wait for their agent span and join its session, in
    # time order; no session is named after a trace.
    run("conv-split-by-delay", on_every_span=False)
    named = get_json(f"{url}/v1/sessions/conv-split-by-delay?verify=true", key)
    assert named["chain_valid"] is True
    contents = [s.get("content") or "" for s in named["steps"]]
    order = [f"question {turn}" for turn in range(2)]
    places = []
    for turn in range(2):
        for text in (f"question {turn}", f"thinking about {turn}", f'{{"turn":{turn}}}', f"answer {turn}"):
            found = [i for i, c in enumerate(contents) if text in c]
            assert found, (text, contents)
            places.append(found[0])
    assert places == sorted(places), (order, contents)
    rows = get_json(f"{url}/v1/sessions?limit=50", key)
    assert not any(re.fullmatch(r"[0-9a-f]{32}", row["session_id"]) for row in rows), rows


def test_bad_bodies_write_nothing(otlp_server):
    url, otlp, key = otlp_server
    agent_spans = agent_run("conv-seed")
    ProtoSpanExporter(endpoint=f"{url}/v1/traces", headers={"Authorization": f"Bearer {key}"}).export(agent_spans)
    size = log_size(url, key)
    proto = {"Content-Type": "application/x-protobuf"}
    for base in (url, otlp):
        status, headers, body = call("POST", f"{base}/v1/traces", key, b"\x0a\xff\xff\xff\x0f", proto)
        assert status == 400, body
        assert headers["Content-Type"] == "application/x-protobuf"
        status, _, body = call("POST", f"{base}/v1/traces", key, b'{"resourceSpans": [}',
                               {"Content-Type": "application/json"})
        assert status == 400
        error = json.loads(body)
        assert error["code"] == 3 and "OTLP/JSON" in error["message"]
        assert error["error"]["code"] == "invalid_otlp"
        status, _, body = call("POST", f"{base}/v1/traces", key, gzip.compress(b"\x0a\xff\xff"),
                               {**proto, "Content-Encoding": "gzip"})
        assert status == 400
        status, _, body = call("POST", f"{base}/v1/traces", key, b"not gzip",
                               {**proto, "Content-Encoding": "gzip"})
        assert status == 400
        status, _, _ = call("POST", f"{base}/v1/traces", key, b"hello", {"Content-Type": "text/plain"})
        assert status == 415
        status, _, body = call("POST", f"{base}/v1/traces", None, b"", proto)
        assert status == 401
        # A gzip bomb stops at the decompressed limit (16 MiB by default).
        bomb = gzip.compress(b"\x00" * (17 << 20))
        status, _, body = call("POST", f"{base}/v1/traces", key, bomb, {**proto, "Content-Encoding": "gzip"})
        assert status == 413, body
    # A seed-004 signed trace sent to the OTLP path is pointed to its own.
    signed = {"trace_id": "t-1", "components": [], "trace_level": "generic",
              "signature": "AAAA", "signature_key_id": "agent-x"}
    status, _, body = call("POST", f"{url}/v1/traces", key, json.dumps(signed).encode(),
                           {"Content-Type": "application/json"})
    assert status == 400
    assert "/v1/signed-traces" in json.loads(body)["message"]
    assert log_size(url, key) == size
    assert get_json(f"{url}/v1/verify", key)["verified"] is True


def test_metrics_and_logs_are_answered(otlp_server):
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
        ExportLogsServiceRequest, ExportLogsServiceResponse)
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest, ExportMetricsServiceResponse)
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
    from opentelemetry.proto.metrics.v1.metrics_pb2 import (
        Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics)

    url, otlp, key = otlp_server
    metrics = ExportMetricsServiceRequest(resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=[
        Metric(name="gen_ai.client.token.usage", gauge=Gauge(data_points=[NumberDataPoint(as_int=3)] * 2))])])])
    status, _, body = call("POST", f"{otlp}/v1/metrics", key, metrics.SerializeToString(),
                           {"Content-Type": "application/x-protobuf"})
    assert status == 200
    answer = ExportMetricsServiceResponse.FromString(body)
    assert answer.partial_success.rejected_data_points == 2
    assert "traces only" in answer.partial_success.error_message
    logs = ExportLogsServiceRequest(resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(
        log_records=[LogRecord(severity_text="INFO")] * 3)])])
    status, _, body = call("POST", f"{url}/v1/logs", key, logs.SerializeToString(),
                           {"Content-Type": "application/x-protobuf"})
    assert status == 200
    assert ExportLogsServiceResponse.FromString(body).partial_success.rejected_log_records == 3
    status, _, body = call("POST", f"{url}/v1/logs", key, b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{}]}]}]}',
                           {"Content-Type": "application/json"})
    assert status == 200 and json.loads(body)["partialSuccess"]["rejectedLogRecords"] == "1"
    # The OTLP listener serves nothing else.
    status, _, _ = call("GET", f"{otlp}/v1/sessions", key)
    assert status == 404
    # An endpoint given with a trailing slash, which made the path //v1/traces, is named.
    status, _, body = call("POST", f"{otlp}//v1/traces", key, b"{}", {"Content-Type": "application/json"})
    assert status == 404 and b"ends with a slash; without it the path is /v1/traces" in body, body
    status, _, text = call("GET", f"{url}/metrics")
    assert status == 200 and b"cairn_otlp_discarded_items_total 6" in text


def test_a_full_queue_answers_429_with_retry_after(cairn_bin, data_dir, tmp_path):
    """`--otlp-max-backlog 0` refuses every export: the exporter is told to
    retry, and nothing is written."""
    # Appending (O_APPEND): the child shares this file's offset, and a
    # write made between our seek(0) and read() would land at offset 0,
    # over the first lines (the admin key).
    log = open(tmp_path / "serve.log", "a+")
    proc = subprocess.Popen([cairn_bin, "serve", "--listen", "127.0.0.1:0", "--otlp-max-backlog", "0"],
                            env={**os.environ, "CAIRN_DATA_DIR": str(data_dir), "CAIRN_ORG": "acme"},
                            stdout=log, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        text = ""
        while "listening on" not in text and time.time() < deadline:
            time.sleep(0.05)
            log.seek(0)
            text = log.read()
        url = re.search(r"http://[0-9.:]+", text).group(0)
        key = re.search(r"cairn_[A-Za-z0-9_-]+", text).group(0)
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        body = encode_spans(agent_run("conv-full")).SerializeToString()
        status, headers, answer = call("POST", f"{url}/v1/traces", key, body,
                                       {"Content-Type": "application/x-protobuf"})
        assert status == 429
        assert headers.get("Retry-After") == "1"
        assert headers.get("Content-Type") == "application/x-protobuf"
        status, _, _ = call("GET", f"{url}/v1/sessions/conv-full", key)
        assert status == 404
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def test_a_key_bound_to_an_agent_writes_only_its_spans(otlp_server):
    url, otlp, key = otlp_server
    status, _, body = call("POST", f"{url}/v1/keys", key, json.dumps(
        {"role": "writer", "agent_id": "someone-else"}).encode(), {"Content-Type": "application/json"})
    assert status == 201, body
    bound = json.loads(body)["token"]
    spans = agent_run("conv-bound")
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
    status, _, body = call("POST", f"{otlp}/v1/traces", bound, encode_spans(spans).SerializeToString(),
                           {"Content-Type": "application/x-protobuf"})
    assert status == 200
    partial = ExportTraceServiceResponse.FromString(body).partial_success
    # The agent span names travel-planner: refused; the others carry no
    # agent and are written as the key's agent.
    assert partial.rejected_spans == 1
    assert "may only write as agent someone-else" in partial.error_message
    replay = get_json(f"{url}/v1/sessions/conv-bound", key)
    assert {s["agent_id"] for s in replay["steps"]} == {"someone-else"}


def test_held_spans_survive_a_crash_and_are_written_after_it(cairn_bin, data_dir, tmp_path):
    """Spans that name no session are held (acknowledged, durable) until
    the span naming it arrives. Killed with SIGKILL while they wait, the
    server writes them when it starts again, here with waiting turned off
    (`--otlp-hold-seconds 0`): into the session named after their trace,
    each step once."""
    def serve(*extra):
        log = open(tmp_path / f"serve{len(extra)}.log", "a+")
        proc = subprocess.Popen(
            [cairn_bin, "serve", "--listen", "127.0.0.1:0", *extra],
            env={**os.environ, "CAIRN_DATA_DIR": str(data_dir), "CAIRN_ORG": "acme"},
            stdout=log, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        text = ""
        while "listening on" not in text and time.time() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"cairn serve exited: {text}")
            time.sleep(0.05)
            log.seek(0)
            text = log.read()
        return proc, log, re.search(r"listening on (http://[0-9.:]+)", text).group(1)

    proc, log, url = serve()
    try:
        # The admin key is printed on the first start only.
        log.seek(0)
        key = re.search(r"cairn_[A-Za-z0-9_-]+", log.read()).group(0)
        trace_id = "6bf92f3577b34da6a3ce929d0e0e4736"
        spans = [{
            "traceId": trace_id, "spanId": f"200000000000000{i}", "parentSpanId": "00f067aa0ba902b7",
            "name": "chat", "startTimeUnixNano": str(1764900000000000000 + i * 10**9),
            "endTimeUnixNano": str(1764900000500000000 + i * 10**9),
            "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                           {"key": "gen_ai.output.messages", "value": {"stringValue": f"answer {i}"}}],
        } for i in range(1, 3)]
        body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
        status, _, answer = call("POST", f"{url}/v1/traces", key, body, {"Content-Type": "application/json"})
        assert status == 200, answer
        status, _, _ = call("GET", f"{url}/v1/sessions/{trace_id}", key)
        assert status == 404
    finally:
        proc.kill()
        proc.wait(timeout=20)
        log.close()
    proc, log, url = serve("--otlp-hold-seconds", "0")
    try:
        deadline = time.time() + 30
        while True:
            status, _, answer = call("GET", f"{url}/v1/sessions/{trace_id}?verify=true", key)
            if status == 200 and len(json.loads(answer)["steps"]) == 2:
                break
            assert time.time() < deadline, answer
            time.sleep(0.2)
        replay = json.loads(answer)
        assert replay["chain_valid"] is True
        assert [s["content"] for s in replay["steps"]] == ["answer 1", "answer 2"]
        assert get_json(f"{url}/v1/verify", key)["verified"] is True
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
