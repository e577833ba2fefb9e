// The TypeScript verifier against the Rust verifier: every case of the
// tamper corpus the Rust tamper suite writes (same verdict, reason, line,
// seq, session, step index and records checked), and copies of the genuine
// bundles tampered with here (bytes flipped, lines dropped, swapped,
// repeated or appended), which must all fail, with the same verdict as
// `cairn verify` where the binary is available.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { noteKeyId, parseVkey, vkeyText, VkeyError } from "../src/note.js";
import { verifyBundle, WitnessPolicyError } from "../src/verify.js";
import { cairnBin, COMPARED, corpusCases, corpusDir, differences, missing, rustVerdict, tsVerdict, type CorpusCase } from "./helpers.js";

const cases = corpusCases();

test("the tamper corpus is present", (t) => {
  if (cases.length === 0) {
    missing(t, `no tamper corpus at ${corpusDir()}: run the Rust tamper suite (cargo test -p cairn --test tamper) or set CAIRN_TAMPER_CORPUS`);
    return;
  }
  assert.ok(cases.length >= 10, `only ${cases.length} corpus cases`);
});

for (const c of cases) {
  test(`corpus: ${c.name}`, async () => {
    const got = await tsVerdict(readFileSync(c.bundlePath), c.keys, c.trustedCheckpoints, c.witnesses, c.witnessQuorum);
    const diff = differences(c.expected, got);
    assert.deepEqual(diff, {}, `${c.name}: (expected, typescript) ${JSON.stringify(diff)}; typescript said: ${got.detail}`);
  });
}

// -- tampered copies ------------------------------------------------------------

const NEWLINE = 0x0a;

function splitLines(bytes: Uint8Array): Uint8Array[] {
  const lines: Uint8Array[] = [];
  let start = 0;
  for (let i = 0; i < bytes.length; i++) {
    if (bytes[i] === NEWLINE) {
      lines.push(bytes.subarray(start, i));
      start = i + 1;
    }
  }
  if (start < bytes.length) lines.push(bytes.subarray(start));
  return lines;
}

function joinLines(lines: readonly Uint8Array[]): Uint8Array {
  return Buffer.concat(lines.flatMap((l) => [l, Uint8Array.of(NEWLINE)]));
}

interface Tampered {
  what: string;
  bytes: Uint8Array;
}

/** Courier tampering of a genuine bundle. The header (line 1) is left
 * alone: its `exported_at` is informative, so some of its bytes may change
 * without changing what the bundle proves. */
function tamperings(bundle: Uint8Array): Tampered[] {
  const lines = splitLines(bundle);
  const out: Tampered[] = [];
  const last = lines.length - 1; // the end line
  // Lines 2.. (the checkpoint, any consistency or selection line, the entries, the end line).
  for (let i = 1; i <= last; i++) {
    const line = lines[i]!;
    // Five bytes spread over the line, each flipped in its lowest bit.
    for (let k = 0; k < 5; k++) {
      const at = Math.floor(((k + 0.5) * line.length) / 5);
      const copy = Uint8Array.from(line);
      copy[at]! ^= 0x01;
      out.push({ what: `line ${i + 1}: byte ${at} flipped`, bytes: joinLines(lines.map((l, j) => (j === i ? copy : l))) });
    }
    out.push({ what: `line ${i + 1} dropped`, bytes: joinLines(lines.filter((_, j) => j !== i)) });
    if (i < last) {
      const swapped = [...lines];
      [swapped[i], swapped[i + 1]] = [swapped[i + 1]!, swapped[i]!];
      out.push({ what: `lines ${i + 1} and ${i + 2} swapped`, bytes: joinLines(swapped) });
    }
  }
  const entry = lines[last - 1]!;
  out.push({ what: "the last entry repeated", bytes: joinLines([...lines.slice(0, last), entry, lines[last]!]) });
  out.push({ what: "a line appended after the end", bytes: joinLines([...lines, entry]) });
  out.push({ what: "the end line cut off", bytes: joinLines(lines.slice(0, last)) });
  out.push({ what: "the last byte cut off", bytes: bundle.subarray(0, bundle.length - 2) });
  return out;
}

const genuine = cases.filter((c) => c.name.startsWith("genuine-") && c.expected.verified);

test("tampered copies of the genuine bundles all fail", async (t) => {
  if (genuine.length === 0) {
    missing(t, `no genuine bundle in the tamper corpus at ${corpusDir()}`);
    return;
  }
  let count = 0;
  for (const c of genuine) {
    const bundle = readFileSync(c.bundlePath);
    assert.equal((await tsVerdict(bundle, c.keys, c.trustedCheckpoints)).verified, true, `${c.name} verifies untouched`);
    for (const tampered of tamperings(bundle)) {
      const got = await tsVerdict(tampered.bytes, c.keys, c.trustedCheckpoints);
      assert.equal(got.verified, false, `${c.name}, ${tampered.what}: verified`);
      count++;
    }
  }
  assert.ok(count > 100, `only ${count} tampered copies`);
});

test("tampered copies: the same verdict as `cairn verify`", async (t) => {
  const bin = cairnBin();
  if (bin === undefined) {
    missing(t, "no cairn binary (build it with cargo build -p cairn, or set CAIRN_BIN)");
    return;
  }
  if (genuine.length === 0) {
    missing(t, `no genuine bundle in the tamper corpus at ${corpusDir()}`);
    return;
  }
  const disagreements: string[] = [];
  let compared = 0;
  const compare = async (c: CorpusCase, what: string, bytes: Uint8Array): Promise<void> => {
    const rust = rustVerdict(bin, bytes, c.keys, c.trustedCheckpoints, c.witnesses, c.witnessQuorum);
    const ours = await tsVerdict(bytes, c.keys, c.trustedCheckpoints, c.witnesses, c.witnessQuorum);
    const diff = differences(rust, ours, [...COMPARED, "trace_id", "last_valid_seq"]);
    if (Object.keys(diff).length > 0) disagreements.push(`${c.name}, ${what}: (rust, typescript) ${JSON.stringify(diff)}; rust: ${rust.detail}; typescript: ${ours.detail}`);
    compared++;
  };
  for (const c of genuine) {
    const bundle = readFileSync(c.bundlePath);
    await compare(c, "untouched", bundle);
    for (const tampered of tamperings(bundle)) await compare(c, tampered.what, tampered.bytes);
  }
  // The corpus itself, through the binary, so that an outdated corpus shows.
  for (const c of cases) await compare(c, "as in the corpus", readFileSync(c.bundlePath));
  assert.deepEqual(disagreements, [], `${disagreements.length} of ${compared} verdicts differ`);
});

// -- witness policies --------------------------------------------------------------

test("a witness policy: who cosigned, and policies that cannot be applied", async (t) => {
  const met = cases.find((c) => c.name === "witnessed-quorum-met");
  const lacking = cases.find((c) => c.name === "witnessed-a-witness-missing");
  if (met === undefined || lacking === undefined) {
    missing(t, `no witnessed bundles in the tamper corpus at ${corpusDir()}`);
    return;
  }
  const bundle = readFileSync(met.bundlePath);
  const verdict = await verifyBundle(bundle, { keys: met.keys, witnesses: met.witnesses });
  assert.equal(verdict.verified, true, verdict.failure?.detail);
  assert.deepEqual(verdict.cosignedBy, { witnesses: ["w1.example", "w2.example"], quorum: 2 });
  const short = await verifyBundle(readFileSync(lacking.bundlePath), { keys: lacking.keys, witnesses: lacking.witnesses });
  assert.equal(short.failure?.reason, "insufficient-cosignatures");
  assert.equal(short.failure?.at.line, 2);
  assert.match(short.failure?.detail ?? "", /carries 1 valid cosignature\(s\) of the 2 the witness policy needs \(by w1\.example\)/);
  assert.deepEqual(short.cosignedBy, { witnesses: ["w1.example"], quorum: 2 });
  assert.equal((await verifyBundle(bundle, { keys: met.keys })).cosignedBy, undefined);
  const [w1, w2] = met.witnesses as [string, string];
  // The log's own key is not a witness key.
  await assert.rejects(verifyBundle(bundle, { witnesses: [met.keys[0]!] }), VkeyError);
  await assert.rejects(verifyBundle(bundle, { witnesses: ["not a vkey"] }), VkeyError);
  for (const [witnesses, witnessQuorum] of [
    [[w1, w2], 0],
    [[w1, w2], 3],
    [[w1, w2], 1.5],
    [[w1, w1], undefined],
    [[], 1],
  ] as [string[], number | undefined][]) {
    await assert.rejects(
      verifyBundle(bundle, { witnesses, ...(witnessQuorum === undefined ? {} : { witnessQuorum }) }),
      WitnessPolicyError,
      `${witnesses.length} witnesses, quorum ${witnessQuorum}`,
    );
  }
  // One key under two names would count one cosignature twice.
  const renamed = await renamedVkey(w1, "w1-again.example");
  await assert.rejects(verifyBundle(bundle, { witnesses: [w1, renamed] }), /has the key of another witness/);
  // At most 64 witnesses, counted first (as the Rust policy).
  const many = await Promise.all(Array.from({ length: 65 }, (_, i) => renamedVkey(w1, `w${i}.example`)));
  await assert.rejects(verifyBundle(bundle, { witnesses: many }), /at most 64 witnesses, not 65/);
});

/** `vkey`'s key under another name (its key id computed again). */
async function renamedVkey(vkey: string, name: string): Promise<string> {
  const key = await parseVkey(vkey);
  return vkeyText({ ...key, name, keyId: await noteKeyId(name, key.algorithm, key.publicKey) });
}
