// The verdict of verifying a bundle (FORMAT.md 9.6), in the shape the
// verifier returns it.
/** The reason codes of FORMAT.md 9.1. */
export const REASONS = [
    "malformed-record", "sequence-gap", "prev-hash-mismatch", "chain-hash-mismatch", "digest-mismatch",
    "bad-signature", "inclusion-mismatch", "inconsistent-checkpoint", "missing-record", "step-after-seal",
    "seal-mismatch", "profile-violation", "predecessor-mismatch", "duplicate-record", "uncovered-entry",
    "unlisted-entry", "missing-proof", "erasure-mismatch", "bad-timestamp", "selection-mismatch", "insufficient-cosignatures",
];
