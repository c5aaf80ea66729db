"""The ``fsm_agent`` logger: what a run swallowed on purpose, for the operator.

A run goes on past some failures by design: a hook or a verifier that fails under the default
hook failure mode, a stop condition that raises, a step-limit summary call that fails and falls
back to a fixed answer. Each is an event for the listener and a record here, at ``WARNING``.
The logger has a :class:`logging.NullHandler`, so it is silent until the application configures
logging (``logging.basicConfig()``, or a handler on ``logging.getLogger("fsm_agent")``).
"""

from __future__ import annotations

import logging

__all__ = ["logger"]

logger = logging.getLogger("fsm_agent")
logger.addHandler(logging.NullHandler())
