"""Python client for Cairn, the tamper-evident ledger of AI agents' reasoning.

- :class:`CairnClient` records steps and reads them back from a server
  (seed 000's `log_reasoning_step`, `replay_decision`,
  `get_session_history`, plus exports, checkpoints and proofs);
- :func:`verify_bundle` verifies an export bundle offline, in pure Python,
  from the published algorithm (`docs/FORMAT.md`).
"""
from .client import CairnClient, CairnError
from .verify import Failure, Position, Verdict, verify_bundle

__all__ = ["CairnClient", "CairnError", "Failure", "Position", "Verdict", "verify_bundle"]
__version__ = "0.1.0"
