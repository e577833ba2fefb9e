//! A session's steps written out as they are read, a few at a time, so
//! that `cairn replay` and `cairn trail` hold a session's positions (and
//! a trail's plan) but never the session: in index order, or in trail
//! order planned first from each step's turn and number
//! ([`cairn_wire::trail`], as the server's streamed answers are), read in
//! that order.

use anyhow::{Result, anyhow, bail};
use cairn_core::detail::DetailLevel;
use cairn_store::{LedgerStore, StoredStep};
use cairn_wire::trail::{TrailPlanner, TurnsForm, TurnsWriter};

/// Steps whose places in the trail are read at a time while planning.
const PLAN_CHUNK: usize = 4096;

/// Positions read at a time (each step is parsed only once the one
/// before was written).
const READ_CHUNK: usize = 64;

/// `seqs` (a session's or a turn's positions, in index order) in trail
/// order, with the writer of their turns in `form`, as a reader shown
/// `level` sees them (the steps written are redacted to it).
pub(crate) fn plan(
    store: &dyn LedgerStore,
    org: &str,
    session: &str,
    seqs: &[u64],
    (form, level): (TurnsForm, Option<DetailLevel>),
) -> Result<(Vec<u64>, TurnsWriter)> {
    let mut planner = TrailPlanner::default();
    for chunk in seqs.chunks(PLAN_CHUNK) {
        let places = store.turn_places_at(org, session, chunk)?;
        if let Err(seq) = planner.push_places(chunk, places, level) {
            bail!("the session's step at log position {seq} could not be read");
        }
    }
    let plan = planner.order();
    let ordered = plan.order.iter().map(|&i| seqs[i]).collect();
    Ok((ordered, TurnsWriter::new(form, &plan)))
}

/// Gives `visit` the steps at `seqs`, in that order, each with its place
/// in it: read [`READ_CHUNK`] at a time (the store reads positions in any
/// order), each parsed only once the one before was visited. A step missing at its
/// position fails, as a shorter answer must never pass for the whole.
pub(crate) fn visit(
    store: &dyn LedgerStore,
    org: &str,
    session: &str,
    seqs: &[u64],
    visit: &mut dyn FnMut(u64, StoredStep) -> Result<()>,
) -> Result<()> {
    let mut position = 0usize;
    while position < seqs.len() {
        let end = seqs.len().min(position + READ_CHUNK);
        let run = &seqs[position..end];
        let mut failed = None;
        let read =
            cairn_store::ops::visit_in_place(
                store,
                org,
                session,
                run,
                &mut |at, step| match visit((position + at) as u64, step) {
                    Ok(()) => true,
                    Err(e) => {
                        failed = Some(e);
                        false
                    }
                },
            )?;
        if let Some(e) = failed {
            return Err(e);
        }
        if let Some(&seq) = run.get(read) {
            bail!("the session's step at log position {seq} could not be read");
        }
        position += run.len();
    }
    Ok(())
}

/// Writes `steps` (from [`plan`]) to `out` in `writer`'s form, each
/// redacted to `level` if given, after its opening and before its closing
/// (and a line feed, for JSON); Markdown shown as a terminal may show it
/// ([`cairn_wire::render::terminal_safe`]).
pub(crate) fn write_turns(
    store: &dyn LedgerStore,
    org: &str,
    session: &str,
    steps: &[u64],
    writer: &TurnsWriter,
    level: Option<DetailLevel>,
    out: &mut dyn std::io::Write,
) -> Result<()> {
    let json = writer.form().is_json();
    let mut put = |bytes: Vec<u8>| -> Result<()> {
        if json {
            out.write_all(&bytes)?;
        } else {
            let text = String::from_utf8_lossy(&bytes);
            out.write_all(cairn_wire::render::terminal_safe(&text).as_bytes())?;
        }
        Ok(())
    };
    put(writer.opening(session))?;
    visit(store, org, session, steps, &mut |position, mut step| {
        if let Some(level) = level {
            step.record.redact(level)?;
        }
        let mut piece = Vec::new();
        writer
            .write_step(position, step.seq, &step.record, &mut piece)
            .map_err(|e| anyhow!(e))?;
        put(piece)
    })?;
    put(writer.closing(steps.len() as u64))?;
    if json {
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}
