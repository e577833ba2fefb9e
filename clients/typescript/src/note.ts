// C2SP signed notes and checkpoints, FORMAT.md section 7.1: verifier keys
// (vkeys), the order in which a note is read (malformed), verified (bad
// signature), and its text read; a key's vkey text and which keys signed a
// note, for the log keys of 7.10.

import { equalBytes, fromBase64, fromHex, sha256, concat, toBase64, toHex, utf8 } from "./bytes.js";
import { isCurvePoint, verifyStrict } from "./ed25519.js";

/** Algorithm byte of plain Ed25519 note signatures. */
export const ALG_ED25519 = 0x01;
/** Algorithm byte of C2SP cosignature/v1 witness keys. Such a key is read,
 * but it never verifies a note's plain signature. */
export const ALG_COSIGNATURE_V1 = 0x04;

export interface NoteKey {
  name: string;
  keyId: Uint8Array;
  algorithm: number;
  publicKey: Uint8Array;
}

// Unicode White_Space, the set Rust's char::is_whitespace uses (JavaScript's
// \s differs: it lacks U+0085 and has U+FEFF).
const WHITE_SPACE_CLASS = "[\\u0009-\\u000d\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
const WHITE_SPACE = new RegExp(WHITE_SPACE_CLASS, "u");
const WHITE_SPACE_RUNS = new RegExp(`${WHITE_SPACE_CLASS}+`, "u");

/** A key name: non-empty, without `+` or white space. */
export function isKeyName(name: string): boolean {
  return name.length > 0 && !name.includes("+") && !WHITE_SPACE.test(name);
}

/** The vkeys of a text that lists them separated by white space (Unicode
 * White_Space, which no key name holds: a name may hold any other
 * character, U+FEFF included, which JavaScript's `\s` would split at). */
export function splitVkeys(text: string): string[] {
  return text.split(WHITE_SPACE_RUNS).filter((vkey) => vkey.length > 0);
}

/** The 4-byte key id: SHA-256(name || "\n" || algorithm || key)[:4]. */
export async function noteKeyId(name: string, algorithm: number, publicKey: Uint8Array): Promise<Uint8Array> {
  return (await sha256(concat(utf8(name), Uint8Array.of(0x0a, algorithm), publicKey))).subarray(0, 4);
}

export class VkeyError extends Error {
  override name = "VkeyError";
}

/** Reads a vkey, `<name>+<hex key id>+<base64(algorithm || key)>`. */
export async function parseVkey(text: unknown): Promise<NoteKey> {
  if (typeof text !== "string") throw new VkeyError("a vkey is a string");
  const first = text.indexOf("+");
  const second = first < 0 ? -1 : text.indexOf("+", first + 1);
  if (second < 0) throw new VkeyError(`not a vkey (name+id+key): ${JSON.stringify(text)}`);
  const name = text.slice(0, first);
  // Hex digits of either case, as the Rust verifier reads them (Cairn
  // writes lowercase).
  const keyId = fromHex(text.slice(first + 1, second).replace(/[A-F]/g, (c) => c.toLowerCase()), 4);
  if (keyId === undefined) throw new VkeyError("a vkey's key id is 8 hex digits");
  const raw = fromBase64(text.slice(second + 1));
  if (raw === undefined || raw.length !== 33) throw new VkeyError("a vkey's key is base64 of an algorithm byte and 32 bytes");
  const publicKey = raw.slice(1);
  if (!isCurvePoint(publicKey)) throw new VkeyError("a vkey's key is not an Ed25519 point");
  if (!isKeyName(name)) throw new VkeyError(`not a key name: ${JSON.stringify(name)}`);
  const algorithm = raw[0]!;
  if (algorithm !== ALG_ED25519 && algorithm !== ALG_COSIGNATURE_V1) {
    throw new VkeyError(`unknown key algorithm 0x${algorithm.toString(16).padStart(2, "0")}`);
  }
  if (!equalBytes(await noteKeyId(name, algorithm, publicKey), keyId)) {
    throw new VkeyError(`the vkey's key id does not match its key (${name})`);
  }
  return { name, keyId, algorithm, publicKey };
}

/** Not a signed note at all (FORMAT.md 7.1, step 1): malformed-record. */
export class NoteMalformed extends Error {
  override name = "NoteMalformed";
}

/** A note no trusted key signed, or whose trusted signature fails (step 2):
 * bad-signature. */
export class NoteUnverified extends Error {
  override name = "NoteUnverified";
}

const SIGNATURE_PREFIX = "\u2014 ";
const MAX_SIGNATURES = 100;

interface NoteSignature {
  name: string;
  keyId: Uint8Array;
  signature: Uint8Array;
  line: string;
}

/** Reads and verifies a signed note with the trusted keys, and returns its
 * text (ending in a newline). Throws NoteMalformed or NoteUnverified. */
export async function openNote(note: unknown, keys: readonly NoteKey[]): Promise<string> {
  if (typeof note !== "string") throw new NoteMalformed("a signed note is a string");
  for (let i = 0; i < note.length; i++) {
    const c = note.charCodeAt(i);
    if (c < 0x20 && c !== 0x0a) throw new NoteMalformed("a signed note holds a control character");
  }
  const split = note.lastIndexOf("\n\n");
  if (split < 0) throw new NoteMalformed("a signed note has a blank line before its signatures");
  const text = note.slice(0, split + 1);
  const block = note.slice(split + 2);
  if (block.length === 0 || !block.endsWith("\n")) throw new NoteMalformed("a signed note ends with its signature lines");
  const signatures: NoteSignature[] = [];
  for (const line of block.slice(0, -1).split("\n")) {
    if (!line.startsWith(SIGNATURE_PREFIX)) throw new NoteMalformed(`not a signature line: ${JSON.stringify(line)}`);
    const body = line.slice(SIGNATURE_PREFIX.length);
    const space = body.indexOf(" ");
    if (space < 0) throw new NoteMalformed(`not a signature line: ${JSON.stringify(line)}`);
    const name = body.slice(0, space);
    const raw = fromBase64(body.slice(space + 1));
    if (raw === undefined) throw new NoteMalformed("a signature is not canonical base64");
    if (!isKeyName(name) || raw.length < 5) throw new NoteMalformed(`not a signature line: ${JSON.stringify(line)}`);
    // FORMAT 7.1: the bound is on distinct lines (a line repeated exactly
    // counts once, wherever the repeat comes).
    if (signatures.some((s) => s.line === line)) continue;
    if (signatures.length === MAX_SIGNATURES) throw new NoteMalformed("more than 100 signatures");
    signatures.push({ name, keyId: raw.subarray(0, 4), signature: raw.subarray(4), line });
  }
  const message = utf8(text);
  let verified = false;
  for (const signature of signatures) {
    const key = keys.find(
      (k) => k.algorithm === ALG_ED25519 && k.name === signature.name && equalBytes(k.keyId, signature.keyId),
    );
    if (key === undefined) continue; // signatures by unknown keys are ignored
    if (!(await verifyStrict(key.publicKey, message, signature.signature))) {
      throw new NoteUnverified(`the signature by ${signature.name} does not verify`);
    }
    verified = true;
  }
  if (!verified) throw new NoteUnverified("no signature by a trusted key");
  return text;
}

export interface Checkpoint {
  origin: string;
  /** The tree size; a bigint, since a checkpoint may state up to 2^64 - 1. */
  size: bigint;
  root: Uint8Array;
  /** How many `log-key` records its log holds below `size` (its
   * `cairn-log-keys` line, FORMAT.md 7.1), or undefined without that line. */
  logKeys?: bigint;
}

/** The first word of Cairn's one extension line, `cairn-log-keys <count>`. */
const LOG_KEYS_EXTENSION = "cairn-log-keys";

export class CheckpointMalformed extends Error {
  override name = "CheckpointMalformed";
}

const DECIMAL = /^(?:0|[1-9][0-9]*)$/;

/** Reads a checkpoint text (C2SP tlog-checkpoint): origin, size, root, then
 * extension lines, each non-empty and otherwise ignored. */
export function parseCheckpoint(text: string): Checkpoint {
  if (!text.endsWith("\n")) throw new CheckpointMalformed("a checkpoint ends with a newline");
  const lines = text.slice(0, -1).split("\n");
  const [origin, sizeLine, rootLine, ...extensions] = lines;
  if (!origin) throw new CheckpointMalformed("a checkpoint starts with its origin");
  if (sizeLine === undefined || !DECIMAL.test(sizeLine)) throw new CheckpointMalformed("a checkpoint's size is a decimal number");
  const size = BigInt(sizeLine);
  if (size >= 2n ** 64n) throw new CheckpointMalformed("a checkpoint's size is beyond 2^64 - 1");
  const root = fromBase64(rootLine);
  if (root === undefined || root.length !== 32) throw new CheckpointMalformed("a checkpoint's root is base64 of 32 bytes");
  if (extensions.some((line) => line.length === 0)) throw new CheckpointMalformed("an empty extension line");
  // The word alone, or the word and a space: Cairn's line, which must be
  // well formed and come once. Any other extension line is ignored.
  const ours = extensions.filter(
    (line) => line === LOG_KEYS_EXTENSION || line.startsWith(`${LOG_KEYS_EXTENSION} `),
  );
  if (ours.length > 1) throw new CheckpointMalformed("a checkpoint has at most one cairn-log-keys line");
  if (ours.length === 0) return { origin, size, root };
  const count = ours[0]!.slice(LOG_KEYS_EXTENSION.length + 1);
  if (!DECIMAL.test(count) || BigInt(count) >= 2n ** 64n) {
    throw new CheckpointMalformed("a cairn-log-keys line is `cairn-log-keys <count>`, the count in decimal");
  }
  return { origin, size, root, logKeys: BigInt(count) };
}

/** A key's vkey text, `name+hexid+base64(algorithm || key)`. */
export function vkeyText(key: NoteKey): string {
  return `${key.name}+${toHex(key.keyId)}+${toBase64(concat(Uint8Array.of(key.algorithm), key.publicKey))}`;
}

/** The keys among `keys` whose signatures on `note` verify (the note
 * already opened with them). */
export async function noteSigners(note: string, keys: readonly NoteKey[]): Promise<NoteKey[]> {
  const split = note.lastIndexOf("\n\n");
  const text = utf8(note.slice(0, split + 1));
  const signers: NoteKey[] = [];
  for (const line of note.slice(split + 2, -1).split("\n")) {
    const body = line.slice(2);
    const space = body.indexOf(" ");
    const raw = fromBase64(body.slice(space + 1));
    if (raw === undefined || raw.length < 5) continue;
    for (const key of keys) {
      if (key.name === body.slice(0, space) && equalBytes(key.keyId, raw.subarray(0, 4)) && !signers.includes(key)
          && (await verifyStrict(key.publicKey, text, raw.subarray(4)))) {
        signers.push(key);
      }
    }
  }
  return signers;
}

/** Whether a signed note (already opened with the log's keys) carries a
 * valid C2SP cosignature/v1 by `witness` (FORMAT.md 7.7): a signature line
 * with the witness's name and key id whose 72 bytes are a big-endian
 * timestamp, 1 to 2^63 - 1, and an Ed25519 signature over
 * `cosignature/v1\ntime <timestamp>\n<the note's text>`. Every such line
 * is tried; one that does not verify counts for nothing. */
export async function cosignedBy(note: string, witness: NoteKey): Promise<boolean> {
  if (witness.algorithm !== ALG_COSIGNATURE_V1) return false;
  const split = note.lastIndexOf("\n\n");
  const text = note.slice(0, split + 1);
  for (const line of note.slice(split + 2, -1).split("\n")) {
    const body = line.slice(SIGNATURE_PREFIX.length);
    const space = body.indexOf(" ");
    if (space < 0 || body.slice(0, space) !== witness.name) continue;
    const raw = fromBase64(body.slice(space + 1));
    if (raw === undefined || raw.length !== 4 + 8 + 64 || !equalBytes(raw.subarray(0, 4), witness.keyId)) continue;
    const timestamp = new DataView(raw.buffer, raw.byteOffset + 4, 8).getBigUint64(0);
    if (timestamp === 0n || timestamp >= 2n ** 63n) continue;
    if (await verifyStrict(witness.publicKey, utf8(`cosignature/v1\ntime ${timestamp}\n${text}`), raw.subarray(12))) {
      return true;
    }
  }
  return false;
}
