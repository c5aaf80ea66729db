"""How a run is started or resumed: the run context built from the agent's plan, a stored run
loaded, checked and claimed (the plumbing behind :class:`~fsm_agent.Agent`'s ``run`` and
``resume`` methods). The agent is read as a :class:`~fsm_agent.kernel.plan.RunOwner`: its plan
and the pieces of its runtime."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import InvalidInputError, ResumeError, RunFinishedError
from ..machine.table import TERMINAL, State
from ..models import check_request
from ..persistence import Checkpoint
from ..persistence.run_log import RunLog, load_checkpoint
from ..persistence.storable import storable_message
from ..run.approval import HumanDecision, ResumeHandle, apply_decisions
from ..run.state import RunState
from ..values.define import builder
from ..values.messages import Message, validate_history
from ..values.model_settings import ModelSettings, merge_settings, settings_request
from ..values.record import field_problem
from .context import RunContext
from .definition import check_definition
from .handoffs import holder
from .handover import resumed_agent
from .plan import Plan, RunOwner
from .run import RunHandle
from .states.model_call import model_name

__all__ = ["new_context", "refuse_finished", "resume_context", "start_context"]

_new_state = builder(RunState)  # one per run: see builder()


def start_context(
    agent: RunOwner,
    prompt: str | Message,
    history: Sequence[Message],
    handle: RunHandle | None,
    deps: object,
    model_settings: ModelSettings | None,
    *,
    listening: bool,
    conversation_id: str | None = None,
) -> RunContext:
    """The context of a new run of ``agent`` on ``prompt`` (raises
    :class:`~fsm_agent.InvalidInputError` for a prompt, history or conversation id that does
    not fit, and :class:`~fsm_agent.ConfigurationError` for settings a model refuses, before
    anything runs)."""
    settings = merge_settings(agent.model_settings, model_settings)
    _check_settings(agent, settings)
    if isinstance(prompt, str):
        if not prompt or prompt.isspace():
            raise InvalidInputError("the prompt is empty; pass the task as text")
        message = Message.user(prompt)
    elif isinstance(prompt, Message):
        problem = field_problem(prompt)
        if problem is not None:
            raise InvalidInputError(
                f"the prompt's {problem}; build it with Message.user(text, *images), or "
                "validate it: Message.model_validate(data)"
            )
        message = prompt
    else:
        raise InvalidInputError(
            f"the prompt must be a str or a Message, got {type(prompt).__name__}"
        )
    validate_history(history)
    plan = agent._plan
    rs = _new_state(run_id=agent.runtime.new_id())
    if conversation_id is not None:
        if not isinstance(conversation_id, str) or not conversation_id:
            raise InvalidInputError(
                f"conversation_id must be a non-empty string, got {conversation_id!r}"
            )
        rs.conversation_id = conversation_id
    log = None
    if agent.checkpointer is not None:
        rs.definition = plan.definition
        rs.model = " | ".join(model_name(m) for m in plan.models)
        message = storable_message(message)
        log = _run_log(agent, rs.run_id, 0, listening)
    ctx = new_context(agent, plan, rs, handle, deps, listening, log)
    ctx.input = message
    ctx.model_settings = settings
    if history:
        ctx.history = list(history)
    return ctx


def _check_settings(agent: RunOwner, settings: ModelSettings | None) -> None:
    """Ask each model of ``agent`` whether it takes the first request of a run under
    ``settings`` (raises :class:`~fsm_agent.ConfigurationError` for settings it refuses)."""
    if settings is None:
        return
    plan = agent._plan
    phases = plan.phases
    tools = plan.tool_definitions if phases is None else phases.tools_of[phases.phases.initial]
    request = settings_request(
        settings,
        (),
        tools,
        parallel_tool_calls=plan.settings.parallel_tool_calls,
        first_turn=True,
        output=plan.output_schema,
    )
    for model in plan.models:
        check_request(model, request)


def new_context(
    agent: RunOwner,
    plan: Plan,
    rs: RunState,
    handle: RunHandle | None,
    deps: object,
    listening: bool,
    durable: RunLog | None = None,
) -> RunContext:
    """The context of a started or resumed run of ``agent`` under ``plan``, attached to its
    handle (when the caller passed one)."""
    ctx = RunContext(
        plan,
        agent.runtime,
        rs,
        listening=listening,
        handle=handle,
        agent=agent,
        model_settings=agent.model_settings,
    )
    ctx.deps = deps if deps is not None else agent.deps
    ctx.durable = durable
    if handle is not None:
        handle._attach(ctx)
    return ctx


async def resume_context(
    agent: RunOwner,
    resume: ResumeHandle | str,
    decisions: Mapping[str, HumanDecision] | None,
    handle: RunHandle | None,
    deps: object,
    model_settings: ModelSettings | None,
    listening: bool,
    allow_changed: bool,
) -> RunContext:
    """The context that continues a suspended run (from its resume handle) or a stored one
    (by its id, for an agent with a checkpointer); see :meth:`~fsm_agent.Agent.resume`."""
    settings = merge_settings(agent.model_settings, model_settings)
    _check_settings(agent, settings)
    if agent.checkpointer is not None:
        ctx = await _durable_resume_context(
            agent, resume, decisions, handle, deps, listening, allow_changed
        )
        if ctx.rs.agent is None:
            ctx.model_settings = settings
        return ctx
    if isinstance(resume, str):
        raise ResumeError(
            f"resume needs the ResumeHandle of a result; resuming run {resume!r} by its id "
            "needs an agent with a checkpointer"
        )
    if (
        handle is not None
        and handle._rs is not None
        and handle._rs is not getattr(resume, "run_state", None)
    ):
        raise InvalidInputError("a RunHandle controls one run; create a new one per run")
    rs = apply_decisions(resume, decisions if decisions is not None else {})
    ctx = new_context(agent, agent._plan, rs, handle, deps, listening)
    ctx.model_settings = settings
    if rs.agent is not None:  # a handoff gave the conversation to another agent
        resumed_agent(ctx)
    return ctx


async def _durable_resume_context(
    agent: RunOwner,
    resume: ResumeHandle | str,
    decisions: Mapping[str, HumanDecision] | None,
    handle: RunHandle | None,
    deps: object,
    listening: bool,
    allow_changed: bool,
) -> RunContext:
    """Load the run's latest checkpoint, apply the human's decisions if it waits for them,
    claim the run with the next checkpoint, then read its journal, before anything runs
    (claimed first, no other worker can add to the journal after it is read)."""
    store = agent.checkpointer
    assert store is not None
    if isinstance(resume, ResumeHandle):
        run_id, token = resume.run_id, resume.token
    elif isinstance(resume, str):
        run_id, token = resume, None
    else:
        raise ResumeError(
            f"resume needs a run id or the ResumeHandle of a result, got {type(resume).__name__}"
        )
    checkpoint = await load_checkpoint(store, run_id)
    plan = agent._plan
    log = _run_log(agent, run_id, checkpoint.version, listening)
    try:
        rs = await _claim(plan, log, checkpoint, token, decisions, allow_changed)
    except BaseException:
        log.close()  # the store keeps nothing for a run that was not resumed
        raise
    if handle is not None and handle._rs is not None and handle._rs.run_id == run_id:
        handle._ctx = handle._rs = None  # the same run, resumed from its checkpoint
        handle._pause_requested = False
    ctx = new_context(agent, plan, rs, handle, deps, listening, log)
    if rs.agent is not None:  # a handoff gave the conversation to another agent
        resumed_agent(ctx)
    if rs.trace and rs.state is not State.SUSPENDED:
        ctx.last_move = rs.trace[-1]  # a retry's backoff and a forced compaction need it
    return ctx


async def _claim(
    plan: Plan,
    log: RunLog,
    checkpoint: Checkpoint,
    token: str | None,
    decisions: Mapping[str, HumanDecision] | None,
    allow_changed: bool,
) -> RunState:
    """Check a loaded run, apply the human's decisions, claim it and read its journal."""
    run_id = log.run_id
    rs = checkpoint.state
    refuse_finished(rs, run_id, "resume")
    fingerprint = plan.definition
    if not allow_changed:
        check_definition(run_id, rs.definition, fingerprint)
    rs.definition = fingerprint
    holder(plan.parts, rs)  # a run handed off resumes under an agent this one declares
    if rs.state is State.SUSPENDED and rs.resume_token is not None:
        waiting = ResumeHandle(run_id, token or rs.resume_token, tuple(rs.human_requests), rs)
        rs = apply_decisions(waiting, decisions if decisions is not None else {})
    elif decisions or token is not None:
        raise ResumeError(
            f"run {run_id!r} does not wait for a human (it is {rs.state.value!r}, and any "
            "decisions were already recorded); resume it by its id without decisions"
        )
    await log.claim(rs, checkpoint)
    await log.read_journal()
    return rs


def _run_log(agent: RunOwner, run_id: str, version: int, listening: bool) -> RunLog:
    """The run log of ``run_id`` in ``agent``'s store, from checkpoint ``version``."""
    assert agent.checkpointer is not None
    return RunLog(
        agent.checkpointer,
        run_id,
        version=version,
        mode=agent.durability,
        unknown_outcome=agent.unknown_outcome,
        heard=listening or bool(agent._plan.hooks),
    )


def refuse_finished(rs: RunState, run_id: str, action: str) -> None:
    """Raise :class:`RunFinishedError` when the loaded run ``rs`` already ended: there is
    nothing to ``action`` (resume, abandon)."""
    if rs.state in TERMINAL:
        raise RunFinishedError(
            f"run {run_id!r} already ended ({rs.state.value}, {rs.stop_reason}); there is "
            f"nothing to {action}",
            run_id=run_id,
        )
