"""Python client for Cairn, the tamper-evident ledger of AI agents' reasoning.

- :class:`CairnClient` (blocking) and :class:`AsyncCairnClient` (`asyncio`)
  cover every operation of the server's REST API: seed 000's
  `log_reasoning_step`, `replay_decision`, `get_session_history`, sessions,
  turns, reviews, audit events, keys, checkpoints, proofs and exports;
  errors raise :class:`CairnError` with the server's stable error code;
- :func:`verify_bundle` verifies an export bundle offline, in pure Python,
  from the published algorithm (`docs/FORMAT.md`).
"""
from . import types
from .client import AsyncCairnClient, CairnClient, CairnError
from .verify import Failure, Position, Verdict, verify_bundle

__all__ = ["AsyncCairnClient", "CairnClient", "CairnError", "Failure", "Position", "Verdict", "types",
           "verify_bundle"]
__version__ = "0.2.0"
