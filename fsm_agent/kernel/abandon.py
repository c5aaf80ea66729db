"""Ending a stored run for good (:meth:`~fsm_agent.Agent.abandon`): a durable run that was
cancelled, or whose process died, stays resumable until then.

A call the run was still waiting for gets the outcome its journal knows: the recorded result
of a call that ran, "outcome unknown" for one that started and never reported back (it may be
running in another worker, or a crash cut it short), "not finished" for one that asked a human
a question nobody answered, and "not run" for one that never started.
The run is claimed (its checkpoint written again) before the journal is read, so that no
worker can start a call after that read: a worker still running the run fails its next write.

A run's children (agents used as tools, saved in the same store, see
:mod:`~fsm_agent.kernel.durable_child`) are abandoned with it, each claimed in turn before its
journal is read and its own children abandoned, so that no descendant starts a call after the
abandon either; the parent's call of a child that did not report back says so.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError, RunAbandonedError, UnknownRunError
from ..machine.table import ANSWERED, TERMINAL, Outcome, State, StopReason
from ..persistence import UNKNOWN_OUTCOME_PREFIX, Checkpoint, Checkpointer, EffectRecord
from ..persistence.outcomes import decode_tool_outcome
from ..persistence.run_log import in_store_thread, load_checkpoint
from ..run.state import RunState
from ..tools.output import cut_result
from ..values.messages import ToolCall, ToolResult
from .context import RunContext
from .durable_child import child_run_id
from .plan import Plan, RunOwner
from .resuming import refuse_finished
from .run import RunResult, Runtime

__all__ = ["abandon_run"]

_UNKNOWN = (
    UNKNOWN_OUTCOME_PREFIX + ": the run was abandoned after tool '{name}' started (call {id}) "
    "and before it reported back; it may still be running in another worker. It may or may "
    "not have taken effect: check before calling it again."
)

_CHILD_ABANDONED = (
    "Error: not finished: the run was abandoned while agent tool '{name}' ran (call {id}); "
    "its child run {child} was abandoned too ({stop}): what it did is in that run's journal"
)

_CHILD_ENDED = (
    "Error: not finished: agent tool '{name}' (call {id}) stopped without finishing its task "
    "before the run was abandoned; its child run {child} ended {stop}"
)

_UNANSWERED = (
    "Error: not finished: tool '{name}' asked a human ({question}) and the run was abandoned "
    "before the answer came"
)


async def abandon_run(agent: RunOwner, run_id: str, reason: str) -> RunResult[Any]:
    """Move ``run_id``'s latest checkpoint on by the machine's ``cancel`` outcome and store it,
    its children's too (see :meth:`~fsm_agent.Agent.abandon`)."""
    store = agent.checkpointer
    if store is None:
        raise ConfigurationError("abandon needs an agent with a checkpointer")
    checkpoint = await load_checkpoint(store, run_id)
    refuse_finished(checkpoint.state, run_id, "abandon")
    return await _abandoned(agent._plan, agent.runtime, store, checkpoint, reason)


async def _abandoned(
    plan: Plan, runtime: Runtime, store: Checkpointer, checkpoint: Checkpoint, reason: str
) -> RunResult[Any]:
    """Abandon the run of ``checkpoint`` (not ended) under ``plan``, and its unfinished
    children first (under the same plan: only its machine and output settings are read)."""
    rs = checkpoint.state
    version = checkpoint.version
    if rs.pending_tool_calls:
        version += 1
        await in_store_thread(store, lambda: store.save(rs, version=version))  # the claim
        children = await _abandon_children(plan, runtime, store, rs, reason)
        await _settle_from_journal(plan, store, rs, children)
    move = plan.decide(rs.state, Outcome.CANCEL, rs.counters)
    rs.counters = move.counters
    rs.state = move.dest
    rs.stop_reason = move.stop
    rs.trace.append(move)
    if rs.pending_tool_calls:  # every call still waiting gets its one result
        context = RunContext(plan, runtime, rs, listening=False)
        context.close_pending_calls("the run was abandoned")
    rs.resume_token = None
    run_id = rs.run_id
    error = RunAbandonedError(f"the run was abandoned: {reason}", run_id=run_id, reason=reason)
    rs.error = str(error)
    await in_store_thread(store, lambda: store.save(rs, version=version + 1))
    return RunResult.of(rs, error, plan.output_spec)


async def _abandon_children(
    plan: Plan, runtime: Runtime, store: Checkpointer, rs: RunState, reason: str
) -> dict[str, RunState]:
    """Abandon the unfinished child run of each call ``rs`` waits for (an agent tool's, found
    by the id its call gives it); the children's states by call id, those that had ended
    before included."""
    settled = {r.call_id for r in rs.tool_results}
    step = rs.counters.steps  # the step the calls were dispatched in (their children's ids)
    why = f"its parent run {rs.run_id} was abandoned: {reason}"
    children: dict[str, RunState] = {}
    for call in rs.pending_tool_calls:
        if call.id in settled:
            continue
        child_id = rs.child_runs.get(call.id) or child_run_id(rs.run_id, step, call.id)
        try:
            checkpoint = await load_checkpoint(store, child_id)
        except UnknownRunError:  # not an agent tool, or its child never started
            continue
        if checkpoint.state.state not in TERMINAL:
            await _abandoned(plan, runtime, store, checkpoint, why)  # moves checkpoint.state on
        children[call.id] = checkpoint.state
    return children


async def _settle_from_journal(
    plan: Plan, store: Checkpointer, rs: RunState, children: dict[str, RunState]
) -> None:
    """Give each waiting call the journal knows of its result (see :func:`_journaled`; a
    recorded result is cut as the agent cuts tool outputs); a call of a child whose result
    the journal does not hold gets what the child's run says (see :func:`_from_child`)."""
    effects = await in_store_thread(store, lambda: store.effects(rs.run_id))
    settled = {r.call_id for r in rs.tool_results}
    step = rs.counters.steps  # the step the calls were dispatched in (their journal keys)
    max_chars = plan.settings.max_output_chars
    results = list(rs.tool_results)
    for call in rs.pending_tool_calls:
        if call.id in settled:
            continue
        record = effects.get(f"{step}/tool/{call.id}")
        child = children.get(call.id)
        if child is not None and (record is None or record.result is None):
            result: ToolResult | None = _from_child(call, child)
        else:
            result = _journaled(call, record)
        if result is not None and max_chars is not None:
            result = cut_result(rs.tool_outputs, result, max_chars)
        if result is not None:
            results.append(result)
    rs.tool_results = tuple(results)


def _from_child(call: ToolCall, child: RunState) -> ToolResult:
    """The result of ``call`` from its child's run: the child's answer when it had ended with
    one before the abandon, else an error naming the child's run and how it ended."""
    if child.state is State.DONE and child.stop_reason in ANSWERED and child.output is not None:
        return ToolResult(call_id=call.id, name=call.name, content=child.output)
    cancelled = child.state is State.ABORTED and child.stop_reason is StopReason.CANCELLED
    template = _CHILD_ABANDONED if cancelled else _CHILD_ENDED
    content = template.format(name=call.name, id=call.id, child=child.run_id, stop=_stop(child))
    return ToolResult(call_id=call.id, name=call.name, content=content, is_error=True)


def _stop(rs: RunState) -> str:
    """How a run ended, as ``state, stop reason``."""
    return f"{rs.state.value}, {rs.stop_reason.value if rs.stop_reason else 'no stop reason'}"


def _journaled(call: ToolCall, record: EffectRecord | None) -> ToolResult | None:
    """What the journal says of ``call``: ``None`` when it never started."""
    if record is None:
        return None
    if record.result is None:
        content = _UNKNOWN.format(name=call.name, id=call.id)
        return ToolResult(call_id=call.id, name=call.name, content=content, is_error=True)
    execution = decode_tool_outcome(record.result, call)
    if execution.question is None:
        return execution.result
    content = _UNANSWERED.format(name=call.name, question=execution.question)
    return ToolResult(call_id=call.id, name=call.name, content=content, is_error=True)
