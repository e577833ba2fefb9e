"""The Merkle log's trees (docs/FORMAT.md 6, RFC 9162): leaf and node
hashes, the running frontier of a tree's right edge, and inclusion and
consistency proofs."""
from __future__ import annotations

from typing import Sequence

from .hashing import _sha256


def _node(left: bytes, right: bytes) -> bytes:
    return _sha256(b"\x01" + left + right)


def _leaf(data: bytes) -> bytes:
    return _sha256(b"\x00" + data)


class _Frontier:
    """An RFC 9162 tree's right edge: O(log n) state, the root at any size."""

    def __init__(self) -> None:
        self.size = 0
        self.peaks: list[bytes] = []  # largest subtree first

    def push(self, leaf_hash: bytes) -> None:
        self.peaks.append(leaf_hash)
        self.size += 1
        n = self.size
        while n % 2 == 0:
            right = self.peaks.pop()
            left = self.peaks.pop()
            self.peaks.append(_node(left, right))
            n //= 2

    def root(self) -> bytes:
        if not self.peaks:
            return _sha256(b"")
        acc = self.peaks[-1]
        for peak in reversed(self.peaks[:-1]):
            acc = _node(peak, acc)
        return acc


def _verify_inclusion(leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> bool:
    """RFC 9162 section 2.1.3.2."""
    if index >= size or len(leaf_hash) != 32 or len(root) != 32 or any(len(p) != 32 for p in proof):
        return False
    fn, sn, r = index, size - 1, leaf_hash
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = _node(p, r)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = _node(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def _verify_consistency(size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes) -> bool:
    """RFC 9162 section 2.1.4.2; from size 0 refused (FORMAT.md 6.2)."""
    if size1 == 0 or size1 > size2:
        return False
    if size1 == size2:
        return not proof and root1 == root2
    if any(len(p) != 32 for p in proof) or len(root1) != 32 or len(root2) != 32:
        return False
    if not proof:
        return False
    path = list(proof)
    if size1 & (size1 - 1) == 0:
        path.insert(0, root1)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = _node(c, fr)
            sr = _node(c, sr)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = _node(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == root1 and sr == root2 and sn == 0
