// Ed25519 verification as FORMAT.md 7.3 requires ("verify_strict" of
// ed25519-dalek): the signature equation is checked by WebCrypto, and the
// rules WebCrypto implementations do not all apply are checked here first:
// S must be below the group order, and neither the public key nor R may be
// a point of small order. Point decoding follows curve25519-dalek (y read as
// 255 bits, x = 0 accepted with either sign bit), so that a key Cairn's
// Rust verifier reads is read here too.
import { webCrypto } from "./bytes.js";
const P = 2n ** 255n - 19n;
const L = 2n ** 252n + 27742317777372353535851937790883648493n;
function mod(a) {
    const r = a % P;
    return r >= 0n ? r : r + P;
}
function pow(base, exponent) {
    let result = 1n;
    let b = mod(base);
    let e = exponent;
    while (e > 0n) {
        if (e & 1n)
            result = (result * b) % P;
        b = (b * b) % P;
        e >>= 1n;
    }
    return result;
}
const D = mod(-121665n * pow(121666n, P - 2n));
const SQRT_M1 = pow(2n, (P - 1n) / 4n);
function add(a, b) {
    const aa = mod((a[1] - a[0]) * (b[1] - b[0]));
    const bb = mod((a[1] + a[0]) * (b[1] + b[0]));
    const cc = mod(2n * a[3] * b[3] * D);
    const dd = mod(2n * a[2] * b[2]);
    const e = bb - aa;
    const f = dd - cc;
    const g = dd + cc;
    const h = bb + aa;
    return [mod(e * f), mod(g * h), mod(f * g), mod(e * h)];
}
function isIdentity(p) {
    // x = 0 and y = 1, projectively.
    return mod(p[0]) === 0n && mod(p[1] - p[2]) === 0n;
}
function littleEndian(bytes) {
    let n = 0n;
    for (let i = bytes.length - 1; i >= 0; i--)
        n = (n << 8n) | BigInt(bytes[i]);
    return n;
}
/** Decompresses a 32-byte point as curve25519-dalek does; undefined when
 * the bytes are not a point of the curve. */
export function decodePoint(bytes) {
    if (bytes.length !== 32)
        return undefined;
    const encoded = littleEndian(bytes);
    const sign = encoded >> 255n;
    const y = mod(encoded & ((1n << 255n) - 1n));
    const x2 = mod((y * y - 1n) * pow(D * y * y + 1n, P - 2n));
    if (x2 === 0n)
        return [0n, y, 1n, 0n];
    let x = pow(x2, (P + 3n) / 8n);
    if (mod(x * x - x2) !== 0n)
        x = mod(x * SQRT_M1);
    if (mod(x * x - x2) !== 0n)
        return undefined;
    if ((x & 1n) !== sign)
        x = P - x;
    return [x, y, 1n, mod(x * y)];
}
/** Whether the 32 bytes are an Ed25519 public key (a curve point). */
export function isCurvePoint(bytes) {
    return decodePoint(bytes) !== undefined;
}
function hasSmallOrder(p) {
    let q = add(p, p);
    q = add(q, q);
    q = add(q, q);
    return isIdentity(q);
}
/** Strict Ed25519 verification (RFC 8032 with ed25519-dalek's
 * verify_strict rules); false for any malformed input. */
export async function verifyStrict(publicKey, message, signature) {
    if (publicKey.length !== 32 || signature.length !== 64)
        return false;
    if (littleEndian(signature.subarray(32)) >= L)
        return false;
    const a = decodePoint(publicKey);
    const r = decodePoint(signature.subarray(0, 32));
    if (a === undefined || r === undefined || hasSmallOrder(a) || hasSmallOrder(r))
        return false;
    try {
        const subtle = webCrypto();
        const key = await subtle.importKey("raw", publicKey, { name: "Ed25519" }, false, ["verify"]);
        return await subtle.verify({ name: "Ed25519" }, key, signature, message);
    }
    catch {
        // An implementation that refuses the key's encoding outright.
        return false;
    }
}
