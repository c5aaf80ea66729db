"""The ``fsm-agent`` command line (also ``python -m fsm_agent``).

This module assembles the parser and runs one command; each command lives in its own module
(``demo``, ``run``, ``diagram``, ``check``, ``replay``, ``runs``, ``fuzz``, ``inspect``) with an
``add_arguments(parser)`` and a handler returning the exit code. What they share is in
:mod:`fsm_agent.cli.args` (the usage error, the policy reader, the argument types) and
:mod:`fsm_agent.cli.trace` (how a run is shown and recorded).

Exit codes: 0 success; 1 the work failed (a run aborted, a renderer is missing, stale diagrams);
2 a usage error (bad arguments, a missing or invalid input file), reported as one line on
stderr; 130 interrupted.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from ..errors import FsmAgentError
from . import demo, diagram, inspect, replay, run, runs
from .args import PROG, UsageError
from .check import add_check_arguments, run_check_command
from .fuzz import add_fuzz_arguments, run_fuzz_command

__all__ = ["COMMANDS", "Command", "UsageError", "build_parser", "main"]


@dataclass(frozen=True, slots=True)
class Command:
    """One sub-command: ``add_arguments`` fills its parser, ``handler`` runs it."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]


COMMANDS: list[Command] = [
    Command(
        "demo",
        "run an offline agent on a scripted model and watch it walk the machine",
        demo.add_arguments,
        demo.handle,
    ),
    Command(
        "run",
        "run an agent on a real provider (openai:, anthropic:, gemini:), streaming its answer",
        run.add_arguments,
        run.handle,
    ),
    Command(
        "diagram",
        "draw the machine as DOT, SVG, PNG or Mermaid, with a policy's numbers or a recorded run",
        diagram.add_arguments,
        diagram.handle,
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
        replay.add_arguments,
        replay.handle,
    ),
    Command(
        "runs",
        "list the runs of a checkpoint store, or show one (state, counters, last moves)",
        runs.add_arguments,
        runs.handle,
    ),
    Command(
        "fuzz",
        "fuzz the real kernel (the built-in agent, or your module:factory) against its invariants",
        add_fuzz_arguments,
        run_fuzz_command,
    ),
    Command(
        "inspect",
        "serve a local web page over a checkpoint store: runs, their path on the machine, live",
        inspect.add_arguments,
        inspect.handle,
    ),
]
"""The sub-commands, in the order ``--help`` lists them; append to add one."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {_one_line(message)} (see '{self.prog} --help')\n")

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        # argparse names the type function when it raises ValueError ("invalid _f value"):
        # say what was expected instead. An ArgumentTypeError's own sentence is kept.
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError as exc:
            if isinstance(exc.__context__, argparse.ArgumentTypeError):
                raise
            expected = _EXPECTED.get(action.type, "a valid value")
            raise argparse.ArgumentError(
                action, f"expected {expected}, not {arg_string!r}"
            ) from None


_EXPECTED: dict[object, str] = {int: "a whole number", float: "a number"}


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _version() -> str:
    from .. import __version__

    return f"{PROG} {__version__}"


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    """The argument parser of ``fsm-agent`` with one sub-parser per command."""
    parser = _Parser(
        prog=PROG,
        description="fsm_agent: an LLM agent loop that is an explicit finite-state machine.",
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in commands:
        child = sub.add_parser(command.name, help=command.help, description=command.help)
        command.add_arguments(child)
        child.set_defaults(handler=command.handler, command_parser=child)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fsm-agent`` with ``argv`` (default: the process's arguments); returns the exit
    code. A user error is one line on stderr and exit code 2; a failure the library reports
    (an :class:`~fsm_agent.errors.FsmAgentError`) is one line and exit code 1."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # the command's parser says so, pointing to the command's own --help
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    prog = f"{PROG} {args.command}"
    try:
        code: int = args.handler(args)
    except UsageError as exc:
        print(f"{prog}: error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except FsmAgentError as exc:
        print(f"{prog}: error: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    return code
