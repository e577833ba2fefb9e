"""Seed 001 (Decision Trail) end to end against a real `cairn serve`, through
the official MCP Python SDK over Streamable HTTP: the proof-grade write-back
sequence, the refusals when the order is wrong, audit events that thought
records reference, corrections as new records, continuity into a successor
session, and the org log verifying afterwards over the REST API."""
import asyncio

import httpx2
import pytest

from test_mcp import MODES, call, http_client, ok


async def write_back(client, session, predecessor=None):
    """audit_session_start ... audit_session_end, as the seed lists it."""
    args = {"session_id": session, "agent_id": "planner"}
    if predecessor:
        args["predecessor_session"] = predecessor
    start = await ok(client, "audit_session_start", args)
    genesis = start["genesis_hash"]

    # Work happens: a tool call is audited, thought records reference it.
    event = await ok(client, "record_audit_event", {
        "action": "vendor_api.quote", "session_id": session,
        "detail": {"vendor": "B", "price": 41_000, "sla": "99.0%"},
    })
    plan = await ok(client, "thought_record", {
        "session_id": session, "type": "plan", "task_id": "t1",
        "content": "Compare the three vendors on price and SLA risk",
    })
    assert plan["parent_chain_hash"] == genesis
    analysis = await ok(client, "thought_record", {
        "session_id": session, "type": "analysis", "task_id": "t1", "audit_event": event["event_id"],
        "content": "Vendor B is cheapest but its quote promises a 99.0% SLA",
    })
    assert analysis["parent_chain_hash"] == plan["chain_hash"]
    decision = await ok(client, "thought_record", {
        "session_id": session, "type": "decision", "task_id": "t1",
        "content": "Choose vendor B on price",
    })
    # A correction is a new record naming the corrected one; there is no
    # edit path.
    correction = await ok(client, "thought_record", {
        "session_id": session, "type": "decision", "task_id": "t1", "corrects": decision["record_id"],
        "content": "Correction: choose vendor A; B fails the 99.9% SLA requirement",
    })
    assert correction["parent_chain_hash"] == decision["chain_hash"]

    # The wrong order is refused, and writes nothing.
    value, is_error = await call(client, "thought_record", {"session_id": session, "type": "Observation", "content": "not a record type"})
    assert is_error and value["error"]["code"] == "not_in_strict_profile" and value["error"]["field"] == "type", value
    value, is_error = await call(client, "thought_record", {"session_id": session, "type": "analysis", "content": "x", "audit_event": "no-such-event"})
    assert is_error and value["error"]["code"] == "unknown_link", value
    value, is_error = await call(client, "thought_record", {"session_id": session, "type": "analysis", "content": "x", "corrects": "no-such-record"})
    assert is_error and value["error"]["code"] == "unknown_link", value

    check = await ok(client, "audit_verify_chain", {"session_id": session})
    assert check["valid"] is True and check["records_checked"] == 4, check

    value, is_error = await call(client, "merkle_finalize", {"session_id": session})
    assert is_error and value["error"]["code"] == "reflection_required", value
    value, is_error = await call(client, "audit_session_end", {"session_id": session})
    assert is_error and value["error"]["code"] == "reflection_required", value

    reflection = await ok(client, "thought_record", {
        "session_id": session, "type": "reflection", "task_id": "t1",
        "content": "Chose A after correcting for the SLA; B's SLA evidence covers one quarter only",
    })
    sealed = await ok(client, "merkle_finalize", {"session_id": session})
    assert sealed["step_count"] == 5 and sealed["final_hash"] == reflection["chain_hash"]
    root = await ok(client, "merkle_root", {"session_id": session})
    assert root["merkle_root"] == sealed["merkle_root"]
    end = await ok(client, "audit_session_end", {"session_id": session})
    assert end["closed"] is True and end["merkle_root"] == sealed["merkle_root"]

    value, is_error = await call(client, "thought_record", {"session_id": session, "type": "analysis", "content": "after the seal"})
    assert is_error and value["error"]["code"] == "session_sealed", value
    value, is_error = await call(client, "merkle_finalize", {"session_id": session})
    assert is_error and value["error"]["code"] == "session_sealed", value
    return start, sealed


@pytest.mark.parametrize("mode", MODES)
def test_seed_001_decision_trail(server, mode):
    url, key = server

    async def run():
        async with http_client(url, key, mode) as client:
            first, sealed = await write_back(client, f"procurement-{mode}")
            # Continuity: the successor's genesis binds the sealed session's
            # final hash; a second successor is refused.
            second, _ = await write_back(client, f"procurement-{mode}-2", predecessor=f"procurement-{mode}")
            assert second["genesis_hash"] != first["genesis_hash"]
            value, is_error = await call(client, "audit_session_start", {
                "session_id": f"procurement-{mode}-3", "agent_id": "planner", "predecessor": sealed["final_hash"],
            })
            assert is_error and value["error"]["code"] == "bad_predecessor", value
            value, is_error = await call(client, "audit_session_start", {
                "session_id": f"procurement-{mode}-4", "agent_id": "planner", "predecessor": "00" * 32,
            })
            assert is_error and value["error"]["code"] == "bad_predecessor", value

    asyncio.run(run())
    # The whole org log verifies: every chain, every seal, the continuity
    # link, against every checkpoint.
    verdict = httpx2.get(url + "/v1/verify", headers={"Authorization": f"Bearer {key}"}, timeout=30).json()
    assert verdict["verified"] is True, verdict
    session = httpx2.get(url + f"/v1/sessions/procurement-{mode}-2",
                         headers={"Authorization": f"Bearer {key}"}, timeout=30).json()
    assert session["steps"][4]["step_type"] == "reflection"
