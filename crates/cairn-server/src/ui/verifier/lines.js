// A bundle's lines (FORMAT.md 10.1): split from a whole buffer or from a
// stream of chunks (only "\n" ends a line, a "\r" before it is dropped),
// and a line read as strict JSON (2.2).
import { decodeUtf8 } from "./bytes.js";
import { parseStrictJson, StrictJsonError } from "./strict-json.js";
export function parseLine(raw) {
    let text;
    try {
        text = decodeUtf8(raw);
    }
    catch {
        throw new StrictJsonError("not UTF-8");
    }
    return parseStrictJson(text);
}
/** A bundle's lines as bytes: only "\n" ends a line, a "\r" before it is
 * dropped, and a final "\n" opens no empty line (FORMAT.md 10.1). */
export function* bundleLines(bytes) {
    let start = 0;
    while (start < bytes.length) {
        const end = bytes.indexOf(0x0a, start);
        if (end < 0) {
            yield bytes.subarray(start);
            return;
        }
        const stop = end > start && bytes[end - 1] === 0x0d ? end - 1 : end;
        yield bytes.subarray(start, stop);
        start = end + 1;
    }
}
/** The lines of a stream of chunks, as [`bundleLines`] splits a buffer. */
export async function* streamLines(chunks, onProgress) {
    let pending = [];
    let read = 0;
    const iterable = Symbol.asyncIterator in chunks ? chunks : readerIterable(chunks);
    for await (const chunk of iterable) {
        read += chunk.length;
        let start = 0;
        while (start < chunk.length) {
            const end = chunk.indexOf(0x0a, start);
            if (end < 0) {
                pending.push(chunk.subarray(start));
                break;
            }
            pending.push(chunk.subarray(start, end));
            const line = pending.length === 1 ? pending[0] : concatAll(pending);
            pending = [];
            yield line.length > 0 && line[line.length - 1] === 0x0d ? line.subarray(0, line.length - 1) : line;
            start = end + 1;
        }
        onProgress?.(read);
    }
    if (pending.length > 0)
        yield concatAll(pending);
}
async function* readerIterable(stream) {
    const reader = stream.getReader();
    try {
        for (;;) {
            const { done, value } = await reader.read();
            if (done)
                return;
            yield value;
        }
    }
    finally {
        reader.releaseLock();
    }
}
function concatAll(parts) {
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const part of parts) {
        out.set(part, at);
        at += part.length;
    }
    return out;
}
