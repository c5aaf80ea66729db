"""The worker side of test_durable: a DBOS worker process serving fsm_agent runs.

Usage: ``python dbos_worker.py URL EXECUTOR_ID [--queue NAME --concurrency N
--worker-concurrency N]``. It registers the test agents, launches DBOS on the system database
at ``URL`` (recovering the pending runs of ``EXECUTOR_ID``), declares the queue when asked,
prints ``ready`` and serves until SIGTERM (or SIGKILL, which is the point).

The outside world is the log file named by ``FSM_DBOS_LOG``: every model call and every tool
effect appends one line to it, and lines survive the kills. ``FSM_DBOS_SLOW_CALL=N`` makes the
N-th model call of a run (1-based) take a second, a window in which the test kills the worker.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from pathlib import Path

from dbos import DBOS, DBOSConfig

from fsm_agent import Agent, ModelRequest, ModelResponse, Policy, Role, ToolContext, tool
from fsm_agent.durable import declare_queue, register_agent
from fsm_agent.testing import Turn, text, tool_call

APP_VERSION = "fsm-agent-tests-1"  # every worker the same: they recover each other's runs
STEPS = 4  # tool calls of the "steps" agent


def note(line: str) -> None:
    """Append one line to the shared log (one write: lines of concurrent runs never mix)."""
    fd = os.open(os.environ["FSM_DBOS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


class ByTurnModel:
    """Plays ``turns[k]`` when the request holds k assistant messages. A replayed workflow
    does not call the model for recorded steps, so the script position must come from the
    request, not from a count of calls (as ScriptedModel's does)."""

    def __init__(self, turns: list[Turn]) -> None:
        self.turns = turns

    @property
    def name(self) -> str:
        return "by-turn"

    @property
    def context_window(self) -> int | None:
        return None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        turn = sum(1 for m in request.messages if m.role is Role.ASSISTANT)
        note(f"model {turn}")
        if str(turn + 1) == os.environ.get("FSM_DBOS_SLOW_CALL"):
            await asyncio.sleep(1.0)
        response = self.turns[turn]
        assert isinstance(response, ModelResponse)
        return response


class InFlight:
    """Counts the runs this process is driving right now (the queue's worker_concurrency)."""

    now = 0

    def before_run(self, *, run_state: object, **_: object) -> None:
        InFlight.now += 1

    def after_run(self, *, result: object, run_state: object, **_: object) -> None:
        InFlight.now -= 1


@tool
def record(ctx: ToolContext[None], n: int) -> str:
    """Record that step ``n`` took effect (with the number of runs in flight here)."""
    note(f"tool {ctx.run_id} {n} {InFlight.now}")
    return f"recorded {n}"


@tool(needs_approval=True)
def transfer(ctx: ToolContext[None], amount: int) -> str:
    """Move money (a human approves it first)."""
    note(f"transfer {ctx.run_id} {amount}")
    return f"moved {amount}"


def steps_script() -> list[Turn]:
    """``STEPS`` tool calls, one per turn, then the answer."""
    calls = [tool_call("record", {"n": n}, id=f"c{n}") for n in range(1, STEPS + 1)]
    return [*calls, text("all recorded")]


def steps_agent() -> Agent[None]:
    """A multi-step run: every step a model call and a tool call with an effect."""
    return Agent(ByTurnModel(steps_script()), tools=[record], policy=Policy(max_steps=10))


def approval_agent() -> Agent[None]:
    """A run that suspends for a human's approval of ``transfer``."""
    script = [tool_call("transfer", {"amount": 7}, id="t1"), text("transferred")]
    return Agent(ByTurnModel(script), tools=[transfer], policy=Policy(max_steps=5))


def bulk_agent() -> Agent[None]:
    """A short run for the queue: one tool call, then the answer."""
    script = [tool_call("record", {"n": 1}, id="c1"), text("done")]
    return Agent(
        ByTurnModel(script), tools=[record], policy=Policy(max_steps=5), hooks=[InFlight()]
    )


def register() -> None:
    """Register the test agents (before DBOS.launch)."""
    register_agent("steps", steps_agent)
    register_agent("approval", approval_agent)
    register_agent("bulk", bulk_agent)


def config(url: str, executor_id: str) -> DBOSConfig:
    """The workers' DBOS configuration: quiet, fast polling, one application version."""
    return {
        "name": "fsm-agent-tests",
        "system_database_url": url,
        "executor_id": executor_id,
        "application_version": APP_VERSION,
        "log_level": "WARNING",
        "notification_listener_polling_interval_sec": 0.05,
    }


async def serve(args: argparse.Namespace) -> None:
    register()
    DBOS(config=config(args.url, args.executor_id))
    DBOS.launch()
    if args.queue is not None:
        await declare_queue(
            args.queue,
            concurrency=args.concurrency,
            worker_concurrency=args.worker_concurrency,
            polling_interval_s=0.05,
        )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    DBOS.destroy()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("executor_id")
    parser.add_argument("--queue")
    parser.add_argument("--concurrency", type=int)
    parser.add_argument("--worker-concurrency", type=int)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    Path(os.environ["FSM_DBOS_LOG"]).touch()
    main()
