"""Durable agent runs on DBOS: each model call and tool call a recorded step, runs spread over
worker processes through a queue, human decisions awaited durably (needs the ``[dbos]`` extra).

A worker process registers its agents by name, starts DBOS, and declares the queue::

    from dbos import DBOS
    from fsm_agent.durable import DurableRuns, declare_queue, register_agent

    register_agent("support", make_support_agent)  # before DBOS.launch()
    DBOS(config={"name": "agents", "system_database_url": "postgresql://…",
                 "executor_id": "worker-1", "application_version": "2026-11-22"})
    DBOS.launch()
    await declare_queue("agents", concurrency=50, worker_concurrency=8)

Any process enqueues runs, follows their events, answers their questions and reads their
results, through the launched DBOS or a ``DBOSClient``::

    from dbos import DBOSClient

    runs = DurableRuns(DBOSClient(system_database_url="postgresql://…"))
    run_id = await runs.start("support", "My order is late", queue="agents")
    async for event in runs.events(run_id): ...
    await runs.decide(run_id, {"call_1": True})  # when the run waits for a human
    result = await runs.result(run_id)  # a fsm_agent.RunResult

See ``docs/scale-out.md`` for what is recorded exactly once and what is not.

Read in order: :mod:`.steps` (model calls and tools as recorded DBOS steps), :mod:`.workflow`
(the messages a run exchanges and the workflow that drives it), then this module (the agent
registry, the queue and :class:`DurableRuns`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError, DurableRunError, InvalidInputError, MissingExtraError

try:
    from dbos import DBOS, DBOSClient, EnqueueOptions, SetWorkflowID, WorkflowHandleAsync
except ImportError:
    raise MissingExtraError("fsm_agent.durable", extra="dbos", module="dbos") from None

from ..kernel.agent import RunResult
from ..run.approval import HumanDecision
from ..run.events import Event, event_adapter
from ..run.state import RunState
from ..values.messages import Message
from .workflow import (
    AGENT_WORKFLOW,
    DECISIONS_TOPIC,
    DEFAULT_DECISION_TIMEOUT_S,
    EVENTS_STREAM,
    STATUS_EVENT,
    AgentFactory,
    DecisionMessage,
    RunRequest,
    RunStatus,
    WireDecision,
    factories,
    result_of,
    run_agent,
)

__all__ = [
    "AGENT_WORKFLOW",
    "DEFAULT_QUEUE",
    "AgentFactory",
    "DurableRuns",
    "RunStatus",
    "declare_queue",
    "register_agent",
]

DEFAULT_QUEUE = "fsm_agent"
"""The queue name :func:`declare_queue` uses when given none."""


def register_agent(name: str, factory: AgentFactory) -> None:
    """Make ``factory`` the builder of the agent called ``name`` in this process. Every worker
    registers the same names before ``DBOS.launch()``: a run is rebuilt from its factory in
    whichever worker runs or recovers it. The agent must not have a checkpointer."""
    if not isinstance(name, str) or not name:
        raise ConfigurationError("an agent's name must be non-empty text")
    if not callable(factory):
        raise ConfigurationError(f"the factory of agent {name!r} must be callable")
    factories[name] = factory


async def declare_queue(
    name: str = DEFAULT_QUEUE,
    *,
    concurrency: int | None = None,
    worker_concurrency: int | None = None,
    polling_interval_s: float = 1.0,
) -> None:
    """Declare (or update) the queue of agent runs in the system database, from a launched
    DBOS process. At most ``concurrency`` runs of it run at once over all workers, and at most
    ``worker_concurrency`` in each worker (``None``: no limit); each worker looks for work
    every ``polling_interval_s``. Workers started later find the queue in the database."""
    await DBOS.register_queue_async(
        name,
        global_concurrency=concurrency,
        worker_concurrency=worker_concurrency,
        polling_interval_sec=polling_interval_s,
    )


class DurableRuns:
    """Start, follow, decide and collect runs on DBOS, from a launched DBOS process (no
    ``client``) or from any process through a ``DBOSClient`` (which can only enqueue: pass a
    ``queue`` to :meth:`start`). ``polling_interval_s`` is how often a wait checks the
    database."""

    def __init__(self, client: DBOSClient | None = None, *, polling_interval_s: float = 0.1):
        self.client = client
        self.polling_interval_s = polling_interval_s

    async def start(
        self,
        agent: str,
        prompt: str | Message,
        *,
        run_id: str | None = None,
        history: Sequence[Message] = (),
        queue: str | None = None,
        stream_events: bool = True,
        decision_timeout_s: float = DEFAULT_DECISION_TIMEOUT_S,
    ) -> str:
        """Start a run of the agent registered as ``agent``, on ``queue`` (or at once in this
        process), and return its run id (``run_id``, or a new one). Starting an id again
        returns it without a second run. With ``stream_events`` the run's events can be read
        with :meth:`events`; a suspended run waits ``decision_timeout_s`` for decisions."""
        if isinstance(prompt, str) and not prompt.strip():
            raise InvalidInputError("the prompt is empty; pass the task as text")
        run_id = run_id or f"run_{uuid.uuid4().hex}"
        request = RunRequest(
            prompt=prompt,
            history=list(history),
            stream_events=stream_events,
            decision_timeout_s=decision_timeout_s,
        ).model_dump_json()
        if queue is not None:
            options: EnqueueOptions = {
                "queue_name": queue,
                "workflow_name": AGENT_WORKFLOW,
                "workflow_id": run_id,
            }
            if self.client is not None:
                await self.client.enqueue_async(options, agent, request)
            else:
                await DBOS.enqueue_workflow_with_options_async(options, agent, request)
        elif self.client is not None:
            raise ConfigurationError("a DBOSClient can only enqueue: pass the queue to start on")
        else:
            with SetWorkflowID(run_id):
                await DBOS.start_workflow_async(run_agent, agent, request)
        return run_id

    async def result(self, run_id: str, *, timeout_s: float | None = None) -> RunResult:
        """Wait for the run to end (or rest suspended past its decision timeout) and return
        its :class:`~fsm_agent.RunResult`. Raises :class:`~fsm_agent.DurableRunError` for an
        unknown run, a workflow that failed, or one still running after ``timeout_s``."""
        try:
            async with asyncio.timeout(timeout_s):
                handle: WorkflowHandleAsync[object]
                if self.client is not None:
                    handle = await self.client.retrieve_workflow_async(run_id)
                else:
                    handle = await DBOS.retrieve_workflow_async(run_id)
                state = await handle.get_result(polling_interval_sec=self.polling_interval_s)
        except TimeoutError:
            raise DurableRunError(
                f"run {run_id!r} did not end within {timeout_s} s", run_id=run_id
            ) from None
        except DurableRunError:
            raise
        except Exception as exc:  # DBOS's own errors (unknown id), or what the workflow raised
            raise DurableRunError(f"run {run_id!r}: {exc}", run_id=run_id) from exc
        if not isinstance(state, str):
            raise DurableRunError(
                f"run {run_id!r} is not an fsm_agent run (its workflow returned "
                f"{type(state).__name__})",
                run_id=run_id,
            )
        return result_of(RunState.model_validate_json(state))

    async def events(self, run_id: str) -> AsyncIterator[Event]:
        """The run's events from its first, as they happen, until the run ends (a suspended
        run's stream pauses until its decisions arrive). Needs ``stream_events`` at start."""
        if self.client is not None:
            batches: AsyncIterator[Any] = self.client.read_stream_async(
                run_id, EVENTS_STREAM, polling_interval_sec=self.polling_interval_s
            )
        else:
            batches = DBOS.read_stream_async(
                run_id, EVENTS_STREAM, polling_interval_sec=self.polling_interval_s
            )
        async for batch in batches:
            for item in batch:
                yield event_adapter.validate_python(item)

    async def status(self, run_id: str, *, timeout_s: float = 0.0) -> RunStatus | None:
        """The run's latest published status (it publishes one when it suspends, after
        decisions that did not fit, and when it ends), waiting up to ``timeout_s`` for the
        first; ``None`` if there is none yet."""
        if self.client is not None:
            value = await self.client.get_event_async(run_id, STATUS_EVENT, timeout_s)
        else:
            value = await DBOS.get_event_async(run_id, STATUS_EVENT, timeout_s)
        return None if value is None else RunStatus.model_validate_json(value)

    async def decide(self, run_id: str, decisions: Mapping[str, HumanDecision]) -> None:
        """Send a suspended run the human's decisions (by call id, as
        :meth:`fsm_agent.Agent.resume` takes them). They are kept until the run reads them;
        decisions that do not fit its pending calls are refused by the run (see
        :attr:`RunStatus.rejected`), which goes on waiting."""
        message = DecisionMessage(
            decisions={call_id: WireDecision.of(d) for call_id, d in decisions.items()}
        ).model_dump_json()
        if self.client is not None:
            await self.client.send_async(run_id, message, DECISIONS_TOPIC)
        else:
            await DBOS.send_async(run_id, message, DECISIONS_TOPIC)
