// A bundle's lines (FORMAT.md 10.1): split from a whole buffer or from a
// stream of chunks (only "\n" ends a line, a "\r" before it is dropped),
// and a line read as strict JSON (2.2).

import { decodeUtf8 } from "./bytes.js";
import { parseStrictJson, StrictJsonError, type JsonValue } from "./strict-json.js";

export function parseLine(raw: Uint8Array): JsonValue {
  let text: string;
  try {
    text = decodeUtf8(raw);
  } catch {
    throw new StrictJsonError("not UTF-8");
  }
  return parseStrictJson(text);
}

/** A bundle's lines as bytes: only "\n" ends a line, a "\r" before it is
 * dropped, and a final "\n" opens no empty line (FORMAT.md 10.1). */
export function* bundleLines(bytes: Uint8Array): Generator<Uint8Array> {
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
export async function* streamLines(
  chunks: AsyncIterable<Uint8Array> | ReadableStream<Uint8Array>,
  onProgress?: (bytesRead: number) => void,
): AsyncGenerator<Uint8Array> {
  let pending: Uint8Array[] = [];
  let read = 0;
  const iterable: AsyncIterable<Uint8Array> =
    Symbol.asyncIterator in chunks ? (chunks as AsyncIterable<Uint8Array>) : readerIterable(chunks as ReadableStream<Uint8Array>);
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
      const line = pending.length === 1 ? pending[0]! : concatAll(pending);
      pending = [];
      yield line.length > 0 && line[line.length - 1] === 0x0d ? line.subarray(0, line.length - 1) : line;
      start = end + 1;
    }
    onProgress?.(read);
  }
  if (pending.length > 0) yield concatAll(pending);
}

async function* readerIterable(stream: ReadableStream<Uint8Array>): AsyncGenerator<Uint8Array> {
  const reader = stream.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      yield value;
    }
  } finally {
    reader.releaseLock();
  }
}

function concatAll(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}
