// The verifier's primitives against published vectors (RFC 8785 JCS,
// RFC 6962/9162 Merkle proofs, C2SP signed notes, in ../shared/vectors),
// FORMAT.md section 11's worked example, and the strict JSON rules of 2.2.

import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { taggedHash, toBase64, toHex, utf8 } from "../src/bytes.js";
import { canonicalJson } from "../src/jcs.js";
import { verifyConsistency, verifyInclusion } from "../src/merkle.js";
import { openNote, parseCheckpoint, parseVkey } from "../src/note.js";
import { JsonDouble, parseStrictJson, StrictJsonError } from "../src/strict-json.js";

const HERE = fileURLToPath(new URL(".", import.meta.url));
// dist/test -> clients/typescript -> the repository -> its parent
const PACKAGE = resolve(HERE, "..", "..");
const VECTORS = resolve(process.env["CAIRN_VECTORS"] ?? join(PACKAGE, "..", "..", "..", "shared", "vectors"));
const ci = process.env["CI"] === "true";

function vectorsOr(skip: (message: string) => void): boolean {
  if (existsSync(VECTORS)) return true;
  const message = `no published vectors at ${VECTORS} (set CAIRN_VECTORS)`;
  if (ci) assert.fail(message);
  skip(message);
  return false;
}

function files(dir: string, suffix: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...files(path, suffix));
    else if (name.endsWith(suffix)) out.push(path);
  }
  return out;
}

/** Go's base64 (the vectors' encoding) may hold hashes of any length. */
function b64(text: string): Uint8Array {
  return new Uint8Array(Buffer.from(text, "base64"));
}

test("JCS: every RFC 8785 vector canonicalizes to its expected bytes", (t) => {
  if (!vectorsOr((m) => t.skip(m))) return;
  const inputs = files(join(VECTORS, "jcs", "input"), ".json");
  assert.ok(inputs.length >= 6);
  for (const input of inputs) {
    const name = input.split("/").pop()!;
    const expected = readFileSync(join(VECTORS, "jcs", "output", name), "utf8");
    // JSON.parse here: the vectors hold numbers JCS must print, such as 1e+30.
    assert.equal(canonicalJson(JSON.parse(readFileSync(input, "utf8"))), expected, name);
  }
});

test("Merkle: every RFC 9162 inclusion and consistency vector", async (t) => {
  if (!vectorsOr((m) => t.skip(m))) return;
  let checked = 0;
  for (const path of files(join(VECTORS, "merkle", "testdata", "inclusion"), ".json")) {
    const v = JSON.parse(readFileSync(path, "utf8")) as {
      leafIdx: number; treeSize: number; root: string; leafHash: string; proof: string[] | null; wantErr: boolean;
    };
    const ok = await verifyInclusion(b64(v.leafHash), BigInt(v.leafIdx), BigInt(v.treeSize), (v.proof ?? []).map(b64), b64(v.root));
    assert.equal(ok, !v.wantErr, path);
    checked++;
  }
  for (const path of files(join(VECTORS, "merkle", "testdata", "consistency"), ".json")) {
    const v = JSON.parse(readFileSync(path, "utf8")) as {
      size1: number; size2: number; root1: string; root2: string; proof: string[] | null; wantErr: boolean;
    };
    const ok = await verifyConsistency(BigInt(v.size1), BigInt(v.size2), (v.proof ?? []).map(b64), b64(v.root1), b64(v.root2));
    assert.equal(ok, !v.wantErr, path);
    checked++;
  }
  assert.ok(checked > 100, `only ${checked} Merkle vectors`);
});

test("signed notes: the C2SP examples verify, the tampered one does not", async (t) => {
  if (!vectorsOr((m) => t.skip(m))) return;
  const { vectors } = JSON.parse(readFileSync(join(VECTORS, "signed-note", "vectors.json"), "utf8")) as {
    vectors: { verifier_key?: string; note: string; valid?: boolean; checkpoint?: { origin: string; size: number; root_hash_base64: string } }[];
  };
  for (const v of vectors) {
    if (v.verifier_key !== undefined) {
      const key = await parseVkey(v.verifier_key);
      const verified = await openNote(v.note, [key]).then(() => true, () => false);
      assert.equal(verified, v.valid, v.note.slice(0, 40));
    }
    if (v.checkpoint !== undefined) {
      const text = v.note.slice(0, v.note.lastIndexOf("\n\n") + 1);
      const checkpoint = parseCheckpoint(text);
      assert.equal(checkpoint.origin, v.checkpoint.origin);
      assert.equal(checkpoint.size, BigInt(v.checkpoint.size));
      assert.equal(toBase64(checkpoint.root), v.checkpoint.root_hash_base64);
    }
  }
});

test("FORMAT.md 11: the worked example's genesis, selection hash and checkpoint signature", async () => {
  const header = {
    agent_id: "analyst", caller: "key-1", full_consent: false, max_clock_skew_s: 300, org_id: "acme", predecessor: null,
    profile: "standard", session_id: "revenue-analysis-q4", started_at: "2025-01-15T10:30:00.000000Z",
  };
  assert.equal(toHex(await taggedHash("cairn/v2/genesis", utf8(canonicalJson(header)))),
    "b77a91bada30869bd64cb1f13233a0ab927e45258ef5d15e4966e2411d4647bb");
  const selection = parseStrictJson(
    '{"checkpoint_size":3,"level":"generic","records":[[0,"session-start"]],"scope":{"session":"revenue-analysis-q4"},"sessions":[{"head":"f7d356a66d0cc6464e651eee87542be90132cf0236fbebd99f646330a298f0ed","session_id":"revenue-analysis-q4","steps":2}]}',
  );
  assert.equal(toHex(await taggedHash("cairn/v2/selection", utf8(canonicalJson(selection)))),
    "efafe038aa8fa28132af6866afc8e335f7c26c0915f725236bf3a903c72a23ba");
  const key = await parseVkey("cairn.example+19424baa+AdBKsjJ0K7SrOhNovUYV5ObQIkq3GgFrr4UgozLJd4c3");
  const root = Buffer.from("506ca0323a7e33d62979c7151e6e1c73fef518bb505783bd9cebda12113360b1", "hex").toString("base64");
  const text = `cairn.example/acme\n3\n${root}\n`;
  const note = `${text}\n\u2014 cairn.example GUJLqrMz+y27IS+u8tR+pGeMLkxGEqfm9ZrT4BrnbwpKQ/YV/Qa9FhFoaApnN5a8hy9PW1XqKPQtLGuQ9s/GHnttlgU=\n`;
  assert.equal(await openNote(note, [key]), text);
  // One changed byte of the text and the signature no longer holds.
  await assert.rejects(openNote(note.replace("\n3\n", "\n4\n"), [key]), /does not verify/);
});

test("strict JSON: the rules of FORMAT.md 2.2", () => {
  const refused = [
    '{"a":1,"a":2}', '{"x":{"a":1,"a":1}}', "9007199254740992", "-9007199254740992", "1e400", "01", "[1,]",
    '"\\ud800"', '"\\udc00"', '"\\ud800\\u0041"', '"a\u0001b"', "\ufeff{}", "{} x", "NaN", "[" .repeat(128) + "]".repeat(128),
  ];
  for (const text of refused) assert.throws(() => parseStrictJson(text), StrictJsonError, text.slice(0, 30));
  assert.equal(parseStrictJson("9007199254740991"), 9007199254740991);
  assert.deepEqual(parseStrictJson('"\\ud83d\\ude00\uffff"'), "\u{1f600}\uffff");
  assert.ok(parseStrictJson("1.0") instanceof JsonDouble, "1.0 is a double, never an integer");
  assert.doesNotThrow(() => parseStrictJson("[".repeat(127) + "]".repeat(127)));
  const proto = parseStrictJson('{"__proto__":{"x":1}}') as Record<string, unknown>;
  assert.ok(Object.hasOwn(proto, "__proto__"), "__proto__ is an ordinary member");
  assert.equal(canonicalJson(parseStrictJson('{"b":[1.5e3,-0,1e21,0.1],"a":"\\u000f\\u00e9"}')), '{"a":"\\u000fé","b":[1500,0,1e+21,0.1]}');
});

test("the verifier imports no Node module (it must run in browsers)", () => {
  const dist = join(PACKAGE, "dist", "src");
  for (const name of readdirSync(dist).filter((f) => f.endsWith(".js"))) {
    const text = readFileSync(join(dist, name), "utf8");
    assert.doesNotMatch(text, /from\s+["']node:|require\(/, `${name} imports a Node module`);
  }
});
