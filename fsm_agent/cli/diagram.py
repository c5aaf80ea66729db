"""``fsm-agent diagram``: the machine as DOT, SVG, PNG or Mermaid, with a policy's numbers or a
recorded run drawn on it; and the checked-in diagrams (``--write-all``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import diagrams
from ..diagrams.phases import phases_dot, phases_mermaid
from ..errors import CheckpointError, UnknownRunError
from ..machine.agent_machine import Move
from ..machine.table import NON_TERMINAL, State
from ..phases import PhaseChange
from ..replay import is_recording, read_recording
from ..run.events import (
    AbortedEvent,
    Event,
    FinalEvent,
    PhaseChangedEvent,
    StateChangedEvent,
    event_adapter,
)
from ..run.state import RunState
from .args import (
    PROG,
    STORE_ENV,
    UsageError,
    add_store_option,
    existing_store,
    load_agent,
    load_phases,
    mask_url,
    positive_int,
    read_policy,
    reading,
    store_url,
    writable_file,
    write_output,
)

__all__ = [
    "REGENERATE",
    "RecordedRun",
    "add_arguments",
    "check_gallery",
    "events_of",
    "gallery",
    "handle",
    "read_run",
    "write_gallery",
]

REGENERATE = "python -m fsm_agent diagram --write-all diagrams/"
"""The command that regenerates the checked-in diagrams."""

_FORMATS = ("dot", "svg", "png", "mermaid")
_LEVELS = ("overview", "full")
_FORMAT_OF_SUFFIX = {".dot": "dot", ".gv": "dot", ".svg": "svg", ".png": "png", ".mmd": "mermaid"}
_STORE_PREFIXES = ("sqlite:///", "postgresql://", "postgres://")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``fsm-agent diagram``."""
    parser.add_argument(
        "--format",
        choices=_FORMATS,
        help="output format (default: from the -o suffix, else dot)",
    )
    parser.add_argument(
        "-o", "--output", metavar="FILE", type=writable_file, help="write here (default: stdout)"
    )
    parser.add_argument(
        "--level",
        choices=_LEVELS,
        help="overview: one edge per pair of states (the default); full: every row",
    )
    parser.add_argument(
        "--state",
        choices=[state.value for state in NON_TERMINAL],
        help="draw the detail of one state: its rows in order, with guards, stop reasons and "
        "counter updates",
    )
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="a policy as JSON: fill the guards with its numbers, grey what it makes unreachable "
        "(default: the recorded run's policy with --trace, else the default policy)",
    )
    parser.add_argument(
        "--verifier", action="store_true", help="with --policy: the agent has a verifier"
    )
    parser.add_argument(
        "--stop-conditions",
        action="store_true",
        help="with --policy: the agent has stop conditions",
    )
    parser.add_argument(
        "--models",
        metavar="N",
        type=positive_int,
        default=1,
        help="with --policy: the agent's model is a fallback chain of N models (default 1)",
    )
    parser.add_argument(
        "--trace",
        metavar="RUN",
        help="draw a run on the machine: a recording or JSONL event trace (--record FILE), or a "
        "stored run's RUN_ID, in the store --store names (STORE#RUN_ID, e.g. "
        "sqlite:///runs.db#run_42, is an older spelling of both)",
    )
    add_store_option(parser, purpose=" that holds the run --trace RUN_ID names")
    parser.add_argument(
        "--phases",
        metavar="MODULE:ATTR",
        help="draw a phase table (a fsm_agent.Phases) with the loop beside it (dot or mermaid; "
        "with --trace, a recording or event trace: the run's path through the phases)",
    )
    parser.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="draw an agent for its policy, with a box for each agent it uses as a tool, linked "
        "to that child's drawing (with -o FILE, written beside it as FILE's stem-TOOL)",
    )
    parser.add_argument(
        "--write-all",
        metavar="DIR",
        help="write the checked-in diagrams (agent.dot, .mmd, .svg, demo-run.svg, "
        "state-NAME.svg) to DIR",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="with --write-all: only check that DIR is up to date (exit 1 when stale)",
    )


def handle(args: argparse.Namespace) -> int:
    """Draw the machine; 1 when ``--write-all --check`` finds stale diagrams."""
    args.trace = _trace_target(args.trace, args.store)
    if args.write_all is not None:
        others = [args.format, args.output, args.policy, args.trace, args.level, args.state]
        if any(value is not None for value in others) or args.verifier or args.stop_conditions:
            raise UsageError("--write-all takes no other option than --check")
        return _write_all(args.write_all, check=args.check)
    if args.check:
        raise UsageError("--check needs --write-all DIR")
    if (args.verifier or args.stop_conditions) and args.policy is None:
        raise UsageError("--verifier and --stop-conditions describe an agent: add --policy FILE")
    fmt = _format_of(args)
    if fmt == "png" and args.output is None:
        raise UsageError("PNG is binary: pass -o FILE")
    if args.agent is not None:
        others = [args.policy, args.trace, args.level, args.state, args.phases]
        if any(value is not None for value in others) or args.verifier or args.stop_conditions:
            raise UsageError("--agent draws the agent as it is built: drop the other options")
        return _draw_agent(args, fmt)
    if args.phases is not None:
        if args.level is not None or args.state is not None:
            raise UsageError("--phases draws the phase table beside the loop: drop --level/--state")
        return _draw_phases(args, fmt)
    scope = None
    title = "fsm_agent"
    if args.policy is not None:
        policy = read_policy(args.policy)
        scope = diagrams.Scope.of(
            policy,
            verifier=args.verifier,
            stop_conditions=args.stop_conditions,
            models=args.models,
        )
        title += f": policy {Path(args.policy).name}"
    run = None
    if args.trace is not None and args.trace.startswith(_STORE_PREFIXES) and args.level is None:
        composed = _composed_run(args.trace, args.output, fmt, title) if args.state is None else {}
        if composed:  # a run whose agent-tool calls started child runs
            return _write_drawings(composed, fmt)
    if args.trace is not None:
        recorded = read_run(args.trace)
        run = recorded.path
        if scope is None:
            scope = recorded.scope
        title += f": run {Path(recorded.name).name}"
    drawing = diagrams.plan(scope=scope, run=run, title=title)
    return _deliver(args, _drawn(args, drawing, fmt))


def _drawn(args: argparse.Namespace, drawing: diagrams.Plan, fmt: str) -> str | bytes:
    """``drawing`` in ``fmt``: one state's detail (``--state``), the full machine
    (``--level full``) or the overview, rendered to SVG or PNG when asked."""
    content: str | bytes
    if args.state is not None:
        if args.level is not None:
            raise UsageError("--state draws one state's detail: drop --level")
        state = State(args.state)
        if fmt == "mermaid":
            content = diagrams.state_mermaid(state, drawing)
        else:
            content = diagrams.state_dot(state, drawing)
    elif args.level == "full":
        content = (diagrams.to_mermaid if fmt == "mermaid" else diagrams.to_dot)(drawing)
    elif fmt == "mermaid":
        content = diagrams.overview_mermaid(drawing)
    else:
        content = diagrams.overview_dot(drawing)
    if fmt in ("svg", "png"):
        content = diagrams.render(str(content), "png" if fmt == "png" else "svg")
    return content


def _deliver(args: argparse.Namespace, content: str | bytes) -> int:
    """Write the drawing to ``-o FILE``, else to standard output."""
    if args.output is None:
        sys.stdout.write(content if isinstance(content, str) else content.decode())
    else:
        write_output(args.output, content)
    return 0


def _draw_phases(args: argparse.Namespace, fmt: str) -> int:
    phases = load_phases(args.phases)
    path: list[PhaseChange] = []
    loop_path: list[tuple[State, State]] = []
    if args.trace is not None and args.trace.startswith(_STORE_PREFIXES):
        state = _stored_state(args.trace)
        path = list(state.phase_trace)
        loop_path = [(move.source, move.dest) for move in state.trace]
    elif args.trace is not None:
        with reading("trace"):
            events = (
                read_recording(args.trace).events
                if is_recording(args.trace)
                else [
                    event_adapter.validate_json(line)
                    for line in Path(args.trace).read_text(encoding="utf-8").splitlines()
                    if line.strip()
                ]
            )
        start = PhaseChange(source=None, dest=phases.initial, by="start", step=0, move=0)
        path = [start] + [
            PhaseChange(source=e.source, dest=e.dest, by=e.by, step=e.step, move=0)
            for e in events
            if isinstance(e, PhaseChangedEvent)
        ]
        loop_path = [(e.source, e.dest) for e in events if isinstance(e, StateChangedEvent)]
    content: str | bytes
    if fmt == "mermaid":
        content = phases_mermaid(phases, path, loop_path=loop_path)
    else:
        content = phases_dot(phases, path, loop_path=loop_path)
        if fmt != "dot":
            content = diagrams.render(content, "png" if fmt == "png" else "svg")
    return _deliver(args, content)


def _draw_agent(args: argparse.Namespace, fmt: str) -> int:
    """``--agent``: the agent's drawing, and each child's beside it when writing a file."""
    from .diagram_agent import agent_drawings

    agent = load_agent(args.agent)
    return _write_drawings(
        agent_drawings(agent, args.output, fmt, args.agent.partition(":")[2]), fmt
    )


def _write_drawings(files: dict[str | None, str], fmt: str) -> int:
    """Write each drawing to its file (``None``: standard output), in ``fmt``."""
    for file_name, source in files.items():
        content: str | bytes = source
        if fmt == "svg":  # stamped with its DOT's digest, so a checked-in copy can be checked
            content = diagrams.stamp_svg(diagrams.render(source, "svg"), source)
        elif fmt == "png":
            content = diagrams.render(source, "png")
        if file_name is None:
            sys.stdout.write(content if isinstance(content, str) else content.decode())
        else:
            write_output(file_name, content)
    return 0


def _format_of(args: argparse.Namespace) -> str:
    """The output format: ``--format``, else the ``-o`` suffix's, else DOT; the two must agree."""
    by_suffix = None
    if args.output is not None:
        by_suffix = _FORMAT_OF_SUFFIX.get(Path(args.output).suffix.lower())
    if args.format is None:
        if args.output is None:
            return "dot"
        if by_suffix is None:
            raise UsageError(f"cannot tell the format from {args.output!r}: pass --format")
        return by_suffix
    if by_suffix is not None and by_suffix != args.format:
        raise UsageError(
            f"--format {args.format} does not match {args.output!r}: change the suffix or the "
            "format"
        )
    return str(args.format)


# --- reading a run to draw --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordedRun:
    """A run read back to be drawn: its walk, a name for the title, and the scope of the agent
    that made it when the file says (a recording holds its policy; a bare trace or a stored
    run does not, and is drawn on the default machine)."""

    path: diagrams.RunPath
    name: str
    scope: diagrams.Scope | None = None


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


def read_run(target: str) -> RecordedRun:
    """The run ``target`` names: a stored run (``sqlite:///PATH#RUN_ID``,
    ``postgresql://…#RUN_ID``), a recording, or an event trace."""
    if target.startswith(_STORE_PREFIXES):
        return _read_stored_run(target)
    with reading(f"trace {target!r}"):
        if is_recording(target):
            recording = read_recording(target)
            header = recording.header
            scope = diagrams.Scope.of(header.policy, verifier=header.verifier)
            return RecordedRun(diagrams.RunPath.from_events(recording.events), target, scope)
        return RecordedRun(diagrams.read_trace(target), target)


_SQLITE_HEADER = b"SQLite format 3\x00"
_NAME_A_RUN = "name a run in it as --store STORE --trace RUN_ID (or --trace STORE#RUN_ID)"


def _trace_target(trace: str | None, store: str | None) -> str | None:
    """What ``--trace`` names, a stored run spelt ``STORE_URL#RUN_ID``: with ``--store`` it is a
    run id; else a store URL or an existing SQLite file with ``#RUN_ID``, a recording or an
    event trace, or, when no such file exists and :data:`STORE_ENV` names a store, a run id in
    that store. A store without a run is a usage error that names the form."""
    if trace is None:
        if store is not None:
            raise UsageError("--store names the store of a run to draw: add --trace RUN_ID")
        return None
    if store is not None:
        return f"{store_url(store)}#{trace}"
    if trace.startswith(_STORE_PREFIXES):
        return trace
    path, hashed, run_id = trace.rpartition("#")
    if hashed and run_id and _is_sqlite(Path(path)):
        return f"{store_url(path)}#{run_id}"
    if _is_sqlite(Path(trace)):
        raise UsageError(f"--trace {trace!r} is a checkpoint store: {_NAME_A_RUN}")
    from_env = os.environ.get(STORE_ENV, "")
    if from_env and not Path(trace).exists():
        try:
            return f"{store_url(existing_store(from_env))}#{trace}"
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"{STORE_ENV}: {exc}") from None
    return trace


def _is_sqlite(path: Path) -> bool:
    """Whether ``path`` is a SQLite database file (read by its header)."""
    try:
        with path.open("rb") as file:
            return file.read(len(_SQLITE_HEADER)) == _SQLITE_HEADER
    except OSError:
        return False


def _read_stored_run(target: str) -> RecordedRun:
    state = _stored_state(target)
    return RecordedRun(
        diagrams.RunPath.from_events(events_of(state.run_id, state.trace, state.state)),
        state.run_id,
    )


def _composed_run(target: str, name: str | None, fmt: str, title: str) -> dict[str | None, str]:
    """The drawings of the stored run ``target`` and its child runs (see
    :mod:`~fsm_agent.cli.diagram_run`); empty for a run that started none."""
    from .diagram_run import run_drawings

    runs = _stored_runs(target)
    if len(runs) == 1:
        return {}
    root = next(iter(runs))
    return run_drawings(runs, root, name, fmt, f"{title}: run {root}")


def _stored_state(target: str) -> RunState:
    """The run state ``STORE#RUN_ID`` holds."""
    return next(iter(_stored_runs(target, children=False).values()))


def _stored_runs(target: str, *, children: bool = True) -> dict[str, RunState]:
    """The run state ``STORE#RUN_ID`` holds, first, and (``children``) those of the runs its
    agent-tool calls started, theirs too, by run id."""
    from ..persistence import open_checkpointer
    from .diagram_run import child_runs_of

    url, _, run_id = target.rpartition("#")
    if not url or not run_id:
        raise UsageError(f"--trace {mask_url(target)!r} is a checkpoint store: {_NAME_A_RUN}")
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///") :]).is_file():
        raise UsageError(f"--trace: no SQLite store at {url[len('sqlite:///') :]!r}")
    try:
        store = open_checkpointer(url)
    except CheckpointError as exc:
        raise UsageError(mask_url(url, f"cannot open {url!r}: {exc}")) from None
    try:
        state = store.load(run_id).state
        return child_runs_of(store, state) if children else {run_id: state}
    except UnknownRunError as exc:
        raise UsageError(str(exc)) from None
    finally:
        store.close()


# --- the checked-in diagrams ------------------------------------------------------------------


def gallery() -> dict[str, str]:
    """The checked-in diagrams, by file name: the text of ``.dot``/``.mmd`` files, and for each
    ``.svg`` the DOT it is rendered from: the overview, the demo run drawn on it, and the
    detail of each state that has rows."""
    from .demo import demo_drawing, demo_events

    async def collect() -> list[Event]:
        return [event async for event in demo_events()]

    dot = diagrams.overview_dot()
    return {
        "agent.dot": dot,
        "agent.mmd": diagrams.overview_mermaid(),
        "agent.svg": dot,
        "demo-run.svg": diagrams.overview_dot(demo_drawing(asyncio.run(collect()))),
        **{f"state-{state.value}.svg": diagrams.state_dot(state) for state in NON_TERMINAL},
    }


def write_gallery(directory: str | os.PathLike[str]) -> list[str]:
    """Write :func:`gallery` to ``directory``, rendering the SVGs; returns the file names."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    sources = gallery()
    for name, source in sources.items():
        if name.endswith(".svg"):
            (target / name).write_bytes(diagrams.stamp_svg(diagrams.render(source), source))
        else:
            (target / name).write_text(source, encoding="utf-8")
    return sorted(sources)


def check_gallery(directory: str | os.PathLike[str]) -> list[str]:
    """The names of the files in ``directory`` that are missing or stale against
    :func:`gallery` (an SVG is stale when its stamped DOT digest differs)."""
    stale = []
    for name, source in gallery().items():
        path = Path(directory) / name
        if not path.is_file():
            stale.append(name)
        elif name.endswith(".svg"):
            if diagrams.svg_digest(path.read_bytes()) != diagrams.dot_digest(source):
                stale.append(name)
        elif path.read_text(encoding="utf-8") != source:
            stale.append(name)
    return stale


def _write_all(directory: str, *, check: bool) -> int:
    if check:
        stale = check_gallery(directory)
        if stale:
            print(
                f"{PROG}: stale diagrams in {directory}: {', '.join(stale)}; run: {REGENERATE}",
                file=sys.stderr,
            )
            return 1
        return 0
    try:
        names = write_gallery(directory)
    except OSError as exc:
        raise UsageError(f"cannot write to {directory!r}: {exc.strerror}") from None
    for name in names:
        print(Path(directory) / name)
    return 0
