// Strict JSON reading, FORMAT.md section 2.2. JSON.parse cannot be used:
// it keeps the last of two members with one name, rounds integers beyond
// 2^53 - 1 silently, and forgets whether a number was written `1` or `1.0`
// (a bundle's integers must be integer tokens, FORMAT.md 10.1).

/** A number written with a fraction or an exponent: a double, never an
 * integer, even when its value is whole (`1.0`). Integer tokens are plain
 * `number`s. */
export class JsonDouble {
  constructor(readonly value: number) {}
}

export type JsonValue = null | boolean | number | string | JsonDouble | JsonValue[] | JsonObject;
/** Objects are created without a prototype, so a member named
 * `__proto__` is an ordinary member. */
export interface JsonObject {
  [name: string]: JsonValue;
}

export class StrictJsonError extends Error {
  override name = "StrictJsonError";
}

/** The largest magnitude of an integer literal (2^53 - 1). */
export const MAX_SAFE_INTEGER = Number.MAX_SAFE_INTEGER;
/** Arrays and objects nested this deep or deeper are refused (the
 * outermost counts as 1): serde_json's recursion limit. */
export const MAX_DEPTH = 128;

const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;

class Parser {
  private pos = 0;
  private depth = 0;

  constructor(private readonly text: string) {}

  parseDocument(): JsonValue {
    this.skipWhite();
    const value = this.value();
    this.skipWhite();
    if (this.pos !== this.text.length) this.fail("text after the JSON value");
    return value;
  }

  private fail(message: string): never {
    throw new StrictJsonError(`${message} at character ${this.pos}`);
  }

  private skipWhite(): void {
    const text = this.text;
    while (this.pos < text.length) {
      const c = text.charCodeAt(this.pos);
      // Only the four JSON white space characters (a BOM is not one).
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) this.pos++;
      else break;
    }
  }

  private value(): JsonValue {
    const c = this.text[this.pos];
    switch (c) {
      case "{":
        return this.object();
      case "[":
        return this.array();
      case '"':
        return this.string();
      case "t":
        return this.literal("true", true);
      case "f":
        return this.literal("false", false);
      case "n":
        return this.literal("null", null);
      default:
        if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) return this.number();
        return this.fail(c === undefined ? "unexpected end of text" : `unexpected character ${JSON.stringify(c)}`);
    }
  }

  private literal<T extends JsonValue>(word: string, value: T): T {
    if (!this.text.startsWith(word, this.pos)) this.fail("not a JSON value");
    this.pos += word.length;
    return value;
  }

  private enter(): void {
    this.depth++;
    if (this.depth >= MAX_DEPTH) this.fail(`arrays and objects nested ${MAX_DEPTH} deep`);
  }

  private object(): JsonObject {
    this.enter();
    this.pos++;
    const out: JsonObject = Object.create(null) as JsonObject;
    this.skipWhite();
    if (this.text[this.pos] === "}") {
      this.pos++;
      this.depth--;
      return out;
    }
    for (;;) {
      this.skipWhite();
      if (this.text[this.pos] !== '"') this.fail("expected a member name");
      const name = this.string();
      if (Object.hasOwn(out, name)) this.fail(`member ${JSON.stringify(name)} appears twice in one object`);
      this.skipWhite();
      if (this.text[this.pos] !== ":") this.fail("expected ':'");
      this.pos++;
      this.skipWhite();
      out[name] = this.value();
      this.skipWhite();
      const next = this.text[this.pos++];
      if (next === "}") break;
      if (next !== ",") this.fail("expected ',' or '}'");
    }
    this.depth--;
    return out;
  }

  private array(): JsonValue[] {
    this.enter();
    this.pos++;
    const out: JsonValue[] = [];
    this.skipWhite();
    if (this.text[this.pos] === "]") {
      this.pos++;
      this.depth--;
      return out;
    }
    for (;;) {
      this.skipWhite();
      out.push(this.value());
      this.skipWhite();
      const next = this.text[this.pos++];
      if (next === "]") break;
      if (next !== ",") this.fail("expected ',' or ']'");
    }
    this.depth--;
    return out;
  }

  private number(): number | JsonDouble {
    NUMBER.lastIndex = this.pos;
    const match = NUMBER.exec(this.text);
    if (!match) return this.fail("not a JSON number");
    const token = match[0];
    this.pos += token.length;
    const value = Number(token);
    if (match[1] === undefined && match[2] === undefined && token !== "-0") {
      // An integer token: two languages must read the same value. `-0` is
      // negative zero, a double (RFC 8785 writes it `0`), never an integer:
      // FORMAT.md 10.1's integers are digits only.
      if (Math.abs(value) > MAX_SAFE_INTEGER) this.fail(`integer literal ${token.slice(0, 40)} is beyond 2^53 - 1`);
      return value;
    }
    if (!Number.isFinite(value)) this.fail(`number ${token.slice(0, 40)} is beyond the range of a double`);
    return new JsonDouble(value);
  }

  private string(): string {
    const text = this.text;
    this.pos++;
    let out = "";
    let start = this.pos;
    for (;;) {
      if (this.pos >= text.length) this.fail("unterminated string");
      const c = text.charCodeAt(this.pos);
      if (c === 0x22) {
        out += text.slice(start, this.pos);
        this.pos++;
        return out;
      }
      if (c < 0x20) this.fail("a control character inside a string");
      if (c !== 0x5c) {
        this.pos++;
        continue;
      }
      out += text.slice(start, this.pos);
      this.pos++;
      const escape = text[this.pos++];
      switch (escape) {
        case '"': out += '"'; break;
        case "\\": out += "\\"; break;
        case "/": out += "/"; break;
        case "b": out += "\b"; break;
        case "f": out += "\f"; break;
        case "n": out += "\n"; break;
        case "r": out += "\r"; break;
        case "t": out += "\t"; break;
        case "u": out += this.unicodeEscape(); break;
        default: this.fail("not a JSON escape");
      }
      start = this.pos;
    }
  }

  private hex4(): number {
    const digits = this.text.slice(this.pos, this.pos + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(digits)) this.fail("a \\u escape needs four hex digits");
    this.pos += 4;
    return parseInt(digits, 16);
  }

  /** After `\u`: one code unit, or a surrogate pair written as two escapes.
   * A lone surrogate is not text, so it is refused. */
  private unicodeEscape(): string {
    const unit = this.hex4();
    if (unit >= 0xdc00 && unit <= 0xdfff) this.fail("a lone low surrogate escape");
    if (unit < 0xd800 || unit > 0xdbff) return String.fromCharCode(unit);
    if (this.text.startsWith("\\u", this.pos)) {
      this.pos += 2;
      const low = this.hex4();
      if (low >= 0xdc00 && low <= 0xdfff) return String.fromCharCode(unit, low);
    }
    return this.fail("a lone high surrogate escape");
  }
}

/** Parses one strict JSON text (FORMAT.md 2.2); throws StrictJsonError. */
export function parseStrictJson(text: string): JsonValue {
  return new Parser(text).parseDocument();
}

export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof JsonDouble);
}

/** The value with every JsonDouble replaced by its number: for handing
 * parsed JSON to code that expects JSON.parse's output. */
export function toPlain(value: JsonValue): unknown {
  if (value instanceof JsonDouble) return value.value;
  if (Array.isArray(value)) return value.map(toPlain);
  if (isJsonObject(value)) {
    const out: Record<string, unknown> = {};
    for (const [name, item] of Object.entries(value)) {
      Object.defineProperty(out, name, { value: toPlain(item), enumerable: true, writable: true, configurable: true });
    }
    return out;
  }
  return value;
}
