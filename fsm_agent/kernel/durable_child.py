"""A child run of a durable parent (an agent used as a tool by an agent with a checkpointer).

The child is checkpointed and journaled in its parent's store as a run of its own, under an id
derived from the parent's call (``child_run_id``). A crash in the middle of the call leaves the
parent's journal with the call's intent and no result; the call is run again when the parent is
resumed (an agent tool is idempotent), and the child, found in the store by its id, is resumed
where it stood: its recorded model and tool calls are reused, none runs twice, and a child that
had already ended gives its stored result.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from ..errors import UnknownRunError
from ..machine.table import TERMINAL, State
from ..persistence.run_log import RunLog, load_checkpoint
from ..run.state import RunState, build_run_validators
from .definition import check_definition

if TYPE_CHECKING:
    from .context import RunContext
    from .plan import Plan, RunOwner

__all__ = ["child_run_id", "open_child"]


def child_run_id(parent_run_id: str, step: int, call_id: str) -> str:
    """The run id of the child that the call ``call_id`` of step ``step`` of a durable run
    starts: the same every time the call runs, so that a resumed parent finds its child."""
    digest = hashlib.sha256(f"{parent_run_id}/{step}/{call_id}".encode()).hexdigest()
    return f"run_{digest[:32]}"


async def open_child(
    agent: RunOwner, bounded: Plan, parent: RunContext, run_id: str
) -> tuple[RunState, RunLog | None]:
    """The state of the child ``run_id`` of ``agent`` (run under ``bounded``, its plan under the
    limits its parent shares) and its run log in the parent's store: a new run, or the stored
    one claimed to continue. The log is ``None`` when the stored child had already come to
    rest. The definition checked on a resume is that of ``agent``'s own plan (the bounded
    plan's limits depend on what the parent had left)."""
    above = parent.durable
    assert above is not None, "a durable parent has a run log"
    store = above.store
    build_run_validators(durable=True)
    definition = agent._plan.definition
    heard = parent.listening or bool(bounded.hooks)
    try:
        checkpoint = await load_checkpoint(store, run_id)
    except UnknownRunError:
        rs = RunState(run_id=run_id)
        rs.definition = definition
        log = RunLog(
            store,
            run_id,
            version=0,
            mode=above.mode,
            unknown_outcome=agent.unknown_outcome,
            heard=heard,
        )
        return rs, log
    rs = checkpoint.state
    if rs.state in TERMINAL or rs.state is State.SUSPENDED:
        return rs, None
    check_definition(run_id, rs.definition, definition)
    log = RunLog(
        store,
        run_id,
        version=checkpoint.version,
        mode=above.mode,
        unknown_outcome=agent.unknown_outcome,
        heard=heard,
    )
    try:
        await log.claim(rs, checkpoint)
        await log.read_journal()
    except BaseException:
        log.close()
        raise
    return rs, log
