// A client of Cairn's REST API over the platform's `fetch` (Node 18+ and
// browsers): every operation of docs/openapi.json, typed
// inputs, one error type carrying the server's stable error code, and
// bounded retries on the refusals the server asks callers to retry
// (429 and 503, with Retry-After), as the Python client retries them:
//
// - reads (GET, and the read-only POSTs: SQL, thinking parse, bundle
//   verification): on 429, 503 and when the server could not be reached;
// - writes that carry their own identity, so that a repeat can never be
//   recorded twice (a step with its trace_id and step_index, a batch or a
//   turn whose every step has both, the turn with its turn_id and no
//   thinking text, an audit event with its event_id, a signed trace): on
//   429 and 503;
// - any other write: on 429 only. A 429 is a refusal before any work; a
//   503 `timeout` or `storage_failure` may come after the write was
//   recorded, and a ledger cannot take a duplicate back, so it is thrown
//   for the caller to decide.

import { unknownOption } from "./verdict.js";

export type Json = null | boolean | number | string | Json[] | { [name: string]: Json };
export type JsonRecord = { [name: string]: Json };

export type DetailLevel = "generic" | "detailed" | "full";
export type Links = Partial<Record<"approval_request" | "audit_event" | "corrects" | "parent" | "policy_decision" | "tool_call", string>>;

/** A step to record (`StepInput` of the OpenAPI document). Unknown members
 * are refused by the server, so a misspelt name is an error, never a loss. */
export interface StepInput {
  session_id: string;
  /** One of the canonical kinds or an accepted spelling (`Observation`, `ToolCall`, `thinking`, ...). */
  step_type: string;
  agent_id?: string;
  org_id?: string;
  content?: string;
  input_data?: Json;
  output_data?: Json;
  confidence?: number;
  duration_ms?: number;
  token_count?: number;
  model?: string;
  metadata?: Json;
  turn_id?: string;
  turn_step?: number;
  task_id?: string;
  links?: Links;
  status?: "ok" | "flagged";
  // For steps an agent signs itself (FORMAT.md 7.3):
  trace_id?: string;
  step_index?: number;
  created_at?: string;
  seed?: string;
  signature?: { key_id: string; signature: string };
  hash_agent_id?: boolean;
}

export interface StepResult {
  trace_id: string;
  step_index: number;
  current_hash: string;
  seq: number;
  [name: string]: Json | undefined;
}

/** `POST /v1/steps/batch`: 200 however many steps the ledger refused (check `refused`). */
export interface BatchResult {
  accepted: number;
  refused: number;
  results: (StepResult | { error: { code: string; message: string; field?: string } })[];
}

export interface SessionInput {
  session_id: string;
  agent_id?: string;
  profile?: "standard" | "strict";
  predecessor?: string;
  predecessor_session?: string;
  full_consent?: boolean;
  hash_agent_id?: boolean;
}

export interface TurnInput {
  turn_id?: string;
  agent_id?: string;
  model?: string;
  thinking?: string;
  steps?: Omit<StepInput, "session_id">[];
}

/**
 * A witness policy for the server's verification: the witnesses' cosignature
 * keys (vkeys) and how many of them must have cosigned (default: all).
 */
export interface WitnessPolicy {
  witnesses?: readonly string[];
  quorum?: number;
}

export interface AuditEventInput {
  action: string;
  event_id?: string;
  session_id?: string;
  detail?: Json;
}

export interface ExportOptions {
  session?: string;
  agent?: string;
  since?: string;
  until?: string;
  all?: boolean;
  level?: DetailLevel;
  /** Add a consistency line from this earlier log size (one you trust) to the bundle's checkpoint. */
  sinceSize?: number;
}

/**
 * Base64 of a signed checkpoint note, as the verify endpoints take it (a
 * note given already in base64, with no line end, is sent as is).
 */
function noteParam(note: string): string {
  if (!note.includes("\n")) return note;
  const bytes = new TextEncoder().encode(note);
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

export interface RetryOptions {
  /** Further attempts after the first (default 3). */
  retries?: number;
  /** First backoff when the server gives no Retry-After (default 250 ms), doubled each attempt. */
  baseDelayMs?: number;
  /** No single wait is longer than this (default 10 s), whatever Retry-After says. */
  maxDelayMs?: number;
}

export interface CairnClientOptions {
  /** The server's base URL, e.g. `http://127.0.0.1:8714`. */
  baseUrl: string;
  /** A Cairn API key (`cairn_...`), sent as a bearer token. */
  apiKey: string;
  /** The agent steps and sessions are recorded for when a call names none. */
  agentId?: string;
  /** Another fetch (a test double, an instrumented one). */
  fetch?: typeof fetch;
  retry?: RetryOptions;
  /** Per attempt (default 30 s). */
  timeoutMs?: number;
}

/** An error answer from the server, or no answer at all (`status` 0). */
export class CairnError extends Error {
  override name = "CairnError";
  constructor(
    /** The HTTP status, 0 when the server could not be reached. */
    readonly status: number,
    /** Cairn's stable error code (`unknown_step_type`, `session_sealed`, `not_found`, ...). */
    readonly code: string,
    message: string,
    /** The input field the error concerns, when there is one. */
    readonly field?: string,
    /** Seconds the server asked to wait (Retry-After), when it did. */
    readonly retryAfter?: number,
  ) {
    super(message);
  }
}

type Query = Record<string, string | number | boolean | readonly string[] | undefined>;

/** Which failures a request may be sent again after (see the module's comment). */
type Safety = "read" | "idempotent" | "write";

interface RequestOptions {
  query?: Query;
  body?: unknown;
  /** Content type of a body sent as is (a string or bytes). */
  contentType?: string;
  /** Default: "read" for GET, "write" for any other method. */
  safety?: Safety;
}

/**
 * Whether a step carries its own identity: its trace_id and its step_index
 * (`null`, as JSON built elsewhere may hold, is none: the server gives the
 * step a new id).
 */
function ownsIdentity(step: { trace_id?: string | null; step_index?: number | null }): boolean {
  return step.trace_id != null && step.step_index != null;
}


/** Retry-After as seconds or an HTTP date; undefined when absent or unreadable. */
function retryAfterSeconds(header: string | null): number | undefined {
  if (header === null) return undefined;
  const text = header.trim();
  if (/^[0-9]+$/.test(text)) return Number(text);
  const date = Date.parse(text);
  return Number.isNaN(date) ? undefined : Math.max(0, (date - Date.now()) / 1000);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** What a failed fetch or body read was, for an `unreachable` error. */
function describe(e: unknown): string {
  const message = e instanceof Error ? e.message : String(e);
  return e instanceof Error && e.name === "AbortError" ? `no answer for the request's timeout (${message})` : message;
}

/**
 * A timer that aborts a request when the server is silent for `ms`: it
 * starts with the request and starts again with each piece of the body.
 */
class Waiting {
  private readonly controller = new AbortController();
  private timer: ReturnType<typeof setTimeout> | undefined;
  readonly signal = this.controller.signal;

  constructor(private readonly ms: number) {
    this.again();
  }

  /** The server answered something: its next silence is timed afresh. */
  again(): void {
    this.stop();
    this.timer = setTimeout(() => this.controller.abort(new DOMException("timed out", "AbortError")), this.ms);
  }

  stop(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/**
 * A response's whole body, `waiting` timed afresh for each piece; a body
 * cut short (by the server, the network or the timer) throws, and is
 * reported as `unreachable`: "the answer was cut short".
 */
async function readBody(response: Response, waiting: Waiting): Promise<Uint8Array> {
  if (response.body === null) return new Uint8Array();
  const reader = response.body.getReader();
  const pieces: Uint8Array[] = [];
  let length = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      waiting.again();
      pieces.push(value);
      length += value.length;
    }
  } catch (e) {
    throw new Error(`the answer was cut short (${describe(e)})`);
  }
  // Joined here, not with bytes.ts's `concat(...pieces)`: a long answer
  // comes in more pieces than a call takes arguments.
  const whole = new Uint8Array(length);
  let at = 0;
  for (const piece of pieces) {
    whole.set(piece, at);
    at += piece.length;
  }
  return whole;
}

export class CairnClient {
  readonly baseUrl: string;
  readonly agentId: string | undefined;
  private readonly apiKey: string;
  private readonly fetchImpl: typeof fetch;
  private readonly retries: number;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly timeoutMs: number;

  constructor(options: CairnClientOptions) {
    const unknown =
      unknownOption("new CairnClient", options, ["baseUrl", "apiKey", "agentId", "fetch", "retry", "timeoutMs"]) ??
      unknownOption("new CairnClient: retry", options.retry ?? undefined, ["retries", "baseDelayMs", "maxDelayMs"]);
    if (unknown !== undefined) throw unknown;
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.apiKey = options.apiKey;
    this.agentId = options.agentId;
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.retries = Math.max(0, options.retry?.retries ?? 3);
    this.baseDelayMs = options.retry?.baseDelayMs ?? 250;
    this.maxDelayMs = options.retry?.maxDelayMs ?? 10_000;
    this.timeoutMs = options.timeoutMs ?? 30_000;
  }

  // -- transport -----------------------------------------------------------

  private url(path: string, query?: Query): string {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value === undefined) continue;
      // A repeatable parameter (trusted checkpoints, pinned keys).
      if (Array.isArray(value)) for (const item of value) params.append(name, String(item));
      else params.set(name, String(value));
    }
    const text = params.toString();
    return this.baseUrl + path + (text ? `?${text}` : "");
  }

  /**
   * One request with retries: its 2xx answer read whole by `read`, or a
   * CairnError. `timeoutMs` bounds each wait for the server (the answer's
   * head, then each piece of its body), so a long answer that keeps coming
   * (a streamed export) is read whole; an answer cut short is `unreachable`,
   * and a read is then sent again, as a lost connection is.
   */
  private async send<T>(
    method: string,
    path: string,
    options: RequestOptions,
    read: (response: Response, body: Uint8Array) => T,
  ): Promise<T> {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.apiKey}` };
    let body: BodyInit | undefined;
    if (options.contentType !== undefined) {
      headers["Content-Type"] = options.contentType;
      body = options.body as BodyInit;
    } else if (options.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    // An id of `.` or `..` (percent-encoding leaves them as they are)
    // would be resolved away by the URL, asking another endpoint; Cairn
    // gives no record such an id.
    const dots = /\/\.\.?(?=\/|$)/.exec(path);
    if (dots !== null) {
      throw new CairnError(0, "invalid_argument", `"${dots[0].slice(1)}" is not an id a URL path can carry`);
    }
    const url = this.url(path, options.query);
    const safety = options.safety ?? (method === "GET" ? "read" : "write");
    for (let attempt = 0; ; attempt++) {
      const waiting = new Waiting(this.timeoutMs);
      let answer: { response: Response; body: Uint8Array };
      try {
        const response = await this.fetchImpl(url, { method, headers, body, signal: waiting.signal });
        if (!response.ok) {
          waiting.stop();
          const error = await this.errorOf(response);
          // A 429 is a refusal before any work; a 503 may come after a
          // write was recorded (a timeout, a lost commit), so only writes
          // that cannot be recorded twice are sent again after one.
          const retried = response.status === 429 || (response.status === 503 && safety !== "write");
          const wait = this.backoff(attempt, error.retryAfter);
          if (retried && attempt < this.retries && wait !== undefined) {
            await sleep(wait);
            continue;
          }
          throw error;
        }
        answer = { response, body: await readBody(response, waiting) };
      } catch (e) {
        waiting.stop();
        if (e instanceof CairnError) throw e;
        // Only reads are sent again after a lost connection or an answer
        // cut short: a write may have been recorded, and a ledger cannot
        // take it back.
        if (safety === "read" && attempt < this.retries) {
          await sleep(this.backoff(attempt, undefined) ?? 0);
          continue;
        }
        throw new CairnError(0, "unreachable", `${this.baseUrl}: ${describe(e)}`);
      }
      waiting.stop();
      return read(answer.response, answer.body);
    }
  }

  /**
   * The wait before attempt `attempt + 1`: what Retry-After says (plus up
   * to 10% jitter), or `baseDelayMs * 2^attempt` with jitter (between half
   * and all of it); `undefined` when Retry-After asks for longer than
   * `maxDelayMs` (the refusal is then thrown at once, for the caller to
   * decide), as the Python client does.
   */
  private backoff(attempt: number, retryAfter: number | undefined): number | undefined {
    if (retryAfter !== undefined) {
      const wanted = retryAfter * 1000;
      return wanted > this.maxDelayMs ? undefined : Math.min(this.maxDelayMs, wanted * (1 + Math.random() / 10));
    }
    const full = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** attempt);
    return full / 2 + (Math.random() * full) / 2;
  }

  private async errorOf(response: Response): Promise<CairnError> {
    const retryAfter = retryAfterSeconds(response.headers.get("Retry-After"));
    const text = await response.text().catch(() => "");
    try {
      const parsed = JSON.parse(text) as { error?: { code?: unknown; message?: unknown; field?: unknown } };
      const error = parsed.error;
      if (error && typeof error.code === "string") {
        return new CairnError(
          response.status,
          error.code,
          typeof error.message === "string" ? error.message : "",
          typeof error.field === "string" ? error.field : undefined,
          retryAfter,
        );
      }
    } catch {
      // Not Cairn's error shape (a proxy's page, say): reported as is below.
    }
    return new CairnError(response.status, "http_error", text.slice(0, 500), undefined, retryAfter);
  }

  /** One request with retries, its answer discarded; throws CairnError. */
  async request(method: string, path: string, options: RequestOptions = {}): Promise<void> {
    await this.send(method, path, options, () => undefined);
  }

  private json<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    return this.send(method, path, options, (response, body) => {
      if (response.status === 204) return undefined as T;
      const text = new TextDecoder().decode(body);
      try {
        return JSON.parse(text) as T;
      } catch {
        // Not JSON (a proxy's page, an empty answer): reported as is.
        throw new CairnError(response.status, "http_error", text.slice(0, 500));
      }
    });
  }

  private text(method: string, path: string, options: RequestOptions = {}): Promise<string> {
    return this.send(method, path, options, (_, body) => new TextDecoder().decode(body));
  }

  private bytes(method: string, path: string, options: RequestOptions = {}): Promise<Uint8Array> {
    return this.send(method, path, options, (_, body) => body);
  }

  /** `input` as the client's agent's when it names none (`agent_id` absent or null). */
  private withAgent<T extends { agent_id?: string | null }>(input: T): T {
    return input.agent_id == null && this.agentId !== undefined ? { ...input, agent_id: this.agentId } : input;
  }

  // -- service ---------------------------------------------------------------

  /** `GET /healthz`. */
  health(): Promise<JsonRecord> {
    return this.json("GET", "/healthz");
  }

  /** `GET /openapi.json`: the API description the server serves. */
  openapi(): Promise<JsonRecord> {
    return this.json("GET", "/openapi.json");
  }

  /** `GET /metrics`: Prometheus text (admin keys). */
  metrics(): Promise<string> {
    return this.text("GET", "/metrics");
  }

  // -- sessions and steps ------------------------------------------------------

  /** `POST /v1/sessions`: opens a session explicitly (strict profile, continuation, consent); returns its genesis. */
  startSession(input: SessionInput): Promise<JsonRecord> {
    return this.json("POST", "/v1/sessions", { body: this.withAgent(input) });
  }

  /**
   * `GET /v1/sessions`: an agent's recent sessions, newest first (a list, as seed 000's).
   * Filters: `kind` (sessions with a step of that kind), `flagged`, `since` and `until`
   * (RFC 3339 or a date, on the start time). A full page continues with `cursor` set to
   * the last row's `cursor`.
   */
  listSessions(
    options: {
      agentId?: string;
      limit?: number;
      verify?: boolean;
      kind?: string;
      flagged?: boolean;
      since?: string;
      until?: string;
      cursor?: string;
    } = {},
  ): Promise<JsonRecord[]> {
    const unknown = unknownOption("listSessions", options, ["agentId", "limit", "verify", "kind", "flagged", "since", "until", "cursor"]);
    if (unknown !== undefined) return Promise.reject(unknown);
    return this.json("GET", "/v1/sessions", {
      query: {
        agent_id: options.agentId ?? this.agentId,
        limit: options.limit,
        verify: options.verify,
        kind: options.kind,
        flagged: options.flagged,
        since: options.since,
        until: options.until,
        cursor: options.cursor,
      },
    });
  }

  /** `GET /v1/sessions/{id}`: replays a session; with `verify`, every hash is recomputed (`chain_valid`). */
  getSession(sessionId: string, options: { verify?: boolean; level?: DetailLevel } = {}): Promise<JsonRecord> {
    const unknown = unknownOption("getSession", options, ["verify", "level"]);
    if (unknown !== undefined) return Promise.reject(unknown);
    return this.json("GET", `/v1/sessions/${encodeURIComponent(sessionId)}`, { query: { verify: options.verify, level: options.level } });
  }

  /** `GET /v1/sessions/{id}?format=markdown`: the session as Markdown. */
  getSessionMarkdown(sessionId: string, options: { level?: DetailLevel } = {}): Promise<string> {
    const unknown = unknownOption("getSessionMarkdown", options, ["level"]);
    if (unknown !== undefined) return Promise.reject(unknown);
    return this.text("GET", `/v1/sessions/${encodeURIComponent(sessionId)}`, { query: { format: "markdown", level: options.level } });
  }

  /** `GET /v1/sessions/{id}/verify`: the session's chain verdict. */
  verifySession(sessionId: string): Promise<JsonRecord> {
    return this.json("GET", `/v1/sessions/${encodeURIComponent(sessionId)}/verify`);
  }

  /** `POST /v1/sessions/{id}/seal`: signs the session's Merkle root; nothing can follow. */
  sealSession(sessionId: string, options: { requireReflection?: boolean } = {}): Promise<JsonRecord> {
    const unknown = unknownOption("sealSession", options, ["requireReflection"]);
    if (unknown !== undefined) return Promise.reject(unknown);
    return this.json("POST", `/v1/sessions/${encodeURIComponent(sessionId)}/seal`, {
      query: { require_reflection: options.requireReflection },
    });
  }

  /** `GET /v1/sessions/{id}/root`: the session's Merkle root. */
  sessionRoot(sessionId: string): Promise<JsonRecord> {
    return this.json("GET", `/v1/sessions/${encodeURIComponent(sessionId)}/root`);
  }

  /** `POST /v1/steps`: records one step. */
  logStep(step: StepInput): Promise<StepResult> {
    return this.json("POST", "/v1/steps", { body: this.withAgent(step), safety: ownsIdentity(step) ? "idempotent" : "write" });
  }

  /** `POST /v1/steps/batch`: records many steps in one request; one result or error per step. */
  logSteps(steps: StepInput[]): Promise<BatchResult> {
    const own = steps.length > 0 && steps.every(ownsIdentity);
    return this.json("POST", "/v1/steps/batch", { body: steps.map((s) => this.withAgent(s)), safety: own ? "idempotent" : "write" });
  }

  /** `GET /v1/steps/{trace_id}`: one step. */
  getStep(traceId: string): Promise<JsonRecord> {
    return this.json("GET", `/v1/steps/${encodeURIComponent(traceId)}`);
  }

  /** `POST /v1/sessions/{id}/turns`: a turn (its thinking parsed into steps, or steps given). */
  recordTurn(sessionId: string, turn: TurnInput): Promise<JsonRecord> {
    // A turn is recognised when sent again only with its turn_id, no
    // thinking text (whose steps get new ids) and every step's identity.
    const own = turn.turn_id != null && turn.thinking == null && turn.steps != null
      && turn.steps.length > 0 && turn.steps.every(ownsIdentity);
    return this.json("POST", `/v1/sessions/${encodeURIComponent(sessionId)}/turns`, {
      body: this.withAgent(turn),
      safety: own ? "idempotent" : "write",
    });
  }

  /** `GET /v1/sessions/{id}/turns/{turn_id}`. */
  getTurn(sessionId: string, turnId: string): Promise<JsonRecord> {
    return this.json("GET", `/v1/sessions/${encodeURIComponent(sessionId)}/turns/${encodeURIComponent(turnId)}`, { query: { format: "json" } });
  }

  /** `GET /v1/sessions/{id}/turns/{turn_id}?format=markdown`. */
  getTurnMarkdown(sessionId: string, turnId: string): Promise<string> {
    return this.text("GET", `/v1/sessions/${encodeURIComponent(sessionId)}/turns/${encodeURIComponent(turnId)}`, { query: { format: "markdown" } });
  }

  /** `GET /v1/sessions/{id}/trail`: the session's turns, steps and reviews. */
  getTrail(sessionId: string): Promise<JsonRecord> {
    return this.json("GET", `/v1/sessions/${encodeURIComponent(sessionId)}/trail`, { query: { format: "json" } });
  }

  /** `GET /v1/sessions/{id}/trail?format=markdown`. */
  getTrailMarkdown(sessionId: string): Promise<string> {
    return this.text("GET", `/v1/sessions/${encodeURIComponent(sessionId)}/trail`, { query: { format: "markdown" } });
  }

  /** `POST /v1/thinking/parse`: splits a model's thinking text into steps, recording nothing. */
  parseThinking(text: string): Promise<JsonRecord> {
    return this.json("POST", "/v1/thinking/parse", { body: { text }, safety: "read" });
  }

  // -- oversight ------------------------------------------------------------------

  /** `POST /v1/steps/{trace_id}/erase`: replaces the payload with its commitments (the chain still verifies). */
  eraseStep(traceId: string, reason: string): Promise<JsonRecord> {
    return this.json("POST", `/v1/steps/${encodeURIComponent(traceId)}/erase`, { body: { reason } });
  }

  /** `POST /v1/steps/{trace_id}/review`: a person's decision on a step. */
  reviewStep(traceId: string, review: { decision: "approve" | "reject" | "escalate"; note?: string }): Promise<JsonRecord> {
    return this.json("POST", `/v1/steps/${encodeURIComponent(traceId)}/review`, { body: review });
  }

  /** `GET /v1/reviews`: flagged steps awaiting review (`all`: every review). */
  listReviews(options: { all?: boolean; limit?: number } = {}): Promise<JsonRecord> {
    const unknown = unknownOption("listReviews", options, ["all", "limit"]);
    if (unknown !== undefined) return Promise.reject(unknown);
    return this.json("GET", "/v1/reviews", { query: { all: options.all, limit: options.limit } });
  }

  /** `POST /v1/audit-events`: an application's own audit event, in the log. */
  recordAuditEvent(event: AuditEventInput): Promise<JsonRecord> {
    return this.json("POST", "/v1/audit-events", { body: event, safety: event.event_id != null ? "idempotent" : "write" });
  }

  /** `GET /v1/audit-events/{event_id}`. */
  getAuditEvent(eventId: string): Promise<JsonRecord> {
    return this.json("GET", `/v1/audit-events/${encodeURIComponent(eventId)}`);
  }

  /**
   * `GET /v1/search`: steps found by words (`mode: "fulltext"`: words, "a phrase", prefix*, -excluded),
   * by meaning (`"semantic"`) or both (`"hybrid"`, the default), with filters; each result has
   * `score`, `matched_by`, `snippet` and `highlights` (character ranges of the snippet).
   */
  search(
    q: string,
    options: {
      limit?: number;
      mode?: "fulltext" | "semantic" | "hybrid";
      agentId?: string;
      sessionId?: string;
      kind?: string;
      status?: "ok" | "flagged";
      since?: string;
      until?: string;
    } = {},
  ): Promise<JsonRecord> {
    // From plain JavaScript, `search({q: "..."})` would search for
    // "[object Object]" and find nothing, silently.
    if (typeof q !== "string") {
      return Promise.reject(new TypeError(`search(q, options): q is the query text, a string, not ${typeof q}`));
    }
    const unknown = unknownOption("search", options, ["limit", "mode", "agentId", "sessionId", "kind", "status", "since", "until"]);
    if (unknown !== undefined) return Promise.reject(unknown);
    return this.json("GET", "/v1/search", {
      query: {
        q,
        limit: options.limit,
        mode: options.mode,
        agent_id: options.agentId,
        session_id: options.sessionId,
        kind: options.kind,
        status: options.status,
        since: options.since,
        until: options.until,
      },
    });
  }

  /** `POST /v1/sql`: one read-only query over the views steps, sessions and records. */
  sql(sql: string, options: { limit?: number } = {}): Promise<JsonRecord> {
    const unknown = unknownOption("sql", options, ["limit"]);
    if (unknown !== undefined) return Promise.reject(unknown);
    return this.json("POST", "/v1/sql", { body: options.limit === undefined ? { sql } : { sql, limit: options.limit }, safety: "read" });
  }

  // -- the log, proofs and exports -------------------------------------------------

  /**
   * `GET /v1/verify`: the server verifies the whole org; with `trustedCheckpoints`
   * (signed notes you kept), it also proves the log consistent with each.
   */
  verify(trustedCheckpoints: readonly string[] = [], witnesses: WitnessPolicy = {}): Promise<JsonRecord> {
    const unknown = unknownOption("verify", witnesses, ["witnesses", "quorum"]);
    if (unknown !== undefined) return Promise.reject(unknown);
    return this.json("GET", "/v1/verify", {
      query: { checkpoint: trustedCheckpoints.map(noteParam), witness: witnesses.witnesses ?? [], quorum: witnesses.quorum },
    });
  }

  /** `GET /v1/tlog/checkpoint`: the same cosigned checkpoint at the C2SP tlog-tiles path. */
  tlogCheckpoint(): Promise<string> {
    return this.text("GET", "/v1/tlog/checkpoint");
  }

  /** `GET /v1/checkpoint`: the latest signed checkpoint (a C2SP signed note). Keep it. */
  checkpoint(): Promise<string> {
    return this.text("GET", "/v1/checkpoint");
  }

  /** `GET /v1/proofs/inclusion`: the RFC 9162 inclusion proof of the entry at `seq`. */
  inclusionProof(seq: number, size?: number): Promise<JsonRecord> {
    return this.json("GET", "/v1/proofs/inclusion", { query: { seq, size } });
  }

  /** `GET /v1/proofs/consistency`: the RFC 9162 consistency proof between two sizes. */
  consistencyProof(oldSize: number, newSize?: number): Promise<JsonRecord> {
    return this.json("GET", "/v1/proofs/consistency", { query: { old: oldSize, new: newSize } });
  }

  /**
   * `GET /v1/receipts/inclusion`: the COSE Receipt (RFC 9942, CBOR bytes) of the
   * entry at `seq` in the tree of `size` entries (default: the latest checkpoint's).
   */
  async inclusionReceipt(seq: number, size?: number): Promise<Uint8Array> {
    return this.bytes("GET", "/v1/receipts/inclusion", { query: { seq, size } });
  }

  /**
   * `GET /v1/receipts/consistency`: the COSE Receipt (RFC 9942, CBOR bytes) of
   * consistency from size `oldSize` to `newSize` (default: the latest checkpoint's).
   */
  async consistencyReceipt(oldSize: number, newSize?: number): Promise<Uint8Array> {
    return this.bytes("GET", "/v1/receipts/consistency", { query: { old: oldSize, new: newSize } });
  }

  /** `GET /v1/export`: a bundle (JSON Lines) that `verifyBundle` checks offline. */
  export(options: ExportOptions = {}): Promise<string> {
    const unknown = unknownOption("export", options, ["session", "agent", "since", "until", "all", "level", "sinceSize"]);
    if (unknown !== undefined) return Promise.reject(unknown);
    const { session, agent, since, until, all, level, sinceSize } = options;
    return this.text("GET", "/v1/export", {
      query: { session, agent, since, until, all: all ? "true" : undefined, level, since_size: sinceSize },
    });
  }

  /** `POST /v1/bundles/verify`: the server's verdict on a bundle (prefer `verifyBundle`, which trusts no server). */
  verifyBundleOnServer(
    bundle: string,
    options: { keys?: readonly string[]; trustedCheckpoints?: readonly string[] } & WitnessPolicy = {},
  ): Promise<JsonRecord> {
    const unknown = unknownOption("verifyBundleOnServer", options, ["keys", "trustedCheckpoints", "witnesses", "quorum"]);
    if (unknown !== undefined) return Promise.reject(unknown);
    const query = {
      key: options.keys ?? [],
      checkpoint: (options.trustedCheckpoints ?? []).map(noteParam),
      witness: options.witnesses ?? [],
      quorum: options.quorum,
    };
    return this.json("POST", "/v1/bundles/verify", { body: bundle, contentType: "application/x-ndjson", query, safety: "read" });
  }

  // -- keys ---------------------------------------------------------------------------

  /**
   * `POST /v1/keys`: a new API key (its secret is shown once). With
   * `expires_at` (RFC 3339, in the future) it is refused from then on.
   */
  createKey(input: {
    role: "writer" | "reader" | "auditor" | "admin";
    agent_id?: string;
    label?: string;
    expires_at?: string;
  }): Promise<JsonRecord> {
    return this.json("POST", "/v1/keys", { body: input });
  }

  /** `GET /v1/keys`: the org's API keys (never their secrets). */
  listKeys(): Promise<JsonRecord[]> {
    return this.json("GET", "/v1/keys");
  }

  /** `DELETE /v1/keys/{key_id}`. */
  async deleteKey(keyId: string): Promise<void> {
    await this.request("DELETE", `/v1/keys/${encodeURIComponent(keyId)}`);
  }

  /** `POST /v1/agent-keys`: registers an agent's Ed25519 public key (base64 of 32 bytes). */
  registerAgentKey(publicKey: string, agentId?: string): Promise<JsonRecord> {
    return this.json("POST", "/v1/agent-keys", { body: this.withAgent({ public_key: publicKey, agent_id: agentId }) });
  }

  /**
   * `GET /v1/agent-keys`: the org's agent key records (registrations and revocations) in
   * log order, at most `limit` (1 to 1000, default 1000) after log position `after`. A full
   * page may have more: ask again with `after` set to its last record's `seq`.
   */
  listAgentKeys(options: { after?: number; limit?: number } = {}): Promise<JsonRecord> {
    const unknown = unknownOption("listAgentKeys", options, ["after", "limit"]);
    if (unknown !== undefined) return Promise.reject(unknown);
    return this.json("GET", "/v1/agent-keys", { query: { after: options.after, limit: options.limit } });
  }

  /** `POST /v1/agent-keys/{key_id}/revoke`: from now on the key signs nothing the log accepts. */
  revokeAgentKey(keyId: string, options: { agentId?: string; reason?: string; /** @deprecated use agentId */ agent_id?: string } = {}): Promise<JsonRecord> {
    const unknown = unknownOption("revokeAgentKey", options, ["agentId", "reason", "agent_id"]);
    if (unknown !== undefined) return Promise.reject(unknown);
    const { agentId, agent_id, reason } = options;
    const body: JsonRecord = {};
    if (agentId !== undefined || agent_id !== undefined) body["agent_id"] = (agentId ?? agent_id)!;
    if (reason !== undefined) body["reason"] = reason;
    return this.json("POST", `/v1/agent-keys/${encodeURIComponent(keyId)}/revoke`, { body: this.withAgent(body) });
  }

  /** `POST /v1/agent-keys/{key_id}/rotate`: revokes the key and registers a new one in one request. */
  rotateAgentKey(keyId: string, publicKey: string, agentId?: string): Promise<JsonRecord> {
    return this.json("POST", `/v1/agent-keys/${encodeURIComponent(keyId)}/rotate`, {
      body: this.withAgent({ public_key: publicKey, agent_id: agentId }),
    });
  }

  // -- signed traces (seed 004) and OTLP ----------------------------------------------

  /** `POST /v1/signed-traces`: imports a complete agent-signed trace. */
  importSignedTrace(trace: JsonRecord, options: { sessionId?: string } = {}): Promise<JsonRecord> {
    const unknown = unknownOption("importSignedTrace", options, ["sessionId"]);
    if (unknown !== undefined) return Promise.reject(unknown);
    return this.json("POST", "/v1/signed-traces", { body: trace, query: { session_id: options.sessionId }, safety: "idempotent" });
  }

  /** `GET /v1/signed-traces/{trace_id}`. */
  getSignedTrace(traceId: string): Promise<JsonRecord> {
    return this.json("GET", `/v1/signed-traces/${encodeURIComponent(traceId)}`);
  }

  /** `POST /v1/traces`, `/v1/metrics` or `/v1/logs` with an OTLP/JSON export request.
   * Retried on 503 as on 429: a span's steps have ids derived from its trace and span
   * ids, so a resent export records nothing twice. */
  otlpJson(signal: "traces" | "metrics" | "logs", request: JsonRecord): Promise<JsonRecord> {
    return this.json("POST", `/v1/${signal}`, { body: request, safety: "idempotent" });
  }

  /** The same with an OTLP protobuf export request; resolves to the protobuf answer's bytes. */
  async otlpProtobuf(signal: "traces" | "metrics" | "logs", request: Uint8Array): Promise<Uint8Array> {
    return this.bytes("POST", `/v1/${signal}`, { body: request, contentType: "application/x-protobuf", safety: "idempotent" });
  }
}
