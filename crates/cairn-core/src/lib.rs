//! # cairn-core
//!
//! The integrity core of Cairn, a tamper-evident ledger of AI agents'
//! reasoning: everything needed to produce and check the proofs, and nothing
//! else. No I/O, no clock, no randomness, no async, no database: timestamps
//! and random seeds are passed in, so every function here is deterministic
//! and every test is fast.
//!
//! - [`record`]: steps, session headers, validation; [`kind`]: the step-kind
//!   vocabulary shared by all source systems.
//! - [`jcs`]: RFC 8785 canonical JSON, written directly.
//! - [`commit`]: per-field salted commitments, the step digest, chain hash
//!   and genesis; [`log`]: the org log's operational records and leaves.
//! - [`merkle`]: RFC 9162 trees and proofs; [`note`] and [`checkpoint`]: C2SP
//!   signed notes, checkpoints and cosignatures; [`receipt`]: COSE Receipts
//!   (RFC 9942) of inclusion and consistency for the org log.
//! - [`detail`]: seed 004's detail levels (which fields each level shows).
//! - [`trace`]: seed 004's signed complete traces.
//! - [`thinking`]: seed 002's `parseThinking`.
//! - [`verify`]: streaming verifiers that return a [`verify::Verdict`];
//!   [`bundle`]: the export bundle format and its line-by-line verifier;
//!   [`selection`]: the signed statement of what a partial bundle holds;
//!   [`json`]: the strict JSON reading of outside bytes.
//!
//! The byte layouts are specified in `docs/FORMAT.md`, which is the
//! published algorithm; this crate is one implementation of it.
//!
//! ```
//! use cairn_core::{commit::StepRecord, record::{SessionHeader, Profile, Step}};
//! use cairn_core::{commit::genesis_hash, time::Timestamp, verify::{AgentKeys, SessionVerifier}};
//!
//! let t0 = Timestamp::parse_rfc3339("2025-01-15T10:30:00Z").unwrap();
//! let header = SessionHeader {
//!     org_id: "acme".into(), session_id: "revenue-analysis-q4".into(),
//!     agent_id: "analyst".into(), started_at: t0, caller: "local".into(),
//!     profile: Profile::Standard, predecessor: None, full_consent: false,
//!     max_clock_skew_s: 300,
//! };
//! let mut step = Step::new("t-0", "acme", "analyst", "revenue-analysis-q4", 0, "Observation", t0).unwrap();
//! step.content = Some("User asked for Q4 revenue breakdown by segment".into());
//! let record = StepRecord::new(step, &[7; 32], genesis_hash(&header));
//!
//! let mut verifier = SessionVerifier::new(&header, AgentKeys::new());
//! verifier.push(&record);
//! assert!(verifier.finish(Some(1)).verified);
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod bundle;
pub mod checkpoint;
pub mod commit;
pub mod detail;
pub mod hash;
pub mod jcs;
pub mod json;
pub mod kind;
pub mod log;
pub mod merkle;
pub mod note;
pub mod receipt;
pub mod record;
pub mod selection;
pub mod thinking;
pub mod tiles;
pub mod time;
pub mod trace;
pub mod verify;
pub mod witness;

/// The Ed25519 implementation Cairn's keys and signatures use, so that
/// dependents name the same types.
pub use ed25519_dalek;
pub use hash::Hash;
pub use time::Timestamp;
