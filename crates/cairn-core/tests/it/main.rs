//! Integration tests of cairn-core: published vectors, tamper properties
//! and the worked example of docs/FORMAT.md.

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod bundle;
mod format_example;
mod tamper;
mod vectors;
