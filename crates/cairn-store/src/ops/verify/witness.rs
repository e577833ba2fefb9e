//! An org's stored checkpoints against a witness policy (`docs/FORMAT.md`
//! 7.7): which carry a quorum of cosignatures, as runs of sizes, and the
//! verdict's failure when the latest does not.

use super::{CheckpointPages, StoreVerdict, names_repeated, repeated_org_name_verdict};
use crate::{LedgerStore, StoreError};
use cairn_core::verify::Reason;

/// How an org's stored checkpoints stand against a witness policy, as
/// runs: a log signs about one checkpoint a second while it grows, and
/// witnesses start or stop vouching from some size on, so the stored
/// checkpoints fall into a few runs of the same standing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WitnessReport {
    /// Runs of stored checkpoints (in size order) that carry a quorum of
    /// valid cosignatures: each `[first size, last size]`, every stored
    /// checkpoint between them included.
    pub cosigned: Vec<[u64; 2]>,
    /// Runs of those that do not, the same way.
    pub uncosigned: Vec<[u64; 2]>,
    /// How many stored checkpoints carry a quorum.
    pub cosigned_count: u64,
    /// How many do not.
    pub uncosigned_count: u64,
}

impl WitnessReport {
    /// Files the stored checkpoint of `size` (sizes come in increasing
    /// order) under its standing, extending its run if the checkpoint
    /// before it had the same (its run is the one that ends last).
    fn file(&mut self, size: u64, cosigned: bool) {
        let (runs, other, count) = if cosigned {
            (
                &mut self.cosigned,
                &self.uncosigned,
                &mut self.cosigned_count,
            )
        } else {
            (
                &mut self.uncosigned,
                &self.cosigned,
                &mut self.uncosigned_count,
            )
        };
        *count += 1;
        let other_end = other.last().map(|run| run[1]);
        match runs.last_mut() {
            Some(run) if other_end.is_none_or(|end| run[1] > end) => run[1] = size,
            _ => runs.push([size, size]),
        }
    }

    /// The report as a verification answer's `witnessed` member (the
    /// HTTP API's and `cairn verify --json`'s).
    pub fn to_json(&self, quorum: usize) -> serde_json::Value {
        serde_json::json!({
            "quorum": quorum,
            "cosigned": self.cosigned,
            "uncosigned": self.uncosigned,
            "cosigned_checkpoints": self.cosigned_count,
            "uncosigned_checkpoints": self.uncosigned_count,
        })
    }
}

/// Applies a witness policy to an org's verified log (`docs/FORMAT.md`
/// 7.7): the latest stored checkpoint (the one that authenticates the whole
/// log) must carry valid cosignatures by a quorum of the policy's
/// witnesses, or the verdict fails with `insufficient-cosignatures` at that
/// checkpoint's size. Every stored checkpoint is reported either way, so
/// an auditor sees from which size on the witnesses stopped vouching.
pub fn apply_witness_policy(
    store: &dyn LedgerStore,
    org_id: &str,
    policy: &cairn_core::witness::WitnessPolicy,
    verdict: &mut StoreVerdict,
) -> Result<WitnessReport, StoreError> {
    match witness_report(store, org_id, policy, verdict) {
        // An org name given twice (it failed the verdict already, unless
        // it was given meanwhile): its checkpoints cannot be told from the
        // other org's, and no report is made.
        Err(e) if names_repeated(&e, org_id) => {
            verdict.verdict = repeated_org_name_verdict(org_id);
            Ok(WitnessReport::default())
        }
        other => other,
    }
}

fn witness_report(
    store: &dyn LedgerStore,
    org_id: &str,
    policy: &cairn_core::witness::WitnessPolicy,
    verdict: &mut StoreVerdict,
) -> Result<WitnessReport, StoreError> {
    let mut report = WitnessReport::default();
    let mut latest: Option<(u64, Result<(), String>)> = None;
    for stored in CheckpointPages::new(store, org_id) {
        let stored = stored?;
        let mut note = stored.note;
        for line in store.cosignatures(org_id, stored.size)? {
            note.push_str(&line);
            note.push('\n');
        }
        let check = policy.check(&note);
        report.file(stored.size, check.is_ok());
        if latest.as_ref().is_none_or(|(size, _)| stored.size >= *size) {
            latest = Some((stored.size, check));
        }
    }
    if !verdict.verdict.verified {
        return Ok(report);
    }
    let failure = match latest {
        None => Some("the org has no checkpoint for witnesses to have cosigned".to_owned()),
        Some((size, Err(why))) => Some(format!(
            "the latest checkpoint (size {size}): {why}; {} of {} stored checkpoints lack a quorum",
            report.uncosigned_count,
            report.uncosigned_count + report.cosigned_count
        )),
        Some((_, Ok(()))) => None,
    };
    if let Some(detail) = failure {
        verdict
            .verdict
            .fail_after_records(Reason::InsufficientCosignatures, detail);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::WitnessReport;

    /// Stored checkpoints fall into runs of the same standing, in size
    /// order, counted one by one.
    #[test]
    fn a_witness_report_keeps_runs_not_every_size() {
        let mut report = WitnessReport::default();
        for (size, cosigned) in [
            (1, false),
            (2, false),
            (5, false),
            (9, true),
            (12, true),
            (13, false),
            (20, true),
        ] {
            report.file(size, cosigned);
        }
        assert_eq!(report.uncosigned, vec![[1, 5], [13, 13]]);
        assert_eq!(report.cosigned, vec![[9, 12], [20, 20]]);
        assert_eq!((report.cosigned_count, report.uncosigned_count), (3, 4));
    }
}
