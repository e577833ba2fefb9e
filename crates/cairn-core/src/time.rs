//! UTC timestamps at microsecond precision.
//!
//! The core never reads a clock: callers pass timestamps in. The canonical
//! text form, the one that enters every hash, is RFC 3339 in UTC with
//! exactly six fractional digits and a `Z`: `2026-11-21T08:10:42.123456Z`.
//! Written by hand rather than taken from a date crate because it is on the
//! verification hot path and must accept exactly one spelling.

use std::fmt;

/// Microseconds since 1970-01-01T00:00:00Z, restricted to years 0000..=9999.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

/// Microseconds in one day.
const DAY_MICROS: i64 = 86_400_000_000;
/// 0000-01-01T00:00:00Z.
const MIN_MICROS: i64 = -62_167_219_200_000_000;
/// 9999-12-31T23:59:59.999999Z.
const MAX_MICROS: i64 = 253_402_300_799_999_999;

impl Timestamp {
    /// The last instant a timestamp can name: 9999-12-31T23:59:59.999999Z.
    pub const MAX: Timestamp = Timestamp(MAX_MICROS);

    /// From microseconds since the Unix epoch; `None` outside years 0..=9999.
    pub fn from_micros(micros: i64) -> Option<Timestamp> {
        (MIN_MICROS..=MAX_MICROS)
            .contains(&micros)
            .then_some(Timestamp(micros))
    }

    /// Microseconds since the Unix epoch.
    pub fn as_micros(self) -> i64 {
        self.0
    }

    /// Parses the canonical form only (`YYYY-MM-DDTHH:MM:SS.ffffffZ`), as a
    /// verifier must: any other spelling of the same instant is rejected, so
    /// that one instant has one hash input.
    pub fn parse_canonical(text: &str) -> Result<Timestamp, TimestampError> {
        let b = text.as_bytes();
        if b.len() != 27 || b[19] != b'.' || b[26] != b'Z' {
            return Err(TimestampError::new(text));
        }
        let ts = parse_rfc3339(text)?;
        if ts.to_string() != text {
            return Err(TimestampError::new(text));
        }
        Ok(ts)
    }

    /// Parses any RFC 3339 date-time (`T` or `t`, `Z` or a numeric offset,
    /// zero to nine fractional digits). Digits beyond the sixth are
    /// truncated: Cairn records microseconds.
    pub fn parse_rfc3339(text: &str) -> Result<Timestamp, TimestampError> {
        parse_rfc3339(text)
    }
}

fn parse_rfc3339(text: &str) -> Result<Timestamp, TimestampError> {
    let err = || TimestampError::new(text);
    let b = text.as_bytes();
    if b.len() < 20 {
        return Err(err());
    }
    let num = |range: std::ops::Range<usize>| -> Result<i64, TimestampError> {
        let digits = b.get(range).ok_or_else(err)?;
        digits.iter().try_fold(0i64, |acc, &d| {
            if d.is_ascii_digit() {
                Ok(acc * 10 + i64::from(d - b'0'))
            } else {
                Err(err())
            }
        })
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return Err(err());
    }
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if b[13] != b':' || b[16] != b':' {
        return Err(err());
    }
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return Err(err());
    }
    let mut pos = 19;
    let mut micros = 0i64;
    if b.get(pos) == Some(&b'.') {
        pos += 1;
        let start = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            if pos - start < 6 {
                micros = micros * 10 + i64::from(b[pos] - b'0');
            }
            pos += 1;
        }
        let count = pos - start;
        if count == 0 || count > 9 {
            return Err(err());
        }
        for _ in count..6 {
            micros *= 10;
        }
    }
    let offset_minutes = match b.get(pos..) {
        Some(b"Z") | Some(b"z") => 0,
        Some([sign @ (b'+' | b'-'), rest @ ..]) if rest.len() == 5 && rest[2] == b':' => {
            let hours = num(pos + 1..pos + 3)?;
            let minutes = num(pos + 4..pos + 6)?;
            if hours > 23 || minutes > 59 {
                return Err(err());
            }
            let total = hours * 60 + minutes;
            if *sign == b'+' { total } else { -total }
        }
        _ => return Err(err()),
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_minutes * 60;
    Timestamp::from_micros(seconds * 1_000_000 + micros).ok_or_else(err)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl Timestamp {
    /// The canonical form as 27 ASCII bytes, without going through
    /// `fmt` (it is hashed on every append and every verification).
    pub fn canonical_bytes(self) -> [u8; 27] {
        let days = self.0.div_euclid(DAY_MICROS);
        let in_day = self.0.rem_euclid(DAY_MICROS);
        let (year, month, day) = civil_from_days(days);
        let secs = in_day / 1_000_000;
        let mut out = *b"0000-00-00T00:00:00.000000Z";
        let mut put = |start: usize, width: usize, mut value: i64| {
            for i in (start..start + width).rev() {
                out[i] = b'0' + (value % 10) as u8;
                value /= 10;
            }
        };
        put(0, 4, year);
        put(5, 2, month);
        put(8, 2, day);
        put(11, 2, secs / 3600);
        put(14, 2, secs / 60 % 60);
        put(17, 2, secs % 60);
        put(20, 6, in_day % 1_000_000);
        out
    }
}

impl fmt::Display for Timestamp {
    /// The canonical form, `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.canonical_bytes();
        // Only ASCII digits and separators are written above.
        f.write_str(std::str::from_utf8(&bytes).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({self})")
    }
}

/// A timestamp that is not valid RFC 3339, or not canonical where the
/// canonical form is required.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid timestamp {input:?}: expected an RFC 3339 time such as 2026-01-15T10:30:00.000000Z"
)]
pub struct TimestampError {
    /// The offending input (truncated to 80 characters).
    pub input: String,
}

impl TimestampError {
    fn new(text: &str) -> TimestampError {
        TimestampError {
            input: text.chars().take(80).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_canonical() {
        let ts = Timestamp::parse_rfc3339("2025-01-15T10:30:00Z").unwrap();
        assert_eq!(ts.to_string(), "2025-01-15T10:30:00.000000Z");
        assert_eq!(Timestamp::parse_canonical(&ts.to_string()), Ok(ts));
        assert_eq!(ts.as_micros(), 1_736_937_000_000_000);
    }

    #[test]
    fn offsets_and_fractions() {
        let a = Timestamp::parse_rfc3339("2026-02-08T12:34:56.123Z").unwrap();
        let b = Timestamp::parse_rfc3339("2026-02-08T14:34:56.123000999+02:00").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "2026-02-08T12:34:56.123000Z");
    }

    #[test]
    fn rejects_non_canonical_and_invalid() {
        for bad in [
            "2025-01-15T10:30:00Z",
            "2025-01-15T10:30:00.000000+00:00",
            "2025-01-15t10:30:00.000000Z",
            "2025-02-30T10:30:00.000000Z",
            "2025-01-15T24:00:00.000000Z",
            "2025-01-15 10:30:00.000000Z",
        ] {
            assert!(Timestamp::parse_canonical(bad).is_err(), "{bad}");
        }
        assert!(Timestamp::parse_rfc3339("2025-01-15T10:30:00.Z").is_err());
        assert!(Timestamp::parse_rfc3339("nonsense-that-is-long-enough").is_err());
    }

    #[test]
    fn round_trips_across_the_range() {
        for micros in [MIN_MICROS, -1, 0, 951_782_400_000_000, MAX_MICROS] {
            let ts = Timestamp::from_micros(micros).unwrap();
            assert_eq!(Timestamp::parse_canonical(&ts.to_string()), Ok(ts));
        }
        assert!(Timestamp::from_micros(MAX_MICROS + 1).is_none());
    }
}
