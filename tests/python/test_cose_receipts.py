"""COSE Receipts (RFC 9942) from `cairn serve` and `cairn export --receipts`,
checked with independent third-party implementations: `cbor2` decodes the
CBOR, `pycose` checks the COSE_Sign1's EdDSA signature over the
Sig_structure with the detached payload, and the RFC 9162 roots are
recomputed here from leaf hashes computed here from the exported bundle
(docs/FORMAT.md), never taken from the server.

Valid receipts verify; a receipt with any one byte altered (signature, proof,
protected or unprotected header) does not. Under CI=true a missing pycose or
cbor2 fails the run instead of skipping it."""
import base64
import hashlib
import json
import os
import pathlib
import struct
import subprocess
import urllib.error
import urllib.request

import pytest

try:
    import cbor2
    from pycose.keys import OKPKey
    from pycose.keys.curves import Ed25519
    from pycose.messages import Sign1Message
except ImportError as missing:  # pragma: no cover - depends on the venv
    if os.environ.get("CI", "").lower() == "true":
        raise
    pytest.skip(f"pycose and cbor2 are needed ({missing}); pip install pycose cbor2",
                allow_module_level=True)

ALG_EDDSA, KID, CWT_CLAIMS, VDS, VDP = 1, 4, 15, 395, 396
INCLUSION, CONSISTENCY = -1, -2


# --- HTTP ---------------------------------------------------------------------------------

def call(url, key, path, body=None, headers=None):
    request = urllib.request.Request(url + path, data=body, method="POST" if body else "GET")
    request.add_header("Authorization", f"Bearer {key}")
    for k, v in (headers or {}).items():
        request.add_header(k, v)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read()


def record_steps(url, key, n):
    for i in range(n):
        body = json.dumps({"session_id": "s1", "agent_id": "analyst", "step_type": "Observation",
                           "content": f"observation {i}"}).encode()
        status, _, text = call(url, key, "/v1/steps", body, {"Content-Type": "application/json"})
        assert status == 201, text


# --- RFC 9162, written here from the RFC ----------------------------------------------------

def node(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def mth(leaves):
    """RFC 9162 2.1.1, the definition."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return node(mth(leaves[:k]), mth(leaves[k:]))


def inclusion_root(leaf, index, size, path):
    """RFC 9162 2.1.3.2: the root the path leads to, or None."""
    if index >= size:
        return None
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = node(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


def consistency_root(size1, size2, root1, path):
    """RFC 9162 2.1.4.2: the second root the path leads to from root1, or None."""
    if not 0 < size1 < size2 or not path:
        return None
    path = list(path)
    if size1 & (size1 - 1) == 0:
        path.insert(0, root1)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            fr, sr = node(c, fr), node(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node(sr, c)
        fn >>= 1
        sn >>= 1
    return sr if sn == 0 and fr == root1 else None


# --- Cairn's leaves, from docs/FORMAT.md ----------------------------------------------------

def frame(tag, *parts):
    out = [bytes([len(tag)]), tag.encode()]
    for part in parts:
        out += [struct.pack(">I", len(part)), part]
    return b"".join(out)


def leaf_hash(entry):
    data = frame("cairn/v2/log-leaf", struct.pack(">Q", entry["seq"]), entry["type"].encode(),
                 bytes.fromhex(entry["hash"]), entry["logged_at"].encode())
    return hashlib.sha256(b"\x00" + data).digest()


def bundle_leaves(bundle):
    entries = [json.loads(line) for line in bundle.splitlines() if line.strip()]
    leaves = {e["seq"]: leaf_hash(e) for e in entries if "seq" in e and "logged_at" in e}
    return [leaves[i] for i in range(len(leaves))]


def parse_vkey(vkey):
    name, key_id, key = vkey.strip().split("+", 2)
    raw = base64.b64decode(key)
    assert raw[0] == 0x01 and len(raw) == 33, "an Ed25519 vkey"
    return name, bytes.fromhex(key_id), raw[1:]


def parse_checkpoint(note):
    origin, size, root = note.split("\n")[:3]
    return origin, int(size), base64.b64decode(root)


# --- the receipt verifier under test --------------------------------------------------------

def decode(receipt, kind, origin, kid):
    """The profile's shape with cbor2: tag 18, protected {1: -8, 4: kid,
    15: {1: origin}, 395: 1}, unprotected {396: {kind: [bstr .cbor proof]}},
    nil payload, a 64-byte signature. Returns the decoded proof array."""
    obj = cbor2.loads(receipt)
    assert isinstance(obj, cbor2.CBORTag) and obj.tag == 18, "a tagged COSE_Sign1"
    protected, unprotected, payload, signature = obj.value
    header = cbor2.loads(protected)
    assert header == {ALG_EDDSA: -8, KID: kid, CWT_CLAIMS: {1: origin}, VDS: 1}, header
    assert payload is None, "detached payload"
    assert isinstance(signature, bytes) and len(signature) == 64
    assert set(unprotected) == {VDP} and set(unprotected[VDP]) == {kind}
    (proof,) = unprotected[VDP][kind]
    size_a, size_b, path = cbor2.loads(proof)
    assert all(isinstance(h, bytes) and len(h) == 32 for h in path)
    return size_a, size_b, list(path)


def pycose_message(receipt):
    """The receipt as pycose's Sign1Message. pycose 1.1's `decode` expects
    cbor2 5's lists; cbor2 6 decodes a tag's array as a tuple (and nested
    maps as frozendicts), so then the COSE_Sign1 array is handed to pycose's
    own `from_cose_obj` as the list and dict it expects."""
    try:
        return Sign1Message.decode(receipt)
    except TypeError:
        obj = cbor2.loads(receipt)
        if not (isinstance(obj, cbor2.CBORTag) and obj.tag == Sign1Message.cbor_tag):
            raise
        protected, unprotected, payload, signature = obj.value
        return Sign1Message.from_cose_obj([protected, dict(unprotected), payload, signature], True)


def cose_verifies(receipt, public_key, root):
    """pycose: the EdDSA signature over Sig_structure(protected, h'', root)."""
    message = pycose_message(receipt)
    message.key = OKPKey(crv=Ed25519, x=public_key)
    return message.verify_signature(detached_payload=root)


def verify_inclusion(receipt, public_key, kid, origin, leaf, seq, size, root):
    """The whole check: shape, the expected entry and size, the root
    recomputed from the leaf and the path equal to the expected one, and
    pycose's signature check over it. False on any failure."""
    try:
        tree_size, leaf_index, path = decode(receipt, INCLUSION, origin, kid)
        if (tree_size, leaf_index) != (size, seq):
            return False
        recomputed = inclusion_root(leaf, leaf_index, tree_size, path)
        return recomputed == root and cose_verifies(receipt, public_key, recomputed)
    except Exception:  # noqa: BLE001 - any failure to decode is a failure to verify
        return False


def verify_consistency(receipt, public_key, kid, origin, old, new, old_root, new_root):
    try:
        size1, size2, path = decode(receipt, CONSISTENCY, origin, kid)
        if (size1, size2) != (old, new):
            return False
        recomputed = consistency_root(size1, size2, old_root, path)
        return recomputed == new_root and cose_verifies(receipt, public_key, recomputed)
    except Exception:  # noqa: BLE001
        return False


def altered(receipt):
    """Every copy of the receipt with one byte changed."""
    for i in range(len(receipt)):
        for flip in (0x01, 0x80):
            copy = bytearray(receipt)
            copy[i] ^= flip
            yield i, bytes(copy)


# --- the tests ------------------------------------------------------------------------------

@pytest.fixture
def log(server, cairn_bin, data_dir):
    """A server with a few records; its key (from `cairn keys`, as an
    operator publishes it), checkpoint and leaves."""
    url, key = server
    record_steps(url, key, 6)
    status, _, note = call(url, key, "/v1/checkpoint")
    assert status == 200
    origin, size, root = parse_checkpoint(note.decode())
    vkey = subprocess.run([cairn_bin, "keys"], env={**os.environ, "CAIRN_DATA_DIR": str(data_dir)},
                          capture_output=True, text=True, check=True).stdout
    _, kid, public_key = parse_vkey(vkey)
    status, _, bundle = call(url, key, "/v1/export?all=true")
    assert status == 200
    leaves = bundle_leaves(bundle.decode())
    assert len(leaves) == size >= 7
    assert mth(leaves) == root, "the leaves computed here make the checkpoint's root"
    return {"url": url, "key": key, "origin": origin, "size": size, "root": root, "kid": kid,
            "public_key": public_key, "leaves": leaves, "vkey": vkey.strip()}


def test_inclusion_receipts_verify_with_pycose(log):
    url, key, leaves = log["url"], log["key"], log["leaves"]
    for seq, leaf in enumerate(leaves):
        status, content_type, receipt = call(url, key, f"/v1/receipts/inclusion?seq={seq}")
        assert status == 200, receipt
        assert content_type == "application/cose"
        assert verify_inclusion(receipt, log["public_key"], log["kid"], log["origin"], leaf, seq,
                                log["size"], log["root"]), f"entry {seq}"
        # Another record's leaf does not verify with this receipt.
        other = leaves[(seq + 1) % len(leaves)]
        assert not verify_inclusion(receipt, log["public_key"], log["kid"], log["origin"], other,
                                    seq, log["size"], log["root"])
    # Against an older size, whose root is recomputed here.
    status, _, receipt = call(url, key, "/v1/receipts/inclusion?seq=2&size=5")
    assert status == 200
    assert verify_inclusion(receipt, log["public_key"], log["kid"], log["origin"], leaves[2], 2, 5,
                            mth(leaves[:5]))
    # A receipt asked for as a SCITT receipt is the same kind of object.
    status, content_type, receipt = call(url, key, "/v1/receipts/inclusion?seq=3",
                                         headers={"Accept": "application/scitt-receipt+cose"})
    assert (status, content_type) == (200, "application/scitt-receipt+cose")
    assert verify_inclusion(receipt, log["public_key"], log["kid"], log["origin"], leaves[3], 3,
                            log["size"], log["root"])


def test_one_altered_byte_fails(log):
    url, key, leaves = log["url"], log["key"], log["leaves"]
    seq = 4
    _, _, receipt = call(url, key, f"/v1/receipts/inclusion?seq={seq}")
    args = (log["public_key"], log["kid"], log["origin"], leaves[seq], seq, log["size"], log["root"])
    assert verify_inclusion(receipt, *args)
    for i, copy in altered(receipt):
        assert not verify_inclusion(copy, *args), f"byte {i} altered and still verified"
    # Named places: a signature byte, a path hash byte, the vds value, the
    # leaf index; the signature check alone (pycose) fails for each of the
    # ones it covers.
    obj = cbor2.loads(receipt)
    protected, unprotected, _, signature = obj.value
    size, index, path = cbor2.loads(unprotected[VDP][INCLUSION][0])
    bad_signature = bytes([signature[0] ^ 1]) + signature[1:]
    assert not cose_verifies(cbor2.dumps(cbor2.CBORTag(18, [protected, unprotected, None, bad_signature])),
                             log["public_key"], log["root"])
    header = cbor2.loads(protected)
    header[VDS] = 2
    assert not cose_verifies(cbor2.dumps(cbor2.CBORTag(18, [cbor2.dumps(header), unprotected, None, signature])),
                             log["public_key"], log["root"])
    bad_path = [bytes([path[0][0] ^ 1]) + path[0][1:]] + path[1:]
    assert inclusion_root(leaves[seq], index, size, bad_path) != log["root"]
    assert inclusion_root(leaves[seq], index ^ 1, size, path) != log["root"]


def test_consistency_receipts_verify_with_pycose(log):
    url, key, leaves = log["url"], log["key"], log["leaves"]
    args = (log["public_key"], log["kid"], log["origin"])
    for old in range(1, log["size"]):
        status, content_type, receipt = call(url, key, f"/v1/receipts/consistency?old={old}")
        assert (status, content_type) == (200, "application/cose"), receipt
        assert verify_consistency(receipt, *args, old, log["size"], mth(leaves[:old]), log["root"]), old
    status, _, receipt = call(url, key, "/v1/receipts/consistency?old=3&new=6")
    assert status == 200
    assert verify_consistency(receipt, *args, 3, 6, mth(leaves[:3]), mth(leaves[:6]))
    assert not verify_consistency(receipt, *args, 3, 6, mth(leaves[:4]), mth(leaves[:6]))
    for i, copy in altered(receipt):
        assert not verify_consistency(copy, *args, 3, 6, mth(leaves[:3]), mth(leaves[:6])), f"byte {i}"
    # Errors keep the API's JSON shape.
    status, content_type, body = call(url, key, "/v1/receipts/consistency?old=6&new=6")
    assert status == 400 and content_type.startswith("application/json")
    assert json.loads(body)["error"]["code"] == "invalid_argument"
    assert json.loads(body)["error"]["field"] == "old"


def test_export_receipts_directory(log, cairn_bin, data_dir, tmp_path):
    """`cairn export --all --receipts DIR` beside the running server: one
    receipt per record against the bundle's checkpoint, each verified here
    and by `cairn receipt verify`."""
    out = tmp_path / "receipts"
    bundle = tmp_path / "all.bundle"
    env = {**os.environ, "CAIRN_DATA_DIR": str(data_dir), "CAIRN_ORG": "acme"}
    subprocess.run([cairn_bin, "export", "--all", "-o", str(bundle), "--receipts", str(out)],
                   env=env, check=True, capture_output=True)
    lines = bundle.read_text().splitlines()
    origin, size, root = parse_checkpoint(json.loads(lines[1])["checkpoint"])
    leaves = bundle_leaves(bundle.read_text())
    assert size == len(leaves) and mth(leaves) == root
    files = sorted(out.iterdir(), key=lambda p: int(p.stem))
    assert [p.name for p in files] == [f"{seq}.cose" for seq in range(size)]
    for seq, path in enumerate(files):
        assert verify_inclusion(path.read_bytes(), log["public_key"], log["kid"], origin, leaves[seq],
                                seq, size, root), path.name
    ok = subprocess.run([cairn_bin, "--json", "receipt", "verify", str(files[2]), "--key", log["vkey"],
                         "--leaf", leaves[2].hex(), "--root", root.hex()], env=env, capture_output=True,
                        text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout)["leaf_index"] == 2
    bad = subprocess.run([cairn_bin, "receipt", "verify", str(files[2]), "--key", log["vkey"],
                          "--leaf", leaves[3].hex()], env=env, capture_output=True, text=True)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    # Every org's receipts share the server key: the org asked about must be the issuer.
    other = subprocess.run([cairn_bin, "--org", "other", "receipt", "verify", str(files[2]), "--key", log["vkey"],
                            "--leaf", leaves[2].hex()], env=env, capture_output=True, text=True)
    assert other.returncode == 1 and f"not of {origin.split('/')[0]}/other" in other.stdout, other.stdout


def test_format_md_example():
    """docs/FORMAT.md 7.8's example receipt, from the document's hex alone."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "FORMAT.md").read_text(encoding="utf-8")
    block = text.split("receipt, hex:\n", 1)[1].split("```", 1)[0]
    receipt = bytes.fromhex("".join(block.split()))
    public_key = Ed25519PrivateKey.from_private_bytes(b"\x07" * 32).public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    kid = hashlib.sha256(b"cairn.test\n\x01" + public_key).digest()[:4]
    leaves = [hashlib.sha256(b"\x00" + struct.pack(">Q", i)).digest() for i in range(3)]
    assert verify_inclusion(receipt, public_key, kid, "cairn.test/acme", leaves[1], 1, 3, mth(leaves))
    assert not verify_inclusion(receipt, public_key, kid, "cairn.test/acme", leaves[2], 1, 3, mth(leaves))
