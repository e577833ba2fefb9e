// CairnClient: its retries and errors against a scripted fetch, then the
// whole client under Node against a real `cairn serve` (the agent-loop
// example, an export verified offline, errors carrying their codes).

import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { runAgentLoop } from "../examples/agent-loop.js";
import { CairnClient, CairnError } from "../src/client.js";
import { verifyBundle } from "../src/verify.js";
import { cairnBin, missing } from "./helpers.js";

// -- a scripted fetch ------------------------------------------------------------

function scripted(answers: (() => Response)[]): { fetch: typeof fetch; calls: RequestInit[] } {
  const calls: RequestInit[] = [];
  const fetchDouble = (async (_url: string | URL | Request, init?: RequestInit) => {
    calls.push(init ?? {});
    const next = answers.shift();
    if (next === undefined) throw new Error("no more scripted answers");
    return next();
  }) as typeof fetch;
  return { fetch: fetchDouble, calls };
}

function errorAnswer(status: number, code: string, headers: Record<string, string> = {}, field?: string): () => Response {
  const error: Record<string, string> = { code, message: `${code} happened` };
  if (field !== undefined) error["field"] = field;
  return () => new Response(JSON.stringify({ error }), { status, headers: { "Content-Type": "application/json", ...headers } });
}

const ok = (): Response => new Response(JSON.stringify({ trace_id: "t1", step_index: 0, current_hash: "00", seq: 3 }), { status: 201 });

describe("CairnClient against a scripted fetch", () => {
  test("search from plain JavaScript with an object for its query is a TypeError, nothing sent", async () => {
    const { fetch, calls } = scripted([ok]);
    const client = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch });
    const untyped = client.search as unknown as (q: unknown) => Promise<unknown>;
    await assert.rejects(untyped.call(client, { q: "hello" }), TypeError);
    assert.equal(calls.length, 0);
  });

  test("an option the method does not take is a TypeError naming the one meant, nothing sent", async () => {
    const { fetch, calls } = scripted([ok]);
    const client = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch });
    const loose = client as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
    await assert.rejects(loose["search"]!.call(client, "revenue", { mode: "fulltext", session_id: "s2" }), /unknown option "session_id" \(the option is sessionId\)/);
    await assert.rejects(loose["listSessions"]!.call(client, { agent_id: "a" }), /the option is agentId/);
    await assert.rejects(loose["export"]!.call(client, { since_size: 3 }), /the option is sinceSize/);
    await assert.rejects(loose["listSessions"]!.call(client, "a"), /the options are an object, not string/);
    await assert.rejects(verifyBundle("", { trusted_checkpoints: [] } as never), /the option is trustedCheckpoints/);
    assert.throws(() => new CairnClient({ baseUrl: "http://cairn.invalid", api_key: "k" } as never), /the option is apiKey/);
    assert.throws(() => new CairnClient({ baseUrl: "http://x", apiKey: "k", retry: { base_delay_ms: 1 } } as never), /the option is baseDelayMs/);
    assert.equal(calls.length, 0);
    // A retry given as null means the defaults, as it did.
    new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", retry: null } as never);
    // The names it takes pass, the key's agent given either way.
    const revoke = scripted([ok, ok]);
    const keys = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch: revoke.fetch });
    await keys.revokeAgentKey("k1", { agentId: "a1", reason: "lost" });
    await keys.revokeAgentKey("k1", { agent_id: "a2" });
    assert.deepEqual(revoke.calls.map((c) => JSON.parse(c.body as string)), [{ agent_id: "a1", reason: "lost" }, { agent_id: "a2" }]);
  });

  test("429 and 503 are retried, honouring Retry-After", async () => {
    const { fetch, calls } = scripted([errorAnswer(429, "rate_limited", { "Retry-After": "0" }), errorAnswer(503, "overloaded"), ok]);
    const client = new CairnClient({ baseUrl: "http://cairn.invalid/", apiKey: "cairn_x", fetch, retry: { baseDelayMs: 1 } });
    const started = Date.now();
    // A step with its own identity: a repeat cannot record it twice.
    const result = await client.logStep({ session_id: "s1", step_type: "Observation", content: "hi", trace_id: "t1", step_index: 0 });
    assert.equal(result.seq, 3);
    assert.equal(calls.length, 3);
    assert.ok(Date.now() - started < 1000, "Retry-After: 0 means no long wait");
    assert.equal(JSON.parse(calls[0]!.body as string).session_id, "s1");
    assert.equal((calls[0]!.headers as Record<string, string>)["Authorization"], "Bearer cairn_x");
  });

  test("a write without its own identity is not sent again after a 503, which may come after it was recorded", async () => {
    const timeout = errorAnswer(503, "timeout", { "Retry-After": "0" });
    const refusedOnce = async (call: (client: CairnClient) => Promise<unknown>): Promise<number> => {
      const { fetch, calls } = scripted([timeout, ok]);
      const client = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch, retry: { baseDelayMs: 1 } });
      await call(client).catch((e: unknown) => {
        assert.ok(e instanceof CairnError && e.status === 503 && e.code === "timeout", String(e));
      });
      return calls.length;
    };
    const step = { step_type: "plan", content: "x" };
    const owned = { ...step, trace_id: "t", step_index: 0 };
    // Sent once: no identity of their own.
    for (const call of [
      (c: CairnClient) => c.logStep({ session_id: "s", ...step }),
      (c: CairnClient) => c.logSteps([{ session_id: "s", ...owned }, { session_id: "s", ...step }]),
      (c: CairnClient) => c.recordTurn("s", { turn_id: "t", steps: [owned, step] }),
      (c: CairnClient) => c.recordTurn("s", { steps: [owned] }),
      (c: CairnClient) => c.recordTurn("s", { turn_id: "t", thinking: "[思考] x", steps: [owned] }),
      (c: CairnClient) => c.recordAuditEvent({ action: "a" }),
      (c: CairnClient) => c.eraseStep("t", "why"),
      // Refused, not answered as the first, when sent again.
      (c: CairnClient) => c.deleteKey("k"),
    ]) {
      assert.equal(await refusedOnce(call), 1, String(call));
    }
    // Sent again: they carry their identity, or record nothing.
    for (const call of [
      (c: CairnClient) => c.logSteps([{ session_id: "s", ...owned }]),
      (c: CairnClient) => c.recordTurn("s", { turn_id: "t", steps: [owned] }),
      (c: CairnClient) => c.recordAuditEvent({ action: "a", event_id: "e" }),
      (c: CairnClient) => c.sql("SELECT 1"),
      (c: CairnClient) => c.parseThinking("x"),
      (c: CairnClient) => c.importSignedTrace({ trace_id: "t" }),
      (c: CairnClient) => c.otlpJson("traces", { resourceSpans: [] }),
    ]) {
      assert.equal(await refusedOnce(call), 2, String(call));
    }
  });

  test("null identity fields are no identity: such writes are not sent again after a 503", async () => {
    for (const call of [
      (c: CairnClient) => c.logStep({ session_id: "s", step_type: "plan", trace_id: null, step_index: null } as never),
      (c: CairnClient) => c.logSteps([{ session_id: "s", step_type: "plan", trace_id: null, step_index: null } as never]),
      (c: CairnClient) => c.recordTurn("s", { turn_id: "t", steps: [{ step_type: "plan", trace_id: null, step_index: null } as never] }),
      (c: CairnClient) => c.recordAuditEvent({ action: "a", event_id: null } as never),
    ]) {
      const { fetch, calls } = scripted([errorAnswer(503, "timeout", { "Retry-After": "0" }), ok]);
      const client = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch, retry: { baseDelayMs: 1 } });
      await assert.rejects(call(client), (e: unknown) => e instanceof CairnError && e.code === "timeout");
      assert.equal(calls.length, 1, String(call));
    }
  });

  test("a Retry-After past maxDelayMs is thrown at once; a silent server times out, a flowing answer does not", async () => {
    const { fetch, calls } = scripted([errorAnswer(503, "overloaded", { "Retry-After": "100" }), ok]);
    const client = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch, retry: { maxDelayMs: 50 } });
    await assert.rejects(client.checkpoint(), (e: unknown) => e instanceof CairnError && e.retryAfter === 100);
    assert.equal(calls.length, 1);
    // An answer whose pieces come 40 ms apart for 400 ms, with a 150 ms timeout: read whole.
    const slow = (signal: AbortSignal | undefined): Response => new Response(new ReadableStream({
      async start(controller) {
        for (let i = 0; i < 10; i++) {
          if (signal?.aborted) return controller.error(signal.reason);
          controller.enqueue(new TextEncoder().encode(`line ${i}\n`));
          await new Promise((r) => setTimeout(r, 40));
        }
        controller.close();
      },
    }), { status: 200 });
    const flowing = (async (_url: string | URL | Request, init?: RequestInit) => slow(init?.signal ?? undefined)) as typeof globalThis.fetch;
    const patient = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch: flowing, timeoutMs: 150 });
    assert.equal((await patient.checkpoint()).split("\n").length, 11);
    // A server that never answers: unreachable after the timeout, a read tried again.
    let asked = 0;
    const silent = (async (_url: string | URL | Request, init?: RequestInit) => {
      asked++;
      return new Promise<Response>((_, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal!.reason)));
    }) as typeof globalThis.fetch;
    const waiting = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch: silent, timeoutMs: 30, retry: { retries: 1, baseDelayMs: 1 } });
    await assert.rejects(waiting.checkpoint(), (e: unknown) => e instanceof CairnError && e.code === "unreachable" && e.message.includes("timeout"));
    assert.equal(asked, 2);
  });

  test("an id a URL cannot carry is refused before anything is sent", async () => {
    const { fetch, calls } = scripted([ok]);
    const client = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch });
    for (const id of [".", ".."]) {
      await assert.rejects(client.verifySession(id), (e: unknown) => e instanceof CairnError && e.code === "invalid_argument");
    }
    assert.equal(calls.length, 0);
  });

  test("retries are bounded, and the last refusal is thrown with its code", async () => {
    const answers = Array.from({ length: 5 }, () => errorAnswer(503, "overloaded", { "Retry-After": "0" }));
    const { fetch, calls } = scripted(answers);
    const client = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch, retry: { retries: 2, maxDelayMs: 5 } });
    const error = await client.verify().then(() => undefined, (e: unknown) => e);
    assert.ok(error instanceof CairnError);
    assert.equal(error.status, 503);
    assert.equal(error.code, "overloaded");
    assert.equal(error.retryAfter, 0);
    assert.equal(calls.length, 3, "one attempt and two retries");
  });

  test("other errors are not retried; the code and field are kept", async () => {
    const { fetch, calls } = scripted([errorAnswer(400, "invalid_request", {}, "contnet")]);
    const client = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch });
    await assert.rejects(client.logStep({ session_id: "s", step_type: "Observation" }), (e: unknown) => {
      assert.ok(e instanceof CairnError);
      assert.deepEqual([e.status, e.code, e.field, e.message], [400, "invalid_request", "contnet", "invalid_request happened"]);
      return true;
    });
    assert.equal(calls.length, 1);
  });

  test("a lost connection is retried for reads only", async () => {
    const fail = (): Response => { throw new TypeError("fetch failed"); };
    const reads = scripted([fail, () => new Response("checkpoint\n", { status: 200 })]);
    const reader = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch: reads.fetch, retry: { baseDelayMs: 1 } });
    assert.equal(await reader.checkpoint(), "checkpoint\n");
    const writes = scripted([fail, ok]);
    const writer = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch: writes.fetch, retry: { baseDelayMs: 1 } });
    await assert.rejects(writer.logStep({ session_id: "s", step_type: "Observation" }), (e: unknown) => e instanceof CairnError && e.status === 0 && e.code === "unreachable");
    assert.equal(writes.calls.length, 1, "a write is never sent twice after a lost connection");
  });

  test("a body cut short is unreachable, and a 200 that is not JSON is http_error", async () => {
    // A streamed replay whose body errors after the status line.
    const cut = (): Response => new Response(new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('{"steps":['));
        controller.error(new TypeError("terminated"));
      },
    }), { status: 200, headers: { "Content-Type": "application/json" } });
    const { fetch } = scripted([cut, cut]);
    const client = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch, retry: { retries: 0 } });
    await assert.rejects(client.getSession("s"), (e: unknown) => e instanceof CairnError && e.status === 0 && e.code === "unreachable" && e.message.includes("cut short"));
    await assert.rejects(client.export({ session: "s" }), (e: unknown) => e instanceof CairnError && e.code === "unreachable");
    // A read cut short is sent again, as after a lost connection; a write is not.
    const again = scripted([cut, () => new Response('{"steps":[]}', { status: 200 })]);
    const retrying = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch: again.fetch, retry: { baseDelayMs: 1 } });
    assert.deepEqual(await retrying.getSession("s"), { steps: [] });
    assert.equal(again.calls.length, 2);
    const written = scripted([cut, ok]);
    const writer = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch: written.fetch, retry: { baseDelayMs: 1 } });
    await assert.rejects(writer.logStep({ session_id: "s", step_type: "plan" }), (e: unknown) => e instanceof CairnError && e.code === "unreachable");
    assert.equal(written.calls.length, 1);
    const empty = scripted([() => new Response("", { status: 200 })]);
    const emptied = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch: empty.fetch });
    await assert.rejects(emptied.health(), (e: unknown) => e instanceof CairnError && e.status === 200 && e.code === "http_error");
    const page = scripted([() => new Response("<html>a proxy</html>", { status: 200 })]);
    const proxied = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch: page.fetch });
    await assert.rejects(proxied.health(), (e: unknown) => e instanceof CairnError && e.status === 200 && e.code === "http_error");
  });

  test("agent key records are asked for a page at a time", async () => {
    const urls: string[] = [];
    const recording = (async (url: string | URL | Request) => {
      urls.push(String(url));
      return new Response(JSON.stringify({ keys: [] }), { status: 200 });
    }) as typeof globalThis.fetch;
    const client = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch: recording });
    await client.listAgentKeys();
    await client.listAgentKeys({ after: 41, limit: 2 });
    assert.deepEqual(urls, ["http://cairn.invalid/v1/agent-keys", "http://cairn.invalid/v1/agent-keys?after=41&limit=2"]);
  });

  test("a step naming no agent (absent or null) is the client's agent's", async () => {
    const bodies: unknown[] = [];
    const recording = (async (_url: string | URL | Request, init?: RequestInit) => {
      bodies.push(JSON.parse(String(init?.body)));
      return new Response(JSON.stringify({ accepted: 2, refused: 0, results: [] }), { status: 200 });
    }) as typeof globalThis.fetch;
    const client = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch: recording, agentId: "a" });
    await client.logSteps([{ session_id: "s", step_type: "plan", agent_id: null } as never, { session_id: "s", step_type: "plan" }]);
    assert.deepEqual((bodies[0] as { agent_id: string }[]).map((s) => s.agent_id), ["a", "a"]);
  });

  test("a non-Cairn error body is still a CairnError", async () => {
    const { fetch } = scripted([() => new Response("<html>bad gateway</html>", { status: 502 })]);
    const client = new CairnClient({ baseUrl: "http://cairn.invalid", apiKey: "k", fetch });
    await assert.rejects(client.health(), (e: unknown) => e instanceof CairnError && e.status === 502 && e.code === "http_error");
  });
});

// -- a real server -----------------------------------------------------------------

interface Server {
  process: ChildProcess;
  url: string;
  adminKey: string;
  serverKey: string | undefined;
  dir: string;
}

async function startServer(bin: string): Promise<Server> {
  const dir = mkdtempSync(join(tmpdir(), "cairn-ts-serve-"));
  const child = spawn(bin, ["serve", "--listen", "127.0.0.1:0"], {
    env: { ...process.env, CAIRN_DATA_DIR: join(dir, "data"), CAIRN_ORG: "acme" },
    stdio: ["ignore", "pipe", "ignore"],
  });
  let output = "";
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
  const deadline = Date.now() + 30_000;
  while (!output.includes("listening on")) {
    if (child.exitCode !== null) throw new Error(`cairn serve exited: ${output}`);
    if (Date.now() > deadline) throw new Error(`cairn serve did not start: ${output}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const url = /http:\/\/[0-9.:]+/.exec(output)?.[0];
  const adminKey = /cairn_[A-Za-z0-9_-]+/.exec(output)?.[0];
  if (url === undefined || adminKey === undefined) throw new Error(`no URL or key in: ${output}`);
  // The server's vkey, when the banner prints it: pinned by the verifier.
  const serverKey = /[^\s+]+\+[0-9a-f]{8}\+[A-Za-z0-9+/]+=*/.exec(output)?.[0];
  return { process: child, url, adminKey, serverKey, dir };
}

describe("CairnClient under Node against cairn serve", () => {
  let server: Server | undefined;
  let skipped: string | undefined;

  before(async () => {
    const bin = cairnBin();
    if (bin === undefined) {
      skipped = "no cairn binary (build it with cargo build -p cairn, or set CAIRN_BIN)";
      return;
    }
    server = await startServer(bin);
  });

  after(() => {
    if (server !== undefined) {
      server.process.kill("SIGTERM");
      rmSync(server.dir, { recursive: true, force: true });
    }
  });

  test("the agent-loop example records, seals, exports, and its export verifies offline", async (t) => {
    if (server === undefined) return missing(t, skipped!);
    const client = new CairnClient({ baseUrl: server.url, apiKey: server.adminKey, agentId: "analyst" });
    const result = await runAgentLoop(client, "ts-agent-loop", { keys: server.serverKey ? [server.serverKey] : [] });
    assert.equal(result.traceIds.length, 6);
    assert.equal(result.verdict.verified, true, JSON.stringify(result.verdict.failure));
    assert.equal(result.verdict.completeLog, false);
    assert.ok(result.verdict.recordsChecked >= 7, "the session start, six steps and the seal");
    // The agent filter is applied (the server ignores a misspelt query parameter).
    const mine = await client.listSessions({ agentId: "analyst" });
    assert.ok(mine.some((s) => s["session_id"] === "ts-agent-loop"));
    assert.deepEqual(await client.listSessions({ agentId: "someone-else" }), []);
    const replay = await client.getSession("ts-agent-loop", { verify: true });
    assert.equal(replay["chain_valid"], true);

    // The same bundle with one step's content edited fails at that step.
    const lines = result.bundle.split("\n");
    const index = lines.findIndex((l) => l.includes("Querying orders"));
    lines[index] = lines[index]!.replace("Querying orders", "Querying payroll");
    const tampered = await verifyBundle(lines.join("\n"), { keys: server.serverKey ? [server.serverKey] : [] });
    assert.equal(tampered.verified, false);
    assert.equal(tampered.failure?.reason, "digest-mismatch");
    assert.equal(tampered.failure?.at.line, index + 1);
    assert.equal(tampered.failure?.at.session_id, "ts-agent-loop");
    assert.equal(tampered.failure?.at.step_index, 2);
  });

  test("a complete export verifies, and the server agrees", async (t) => {
    if (server === undefined) return missing(t, skipped!);
    const client = new CairnClient({ baseUrl: server.url, apiKey: server.adminKey, agentId: "analyst" });
    await client.logStep({ session_id: "ts-complete", step_type: "Observation", content: "one" });
    const bundle = await client.export({ all: true });
    const verdict = await verifyBundle(bundle);
    assert.equal(verdict.verified, true, JSON.stringify(verdict.failure));
    assert.equal(verdict.completeLog, true);
    const onServer = await client.verifyBundleOnServer(bundle);
    assert.equal(onServer["verified"], true);
    assert.equal(onServer["totalChecked"], verdict.recordsChecked);
    assert.match(await client.checkpoint(), /^[^\n]+\/acme\n[0-9]+\n/);
  });

  test("trusted checkpoints and consistency lines reach the server", async (t) => {
    if (server === undefined) return missing(t, skipped!);
    const client = new CairnClient({ baseUrl: server.url, apiKey: server.adminKey, agentId: "analyst" });
    await client.logStep({ session_id: "ts-trusted", step_type: "Observation", content: "before" });
    const kept = await client.checkpoint();
    const keptSize = Number(kept.split("\n")[1]);
    await client.logStep({ session_id: "ts-trusted", step_type: "Decision", content: "after" });
    const org = await client.verify([kept]);
    assert.equal(org["verified"], true, JSON.stringify(org));
    const bundle = await client.export({ session: "ts-trusted", sinceSize: keptSize });
    const verdict = await verifyBundle(bundle, { trustedCheckpoints: [kept] });
    assert.equal(verdict.verified, true, JSON.stringify(verdict.failure));
    const onServer = await client.verifyBundleOnServer(bundle, { trustedCheckpoints: [kept] });
    assert.equal(onServer["verified"], true, JSON.stringify(onServer));
    // COSE receipts (RFC 9942) arrive as the bytes of a tagged COSE_Sign1
    // (tests/python/test_cose_receipts.py verifies them with pycose).
    const inclusion = await client.inclusionReceipt(0, keptSize);
    assert.deepEqual([...inclusion.subarray(0, 2)], [0xd2, 0x84]);
    const consistency = await client.consistencyReceipt(keptSize);
    assert.deepEqual([...consistency.subarray(0, 2)], [0xd2, 0x84]);
  });

  test("errors carry the server's code", async (t) => {
    if (server === undefined) return missing(t, skipped!);
    const client = new CairnClient({ baseUrl: server.url, apiKey: server.adminKey, agentId: "analyst" });
    await assert.rejects(client.logStep({ session_id: "ts-errors", step_type: "Daydream" }), (e: unknown) => {
      assert.ok(e instanceof CairnError);
      assert.equal(e.status, 400);
      assert.equal(e.code, "unknown_step_type");
      return true;
    });
    // A misspelt member is refused with the one error shape, naming it.
    const misspelt = { session_id: "ts-errors", step_type: "Observation", contnet: "lost?" } as unknown as Parameters<CairnClient["logStep"]>[0];
    await assert.rejects(client.logStep(misspelt), (e: unknown) => {
      assert.ok(e instanceof CairnError);
      assert.equal(e.status, 400);
      assert.equal(e.code, "unknown_field");
      assert.equal(e.field, "contnet");
      assert.match(e.message, /did you mean content\?/);
      return true;
    });
    const sessions = await client.listSessions({ limit: 50 });
    assert.ok(sessions.every((s) => s["session_id"] !== "ts-errors"), "nothing was recorded for the refused steps");
    await assert.rejects(client.getStep("no-such-trace"), (e: unknown) => e instanceof CairnError && e.status === 404 && e.code === "not_found");
    const stranger = new CairnClient({ baseUrl: server.url, apiKey: "cairn_wrong" });
    await assert.rejects(stranger.verify(), (e: unknown) => e instanceof CairnError && e.status === 401 && e.code === "unauthorized");
    await client.sealSession("ts-errors").catch(() => undefined);
  });
});
