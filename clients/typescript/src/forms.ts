// The forms of a bundle's lines and records: FORMAT.md 3.1 (step fields),
// 5.2 (operational views), 7.4 (signed traces), 10.1 (entry lines) and
// 10.4 (the selection). A form that does not hold is `malformed-record`;
// these checks are made when a line is read, before any check of section 9.

import { fromBase64, fromHex } from "./bytes.js";
import { isCurvePoint } from "./ed25519.js";
import { isJsonObject, JsonDouble, type JsonObject, type JsonValue } from "./strict-json.js";
import { isCanonicalTimestamp, isRfc3339 } from "./time.js";

/** The 22 committed fields of a step, in field order (FORMAT.md 3.1). */
export const FIELDS = [
  "trace_id", "org_id", "agent_id", "session_id", "step_index", "step_type",
  "step_type_original", "content", "input_data", "output_data", "confidence",
  "duration_ms", "token_count", "model", "metadata", "created_at", "turn_id",
  "turn_step", "task_id", "links", "status", "signer_key_id",
] as const;
export type FieldName = (typeof FIELDS)[number];

export const PAYLOAD_FIELDS: ReadonlySet<string> = new Set(["content", "input_data", "output_data", "metadata"]);
export const NEVER_HIDDEN: ReadonlySet<string> = new Set([
  "org_id", "agent_id", "session_id", "step_index", "step_type", "step_type_original", "created_at", "status", "signer_key_id",
]);
/** Never-hidden fields without which a step line cannot be read at all
 * (FORMAT.md 10.1): hiding one is malformed at the line. */
const DECODED = ["step_index", "step_type", "created_at", "status"] as const;

export type Level = "generic" | "detailed" | "full";
const GENERIC = new Set([...NEVER_HIDDEN, "confidence", "duration_ms", "token_count", "turn_step"]);
const DETAILED = new Set([...GENERIC, "trace_id", "model", "turn_id", "task_id", "links"]);
/** What each detail level shows (FORMAT.md 8). */
export const LEVEL_SHOWS: Readonly<Record<Level, ReadonlySet<string>>> = {
  generic: GENERIC,
  detailed: DETAILED,
  full: new Set(FIELDS),
};

export const KINDS: ReadonlySet<string> = new Set([
  "observation", "context", "hypothesis", "reasoning", "analysis", "rationale", "conscience", "plan", "decision",
  "waiting_approval", "tool_call", "tool_result", "action", "error", "correction", "summary", "reflection", "final_answer",
]);
export const STRICT_KINDS: ReadonlySet<string> = new Set(["plan", "analysis", "decision", "reflection"]);
const LINK_NAMES = new Set(["approval_request", "audit_event", "corrects", "parent", "policy_decision", "tool_call"]);

export const OP_TYPES = [
  "session-start", "seal", "erasure", "review", "key-registration", "key-revocation", "audit-event", "signed-trace",
  "log-key", "trace-erasure",
] as const;
export type OpType = (typeof OP_TYPES)[number];
export const MAX_PROOF = 128;

/** A form that does not hold: reported as `malformed-record`. */
export class Malformed extends Error {
  override name = "Malformed";
}

export function need(ok: boolean, detail: string): asserts ok {
  if (!ok) throw new Malformed(detail);
}

// -- value checks --------------------------------------------------------

/** A non-negative integer token (`1.0` is a double, never an integer). */
export function isUint(v: unknown): v is number {
  return typeof v === "number" && Number.isInteger(v) && v >= 0;
}

export function isString(v: unknown): v is string {
  return typeof v === "string";
}

const IDENTIFIER = /^[A-Za-z0-9\-_.:@+=~]{1,200}$/;

/** An identifier of FORMAT.md 2.4. */
export function isId(v: unknown): v is string {
  return typeof v === "string" && IDENTIFIER.test(v);
}

export function isHash(v: unknown): v is string {
  return fromHex(v, 32) !== undefined;
}

function isStringOrNull(v: unknown): boolean {
  return v === null || typeof v === "string";
}

function isUintOrNull(v: unknown): boolean {
  return v === null || isUint(v);
}

export function isOpType(v: unknown): v is OpType {
  return typeof v === "string" && (OP_TYPES as readonly string[]).includes(v);
}

/** Checks that an object has exactly the members named (optional ones may
 * be absent) and returns it. */
export function members(obj: unknown, required: readonly string[], optional: readonly string[], what: string): JsonObject {
  need(isJsonObject(obj), `${what} is not a JSON object`);
  const allowed = new Set([...required, ...optional]);
  for (const name of Object.keys(obj)) need(allowed.has(name), `${what} has an unknown member ${JSON.stringify(name)}`);
  for (const name of required) need(Object.hasOwn(obj, name), `${what} lacks member ${JSON.stringify(name)}`);
  return obj;
}

// -- signed traces (7.4) ------------------------------------------------------

const JAPANESE_KINDS = new Set(["思考", "計画", "承認待ち", "実行", "エラー"]);
const EXTRA_KIND_WORDS = new Set([
  "thought", "thinking", "thoughtstart", "snapshotandcontext", "dmaresults", "idmaresult", "aspdmaresult",
  "conscienceresult", "planstep", "execute", "actionresult",
]);
const COMPACT_KINDS = new Set([...KINDS].map((k) => k.replaceAll("_", "")));
const TRIM = /^[\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/gu;

/** Whether a seed-004 `event_type` names a step kind (FORMAT.md 7.4). */
export function namesAKind(label: string): boolean {
  const trimmed = label.replace(TRIM, "");
  const bare = trimmed.startsWith("[") && trimmed.endsWith("]") && trimmed.length >= 2 ? trimmed.slice(1, -1) : trimmed;
  if (JAPANESE_KINDS.has(bare)) return true;
  const key = [...bare].filter((c) => c !== "_" && c !== "-").map((c) => (c >= "A" && c <= "Z" ? c.toLowerCase() : c)).join("");
  return COMPACT_KINDS.has(key) || EXTRA_KIND_WORDS.has(key);
}

export const TRACE_LEVELS: Readonly<Record<string, Level>> = {
  generic: "generic",
  detailed: "detailed",
  full: "full",
  full_traces: "full",
};

/** A member of a trace: `null` counts as absent. */
function traceMember(obj: JsonObject, name: string): JsonValue | undefined {
  const value = Object.hasOwn(obj, name) ? obj[name] : undefined;
  return value === null ? undefined : value;
}

export function isTrace(trace: unknown): boolean {
  if (!isJsonObject(trace)) return false;
  for (const name of ["trace_id", "agent_id_hash", "signature_key_id"]) {
    if (!isId(traceMember(trace, name))) return false;
  }
  for (const name of ["thought_id", "task_id"]) {
    const value = traceMember(trace, name);
    if (value !== undefined && !isId(value)) return false;
  }
  const level = traceMember(trace, "trace_level");
  if (typeof level !== "string" || !Object.hasOwn(TRACE_LEVELS, level)) return false;
  const signature = fromBase64(traceMember(trace, "signature"));
  if (signature === undefined || signature.length !== 64) return false;
  const components = traceMember(trace, "components");
  if (!Array.isArray(components) || components.length === 0) return false;
  for (const component of components) {
    if (!isJsonObject(component)) return false;
    const eventType = traceMember(component, "event_type");
    if (typeof eventType !== "string" || !namesAKind(eventType)) return false;
    if (typeof traceMember(component, "component_type") !== "string") return false;
    if (!isRfc3339(traceMember(component, "timestamp"))) return false;
  }
  if (!isRfc3339(traceMember(trace, "started_at"))) return false;
  const completed = traceMember(trace, "completed_at");
  return completed === undefined || isRfc3339(completed);
}

// -- operational views (5.2) -----------------------------------------------------

type Check = (v: JsonValue) => boolean;
const ANY: Check = () => true;
const isPublicKey: Check = (v) => {
  const raw = fromBase64(v);
  return raw !== undefined && raw.length === 32 && isCurvePoint(raw);
};

export const VIEW_CHECKS: Readonly<Record<OpType, Readonly<Record<string, Check>>>> = {
  "session-start": {
    org_id: isId, session_id: isId, agent_id: isId, started_at: isCanonicalTimestamp, caller: isId,
    profile: (v) => v === "standard" || v === "strict", predecessor: (v) => v === null || isHash(v),
    full_consent: (v) => typeof v === "boolean", max_clock_skew_s: isUint, genesis: isHash,
  },
  seal: {
    org_id: isId, session_id: isId, step_count: isUint, session_root: isHash, final_hash: isHash,
    sealed_at: isCanonicalTimestamp, note: isString,
  },
  erasure: {
    org_id: isId, session_id: isId, step_index: isUint, trace_id: isId,
    commitments: (v) =>
      isJsonObject(v) && Object.keys(v).length > 0 && Object.entries(v).every(([k, c]) => PAYLOAD_FIELDS.has(k) && isHash(c)),
    reason: isString, actor: isString, erased_at: isCanonicalTimestamp,
  },
  review: {
    org_id: isId, trace_id: isId, session_id: isId, step_index: isUint,
    decision: (v) => v === "approve" || v === "reject" || v === "escalate", reviewer: isString,
    note: isStringOrNull, reviewed_at: isCanonicalTimestamp,
  },
  "key-registration": {
    org_id: isId, agent_id: isId, key_id: isId, public_key: isPublicKey, registered_at: isCanonicalTimestamp,
  },
  "key-revocation": { org_id: isId, agent_id: isId, key_id: isId, reason: isString, revoked_at: isCanonicalTimestamp },
  "audit-event": { org_id: isId, event_id: isId, session_id: isStringOrNull, action: isString, detail: ANY, at: isCanonicalTimestamp },
  "signed-trace": { org_id: isId, session_id: isId, trace: isTrace },
  // `key` must also be a readable Ed25519 vkey: checked (async) as the
  // entry is read, in verifier.ts.
  "log-key": {
    org_id: isId, action: (v) => v === "add" || v === "retire", key: isString, at: isCanonicalTimestamp, note: isString,
  },
  "trace-erasure": {
    org_id: isId, session_id: isId, trace_id: isId, trace_seq: isUint, trace_hash: isHash, reason: isString,
    actor: isString, erased_at: isCanonicalTimestamp,
  },
};

// -- step fields (3.1) ---------------------------------------------------------
// Only JSON types are checked when a step is read: identifier syntax, the
// range of `confidence` and the form of `signer_key_id` are ingest rules,
// and a value breaking them fails the digest (FORMAT.md 10.1).

const FIELD_CHECKS: Readonly<Record<FieldName, Check>> = {
  trace_id: isString, org_id: isString, agent_id: isString, session_id: isString,
  step_index: isUint, step_type: (v) => typeof v === "string" && KINDS.has(v), step_type_original: isString,
  content: isStringOrNull, input_data: ANY, output_data: ANY,
  confidence: (v) => v === null || typeof v === "number" || v instanceof JsonDouble,
  duration_ms: isUintOrNull, token_count: isUintOrNull, model: isStringOrNull, metadata: ANY,
  created_at: isCanonicalTimestamp, turn_id: isStringOrNull, turn_step: isUintOrNull, task_id: isStringOrNull,
  links: (v) => isJsonObject(v) && Object.entries(v).every(([k, x]) => LINK_NAMES.has(k) && typeof x === "string"),
  status: (v) => v === "ok" || v === "flagged",
  signer_key_id: isStringOrNull,
};

// -- entry lines (10.1) ------------------------------------------------------------

interface EntryBase {
  line: number;
  seq: number;
  loggedAt: string;
  /** As recorded: a step's chain hash, an operational record's op hash. */
  recordHash: Uint8Array;
  proof: Uint8Array[] | undefined;
}

export interface StepEntry extends EntryBase {
  type: "step";
  fields: JsonObject;
  salts: Map<string, Uint8Array>;
  hidden: Map<string, Uint8Array>;
  digest: Uint8Array;
  prevHash: Uint8Array;
  signature: { keyId: string; signature: Uint8Array } | null;
}

export interface OpEntry extends EntryBase {
  type: OpType;
  view: JsonObject;
}

/** A signed-trace entry whose view an erasure withheld (FORMAT.md 8): its
 * recorded hash is all there is, held to a later trace-erasure record. */
export interface WithheldEntry extends EntryBase {
  type: "signed-trace";
  view: null;
}

export type Entry = StepEntry | OpEntry | WithheldEntry;

const STEP_MEMBERS = [
  "seq", "type", "logged_at", "fields", "salts", "hidden", "digest", "prev_hash", "hash", "signature", "has_embedding", "erased",
];
const OP_MEMBERS = ["seq", "type", "logged_at", "view", "hash"];

/** Reads an entry line's form (FORMAT.md 10.1, steps 1 and 2). A `proof`
 * is allowed here in any bundle: a complete bundle refuses it after the
 * genesis check (step 4). */
export function decodeEntry(obj: JsonValue, line: number): Entry {
  need(isJsonObject(obj), "an entry line is a JSON object");
  const type = obj["type"];
  need(type === "step" || isOpType(type), `unknown entry type ${JSON.stringify(type ?? null)}`);
  members(obj, type === "step" ? STEP_MEMBERS : OP_MEMBERS, ["proof"], "the entry");
  const seq = obj["seq"];
  need(isUint(seq), "seq is a non-negative integer");
  const loggedAt = obj["logged_at"];
  need(isCanonicalTimestamp(loggedAt), "logged_at is a canonical timestamp");
  const recordHash = fromHex(obj["hash"], 32);
  need(recordHash !== undefined, "hash is 64 lowercase hex digits");
  let proof: Uint8Array[] | undefined;
  if (Object.hasOwn(obj, "proof")) {
    const items = obj["proof"];
    need(Array.isArray(items) && items.length <= MAX_PROOF, `proof is an array of at most ${MAX_PROOF} hashes`);
    proof = items.map((p) => fromHex(p, 32)).filter((p): p is Uint8Array => p !== undefined);
    need(proof.length === items.length, "a proof hash is 64 lowercase hex digits");
  }
  const base = { line, seq, loggedAt, recordHash, proof };
  if (type !== "step" && obj["view"] === null) {
    need(type === "signed-trace", `the view is null: only a signed-trace record's view is withheld (when erased), not a ${type}'s`);
    return { ...base, type, view: null };
  }
  if (type !== "step") {
    const checks = VIEW_CHECKS[type];
    const view = members(obj["view"], Object.keys(checks), [], `the ${type} view`);
    for (const [name, check] of Object.entries(checks)) need(check(view[name]!), `the ${type} view's ${name} is not of its type`);
    return { ...base, type, view };
  }
  const fields = members(obj["fields"], [], FIELDS, "fields");
  const salts = members(obj["salts"], [], FIELDS, "salts");
  const hidden = members(obj["hidden"], [], FIELDS, "hidden");
  for (const name of FIELDS) {
    const revealed = Object.hasOwn(fields, name) && Object.hasOwn(salts, name) && !Object.hasOwn(hidden, name);
    const concealed = Object.hasOwn(hidden, name) && !Object.hasOwn(fields, name) && !Object.hasOwn(salts, name);
    need(revealed || concealed, `field ${name} must be either revealed with a salt or hidden`);
  }
  for (const name of DECODED) need(Object.hasOwn(fields, name), `field ${name} is never hidden`);
  for (const [name, value] of Object.entries(fields)) need(FIELD_CHECKS[name as FieldName](value), `field ${name} is not of its type`);
  const saltBytes = new Map<string, Uint8Array>();
  for (const [name, salt] of Object.entries(salts)) {
    const bytes = fromHex(salt, 16);
    need(bytes !== undefined, `the salt of ${name} is 32 lowercase hex digits`);
    saltBytes.set(name, bytes);
  }
  const hiddenBytes = new Map<string, Uint8Array>();
  for (const [name, commitment] of Object.entries(hidden)) {
    const bytes = fromHex(commitment, 32);
    need(bytes !== undefined, `the commitment of ${name} is 64 lowercase hex digits`);
    hiddenBytes.set(name, bytes);
  }
  const digest = fromHex(obj["digest"], 32);
  const prevHash = fromHex(obj["prev_hash"], 32);
  need(digest !== undefined && prevHash !== undefined, "digest and prev_hash are 64 lowercase hex digits");
  let signature: StepEntry["signature"] = null;
  if (obj["signature"] !== null) {
    const sig = members(obj["signature"], ["key_id", "signature"], [], "signature");
    const keyId = sig["key_id"];
    need(typeof keyId === "string", "signature.key_id is a string");
    const raw = fromBase64(sig["signature"]);
    need(raw !== undefined && raw.length === 64, "signature.signature is the base64 of 64 bytes");
    signature = { keyId, signature: raw };
  }
  need(typeof obj["has_embedding"] === "boolean" && typeof obj["erased"] === "boolean", "has_embedding and erased are booleans");
  return { ...base, type: "step", fields, salts: saltBytes, hidden: hiddenBytes, digest, prevHash, signature };
}

// -- the selection (10.4) ----------------------------------------------------------

export type Scope = { session: string } | { agent: string } | { since: string; until: string };

export interface SelectedSession {
  session_id: string;
  steps: number;
  head: string;
}

export interface Selection {
  checkpoint_size: number;
  scope: Scope;
  level: Level;
  sessions: SelectedSession[];
  records: [number, OpType][];
}

/** Reads a selection's form; the record seqs are compared with its own
 * `checkpoint_size` (its equality with the bundle's is checked later). */
export function decodeSelection(obj: JsonValue): Selection {
  const selection = members(obj, ["checkpoint_size", "scope", "level", "sessions", "records"], [], "selection");
  const size = selection["checkpoint_size"];
  need(isUint(size), "checkpoint_size is a non-negative integer");
  const scope = selection["scope"];
  need(isJsonObject(scope), "scope is an object");
  let readScope: Scope;
  if (Object.hasOwn(scope, "session")) {
    members(scope, ["session"], [], "scope");
    need(isId(scope["session"]), "scope.session is an id");
    readScope = { session: scope["session"] };
  } else if (Object.hasOwn(scope, "agent")) {
    members(scope, ["agent"], [], "scope");
    need(isId(scope["agent"]), "scope.agent is an id");
    readScope = { agent: scope["agent"] };
  } else {
    members(scope, ["since", "until"], [], "scope");
    const since = scope["since"];
    const until = scope["until"];
    need(isCanonicalTimestamp(since) && isCanonicalTimestamp(until), "scope.since and until are timestamps");
    readScope = { since, until };
  }
  const level = selection["level"];
  need(level === "generic" || level === "detailed" || level === "full", "level is generic, detailed or full");
  const sessions = selection["sessions"];
  need(Array.isArray(sessions), "sessions is an array");
  const seen = new Set<string>();
  const readSessions: SelectedSession[] = [];
  for (const item of sessions) {
    const session = members(item, ["session_id", "steps", "head"], [], "a selected session");
    const [sessionId, steps, head] = [session["session_id"], session["steps"], session["head"]];
    need(isId(sessionId) && isUint(steps) && isHash(head), "a selected session is {session_id, steps, head}");
    need(!seen.has(sessionId), `session ${sessionId} is selected twice`);
    seen.add(sessionId);
    readSessions.push({ session_id: sessionId, steps, head });
  }
  const records = selection["records"];
  need(Array.isArray(records), "records is an array");
  const readRecords: [number, OpType][] = [];
  let previous = -1;
  for (const item of records) {
    need(Array.isArray(item) && item.length === 2 && isUint(item[0]) && isOpType(item[1]), "a selected record is [seq, operational entry type]");
    const [seq, type] = item as [number, OpType];
    need(seq > previous, "selected records are in strictly increasing seq");
    need(seq < size, "a selected record lies beyond the selection's checkpoint");
    previous = seq;
    readRecords.push([seq, type]);
  }
  return { checkpoint_size: size, scope: readScope, level, sessions: readSessions, records: readRecords };
}
