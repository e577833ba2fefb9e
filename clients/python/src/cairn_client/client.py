"""Dependency-free clients of a Cairn server's REST API: :class:`CairnClient`
(blocking, `urllib`) and :class:`AsyncCairnClient` (`asyncio`), built on one
request-building layer so that the two send exactly the same requests.

Every operation of the server's OpenAPI document is a method. The server
refuses members and query parameters it does not know (`unknown_field`), so
the methods send exactly the documented names; a misspelt keyword argument
is a `TypeError` here, before anything is sent.

Retries (both clients): a refusal the server asks callers to retry (`429`
`rate_limited`/`too_many_sessions`, `503` `overloaded`/`timeout`/`unavailable`, each with
`Retry-After`) is retried up to `max_retries` times (default 3), waiting
what `Retry-After` says (or `backoff * 2**attempt` seconds with jitter when
it says nothing), never longer than `max_delay` (a longer `Retry-After` is
raised at once). Which requests are retried:

- reads (`GET`, and the read-only `POST`s: SQL, thinking parse, bundle
  verification): on 429, 503 and when the server could not be reached;
- writes that carry their own identity, which the server answers as their
  first write when sent again (a step with its `trace_id` and `step_index`,
  a batch whose every step has both, a turn with its `turn_id`, no thinking
  text and every step with both, an audit event with its `event_id`, a
  signed trace; `None` is no identity): on 429 and 503;
- any other write: on 429 only. A 429 is a refusal before any work; a 503
  `timeout` may come after the write was recorded, and a ledger cannot take
  a duplicate back (nor does the server answer a repeated API key
  revocation as the first: the repeat is refused), so it is raised for the
  caller to decide.
"""
from __future__ import annotations

import asyncio
import base64
import email.utils
import functools
import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.client import IncompleteRead
from typing import (
    Any, Awaitable, Callable, Concatenate, Dict, Generic, List, Literal, Mapping, Optional,
    ParamSpec, Sequence, Tuple, TypeVar, Union, cast,
)

from .types import (
    JSON, AgentKey, AgentKeyChange, AgentKeyList, ApiKey, AuditEvent, AuditEventResult, BatchResult, BundleVerdict,
    ConsistencyProof, Decision, DetailLevel, Erasure, Health, ImportedTrace, InclusionProof, NewApiKey,
    OrgVerdict, Review, ReviewQueue, Role, SearchResult, Seal, Session, SessionRoot, SessionStart,
    SessionSummary, SessionVerdict, SignedTrace, SqlResult, Step, StepResult, ThinkingParse, Trail, Turn,
    TurnResult,
)

__all__ = ["CairnClient", "AsyncCairnClient", "CairnError", "RETRIED_STATUSES"]

T = TypeVar("T")
P = ParamSpec("P")
Safety = Literal["read", "idempotent", "write"]
OtlpSignal = Literal["traces", "metrics", "logs"]

#: The statuses a client retries (for which requests: see the module's docs).
RETRIED_STATUSES = frozenset({429, 503})


class CairnError(Exception):
    """An error answer from the server (or no answer at all).

    - `status`: the HTTP status, 0 when the server could not be reached;
    - `code`: Cairn's stable error code (`unknown_field`, `unknown_step_type`,
      `confidence_out_of_range`, `session_sealed`, `not_found`,
      `rate_limited`, ...; `unreachable` and `http_error` are this client's
      own, for no answer and for an answer not in Cairn's error shape);
    - `field`: the input field the error concerns, when there is one
      (`content`, `links.corrects`, `[3].step_type` in a batch, a query
      parameter);
    - `message`: what the server said, meant for a person;
    - `retry_after`: seconds the server asked to wait (`Retry-After`), if it did.
    """

    def __init__(self, status: int, code: str, message: str, field: Optional[str] = None,
                 retry_after: Optional[float] = None) -> None:
        where = f" [{field}]" if field else ""
        super().__init__(f"{code} ({status}){where}: {message}" if status else f"{code}{where}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after


# -- requests ----------------------------------------------------------------


@dataclass(frozen=True)
class _Request(Generic[T]):
    """One operation, ready to send: what both clients send, and how the
    answer is read."""

    method: str
    path: str
    parse: Callable[[bytes], T]
    safety: Safety
    query: Tuple[Tuple[str, str], ...] = ()
    body: Optional[bytes] = None
    content_type: Optional[str] = None

    def retried(self, error: CairnError) -> bool:
        """Whether this request may be sent again after `error`."""
        if error.status == 0:
            return self.safety == "read"
        if error.status == 429:
            return True
        return error.status == 503 and self.safety != "write"


def _owns_identity(step: Mapping[str, Any]) -> bool:
    """Whether a step carries its own identity: its `trace_id` and its
    `step_index` (`None` is none: the server gives the step a new id)."""
    return step.get("trace_id") is not None and step.get("step_index") is not None


def _json(raw: bytes) -> Any:
    """A JSON answer; one that is empty or not JSON (a proxy's page) is a
    :class:`CairnError` `http_error` carrying what came, as an error answer
    that is not Cairn's is."""
    try:
        return json.loads(raw)
    except ValueError:
        raise CairnError(200, "http_error", raw.decode("utf-8", "replace")[:500]) from None


def _text(raw: bytes) -> str:
    return raw.decode("utf-8")


def _bytes(raw: bytes) -> bytes:
    return raw


def _none(raw: bytes) -> None:
    return None


def _quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def _query(**params: Any) -> Tuple[Tuple[str, str], ...]:
    """Query pairs without the absent ones; booleans as true/false; lists
    repeat the parameter."""
    pairs: List[Tuple[str, str]] = []
    for name, value in params.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if v is None:
                continue
            pairs.append((name, "true" if v is True else "false" if v is False else str(v)))
    return tuple(pairs)


def _body(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")


def _present(**members: Any) -> Dict[str, Any]:
    return {k: v for k, v in members.items() if v is not None}


def _notes(checkpoints: Sequence[str]) -> List[str]:
    """Signed checkpoint notes as the server takes them in a query: base64
    of the note's text (a note given already in base64 is sent as is)."""
    return [base64.b64encode(n.encode("utf-8")).decode("ascii") if "\n" in n else n for n in checkpoints]


def _retry_after(value: Optional[str]) -> Optional[float]:
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _Core:
    """Configuration, the transport of one attempt, the retry policy, and one
    request builder per operation (`_op_*`); the two clients add how they
    wait."""

    def __init__(self, url: str, api_key: str, agent_id: Optional[str] = None, timeout: float = 30.0,
                 max_retries: int = 3, backoff: float = 0.5, max_delay: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.agent_id = agent_id
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.backoff = backoff
        self.max_delay = max_delay

    # -- transport ---------------------------------------------------------------

    def _send_once(self, request: _Request[Any]) -> bytes:
        url = self.url + request.path
        if request.query:
            url += "?" + urllib.parse.urlencode(request.query)
        http = urllib.request.Request(url, data=request.body, method=request.method)
        http.add_header("Authorization", f"Bearer {self.api_key}")
        http.add_header("Accept", "application/json, text/plain, text/markdown, application/x-ndjson, */*")
        if request.body is not None:
            http.add_header("Content-Type", request.content_type or "application/json")
        try:
            with urllib.request.urlopen(http, timeout=self.timeout) as response:
                return cast(bytes, response.read())
        except urllib.error.HTTPError as e:
            try:
                raw = e.read()
            except (IncompleteRead, OSError):
                raw = b""
            raise self._error(e.code, e.headers.get("Retry-After") if e.headers else None, raw) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise CairnError(0, "unreachable", f"{self.url}: {reason}") from None
        except IncompleteRead as e:
            # A streamed answer (a replay, an export) cut short by the
            # server or the network: as unreachable, so reads are retried.
            raise CairnError(0, "unreachable", f"{self.url}: the answer was cut short ({e!r})") from None

    @staticmethod
    def _error(status: int, retry_after: Optional[str], raw: bytes) -> CairnError:
        wait = _retry_after(retry_after)
        try:
            error = json.loads(raw)["error"]
            code = error["code"]
            if not isinstance(code, str):
                raise TypeError(code)
        except (ValueError, KeyError, TypeError):
            return CairnError(status, "http_error", raw.decode("utf-8", "replace")[:500], None, wait)
        field = error.get("field")
        return CairnError(status, code, str(error.get("message", "")), field if isinstance(field, str) else None, wait)

    def _delay(self, request: _Request[Any], error: CairnError, attempt: int) -> Optional[float]:
        """Seconds to wait before attempt `attempt + 1`, or None to raise."""
        if attempt >= self.max_retries or not request.retried(error):
            return None
        if error.retry_after is not None:
            if error.retry_after > self.max_delay:
                return None
            # A little jitter so that clients told the same thing spread out.
            return min(self.max_delay, error.retry_after + random.uniform(0, min(1.0, 0.1 * error.retry_after)))
        step = self.backoff * (2 ** attempt)
        return min(self.max_delay, random.uniform(step / 2, step))

    def _agent(self, agent_id: Optional[str]) -> Optional[str]:
        return agent_id if agent_id is not None else self.agent_id

    # -- service -------------------------------------------------------------------

    def _op_health(self) -> _Request[Health]:
        """`GET /healthz`: whether the server is up (no key needed)."""
        return _Request("GET", "/healthz", _json, "read")

    def _op_openapi(self) -> _Request[Dict[str, Any]]:
        """`GET /openapi.json`: the API description the server serves."""
        return _Request("GET", "/openapi.json", _json, "read")

    def _op_metrics(self) -> _Request[str]:
        """`GET /metrics`: Prometheus text. Not opened by an API key: with
        `CAIRN_METRICS_TOKEN` set on the server, give that token as
        `api_key`; without it, only clients on the server's own machine are
        answered."""
        return _Request("GET", "/metrics", _text, "read")

    def _op_protected_resource(self, mcp: bool = False) -> _Request[Dict[str, Any]]:
        """`GET /.well-known/oauth-protected-resource[/mcp]`: the metadata MCP
        clients read (no key needed)."""
        path = "/.well-known/oauth-protected-resource" + ("/mcp" if mcp else "")
        return _Request("GET", path, _json, "read")

    # -- recording (seed 000) ---------------------------------------------------

    def _op_log_reasoning_step(
        self,
        session_id: str,
        step_type: str,
        content: Optional[str] = None,
        input_data: JSON = None,
        output_data: JSON = None,
        confidence: Optional[float] = None,
        model: Optional[str] = None,
        duration_ms: Optional[int] = None,
        token_count: Optional[int] = None,
        metadata: JSON = None,
        agent_id: Optional[str] = None,
        turn_id: Optional[str] = None,
        turn_step: Optional[int] = None,
        task_id: Optional[str] = None,
        status: Optional[Literal["ok", "flagged"]] = None,
        links: Optional[Dict[str, str]] = None,
        trace_id: Optional[str] = None,
        step_index: Optional[int] = None,
        created_at: Optional[str] = None,
        seed: Optional[str] = None,
        signature: Optional[Dict[str, str]] = None,
        org_id: Optional[str] = None,
        hash_agent_id: Optional[bool] = None,
    ) -> _Request[StepResult]:
        """`POST /v1/steps`: records one step (writer or admin key); returns
        `trace_id`, `step_index`, `current_hash`, `seq`.

        `trace_id`, `step_index`, `created_at`, `seed` and `signature` are
        for steps an agent signs itself (FORMAT.md 7.3); a step that carries
        its own `trace_id` and `step_index` is also retried on 503."""
        step = _present(
            session_id=session_id, step_type=step_type, content=content, input_data=input_data,
            output_data=output_data, confidence=confidence, model=model, duration_ms=duration_ms,
            token_count=token_count, metadata=metadata, agent_id=self._agent(agent_id), turn_id=turn_id,
            turn_step=turn_step, task_id=task_id, status=status, links=links, trace_id=trace_id,
            step_index=step_index, created_at=created_at, seed=seed, signature=signature, org_id=org_id,
            hash_agent_id=hash_agent_id)
        safety: Safety = "idempotent" if trace_id is not None and step_index is not None else "write"
        return _Request("POST", "/v1/steps", _json, safety, body=_body(step))

    def _op_log_steps(self, steps: Sequence[Mapping[str, Any]]) -> _Request[BatchResult]:
        """`POST /v1/steps/batch`: records many steps in one request
        (group-committed; writer or admin key). Each step is a dict of
        `log_reasoning_step`'s arguments; returns `accepted` and one result
        or `{"error": {...}}` per step, in order."""
        # A step that names no agent (`agent_id` absent or None) is the
        # client's agent's, as `log_reasoning_step(agent_id=None)` is.
        items = [dict(s) if s.get("agent_id") is not None or self.agent_id is None else {**s, "agent_id": self.agent_id}
                 for s in steps]
        own = bool(items) and all(_owns_identity(s) for s in items)
        return _Request("POST", "/v1/steps/batch", _json, "idempotent" if own else "write", body=_body(items))

    def _op_start_session(self, session_id: str, strict: bool = False, predecessor_session: Optional[str] = None,
                          full_consent: bool = False, agent_id: Optional[str] = None,
                          predecessor: Optional[str] = None,
                          hash_agent_id: Optional[bool] = None) -> _Request[SessionStart]:
        """`POST /v1/sessions`: opens a session explicitly (a strict seed-001
        trail, a continuation of `predecessor_session` or of the final hash
        `predecessor`, consent to full-detail sharing); returns its
        session-start record. Sessions also open on their first step."""
        body = _present(session_id=session_id, agent_id=self._agent(agent_id),
                        profile="strict" if strict else "standard", full_consent=full_consent,
                        predecessor_session=predecessor_session, predecessor=predecessor,
                        hash_agent_id=hash_agent_id)
        return _Request("POST", "/v1/sessions", _json, "write", body=_body(body))

    def _op_seal_session(self, session_id: str, require_reflection: bool = False) -> _Request[Seal]:
        """`POST /v1/sessions/{id}/seal`: signs the session's Merkle root;
        nothing can follow. With `require_reflection`, refused unless the
        session ends in a reflection step."""
        return _Request("POST", f"/v1/sessions/{_quote(session_id)}/seal", _json, "write",
                        query=_query(require_reflection=require_reflection or None))

    def _op_record_turn(self, session_id: str, turn_id: Optional[str] = None, thinking: Optional[str] = None,
                        steps: Optional[Sequence[Mapping[str, Any]]] = None, model: Optional[str] = None,
                        agent_id: Optional[str] = None) -> _Request[TurnResult]:
        """`POST /v1/sessions/{id}/turns`: one turn of a model, as its raw
        `thinking` text (parsed into steps by the server) or as `steps`
        (dicts of `log_reasoning_step`'s arguments without `session_id`)."""
        body = _present(turn_id=turn_id, agent_id=self._agent(agent_id), model=model, thinking=thinking,
                        steps=[dict(s) for s in steps] if steps is not None else None)
        # Recognised when sent again only with its turn_id, no thinking text
        # (whose steps get new ids) and every step's identity.
        own = turn_id is not None and thinking is None and bool(steps) and all(_owns_identity(s) for s in steps or ())
        return _Request("POST", f"/v1/sessions/{_quote(session_id)}/turns", _json, "idempotent" if own else "write",
                        body=_body(body))

    def _op_parse_thinking(self, text: str) -> _Request[ThinkingParse]:
        """`POST /v1/thinking/parse`: splits a model's thinking text into
        steps (phase, label, kind, content), recording nothing."""
        return _Request("POST", "/v1/thinking/parse", _json, "read", body=_body({"text": text}))

    # -- reading -----------------------------------------------------------------

    def _op_replay_decision(self, session_id: str, verify_chain: bool = False,
                            level: Optional[DetailLevel] = None) -> _Request[Session]:
        """`GET /v1/sessions/{id}`: replays a session, its steps in order;
        with `verify_chain` every hash is recomputed and `chain_valid`
        reported. `level` is seed 004's detail level (`generic`, `detailed`,
        `full`; `full` needs the session's consent and an auditor or admin
        key)."""
        return _Request("GET", f"/v1/sessions/{_quote(session_id)}", _json, "read",
                        query=_query(verify=verify_chain, level=level))

    def _op_session_markdown(self, session_id: str, level: Optional[DetailLevel] = None) -> _Request[str]:
        """`GET /v1/sessions/{id}?format=markdown`: the session as Markdown."""
        return _Request("GET", f"/v1/sessions/{_quote(session_id)}", _text, "read",
                        query=_query(format="markdown", level=level))

    def _op_get_session_history(self, agent_id: Optional[str] = None, limit: int = 20,
                                verify: Optional[bool] = None, kind: Optional[str] = None,
                                flagged: Optional[bool] = None, since: Optional[str] = None,
                                until: Optional[str] = None,
                                cursor: Optional[str] = None) -> _Request[List[SessionSummary]]:
        """`GET /v1/sessions`: an agent's recent sessions, newest first, with
        chain validity (seed 000's `get_session_history`: a list). Filters:
        `kind` (sessions with a step of that kind), `flagged`, `since` and
        `until` (RFC 3339 or a date, on the start time). A full page
        continues with `cursor=` the last row's `cursor`."""
        return _Request("GET", "/v1/sessions", _json, "read",
                        query=_query(agent_id=self._agent(agent_id), limit=limit, verify=verify,
                                     kind=kind, flagged=flagged, since=since, until=until,
                                     cursor=cursor))

    def _op_list_traces(self, agent_id: Optional[str] = None, limit: int = 20) -> _Request[List[SessionSummary]]:
        """Seed 000's `list_traces`: the same as `get_session_history`."""
        return self._op_get_session_history(agent_id, limit)

    def _op_verify_session(self, session_id: str) -> _Request[SessionVerdict]:
        """`GET /v1/sessions/{id}/verify`: the session's chain verdict."""
        return _Request("GET", f"/v1/sessions/{_quote(session_id)}/verify", _json, "read")

    def _op_session_root(self, session_id: str) -> _Request[SessionRoot]:
        """`GET /v1/sessions/{id}/root`: a sealed session's signed Merkle
        root (`not_sealed` before its seal)."""
        return _Request("GET", f"/v1/sessions/{_quote(session_id)}/root", _json, "read")

    def _op_get_trace(self, trace_id: str) -> _Request[Step]:
        """`GET /v1/steps/{trace_id}`: one step."""
        return _Request("GET", f"/v1/steps/{_quote(trace_id)}", _json, "read")

    def _op_get_turn(self, session_id: str, turn_id: str) -> _Request[Turn]:
        """`GET /v1/sessions/{id}/turns/{turn_id}`: a turn and its steps."""
        return _Request("GET", f"/v1/sessions/{_quote(session_id)}/turns/{_quote(turn_id)}", _json, "read")

    def _op_turn_markdown(self, session_id: str, turn_id: str) -> _Request[str]:
        """The same turn as Markdown (seed 002's export with bracket labels)."""
        return _Request("GET", f"/v1/sessions/{_quote(session_id)}/turns/{_quote(turn_id)}", _text, "read",
                        query=_query(format="markdown"))

    def _op_get_trail(self, session_id: str) -> _Request[Trail]:
        """`GET /v1/sessions/{id}/trail`: the session's turns and their steps."""
        return _Request("GET", f"/v1/sessions/{_quote(session_id)}/trail", _json, "read")

    def _op_trail_markdown(self, session_id: str) -> _Request[str]:
        """The same trail as Markdown."""
        return _Request("GET", f"/v1/sessions/{_quote(session_id)}/trail", _text, "read",
                        query=_query(format="markdown"))

    def _op_search(self, q: str, limit: Optional[int] = None, mode: Optional[str] = None,
                   agent_id: Optional[str] = None, session_id: Optional[str] = None,
                   kind: Optional[str] = None, status: Optional[str] = None,
                   since: Optional[str] = None, until: Optional[str] = None) -> _Request[SearchResult]:
        """`GET /v1/search`: steps found by words (`mode="fulltext"`: words,
        "a phrase", prefix*, -excluded), by meaning (`"semantic"`) or both
        (`"hybrid"`, the default), filtered; each result has `score`,
        `matched_by`, `snippet` and `highlights` (character ranges)."""
        return _Request("GET", "/v1/search", _json, "read",
                        query=_query(q=q, limit=limit, mode=mode, agent_id=agent_id, session_id=session_id,
                                     kind=kind, status=status, since=since, until=until))

    def _op_sql(self, statement: str, limit: Optional[int] = None) -> _Request[SqlResult]:
        """`POST /v1/sql` (its `sql` member is `statement` here): one
        read-only query over the analyst views (steps, sessions, records) of
        the key's org, with any key that reads; returns `columns`, `rows`,
        `truncated`."""
        return _Request("POST", "/v1/sql", _json, "read", body=_body(_present(sql=statement, limit=limit)))

    def _op_verify(self, checkpoints: Sequence[str] = (), witnesses: Sequence[str] = (),
                   witness_quorum: Optional[int] = None, *,
                   trusted_checkpoints: Sequence[str] = ()) -> _Request[OrgVerdict]:
        """`GET /v1/verify`: the server verifies the whole org (seed 003's
        verdict), and its consistency with each signed checkpoint given
        (the notes' text, as `checkpoint()` returned them; as `checkpoints`
        or, the name :func:`cairn_client.verify_bundle` uses,
        `trusted_checkpoints`). With
        `witnesses` (cosignature vkeys, as `cairn witness` prints them), the
        latest checkpoint must carry valid cosignatures by `witness_quorum`
        of them (default: all), or the verdict fails with
        `insufficient-cosignatures`."""
        return _Request("GET", "/v1/verify", _json, "read",
                        query=_query(checkpoint=_notes([*checkpoints, *trusted_checkpoints]),
                                     witness=list(witnesses), quorum=witness_quorum))

    # -- oversight ------------------------------------------------------------------

    def _op_erase_step(self, trace_id: str, reason: str) -> _Request[Erasure]:
        """`POST /v1/steps/{trace_id}/erase`: replaces the step's payload
        with its commitments (the chain still verifies; admin key)."""
        return _Request("POST", f"/v1/steps/{_quote(trace_id)}/erase", _json, "write",
                        body=_body({"reason": reason}))

    def _op_review_step(self, trace_id: str, decision: Decision, note: Optional[str] = None) -> _Request[Review]:
        """`POST /v1/steps/{trace_id}/review`: a person's decision on a
        (flagged) step: `approve`, `reject` or `escalate` (auditor or admin)."""
        return _Request("POST", f"/v1/steps/{_quote(trace_id)}/review", _json, "write",
                        body=_body(_present(decision=decision, note=note)))

    def _op_list_reviews(self, all: bool = False, limit: Optional[int] = None) -> _Request[ReviewQueue]:
        """`GET /v1/reviews`: flagged steps awaiting review (`all`: every
        reviewed or flagged step)."""
        return _Request("GET", "/v1/reviews", _json, "read", query=_query(all=all or None, limit=limit))

    def _op_record_audit_event(self, action: str, event_id: Optional[str] = None, session_id: Optional[str] = None,
                               detail: JSON = None) -> _Request[AuditEventResult]:
        """`POST /v1/audit-events`: an application's own audit event, in the
        log. With its own `event_id` it is also retried on 503."""
        body = _present(action=action, event_id=event_id, session_id=session_id, detail=detail)
        return _Request("POST", "/v1/audit-events", _json, "idempotent" if event_id else "write", body=_body(body))

    def _op_get_audit_event(self, event_id: str) -> _Request[AuditEvent]:
        """`GET /v1/audit-events/{event_id}`."""
        return _Request("GET", f"/v1/audit-events/{_quote(event_id)}", _json, "read")

    # -- the log, proofs and exports ---------------------------------------------------

    def _op_checkpoint(self) -> _Request[str]:
        """`GET /v1/checkpoint`: the latest signed checkpoint (a C2SP signed
        note). Keep it: a later bundle must be consistent with it."""
        return _Request("GET", "/v1/checkpoint", _text, "read")

    def _op_tlog_checkpoint(self) -> _Request[str]:
        """`GET /v1/tlog/checkpoint`: the same signed checkpoint at the C2SP
        tlog-tiles path; hash tiles and entry bundles are under the same
        prefix (`tlog_tile`)."""
        return _Request("GET", "/v1/tlog/checkpoint", _text, "read")

    def _op_tlog_tile(self, path: str) -> _Request[bytes]:
        """`GET /v1/tlog/<path>`: a C2SP tlog-tiles resource of the org's log
        (`tile/<L>/<N>[.p/<W>]`, `tile/entries/<N>[.p/<W>]`, or Cairn's
        `records/<N>[.p/<W>]`; FORMAT.md 7.9), as bytes."""
        return _Request("GET", f"/v1/tlog/{path}", _bytes, "read")

    def _op_inclusion_proof(self, seq: int, size: Optional[int] = None) -> _Request[InclusionProof]:
        """`GET /v1/proofs/inclusion`: the RFC 9162 inclusion proof of the entry at `seq`."""
        return _Request("GET", "/v1/proofs/inclusion", _json, "read", query=_query(seq=seq, size=size))

    def _op_consistency_proof(self, old: int, new: Optional[int] = None) -> _Request[ConsistencyProof]:
        """`GET /v1/proofs/consistency`: the RFC 9162 consistency proof between two log sizes."""
        return _Request("GET", "/v1/proofs/consistency", _json, "read", query=_query(old=old, new=new))

    def _op_inclusion_receipt(self, seq: int, size: Optional[int] = None) -> _Request[bytes]:
        """`GET /v1/receipts/inclusion`: the COSE Receipt (RFC 9942, CBOR
        bytes) of the entry at `seq` in the tree of `size` entries (default:
        the latest checkpoint's), signed with the server key (FORMAT.md 7.8)."""
        return _Request("GET", "/v1/receipts/inclusion", _bytes, "read", query=_query(seq=seq, size=size))

    def _op_consistency_receipt(self, old: int, new: Optional[int] = None) -> _Request[bytes]:
        """`GET /v1/receipts/consistency`: the COSE Receipt (RFC 9942, CBOR
        bytes) of consistency from log size `old` to `new` (default: the
        latest checkpoint's), signed over the newer root."""
        return _Request("GET", "/v1/receipts/consistency", _bytes, "read", query=_query(old=old, new=new))

    def _op_export(self, session: Optional[str] = None, agent: Optional[str] = None, all: bool = False,
                   level: Optional[DetailLevel] = None, since: Optional[str] = None, until: Optional[str] = None,
                   since_size: Optional[int] = None) -> _Request[str]:
        """`GET /v1/export`: a bundle (JSON Lines) of one session, an agent's
        sessions, a time range or (`all`) the whole org log, that verifies
        offline with :func:`cairn_client.verify_bundle` or `cairn verify
        --bundle`. `since_size` adds a consistency line from a log size you
        trust."""
        query = _query(session=session, agent=agent, since=since, until=until, all=all or None, level=level,
                       since_size=since_size)
        return _Request("GET", "/v1/export", _text, "read", query=query)

    def _op_verify_bundle_on_server(self, bundle: Union[str, bytes], keys: Sequence[str] = (),
                                    checkpoints: Sequence[str] = (), witnesses: Sequence[str] = (),
                                    witness_quorum: Optional[int] = None, *,
                                    trusted_checkpoints: Sequence[str] = ()) -> _Request[BundleVerdict]:
        """`POST /v1/bundles/verify`: the server's verdict on a bundle (with
        the same witness policy as `verify`; checkpoints as `checkpoints` or
        `trusted_checkpoints`, the offline verifier's name). Prefer
        :func:`cairn_client.verify_bundle`, which trusts no server."""
        data = bundle.encode("utf-8") if isinstance(bundle, str) else bytes(bundle)
        return _Request("POST", "/v1/bundles/verify", _json, "read", body=data,
                        content_type="application/x-ndjson",
                        query=_query(key=list(keys), checkpoint=_notes([*checkpoints, *trusted_checkpoints]),
                                     witness=list(witnesses), quorum=witness_quorum))

    # -- API keys ------------------------------------------------------------------------

    def _op_create_key(self, role: Role, agent_id: Optional[str] = None,
                       label: Optional[str] = None,
                       expires_at: Optional[str] = None) -> _Request[NewApiKey]:
        """`POST /v1/keys`: a new API key (admin key). Its secret, `token`,
        is shown once. A key bound to `agent_id` records only that agent; one
        given `expires_at` (RFC 3339, in the future) is refused from then on."""
        return _Request("POST", "/v1/keys", _json, "write",
                        body=_body(_present(role=role, agent_id=agent_id, label=label,
                                            expires_at=expires_at)))

    def _op_list_keys(self) -> _Request[List[ApiKey]]:
        """`GET /v1/keys`: the org's API keys, never their secrets (admin key)."""
        return _Request("GET", "/v1/keys", _json, "read")

    def _op_revoke_key(self, key_id: str) -> _Request[None]:
        """`DELETE /v1/keys/{key_id}`: revokes an API key (admin key)."""
        return _Request("DELETE", f"/v1/keys/{_quote(key_id)}", _none, "write")

    # -- agent keys and signed traces (seed 004) -------------------------------------------

    def _op_register_agent_key(self, public_key_b64: str, agent_id: Optional[str] = None) -> _Request[AgentKey]:
        """`POST /v1/agent-keys`: registers an agent's Ed25519 public key
        (base64 of 32 bytes); returns its `key_id`."""
        return _Request("POST", "/v1/agent-keys", _json, "write",
                        body=_body(_present(agent_id=self._agent(agent_id), public_key=public_key_b64)))

    def _op_list_agent_keys(self, after: Optional[int] = None, limit: Optional[int] = None) -> _Request[AgentKeyList]:
        """`GET /v1/agent-keys`: the org's agent key records (registrations
        and revocations) in log order, at most `limit` (1 to 1000, default
        1000) after log position `after`; a full page may have more: ask
        again with `after` set to its last record's `seq`."""
        return _Request("GET", "/v1/agent-keys", _json, "read", query=_query(after=after, limit=limit))

    def _op_revoke_agent_key(self, key_id: str, agent_id: Optional[str] = None,
                             reason: Optional[str] = None) -> _Request[AgentKeyChange]:
        """`POST /v1/agent-keys/{key_id}/revoke`: from now on the key signs
        nothing the log accepts; what it signed before stays valid."""
        return _Request("POST", f"/v1/agent-keys/{_quote(key_id)}/revoke", _json, "write",
                        body=_body(_present(agent_id=self._agent(agent_id), reason=reason)))

    def _op_rotate_agent_key(self, key_id: str, public_key_b64: str,
                             agent_id: Optional[str] = None) -> _Request[AgentKeyChange]:
        """`POST /v1/agent-keys/{key_id}/rotate`: revokes the key and
        registers the new one, both records or neither."""
        return _Request("POST", f"/v1/agent-keys/{_quote(key_id)}/rotate", _json, "write",
                        body=_body(_present(agent_id=self._agent(agent_id), public_key=public_key_b64)))

    def _op_import_trace(self, trace: Mapping[str, Any], session_id: Optional[str] = None) -> _Request[ImportedTrace]:
        """`POST /v1/signed-traces`: imports a complete agent-signed trace in
        seed 004's format (the server answers the same trace imported again
        into the same session as it was recorded, so it is retried on
        503)."""
        return _Request("POST", "/v1/signed-traces", _json, "idempotent", body=_body(dict(trace)),
                        query=_query(session_id=session_id))

    def _op_get_signed_trace(self, trace_id: str) -> _Request[SignedTrace]:
        """`GET /v1/signed-traces/{trace_id}`: an imported trace and whether
        its signature verifies."""
        return _Request("GET", f"/v1/signed-traces/{_quote(trace_id)}", _json, "read")

    # -- OTLP ------------------------------------------------------------------------------

    def _op_otlp(self, signal: OtlpSignal, request: Mapping[str, Any]) -> _Request[Dict[str, Any]]:
        """`POST /v1/traces`, `/v1/metrics` or `/v1/logs` with an OTLP/JSON
        export request (writer or admin key)."""
        return _Request("POST", f"/v1/{signal}", _json, "idempotent", body=_body(dict(request)))

    def _op_otlp_protobuf(self, signal: OtlpSignal, request: bytes) -> _Request[bytes]:
        """The same with an OTLP protobuf export request; returns the answer's bytes."""
        return _Request("POST", f"/v1/{signal}", _bytes, "idempotent", body=bytes(request),
                        content_type="application/x-protobuf")


# -- the two clients -----------------------------------------------------------------


def _sync(builder: Callable[Concatenate[_Core, P], _Request[T]]) -> Callable[Concatenate["CairnClient", P], T]:
    @functools.wraps(builder)
    def method(self: "CairnClient", /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._execute(builder(self, *args, **kwargs))

    method.__name__ = method.__qualname__ = builder.__name__[len("_op_"):]
    return method


def _async(builder: Callable[Concatenate[_Core, P], _Request[T]]) -> Callable[Concatenate["AsyncCairnClient", P], Awaitable[T]]:
    @functools.wraps(builder)
    async def method(self: "AsyncCairnClient", /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._execute(builder(self, *args, **kwargs))

    method.__name__ = method.__qualname__ = builder.__name__[len("_op_"):]
    return method


class CairnClient(_Core):
    """Records and reads an agent's reasoning on a Cairn server (blocking).

    >>> agent = CairnClient("http://127.0.0.1:8714", api_key="cairn_...", agent_id="analyst")
    >>> agent.log_reasoning_step(session_id="s1", step_type="Observation", content="...")

    `agent_id` is the agent recorded when a call names none. `max_retries`,
    `backoff` and `max_delay` bound the retries of refusals the server asks
    to retry (429, 503; see the module's docs for which requests). Every
    method raises :class:`CairnError` on an error answer.
    """

    def _execute(self, request: _Request[T]) -> T:
        attempt = 0
        while True:
            try:
                return request.parse(self._send_once(request))
            except CairnError as error:
                delay = self._delay(request, error, attempt)
                if delay is None:
                    raise
            time.sleep(delay)
            attempt += 1

    def close(self) -> None:
        """Nothing to release (each request has its own connection)."""

    def __enter__(self) -> "CairnClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    health = _sync(_Core._op_health)
    openapi = _sync(_Core._op_openapi)
    metrics = _sync(_Core._op_metrics)
    protected_resource = _sync(_Core._op_protected_resource)
    log_reasoning_step = _sync(_Core._op_log_reasoning_step)
    log_steps = _sync(_Core._op_log_steps)
    start_session = _sync(_Core._op_start_session)
    seal_session = _sync(_Core._op_seal_session)
    record_turn = _sync(_Core._op_record_turn)
    parse_thinking = _sync(_Core._op_parse_thinking)
    replay_decision = _sync(_Core._op_replay_decision)
    session_markdown = _sync(_Core._op_session_markdown)
    get_session_history = _sync(_Core._op_get_session_history)
    list_traces = _sync(_Core._op_list_traces)
    verify_session = _sync(_Core._op_verify_session)
    session_root = _sync(_Core._op_session_root)
    get_trace = _sync(_Core._op_get_trace)
    get_turn = _sync(_Core._op_get_turn)
    turn_markdown = _sync(_Core._op_turn_markdown)
    get_trail = _sync(_Core._op_get_trail)
    trail_markdown = _sync(_Core._op_trail_markdown)
    search = _sync(_Core._op_search)
    sql = _sync(_Core._op_sql)
    verify = _sync(_Core._op_verify)
    erase_step = _sync(_Core._op_erase_step)
    review_step = _sync(_Core._op_review_step)
    list_reviews = _sync(_Core._op_list_reviews)
    record_audit_event = _sync(_Core._op_record_audit_event)
    get_audit_event = _sync(_Core._op_get_audit_event)
    checkpoint = _sync(_Core._op_checkpoint)
    tlog_checkpoint = _sync(_Core._op_tlog_checkpoint)
    tlog_tile = _sync(_Core._op_tlog_tile)
    inclusion_proof = _sync(_Core._op_inclusion_proof)
    consistency_proof = _sync(_Core._op_consistency_proof)
    inclusion_receipt = _sync(_Core._op_inclusion_receipt)
    consistency_receipt = _sync(_Core._op_consistency_receipt)
    export = _sync(_Core._op_export)
    verify_bundle_on_server = _sync(_Core._op_verify_bundle_on_server)
    create_key = _sync(_Core._op_create_key)
    list_keys = _sync(_Core._op_list_keys)
    revoke_key = _sync(_Core._op_revoke_key)
    register_agent_key = _sync(_Core._op_register_agent_key)
    list_agent_keys = _sync(_Core._op_list_agent_keys)
    revoke_agent_key = _sync(_Core._op_revoke_agent_key)
    rotate_agent_key = _sync(_Core._op_rotate_agent_key)
    import_trace = _sync(_Core._op_import_trace)
    get_signed_trace = _sync(_Core._op_get_signed_trace)
    otlp = _sync(_Core._op_otlp)
    otlp_protobuf = _sync(_Core._op_otlp_protobuf)


class AsyncCairnClient(_Core):
    """The same operations as :class:`CairnClient`, as coroutines.

    >>> async with AsyncCairnClient(url, api_key="cairn_...", agent_id="analyst") as agent:
    ...     await agent.log_reasoning_step(session_id="s1", step_type="Observation", content="...")

    Each request runs in a worker thread (`asyncio.to_thread`), so many can
    be in flight at once; waits between retries are `asyncio.sleep`.
    """

    async def _execute(self, request: _Request[T]) -> T:
        attempt = 0
        while True:
            try:
                raw = await asyncio.to_thread(self._send_once, request)
                return request.parse(raw)
            except CairnError as error:
                delay = self._delay(request, error, attempt)
                if delay is None:
                    raise
            await asyncio.sleep(delay)
            attempt += 1

    async def aclose(self) -> None:
        """Nothing to release (each request has its own connection)."""

    async def __aenter__(self) -> "AsyncCairnClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    health = _async(_Core._op_health)
    openapi = _async(_Core._op_openapi)
    metrics = _async(_Core._op_metrics)
    protected_resource = _async(_Core._op_protected_resource)
    log_reasoning_step = _async(_Core._op_log_reasoning_step)
    log_steps = _async(_Core._op_log_steps)
    start_session = _async(_Core._op_start_session)
    seal_session = _async(_Core._op_seal_session)
    record_turn = _async(_Core._op_record_turn)
    parse_thinking = _async(_Core._op_parse_thinking)
    replay_decision = _async(_Core._op_replay_decision)
    session_markdown = _async(_Core._op_session_markdown)
    get_session_history = _async(_Core._op_get_session_history)
    list_traces = _async(_Core._op_list_traces)
    verify_session = _async(_Core._op_verify_session)
    session_root = _async(_Core._op_session_root)
    get_trace = _async(_Core._op_get_trace)
    get_turn = _async(_Core._op_get_turn)
    turn_markdown = _async(_Core._op_turn_markdown)
    get_trail = _async(_Core._op_get_trail)
    trail_markdown = _async(_Core._op_trail_markdown)
    search = _async(_Core._op_search)
    sql = _async(_Core._op_sql)
    verify = _async(_Core._op_verify)
    erase_step = _async(_Core._op_erase_step)
    review_step = _async(_Core._op_review_step)
    list_reviews = _async(_Core._op_list_reviews)
    record_audit_event = _async(_Core._op_record_audit_event)
    get_audit_event = _async(_Core._op_get_audit_event)
    checkpoint = _async(_Core._op_checkpoint)
    tlog_checkpoint = _async(_Core._op_tlog_checkpoint)
    tlog_tile = _async(_Core._op_tlog_tile)
    inclusion_proof = _async(_Core._op_inclusion_proof)
    consistency_proof = _async(_Core._op_consistency_proof)
    inclusion_receipt = _async(_Core._op_inclusion_receipt)
    consistency_receipt = _async(_Core._op_consistency_receipt)
    export = _async(_Core._op_export)
    verify_bundle_on_server = _async(_Core._op_verify_bundle_on_server)
    create_key = _async(_Core._op_create_key)
    list_keys = _async(_Core._op_list_keys)
    revoke_key = _async(_Core._op_revoke_key)
    register_agent_key = _async(_Core._op_register_agent_key)
    list_agent_keys = _async(_Core._op_list_agent_keys)
    revoke_agent_key = _async(_Core._op_revoke_agent_key)
    rotate_agent_key = _async(_Core._op_rotate_agent_key)
    import_trace = _async(_Core._op_import_trace)
    get_signed_trace = _async(_Core._op_get_signed_trace)
    otlp = _async(_Core._op_otlp)
    otlp_protobuf = _async(_Core._op_otlp_protobuf)
