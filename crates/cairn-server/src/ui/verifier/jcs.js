// RFC 8785 canonical JSON (JCS), FORMAT.md section 2.1. ECMAScript's own
// number formatting is the one RFC 8785 specifies, and its default string
// comparison is by UTF-16 code units, the order RFC 8785 sorts members in.
import { utf8 } from "./bytes.js";
import { JsonDouble } from "./strict-json.js";
function canonicalString(value) {
    let out = '"';
    for (let i = 0; i < value.length; i++) {
        const c = value.charCodeAt(i);
        if (c === 0x22)
            out += '\\"';
        else if (c === 0x5c)
            out += "\\\\";
        else if (c === 0x08)
            out += "\\b";
        else if (c === 0x09)
            out += "\\t";
        else if (c === 0x0a)
            out += "\\n";
        else if (c === 0x0c)
            out += "\\f";
        else if (c === 0x0d)
            out += "\\r";
        else if (c < 0x20)
            out += "\\u" + c.toString(16).padStart(4, "0");
        else
            out += value[i];
    }
    return out + '"';
}
function canonicalNumber(value) {
    if (!Number.isFinite(value))
        throw new TypeError("JSON has no NaN or infinity");
    // String(-0) is "0", as RFC 8785 wants.
    return String(value);
}
function write(value, out) {
    if (value === null)
        out.push("null");
    else if (value === true)
        out.push("true");
    else if (value === false)
        out.push("false");
    else if (typeof value === "number")
        out.push(canonicalNumber(value));
    else if (value instanceof JsonDouble)
        out.push(canonicalNumber(value.value));
    else if (typeof value === "string")
        out.push(canonicalString(value));
    else if (Array.isArray(value)) {
        out.push("[");
        value.forEach((item, i) => {
            if (i > 0)
                out.push(",");
            write(item, out);
        });
        out.push("]");
    }
    else if (typeof value === "object") {
        const record = value;
        const names = Object.keys(record).sort();
        out.push("{");
        names.forEach((name, i) => {
            if (i > 0)
                out.push(",");
            out.push(canonicalString(name), ":");
            write(record[name], out);
        });
        out.push("}");
    }
    else {
        throw new TypeError(`not a JSON value: ${typeof value}`);
    }
}
/** The RFC 8785 canonical text of a JSON value (parsed strictly or plain). */
export function canonicalJson(value) {
    const out = [];
    write(value, out);
    return out.join("");
}
/** The canonical text as UTF-8 bytes, the input of Cairn's hashes. */
export function canonicalBytes(value) {
    return utf8(canonicalJson(value));
}
