"""The ``replay`` and ``runs`` commands, and reading a run to draw from a file or a store."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from . import diagrams
from .errors import CheckpointError, UnknownRunError
from .events import AbortedEvent, Event, FinalEvent, StateChangedEvent
from .machine import Move
from .persistence import Checkpointer, open_checkpointer
from .policy import Policy
from .replay import compare as compare_events
from .replay import is_recording, read_recording, replay_stream
from .table import State

if TYPE_CHECKING:
    from .cli import _Trace

__all__ = [
    "add_replay_arguments",
    "add_runs_arguments",
    "read_run_path",
    "run_replay_command",
    "run_runs_command",
]

_STORE_PREFIXES = ("sqlite:///", "postgresql://", "postgres://")


def _usage_error(message: str) -> Exception:
    from .cli import UsageError

    return UsageError(message)


def _open(target: str) -> Checkpointer:
    try:
        return open_checkpointer(target)
    except CheckpointError as exc:
        raise _usage_error(f"cannot open {target!r}: {exc}") from None


def events_of(run_id: str, trace: list[Move], state: State) -> list[Event]:
    """The ``state_changed`` events of a stored trace (and its ending), as a run emitted them."""
    events: list[Event] = [
        StateChangedEvent(
            run_id=run_id,
            source=m.source,
            outcome=m.outcome,
            dest=m.dest,
            row=m.row,
            stop_reason=m.stop,
        )
        for m in trace
    ]
    stop = next((m.stop for m in reversed(trace) if m.stop is not None), None)
    if state is State.DONE and stop is not None:
        events.append(FinalEvent(run_id=run_id, output="", stop_reason=stop))
    elif state is State.ABORTED and stop is not None:
        events.append(AbortedEvent(run_id=run_id, stop_reason=stop))
    return events


def read_run_path(target: str) -> tuple[diagrams.RunPath, str]:
    """The walk of the run ``target`` names, and a name for the title: a stored run
    (``sqlite:///PATH#RUN_ID``, ``postgresql://…#RUN_ID``), a recording, or an event trace."""
    if target.startswith(_STORE_PREFIXES):
        store_url, _, run_id = target.rpartition("#")
        if not store_url or not run_id:
            raise _usage_error(f"--trace {target!r}: name the run as STORE#RUN_ID")
        store = _open(store_url)
        try:
            state = store.load(run_id).state
        except UnknownRunError as exc:
            raise _usage_error(str(exc)) from None
        finally:
            store.close()
        return diagrams.RunPath.from_events(events_of(run_id, state.trace, state.state)), run_id
    try:
        if is_recording(target):
            return diagrams.RunPath.from_events(read_recording(target).events), target
        return diagrams.read_trace(target), target
    except OSError as exc:
        raise _usage_error(f"cannot read trace {target!r}: {exc.strerror}") from None
    except diagrams.TraceError as exc:
        raise _usage_error(str(exc)) from None


# --- replay ---------------------------------------------------------------------------------------


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``fsm-agent replay``."""
    parser.add_argument("file", help="a recording (written by --record)")
    parser.add_argument(
        "--policy", metavar="FILE", help="replay under this policy (JSON) instead of the recorded"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the verdict")


def run_replay_command(args: argparse.Namespace) -> int:
    """Replay a recording; exit 1 when the replay diverges from it."""
    from .cli import _labels, _read_policy, _Trace

    try:
        recording = read_recording(args.file)
    except OSError as exc:
        raise _usage_error(f"cannot read {args.file!r}: {exc.strerror}") from None
    except diagrams.TraceError as exc:
        raise _usage_error(str(exc)) from None
    policy: Policy | None = None if args.policy is None else _read_policy(args.policy)
    shown = policy or recording.header.policy
    trace = _Trace(
        sys.stdout, _labels(shown, verifier=recording.header.verifier), stream_text=False
    )
    events = asyncio.run(
        _collect(replay_stream(recording, policy=policy), None if args.quiet else trace)
    )
    divergence = compare_events(recording, events)
    if divergence is None:
        print(f"replay matches the recording ({len(recording.events)} events)")
        return 0
    print(f"{args.file}: {divergence}", file=sys.stderr)
    return 1


async def _collect(events: AsyncIterator[Event], trace: _Trace | None) -> list[Event]:
    seen: list[Event] = []
    async for event in events:
        seen.append(event)
        if trace is not None:
            trace.show(event)
    return seen


# --- runs -----------------------------------------------------------------------------------------


def add_runs_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``fsm-agent runs``."""
    parser.add_argument("action", choices=("list", "show"), help="list the runs, or show one")
    parser.add_argument("run_id", nargs="?", help="with show: the run")
    parser.add_argument(
        "--db",
        required=True,
        metavar="STORE",
        help="the checkpoint store: a SQLite path, sqlite:///PATH or postgresql://…",
    )
    parser.add_argument(
        "--last", type=int, default=10, metavar="N", help="with show: the last N moves and calls"
    )


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


def run_runs_command(args: argparse.Namespace) -> int:
    """List the runs of a store, or show one."""
    if args.action == "show" and not args.run_id:
        raise _usage_error("runs show needs a RUN_ID")
    if args.action == "list" and args.run_id:
        raise _usage_error("runs list takes no RUN_ID")
    store = _open(args.db)
    try:
        if args.action == "list":
            _list(store)
        else:
            _show(store, args.run_id, max(0, args.last))
    except UnknownRunError as exc:
        raise _usage_error(str(exc)) from None
    finally:
        store.close()
    return 0


def _list(store: Checkpointer) -> None:
    runs = store.runs()
    if not runs:
        print("no runs")
        return
    print(f"{'run id':<40} {'state':<11} {'stop reason':<16} {'steps':>5} {'ckpts':>5}  updated")
    for run in runs:
        stop = run.stop_reason.value if run.stop_reason else "-"
        print(
            f"{run.run_id:<40} {run.state.value:<11} {stop:<16} {run.steps:>5} "
            f"{run.version:>5}  {_when(run.updated_at)}"
        )


def _show(store: Checkpointer, run_id: str, last: int) -> None:
    checkpoint = store.load(run_id)
    rs = checkpoint.state
    print(f"run        {rs.run_id}")
    print(f"state      {rs.state.value}")
    print(f"stop       {rs.stop_reason.value if rs.stop_reason else '-'}")
    print(f"checkpoint {checkpoint.version} at {_when(checkpoint.saved_at)}")
    counters = ", ".join(f"{name}={value}" for name, value in rs.counters._asdict().items())
    print(f"counters   {counters}")
    print(f"calls      model={rs.model_calls} tools={rs.tool_executions}")
    usage = rs.usage
    print(
        f"usage      requests={usage.requests} input={usage.input_tokens} "
        f"output={usage.output_tokens}"
    )
    print(f"messages   {len(rs.messages)}")
    if rs.output is not None:
        print(f"output     {rs.output}")
    if rs.error is not None:
        print(f"error      {rs.error}")
    for request in rs.human_requests:
        print(f"waiting    {request.kind} for {request.call.name} ({request.call.id})")
    if last:
        print(f"last moves ({min(last, len(rs.trace))} of {len(rs.trace)}):")
        for move in rs.trace[-last:]:
            stop = f"  [{move.stop.value}]" if move.stop is not None else ""
            print(f"  {move.source.value} --{move.outcome.value}--> {move.dest.value}{stop}")
        effects = list(store.effects(run_id).values())
        if effects:
            print(f"last calls ({min(last, len(effects))} of {len(effects)}):")
            for record in effects[-last:]:
                status = "intent only (outcome unknown)" if record.result is None else "recorded"
                print(f"  {run_id}/{record.key}: {status}")
