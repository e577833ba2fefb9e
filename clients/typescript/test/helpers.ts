// Shared by the tests: where the tamper corpus and the `cairn` binary are,
// and both verifiers' verdicts in one shape (as tests/python's
// test_verifier_agreement.py compares them).

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { verifyBundle } from "../src/verify.js";

/** clients/typescript (the tests run from dist/test). */
export const PACKAGE = resolve(fileURLToPath(new URL(".", import.meta.url)), "..", "..");
export const REPO = resolve(PACKAGE, "..", "..");
export const CI = process.env["CI"] === "true";

/** Fails under CI=true, skips otherwise: a missing input must not pass silently in CI. */
export function missing(t: { skip: (message: string) => void }, message: string): void {
  if (CI) assert.fail(message);
  t.skip(message);
}

export function corpusDir(): string {
  return resolve(process.env["CAIRN_TAMPER_CORPUS"] ?? join(REPO, "target", "tamper-corpus"));
}

export interface CorpusCase {
  name: string;
  bundlePath: string;
  keys: string[];
  trustedCheckpoints: string[];
  witnesses: string[];
  witnessQuorum: number | undefined;
  expected: Comparable;
}

export function corpusCases(): CorpusCase[] {
  const dir = corpusDir();
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith(".json"))
    .sort()
    .map((f) => {
      const spec = JSON.parse(readFileSync(join(dir, f), "utf8")) as {
        bundle: string; keys?: string[]; trusted_checkpoints?: string[]; witnesses?: string[];
        witness_quorum?: number | null; expected: Comparable;
      };
      return {
        name: f.slice(0, -".json".length),
        bundlePath: join(dir, spec.bundle),
        keys: spec.keys ?? [],
        trustedCheckpoints: spec.trusted_checkpoints ?? [],
        witnesses: spec.witnesses ?? [],
        witnessQuorum: spec.witness_quorum ?? undefined,
        expected: spec.expected,
      };
    });
}

export function cairnBin(): string | undefined {
  const path = resolve(process.env["CAIRN_BIN"] ?? join(REPO, "target", "debug", "cairn"));
  return existsSync(path) ? path : undefined;
}

/** What two verifiers must agree on (FORMAT.md 9.6). */
export interface Comparable {
  verified: boolean;
  reason: string | null;
  line: number | null;
  seq: number | null;
  session_id: string | null;
  step_index: number | null;
  records_checked: number;
  trace_id?: string | null;
  last_valid_seq?: number | null;
  detail?: string | null;
}

export const COMPARED = ["verified", "reason", "line", "seq", "session_id", "step_index", "records_checked"] as const;

export async function tsVerdict(
  bundle: Uint8Array,
  keys: readonly string[],
  trusted: readonly string[],
  witnesses: readonly string[] = [],
  witnessQuorum?: number,
): Promise<Comparable> {
  const v = await verifyBundle(bundle, {
    keys,
    trustedCheckpoints: trusted,
    witnesses,
    ...(witnessQuorum === undefined ? {} : { witnessQuorum }),
  });
  const at = v.failure?.at;
  return {
    verified: v.verified,
    reason: v.failure?.reason ?? null,
    line: at?.line ?? null,
    seq: at?.seq ?? null,
    session_id: at?.session_id ?? null,
    step_index: at?.step_index ?? null,
    trace_id: at?.trace_id ?? null,
    records_checked: v.recordsChecked,
    last_valid_seq: v.lastValid?.seq ?? null,
    detail: v.failure?.detail ?? null,
  };
}

let scratch: string | undefined;

/** `cairn verify --bundle F --json` on the bytes, in the shape above. */
export function rustVerdict(
  bin: string,
  bundle: Uint8Array,
  keys: readonly string[],
  trusted: readonly string[],
  witnesses: readonly string[] = [],
  witnessQuorum?: number,
): Comparable {
  if (scratch === undefined) {
    const dir = mkdtempSync(join(tmpdir(), "cairn-ts-verify-"));
    // Each test file runs in its own process: its scratch directory goes with it.
    process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
    scratch = dir;
  }
  const path = join(scratch, "bundle.jsonl");
  writeFileSync(path, bundle);
  const args = ["verify", "--bundle", path, "--json"];
  for (const key of keys) args.push("--key", key);
  trusted.forEach((note, i) => {
    const file = join(scratch!, `trusted-${i}.checkpoint`);
    writeFileSync(file, note);
    args.push("--checkpoint", file);
  });
  for (const witness of witnesses) args.push("--witness", witness);
  if (witnessQuorum !== undefined) args.push("--witness-quorum", String(witnessQuorum));
  const run = spawnSync(bin, args, { cwd: scratch, timeout: 120_000 });
  let out: Record<string, unknown>;
  try {
    out = JSON.parse(run.stdout.toString("utf8")) as Record<string, unknown>;
  } catch {
    throw new Error(`cairn verify said no JSON: ${run.stderr.toString("utf8")}${run.stdout.toString("utf8")}`);
  }
  const at = (out["brokenAt"] ?? {}) as Record<string, unknown>;
  return {
    verified: out["verified"] as boolean,
    reason: (out["brokenReason"] ?? null) as string | null,
    line: (at["line"] ?? null) as number | null,
    seq: (at["seq"] ?? null) as number | null,
    session_id: (at["session_id"] ?? null) as string | null,
    step_index: (at["step_index"] ?? null) as number | null,
    trace_id: (at["trace_id"] ?? null) as string | null,
    records_checked: out["totalChecked"] as number,
    last_valid_seq: (out["lastValidSequence"] ?? null) as number | null,
    detail: (out["detail"] ?? null) as string | null,
  };
}

/** The members two verdicts disagree on, as [expected, got]. */
export function differences(expected: Comparable, got: Comparable, names: readonly (keyof Comparable)[] = COMPARED): Record<string, [unknown, unknown]> {
  const out: Record<string, [unknown, unknown]> = {};
  for (const name of names) if (expected[name] !== got[name]) out[name] = [expected[name], got[name]];
  return out;
}
