//! The checks of one node of a caller's query, on their own: a
//! qualified name, an identifier, a literal, a cast's type, an operator,
//! a format string. The guard (`guard.rs`) walks the tree and calls them;
//! they read nothing but the node they are given.

use super::shown;
use sqlparser::ast::{
    BinaryOperator, DataType, Expr, Ident, ObjectName, ObjectNamePart, Value as SqlValue,
    ValueWithSpan,
};

/// Largest width or precision a format string may give.
pub(super) const MAX_FORMAT_WIDTH: u64 = 1000;

/// Functions PostgreSQL calls when a qualified name's last part is not a
/// column of its table: `t.to_jsonb` is `to_jsonb(t)`, past the function
/// allow-list and the time checks (32 of them on a row of 8 MiB: 0.85 s
/// past a 40 ms limit, 810 MB). Every function of PostgreSQL's catalogue
/// whose first argument takes a whole row (`record` or a polymorphic
/// type) and the rest defaults; a qualified name may not end in one. An
/// extension that adds such a function widens this: list it here.
pub(super) const ROW_FUNCTIONS: &[&str] = &[
    "_pg_expandarray",
    "any_out",
    "anyarray_out",
    "anyarray_send",
    "anycompatible_out",
    "anycompatiblenonarray_out",
    "anyelement_out",
    "anynonarray_out",
    "array_agg",
    "array_dims",
    "array_ndims",
    "array_out",
    "array_send",
    "array_to_json",
    "cardinality",
    "concat",
    "count",
    "cume_dist",
    "dense_rank",
    "first_value",
    "hash_array",
    "hash_record",
    "json_agg",
    "json_build_array",
    "json_build_object",
    "jsonb_agg",
    "jsonb_build_array",
    "jsonb_build_object",
    "lag",
    "last_value",
    "lead",
    "max",
    "min",
    "mode",
    "num_nonnulls",
    "num_nulls",
    "percent_rank",
    "pg_collation_for",
    "pg_column_compression",
    "pg_column_size",
    "pg_typeof",
    "quote_literal",
    "quote_nullable",
    "rank",
    "record_out",
    "record_send",
    "row_to_json",
    "to_json",
    "to_jsonb",
    "unnest",
];

/// A qualified name: `table.column`, whose column is not one of
/// [`ROW_FUNCTIONS`].
pub(super) fn check_qualified(parts: &[Ident]) -> Result<(), String> {
    let written = || {
        shown(
            &parts
                .iter()
                .map(|p| p.value.as_str())
                .collect::<Vec<_>>()
                .join("."),
        )
    };
    match parts {
        [_, column] if ROW_FUNCTIONS.contains(&column.value.to_lowercase().as_str()) => {
            Err(format!(
                "{}: PostgreSQL reads this as the function {}(...) of the whole row, not as a column; alias the column (AS n) and name that",
                written(),
                shown(&column.value)
            ))
        }
        [_, _] => Ok(()),
        _ => Err(format!("{}: a qualified name is table.column", written())),
    }
}

/// The type names a cast may name (the first word of the type, lowercase).
pub(super) const TYPES: &[&str] = &[
    "int",
    "integer",
    "bigint",
    "smallint",
    "int2",
    "int4",
    "int8",
    "real",
    "float",
    "float4",
    "float8",
    "double",
    "numeric",
    "decimal",
    "text",
    "varchar",
    "char",
    "character",
    "boolean",
    "bool",
    "date",
    "time",
    "timestamp",
    "timestamptz",
    "interval",
    "json",
    "jsonb",
    "bytea",
    "blob",
    "uuid",
];

/// Whether `expr` is a string literal, in parentheses or cast.
pub(super) fn string_literal(expr: &Expr) -> bool {
    match expr {
        Expr::Value(v) => matches!(v.value, SqlValue::SingleQuotedString(_)),
        Expr::Nested(inner) | Expr::Cast { expr: inner, .. } => string_literal(inner),
        _ => false,
    }
}

/// Refuses the operators whose one use can cost the product of its
/// operands' sizes without the database checking its time limit
/// (PostgreSQL's array and JSON containment: `@>` on 100,000 elements ran
/// 37 s past a 2 s limit, `?&` 134 s), and PostgreSQL's `~~` forms of
/// `LIKE`, which sqlparser groups differently from PostgreSQL.
pub(super) fn check_operator(op: &BinaryOperator) -> Result<(), String> {
    match op {
        BinaryOperator::PGLikeMatch
        | BinaryOperator::PGILikeMatch
        | BinaryOperator::PGNotLikeMatch
        | BinaryOperator::PGNotILikeMatch => Err(format!(
            "operator {op} is not accepted: write LIKE or ILIKE"
        )),
        BinaryOperator::AtArrow
        | BinaryOperator::ArrowAt
        | BinaryOperator::PGOverlap
        | BinaryOperator::Question
        | BinaryOperator::QuestionAnd
        | BinaryOperator::QuestionPipe
        | BinaryOperator::AtQuestion
        | BinaryOperator::AtAt => Err(format!(
            "operator {op} is not accepted: containment and search operators can take too long in one call"
        )),
        // An allow-list: any other operator (geometric, OPERATOR(schema.op),
        // which names any operator of the database) is refused.
        BinaryOperator::Plus
        | BinaryOperator::Minus
        | BinaryOperator::Multiply
        | BinaryOperator::Divide
        | BinaryOperator::Modulo
        | BinaryOperator::StringConcat
        | BinaryOperator::Gt
        | BinaryOperator::Lt
        | BinaryOperator::GtEq
        | BinaryOperator::LtEq
        | BinaryOperator::Spaceship
        | BinaryOperator::Eq
        | BinaryOperator::NotEq
        | BinaryOperator::And
        | BinaryOperator::Or
        | BinaryOperator::Xor
        | BinaryOperator::BitwiseOr
        | BinaryOperator::BitwiseAnd
        | BinaryOperator::BitwiseXor
        | BinaryOperator::PGBitwiseXor
        | BinaryOperator::PGBitwiseShiftLeft
        | BinaryOperator::PGBitwiseShiftRight
        | BinaryOperator::PGExp
        | BinaryOperator::DuckIntegerDivide
        | BinaryOperator::MyIntegerDivide
        | BinaryOperator::Match
        | BinaryOperator::Regexp
        | BinaryOperator::Glob
        | BinaryOperator::PGRegexMatch
        | BinaryOperator::PGRegexIMatch
        | BinaryOperator::PGRegexNotMatch
        | BinaryOperator::PGRegexNotIMatch
        | BinaryOperator::PGStartsWith
        | BinaryOperator::Arrow
        | BinaryOperator::LongArrow
        | BinaryOperator::HashArrow
        | BinaryOperator::HashLongArrow
        | BinaryOperator::HashMinus
        | BinaryOperator::Overlaps => Ok(()),
        _ => Err(format!(
            "operator {} is not accepted",
            shown(&op.to_string())
        )),
    }
}

pub(super) fn single_name(name: &ObjectName) -> Result<String, String> {
    match name.0.as_slice() {
        [ObjectNamePart::Identifier(ident)] => Ok(ident.value.to_lowercase()),
        _ => Err(format!(
            "{}: qualified or computed names are not accepted",
            shown(&name.to_string())
        )),
    }
}

/// Unquoted names PostgreSQL reads as the session's values (its role,
/// schema, database) rather than as columns: the database's own names,
/// which a tenant has no business reading.
pub(super) const SESSION_NAMES: &[&str] = &[
    "user",
    "current_user",
    "current_role",
    "session_user",
    "system_user",
    "current_schema",
    "current_catalog",
];

/// An identifier Cairn passes on: unquoted (letters, digits and `_`, not
/// starting with a digit) or double-quoted without `"`, backslash or
/// control characters inside.
pub(super) fn check_ident(ident: &Ident) -> Result<(), String> {
    let v = &ident.value;
    if v.is_empty() || v.len() > 128 {
        return Err("an identifier must have 1 to 128 bytes".into());
    }
    match ident.quote_style {
        None if SESSION_NAMES.contains(&v.to_lowercase().as_str()) => Err(format!(
            "{v} names the database session, not a column; quote it (\"{v}\") to name a column"
        )),
        None => {
            let mut chars = v.chars();
            let first_ok = chars.next().is_some_and(|c| c.is_alphabetic() || c == '_');
            if !first_ok || !chars.all(|c| c.is_alphanumeric() || c == '_') {
                return Err(format!(
                    "identifier {}: an unquoted name has letters, digits and _ only",
                    shown(v)
                ));
            }
            Ok(())
        }
        Some('"') => {
            if v.chars()
                .any(|c| c == '"' || c == '\\' || c.is_control() || is_separator(c))
            {
                return Err(format!(
                    "identifier \"{}\": a quoted name may not hold quotes, backslashes or control characters",
                    shown(v)
                ));
            }
            Ok(())
        }
        Some(q) => Err(format!(
            "identifier {q}{}: only double quotes quote a name",
            shown(v)
        )),
    }
}

/// Line and paragraph separators some tools read as line breaks.
pub(super) fn is_separator(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}' | '\u{85}' | '\u{feff}')
}

/// A literal Cairn passes on: numbers, booleans, NULL and plain
/// single-quoted strings (`''` for a quote; no backslash before a quote).
pub(super) fn check_value(value: &ValueWithSpan) -> Result<(), String> {
    match &value.value {
        SqlValue::Number(_, false) | SqlValue::Boolean(_) | SqlValue::Null => Ok(()),
        SqlValue::SingleQuotedString(s) => {
            if s.contains("\\'") || s.contains('\0') {
                Err(format!(
                    "string {}: a backslash before a quote, or a NUL, is not accepted",
                    shown(s)
                ))
            } else {
                Ok(())
            }
        }
        SqlValue::Placeholder(p) => Err(format!(
            "parameter {}: a query takes no parameters",
            shown(p)
        )),
        other => Err(format!(
            "literal {}: only numbers, booleans, NULL and '...' strings are accepted",
            shown(&other.to_string())
        )),
    }
}

/// A type a cast may name: a simple built-in type.
pub(super) fn check_data_type(data_type: &DataType) -> Result<(), String> {
    let text = data_type.to_string().to_lowercase();
    let base = text.split([' ', '(', '[']).next().unwrap_or_default();
    let plain = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || " (),[]_".contains(c));
    // char(n) pads every value to n characters, a literal's while the
    // query is planned, before any time limit (160 comparisons of
    // CHAR(10485760) 'a': 3.2 GB).
    let padded = matches!(base, "char" | "character") && !text.contains("varying");
    // An array of them pads each item (a literal array of 31,000 items
    // of char(1000) folds to 30 MB while planning).
    if padded && text.contains('[') {
        return Err(format!(
            "type {}: an array of char(n) is not accepted: use varchar[] or text[]",
            shown(&text)
        ));
    }
    let length = text
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u64>().ok())
        .max();
    if padded && length.is_some_and(|n| n > MAX_FORMAT_WIDTH) {
        return Err(format!(
            "type {}: char(n) takes a length of at most {MAX_FORMAT_WIDTH} (it pads every value to it): use varchar or text",
            shown(&text)
        ));
    }
    if plain && TYPES.contains(&base) {
        Ok(())
    } else {
        Err(format!(
            "type {}: a cast names a built-in type ({})",
            shown(&text),
            TYPES.join(", ")
        ))
    }
}

/// A `printf`/`format` string: no `*`, no width or precision above
/// [`MAX_FORMAT_WIDTH`].
pub(super) fn check_format(format: &str) -> Result<(), String> {
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            continue;
        }
        let mut number = String::new();
        while let Some(&d) = chars.peek() {
            chars.next();
            match d {
                '0'..='9' => number.push(d),
                '$' | '.' | '-' | '+' | ' ' | '#' | ',' | '!' | '\'' | 'l' | 'h' | 'q' => {
                    check_width(&number)?;
                    number.clear();
                }
                '*' => {
                    return Err(
                        "a format string may not take its width or precision from an argument (*)"
                            .into(),
                    );
                }
                _ => break,
            }
        }
        check_width(&number)?;
    }
    Ok(())
}

pub(super) fn check_width(number: &str) -> Result<(), String> {
    let digits = number.trim_start_matches('0');
    if digits.len() > 4 || digits.parse::<u64>().unwrap_or(0) > MAX_FORMAT_WIDTH {
        return Err(format!(
            "a format width or precision is at most {MAX_FORMAT_WIDTH}, not {number}"
        ));
    }
    Ok(())
}
