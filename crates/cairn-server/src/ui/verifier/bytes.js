// Byte helpers shared by the verifier: strict hex and base64 (FORMAT.md
// conventions), UTF-8, the domain-separated frame of FORMAT.md section 1,
// and SHA-256 through WebCrypto. Nothing here imports a Node module, so the
// verifier runs in browsers too.
const encoder = new TextEncoder();
/** UTF-8 bytes of a string. */
export function utf8(text) {
    return encoder.encode(text);
}
/** Decodes UTF-8 strictly: invalid bytes throw, and a byte order mark is
 * kept (so that it fails as JSON instead of vanishing). */
export function decodeUtf8(bytes) {
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
}
export function concat(...parts) {
    let length = 0;
    for (const part of parts)
        length += part.length;
    const out = new Uint8Array(length);
    let offset = 0;
    for (const part of parts) {
        out.set(part, offset);
        offset += part.length;
    }
    return out;
}
export function equalBytes(a, b) {
    if (a.length !== b.length)
        return false;
    for (let i = 0; i < a.length; i++)
        if (a[i] !== b[i])
            return false;
    return true;
}
const HEX_DIGITS = "0123456789abcdef";
export function toHex(bytes) {
    let out = "";
    for (const byte of bytes)
        out += HEX_DIGITS[byte >> 4] + HEX_DIGITS[byte & 15];
    return out;
}
const LOWER_HEX = /^[0-9a-f]*$/;
/** Lowercase hex of exactly `size` bytes, or undefined: an uppercase digit
 * is another spelling of the same bytes, so it is refused. */
export function fromHex(text, size) {
    if (typeof text !== "string" || text.length !== 2 * size || !LOWER_HEX.test(text))
        return undefined;
    const out = new Uint8Array(size);
    for (let i = 0; i < size; i++)
        out[i] = parseInt(text.slice(2 * i, 2 * i + 2), 16);
    return out;
}
const B64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64_VALUES = new Map([...B64_ALPHABET].map((c, i) => [c, i]));
/** RFC 4648 base64, standard alphabet, with padding. */
export function toBase64(bytes) {
    let out = "";
    for (let i = 0; i < bytes.length; i += 3) {
        const b0 = bytes[i];
        const b1 = i + 1 < bytes.length ? bytes[i + 1] : 0;
        const b2 = i + 2 < bytes.length ? bytes[i + 2] : 0;
        out += B64_ALPHABET[b0 >> 2] + B64_ALPHABET[((b0 & 3) << 4) | (b1 >> 4)];
        out += i + 1 < bytes.length ? B64_ALPHABET[((b1 & 15) << 2) | (b2 >> 6)] : "=";
        out += i + 2 < bytes.length ? B64_ALPHABET[b2 & 63] : "=";
    }
    return out;
}
/** Canonical base64 only (standard alphabet, padding, zero unused bits),
 * or undefined: two spellings of the same bytes would be two texts. */
export function fromBase64(text) {
    if (typeof text !== "string" || text.length % 4 !== 0)
        return undefined;
    const padding = text.endsWith("==") ? 2 : text.endsWith("=") ? 1 : 0;
    const body = text.slice(0, text.length - padding);
    const values = [];
    for (const c of body) {
        const v = B64_VALUES.get(c);
        if (v === undefined)
            return undefined;
        values.push(v);
    }
    const out = new Uint8Array((values.length * 6) >> 3);
    let acc = 0;
    let bits = 0;
    let n = 0;
    for (const v of values) {
        acc = ((acc << 6) | v) & 0xffffff;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (acc >> bits) & 0xff;
        }
    }
    // The bits left over must be zero, or another text decodes to the same bytes.
    if (bits > 0 && (acc & ((1 << bits) - 1)) !== 0)
        return undefined;
    return out;
}
/** u64be(n) of FORMAT.md: 8 bytes, big-endian. */
export function u64be(n) {
    const out = new Uint8Array(8);
    new DataView(out.buffer).setBigUint64(0, BigInt(n));
    return out;
}
/** frame(tag; p1, ..., pn) of FORMAT.md section 1: the tag's length byte,
 * the tag, then each part with its 4-byte big-endian length. */
export function frame(tag, ...parts) {
    const tagBytes = utf8(tag);
    const pieces = [Uint8Array.of(tagBytes.length), tagBytes];
    for (const part of parts) {
        const length = new Uint8Array(4);
        new DataView(length.buffer).setUint32(0, part.length);
        pieces.push(length, part);
    }
    return concat(...pieces);
}
function subtle() {
    const crypto = globalThis.crypto;
    if (!crypto?.subtle)
        throw new Error("WebCrypto (globalThis.crypto.subtle) is not available");
    return crypto.subtle;
}
export { subtle as webCrypto };
export async function sha256(data) {
    return new Uint8Array(await subtle().digest("SHA-256", data));
}
/** H(tag; p1, ..., pn) = SHA-256(frame(tag; p1, ..., pn)). */
export async function taggedHash(tag, ...parts) {
    return sha256(frame(tag, ...parts));
}
