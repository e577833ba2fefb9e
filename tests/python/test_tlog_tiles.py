"""Cairn's C2SP tlog-tiles read API (docs/FORMAT.md 7.9) read by a client
written here from the C2SP specifications alone: the checkpoint's Ed25519
signature is verified with `cryptography`, the tree root is computed from
the hash tiles only, entry bundles are hashed into the level-0 tiles, and
inclusion and consistency proofs computed from tiles agree with the
server's own proof endpoints. Also the API's refusals."""
import base64
import gzip
import hashlib
import json
import os
import subprocess
import urllib.error
import urllib.request

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def call(url, key, path, headers=None):
    request = urllib.request.Request(url + path, headers={**({"Authorization": f"Bearer {key}"} if key else {}),
                                                         **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def post(url, key, path, body):
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as r:
        return json.loads(r.read())


def record(url, key, session, n):
    steps = [{"session_id": session, "agent_id": "a", "step_type": "observation", "content": f"{session} {i}"}
             for i in range(n)]
    for i in range(0, n, 500):
        post(url, key, "/v1/steps/batch", steps[i:i + 500])


# -- RFC 6962 / 9162 trees, written here ------------------------------------------------------

def leaf_hash(data):
    return hashlib.sha256(b"\x00" + data).digest()


def node(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def mth(hashes):
    """The Merkle tree hash of a list of leaf hashes."""
    if len(hashes) == 1:
        return hashes[0]
    k = 1
    while k * 2 < len(hashes):
        k *= 2
    return node(mth(hashes[:k]), mth(hashes[k:]))


def verify_inclusion(leaf, index, size, proof, root):
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            r = node(p, r)
            while fn % 2 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(size1, size2, proof, root1, root2):
    if size1 == size2:
        return not proof and root1 == root2
    if size1 & (size1 - 1) == 0:
        proof = [root1] + list(proof)
    fn, sn = size1 - 1, size2 - 1
    while fn % 2 == 1:
        fn >>= 1
        sn >>= 1
    if not proof:
        return False
    fr = sr = proof[0]
    for c in proof[1:]:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            fr, sr = node(c, fr), node(c, sr)
            while fn % 2 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == root1 and sr == root2


# -- tlog-tiles, written here --------------------------------------------------------------------

def index_path(n):
    groups = [f"{n % 1000:03d}"]
    n //= 1000
    while n > 0:
        groups.append(f"x{n % 1000:03d}")
        n //= 1000
    return "/".join(reversed(groups))


def tile_path(level, index, width):
    return f"/v1/tlog/tile/{level}/{index_path(index)}" + ("" if width == 256 else f".p/{width}")


class Tiles:
    """Reads the hashes of a tree of `size` leaves from its tiles, as a
    tlog-tiles client does: hash(level, i) for any complete subtree."""

    def __init__(self, url, key, size):
        self.url, self.key, self.size, self.cache = url, key, size, {}

    def tile(self, level, index):
        hashes_at_level = self.size // (256 ** level)
        width = min(256, hashes_at_level - index * 256)
        if (level, index) not in self.cache:
            status, headers, body = call(self.url, self.key, tile_path(level, index, width))
            assert status == 200, (level, index, width, body)
            assert len(body) == 32 * width
            self.cache[(level, index)] = [body[i:i + 32] for i in range(0, len(body), 32)]
        return self.cache[(level, index)]

    def hash(self, height, i):
        """The hash of the complete subtree of 2^height leaves with index i."""
        level, rest = divmod(height, 8)
        if rest == 0:
            return self.tile(level, i // 256)[i % 256]
        return node(self.hash(height - 1, 2 * i), self.hash(height - 1, 2 * i + 1))

    def range_hash(self, lo, hi):
        n = hi - lo
        if n & (n - 1) == 0 and lo % n == 0:
            return self.hash(n.bit_length() - 1, lo // n)
        k = 1
        while k * 2 < n:
            k *= 2
        return node(self.range_hash(lo, lo + k), self.range_hash(lo + k, hi))

    def inclusion(self, index, size):
        proof, lo, hi, m = [], 0, size, index
        while hi - lo > 1:
            k = 1
            while k * 2 < hi - lo:
                k *= 2
            if m < k:
                proof.append(self.range_hash(lo + k, hi))
                hi = lo + k
            else:
                proof.append(self.range_hash(lo, lo + k))
                lo, m = lo + k, m - k
        return list(reversed(proof))

    def consistency(self, old, new):
        proof, lo, hi, m, whole = [], 0, new, old, True
        while m != hi - lo:
            k = 1
            while k * 2 < hi - lo:
                k *= 2
            if m <= k:
                proof.append(self.range_hash(lo + k, hi))
                hi = lo + k
            else:
                proof.append(self.range_hash(lo, lo + k))
                lo, m, whole = lo + k, m - k, False
        if not whole:
            proof.append(self.range_hash(lo, hi))
        return list(reversed(proof))


def checkpoint(url, key, vkey):
    status, headers, body = call(url, key, "/v1/tlog/checkpoint")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    note = body.decode()
    text, _, signatures = note.rpartition("\n\n")
    text += "\n"
    name, key_id, public = vkey.split("+", 2)
    raw = base64.b64decode(public)
    assert raw[0] == 1
    verified = False
    for line in signatures.splitlines():
        signer, blob = line[2:].split(" ")
        sig = base64.b64decode(blob)
        if signer == name and sig[:4].hex() == key_id:
            Ed25519PublicKey.from_public_bytes(raw[1:]).verify(sig[4:], text.encode())
            verified = True
    assert verified, note
    origin, size, root = text.splitlines()[:3]
    return origin, int(size), base64.b64decode(root)


@pytest.fixture
def log(server, cairn_bin, data_dir):
    url, key = server
    record(url, key, "s1", 600)
    vkey = subprocess.run([cairn_bin, "keys"], env={**os.environ, "CAIRN_DATA_DIR": str(data_dir)},
                          capture_output=True, text=True, check=True).stdout.strip()
    return url, key, vkey


def test_tiles_make_the_checkpoint_and_its_proofs(log):
    url, key, vkey = log
    _, size1, root1 = checkpoint(url, key, vkey)
    assert size1 == 601
    tiles = Tiles(url, key, size1)
    assert tiles.range_hash(0, size1) == root1, "the root from hash tiles alone is the signed one"
    # A full level-0 tile hashes to the level-1 hash above it.
    assert mth(tiles.tile(0, 1)) == tiles.tile(1, 0)[1]
    # Entry bundles hash into the level-0 tiles (gzip when asked for).
    leaves = []
    for index in range(3):
        width = min(256, size1 - index * 256)
        path = f"/v1/tlog/tile/entries/{index_path(index)}" + ("" if width == 256 else f".p/{width}")
        status, headers, body = call(url, key, path, {"Accept-Encoding": "gzip"})
        assert status == 200
        if headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        entries, offset = [], 0
        while offset < len(body):
            length = int.from_bytes(body[offset:offset + 2], "big")
            entries.append(body[offset + 2:offset + 2 + length])
            offset += 2 + length
        assert offset == len(body) and len(entries) == width
        assert [leaf_hash(e) for e in entries] == tiles.tile(0, index)
        leaves.extend(leaf_hash(e) for e in entries)
    assert mth(leaves) == root1

    # The log grows: inclusion and consistency proofs computed from tiles
    # verify, and are the server's own.
    record(url, key, "s2", 300)
    _, size2, root2 = checkpoint(url, key, vkey)
    tiles2 = Tiles(url, key, size2)
    for index in (0, 255, 256, 600, size2 - 1):
        proof = tiles2.inclusion(index, size2)
        assert verify_inclusion(leaves[index] if index < len(leaves) else tiles2.hash(0, index), index, size2,
                                proof, root2)
        status, _, body = call(url, key, f"/v1/proofs/inclusion?seq={index}&size={size2}")
        assert status == 200
        assert [bytes.fromhex(h) for h in json.loads(body)["proof"]] == proof
    proof = tiles2.consistency(size1, size2)
    assert verify_consistency(size1, size2, proof, root1, root2)
    status, _, body = call(url, key, f"/v1/proofs/consistency?old={size1}&new={size2}")
    assert status == 200
    assert [bytes.fromhex(h) for h in json.loads(body)["proof"]] == proof


def test_the_python_client_reads_tiles(log):
    from cairn_client import CairnClient
    url, key, _ = log
    client = CairnClient(url, api_key=key)
    note = client.tlog_checkpoint()
    assert note.splitlines()[1] == "601"
    assert client.tlog_tile("tile/0/000") == call(url, key, "/v1/tlog/tile/0/000")[2]
    assert len(client.tlog_tile("tile/0/002.p/89")) == 89 * 32


def test_record_tiles_are_the_leaves_records(log):
    url, key, vkey = log
    _, size, _ = checkpoint(url, key, vkey)
    status, headers, body = call(url, key, "/v1/tlog/records/002.p/89")
    assert status == 200 and headers["Content-Type"] == "application/x-ndjson"
    lines = body.decode().splitlines()
    end = json.loads(lines[-1])
    assert end == {"tile_end": {"entries": 89, "log_size": size}}
    status, _, bundle = call(url, key, "/v1/tlog/tile/entries/002.p/89")
    entries, offset = [], 0
    while offset < len(bundle):
        length = int.from_bytes(bundle[offset:offset + 2], "big")
        entries.append(bundle[offset + 2:offset + 2 + length])
        offset += 2 + length
    for line, entry in zip(lines[:-1], entries):
        record = json.loads(line)
        # The leaf data (FORMAT.md 1, 5.3) is framed: its parts include
        # u64be(seq), the entry type and the record hash.
        assert record["seq"].to_bytes(8, "big") in entry
        assert record["type"].encode() in entry
        assert bytes.fromhex(record["hash"]) in entry
        assert record["logged_at"].encode() in entry


def test_the_api_refuses_what_it_must(log, cairn_bin, data_dir):
    url, key, _ = log
    for path in ("/v1/tlog/tile/0/0", "/v1/tlog/tile/00/000", "/v1/tlog/tile/0/000.p/0",
                 "/v1/tlog/tile/0/000.p/256", "/v1/tlog/tile/0/x000/001", "/v1/tlog/records/1"):
        status, headers, body = call(url, key, path)
        assert status == 400, path
        assert json.loads(body)["error"]["code"] == "invalid_argument", path
    status, _, body = call(url, key, "/v1/tlog/tile/0/009")
    assert status == 404 and json.loads(body)["error"]["code"] == "not_found"
    status, headers, _ = call(url, key, "/v1/tlog/tile/0/000")
    assert status == 200 and "immutable" in headers["Cache-Control"]
    status, _, _ = call(url, None, "/v1/tlog/tile/0/000")
    assert status == 401
    # A reader reads tiles, not records.
    reader = post(url, key, "/v1/keys", {"role": "reader", "label": "monitor-probe"})["token"]
    assert call(url, reader, "/v1/tlog/tile/0/000")[0] == 200
    status, _, body = call(url, reader, "/v1/tlog/records/000")
    assert status == 403 and json.loads(body)["error"]["code"] == "forbidden"
