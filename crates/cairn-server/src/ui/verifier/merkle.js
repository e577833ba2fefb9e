// RFC 9162 Merkle trees, FORMAT.md section 6: leaf and node hashes, the
// right edge of a growing tree, and the inclusion and consistency proof
// checks of RFC 9162 sections 2.1.3.2 and 2.1.4.2. Indices and sizes are
// bigints: a checkpoint's size may be up to 2^64 - 1, and JavaScript's
// bitwise operators work on 32 bits only.
import { concat, equalBytes, sha256 } from "./bytes.js";
const LEAF_PREFIX = Uint8Array.of(0x00);
const NODE_PREFIX = Uint8Array.of(0x01);
export function leafHash(data) {
    return sha256(concat(LEAF_PREFIX, data));
}
export function nodeHash(left, right) {
    return sha256(concat(NODE_PREFIX, left, right));
}
/** The empty tree's root, SHA-256(""). */
export function emptyRoot() {
    return sha256(new Uint8Array(0));
}
/** A tree's right edge: O(log n) state, enough for its root at any size. */
export class Frontier {
    size = 0;
    /** Roots of the perfect subtrees, largest first. */
    peaks = [];
    async push(leaf) {
        this.peaks.push(leaf);
        this.size++;
        for (let n = this.size; n % 2 === 0; n /= 2) {
            const right = this.peaks.pop();
            const left = this.peaks.pop();
            this.peaks.push(await nodeHash(left, right));
        }
    }
    async root() {
        if (this.peaks.length === 0)
            return emptyRoot();
        let acc = this.peaks[this.peaks.length - 1];
        for (let i = this.peaks.length - 2; i >= 0; i--)
            acc = await nodeHash(this.peaks[i], acc);
        return acc;
    }
}
function all32(hashes) {
    return hashes.every((h) => h.length === 32);
}
/** RFC 9162 section 2.1.3.2: does `proof` lead from the leaf at `index` to
 * `root` in the tree of `size` leaves? */
export async function verifyInclusion(leaf, index, size, proof, root) {
    if (index < 0n || index >= size || !all32([leaf, root, ...proof]))
        return false;
    let fn = index;
    let sn = size - 1n;
    let r = leaf;
    for (const p of proof) {
        if (sn === 0n)
            return false;
        if ((fn & 1n) === 1n || fn === sn) {
            r = await nodeHash(p, r);
            if ((fn & 1n) === 0n) {
                while ((fn & 1n) === 0n && fn !== 0n) {
                    fn >>= 1n;
                    sn >>= 1n;
                }
            }
        }
        else {
            r = await nodeHash(r, p);
        }
        fn >>= 1n;
        sn >>= 1n;
    }
    return sn === 0n && equalBytes(r, root);
}
/** RFC 9162 section 2.1.4.2: is the tree of `size2` leaves with `root2` an
 * extension of the one of `size1` with `root1`? A proof from size 0 is
 * refused; between equal sizes it must be empty and the roots equal
 * (FORMAT.md 6.2). */
export async function verifyConsistency(size1, size2, proof, root1, root2) {
    if (size1 <= 0n || size1 > size2)
        return false;
    if (size1 === size2)
        return proof.length === 0 && equalBytes(root1, root2);
    if (proof.length === 0 || !all32([root1, root2, ...proof]))
        return false;
    const path = [...proof];
    // When size1 is a power of two, the old root is the first node of the path.
    if ((size1 & (size1 - 1n)) === 0n)
        path.unshift(root1);
    let fn = size1 - 1n;
    let sn = size2 - 1n;
    while ((fn & 1n) === 1n) {
        fn >>= 1n;
        sn >>= 1n;
    }
    let fr = path[0];
    let sr = path[0];
    for (const c of path.slice(1)) {
        if (sn === 0n)
            return false;
        if ((fn & 1n) === 1n || fn === sn) {
            fr = await nodeHash(c, fr);
            sr = await nodeHash(c, sr);
            if ((fn & 1n) === 0n) {
                while ((fn & 1n) === 0n && fn !== 0n) {
                    fn >>= 1n;
                    sn >>= 1n;
                }
            }
        }
        else {
            sr = await nodeHash(sr, c);
        }
        fn >>= 1n;
        sn >>= 1n;
    }
    return sn === 0n && equalBytes(fr, root1) && equalBytes(sr, root2);
}
