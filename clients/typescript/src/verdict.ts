// The verdict of verifying a bundle (FORMAT.md 9.6), in the shape the
// verifier returns it.

import type { Selection } from "./forms.js";

/** The reason codes of FORMAT.md 9.1. */
export const REASONS = [
  "malformed-record", "sequence-gap", "prev-hash-mismatch", "chain-hash-mismatch", "digest-mismatch",
  "bad-signature", "inclusion-mismatch", "inconsistent-checkpoint", "missing-record", "step-after-seal",
  "seal-mismatch", "profile-violation", "predecessor-mismatch", "duplicate-record", "uncovered-entry",
  "unlisted-entry", "missing-proof", "erasure-mismatch", "bad-timestamp", "selection-mismatch", "insufficient-cosignatures",
] as const;
export type Reason = (typeof REASONS)[number];

/** Where a record is (FORMAT.md 9.6); a member that does not apply is null.
 * The names are those of `cairn verify --json`'s `brokenAt`. */
export interface Position {
  line: number | null;
  seq: number | null;
  session_id: string | null;
  step_index: number | null;
  trace_id: string | null;
}

export interface Failure {
  reason: Reason;
  /** For a person; not part of what two verifiers must agree on. */
  detail: string;
  at: Position;
}

export interface Verdict {
  verified: boolean;
  /** Entries checked, the failing one included (FORMAT.md 9.6). */
  recordsChecked: number;
  /** The last entry that passed every check, or null. */
  lastValid: Position | null;
  failure?: Failure;
  orgId?: string;
  origin?: string;
  completeLog?: boolean;
  /** The bundle checkpoint's size (decimal text: it may exceed 2^53). */
  checkpointSize?: string;
  checkpointRoot?: string;
  /** A partial bundle's selection, once its note verified. */
  selection?: Selection;
  /** Whether the keys were given by the caller rather than read from the bundle's header. */
  keyPinned: boolean;
  /** Under a witness policy, once the checkpoint's signature verified:
   * who cosigned it and the quorum. */
  cosignedBy?: CosignedBy;
}

export interface VerifyOptions {
  /** The server keys to trust, as vkeys (`name+hex+base64`, what `cairn keys`
   * prints). Without them the bundle header's own key is used, which proves
   * integrity but not who signed. */
  keys?: readonly string[];
  /** Signed checkpoint notes kept earlier (by you or witnesses): the bundle
   * must be consistent with each. One that is not a signed note at all
   * throws TrustedCheckpointError. */
  trustedCheckpoints?: readonly string[];
  /** A witness policy (FORMAT.md 7.7): witness cosignature keys, as vkeys
   * of algorithm 0x04 (what `cairn witness` prints). The bundle's
   * checkpoint must carry valid cosignatures by `witnessQuorum` of them,
   * or the verdict fails with `insufficient-cosignatures` at line 2. At
   * most 64 witnesses, distinct names and keys; a key that is not a
   * witness vkey throws VkeyError, a bad policy WitnessPolicyError. */
  witnesses?: readonly string[];
  /** How many of `witnesses` must have cosigned: 1 to their number
   * (default: all of them). Only with `witnesses`. */
  witnessQuorum?: number;
}

/** The names a verification's options may have. */
export const VERIFY_OPTIONS = ["keys", "trustedCheckpoints", "witnesses", "witnessQuorum"] as const;

/** The error for an options object that is not one, or names anything
 * but `allowed`, else undefined. From plain JavaScript an option spelt
 * otherwise (`session_id` for `sessionId`) would otherwise be ignored
 * without a word, and a filter silently not applied; the message names
 * the option meant. */
export function unknownOption(method: string, options: unknown, allowed: readonly string[]): TypeError | undefined {
  if (options === undefined) return undefined;
  if (options === null || typeof options !== "object" || Array.isArray(options)) {
    return new TypeError(`${method}: the options are an object, not ${options === null ? "null" : Array.isArray(options) ? "an array" : typeof options}`);
  }
  for (const name of Object.keys(options)) {
    if (allowed.includes(name)) continue;
    const camel = name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
    const meant = camel !== name && allowed.includes(camel) ? ` (the option is ${camel})` : "";
    return new TypeError(`${method}: unknown option ${JSON.stringify(name)}${meant}; the options are ${allowed.join(", ")}`);
  }
  return undefined;
}

/** The witnesses whose cosignature on the bundle's checkpoint verified,
 * and the quorum the policy asked for. */
export interface CosignedBy {
  witnesses: string[];
  quorum: number;
}

export type BundleInput = string | Uint8Array | ArrayBuffer;
