"""Tools: ``@tool`` turns a typed function into something the model can call.

The JSON schema comes from the type hints via pydantic; arguments are validated and a validation
error goes back to the model as an ``is_error`` result it can act on. A tool that raises gets an
``is_error`` result too; raising :class:`TaskComplete` ends the run.
A tool asks a human with :meth:`ToolContext.ask_human`: the run suspends and the answer becomes
the call's result when it is resumed.

Sync tools run inline on the event loop (a thread hop costs more than a whole kernel step), so a
sync tool must not block; mark a blocking one ``@tool(threaded=True)`` to run it in a thread of
its own, where its timeout applies too. An inline sync tool cannot be interrupted, so it may not
set ``timeout_s``. A threaded tool cut off by its timeout is abandoned: its thread finishes on its
own, and neither the run nor ``run_sync`` waits for it.

:class:`TaskComplete` and :class:`HumanInputRequired` are control-flow signals: they derive from
:class:`BaseException`, so a tool's own ``except Exception`` cannot swallow them.

Read in order: :mod:`~fsm_agent.tools.base` (the signals, the tool context, a tool built from a
function and run, the registry), :mod:`~fsm_agent.tools.output` (output limits and the pager)
and :mod:`~fsm_agent.tools.mcp` (MCP servers' tools, with the ``[mcp]`` extra). This package
re-exports the public names of :mod:`~fsm_agent.tools.base`.
"""

from . import base
from .base import *  # noqa: F403  (the names of base.__all__, written once there)

__all__ = base.__all__
