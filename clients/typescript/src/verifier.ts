// The verifier's state machine (FORMAT.md 9 and 10): a `Verifier` is fed a
// bundle's lines one by one (the header, the signed checkpoint and trusted
// checkpoints, consistency lines, a partial bundle's selection, the entries
// and the end line), checks every record as it comes (steps, operational
// records, agent and log keys, seals, erasures), and `finish` checks what
// only the end can tell; a failure throws `Fail`.

import { equalBytes, fromBase64, fromHex, frame, sha256, taggedHash, toBase64, toHex, u64be, utf8 } from "./bytes.js";
import { verifyStrict } from "./ed25519.js";
import { entryPosition, Fail, position } from "./fail.js";
import {
  decodeEntry, decodeSelection, FIELDS, isId, isUint, LEVEL_SHOWS, Malformed, MAX_PROOF, members, need,
  NEVER_HIDDEN, PAYLOAD_FIELDS, STRICT_KINDS,
  type Entry, type Level, type OpEntry, type OpType, type Selection, type StepEntry,
} from "./forms.js";
import { canonicalBytes } from "./jcs.js";
import { parseLine } from "./lines.js";
import { Frontier, leafHash, verifyConsistency, verifyInclusion, emptyRoot } from "./merkle.js";
import {
  ALG_ED25519, cosignedBy, NoteMalformed, NoteUnverified, noteSigners, openNote, parseCheckpoint, parseVkey, vkeyText,
  type NoteKey,
} from "./note.js";
import { isJsonObject, type JsonObject, type JsonValue } from "./strict-json.js";
import { canonicalMicros, isCanonicalTimestamp } from "./time.js";
import type { CosignedBy, Position } from "./verdict.js";

async function entryLeaf(e: Entry): Promise<Uint8Array> {
  return leafHash(frame("cairn/v2/log-leaf", u64be(e.seq), utf8(e.type), e.recordHash, utf8(e.loggedAt)));
}

interface SessionState {
  agentId: string;
  strict: boolean;
  skewMicros: bigint;
  head: Uint8Array;
  nextIndex: number;
  sealed: boolean;
  lastCreated: string | null;
  tree: Frontier;
}

interface AgentKey {
  agentId: string;
  publicKey: Uint8Array;
  revokedSeq: number | null;
}

/** A step showing erased payload fields, waiting for its erasure record. */
interface Erased {
  at: Position;
  traceId: string | null;
  commitments: Map<string, string>;
}

type Phase = "header" | "checkpoint" | "consistency" | "selection" | "entries" | "ended";

export class Verifier {
  keys: NoteKey[] = [];
  line = 0;
  phase: Phase = "header";
  entryLines = 0;
  checked = 0;
  lastValid: Position | null = null;
  header: JsonObject | null = null;
  orgId = "";
  origin = "";
  complete = true;
  size = 0n;
  root: Uint8Array | null = null;
  /** Trusted checkpoints of a size between 0 and the bundle's (exclusive). */
  trusted: { size: bigint; root: Uint8Array }[] = [];
  consistencySizes = new Set<bigint>();
  lastOldSize = 0n;
  selection: Selection | null = null;
  level: Level = "full";
  listedSessions = new Map<string, { steps: number; head: string }>();
  recordIndex = 0;
  tree = new Frontier();
  lastSeq: number | null = null;
  lastLoggedAt: string | null = null;
  sessions = new Map<string, SessionState>();
  /** Final hashes of sealed sessions (hex) → the session continuing each. */
  finals = new Map<string, string | null>();
  agentKeys = new Map<string, AgentKey>();
  pending = new Map<string, Erased>();
  /** Withheld signed traces (FORMAT.md 8, rule 4): seq → recorded hash. */
  withheld = new Map<number, Uint8Array>();
  /** Signed traces read with their view, and withheld ones a trace-erasure record named. */
  shownTraces = new Set<number>();
  namedTraces = new Set<number>();
  /** Log keys (7.10), by vkey text: where each was added, retired, first used. */
  added = new Map<string, number>();
  retired = new Map<string, number>();
  firstUsed = new Map<string, number>();
  /** The checkpoint's note, and a partial bundle's selection note. */
  signedNotes: string[] = [];
  /** What the bundle's checkpoint, then each trusted one, states of the
   * log-key records below its size (its `cairn-log-keys` line, 7.1). */
  logKeyCounts: { size: bigint; count: bigint }[] = [];

  /** Under a witness policy, once the checkpoint verified. */
  cosignedBy: CosignedBy | null = null;

  constructor(
    readonly pinned: NoteKey[],
    readonly trustedNotes: readonly string[],
    /** Witness cosignature keys; none: no witness policy. */
    readonly witnesses: readonly NoteKey[] = [],
    /** How many of them must have cosigned the checkpoint. */
    readonly quorum = 0,
  ) {}

  // -- lines ---------------------------------------------------------------

  async feed(raw: Uint8Array): Promise<void> {
    this.line++;
    if (this.phase === "ended") throw new Fail("malformed-record", "a line after the end line");
    if (this.phase === "header") {
      this.readHeader(this.parse(raw));
      this.phase = "checkpoint";
      return;
    }
    if (this.phase === "checkpoint") {
      await this.readCheckpoint(this.parse(raw));
      this.phase = "consistency";
      return;
    }
    let obj: JsonValue;
    try {
      obj = parseLine(raw);
    } catch (e) {
      // In the entries part such a line counts as a checked record; where a
      // consistency or selection line could still stand it counts none (9.6).
      if (this.phase === "entries") {
        this.entryLines++;
        this.checked++;
      }
      throw new Fail("malformed-record", `line ${this.line} is not strict JSON: ${(e as Error).message}`);
    }
    if (this.phase === "consistency") {
      if (isJsonObject(obj) && Object.hasOwn(obj, "consistency")) {
        await this.readConsistency(obj);
        return;
      }
      this.phase = this.complete ? "entries" : "selection";
      if (this.complete && isJsonObject(obj) && Object.hasOwn(obj, "selection")) {
        throw new Fail("malformed-record", "a complete bundle has no selection line");
      }
    }
    if (this.phase === "selection") {
      await this.readSelection(obj);
      this.phase = "entries";
      return;
    }
    if (isJsonObject(obj) && Object.hasOwn(obj, "end")) {
      this.readEnd(obj);
      this.phase = "ended";
      return;
    }
    if (isJsonObject(obj) && (Object.hasOwn(obj, "consistency") || Object.hasOwn(obj, "selection"))) {
      // Out of place: malformed where it stands, counting no record.
      throw new Fail("malformed-record", "consistency and selection lines come before the entries");
    }
    await this.readEntry(obj);
  }

  private parse(raw: Uint8Array): JsonValue {
    try {
      return parseLine(raw);
    } catch (e) {
      throw new Fail("malformed-record", `line ${this.line} is not strict JSON: ${(e as Error).message}`);
    }
  }

  private readHeader(header: JsonValue): void {
    if (isJsonObject(header) && header["cairn_bundle"] === 1) {
      throw new Fail("malformed-record", "this is a format 1 bundle (Cairn 0.1): this verifier reads format 2");
    }
    try {
      const h = members(header, ["cairn_bundle", "server_name", "org_id", "origin", "server_key", "complete_log", "exported_at"], ["log_keys"], "the header");
      need(
        !Object.hasOwn(h, "log_keys") || (Array.isArray(h["log_keys"]) && h["log_keys"].every((k) => typeof k === "string")),
        "log_keys is an array of strings",
      );
      need(h["cairn_bundle"] === 2, "cairn_bundle is 2");
      const serverName = h["server_name"];
      // No syntax of its own (FORMAT 10.1): it makes the origin and names the
      // log's keys (10.2 step 2), so a name no key can bear fails there.
      need(typeof serverName === "string", "server_name is a string");
      need(isId(h["org_id"]), "org_id is an id");
      need(typeof h["origin"] === "string", "origin is a string");
      need(typeof h["server_key"] === "string", "server_key is a string");
      need(typeof h["complete_log"] === "boolean", "complete_log is a boolean");
      need(isCanonicalTimestamp(h["exported_at"]), "exported_at is a canonical timestamp");
      need(h["origin"] === `${serverName}/${h["org_id"]}`, "origin is server_name/org_id");
      this.header = h;
      this.orgId = h["org_id"];
      this.origin = h["origin"];
      this.complete = h["complete_log"];
    } catch (e) {
      if (e instanceof Malformed) throw new Fail("malformed-record", `line 1 is not a Cairn bundle header: ${e.message}`);
      throw e;
    }
  }

  private async open(note: JsonValue | undefined, what: string, at?: Position): Promise<string> {
    try {
      return await openNote(note, this.keys);
    } catch (e) {
      if (e instanceof NoteMalformed) throw new Fail("malformed-record", `${what}: ${e.message}`, at);
      if (e instanceof NoteUnverified) throw new Fail("bad-signature", `${what}: ${e.message}`, at);
      throw e;
    }
  }

  private async readCheckpoint(obj: JsonValue): Promise<void> {
    try {
      members(obj, ["checkpoint"], [], "line 2");
      need(typeof (obj as JsonObject)["checkpoint"] === "string", "the checkpoint is a signed note");
    } catch (e) {
      if (e instanceof Malformed) throw new Fail("malformed-record", `line 2 holds the checkpoint: ${e.message}`);
      throw e;
    }
    // The header's key is read only when no key is pinned (10.2).
    if (this.pinned.length > 0) this.keys = this.pinned;
    else {
      try {
        const texts = [this.header!["server_key"], ...((this.header!["log_keys"] as JsonValue[] | undefined) ?? [])];
        this.keys = [];
        for (const text of texts) this.keys.push(await parseVkey(text));
      } catch (e) {
        throw new Fail("malformed-record", `a key in the header: ${(e as Error).message}`);
      }
    }
    // A log's keys all bear its key name, the server name of its origin
    // (FORMAT 7.10): a key of another name signs nothing of it.
    const serverName = this.header!["server_name"];
    const named = this.keys.filter((key) => key.name === serverName);
    if (this.keys.length > 0 && named.length === 0) {
      throw new Fail("bad-signature", `none of the keys is named ${String(serverName)}, the log's key name`);
    }
    this.keys = named;
    const text = await this.open((obj as JsonObject)["checkpoint"], "the checkpoint");
    this.signedNotes.push((obj as JsonObject)["checkpoint"] as string);
    let checkpoint;
    try {
      checkpoint = parseCheckpoint(text);
    } catch (e) {
      throw new Fail("malformed-record", `the checkpoint: ${(e as Error).message}`);
    }
    if (checkpoint.origin !== this.origin) {
      throw new Fail("malformed-record", `the checkpoint is of ${checkpoint.origin}, not of ${this.origin}`);
    }
    if (this.witnesses.length > 0) {
      const note = (obj as JsonObject)["checkpoint"] as string;
      const by: string[] = [];
      for (const witness of this.witnesses) if (await cosignedBy(note, witness)) by.push(witness.name);
      this.cosignedBy = { witnesses: by, quorum: this.quorum };
      if (by.length < this.quorum) {
        throw new Fail(
          "insufficient-cosignatures",
          `the bundle's checkpoint: the checkpoint carries ${by.length} valid cosignature(s) of the ${this.quorum} the witness policy needs${by.length > 0 ? ` (by ${by.join(", ")})` : ""}`,
        );
      }
    }
    this.size = checkpoint.size;
    this.root = checkpoint.root;
    if (checkpoint.logKeys !== undefined) this.logKeyCounts.push({ size: checkpoint.size, count: checkpoint.logKeys });
    for (const note of this.trustedNotes) {
      let trusted;
      try {
        trusted = parseCheckpoint(await openNote(note, this.keys));
      } catch (e) {
        throw new Fail("bad-signature", `a trusted checkpoint: ${(e as Error).message}`);
      }
      if (trusted.origin !== this.origin) {
        throw new Fail("bad-signature", `a trusted checkpoint is of ${trusted.origin}, not of ${this.origin}`);
      }
      if (trusted.size > this.size) {
        throw new Fail("missing-proof", `a trusted checkpoint of size ${trusted.size} is newer than the bundle's (${this.size}): export again`);
      }
      if (trusted.size === this.size && !equalBytes(trusted.root, this.root)) {
        throw new Fail("inconsistent-checkpoint", `the trusted checkpoint of size ${trusted.size} has another root than the bundle's`);
      }
      if (trusted.logKeys !== undefined) this.logKeyCounts.push({ size: trusted.size, count: trusted.logKeys });
      if (trusted.size > 0n && trusted.size < this.size) this.trusted.push({ size: trusted.size, root: trusted.root });
    }
  }

  private async readConsistency(obj: JsonObject): Promise<void> {
    let oldSize: bigint;
    let proof: Uint8Array[];
    try {
      members(obj, ["consistency"], [], "a consistency line");
      const body = members(obj["consistency"], ["old_size", "proof"], [], "a consistency line");
      const old = body["old_size"];
      need(isUint(old), "old_size is a non-negative integer");
      const items = body["proof"];
      need(Array.isArray(items) && items.length <= MAX_PROOF, `proof is an array of at most ${MAX_PROOF} hashes`);
      proof = items.map((p) => fromHex(p, 32)).filter((p): p is Uint8Array => p !== undefined);
      need(proof.length === items.length, "a proof hash is 64 lowercase hex digits");
      oldSize = BigInt(old);
      need(oldSize > 0n && oldSize < this.size, `old_size ${old} is not between 0 and ${this.size}`);
      need(oldSize > this.lastOldSize, "consistency lines go in increasing old_size");
    } catch (e) {
      if (e instanceof Malformed) throw new Fail("malformed-record", `line ${this.line}: ${e.message}`);
      throw e;
    }
    this.lastOldSize = oldSize;
    this.consistencySizes.add(oldSize);
    for (const t of this.trusted) {
      if (t.size === oldSize && !(await verifyConsistency(oldSize, this.size, proof, t.root, this.root!))) {
        throw new Fail("inconsistent-checkpoint", `the log at the bundle's checkpoint is not consistent with the trusted checkpoint of size ${oldSize}`);
      }
    }
  }

  private async readSelection(obj: JsonValue): Promise<void> {
    for (const t of this.trusted) {
      if (!this.consistencySizes.has(t.size)) {
        throw new Fail("missing-proof", `no consistency proof from the trusted checkpoint of size ${t.size}: export with --since-size ${t.size}`);
      }
    }
    if (!isJsonObject(obj) || !Object.hasOwn(obj, "selection")) {
      throw new Fail("missing-proof", "a partial bundle needs its signed selection here");
    }
    let selection: Selection;
    try {
      members(obj, ["selection", "note"], [], "the selection line");
      selection = decodeSelection(obj["selection"]!);
      need(typeof obj["note"] === "string", "the selection note is a string");
    } catch (e) {
      if (e instanceof Malformed) throw new Fail("malformed-record", `the selection: ${e.message}`);
      throw e;
    }
    const text = await this.open(obj["note"], "the selection note");
    this.signedNotes.push(obj["note"] as string);
    const lines = text.split("\n");
    if (lines.length !== 6 || lines[5] !== "" || lines[0] !== "cairn-selection/v2") {
      throw new Fail("malformed-record", "the selection note is not a cairn-selection/v2 note of five lines");
    }
    // Compared as text with what they must say: a line that is not even a
    // number or base64 simply says something else.
    if (lines[1] !== this.origin || lines[2] !== this.size.toString() || lines[3] !== toBase64(this.root!)) {
      throw new Fail("selection-mismatch", "the selection note speaks of another log or checkpoint");
    }
    if (BigInt(selection.checkpoint_size) !== this.size) {
      throw new Fail("selection-mismatch", `the selection is of checkpoint size ${selection.checkpoint_size}, the bundle's is ${this.size}`);
    }
    const computed = await taggedHash("cairn/v2/selection", canonicalBytes(obj["selection"]));
    if (lines[4] !== toBase64(computed)) {
      throw new Fail("digest-mismatch", `the selection hashes to ${toHex(computed)}, its note says ${lines[4]}`);
    }
    this.selection = selection;
    this.level = selection.level;
    for (const s of selection.sessions) this.listedSessions.set(s.session_id, { steps: s.steps, head: s.head });
  }

  private readEnd(obj: JsonObject): void {
    let entries: number;
    try {
      members(obj, ["end"], [], "the end line");
      const end = members(obj["end"], ["entries"], [], "the end line");
      const count = end["entries"];
      need(isUint(count), "entries is a non-negative integer");
      entries = count;
    } catch (e) {
      if (e instanceof Malformed) throw new Fail("malformed-record", e.message);
      throw e;
    }
    if (entries !== this.entryLines) {
      throw new Fail("malformed-record", `the end line counts ${entries} entries, ${this.entryLines} were read`);
    }
  }

  // -- entries -------------------------------------------------------------

  private async readEntry(obj: JsonValue): Promise<void> {
    this.entryLines++;
    this.checked++;
    const stated = isJsonObject(obj) ? obj["seq"] : undefined;
    const statedAt = position({ seq: isUint(stated) ? stated : null });
    let entry: Entry;
    try {
      entry = decodeEntry(obj, this.line);
    } catch (e) {
      if (e instanceof Malformed) throw new Fail("malformed-record", e.message, statedAt);
      throw e;
    }
    if (entry.type === "log-key") {
      // The key is a readable Ed25519 vkey (5.2), as the record is read.
      let key: NoteKey | undefined;
      try {
        key = await parseVkey(entry.view["key"]);
      } catch {
        key = undefined;
      }
      if (key === undefined || key.algorithm !== ALG_ED25519) {
        throw new Fail("malformed-record", "the log-key view's key is not a readable Ed25519 vkey", statedAt);
      }
    }
    if (entry.type === "session-start") {
      // The stated genesis must be the one the header members give (5.2),
      // checked as the record is read: line and seq only.
      const header: JsonObject = {};
      for (const [name, value] of Object.entries(entry.view)) if (name !== "genesis") header[name] = value;
      const genesis = toHex(await taggedHash("cairn/v2/genesis", canonicalBytes(header)));
      if (entry.view["genesis"] !== genesis) {
        throw new Fail("digest-mismatch", `the session start's genesis is not the one its header gives (${genesis})`, statedAt);
      }
    }
    if (this.complete && entry.proof !== undefined) {
      throw new Fail("malformed-record", "an entry of a complete bundle carries no proof", statedAt);
    }
    if (this.complete) await this.completeEntry(entry);
    else await this.partialEntry(entry);
    this.lastValid = entryPosition(entry);
  }

  private async completeEntry(e: Entry): Promise<void> {
    const expected = this.tree.size;
    if (e.seq === expected && BigInt(expected) >= this.size) {
      throw new Fail("uncovered-entry", `seq ${e.seq} lies beyond the checkpoint (size ${this.size})`, position({ seq: e.seq }));
    }
    if (e.seq !== expected) {
      throw new Fail("sequence-gap", `expected seq ${expected}, found ${e.seq}`, { ...entryPosition(e), seq: expected });
    }
    this.checkTime(e);
    await this.checkRecord(e);
    await this.tree.push(await entryLeaf(e));
    const size = BigInt(this.tree.size);
    if (size === this.size && !equalBytes(await this.tree.root(), this.root!)) {
      throw new Fail("inconsistent-checkpoint", `the log's root at size ${size} is not the checkpoint's`, entryPosition(e));
    }
    for (const t of this.trusted) {
      if (size === t.size && !equalBytes(await this.tree.root(), t.root)) {
        throw new Fail("inconsistent-checkpoint", `the log's root at size ${size} is not the trusted checkpoint's`, entryPosition(e));
      }
    }
  }

  private async partialEntry(e: Entry): Promise<void> {
    const at = entryPosition(e);
    const records = this.selection!.records;
    if (this.lastSeq !== null && e.seq <= this.lastSeq) {
      throw new Fail("sequence-gap", `seq ${e.seq} does not follow seq ${this.lastSeq}`, at);
    }
    const listed = records[this.recordIndex];
    if (listed !== undefined && listed[0] < e.seq) {
      throw new Fail("missing-record", `the selection lists a ${listed[1]} record at seq ${listed[0]}; it is absent`, position({ seq: listed[0] }));
    }
    if (BigInt(e.seq) >= this.size) throw new Fail("uncovered-entry", `seq ${e.seq} lies beyond the checkpoint (size ${this.size})`, at);
    if (e.proof === undefined) throw new Fail("missing-proof", `seq ${e.seq} has no inclusion proof`, at);
    if (!(await verifyInclusion(await entryLeaf(e), BigInt(e.seq), this.size, e.proof, this.root!))) {
      throw new Fail("inclusion-mismatch", `the inclusion proof of seq ${e.seq} does not lead to the checkpoint's root`, at);
    }
    if (e.type === "step") {
      const session = this.listedSessions.get(e.fields["session_id"] as string);
      const index = e.fields["step_index"] as number;
      if (session === undefined || index >= session.steps) throw new Fail("unlisted-entry", "the selection does not list this step", at);
    } else {
      if (listed === undefined || listed[0] !== e.seq) throw new Fail("unlisted-entry", `the selection does not list seq ${e.seq}`, at);
      if (listed[1] !== e.type) throw new Fail("selection-mismatch", `the selection lists seq ${e.seq} as ${listed[1]}, not ${e.type}`, at);
      this.recordIndex++;
      if (e.type === "session-start" && e.view !== null && this.listedSessions.has(e.view["session_id"] as string)
        && !this.inScope(e.view)) {
        throw new Fail("selection-mismatch", `session ${e.view["session_id"]} is listed but its scope does not select it`, at);
      }
    }
    this.checkTime(e);
    await this.checkRecord(e);
    this.lastSeq = e.seq;
  }

  private inScope(view: JsonObject): boolean {
    const scope = this.selection!.scope;
    if ("session" in scope) return view["session_id"] === scope.session;
    if ("agent" in scope) return view["agent_id"] === scope.agent;
    const started = view["started_at"] as string;
    return scope.since <= started && started < scope.until;
  }

  private checkTime(e: Entry): void {
    if (this.lastLoggedAt !== null && e.loggedAt < this.lastLoggedAt) {
      throw new Fail("bad-timestamp", `logged_at ${e.loggedAt} is before the previous entry's (${this.lastLoggedAt})`, entryPosition(e));
    }
    this.lastLoggedAt = e.loggedAt;
  }

  private async checkRecord(e: Entry): Promise<void> {
    if (e.type === "step") await this.checkStep(e);
    else if (e.view === null) this.withheld.set(e.seq, e.recordHash);
    else await this.checkOp(e);
  }

  // -- a step (9.2) --------------------------------------------------------

  private async checkStep(e: StepEntry): Promise<void> {
    const at = entryPosition(e);
    const { fields, hidden } = e;
    if (fields["org_id"] !== this.orgId) {
      throw new Fail("malformed-record", `a step of org ${JSON.stringify(fields["org_id"] ?? null)} in the log of ${this.orgId}`, at);
    }
    const shows = LEVEL_SHOWS[this.level];
    const erased: string[] = [];
    for (const name of FIELDS) {
      const revealed = Object.hasOwn(fields, name);
      if (!shows.has(name)) {
        if (revealed) throw new Fail("malformed-record", `field ${name} is shown beyond the ${this.level} level`, at);
      } else if (NEVER_HIDDEN.has(name) || !PAYLOAD_FIELDS.has(name)) {
        if (!revealed) throw new Fail("malformed-record", `field ${name} must be shown at the ${this.level} level`, at);
      } else if (!revealed) {
        erased.push(name);
      }
    }
    const sessionId = fields["session_id"] as string;
    const session = this.sessions.get(sessionId);
    if (session === undefined) throw new Fail("missing-record", `session ${sessionId} was not started before this step`, at);
    if (session.sealed) throw new Fail("step-after-seal", `session ${sessionId} is sealed`, at);
    const index = fields["step_index"] as number;
    if (index !== session.nextIndex) throw new Fail("sequence-gap", `expected step index ${session.nextIndex}, found ${index}`, at);
    if (!equalBytes(e.prevHash, session.head)) {
      throw new Fail("prev-hash-mismatch", `prev_hash ${toHex(e.prevHash)} is not the session's head ${toHex(session.head)}`, at);
    }
    const commitments: Uint8Array[] = [];
    for (const name of FIELDS) {
      const salt = e.salts.get(name);
      commitments.push(salt !== undefined ? await taggedHash("cairn/v2/field", salt, canonicalBytes(fields[name])) : hidden.get(name)!);
    }
    const digest = await taggedHash("cairn/v2/step", ...commitments);
    if (!equalBytes(digest, e.digest)) {
      throw new Fail("digest-mismatch", `digest recomputed from the fields is ${toHex(digest)}, recorded ${toHex(e.digest)}`, at);
    }
    const created = fields["created_at"] as string;
    const chain = await taggedHash("cairn/v2/chain", session.head, e.digest, u64be(index), utf8(created));
    if (!equalBytes(chain, e.recordHash)) throw new Fail("chain-hash-mismatch", `chain hash recomputes to ${toHex(chain)}`, at);
    if (fields["agent_id"] !== session.agentId) {
      throw new Fail("malformed-record", `a step of agent ${String(fields["agent_id"])} in a session of agent ${session.agentId}`, at);
    }
    if (session.lastCreated !== null && created < session.lastCreated) {
      throw new Fail("bad-timestamp", `created_at ${created} is before the previous step's (${session.lastCreated})`, at);
    }
    const drift = canonicalMicros(created)! - canonicalMicros(e.loggedAt)!;
    if ((drift < 0n ? -drift : drift) > session.skewMicros) {
      throw new Fail("bad-timestamp", `created_at ${created} lies more than ${session.skewMicros / 1_000_000n} s from logged_at ${e.loggedAt}`, at);
    }
    if (session.strict && !STRICT_KINDS.has(fields["step_type"] as string)) {
      throw new Fail("profile-violation", `${String(fields["step_type"])} is not allowed in a strict session`, at);
    }
    await this.checkStepSignature(e, at);
    if (erased.length > 0) {
      const trace = fields["trace_id"];
      this.pending.set(erasedKey(sessionId, index), {
        at,
        traceId: typeof trace === "string" ? trace : null,
        commitments: new Map(erased.map((name) => [name, toHex(hidden.get(name)!)])),
      });
    }
    session.head = e.recordHash;
    session.nextIndex++;
    session.lastCreated = created;
    await session.tree.push(await leafHash(frame("cairn/v2/session-leaf", u64be(index), e.recordHash)));
  }

  private async checkStepSignature(e: StepEntry, at: Position): Promise<void> {
    const declared = e.fields["signer_key_id"];
    const signature = e.signature;
    if (declared === null && signature === null) return;
    if (typeof declared !== "string") throw new Fail("bad-signature", "a signature on a step that declares no signer", at);
    if (signature === null) throw new Fail("bad-signature", `the step declares signer ${declared} but carries no signature`, at);
    if (signature.keyId !== declared) {
      throw new Fail("bad-signature", `the step declares signer ${declared}, the signature is by ${signature.keyId}`, at);
    }
    const key = this.agentKeys.get(declared);
    if (key === undefined) throw new Fail("bad-signature", `key ${declared} was not registered before this step`, at);
    if (key.agentId !== e.fields["agent_id"]) throw new Fail("bad-signature", `key ${declared} is registered for agent ${key.agentId}`, at);
    if (key.revokedSeq !== null) throw new Fail("bad-signature", `key ${declared} was revoked at seq ${key.revokedSeq}`, at);
    const message = frame("cairn/v2/step-signature", e.digest);
    if (!(await verifyStrict(key.publicKey, message, signature.signature))) {
      throw new Fail("bad-signature", `the signature by ${declared} does not verify`, at);
    }
  }

  // -- an operational record (9.3) -------------------------------------------

  private async checkOp(e: OpEntry): Promise<void> {
    const view = e.view;
    const at = entryPosition(e);
    const computed = await taggedHash("cairn/v2/op", utf8(e.type), canonicalBytes(view));
    if (!equalBytes(computed, e.recordHash)) throw new Fail("digest-mismatch", `the ${e.type} record hash recomputes to ${toHex(computed)}`, at);
    if (view["org_id"] !== this.orgId) {
      throw new Fail("malformed-record", `a record of org ${JSON.stringify(view["org_id"])} in the log of ${this.orgId}`, at);
    }
    const handlers: Record<OpType, (e: OpEntry, at: Position) => Promise<void> | void> = {
      "session-start": (x, p) => this.sessionStart(x, p),
      seal: (x, p) => this.seal(x, p),
      erasure: (x, p) => this.erasure(x, p),
      review: () => undefined,
      "audit-event": () => undefined,
      "key-registration": (x, p) => this.keyRegistration(x, p),
      "key-revocation": (x, p) => this.keyRevocation(x, p),
      "signed-trace": (x, p) => this.signedTrace(x, p),
      "log-key": (x, p) => this.logKey(x, p),
      "trace-erasure": (x, p) => this.traceErasure(x, p),
    };
    await handlers[e.type](e, at);
  }

  private sessionStart(e: OpEntry, at: Position): void {
    const view = e.view;
    const sessionId = view["session_id"] as string;
    if (this.sessions.has(sessionId)) throw new Fail("duplicate-record", `session ${sessionId} is started twice`, at);
    const predecessor = view["predecessor"];
    if (typeof predecessor === "string") {
      if (!this.finals.has(predecessor)) {
        throw new Fail("predecessor-mismatch", `session ${sessionId} continues ${predecessor}, not the final hash of a session sealed before it`, at);
      }
      const continuer = this.finals.get(predecessor);
      if (continuer !== null && continuer !== undefined) {
        throw new Fail("predecessor-mismatch", `the session ending in ${predecessor} is already continued by ${continuer}`, at);
      }
      this.finals.set(predecessor, sessionId);
    }
    this.sessions.set(sessionId, {
      agentId: view["agent_id"] as string,
      strict: view["profile"] === "strict",
      skewMicros: BigInt(view["max_clock_skew_s"] as number) * 1_000_000n,
      head: fromHex(view["genesis"], 32)!,
      nextIndex: 0,
      sealed: false,
      lastCreated: null,
      tree: new Frontier(),
    });
  }

  private async seal(e: OpEntry, at: Position): Promise<void> {
    const view = e.view;
    const sessionId = view["session_id"] as string;
    const session = this.sessions.get(sessionId);
    if (session === undefined && this.complete) throw new Fail("missing-record", `a seal of session ${sessionId}, which was never started`, at);
    const count = view["step_count"] as number;
    if (session !== undefined) {
      if (session.sealed) throw new Fail("duplicate-record", `session ${sessionId} is sealed twice`, at);
      if (count > session.nextIndex) throw new Fail("missing-record", `the seal counts ${count} steps, ${session.nextIndex} were seen`, at);
      if (count < session.nextIndex) throw new Fail("seal-mismatch", `the seal counts ${count} steps, ${session.nextIndex} were recorded before it`, at);
      if (view["session_root"] !== toHex(await session.tree.root())) {
        throw new Fail("seal-mismatch", "the seal's session root is not the root of the session's steps", at);
      }
      if (view["final_hash"] !== toHex(session.head)) throw new Fail("seal-mismatch", "the seal's final hash is not the session's last chain hash", at);
    }
    const text = await this.openAt(view["note"], "the seal note", e.seq, at);
    const expected =
      `cairn-seal/v2\n${this.origin}\n${sessionId}\n${count}\n` +
      `${toBase64(fromHex(view["session_root"], 32)!)}\n${toBase64(fromHex(view["final_hash"], 32)!)}\n${String(view["sealed_at"])}\n`;
    if (text !== expected) throw new Fail("seal-mismatch", "the seal note states other fields than its record", at);
    if (session !== undefined) session.sealed = true;
    await this.markUsed(view["note"] as string, e.seq);
    const final = view["final_hash"] as string;
    if (!this.finals.has(final)) this.finals.set(final, null);
  }

  private traceErasure(e: OpEntry, at: Position): void {
    const traceSeq = e.view["trace_seq"] as number;
    if (traceSeq >= e.seq) throw new Fail("erasure-mismatch", `the trace erasure names seq ${traceSeq}, which is not before it`, at);
    const held = this.withheld.get(traceSeq);
    if (held !== undefined) {
      this.withheld.delete(traceSeq);
      this.namedTraces.add(traceSeq);
      if (toHex(held) !== e.view["trace_hash"]) {
        throw new Fail("erasure-mismatch", `the trace erasure names the signed trace at seq ${traceSeq} by another hash`, at);
      }
      return;
    }
    if (this.namedTraces.has(traceSeq)) {
      throw new Fail("erasure-mismatch", `the signed trace at seq ${traceSeq} was named by an earlier trace erasure`, at);
    }
    if (this.shownTraces.has(traceSeq)) {
      throw new Fail("erasure-mismatch", `the trace erasure names the signed trace at seq ${traceSeq}, which shows its view`, at);
    }
    if (this.complete) {
      throw new Fail("erasure-mismatch", `the trace erasure names seq ${traceSeq}, which is not a signed-trace record`, at);
    }
    // A partial bundle: an entry it does not hold is not compared; one its
    // selection lists as another type fails.
    const records = this.selection!.records;
    let low = 0;
    let high = records.length;
    while (low < high) {
      const mid = (low + high) >>> 1;
      if (records[mid]![0] < traceSeq) low = mid + 1;
      else high = mid;
    }
    const listed = records[low];
    if (listed !== undefined && listed[0] === traceSeq && listed[1] !== "signed-trace") {
      throw new Fail("erasure-mismatch", `the trace erasure names seq ${traceSeq}, which the selection lists as a ${listed[1]} record`, at);
    }
    // Not compared, but named: a second trace erasure of it fails.
    this.namedTraces.add(traceSeq);
  }

  private erasure(e: OpEntry, at: Position): void {
    const view = e.view;
    const sessionId = view["session_id"] as string;
    const index = view["step_index"] as number;
    const session = this.sessions.get(sessionId);
    if (session === undefined || index >= session.nextIndex) {
      throw new Fail("erasure-mismatch", `the erasure names step ${index} of ${sessionId}, not held`, at);
    }
    // At a level that hides the payload nothing more is compared (8, rule 3).
    if (!LEVEL_SHOWS[this.level].has("content")) return;
    const key = erasedKey(sessionId, index);
    const waiting = this.pending.get(key);
    if (waiting === undefined) throw new Fail("erasure-mismatch", `step ${index} of ${sessionId} shows no erased field (or is matched)`, at);
    const named = view["commitments"] as JsonObject;
    const same =
      waiting.traceId === view["trace_id"] &&
      Object.keys(named).length === waiting.commitments.size &&
      Object.entries(named).every(([name, c]) => waiting.commitments.get(name) === c);
    if (!same) throw new Fail("erasure-mismatch", `the erasure does not name step ${index} of ${sessionId} as it is erased`, at);
    this.pending.delete(key);
  }

  private async keyRegistration(e: OpEntry, at: Position): Promise<void> {
    const view = e.view;
    const publicKey = fromBase64(view["public_key"])!;
    const keyId = "agent-" + toHex(await sha256(publicKey)).slice(0, 12);
    if (view["key_id"] !== keyId) throw new Fail("malformed-record", `key id ${String(view["key_id"])} is not its key's (${keyId})`, at);
    if (this.agentKeys.has(keyId)) throw new Fail("duplicate-record", `key ${keyId} is registered twice`, at);
    this.agentKeys.set(keyId, { agentId: view["agent_id"] as string, publicKey, revokedSeq: null });
  }

  private keyRevocation(e: OpEntry, at: Position): void {
    const view = e.view;
    const keyId = view["key_id"] as string;
    const key = this.agentKeys.get(keyId);
    if (key === undefined || key.agentId !== view["agent_id"]) {
      throw new Fail("malformed-record", `revocation of ${keyId}, not registered for ${String(view["agent_id"])}`, at);
    }
    if (key.revokedSeq !== null) throw new Fail("duplicate-record", `key ${keyId} is revoked twice`, at);
    key.revokedSeq = e.seq;
  }

  private async signedTrace(e: OpEntry, at: Position): Promise<void> {
    const trace = e.view["trace"] as JsonObject;
    const keyId = trace["signature_key_id"] as string;
    const key = this.agentKeys.get(keyId);
    if (key === undefined) throw new Fail("bad-signature", `the trace is signed by ${keyId}, not registered before it`, at);
    if (key.agentId !== trace["agent_id_hash"]) throw new Fail("bad-signature", `key ${keyId} is registered for agent ${key.agentId}`, at);
    if (key.revokedSeq !== null) throw new Fail("bad-signature", `key ${keyId} was revoked at seq ${key.revokedSeq}`, at);
    const message = canonicalBytes({ components: trace["components"], trace_level: trace["trace_level"] });
    if (!(await verifyStrict(key.publicKey, message, fromBase64(trace["signature"])!))) {
      throw new Fail("bad-signature", "the trace's signature does not verify over its components and level", at);
    }
    this.shownTraces.add(e.seq);
  }

  // -- the end (9.5) -------------------------------------------------------------

  // -- log keys (7.10) -------------------------------------------------------

  private keyFrom(key: NoteKey): number {
    const added = this.added.get(vkeyText(key));
    return added === undefined ? 0 : added + 1;
  }

  /** The position after the key's retirement, or Infinity. */
  private keyUntil(key: NoteKey): number {
    const retired = this.retired.get(vkeyText(key));
    return retired === undefined ? Infinity : retired + 1;
  }

  /** The trusted keys valid for a record at `seq`, as far as the log told. */
  private validAt(seq: number): NoteKey[] {
    return this.keys.filter((k) => this.keyFrom(k) <= seq && seq < this.keyUntil(k));
  }

  private async openAt(note: JsonValue | undefined, what: string, seq: number, at: Position): Promise<string> {
    try {
      return await openNote(note, this.validAt(seq));
    } catch (e) {
      if (e instanceof NoteMalformed) throw new Fail("malformed-record", `${what}: ${e.message}`, at);
      if (e instanceof NoteUnverified) throw new Fail("bad-signature", `${what}: ${e.message}`, at);
      throw e;
    }
  }

  private async markUsed(note: string, seq: number): Promise<void> {
    for (const key of await noteSigners(note, this.validAt(seq))) {
      const text = vkeyText(key);
      if (!this.firstUsed.has(text)) this.firstUsed.set(text, seq);
    }
  }

  private async logKey(e: OpEntry, at: Position): Promise<void> {
    const view = e.view;
    const key = await parseVkey(view["key"]);
    if (key.name !== this.header!["server_name"]) {
      throw new Fail("malformed-record", `the log-key record names a key of ${key.name}, not of this log`, at);
    }
    const text = await this.openAt(view["note"], "the log-key note", e.seq, at);
    const expected = `cairn-log-key/v1\n${this.origin}\n${String(view["action"])}\n${String(view["key"])}\n${String(view["at"])}\n`;
    if (text !== expected) throw new Fail("malformed-record", "the log-key note states other fields than its record", at);
    const vkey = vkeyText(key);
    const signers = (await noteSigners(view["note"] as string, this.validAt(e.seq))).map(vkeyText);
    if (view["action"] === "add") {
      if (this.added.has(vkey)) throw new Fail("bad-signature", `log key ${vkey} was already added`, at);
      const used = this.firstUsed.get(vkey);
      if (used !== undefined) throw new Fail("bad-signature", `log key ${vkey} signed at seq ${used}, before its add record`, at);
      if (signers.every((s) => s === vkey)) {
        throw new Fail("bad-signature", "a log key's add record must be signed by another valid log key", at);
      }
      this.added.set(vkey, e.seq);
    } else {
      if (this.retired.has(vkey)) throw new Fail("bad-signature", `log key ${vkey} was already retired`, at);
      this.retired.set(vkey, e.seq);
    }
    for (const s of signers) if (!this.firstUsed.has(s)) this.firstUsed.set(s, e.seq);
  }

  /** Whether `note` has a valid signature by a trusted key valid for a
   * checkpoint of `size` entries (7.10). */
  private async signedForSize(note: string, size: bigint): Promise<boolean> {
    const n = Number(size);
    const valid = this.keys.filter((k) => this.keyFrom(k) <= n && n <= this.keyUntil(k));
    try {
      await openNote(note, valid);
      return true;
    } catch {
      return false;
    }
  }

  async finish(): Promise<void> {
    if (this.phase !== "ended") {
      throw new Fail("missing-record", "the bundle ends without its end line (truncated)", position({ line: this.line + 1 }), true);
    }
    if (this.complete) {
      if (BigInt(this.tree.size) < this.size) {
        throw new Fail("missing-record", `the checkpoint covers ${this.size} entries; the bundle ends at ${this.tree.size}`, position({ seq: this.tree.size }), true);
      }
      if (this.size === 0n && !equalBytes(this.root!, await emptyRoot())) {
        throw new Fail("inconsistent-checkpoint", "the empty log's root is not the checkpoint's", position(), true);
      }
    } else {
      const records = this.selection!.records;
      const listed = records[this.recordIndex];
      if (listed !== undefined) {
        throw new Fail("missing-record", `the selection lists a ${listed[1]} record at seq ${listed[0]}; it is absent`, position({ seq: listed[0] }), true);
      }
      for (const item of this.selection!.sessions) {
        const session = this.sessions.get(item.session_id);
        const seen = session?.nextIndex ?? 0;
        if (seen < item.steps) {
          throw new Fail("missing-record", `session ${item.session_id} claims ${item.steps} steps, ${seen} are here`,
            position({ session_id: item.session_id, step_index: seen }), true);
        }
        if (session === undefined || toHex(session.head) !== item.head) {
          throw new Fail("selection-mismatch", `session ${item.session_id} does not end in the claimed head ${item.head}`,
            position({ session_id: item.session_id }), true);
        }
      }
    }
    let first: Erased | undefined;
    for (const waiting of this.pending.values()) if (first === undefined || waiting.at.seq! < first.at.seq!) first = waiting;
    let firstWithheld: number | undefined;
    for (const seq of this.withheld.keys()) if (firstWithheld === undefined || seq < firstWithheld) firstWithheld = seq;
    if (first !== undefined && (firstWithheld === undefined || first.at.seq! < firstWithheld)) {
      throw new Fail("erasure-mismatch", "an erased step without the erasure record naming it", { ...first.at, line: null }, true);
    }
    if (firstWithheld !== undefined) {
      throw new Fail("erasure-mismatch", "a withheld signed trace without the trace-erasure record naming it",
        position({ seq: firstWithheld }), true);
    }
    // Each checkpoint's cairn-log-keys line against the log-key records
    // read below its size, the smallest size first (7.1, 9.5): a partial
    // bundle holds every one (10.4), so fewer is one left out.
    const counts = [...this.logKeyCounts].sort((a, b) => (a.size < b.size ? -1 : a.size > b.size ? 1 : 0));
    for (const { size, count } of counts) {
      let read = 0n;
      for (const seq of [...this.added.values(), ...this.retired.values()]) if (BigInt(seq) < size) read++;
      if (read !== count) {
        const holder = !this.complete && read < count ? "bundle" : "log";
        throw new Fail(holder === "bundle" ? "missing-record" : "inconsistent-checkpoint",
          `the checkpoint of size ${size} says its log holds ${count} log-key records below that size (its cairn-log-keys line); the ${holder} holds ${read} (FORMAT.md 7.1, 7.10)`,
          position(), true);
      }
    }
    for (const note of this.signedNotes) {
      if (!(await this.signedForSize(note, this.size))) {
        throw new Fail("bad-signature",
          `the checkpoint of size ${this.size} (or its selection) is not signed by a log key valid at that size`, position(), true);
      }
    }
  }
}

function erasedKey(sessionId: string, index: number): string {
  return `${sessionId}\u0000${index}`;
}
