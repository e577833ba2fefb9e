//! SQLite's text functions whose single call can outlast analyst SQL's
//! time limit, replaced on the analyst connection.
//!
//! The time limit is a progress handler, which SQLite calls between
//! virtual-machine instructions: one function call is one instruction.
//! Some built-ins do work proportional to the product of their arguments'
//! lengths (`instr`, `replace`, `trim (X, Y)`, `LIKE`, `GLOB`, `unhex (X,
//! Y)`), and on megabyte values one call ran for minutes (`'aaa…' LIKE
//! '%aaa…b%'` with a 20,000-byte pattern: 49 s; `trim` with a long
//! character set: hours) while the handler waited. Each is registered
//! again on the analyst connection under its own name and arity:
//!
//! - `instr (X, Y)` and `replace (X, Y, Z)` find `Y` with a linear-time
//!   search (`memchr::memmem`), with SQLite's exact answers (a text
//!   position counted in characters as SQLite counts them, bytes for two
//!   blobs; leftmost non-overlapping replacements, by bytes);
//! - `LIKE`, `GLOB`, `trim`/`ltrim`/`rtrim (X, Y)` and `unhex (X, Y)` are
//!   computed by SQLite's own built-in, on a private in-memory connection,
//!   once the product of the two lengths is within [`WORK_PER_CALL`];
//!   past it the call fails with a message saying so (`instr` finds long
//!   text in linear time).
//!
//! A call with a number among its arguments (short, once SQLite turns it
//! into text) is computed by the built-in, so that the number's text is
//! SQLite's own; `replace` with a number to put in turns the number into
//! SQLite's text first and still searches in linear time.
//!
//! Every replacement, and [`TIME_CHECK_FUNCTION`] (which the analyst
//! statement calls before each scalar call, see
//! `crate::analyst::time_checks`), fails once the query's deadline has
//! passed: one row's expressions run between two checks of SQLite's
//! progress handler.

use crate::analyst::TIME_CHECK_FUNCTION;
use rusqlite::functions::{Context, FunctionFlags};
use rusqlite::types::{ToSql, ToSqlOutput, ValueRef};
use rusqlite::{Connection, params_from_iter};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The most work one call of `LIKE`, `GLOB`, `trim (X, Y)` and
/// `unhex (X, Y)` may take, as the product of its two arguments' lengths
/// in bytes: about a quarter of a second of SQLite's matching on this
/// kind of machine at worst (at 256 Mi one call took 0.7-1.4 s), which
/// still lets a 2 MiB value, about the largest a step stores, be matched
/// with a 32-byte pattern.
pub(super) const WORK_PER_CALL: u64 = 64 * 1024 * 1024;

/// A function's answer, any SQLite type, text kept as bytes (SQLite's text
/// need not be UTF-8).
enum Answer {
    Null,
    Integer(i64),
    Real(f64),
    Text(Vec<u8>),
    Blob(Vec<u8>),
}

impl ToSql for Answer {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Answer::Null => ValueRef::Null,
            Answer::Integer(n) => ValueRef::Integer(*n),
            Answer::Real(f) => ValueRef::Real(*f),
            Answer::Text(t) => ValueRef::Text(t),
            Answer::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

impl From<ValueRef<'_>> for Answer {
    fn from(value: ValueRef<'_>) -> Self {
        match value {
            ValueRef::Null => Answer::Null,
            ValueRef::Integer(n) => Answer::Integer(n),
            ValueRef::Real(f) => Answer::Real(f),
            ValueRef::Text(t) => Answer::Text(t.to_vec()),
            ValueRef::Blob(b) => Answer::Blob(b.to_vec()),
        }
    }
}

/// An argument handed on to the built-in as it came.
struct Arg<'a>(ValueRef<'a>);

impl ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(self.0))
    }
}

/// The private connection the built-ins run on.
type Builtins = Arc<Mutex<Connection>>;

/// Runs `sql` (one value) on the private connection.
fn run(builtins: &Builtins, sql: &str, args: &[Arg<'_>]) -> rusqlite::Result<Answer> {
    let conn = builtins
        .lock()
        .map_err(|_| rusqlite::Error::UserFunctionError("a function's connection failed".into()))?;
    let mut stmt = conn.prepare_cached(sql)?;
    stmt.query_row(params_from_iter(args), |row| {
        Ok(Answer::from(row.get_ref(0)?))
    })
}

/// Runs the built-in `name` on the call's arguments as they came.
fn builtin(builtins: &Builtins, name: &str, ctx: &Context<'_>) -> rusqlite::Result<Answer> {
    let args: Vec<Arg<'_>> = (0..ctx.len()).map(|i| Arg(ctx.get_raw(i))).collect();
    let placeholders = vec!["?"; args.len()].join(", ");
    run(builtins, &format!("SELECT {name}({placeholders})"), &args)
}

/// The bytes SQLite's `sqlite3_value_text` would give for a text or blob
/// argument; `None` for a number (its text is SQLite's to write) or NULL.
fn bytes_of<'a>(value: ValueRef<'a>) -> Option<&'a [u8]> {
    match value {
        ValueRef::Text(b) | ValueRef::Blob(b) => Some(b),
        _ => None,
    }
}

/// A length for the work bound: a number's text is at most a few dozen
/// bytes.
fn length_of(value: ValueRef<'_>) -> u64 {
    bytes_of(value).map_or(32, |b| b.len() as u64)
}

/// Whether a byte continues a UTF-8 character.
fn continues(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

/// SQLite's `instr (haystack, needle)` on the bytes given: for text, the
/// character position SQLite's loop counts (it steps from each position
/// to the next byte that does not continue a character); for two blobs,
/// the byte position.
fn instr(haystack: &[u8], needle: &[u8], text: bool) -> i64 {
    if needle.is_empty() {
        return 1;
    }
    if text && continues(needle[0]) {
        // SQLite looks for the needle only where a character starts, and
        // at position 0: a needle that starts mid-character matches there
        // or nowhere.
        return i64::from(haystack.starts_with(needle));
    }
    let Some(at) = memchr::memmem::find(haystack, needle) else {
        return 0;
    };
    if !text {
        return at as i64 + 1;
    }
    if at == 0 {
        return 1;
    }
    // Position 0, then every position in 1..at where a character starts.
    let starts = haystack[1..at].iter().filter(|b| !continues(**b)).count();
    starts as i64 + 2
}

/// SQLite's `replace (X, Y, Z)` on the bytes given (`Y` not empty):
/// leftmost non-overlapping occurrences, by bytes. Stops once the answer
/// passes `cap` bytes, with `cap + 1` of them: SQLite then refuses it as
/// too big (`SQLITE_TOOBIG`, as its own `replace` would), since the
/// connection's length limit is at most `cap`.
fn replace(x: &[u8], y: &[u8], z: &[u8], cap: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(x.len().min(cap));
    let mut from = 0;
    for at in memchr::memmem::find_iter(x, y) {
        if at < from {
            continue;
        }
        out.extend_from_slice(&x[from..at]);
        out.extend_from_slice(z);
        from = at + y.len();
        if out.len() > cap {
            out.truncate(cap + 1);
            return out;
        }
    }
    out.extend_from_slice(&x[from..]);
    out.truncate(cap.saturating_add(1));
    out
}

/// The error of a call made after the query's deadline (read as the time
/// limit by the caller, which compares the clock with the deadline).
fn past(deadline: Instant) -> rusqlite::Result<()> {
    if Instant::now() > deadline {
        return Err(rusqlite::Error::UserFunctionError(
            "the query ran past its time limit".into(),
        ));
    }
    Ok(())
}

/// SQLite's text for a number (as `sqlite3_value_text` writes it).
fn text_of_number(builtins: &Builtins, value: ValueRef<'_>) -> rusqlite::Result<Vec<u8>> {
    match run(builtins, "SELECT CAST(? AS TEXT)", &[Arg(value)])? {
        Answer::Text(text) => Ok(text),
        _ => Err(rusqlite::Error::UserFunctionError(
            "a number's text could not be read".into(),
        )),
    }
}

/// Registers the replacements and [`TIME_CHECK_FUNCTION`] on `conn`;
/// `cap` is the connection's length limit (no answer is built past it),
/// `deadline` the query's (every call after it fails).
pub(super) fn install(conn: &Connection, cap: usize, deadline: Instant) -> rusqlite::Result<()> {
    // Not deterministic: SQLite must call it each time, never once for
    // the statement.
    conn.create_scalar_function(
        TIME_CHECK_FUNCTION,
        0,
        FunctionFlags::SQLITE_UTF8,
        move |_| past(deadline).map(|()| 1),
    )?;
    let private = Connection::open_in_memory()?;
    private.set_limit(
        rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH,
        i32::try_from(cap.max(1)).unwrap_or(i32::MAX),
    )?;
    let builtins: Builtins = Arc::new(Mutex::new(private));
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;

    let b = Arc::clone(&builtins);
    conn.create_scalar_function("instr", 2, flags, move |ctx| {
        past(deadline)?;
        let (x, y) = (ctx.get_raw(0), ctx.get_raw(1));
        if matches!(x, ValueRef::Null) || matches!(y, ValueRef::Null) {
            return Ok(Answer::Null);
        }
        match (bytes_of(x), bytes_of(y)) {
            (Some(h), Some(n)) => {
                let blobs = matches!((x, y), (ValueRef::Blob(_), ValueRef::Blob(_)));
                Ok(Answer::Integer(instr(h, n, !blobs)))
            }
            _ => builtin(&b, "instr", ctx),
        }
    })?;

    let b = Arc::clone(&builtins);
    conn.create_scalar_function("replace", 3, flags, move |ctx| {
        past(deadline)?;
        let (x, y, z) = (ctx.get_raw(0), ctx.get_raw(1), ctx.get_raw(2));
        // SQLite's order: X, then Y, then an empty Y (by its first byte:
        // this test reads text up to a NUL) answers X before Z is read.
        if matches!(x, ValueRef::Null) || matches!(y, ValueRef::Null) {
            return Ok(Answer::Null);
        }
        match (bytes_of(x), bytes_of(y)) {
            (Some(x), Some(y)) if y.first().is_none_or(|b| *b == 0) => Ok(Answer::Text(x.to_vec())),
            (Some(x), Some(y)) => match (z, bytes_of(z)) {
                (ValueRef::Null, _) => Ok(Answer::Null),
                (_, Some(z)) => Ok(Answer::Text(replace(x, y, z, cap))),
                // A number to put in: SQLite's text for it (the built-in
                // searches in time of the product of X's and Y's lengths).
                (z, None) => Ok(Answer::Text(replace(x, y, &text_of_number(&b, z)?, cap))),
            },
            _ => builtin(&b, "replace", ctx),
        }
    })?;

    // (name, arity, which argument is the long value, which the pattern
    // or set that multiplies its cost)
    let bounded: [(&'static str, i32, usize, usize); 7] = [
        ("like", 2, 1, 0),
        ("like", 3, 1, 0),
        ("glob", 2, 1, 0),
        ("trim", 2, 0, 1),
        ("ltrim", 2, 0, 1),
        ("rtrim", 2, 0, 1),
        ("unhex", 2, 0, 1),
    ];
    for (name, arity, value, pattern) in bounded {
        let b = Arc::clone(&builtins);
        conn.create_scalar_function(name, arity, flags, move |ctx| {
            past(deadline)?;
            let (n, m) = (length_of(ctx.get_raw(value)), length_of(ctx.get_raw(pattern)));
            if n.saturating_mul(m) > WORK_PER_CALL {
                return Err(rusqlite::Error::UserFunctionError(
                    format!(
                        "{} on a value of {n} bytes with a {} of {m} bytes is more work than one call may take in analyst SQL (the product of the two lengths is at most {WORK_PER_CALL}); instr() finds a long text in linear time",
                        name.to_uppercase(),
                        if name.ends_with("trim") || name == "unhex" { "character set" } else { "pattern" },
                    )
                    .into(),
                ));
            }
            builtin(&b, name, ctx)
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bytes over a small alphabet (so that needles occur), with the
    /// pattern characters, multi-byte characters, stray continuation
    /// bytes and NULs.
    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            prop::sample::select(vec![
                b'a', b'b', b'%', b'_', b'*', b'?', b'[', b']', b'^', b'-', b' ', b'0', b'f', 0x00,
                0x80, 0xA9, 0xC3, 0xE2, 0xF0,
            ]),
            0..16,
        )
    }

    /// An argument of type `kind` made of `bytes`: NULL, an integer, a
    /// real, text (any bytes, as a cast of a blob makes it), a blob.
    fn argument(bytes: &[u8], kind: u8, n: usize) -> (rusqlite::types::Value, String) {
        use rusqlite::types::Value;
        let plain = format!("?{n}");
        match kind {
            0 => (Value::Null, plain),
            1 => (Value::Integer(bytes.len() as i64 * 37 - 100), plain),
            2 => (Value::Real([0.5, -1.0, 1e20, 3.25][bytes.len() % 4]), plain),
            3 | 4 => (Value::Blob(bytes.to_vec()), format!("CAST(?{n} AS TEXT)")),
            _ => (Value::Blob(bytes.to_vec()), plain),
        }
    }

    fn run(
        conn: &Connection,
        sql: &str,
        args: &[rusqlite::types::Value],
    ) -> Result<String, String> {
        conn.query_row(sql, params_from_iter(args), |r| {
            Ok(format!("{:?}", r.get_ref(0)?))
        })
        .map_err(|e| e.to_string())
    }

    fn pair() -> (Connection, Connection) {
        // As on the analyst connection: the length limit is at most the
        // cap the functions were given.
        let replaced = Connection::open_in_memory().unwrap();
        replaced
            .set_limit(rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH, 1 << 20)
            .unwrap();
        install(
            &replaced,
            1 << 20,
            Instant::now() + std::time::Duration::from_secs(3600),
        )
        .unwrap();
        (replaced, Connection::open_in_memory().unwrap())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Every replaced function answers as SQLite's own built-in does,
        /// on values of every type, text that is not UTF-8 (cast from a
        /// blob) and NULs included.
        #[test]
        fn the_replacements_answer_as_the_builtins_do(
            x in bytes(), y in bytes(), z in bytes(), from in 0usize..16, len in 0usize..6,
            slice in any::<bool>(), kinds in [0u8..6, 0u8..6, 0u8..6],
        ) {
            let (replaced, builtin) = pair();
            // Half the time the needle or pattern is a piece of the value.
            let y = if slice {
                x[from.min(x.len())..(from + len).min(x.len())].to_vec()
            } else {
                y
            };
            let (x, a) = argument(&x, kinds[0], 1);
            let (y, b) = argument(&y, kinds[1], 2);
            let (z, c) = argument(&z, kinds[2], 3);
            let args = [x, y, z];
            for sql in [
                format!("SELECT instr({a}, {b})"),
                format!("SELECT replace({a}, {b}, {c})"),
                format!("SELECT {a} LIKE {b}"),
                format!("SELECT {a} LIKE {b} ESCAPE 'b'"),
                format!("SELECT {a} GLOB {b}"),
                format!("SELECT trim({a}, {b})"),
                format!("SELECT ltrim({a}, {b})"),
                format!("SELECT rtrim({a}, {b})"),
                format!("SELECT unhex({a}, {b})"),
            ] {
                // Bound: as many arguments as the statement has.
                let args = if sql.contains("?3") { &args[..] } else { &args[..2] };
                let ours = run(&replaced, &sql, args);
                let theirs = run(&builtin, &sql, args);
                prop_assert!(
                    theirs.as_ref().is_ok() || !theirs.as_ref().unwrap_err().contains("parameters"),
                    "{}: {:?}", sql, theirs
                );
                match (&ours, &theirs) {
                    (Ok(o), Ok(t)) => prop_assert_eq!(o, t, "{} {:?}", sql, args),
                    _ => prop_assert_eq!(ours.is_err(), theirs.is_err(), "{} {:?}: {:?} {:?}", sql, args, ours, theirs),
                }
            }
        }
    }

    /// Known answers, from the replacements (characters counted as SQLite
    /// counts them).
    #[test]
    fn known_answers() {
        let (replaced, _) = pair();
        let ask = |sql: &str| -> String {
            replaced
                .query_row(sql, [], |r| {
                    Ok(match r.get_ref(0)? {
                        ValueRef::Text(t) => format!("Text({})", String::from_utf8_lossy(t)),
                        other => format!("{other:?}"),
                    })
                })
                .unwrap()
        };
        assert_eq!(ask("SELECT instr('héllo', 'l')"), "Integer(3)");
        assert_eq!(ask("SELECT instr(x'68c3a96c', x'6c')"), "Integer(4)");
        assert_eq!(ask("SELECT instr('abc', '')"), "Integer(1)");
        assert_eq!(ask("SELECT instr(12345, 34)"), "Integer(3)");
        assert_eq!(ask("SELECT replace('aaa', 'aa', 'b')"), "Text(ba)");
        assert_eq!(ask("SELECT replace('abc', '', NULL)"), "Text(abc)");
        assert_eq!(ask("SELECT trim('xxhixx', 'x')"), "Text(hi)");
    }

    /// Past the deadline, every replacement and the time check fail.
    #[test]
    fn calls_after_the_deadline_fail() {
        let conn = Connection::open_in_memory().unwrap();
        install(&conn, 1 << 20, Instant::now()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        for sql in [
            "SELECT cairn_time_check()",
            "SELECT instr('abc', 'b')",
            "SELECT replace('abc', 'b', 'x')",
            "SELECT 'abc' LIKE 'a%'",
            "SELECT trim('xax', 'x')",
        ] {
            let e = conn
                .query_row(sql, [], |r| r.get::<_, rusqlite::types::Value>(0))
                .unwrap_err()
                .to_string();
            assert!(e.contains("past its time limit"), "{sql}: {e}");
        }
    }

    /// The calls that took minutes take milliseconds, or fail at once
    /// with a message that says why.
    #[test]
    fn a_call_is_linear_or_refused() {
        let (replaced, _) = pair();
        let found: i64 = replaced
            .query_row(
                "SELECT instr(printf('%.*c', 1000000, 'a'), printf('%.*c', 200000, 'a') || 'b')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(found, 0);
        let replaced_len: i64 = replaced
            .query_row(
                "SELECT length(replace(printf('%.*c', 1000000, 'a'), printf('%.*c', 200000, 'a') || 'b', 'x'))",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(replaced_len, 1_000_000);
        // A number to put in: the same linear search (the built-in took
        // time of the product of the two lengths).
        let with_number: i64 = replaced
            .query_row(
                "SELECT length(replace(printf('%.*c', 1000000, 'a'), printf('%.*c', 200000, 'a'), 2.5))",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(with_number, 5 * 3);
        for sql in [
            "SELECT printf('%.*c', 1000000, 'a') LIKE '%' || printf('%.*c', 20000, 'a') || 'b%'",
            "SELECT printf('%.*c', 1000000, 'a') GLOB '*' || printf('%.*c', 20000, 'a') || 'b*'",
            "SELECT trim(printf('%.*c', 1000000, 'b'), printf('%.*c', 10000, 'a') || 'b')",
        ] {
            let e = replaced
                .query_row(sql, [], |r| r.get::<_, rusqlite::types::Value>(0))
                .unwrap_err()
                .to_string();
            assert!(e.contains("more work than one call may take"), "{sql}: {e}");
        }
        // Within the bound, the built-in's answer.
        let short: bool = replaced
            .query_row(
                "SELECT printf('%.*c', 1000000, 'a') LIKE '%aab%'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(!short);
        // An answer past the length limit fails as SQLite's own would.
        let e = replaced
            .query_row(
                "SELECT replace(printf('%.*c', 600000, 'a'), 'a', 'aa')",
                [],
                |r| r.get::<_, String>(0),
            )
            .unwrap_err();
        assert_eq!(
            e.sqlite_error_code(),
            Some(rusqlite::ErrorCode::TooBig),
            "{e}"
        );
    }
}
