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
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import Any, NoReturn

from ..errors import FsmAgentError
from .args import PROG, UsageError

__all__ = ["COMMANDS", "Command", "UsageError", "build_parser", "main"]


@dataclass(frozen=True, slots=True)
class Command:
    """One sub-command: ``add_arguments`` fills its parser, ``handler`` runs it."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]


def _on_use(module: str, function: str) -> Callable[[Any], Any]:
    """``function`` of the command module ``fsm_agent.cli.<module>``, imported when first
    called: a command imports what it needs (the kernel, the checker, the fuzzer) when it runs,
    not when another command or ``--help`` does."""

    def call(argument: Any) -> Any:
        return getattr(import_module(f"{__name__}.{module}"), function)(argument)

    return call


def _builtin(
    name: str, help: str, add_arguments: str = "add_arguments", handler: str = "handle"
) -> Command:
    """The built-in command ``name``, whose functions live in ``fsm_agent.cli.<name>``."""
    return Command(name, help, _on_use(name, add_arguments), _on_use(name, handler))


COMMANDS: list[Command] = [
    _builtin("demo", "run an offline agent on a scripted model and watch it walk the machine"),
    _builtin(
        "run",
        "run an agent on a real provider (openai:, anthropic:, gemini:), streaming its answer",
    ),
    _builtin(
        "diagram",
        "draw the machine as DOT, SVG, PNG or Mermaid, with a policy's numbers or a recorded run",
    ),
    _builtin(
        "check",
        "prove a policy terminates within its bounds (exhaustive bounded model check)",
        "add_check_arguments",
        "run_check_command",
    ),
    _builtin(
        "replay",
        "re-run a recording with no network; exit 1 where it diverges from what was recorded",
    ),
    _builtin(
        "runs", "list the runs of a checkpoint store, or show one (state, counters, last moves)"
    ),
    _builtin(
        "fuzz",
        "fuzz the real kernel (the built-in agent, or your module:factory) against its invariants",
        "add_fuzz_arguments",
        "run_fuzz_command",
    ),
    _builtin(
        "inspect",
        "serve a local web page over a checkpoint store: runs, their path on the machine, live",
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


class _Version(argparse.Action):
    """``--version``: print the installed version and exit. The version is read when asked
    (reading the distribution's metadata costs more than building the whole parser)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings, dest, nargs=0, help="show the program's version number and exit"
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from .. import __version__

        print(f"{PROG} {__version__}")
        parser.exit()


def build_parser(
    commands: Sequence[Command] = COMMANDS, arguments_of: Collection[str] | None = None
) -> argparse.ArgumentParser:
    """The argument parser of ``fsm-agent`` with one sub-parser per command. Only the
    commands named in ``arguments_of`` (default: all) get their arguments: each command's
    module is imported to add them, so ``main`` adds those of the command it runs."""
    parser = _Parser(
        prog=PROG,
        description="fsm_agent: an LLM agent loop that is an explicit finite-state machine.",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in commands:
        child = sub.add_parser(command.name, help=command.help, description=command.help)
        if arguments_of is None or command.name in arguments_of:
            command.add_arguments(child)
        child.set_defaults(handler=command.handler, command_parser=child)
    return parser


def _command_named(argv: Sequence[str]) -> set[str]:
    """The command ``argv`` runs, as a set of at most one name: its first word that is not an
    option (the program itself takes no option with a value)."""
    for word in argv:
        if not word.startswith("-"):
            return {word}
    return set()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fsm-agent`` with ``argv`` (default: the process's arguments); returns the exit
    code. A user error is one line on stderr and exit code 2; a failure the library reports
    (an :class:`~fsm_agent.errors.FsmAgentError`) is one line and exit code 1."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")
    words = sys.argv[1:] if argv is None else argv
    args, unknown = build_parser(arguments_of=_command_named(words)).parse_known_args(words)
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
