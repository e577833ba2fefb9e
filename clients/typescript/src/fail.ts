// How a check fails: `Fail`, the error the verifier throws with a reason
// code of FORMAT.md 9.1 and where the record is (the driver fills in the
// line), `position` to build a Position, and `entryPosition`, an entry's.

import type { Entry } from "./forms.js";
import type { Position, Reason } from "./verdict.js";

export function position(partial: Partial<Position> = {}): Position {
  return { line: null, seq: null, session_id: null, step_index: null, trace_id: null, ...partial };
}

/** A verification failure; the driver fills in the line unless `lineKnown`. */
export class Fail extends Error {
  constructor(readonly reason: Reason, readonly detail: string, readonly at: Position = position(), readonly lineKnown = false) {
    super(`${reason}: ${detail}`);
  }
}

export function entryPosition(e: Entry): Position {
  if (e.type === "step") {
    const s = e.fields["session_id"];
    const i = e.fields["step_index"];
    const t = e.fields["trace_id"];
    return position({
      line: e.line, seq: e.seq,
      session_id: typeof s === "string" ? s : null,
      step_index: typeof i === "number" ? i : null,
      trace_id: typeof t === "string" ? t : null,
    });
  }
  if (e.view === null) return position({ line: e.line, seq: e.seq });
  const s = e.view["session_id"];
  return position({ line: e.line, seq: e.seq, session_id: typeof s === "string" ? s : null });
}
