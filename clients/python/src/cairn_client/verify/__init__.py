"""Offline verification of Cairn export bundles, written from docs/FORMAT.md
(format 2) alone.

Nothing here talks to a server: give it a bundle (the file `cairn export`
or `GET /v1/export` produced), ideally the operator's published server key,
and any checkpoints you kept, and it replays the published algorithm: strict
JSON (2.2), the signed checkpoint and trusted checkpoints (10.2), consistency
lines, a partial bundle's signed selection (10.4), every record (9.2, 9.3),
erasures and detail levels (8), time (5.4), agent keys (7.3), signed traces
(7.4), seals (7.2), continuity between sessions, and the Merkle log (every
leaf folded into the root for a complete bundle, every inclusion proof for a
partial one). It reads the bundle as a stream, line by line, and stops at the
first failure, naming the record and the reason with the codes of section
9.1 (`digest-mismatch`, `prev-hash-mismatch`, ...).

The modules, each importing only those before it in this list:

- `constants`: the committed fields, detail levels, step kinds, link names
  and entry types;
- `verdict`: the reason codes, `Position`, `Failure`, `Verdict`, and the
  internal `_Fail`;
- `hashing`: SHA-256, the tagged framing, integers, canonical base64 and hex;
- `merkle`: RFC 9162 hashes, the running frontier, inclusion and
  consistency proofs;
- `notes`: vkeys, signed notes, cosignatures, checkpoints;
- `forms`: timestamps, identifiers and the form of every line (views,
  signed traces, step entries, selections);
- `verifier`: `_Verifier`, the line-by-line checks of sections 9 and 10;
- `bundle`: reading the bundle's lines, and `verify_bundle`.

This package re-exports its public names (and the internals the tests
check against the published vectors), so what was imported from
`cairn_client.verify` still is.
"""
from __future__ import annotations

from .bundle import BundleSource as BundleSource, verify_bundle
from .constants import FIELDS, LEVEL_SHOWS as LEVEL_SHOWS
from .verdict import REASONS, Failure, Position, Verdict

# Internals that tests/python/test_client_vectors.py and
# the verifier agreement tests (tests/python/agreement.py) reach as
# `cairn_client.verify.<name>`.
from .hashing import _frame as _frame, _h as _h, _sha256 as _sha256, _u64 as _u64
from .merkle import (
    _Frontier as _Frontier, _leaf as _leaf, _node as _node, _verify_consistency as _verify_consistency,
    _verify_inclusion as _verify_inclusion,
)
from .notes import (
    _Key as _Key, _NoteMalformed as _NoteMalformed, _NoteUnverified as _NoteUnverified, _open_note as _open_note,
    _parse_vkey as _parse_vkey,
)

__all__ = ["Failure", "Position", "Verdict", "verify_bundle", "FIELDS", "REASONS"]
