// Crafted edge cases of the genuine complete bundle, where a lax reading of
// FORMAT.md (or the Python verifier) differs from the Rust reference: the
// order of the read-time checks, curve points, year 0, the signature bound
// of signed notes, Unicode white space in key names. The expected verdicts
// are the Rust verifier's (cairn 0.1.0); with the binary present, each is
// also compared with `cairn verify` as it is now.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { isCurvePoint } from "../src/ed25519.js";
import { splitVkeys } from "../src/note.js";
import { TrustedCheckpointError, verifyBundle } from "../src/verify.js";
import { cairnBin, corpusCases, corpusDir, differences, missing, rustVerdict, tsVerdict, type Comparable } from "./helpers.js";

interface Edge {
  what: string;
  lines: string[];
  keys: string[];
  expected: Partial<Comparable>;
}

function edges(lines: readonly string[], keys: string[]): Edge[] {
  const out: Edge[] = [];
  const edit = (index: number, change: (obj: Record<string, any>) => void): string[] => {
    const copy = [...lines];
    const obj = JSON.parse(copy[index]!) as Record<string, any>;
    change(obj);
    copy[index] = JSON.stringify(obj);
    return copy;
  };
  const start = lines.findIndex((l) => l.includes('"type":"session-start"'));
  out.push({
    what: "a wrong genesis and a proof on a complete bundle's entry: the genesis is checked first (10.1, steps 3 and 4)",
    lines: edit(start, (o) => {
      o["view"].genesis = "0".repeat(64);
      o["proof"] = [];
    }),
    keys,
    expected: { verified: false, reason: "digest-mismatch", line: start + 1, seq: JSON.parse(lines[start]!).seq, session_id: null },
  });
  const registration = lines.findIndex((l) => l.includes('"type":"key-registration"'));
  if (registration >= 0) {
    let bytes = new Uint8Array(32);
    for (let y = 2; isCurvePoint(bytes); y++) (bytes = new Uint8Array(32))[0] = y;
    out.push({
      what: "a registered key that is not a curve point is malformed when read (5.2), before its record hash",
      lines: edit(registration, (o) => (o["view"].public_key = Buffer.from(bytes).toString("base64"))),
      keys,
      expected: { verified: false, reason: "malformed-record", line: registration + 1, seq: JSON.parse(lines[registration]!).seq },
    });
  }
  out.push({
    what: "year 0000 is a canonical timestamp (the header's exported_at is informative)",
    lines: edit(0, (o) => (o["exported_at"] = "0000-01-01T00:00:00.000000Z")),
    keys,
    expected: { verified: true },
  });
  const checkpoint = (JSON.parse(lines[1]!) as { checkpoint: string }).checkpoint;
  const trustedLine = checkpoint.slice(checkpoint.lastIndexOf("\n\n") + 2);
  const unknown = (n: number): string =>
    Array.from({ length: n }, (_, i) => `\u2014 other ${Buffer.from([0, 0, i >> 8, i & 255, 1, 2, 3]).toString("base64")}\n`).join("");
  const withNote = (note: string): string[] => [lines[0]!, JSON.stringify({ checkpoint: note }), ...lines.slice(2)];
  out.push({ what: "100 distinct signature lines", lines: withNote(checkpoint + unknown(99)), keys, expected: { verified: true } });
  out.push({
    what: "101 distinct signature lines",
    lines: withNote(checkpoint + unknown(100)),
    keys,
    expected: { verified: false, reason: "malformed-record", line: 2, records_checked: 0 },
  });
  out.push({
    // FORMAT.md 7.1: a line repeated exactly counts once, wherever it comes.
    what: "100 distinct signature lines and one repeated",
    lines: withNote(checkpoint + unknown(99) + trustedLine),
    keys,
    expected: { verified: true },
  });
  out.push({
    what: "a signer name holding U+0085 (Unicode white space)",
    lines: withNote(checkpoint + "\u2014 a\u0085b AAAAAAE=\n"),
    keys,
    expected: { verified: false, reason: "malformed-record", line: 2 },
  });
  out.push({ what: "a signer name holding U+FEFF (not white space)", lines: withNote(checkpoint + "\u2014 a\ufeffb AAAAAAE=\n"), keys, expected: { verified: true } });
  return out;
}

const complete = corpusCases().find((c) => c.name === "genuine-complete");

test("crafted edge cases: the Rust verifier's verdicts", async (t) => {
  if (complete === undefined) return missing(t, `no genuine-complete bundle in the tamper corpus at ${corpusDir()}`);
  const bin = cairnBin();
  const lines = readFileSync(complete.bundlePath, "utf8").split("\n");
  for (const edge of edges(lines, complete.keys)) {
    const bytes = Buffer.from(edge.lines.join("\n"));
    const ours = await tsVerdict(bytes, edge.keys, []);
    const names = Object.keys(edge.expected) as (keyof Comparable)[];
    assert.deepEqual(differences({ ...ours, ...edge.expected }, ours, names), {}, `${edge.what}: ${ours.detail}`);
    if (bin !== undefined) {
      const rust = rustVerdict(bin, bytes, edge.keys, []);
      assert.deepEqual(differences(rust, ours), {}, `${edge.what}: rust said ${rust.detail}, typescript ${ours.detail}`);
    }
  }
});

test("vkeys listed in a text split at Unicode White_Space only", () => {
  // A name may hold U+FEFF (not White_Space; JavaScript's \s has it) and
  // never U+0085 (White_Space; \s lacks it).
  const a = "a\ufeffb+01234567+AQ==";
  const b = "c+89abcdef+AQ==";
  assert.deepEqual(splitVkeys(`  ${a}\u0085${b}\n\u3000`), [a, b]);
  assert.deepEqual(splitVkeys(" \t\n"), []);
});

test("a trusted checkpoint that is not a signed note throws; one of another key is a verdict", async (t) => {
  if (complete === undefined) return missing(t, `no genuine-complete bundle in the tamper corpus at ${corpusDir()}`);
  const bundle = readFileSync(complete.bundlePath);
  for (const notANote of ["", "cp19.txt", "cairn.test/acme\n1\n"]) {
    await assert.rejects(
      verifyBundle(bundle, { keys: complete.keys, trustedCheckpoints: [notANote] }),
      (e: unknown) => e instanceof TrustedCheckpointError && /trusted checkpoint 1 is not a signed note/.test(e.message),
      JSON.stringify(notANote),
    );
  }
  const checkpoint = JSON.parse(readFileSync(complete.bundlePath, "utf8").split("\n")[1]!)["checkpoint"] as string;
  const otherKey = checkpoint.replace("\n\n\u2014 ", "\n\n\u2014 another.");
  const verdict = await verifyBundle(bundle, { keys: complete.keys, trustedCheckpoints: [otherKey] });
  assert.equal(verdict.failure?.reason, "bad-signature");
  assert.equal(verdict.failure?.at.line, 2);
});
