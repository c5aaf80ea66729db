"""``fsm-agent runs``: list the runs of a checkpoint store, show one, abandon one, or fork one.
What a run holds (its output, its error) is printed through the library's one redaction, as the
inspector shows it: a key an answer quoted is not printed."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterator
from datetime import UTC, datetime

from ..errors import CheckpointError, ConfigurationError, InvalidInputError, ResumeError
from ..kernel.agent import Agent
from ..kernel.fork import fork_run
from ..kernel.run import new_run_id
from ..persistence import Checkpointer, RunSummary, open_checkpointer
from ..persistence.lineage import by_origin
from ..redaction import redact, secret_values
from ..values.messages import ModelRequest, ModelResponse
from .args import UsageError, add_store_option, mask_url, nonnegative_int, the_store

__all__ = ["add_arguments", "handle"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``fsm-agent runs``."""
    parser.add_argument(
        "action",
        choices=("list", "show", "abandon", "fork"),
        help="list the runs, show one, abandon one (it ends for good: no resume), or fork one "
        "(a new run from one of its saved moves, to resume with the agent)",
    )
    parser.add_argument("run_id", nargs="?", help="with show, abandon and fork: the run")
    parser.add_argument(
        "--at",
        type=nonnegative_int,
        metavar="MOVE",
        help="with fork: the move to start from (the state saved after it; default: the latest)",
    )
    parser.add_argument(
        "--reason",
        default="abandoned by an operator",
        metavar="TEXT",
        help="with abandon: why (kept as the run's error)",
    )
    add_store_option(parser, "--db")
    parser.add_argument(
        "--last",
        type=nonnegative_int,
        default=10,
        metavar="N",
        help="with show: the last N moves and calls (default: %(default)s; 0 for none)",
    )


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


def handle(args: argparse.Namespace) -> int:
    """List the runs of a store, or show one."""
    if args.action in ("show", "abandon", "fork") and not args.run_id:
        raise UsageError(f"runs {args.action} needs a RUN_ID")
    if args.action == "list" and args.run_id:
        raise UsageError("runs list takes no RUN_ID")
    given = the_store(args.store)
    try:
        store = open_checkpointer(given)
    except CheckpointError as exc:
        raise UsageError(mask_url(given, f"cannot open {given!r}: {exc}")) from None
    try:
        if args.action == "list":
            _list(store)
        elif args.action == "show":
            _show(store, args.run_id, args.last)
        elif args.action == "fork":
            _fork(store, args.run_id, args.at)
        else:
            _abandon(store, args.run_id, args.reason)
    except (ResumeError, InvalidInputError) as exc:  # an unknown run, one that ended, no move
        raise UsageError(str(exc)) from None
    finally:
        store.close()
    return 0


class _NoModel:
    """The model of the agent that abandons a run: abandoning calls none."""

    name = "none"
    context_window = None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Never called."""
        raise ConfigurationError("abandoning a run calls no model")


def _abandon(store: Checkpointer, run_id: str, reason: str) -> None:
    result = asyncio.run(Agent(_NoModel(), checkpointer=store).abandon(run_id, reason=reason))
    print(
        redact(
            f"run {run_id} abandoned: {result.state.value} ({result.stop_reason}); {result.error}"
        )
    )


def _fork(store: Checkpointer, run_id: str, at: int | None) -> None:
    state = asyncio.run(fork_run(store, run_id, new_run_id(), at=at))
    print(
        f"run {state.run_id} forked from {run_id} at move {state.forked_at} "
        f"({state.state.value}); continue it with agent.resume({state.run_id!r})"
    )


def _list(store: Checkpointer) -> None:
    runs = store.runs()
    if not runs:
        print("no runs")
        return
    print(
        f"{'run id':<40} {'state':<11} {'stop reason':<16} {'steps':>5} {'ckpts':>5}  updated"
        "               from"
    )
    unreadable = 0
    for run, depth, origin in _grouped(store, runs):
        state = run.state.value if run.state is not None else "?"
        stop = run.stop_reason.value if run.stop_reason else ("?" if run.problem else "-")
        name = f"{'  ' * (depth - 1)}└ {run.run_id}" if depth else run.run_id
        print(
            f"{name:<40} {state:<11} {stop:<16} {run.steps:>5} "
            f"{run.version:>5}  {_when(run.updated_at)}  {origin}".rstrip()
        )
        if run.problem is not None:
            unreadable += 1
            print(f"  ? {run.problem}")
    if unreadable:
        print(
            f"warning: {unreadable} run(s) marked ? hold values this fsm_agent does not know; "
            "upgrade fsm_agent to read them",
            file=sys.stderr,
        )


def _grouped(store: Checkpointer, runs: list[RunSummary]) -> Iterator[tuple[RunSummary, int, str]]:
    """The runs in the store's order, each child (of an agent tool's call) and each fork listed
    under the run it came from, with its depth there and where it came from."""
    came_from: dict[str, str] = {}  # by run id: the run it came from
    said: dict[str, str] = {}  # by run id: how it came from there
    for run in runs:
        if run.problem is None:
            try:
                rs = store.load(run.run_id).state
            except Exception:  # gone since listed, or unreadable: listed as it is
                continue
            if rs.parent_run_id is not None:
                came_from[run.run_id] = rs.parent_run_id
                said[run.run_id] = f"child of {rs.parent_run_id} (call {rs.parent_call_id})"
            elif rs.forked_from is not None:
                came_from[run.run_id] = rs.forked_from
                said[run.run_id] = f"fork of {rs.forked_from} at move {rs.forked_at}"
    for run, depth in by_origin(
        runs, lambda run: run.run_id, lambda run: came_from.get(run.run_id)
    ):
        yield run, depth, said.get(run.run_id, "")


def _show(store: Checkpointer, run_id: str, last: int) -> None:
    secrets = secret_values()

    def show(line: str) -> None:  # every line: outputs, errors, even ids are the run's data
        print(redact(line, secrets))

    checkpoint = store.load(run_id)
    rs = checkpoint.state
    show(f"run        {rs.run_id}")
    show(f"state      {rs.state.value}")
    show(f"stop       {rs.stop_reason.value if rs.stop_reason else '-'}")
    show(f"checkpoint {checkpoint.version} at {_when(checkpoint.saved_at)}")
    counters = ", ".join(f"{name}={value}" for name, value in rs.counters._asdict().items())
    show(f"counters   {counters}")
    show(f"calls      model={rs.model_calls} tools={rs.tool_executions}")
    usage = rs.usage
    show(
        f"usage      requests={usage.requests} input={usage.input_tokens} "
        f"output={usage.output_tokens}"
    )
    show(f"messages   {len(rs.messages)}")
    if rs.output is not None:
        show(f"output     {rs.output}")
    if rs.error is not None:
        show(f"error      {rs.error}")
    for request in rs.human_requests:
        show(f"waiting    {request.kind} for {request.call.name} ({request.call.id})")
    if last:
        show(f"last moves ({min(last, len(rs.trace))} of {len(rs.trace)}):")
        for move in rs.trace[-last:]:
            stop = f"  [{move.stop.value}]" if move.stop is not None else ""
            show(f"  {move.source.value} --{move.outcome.value}--> {move.dest.value}{stop}")
        effects = list(store.effects(run_id).values())
        if effects:
            show(f"last calls ({min(last, len(effects))} of {len(effects)}):")
            for record in effects[-last:]:
                status = "intent only (outcome unknown)" if record.result is None else "recorded"
                show(f"  {run_id}/{record.key}: {status}")
