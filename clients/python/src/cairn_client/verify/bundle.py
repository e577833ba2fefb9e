"""The entry point, `verify_bundle`: it reads the bundle (text, bytes, a
path, an open file or its lines) line by line, with only "\\n" ending a
line, feeds each to the verifier and returns the verdict."""
from __future__ import annotations

import io
import os
from typing import Iterable, Iterator, Optional, Sequence, Union

from .notes import _NoteMalformed, _NoteUnverified, _open_note, _parse_vkey
from .verdict import _Fail, Failure, Verdict
from .verifier import _Verifier


BundleSource = Union[str, bytes, "os.PathLike[str]", Iterable[Union[str, bytes]]]


def _chomp(line: bytes) -> bytes:
    if line.endswith(b"\n"):
        line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
    return line


def _names_a_file(text: str) -> bool:
    """Whether a string given as the bundle is a path: an existing file, or
    a line that is neither empty nor JSON (a bundle's text holds a line break,
    its header and checkpoint being two lines; text that starts as JSON, or
    none, is read as a bundle and judged, as a cut-off export's must be), so
    that a misspelt file name raises FileNotFoundError rather than being
    verified as one line of text."""
    if "\n" in text or "\0" in text:
        return False
    if os.path.exists(text):
        return True
    head = text.lstrip()
    return bool(head) and not head.startswith(("{", "[")) and len(text.encode()) <= 4096


def _raw_lines(source: BundleSource) -> Iterator[bytes]:
    """The bundle's lines as bytes: only "\\n" ends a line (10.1)."""
    if isinstance(source, os.PathLike) or (isinstance(source, str) and _names_a_file(source)):
        with open(source, "rb") as f:
            for line in f:
                yield _chomp(line)
        return
    if isinstance(source, str):
        source = source.encode("utf-8", "surrogatepass")
    if isinstance(source, (bytes, bytearray)):
        for line in io.BytesIO(bytes(source)):
            yield _chomp(line)
        return
    for item in source:
        line = item.encode("utf-8", "surrogatepass") if isinstance(item, str) else item
        yield _chomp(bytes(line))


#: Most witnesses one policy names (as the Rust and TypeScript verifiers).
MAX_WITNESSES = 64


def verify_bundle(source: BundleSource, keys: Sequence[str] = (),
                  trusted_checkpoints: Sequence[str] = (), witnesses: Sequence[str] = (),
                  witness_quorum: Optional[int] = None) -> Verdict:
    """Verifies a Cairn export bundle offline (FORMAT.md sections 9 and 10).

    `source` is the bundle's text, bytes, a path, an open binary file, or its
    lines. `keys` are the server keys to trust, in vkey form (`name+hex+base64`,
    what `cairn keys` prints); without them the key in the bundle's own header
    is used, which proves integrity but not who signed. `trusted_checkpoints`
    are signed checkpoint notes kept earlier (by you or witnesses): the bundle
    must be consistent with each. `witnesses` are witness cosignature keys
    (vkeys with algorithm 0x04, as `cairn witness` prints them): the
    bundle's checkpoint must then carry valid cosignatures by
    `witness_quorum` of them (default: all), or the verdict fails with
    `insufficient-cosignatures` (FORMAT.md 7.7). A key that is not a vkey,
    more than 64 witnesses, a name or key given twice, or a quorum outside
    1 to the number of witnesses, raises ValueError; so does a trusted
    checkpoint that is not a signed note at all (an empty file, an error
    message: the caller's mistake, as `cairn verify` refuses it), while a
    signed note that is not the log's checkpoint is a verdict. A string
    `source` of one line that is neither empty nor JSON is a path
    (FileNotFoundError if missing); empty or JSON text is verified.
    """
    pinned = [_parse_vkey(k) for k in keys]
    cosigners = [_parse_vkey(w, 0x04) for w in witnesses]
    if len(cosigners) > MAX_WITNESSES:
        raise ValueError(f"a witness policy names at most {MAX_WITNESSES} witnesses, not {len(cosigners)}")
    if len({w.name for w in cosigners}) != len(cosigners):
        raise ValueError("a witness is named twice")
    # cosignature/v1 does not sign the witness's name: one key under two
    # names would count one cosignature twice.
    if len({w.public for w in cosigners}) != len(cosigners):
        raise ValueError("two witnesses have the same key")
    if witness_quorum is not None and (isinstance(witness_quorum, bool) or not isinstance(witness_quorum, int)):
        raise ValueError(f"the witness quorum is a whole number, not {witness_quorum!r}")
    quorum = len(cosigners) if witness_quorum is None else witness_quorum
    if cosigners and not 1 <= quorum <= len(cosigners):
        raise ValueError(f"the witness quorum must be 1 to {len(cosigners)}, not {quorum}")
    if not cosigners and witness_quorum is not None:
        raise ValueError("a witness quorum needs witnesses")
    for i, note in enumerate(trusted_checkpoints):
        try:
            _open_note(note, [])
        except _NoteMalformed as e:
            raise ValueError(f"trusted checkpoint {i + 1} is not a signed note ({e}); "
                             "give the text `cairn checkpoint` wrote") from None
        except _NoteUnverified:
            pass
    verifier = _Verifier(pinned, trusted_checkpoints, cosigners, quorum)
    verdict = Verdict(False, 0, key_pinned=bool(pinned))
    try:
        for raw in _raw_lines(source):
            verifier.feed(raw)
        verifier.finish()
    except _Fail as failed:
        at = failed.at
        if not failed.line_known:
            at.line = verifier.line
        verdict.failure = Failure(failed.reason, failed.detail, at)
    verdict.records_checked = verifier.checked
    verdict.last_valid = verifier.last_valid
    verdict.verified = verdict.failure is None
    if verifier.header:
        verdict.org_id = verifier.org_id
        verdict.origin = verifier.origin
        verdict.complete_log = verifier.complete
    if verifier.root:
        verdict.checkpoint_size = verifier.size
        verdict.checkpoint_root = verifier.root.hex()
    verdict.selection = verifier.selection
    return verdict
