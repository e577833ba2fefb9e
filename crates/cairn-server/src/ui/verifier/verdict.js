// The verdict of verifying a bundle (FORMAT.md 9.6), in the shape the
// verifier returns it.
/** The reason codes of FORMAT.md 9.1. */
export const REASONS = [
    "malformed-record", "sequence-gap", "prev-hash-mismatch", "chain-hash-mismatch", "digest-mismatch",
    "bad-signature", "inclusion-mismatch", "inconsistent-checkpoint", "missing-record", "step-after-seal",
    "seal-mismatch", "profile-violation", "predecessor-mismatch", "duplicate-record", "uncovered-entry",
    "unlisted-entry", "missing-proof", "erasure-mismatch", "bad-timestamp", "selection-mismatch", "insufficient-cosignatures",
];
/** The names a verification's options may have. */
export const VERIFY_OPTIONS = ["keys", "trustedCheckpoints", "witnesses", "witnessQuorum"];
/** The error for an options object that is not one, or names anything
 * but `allowed`, else undefined. From plain JavaScript an option spelt
 * otherwise (`session_id` for `sessionId`) would otherwise be ignored
 * without a word, and a filter silently not applied; the message names
 * the option meant. */
export function unknownOption(method, options, allowed) {
    if (options === undefined)
        return undefined;
    if (options === null || typeof options !== "object" || Array.isArray(options)) {
        return new TypeError(`${method}: the options are an object, not ${options === null ? "null" : Array.isArray(options) ? "an array" : typeof options}`);
    }
    for (const name of Object.keys(options)) {
        if (allowed.includes(name))
            continue;
        const camel = name.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
        const meant = camel !== name && allowed.includes(camel) ? ` (the option is ${camel})` : "";
        return new TypeError(`${method}: unknown option ${JSON.stringify(name)}${meant}; the options are ${allowed.join(", ")}`);
    }
    return undefined;
}
