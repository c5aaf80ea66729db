"""Forking a stored run (:meth:`~fsm_agent.Agent.fork`): a new run that starts from the state
saved after one move of another, optionally edited, and leaves the original as it was.

The fork is a run of its own: a new run id, its first checkpoint the chosen state (with
``forked_from`` and ``forked_at`` saying where it came from), a journal of its own. What the
original did after the chosen move is not the fork's: its model and tool calls from there on run
again, for the fork.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from ..errors import ConfigurationError, DefinitionChangedError, InvalidInputError
from ..machine.table import TERMINAL, State
from ..persistence import Checkpoint, Checkpointer
from ..persistence.run_log import in_store_thread
from ..run.approval import suspend
from ..run.state import RunState
from ..values.messages import validate_history
from ..values.record import adapter
from .definition import check_definition

__all__ = ["RunEdit", "fork_run"]

RunEdit = Callable[[RunState], "RunState | None"]
"""Called with the fork's state (a copy: the original's is not touched); changes it in place or
returns the state to use."""


async def fork_run(
    store: Checkpointer,
    run_id: str,
    new_id: str,
    *,
    at: int | None = None,
    edit: RunEdit | None = None,
    definition: str | None = None,
) -> RunState:
    """Store the fork ``new_id`` of ``run_id`` from the state after move ``at`` (``None``: its
    latest checkpoint), edited by ``edit``; return the fork's state. ``definition`` is the
    fingerprint of the agent that is to run the fork: a run started by another agent is
    refused with :class:`~fsm_agent.DefinitionChangedError` before anything is stored
    (``None``: not checked, the agent is not known or may differ on purpose)."""
    checkpoints = getattr(store, "checkpoints", None)
    if not callable(checkpoints):
        raise ConfigurationError(
            f"{type(store).__name__} keeps no checkpoints but the latest (it has no "
            "'checkpoints(run_id)' method), so no earlier move can be forked"
        )
    saved: list[Checkpoint] = await in_store_thread(store, lambda: checkpoints(run_id))
    state = _at(saved, run_id, at)
    if definition is not None:
        _same_definition(run_id, state.definition, definition)
    state.run_id = new_id
    state.forked_from, state.forked_at = run_id, len(state.trace)
    if edit is not None:
        try:
            returned = edit(state)
        except Exception as exc:
            raise InvalidInputError(
                f"the fork's edit raised {type(exc).__name__}: {exc}; nothing was stored"
            ) from exc
        if returned is not None:
            if not isinstance(returned, RunState):
                raise InvalidInputError(
                    f"the fork's edit returned a {type(returned).__name__}; return the "
                    "RunState it was given (or None after changing it in place)"
                )
            state = returned
        state = _checked(state, new_id, run_id)
    if state.state in TERMINAL:
        raise InvalidInputError(
            f"run {run_id!r} had ended at move {state.forked_at} ({state.state.value}): a fork "
            "from there has nothing to do; fork from an earlier move"
        )
    if state.state is State.SUSPENDED and state.resume_token is not None:
        state.suspensions -= 1
        suspend(state)  # the fork's own resume token, not the original's
    await in_store_thread(store, lambda: store.save(state, version=1))
    return state


def _same_definition(run_id: str, stored: str | None, current: str) -> None:
    """Refuse a fork whose agent is not the one that started ``run_id``, before anything is
    stored: the fork would be left waiting for an agent that can continue it."""
    try:
        check_definition(run_id, stored, current)
    except DefinitionChangedError as exc:
        raise DefinitionChangedError(
            f"run {run_id!r} was started by an agent with other {', '.join(exc.changed)}, so "
            "this agent cannot continue a fork of it; nothing was stored. Fork it with the "
            "agent that started it, or pass allow_changed_definition=True to continue it "
            "under this one",
            run_id=run_id,
            changed=exc.changed,
        ) from None


def _at(saved: list[Checkpoint], run_id: str, at: int | None) -> RunState:
    """The state saved right after move ``at`` (the first checkpoint with that many moves: a
    resume's claim saves the same position again)."""
    if at is None:
        return saved[-1].state
    for checkpoint in saved:
        if len(checkpoint.state.trace) == at:
            return checkpoint.state
    moves = sorted({len(c.state.trace) for c in saved})
    raise InvalidInputError(
        f"run {run_id!r} has no checkpoint after move {at}; its saved moves are "
        f"{', '.join(map(str, moves))} (a run saved with durability 'exit' keeps only its end)"
    )


def _checked(state: RunState, new_id: str, run_id: str) -> RunState:
    """The edited state, validated as a stored one would be, with a history that stays valid
    (every tool call keeps exactly one result)."""
    state.run_id = new_id
    try:
        checked = RunState.model_validate_json(adapter(RunState).dump_json(state, warnings="error"))
    except (ValidationError, PydanticSerializationError, ValueError) as exc:
        raise InvalidInputError(
            f"the edited state of the fork of {run_id!r} is not a valid run state: {exc}"
        ) from None
    messages = checked.messages
    open_turn = checked.pending_tool_calls
    if (
        open_turn
        and messages
        and [c.id for c in messages[-1].tool_calls] == [c.id for c in open_turn]
    ):
        messages = messages[:-1]  # the turn being dispatched: its results are still to come
    validate_history(messages)
    return checked
