"""A small, dependency-free HTTP client for a Cairn server."""
from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Optional

__all__ = ["CairnClient", "CairnError"]

JSON = Dict[str, Any]


class CairnError(Exception):
    """An error answer from the server (or no answer at all).

    `status` is the HTTP status (0 when the server could not be reached),
    `code` Cairn's stable error code (`unknown_step_type`,
    `confidence_out_of_range`, `session_sealed`, `not_found`, ...), and
    `message` what the server said.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code} ({status}): {message}" if status else f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class CairnClient:
    """Records and reads an agent's reasoning on a Cairn server.

    >>> agent = CairnClient("http://127.0.0.1:8714", api_key="cairn_...", agent_id="analyst")
    >>> agent.log_reasoning_step(session_id="s1", step_type="Observation", content="...")

    Every method raises :class:`CairnError` on an error answer.
    """

    def __init__(self, url: str, api_key: str, agent_id: Optional[str] = None, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.agent_id = agent_id
        self.timeout = timeout

    # -- transport -----------------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None, query: Optional[Dict[str, Any]] = None) -> bytes:
        url = self.url + path
        if query:
            pairs = {k: ("true" if v is True else "false" if v is False else v) for k, v in query.items() if v is not None}
            if pairs:
                url += "?" + urllib.parse.urlencode(pairs)
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.api_key}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                error = json.loads(raw)["error"]
                raise CairnError(e.code, error.get("code", "error"), error.get("message", "")) from None
            except (ValueError, KeyError, TypeError):
                raise CairnError(e.code, "http_error", raw.decode("utf-8", "replace")[:500]) from None
        except urllib.error.URLError as e:
            raise CairnError(0, "unreachable", f"{self.url}: {e.reason}") from None

    def _json(self, method: str, path: str, body: Any = None, query: Optional[Dict[str, Any]] = None) -> Any:
        return json.loads(self._request(method, path, body, query))

    @staticmethod
    def _quote(value: str) -> str:
        return urllib.parse.quote(value, safe="")

    # -- recording (seed 000) ------------------------------------------------

    def log_reasoning_step(
        self,
        session_id: str,
        step_type: str,
        content: Optional[str] = None,
        input_data: Any = None,
        output_data: Any = None,
        confidence: Optional[float] = None,
        model: Optional[str] = None,
        duration_ms: Optional[int] = None,
        token_count: Optional[int] = None,
        metadata: Any = None,
        agent_id: Optional[str] = None,
        turn_id: Optional[str] = None,
        turn_step: Optional[int] = None,
        task_id: Optional[str] = None,
        status: Optional[str] = None,
        links: Optional[Dict[str, str]] = None,
    ) -> JSON:
        """Records one step; returns `trace_id`, `step_index`, `current_hash`, `seq`."""
        step: JSON = {"session_id": session_id, "step_type": step_type}
        optional = {
            "content": content, "input_data": input_data, "output_data": output_data,
            "confidence": confidence, "model": model, "duration_ms": duration_ms,
            "token_count": token_count, "metadata": metadata, "agent_id": agent_id or self.agent_id,
            "turn_id": turn_id, "turn_step": turn_step, "task_id": task_id, "status": status, "links": links,
        }
        step.update({k: v for k, v in optional.items() if v is not None})
        return self._json("POST", "/v1/steps", step)

    def log_steps(self, steps: List[JSON]) -> JSON:
        """Records many steps in one request (group-committed); returns
        `accepted` and one result or error per step."""
        if self.agent_id:
            steps = [{"agent_id": self.agent_id, **s} for s in steps]
        return self._json("POST", "/v1/steps/batch", steps)

    def start_session(self, session_id: str, strict: bool = False, predecessor_session: Optional[str] = None,
                      full_consent: bool = False, agent_id: Optional[str] = None) -> JSON:
        """Opens a session explicitly (a strict seed-001 trail, a continuation,
        consent to full-detail sharing); returns its genesis."""
        body: JSON = {"session_id": session_id, "profile": "strict" if strict else "standard",
                      "full_consent": full_consent}
        if agent_id or self.agent_id:
            body["agent_id"] = agent_id or self.agent_id
        if predecessor_session:
            body["predecessor_session"] = predecessor_session
        return self._json("POST", "/v1/sessions", body)

    def seal_session(self, session_id: str, require_reflection: bool = False) -> JSON:
        """Seals a session: its signed Merkle root; nothing can follow."""
        return self._json("POST", f"/v1/sessions/{self._quote(session_id)}/seal",
                          {}, {"require_reflection": require_reflection})

    # -- reading -------------------------------------------------------------

    def replay_decision(self, session_id: str, verify_chain: bool = False, level: Optional[str] = None) -> JSON:
        """Replays a session: its steps in order; with `verify_chain`, every
        hash is recomputed and `chain_valid` reported. `level` is seed 004's
        detail level (generic, detailed, full)."""
        return self._json("GET", f"/v1/sessions/{self._quote(session_id)}", query={"verify": verify_chain, "level": level})

    def get_session_history(self, agent_id: Optional[str] = None, limit: int = 20) -> List[JSON]:
        """An agent's recent sessions, newest first, with chain validity."""
        return self._json("GET", "/v1/sessions", query={"agent_id": agent_id or self.agent_id, "limit": limit})

    def list_traces(self, agent_id: Optional[str] = None, limit: int = 20) -> List[JSON]:
        """Seed 000's `list_traces`: the same as :meth:`get_session_history`."""
        return self.get_session_history(agent_id, limit)

    def get_trace(self, trace_id: str) -> JSON:
        """One step by its trace id."""
        return self._json("GET", f"/v1/steps/{self._quote(trace_id)}")

    def verify(self) -> JSON:
        """Verifies the whole org on the server: seed 003's verdict."""
        return self._json("GET", "/v1/verify")

    def sql(self, statement: str, limit: Optional[int] = None) -> JSON:
        """Analyst SQL: one read-only query over the views steps, sessions
        and records; returns `columns`, `rows`, `truncated`."""
        body: JSON = {"sql": statement}
        if limit is not None:
            body["limit"] = limit
        return self._json("POST", "/v1/sql", body)

    # -- proofs and exports --------------------------------------------------

    def checkpoint(self) -> str:
        """The latest signed checkpoint (a C2SP signed note). Keep it."""
        return self._request("GET", "/v1/checkpoint").decode("utf-8")

    def inclusion_proof(self, seq: int, size: Optional[int] = None) -> JSON:
        """The RFC 9162 inclusion proof of the record at `seq`."""
        return self._json("GET", "/v1/proofs/inclusion", query={"seq": seq, "size": size})

    def consistency_proof(self, old: int, new: Optional[int] = None) -> JSON:
        """The RFC 9162 consistency proof between two log sizes."""
        return self._json("GET", "/v1/proofs/consistency", query={"old": old, "new": new})

    def export(self, session: Optional[str] = None, agent: Optional[str] = None, all: bool = False,
               level: Optional[str] = None) -> str:
        """An export bundle (JSON Lines) that verifies offline with
        :func:`cairn_client.verify_bundle` or `cairn verify --bundle`."""
        query: Dict[str, Any] = {"session": session, "agent": agent, "level": level}
        if all:
            query["all"] = "true"
        return self._request("GET", "/v1/export", query=query).decode("utf-8")

    # -- seed 004 -------------------------------------------------------------

    def register_agent_key(self, public_key_b64: str, agent_id: Optional[str] = None) -> JSON:
        """Registers an agent's Ed25519 public key; returns its `key_id`."""
        return self._json("POST", "/v1/agent-keys",
                          {"agent_id": agent_id or self.agent_id, "public_key": public_key_b64})

    def import_trace(self, trace: JSON, session_id: Optional[str] = None) -> JSON:
        """Imports a complete agent-signed trace in seed 004's format."""
        return self._json("POST", "/v1/signed-traces", trace, {"session_id": session_id})
