// Offline verification of Cairn export bundles, written from docs/FORMAT.md
// (format 2). Give it a bundle (what `cairn export` or `GET /v1/export`
// wrote), the operator's published server key, and any checkpoints you
// kept; it replays the published algorithm line by line and stops at the
// first failure, naming the record and the reason with the codes of
// FORMAT.md 9.1. It uses only WebCrypto (SHA-256, Ed25519) and
// TextEncoder/TextDecoder, so it runs in Node and in browsers alike.
//
// This module is the entry point (`verifyBundle`, `verifyBundleStream`, and
// the verdict's types from verdict.ts); the verifier itself is verifier.ts,
// with fail.ts (failures and positions), lines.ts (a bundle's lines), and
// the format's parts: forms.ts, strict-json.ts, jcs.ts, merkle.ts, note.ts,
// ed25519.ts, time.ts and bytes.ts.

import { equalBytes, toHex, utf8 } from "./bytes.js";
import { Fail } from "./fail.js";
import { bundleLines, streamLines } from "./lines.js";
import { ALG_COSIGNATURE_V1, NoteMalformed, NoteUnverified, openNote, parseVkey, VkeyError, type NoteKey } from "./note.js";
import { unknownOption, VERIFY_OPTIONS, type BundleInput, type Failure, type Verdict, type VerifyOptions } from "./verdict.js";
import { Verifier } from "./verifier.js";

export * from "./verdict.js";

/** A witness policy that cannot be applied: no witness, more than 64, a
 * name or key given twice, a quorum outside 1 to the number of witnesses,
 * or a quorum without witnesses. */
export class WitnessPolicyError extends Error {
  override name = "WitnessPolicyError";
}

/** A trusted checkpoint given to the verifier that is not a signed note at
 * all (an empty file, an error message saved as a checkpoint): the caller's
 * mistake, as Cairn's command line refuses it (exit 2), not evidence
 * against the bundle. A signed note that is not the log's checkpoint
 * (another key's, another origin) stays a verdict (`bad-signature`). */
export class TrustedCheckpointError extends Error {
  override name = "TrustedCheckpointError";
}

/** Most witnesses one policy names (as the Rust verifier). */
export const MAX_WITNESSES = 64;

/** Verifies a Cairn export bundle offline (FORMAT.md sections 9 and 10).
 * A key that is not a vkey throws VkeyError, a witness policy that cannot
 * be applied WitnessPolicyError, a trusted checkpoint that is not a signed
 * note at all TrustedCheckpointError; everything wrong with the bundle is
 * reported in the verdict. */
export async function verifyBundle(bundle: BundleInput, options: VerifyOptions = {}): Promise<Verdict> {
  const unknown = unknownOption("verifyBundle", options, VERIFY_OPTIONS);
  if (unknown !== undefined) throw unknown;
  const bytes = typeof bundle === "string" ? utf8(bundle) : bundle instanceof Uint8Array ? bundle : new Uint8Array(bundle);
  return verifyLines(bundleLines(bytes), options);
}

/** Options of a streamed verification. */
export interface StreamOptions extends VerifyOptions {
  /** Called as the bundle is read, with the bytes read so far. */
  onProgress?: (bytesRead: number) => void;
}

/** Verifies a bundle read as a stream of chunks (a browser `File`'s
 * `stream()`, a Node file stream): memory stays at one line, and a bundle
 * that fails is not read past its failing line. Same verdict as
 * [`verifyBundle`] on the same bytes. */
export async function verifyBundleStream(
  chunks: AsyncIterable<Uint8Array> | ReadableStream<Uint8Array>,
  options: StreamOptions = {},
): Promise<Verdict> {
  const unknown = unknownOption("verifyBundleStream", options, [...VERIFY_OPTIONS, "onProgress"]);
  if (unknown !== undefined) throw unknown;
  return verifyLines(streamLines(chunks, options.onProgress), options);
}

async function verifyLines(lines: Iterable<Uint8Array> | AsyncIterable<Uint8Array>, options: VerifyOptions): Promise<Verdict> {
  const pinned: NoteKey[] = [];
  for (const key of options.keys ?? []) pinned.push(await parseVkey(key));
  const { witnesses, quorum } = await witnessPolicy(options);
  const trusted = options.trustedCheckpoints ?? [];
  for (const [i, note] of trusted.entries()) await checkNoteShape(note, i);
  const verifier = new Verifier(pinned, trusted, witnesses, quorum);
  let failure: Failure | undefined;
  try {
    for await (const raw of lines) await verifier.feed(raw);
    await verifier.finish();
  } catch (e) {
    if (!(e instanceof Fail)) throw e;
    failure = { reason: e.reason, detail: e.detail, at: e.lineKnown ? e.at : { ...e.at, line: verifier.line } };
  }
  const verdict: Verdict = {
    verified: failure === undefined,
    recordsChecked: verifier.checked,
    lastValid: verifier.lastValid,
    keyPinned: pinned.length > 0,
  };
  if (failure !== undefined) verdict.failure = failure;
  if (verifier.header !== null) {
    verdict.orgId = verifier.orgId;
    verdict.origin = verifier.origin;
    verdict.completeLog = verifier.complete;
  }
  if (verifier.root !== null) {
    verdict.checkpointSize = verifier.size.toString();
    verdict.checkpointRoot = toHex(verifier.root);
  }
  if (verifier.selection !== null) verdict.selection = verifier.selection;
  if (verifier.cosignedBy !== null) verdict.cosignedBy = verifier.cosignedBy;
  return verdict;
}

/** Throws TrustedCheckpointError when the `i`th trusted checkpoint is not a
 * signed note at all (its form, no signature checked: FORMAT.md 10.2). */
async function checkNoteShape(note: unknown, i: number): Promise<void> {
  try {
    await openNote(note, []);
  } catch (e) {
    if (e instanceof NoteMalformed) {
      throw new TrustedCheckpointError(
        `trusted checkpoint ${i + 1} is not a signed note (${e.message}); give the text \`cairn checkpoint\` wrote`,
      );
    }
    if (!(e instanceof NoteUnverified)) throw e;
  }
}

/** The witness keys and quorum of `options`, checked as the Rust verifier
 * checks a policy (FORMAT.md 7.7). */
async function witnessPolicy(options: VerifyOptions): Promise<{ witnesses: NoteKey[]; quorum: number }> {
  const parsed: NoteKey[] = [];
  for (const text of options.witnesses ?? []) parsed.push(await parseVkey(text));
  if (parsed.length > MAX_WITNESSES) {
    throw new WitnessPolicyError(`a witness policy names at most ${MAX_WITNESSES} witnesses, not ${parsed.length}`);
  }
  const witnesses: NoteKey[] = [];
  for (const key of parsed) {
    if (key.algorithm !== ALG_COSIGNATURE_V1) {
      throw new VkeyError(`witness key ${key.name} is not a cosignature/v1 key (algorithm 0x04)`);
    }
    if (witnesses.some((w) => w.name === key.name)) throw new WitnessPolicyError(`witness ${key.name} is named twice`);
    // cosignature/v1 does not sign the witness's name: one key under two
    // names would count one cosignature twice.
    if (witnesses.some((w) => equalBytes(w.publicKey, key.publicKey))) {
      throw new WitnessPolicyError(`witness ${key.name} has the key of another witness`);
    }
    witnesses.push(key);
  }
  const asked = options.witnessQuorum;
  if (witnesses.length === 0) {
    if (asked !== undefined) throw new WitnessPolicyError("a witness quorum needs witnesses");
    return { witnesses, quorum: 0 };
  }
  const quorum = asked ?? witnesses.length;
  if (!Number.isInteger(quorum) || quorum < 1 || quorum > witnesses.length) {
    throw new WitnessPolicyError(`the quorum must be 1 to ${witnesses.length} (the number of witnesses), not ${quorum}`);
  }
  return { witnesses, quorum };
}
