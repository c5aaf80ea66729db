"""The ``fsm-agent`` command line (also ``python -m fsm_agent``).

Commands are entries of :data:`COMMANDS`: a name, a one-line help, a function that adds the
command's arguments to its parser, and a handler that returns the exit code. Another module adds
a command by appending its :class:`Command` to that list.

Exit codes: 0 success; 1 the work failed (a run aborted, a renderer is missing, stale diagrams);
2 a usage error (bad arguments, a missing or invalid input file), reported as one line on
stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

from . import diagrams
from ._durable_cli import (
    add_replay_arguments,
    add_runs_arguments,
    read_run_path,
    run_replay_command,
    run_runs_command,
)
from ._fuzz_cli import add_fuzz_arguments, run_fuzz_command
from .checker import add_check_arguments, run_check_command
from .errors import ConfigurationError, FsmAgentError
from .events import (
    AbortedEvent,
    CompactedEvent,
    Event,
    FinalEvent,
    HookErrorEvent,
    ModelRequestEvent,
    RetryingEvent,
    StateChangedEvent,
    SuspendedEvent,
    TextDeltaEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    VerificationFailedEvent,
)
from .policy import Policy

if TYPE_CHECKING:
    from .kernel import Agent

__all__ = ["COMMANDS", "Command", "UsageError", "check_gallery", "gallery", "main", "write_gallery"]

PROG = "fsm-agent"
REGENERATE = "python -m fsm_agent diagram --write-all diagrams/"
"""The command that regenerates the checked-in diagrams."""


class UsageError(Exception):
    """A usage error found by a handler (an input file that is missing or invalid): the
    message is printed as one line and the exit code is 2."""


@dataclass(frozen=True, slots=True)
class Command:
    """One sub-command: ``add_arguments`` fills its parser, ``handler`` runs it."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


# --- shared helpers ------------------------------------------------------------------------------


def _read_policy(path: str) -> Policy:
    try:
        return Policy.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read policy file {path!r}: {exc.strerror}") from None
    except ConfigurationError as exc:
        raise UsageError(f"{path}: {exc}") from None


def _write(path: str, content: str | bytes) -> None:
    data = content.encode() if isinstance(content, str) else content
    Path(path).write_bytes(data)


class _Recorder:
    """Writes the run's recording (a header line, then its events as JSONL; see
    :mod:`fsm_agent.replay`), when a file was asked for."""

    def __init__(self, path: str | None, agent: Agent[None], prompt: str) -> None:
        from .replay import Recorder

        self.recorder: Recorder | None = None
        if path is not None:
            try:
                self.recorder = Recorder(path, agent, prompt)
            except OSError as exc:
                raise UsageError(f"cannot write {path!r}: {exc.strerror}") from None

    def write(self, event: Event) -> None:
        """Append one event."""
        if self.recorder is not None:
            self.recorder.write(event)

    def close(self) -> None:
        """Finish the file."""
        if self.recorder is not None:
            self.recorder.close()


def _call(event: ToolCallEvent) -> str:
    args = ", ".join(
        f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in event.args.items()
    )
    return f"{event.tool_name}({args})"


def _short(value: str, limit: int = 100) -> str:
    flat = " ".join(value.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class _Trace:
    """Prints a run's events as a readable trace, one line per move or effect."""

    def __init__(self, out: TextIO, labels: Sequence[str], *, stream_text: bool) -> None:
        self.out = out
        self.labels = labels
        self.stream_text = stream_text
        self.streamed = False  # text deltas of the current model call were printed

    def show(self, event: Event) -> None:
        """Print what ``event`` says (deltas only when streaming text)."""
        line: str | None = None
        match event:
            case StateChangedEvent():
                self._end_stream()
                move = f"{event.source.value} → {event.dest.value}"
                line = f"  {move:<26} {self.labels[event.row]}"
            case ModelRequestEvent():
                self.streamed = False
            case TextDeltaEvent() if self.stream_text:
                if not self.streamed:
                    self.out.write("      model  ")
                    self.streamed = True
                self.out.write(event.text)
                self.out.flush()
            case TextEvent() if not self.streamed:
                line = f"      model  {_short(event.text)}"
            case ToolCallEvent():
                self._end_stream()
                line = f"      tool   {_call(event)}"
            case ToolResultEvent():
                mark = "error" if event.is_error else "→"
                line = f"             {mark} {_short(event.content)}"
            case RetryingEvent():
                line = (
                    f"      retry  {_short(event.error)}: retry {event.attempt} "
                    f"after {event.delay_s:.1f} s"
                )
            case VerificationFailedEvent():
                line = f"      verify rejected: {_short(event.feedback)}"
            case CompactedEvent():
                line = f"      compacted {event.messages_removed} message(s) ({event.strategy})"
            case HookErrorEvent():
                line = f"      hook   {event.hook} failed: {_short(event.error)}"
            case FinalEvent():
                self._end_stream()
                line = f"final ({event.stop_reason.value}): {event.output}"
            case AbortedEvent():
                self._end_stream()
                line = f"aborted ({event.stop_reason.value}): {event.error or ''}".rstrip(": ")
            case SuspendedEvent():
                line = f"suspended: {len(event.pending)} tool call(s) wait for a human"
        if line is not None:
            print(line, file=self.out, flush=True)

    def _end_stream(self) -> None:
        if self.streamed:
            self.out.write("\n")
            self.streamed = False


async def _drive(events: AsyncIterator[Event], trace: _Trace, recorder: _Recorder) -> list[Event]:
    seen: list[Event] = []
    try:
        async for event in events:
            seen.append(event)
            recorder.write(event)
            trace.show(event)
    finally:
        recorder.close()
    return seen


def _labels(policy: Policy, *, verifier: bool) -> list[str]:
    scope = diagrams.Scope.of(policy, verifier=verifier)
    return [edge.label for edge in diagrams.plan(scope=scope).edges]


def _ended_ok(events: Sequence[Event]) -> bool:
    return bool(events) and isinstance(events[-1], FinalEvent)


# --- demo ----------------------------------------------------------------------------------------

_DIAGRAM_SUFFIXES = (".svg", ".png", ".dot", ".gv", ".mmd")


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--record",
        metavar="FILE",
        help="write the run's recording to FILE (JSONL; 'fsm-agent replay FILE' re-runs it)",
    )
    parser.add_argument(
        "--diagram",
        metavar="FILE",
        default="fsm-agent-demo.svg",
        help="where to draw the machine with the run on it; the suffix picks the format "
        "(.svg, .png, .dot, .mmd; default: %(default)s)",
    )
    parser.add_argument("--no-diagram", action="store_true", help="do not write a diagram")


def _demo(args: argparse.Namespace) -> int:
    from ._demo import DEMO_POLICY, DEMO_PROMPT, demo_agent

    suffix = Path(args.diagram).suffix.lower()
    if not args.no_diagram and suffix not in _DIAGRAM_SUFFIXES:
        raise UsageError(f"--diagram: unknown suffix {suffix!r}; use one of {_DIAGRAM_SUFFIXES}")
    print("An offline agent on a scripted model: no network, no API key.")
    print(f"task: {DEMO_PROMPT}\n")
    trace = _Trace(sys.stdout, _labels(DEMO_POLICY, verifier=True), stream_text=False)
    agent = demo_agent()
    recorder = _Recorder(args.record, agent, DEMO_PROMPT)
    events = asyncio.run(_drive(agent.run_stream(DEMO_PROMPT), trace, recorder))
    if args.record:
        print(f"\nevents recorded in {args.record}")
    if not args.no_diagram:
        run = diagrams.RunPath.from_events(events)
        drawing = diagrams.plan(
            scope=diagrams.Scope.of(DEMO_POLICY, verifier=True),
            run=run,
            title="fsm_agent: the demo run",
        )
        path = _write_diagram(drawing, args.diagram)
        print(f"the machine with this run drawn on it: {path}")
    return 0 if _ended_ok(events) else 1


def _write_diagram(drawing: diagrams.Plan, path: str) -> str:
    """Write ``drawing`` in the format of ``path``'s suffix; without Graphviz, write the DOT
    next to it (and say so) instead of failing the demo."""
    suffix = Path(path).suffix.lower()
    if suffix == ".mmd":
        _write(path, diagrams.to_mermaid(drawing))
        return path
    dot = diagrams.to_dot(drawing)
    if suffix in (".dot", ".gv"):
        _write(path, dot)
        return path
    try:
        _write(path, diagrams.render(dot, "png" if suffix == ".png" else "svg"))
    except diagrams.RenderingUnavailableError as exc:
        fallback = str(Path(path).with_suffix(".dot"))
        _write(fallback, dot)
        print(f"note: {exc}; wrote the DOT text instead", file=sys.stderr)
        return fallback
    return path


# --- run -----------------------------------------------------------------------------------------


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", help="the task for the agent")
    parser.add_argument(
        "--model",
        default=os.environ.get("FSM_AGENT_MODEL"),
        help="provider:model, e.g. openai:gpt-4o-mini, anthropic:claude-3-5-haiku-latest, "
        "gemini:gemini-2.0-flash (default: $FSM_AGENT_MODEL); the API key comes from the "
        "provider's usual environment variable",
    )
    parser.add_argument(
        "--base-url", help="the provider's base URL (e.g. a local OpenAI-compatible server)"
    )
    parser.add_argument("--system", help="the system prompt")
    parser.add_argument("--policy", metavar="FILE", help="a policy as JSON")
    parser.add_argument("--no-tools", action="store_true", help="offer the model no tools")
    parser.add_argument(
        "--record",
        metavar="FILE",
        help="write the run's recording to FILE (JSONL; 'fsm-agent replay FILE' re-runs it)",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="print only the answer, not the moves"
    )


def _run(args: argparse.Namespace) -> int:
    from ._demo import DEMO_TOOLS
    from .kernel import Agent
    from .providers import infer_model

    if not args.model:
        raise UsageError("no model: pass --model provider:model or set FSM_AGENT_MODEL")
    policy = Policy() if args.policy is None else _read_policy(args.policy)
    try:
        model = infer_model(args.model, base_url=args.base_url)
        agent: Agent[None] = Agent(
            model,
            tools=() if args.no_tools else DEMO_TOOLS,
            system_prompt=args.system,
            policy=policy,
        )
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None
    out = open(os.devnull, "w", encoding="utf-8") if args.quiet else sys.stdout  # noqa: SIM115
    trace = _Trace(out, _labels(policy, verifier=False), stream_text=True)
    try:
        recorder = _Recorder(args.record, agent, args.prompt)
        events = asyncio.run(_drive(agent.run_stream(args.prompt), trace, recorder))
    finally:
        if out is not sys.stdout:
            out.close()
    last = events[-1] if events else None
    if args.quiet and isinstance(last, FinalEvent):
        print(last.output)
    if isinstance(last, AbortedEvent):
        print(f"{PROG}: run aborted ({last.stop_reason.value}): {last.error}", file=sys.stderr)
    return 0 if _ended_ok(events) else 1


# --- diagram -------------------------------------------------------------------------------------

_FORMATS = ("dot", "svg", "png", "mermaid")


def _diagram_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=_FORMATS,
        help="output format (default: from the -o suffix, else dot)",
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="a policy as JSON: fill the guards with its numbers, grey what it makes unreachable",
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
        "--trace",
        metavar="RUN",
        help="draw a run on the machine: a recording or JSONL event trace (--record FILE), or a "
        "stored run as STORE#RUN_ID (e.g. sqlite:///runs.db#run_42)",
    )
    parser.add_argument(
        "--write-all",
        metavar="DIR",
        help="write the checked-in diagrams (agent.dot, .mmd, .svg, demo-run.svg) to DIR",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="with --write-all: only check that DIR is up to date (exit 1 when stale)",
    )


def _format_of(args: argparse.Namespace) -> str:
    if args.format is not None:
        return str(args.format)
    if args.output is None:
        return "dot"
    by_suffix = {".dot": "dot", ".gv": "dot", ".svg": "svg", ".png": "png", ".mmd": "mermaid"}
    suffix = Path(args.output).suffix.lower()
    if suffix not in by_suffix:
        raise UsageError(f"cannot tell the format from {args.output!r}: pass --format")
    return by_suffix[suffix]


def _diagram(args: argparse.Namespace) -> int:
    if args.write_all is not None:
        others = [args.format, args.output, args.policy, args.trace]
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
    scope = None
    title = "fsm_agent"
    if args.policy is not None:
        policy = _read_policy(args.policy)
        scope = diagrams.Scope.of(
            policy, verifier=args.verifier, stop_conditions=args.stop_conditions
        )
        title += f": policy {Path(args.policy).name}"
    run = None
    if args.trace is not None:
        run, name = read_run_path(args.trace)
        title += f": run {Path(name).name}"
    drawing = diagrams.plan(scope=scope, run=run, title=title)
    content: str | bytes
    if fmt == "mermaid":
        content = diagrams.to_mermaid(drawing)
    elif fmt == "dot":
        content = diagrams.to_dot(drawing)
    else:
        content = diagrams.render(diagrams.to_dot(drawing), "png" if fmt == "png" else "svg")
    if args.output is None:
        sys.stdout.write(content if isinstance(content, str) else content.decode())
    else:
        _write(args.output, content)
    return 0


def gallery() -> dict[str, str]:
    """The checked-in diagrams, by file name: the text of ``.dot``/``.mmd`` files, and for each
    ``.svg`` the DOT it is rendered from (the demo run drawn on the demo's machine)."""
    from ._demo import DEMO_POLICY, demo_events

    async def collect() -> list[Event]:
        return [event async for event in demo_events()]

    run = diagrams.RunPath.from_events(asyncio.run(collect()))
    demo = diagrams.plan(
        scope=diagrams.Scope.of(DEMO_POLICY, verifier=True),
        run=run,
        title="fsm_agent: the demo run",
    )
    dot = diagrams.to_dot()
    return {
        "agent.dot": dot,
        "agent.mmd": diagrams.to_mermaid(),
        "agent.svg": dot,
        "demo-run.svg": diagrams.to_dot(demo),
    }


def write_gallery(directory: str | os.PathLike[str]) -> list[str]:
    """Write :func:`gallery` to ``directory``, rendering the SVGs; returns the file names."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    for name, source in gallery().items():
        if name.endswith(".svg"):
            (target / name).write_bytes(diagrams.stamp_svg(diagrams.render(source), source))
        else:
            (target / name).write_text(source, encoding="utf-8")
    return sorted(gallery())


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
    for name in write_gallery(directory):
        print(Path(directory) / name)
    return 0


# --- the command table ---------------------------------------------------------------------------

COMMANDS: list[Command] = [
    Command(
        "demo",
        "run an offline agent on a scripted model and watch it walk the machine",
        _demo_arguments,
        _demo,
    ),
    Command(
        "run",
        "run an agent on a real provider (openai:, anthropic:, gemini:), streaming its answer",
        _run_arguments,
        _run,
    ),
    Command(
        "diagram",
        "draw the machine as DOT, SVG, PNG or Mermaid, with a policy's numbers or a recorded run",
        _diagram_arguments,
        _diagram,
    ),
    Command(
        "check",
        "prove a policy terminates within its bounds (exhaustive bounded model check)",
        add_check_arguments,
        run_check_command,
    ),
    Command(
        "replay",
        "re-run a recording with no network; exit 1 where it diverges from what was recorded",
        add_replay_arguments,
        run_replay_command,
    ),
    Command(
        "runs",
        "list the runs of a checkpoint store, or show one (state, counters, last moves)",
        add_runs_arguments,
        run_runs_command,
    ),
    Command(
        "fuzz",
        "fuzz the real kernel (the built-in agent, or your module:factory) against DESIGN §8",
        add_fuzz_arguments,
        run_fuzz_command,
    ),
]
"""The sub-commands, in the order ``--help`` lists them; append to add one."""


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    """The argument parser of ``fsm-agent`` with one sub-parser per command."""
    parser = _Parser(
        prog=PROG,
        description="fsm_agent: an LLM agent loop that is an explicit finite-state machine.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in commands:
        child = sub.add_parser(command.name, help=command.help, description=command.help)
        command.add_arguments(child)
        child.set_defaults(handler=command.handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fsm-agent`` with ``argv`` (default: the process's arguments); returns the exit
    code."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")
    args = build_parser().parse_args(argv)
    prog = f"{PROG} {args.command}"
    try:
        code: int = args.handler(args)
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except FsmAgentError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    return code
