"""A small agent loop recorded in Cairn, then checked offline.

The agent observes a question, plans, calls a tool, reads its result,
decides and answers; every step goes to the ledger as it happens. At the
end the session is sealed, exported as a bundle and verified here, in pure
Python, without trusting the server.

    python examples/agent_loop.py URL WRITER_KEY AUDITOR_KEY [SERVER_VKEY]

Two keys, as in production: the agent records with a writer key (one bound
to the agent, `cairn admin create-key --role writer --agent revenue-agent`, is
best), and whoever checks the record exports it with an auditor key (`cairn
admin create-key --role auditor`); an admin key can stand in for either. Pass the
operator's published server key (`cairn keys` prints it) to prove who
signed, not only that nothing changed since.
"""
from __future__ import annotations

import sys
import uuid
from typing import Any, Dict, List, Optional

from cairn_client import CairnClient, verify_bundle

ORDERS: List[Dict[str, Any]] = [
    {"segment": "enterprise", "quarter": "Q4", "revenue": 4_200_000},
    {"segment": "smb", "quarter": "Q4", "revenue": 3_290_000},
    {"segment": "enterprise", "quarter": "Q3", "revenue": 3_410_000},
]


def revenue_by_segment(quarter: str) -> Dict[str, int]:
    """The tool the agent calls."""
    totals: Dict[str, int] = {}
    for row in ORDERS:
        if row["quarter"] == quarter:
            totals[row["segment"]] = totals.get(row["segment"], 0) + row["revenue"]
    return totals


def run(url: str, writer_key: str, auditor_key: str, server_key: Optional[str] = None,
        session_id: Optional[str] = None) -> Dict[str, Any]:
    agent = CairnClient(url, api_key=writer_key, agent_id="revenue-agent")
    session_id = session_id or f"revenue-{uuid.uuid4().hex[:8]}"
    question = "What was Q4 revenue by segment?"

    agent.log_reasoning_step(session_id=session_id, step_type="Observation", content=question)
    agent.log_reasoning_step(session_id=session_id, step_type="Plan",
                             content="Sum the Q4 orders by segment, then report the total and the split.")
    call = agent.log_reasoning_step(session_id=session_id, step_type="ToolCall", content="revenue_by_segment",
                                    input_data={"quarter": "Q4"})
    totals = revenue_by_segment("Q4")
    agent.log_reasoning_step(session_id=session_id, step_type="ToolResult", output_data=totals,
                             links={"tool_call": call["trace_id"]}, duration_ms=3)
    total = sum(totals.values())
    leader = max(totals, key=lambda k: totals[k])
    agent.log_reasoning_step(session_id=session_id, step_type="Decision", confidence=0.9,
                             content=f"Report {total} with {leader} leading.")
    answer = f"Q4 revenue was ${total / 1e6:.2f}M; {leader} led with ${totals[leader] / 1e6:.2f}M."
    agent.log_reasoning_step(session_id=session_id, step_type="FinalAnswer", content=answer, confidence=0.95)
    agent.seal_session(session_id)

    # Checked where the server cannot help: the bundle alone, and the key.
    # At the detailed level: the full content would need the session's
    # consent (full_consent when it starts); every level verifies alike.
    auditor = CairnClient(url, api_key=auditor_key)
    bundle = auditor.export(session=session_id, level="detailed")
    verdict = verify_bundle(bundle, keys=[server_key] if server_key else [])
    if not verdict.verified:
        raise SystemExit(f"the bundle does not verify: {verdict.failure}")
    return {"session_id": session_id, "answer": answer, "records_checked": verdict.records_checked,
            "key_pinned": verdict.key_pinned}


if __name__ == "__main__":
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    result = run(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
    print(f"{result['answer']}\nsession {result['session_id']}: bundle verified offline "
          f"({result['records_checked']} records, server key {'pinned' if result['key_pinned'] else 'from the bundle'})")
