"""Ending a stored run for good (:meth:`~fsm_agent.Agent.abandon`): a durable run that was
cancelled, or whose process died, stays resumable until then."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, RunFinishedError
from ..machine.table import TERMINAL, Outcome
from ..persistence.run_log import in_store_thread, load_checkpoint
from .run import RunHandle, RunResult
from .states import RunContext

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["abandon_run"]


async def abandon_run(agent: Agent[Any, Any], run_id: str, reason: str) -> RunResult[Any]:
    """Move ``run_id``'s latest checkpoint on by the machine's ``cancel`` outcome and store it
    (see :meth:`~fsm_agent.Agent.abandon`)."""
    store = agent.checkpointer
    if store is None:
        raise ConfigurationError("abandon needs an agent with a checkpointer")
    checkpoint = await load_checkpoint(store, run_id)
    rs = checkpoint.state
    if rs.state in TERMINAL:
        raise RunFinishedError(
            f"run {run_id!r} already ended ({rs.state.value}, {rs.stop_reason}); there is "
            "nothing to abandon",
            run_id=run_id,
        )
    move = agent.decide(rs.state, Outcome.CANCEL, rs.counters)
    rs.counters = move.counters
    rs.state = move.dest
    rs.stop_reason = move.stop
    rs.trace.append(move)
    if rs.pending_tool_calls:  # every call still waiting gets its one result
        context = RunContext(agent, rs, listening=False, handle=RunHandle())
        context.close_pending_calls("the run was abandoned")
    rs.resume_token = None
    rs.error = f"the run was abandoned: {reason}"
    await in_store_thread(store, lambda: store.save(rs, version=checkpoint.version + 1))
    return RunResult.of(rs, None, agent.output_spec)
