// The streamed verifier (what the web UI runs on a dropped file) gives the
// same verdict as the whole-buffer one on every corpus case, whatever the
// chunk boundaries (inside a line, at a newline, between \r and \n), and
// reports its progress; and the copy of the compiled verifier that the
// server embeds (crates/cairn-server/src/ui/verifier) is this build's.

import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { verifyBundle, verifyBundleStream } from "../src/verify.js";
import { corpusCases } from "./helpers.js";

async function* chunked(bytes: Uint8Array, size: number): AsyncGenerator<Uint8Array> {
  for (let at = 0; at < bytes.length; at += size) yield bytes.subarray(at, Math.min(bytes.length, at + size));
}

test("streamed and whole-buffer verdicts agree on the corpus, at any chunk size", async () => {
  const cases = corpusCases();
  assert.ok(cases.length > 0, "the tamper corpus is needed (cargo test -p cairn --test tamper)");
  for (const c of cases) {
    const bytes = new Uint8Array(readFileSync(c.bundlePath));
    const options = { keys: c.keys, trustedCheckpoints: c.trustedCheckpoints };
    const whole = await verifyBundle(bytes, options);
    for (const size of [1, 7, 4096]) {
      let progress = 0;
      const streamed = await verifyBundleStream(chunked(bytes, size), {
        ...options,
        onProgress: (n) => {
          assert.ok(n >= progress, "progress never goes back");
          progress = n;
        },
      });
      assert.deepEqual(streamed, whole, `${c.name} in chunks of ${size}`);
      if (whole.verified) assert.equal(progress, bytes.length, `${c.name}: progress reaches the end`);
    }
  }
});

test("a CRLF split across chunks is one line end", async () => {
  const c = corpusCases().find((x) => x.expected.verified === true);
  assert.ok(c !== undefined);
  const text = readFileSync(c.bundlePath, "utf8").replaceAll("\n", "\r\n");
  const bytes = new TextEncoder().encode(text);
  const cr = bytes.indexOf(0x0d);
  async function* split(): AsyncGenerator<Uint8Array> {
    yield bytes.subarray(0, cr + 1);
    yield bytes.subarray(cr + 1);
  }
  const options = { keys: c.keys, trustedCheckpoints: c.trustedCheckpoints };
  assert.deepEqual(await verifyBundleStream(split(), options), await verifyBundle(bytes, options));
});

test("the server embeds this build of the verifier", () => {
  const embedded = join(import.meta.dirname, "..", "..", "..", "..", "crates", "cairn-server", "src", "ui", "verifier");
  const built = join(import.meta.dirname, "..", "src");
  const names = readdirSync(embedded).filter((n) => n.endsWith(".js"));
  assert.ok(names.includes("verify.js"), `no verify.js in ${embedded}`);
  for (const name of names) {
    assert.equal(
      readFileSync(join(embedded, name), "utf8"),
      readFileSync(join(built, name), "utf8").replace(/\n\/\/# sourceMappingURL=.*\n?$/, "\n"),
      `${name} differs from the TypeScript build: run scripts/ui-verifier`,
    );
  }
});
