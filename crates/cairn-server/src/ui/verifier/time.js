// Timestamps, FORMAT.md 2.3 (canonical form) and 7.4 (the RFC 3339 forms a
// signed trace may carry). Microseconds are bigints: the years 0000 to 9999
// span more microseconds than a double holds exactly.
const CANONICAL = /^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})\.([0-9]{6})Z$/;
const RFC3339 = /^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))$/;
const MIN_MICROS = daysFromCivil(0n, 1n, 1n) * 86400000000n;
const MAX_MICROS = daysFromCivil(10000n, 1n, 1n) * 86400000000n - 1n;
function isLeap(year) {
    return (year % 4n === 0n && year % 100n !== 0n) || year % 400n === 0n;
}
function daysInMonth(year, month) {
    if (month === 2n)
        return isLeap(year) ? 29n : 28n;
    return [4n, 6n, 9n, 11n].includes(month) ? 30n : 31n;
}
/** Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
 * algorithm, the one Cairn's Rust code uses). */
function daysFromCivil(year, month, day) {
    const y = month <= 2n ? year - 1n : year;
    const era = (y >= 0n ? y : y - 399n) / 400n;
    const yoe = y - era * 400n;
    const mp = (month + 9n) % 12n;
    const doy = (153n * mp + 2n) / 5n + day - 1n;
    const doe = yoe * 365n + yoe / 4n - yoe / 100n + doy;
    return era * 146097n + doe - 719468n;
}
function micros(parts, fraction, offsetMinutes) {
    const [year, month, day, hour, minute, second] = parts.map((p) => BigInt(p));
    if (month < 1n || month > 12n || day < 1n || day > daysInMonth(year, month) || hour > 23n || minute > 59n || second > 59n) {
        return undefined;
    }
    // Digits beyond the sixth are truncated: Cairn records microseconds.
    const fractionMicros = BigInt(fraction.slice(0, 6).padEnd(6, "0"));
    const seconds = daysFromCivil(year, month, day) * 86400n + hour * 3600n + minute * 60n + second - offsetMinutes * 60n;
    const result = seconds * 1000000n + fractionMicros;
    return result < MIN_MICROS || result > MAX_MICROS ? undefined : result;
}
/** Microseconds since 1970 of a canonical timestamp
 * (`YYYY-MM-DDTHH:MM:SS.ffffffZ`), or undefined if it is not one. */
export function canonicalMicros(text) {
    if (typeof text !== "string")
        return undefined;
    const match = CANONICAL.exec(text);
    if (!match)
        return undefined;
    return micros(match.slice(1, 7), match[7], 0n);
}
export function isCanonicalTimestamp(text) {
    return canonicalMicros(text) !== undefined;
}
/** Whether the text is an RFC 3339 date-time as FORMAT.md 7.4 reads them. */
export function isRfc3339(text) {
    if (typeof text !== "string")
        return false;
    const match = RFC3339.exec(text);
    if (!match)
        return false;
    let offset = 0n;
    if (match[8] === undefined) {
        const hours = BigInt(match[10]);
        const minutes = BigInt(match[11]);
        if (hours > 23n || minutes > 59n)
            return false;
        offset = (hours * 60n + minutes) * (match[9] === "-" ? -1n : 1n);
    }
    return micros(match.slice(1, 7), match[7] ?? "", offset) !== undefined;
}
