//! Integration tests of cairn-store: the backend conformance suite (run
//! here against SQLite), append-only enforcement, tampering, crashes and
//! bundles.

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod analyst;
mod atomic;
mod conformance;
mod embedding;
mod listing;
mod pg;
mod pg_derived;
mod pg_search;
mod search;
mod sqlite;
mod sqlite_fulltext;
