//! Integration tests of cairn-core: published vectors, tamper properties
//! (session chains, org logs, Merkle proofs, over the fixtures of
//! `tamper.rs`) and the worked example of docs/FORMAT.md.

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod bundle;
mod format_example;
mod log_tamper;
mod merkle_proofs;
mod session_tamper;
mod tamper;
mod vectors;
